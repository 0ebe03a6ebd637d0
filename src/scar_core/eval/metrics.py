"""Retrieval metrics per query, and their means per group of queries.

For one query with gold chunks ``G``, evidence spans ``E`` and selected chunks ``R``:

* **chunk recall** (the paper's): ``|R ∩ G| / |G|``;
* **evidence-character recall** (LegalBench-RAG's): the characters of the union of ``E`` that lie
  in the union of the selected chunks' ranges, divided by the characters of the union of ``E``;
* **chunks**: ``|R|``, unique chunks;
* **tokens**: computed by the caller (see :mod:`scar_core.eval.runner`).

Over a group of queries each metric is averaged, and **chunk efficiency** is
``mean recall / mean chunks``, the paper's definition (a ratio of means, not a mean of ratios).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = [
    "Interval",
    "MethodSummary",
    "QueryScores",
    "chunk_recall",
    "covered_characters",
    "evidence_character_recall",
    "merge_intervals",
    "summarize",
]

#: A half-open character range ``[start, end)`` of one document.
Interval = tuple[str, int, int]


def merge_intervals(intervals: Iterable[Interval]) -> list[Interval]:
    """Return the union of ``(document, start, end)`` ranges as sorted, disjoint ranges.

    Ranges that touch (``end == next start``) are merged; empty ranges are dropped.
    """
    merged: list[Interval] = []
    for document, start, end in sorted(i for i in intervals if i[2] > i[1]):
        if merged and merged[-1][0] == document and start <= merged[-1][2]:
            last = merged[-1]
            merged[-1] = (document, last[1], max(last[2], end))
        else:
            merged.append((document, start, end))
    return merged


def covered_characters(evidence: Sequence[Interval], cover: Sequence[Interval]) -> int:
    """Count the characters of ``evidence`` inside ``cover``; both merged (see :func:`merge_intervals`)."""
    total = 0
    j = 0
    for document, start, end in evidence:
        # Skip cover ranges that end before this evidence range (ranges are sorted).
        while j < len(cover) and (cover[j][0], cover[j][2]) <= (document, start):
            j += 1
        scan = j
        while scan < len(cover) and cover[scan][0] == document and cover[scan][1] < end:
            total += max(0, min(end, cover[scan][2]) - max(start, cover[scan][1]))
            scan += 1
    return total


def evidence_character_recall(evidence: Iterable[Interval], cover: Iterable[Interval]) -> float:
    """Share of the evidence's characters (union of spans) that the cover holds; 0 if no evidence."""
    merged_evidence = merge_intervals(evidence)
    size = sum(end - start for _, start, end in merged_evidence)
    if size == 0:
        return 0.0
    return covered_characters(merged_evidence, merge_intervals(cover)) / size


def chunk_recall(selected: Collection[str], gold: Collection[str]) -> float:
    """Share of the gold chunks that were selected; 0 when there is no gold chunk."""
    if not gold:
        return 0.0
    chosen = set(selected)
    return sum(1 for chunk_id in set(gold) if chunk_id in chosen) / len(set(gold))


@dataclass(frozen=True)
class QueryScores:
    """Per-query metrics of one method, as arrays aligned with the evaluated queries."""

    recall: npt.NDArray[np.float64]
    char_recall: npt.NDArray[np.float64]
    chunks: npt.NDArray[np.float64]
    tokens: npt.NDArray[np.float64] | None = None

    def subset(self, mask: npt.NDArray[np.bool_]) -> QueryScores:
        """Return the scores of the queries where ``mask`` is true."""
        return QueryScores(
            self.recall[mask],
            self.char_recall[mask],
            self.chunks[mask],
            None if self.tokens is None else self.tokens[mask],
        )


@dataclass(frozen=True)
class MethodSummary:
    """Means over one group of queries.

    Attributes:
        recall: Mean chunk recall, in ``[0, 1]``.
        char_recall: Mean evidence-character recall, in ``[0, 1]``.
        chunks: Mean number of unique chunks.
        efficiency: ``recall / chunks`` (0 when no chunk was selected).
        tokens: Mean tokens of the assembled context, or ``None`` when not counted.
    """

    recall: float
    char_recall: float
    chunks: float
    efficiency: float
    tokens: float | None

    def as_dict(self) -> dict[str, float | None]:
        """The summary as a JSON-ready dict."""
        return {
            "recall": self.recall,
            "char_recall": self.char_recall,
            "chunks": self.chunks,
            "efficiency": self.efficiency,
            "tokens": self.tokens,
        }


def summarize(scores: QueryScores) -> MethodSummary:
    """Average per-query scores into one :class:`MethodSummary` (NaN means for no queries)."""
    if scores.recall.size == 0:
        nan = float("nan")
        return MethodSummary(nan, nan, nan, nan, None if scores.tokens is None else nan)
    recall = float(scores.recall.mean())
    chunks = float(scores.chunks.mean())
    return MethodSummary(
        recall=recall,
        char_recall=float(scores.char_recall.mean()),
        chunks=chunks,
        efficiency=recall / chunks if chunks > 0 else 0.0,
        tokens=None if scores.tokens is None else float(scores.tokens.mean()),
    )
