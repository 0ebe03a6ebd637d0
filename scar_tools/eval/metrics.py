"""Retrieval metrics per query, and their means over a group of queries.

For one query with gold chunks ``G``, evidence spans ``E`` and selected chunks ``R``:

* **chunk recall** (the paper's): ``|R ∩ G| / |G|``;
* **evidence-character recall** (LegalBench-RAG's): the characters of the union of ``E`` that lie
  in the union of the selected chunks' ranges, divided by the characters of the union of ``E``;
* **chunks**: ``|R|``, unique chunks;
* **tokens**: cl100k_base tokens of the context an LLM would read (counted by the runner).

Over a group each metric is averaged, and **efficiency** is ``mean recall / mean chunks`` (the
paper's definition: a ratio of means, not a mean of ratios).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scar_core._passages import stitch
from scar_core._selection import Selection
from scar_tools.eval.chunking import ChunkedCorpus
from scar_tools.eval.embedding import token_counter

__all__ = [
    "Interval",
    "MethodSummary",
    "PassageTokens",
    "QueryScores",
    "chunk_recall",
    "evidence_character_recall",
    "merge_intervals",
    "summarize",
]

#: A half-open character range ``(document, start, end)``.
Interval = tuple[str, int, int]


def merge_intervals(intervals: Iterable[Interval]) -> list[Interval]:
    """Return the union of ranges, sorted and disjoint; touching ranges merge, empty ones go."""
    merged: list[Interval] = []
    for document, start, end in sorted(i for i in intervals if i[2] > i[1]):
        if merged and merged[-1][0] == document and start <= merged[-1][2]:
            merged[-1] = (document, merged[-1][1], max(merged[-1][2], end))
        else:
            merged.append((document, start, end))
    return merged


def _covered(evidence: Sequence[Interval], cover: Sequence[Interval]) -> int:
    """Characters of ``evidence`` inside ``cover``, both merged and sorted."""
    total = 0
    j = 0
    for document, start, end in evidence:
        while j < len(cover) and (cover[j][0], cover[j][2]) <= (document, start):
            j += 1
        scan = j
        while scan < len(cover) and cover[scan][0] == document and cover[scan][1] < end:
            total += max(0, min(end, cover[scan][2]) - max(start, cover[scan][1]))
            scan += 1
    return total


def evidence_character_recall(evidence: Iterable[Interval], cover: Iterable[Interval]) -> float:
    """Share of the evidence's characters (union of spans) inside ``cover``; 0 if no evidence."""
    merged = merge_intervals(evidence)
    size = sum(end - start for _, start, end in merged)
    return _covered(merged, merge_intervals(cover)) / size if size else 0.0


def chunk_recall(selected: Collection[str], gold: Collection[str]) -> float:
    """Share of the gold chunks that were selected; 0 when there is no gold chunk."""
    wanted = set(gold)
    return len(wanted.intersection(selected)) / len(wanted) if wanted else 0.0


class PassageTokens:
    """Count the cl100k_base tokens of a selection's passages, each distinct passage once.

    A passage's text is its chunks stitched with :func:`scar_core._passages.stitch` (start offsets
    known, so an overlap is kept once and a gap becomes a line break).

    Args:
        corpus: The chunked corpus the selections name chunks of.
    """

    def __init__(self, corpus: ChunkedCorpus) -> None:
        self.corpus, self.count, self.memo = corpus, token_counter(), dict[tuple[str, ...], int]()

    def __call__(self, selection: Selection) -> int:
        """Return the tokens of the selection's passages, summed."""
        for passage in selection.passages:
            if passage not in self.memo:
                chunks = [self.corpus.chunks[self.corpus.row_of[c]] for c in passage]
                text = stitch([c.text for c in chunks], [c.start for c in chunks])
                self.memo[passage] = self.count(text)
        return sum(self.memo[passage] for passage in selection.passages)


@dataclass(frozen=True)
class QueryScores:
    """One method's per-query metrics, as arrays aligned with the evaluated queries."""

    recall: npt.NDArray[np.float64]
    char_recall: npt.NDArray[np.float64]
    chunks: npt.NDArray[np.float64]
    tokens: npt.NDArray[np.float64] | None = None

    def subset(self, mask: npt.NDArray[np.bool_]) -> QueryScores:
        """Return the scores of the queries where ``mask`` is true."""
        tokens = None if self.tokens is None else self.tokens[mask]
        return QueryScores(self.recall[mask], self.char_recall[mask], self.chunks[mask], tokens)


@dataclass(frozen=True)
class MethodSummary:
    """Means over one group of queries (NaN for an empty group).

    Attributes:
        recall: Mean chunk recall.
        char_recall: Mean evidence-character recall.
        chunks: Mean unique chunks.
        efficiency: ``recall / chunks`` (0 when no chunk was selected).
        tokens: Mean tokens of the context, or ``None`` when not counted.
    """

    recall: float
    char_recall: float
    chunks: float
    efficiency: float
    tokens: float | None

    def as_dict(self) -> dict[str, float | None]:
        """The summary as a JSON-ready dict (NaN becomes ``None``)."""
        return {
            key: value if value is None or math.isfinite(value) else None
            for key, value in vars(self).items()
        }


def summarize(scores: QueryScores) -> MethodSummary:
    """Average per-query scores into one :class:`MethodSummary`."""
    if scores.recall.size == 0:
        nan = math.nan
        return MethodSummary(nan, nan, nan, nan, None if scores.tokens is None else nan)
    recall, chunks = float(scores.recall.mean()), float(scores.chunks.mean())
    return MethodSummary(
        recall=recall,
        char_recall=float(scores.char_recall.mean()),
        chunks=chunks,
        efficiency=recall / chunks if chunks > 0 else 0.0,
        tokens=None if scores.tokens is None else float(scores.tokens.mean()),
    )
