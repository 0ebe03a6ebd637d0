"""Context assembly: turn selected chunks into passages an LLM can read.

A passage is a contiguous run of selected chunks of one document, in document order, with the text
that chunk overlap repeats removed. Passages are ordered by the rank of their best seed.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scar_core.errors import InvalidSettingsError
from scar_core.graph import NeighborGraph
from scar_core.policy import ExpansionResult, SelectedChunk
from scar_core.tokens import TokenCounter

__all__ = [
    "ChunkRecord",
    "Passage",
    "assemble_passages",
    "text_overlap",
    "trim_to_token_budget",
]

#: Shortest suffix/prefix match treated as chunk overlap when start offsets are unknown.
MIN_TEXT_OVERLAP = 16


@dataclass(frozen=True)
class ChunkRecord:
    """The text and position of one chunk, as assembly needs them.

    Attributes:
        chunk_id: The chunk's id.
        text: The chunk's text.
        document_id: The document it belongs to, when known.
        position: Its zero-based index in the document, when known.
        start_index: Character offset of ``text`` in the document, when known (LangChain's
            ``add_start_index=True``, LlamaIndex's ``start_char_idx``).
    """

    chunk_id: str
    text: str
    document_id: str | None = None
    position: int | None = None
    start_index: int | None = None


@dataclass(frozen=True)
class Passage:
    """A contiguous run of selected chunks.

    Attributes:
        chunks: The selected chunks in document order.
        text: Their texts stitched in order, with overlapping text kept once.
        document_id: The document of the run, when known.
        start_index: Character offset of the passage in its document, when known.
        seed_rank: Rank of the best seed in the run (passages are ordered by it).
        score: That seed's score.
    """

    chunks: tuple[SelectedChunk, ...]
    text: str
    document_id: str | None
    start_index: int | None
    seed_rank: int
    score: float

    @property
    def chunk_ids(self) -> list[str]:
        """Ids of the chunks in the passage, in document order."""
        return [chunk.chunk_id for chunk in self.chunks]


def _walked_pairs(result: ExpansionResult) -> list[tuple[str, str]]:
    """``(before, after)`` for every accepted neighbour and the chunk it was reached from."""
    pairs: list[tuple[str, str]] = []
    for chunk in result.selected:
        decision = chunk.decision
        if chunk.origin != "neighbor" or decision is None:
            continue
        if decision.direction == "previous":
            pairs.append((chunk.chunk_id, decision.via_id))
        else:
            pairs.append((decision.via_id, chunk.chunk_id))
    return pairs


def _runs(
    chunk_ids: Sequence[str],
    records: Mapping[str, ChunkRecord],
    graph: NeighborGraph | None,
    walked: Sequence[tuple[str, str]] = (),
) -> list[list[str]]:
    """Split the selected ids into contiguous runs in document order.

    ``walked`` holds the ``(before, after)`` pairs the expansion walked across. They win over
    the links, so an added neighbour stays next to the chunk it was reached from even when the
    links disagree (a chunk's previous link names a chunk whose next link names another).
    """
    selected = set(chunk_ids)

    def following(chunk_id: str) -> str | None:
        if graph is not None and chunk_id in graph:
            target = graph.step(chunk_id, "next")
            return target if target in selected else None
        record = records.get(chunk_id)
        if record is None or record.position is None or record.document_id is None:
            return None
        for other in chunk_ids:
            candidate = records.get(other)
            if (
                candidate is not None
                and candidate.document_id == record.document_id
                and candidate.position == record.position + 1
            ):
                return other
        return None

    # The walked pairs first: they are how each added neighbour joined its seed. Then the
    # links, wherever both ends are still free.
    successor: dict[str, str | None] = dict.fromkeys(chunk_ids)
    has_predecessor: set[str] = set()
    pairs = [*walked, *((c, following(c)) for c in chunk_ids)]
    for before, after in pairs:
        if (
            before in selected
            and after in selected
            and successor[before] is None
            and after not in has_predecessor
        ):
            successor[before] = after
            has_predecessor.add(after)
    runs: list[list[str]] = []
    placed: set[str] = set()
    # Heads first; then any chunk left over (only possible on a cycle) starts its own run.
    for chunk_id in [c for c in chunk_ids if c not in has_predecessor] + list(chunk_ids):
        if chunk_id in placed:
            continue
        run: list[str] = []
        current: str | None = chunk_id
        while current is not None and current not in placed:
            run.append(current)
            placed.add(current)
            current = successor[current]
        runs.append(run)
    return runs


def _overlap(previous: ChunkRecord, current: ChunkRecord) -> tuple[int, str]:
    """Return how many leading characters of ``current`` repeat ``previous``, and the joiner."""
    if previous.start_index is not None and current.start_index is not None:
        previous_end = previous.start_index + len(previous.text)
        if current.start_index < previous_end:
            return min(previous_end - current.start_index, len(current.text)), ""
        # Splitters strip the whitespace between chunks; put a line break back.
        return 0, "" if current.start_index == previous_end else "\n"
    size = text_overlap(previous.text, current.text)
    return (size, "") if size else (0, "\n")


def text_overlap(previous: str, current: str) -> int:
    """The length of the longest suffix of ``previous`` that begins ``current``, or 0.

    Only overlaps of at least :data:`MIN_TEXT_OVERLAP` characters count. Each candidate starts
    where ``previous`` repeats the first characters of ``current``, found with ``str.find``,
    so the cost is one scan of ``previous`` (trying every length was quadratic: about 0.2 ms
    per pair of 1,000-character chunks).
    """
    longest = min(len(previous), len(current))
    if longest < MIN_TEXT_OVERLAP:
        return 0
    probe = current[:MIN_TEXT_OVERLAP]
    start = len(previous) - longest
    while (found := previous.find(probe, start)) >= 0:
        # The earliest start is the longest overlap; find never returns a start too late for
        # the probe to fit, so every candidate is at least MIN_TEXT_OVERLAP long.
        if current.startswith(previous[found:]):
            return len(previous) - found
        start = found + 1
    return 0


def _stitch(records: Sequence[ChunkRecord]) -> str:
    parts = [records[0].text]
    for previous, current in itertools.pairwise(records):
        trimmed, joiner = _overlap(previous, current)
        parts.append(joiner + current.text[trimmed:])
    return "".join(parts)


def assemble_passages(
    result: ExpansionResult,
    records: Mapping[str, ChunkRecord],
    graph: NeighborGraph | None = None,
) -> list[Passage]:
    """Group the selected chunks into passages ordered by their best seed's rank.

    Args:
        result: What the policy (or a baseline) selected.
        records: Text and position of every selected chunk. A chunk without a record becomes a
            passage of its own with empty text, so nothing selected is ever dropped.
        graph: The neighbour graph, used to find contiguity; without it, document ids and
            positions are used.

    Returns:
        The passages, best seed first; within a passage, chunks are in document order.
    """
    by_id = {chunk.chunk_id: chunk for chunk in result.selected}
    passages: list[Passage] = []
    for run in _runs(result.chunk_ids, records, graph, _walked_pairs(result)):
        run_records = [records.get(c, ChunkRecord(chunk_id=c, text="")) for c in run]
        chunks = tuple(by_id[c] for c in run)
        best = min(chunks, key=lambda chunk: (chunk.seed_rank, chunk.origin != "seed"))
        passages.append(
            Passage(
                chunks=chunks,
                text=_stitch(run_records),
                document_id=run_records[0].document_id,
                start_index=run_records[0].start_index,
                seed_rank=best.seed_rank,
                score=best.score,
            )
        )
    passages.sort(key=lambda passage: passage.seed_rank)
    return passages


def _droppable(passage: Passage) -> list[SelectedChunk]:
    """Neighbours whose removal leaves no chunk cut off from every seed.

    These are the neighbours at either end of the passage, and those lying between two seeds
    (dropping one of those splits the passage in two, each part still holding a seed).
    """
    chunks = passage.chunks
    seed_positions = [i for i, chunk in enumerate(chunks) if chunk.origin == "seed"]
    return [
        chunk
        for i, chunk in enumerate(chunks)
        if chunk.origin == "neighbor"
        and (
            i in (0, len(chunks) - 1)
            or (seed_positions and seed_positions[0] < i < seed_positions[-1])
        )
    ]


def trim_to_token_budget(
    result: ExpansionResult,
    records: Mapping[str, ChunkRecord],
    max_tokens: int,
    count_tokens: TokenCounter,
    graph: NeighborGraph | None = None,
) -> ExpansionResult:
    """Drop the lowest-scoring neighbours until the context fits ``max_tokens``.

    Only a neighbour at either end of its passage, or one lying between two seeds of the same
    passage, is dropped, so no neighbour is ever left cut off from its seeds. Seeds are never
    dropped: if the seeds alone exceed the budget, the seeds are returned.

    Args:
        result: What the policy selected.
        records: Text and position of every selected chunk.
        max_tokens: The budget, in tokens of ``count_tokens``.
        count_tokens: The token counter.
        graph: The neighbour graph used for contiguity.

    Returns:
        A result with the same seeds and decisions and a subset of the neighbours.
    """
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise InvalidSettingsError(
            f"max_tokens={max_tokens!r} is not valid; it must be an integer >= 1."
        )
    current = result
    while True:
        passages = assemble_passages(current, records, graph)
        if sum(count_tokens(passage.text) for passage in passages) <= max_tokens:
            return current
        droppable = [chunk for passage in passages for chunk in _droppable(passage)]
        if not droppable:
            return current
        weakest = min(droppable, key=lambda chunk: (chunk.score, -chunk.seed_rank))
        current = dataclasses.replace(
            current,
            selected=tuple(c for c in current.selected if c.chunk_id != weakest.chunk_id),
        )
