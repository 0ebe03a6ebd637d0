"""Context assembly: passages in document order, overlap removed, ordered by seed rank, budgets."""

from __future__ import annotations

import random
import string

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scar_core import ExpansionResult, NeighborGraph, SelectedChunk, expand
from scar_core.assembly import (
    MIN_TEXT_OVERLAP,
    ChunkRecord,
    assemble_passages,
    text_overlap,
    trim_to_token_budget,
)
from scar_core.errors import InvalidSettingsError
from scar_core.tokens import tiktoken_counter, whitespace_counter


def random_text(length: int, seed: int) -> str:
    rng = random.Random(seed)
    words = []
    while sum(len(w) + 1 for w in words) < length:
        words.append("".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))))
    return " ".join(words)[:length]


def split(document_id: str, text: str, size: int, overlap: int) -> list[ChunkRecord]:
    """Fixed-size chunks that repeat ``overlap`` characters, with their start offsets."""
    records, start, position = [], 0, 0
    while True:
        records.append(
            ChunkRecord(
                f"{document_id}-{position}",
                text[start : start + size],
                document_id,
                position,
                start,
            )
        )
        if start + size >= len(text):
            return records
        start += size - overlap
        position += 1


def seed(chunk_id: str, rank: int, score: float = 1.0) -> SelectedChunk:
    return SelectedChunk(chunk_id, "seed", chunk_id, rank, score)


def neighbour(chunk_id: str, seed_id: str, rank: int, score: float) -> SelectedChunk:
    return SelectedChunk(chunk_id, "neighbor", seed_id, rank, score)


def graph_of(*documents: list[ChunkRecord]) -> NeighborGraph:
    return NeighborGraph.from_sequences(
        {doc[0].document_id or "": [r.chunk_id for r in doc] for doc in documents}
    )


DOC = random_text(400, seed=1)
CHUNKS = split("doc", DOC, size=80, overlap=25)
RECORDS = {r.chunk_id: r for r in CHUNKS}


# -- stitching ------------------------------------------------------------------------------------


def test_start_offsets_remove_the_overlap_exactly() -> None:
    result = ExpansionResult(
        (seed("doc-2", 0), neighbour("doc-1", "doc-2", 0, 0.5), neighbour("doc-3", "doc-2", 0, 0.5))
    )
    (passage,) = assemble_passages(result, RECORDS, graph_of(CHUNKS))
    assert passage.chunk_ids == ["doc-1", "doc-2", "doc-3"]
    start = RECORDS["doc-1"].start_index
    end = RECORDS["doc-3"].start_index + len(RECORDS["doc-3"].text)  # type: ignore[operator]
    assert passage.text == DOC[start:end]
    assert passage.start_index == start
    assert passage.document_id == "doc"


def test_without_offsets_overlap_is_found_in_the_text() -> None:
    bare = {
        c: ChunkRecord(r.chunk_id, r.text, r.document_id, r.position) for c, r in RECORDS.items()
    }
    ids = [r.chunk_id for r in CHUNKS]
    result = ExpansionResult((seed(ids[0], 0), *(neighbour(c, ids[0], 0, 0.5) for c in ids[1:])))
    (passage,) = assemble_passages(result, bare)  # no graph: contiguity from document positions
    assert passage.chunk_ids == ids
    assert passage.text == DOC


def _overlap_by_every_length(previous: str, current: str) -> int:
    """The reference: try every length, longest first."""
    for size in range(min(len(previous), len(current)), MIN_TEXT_OVERLAP - 1, -1):
        if previous.endswith(current[:size]):
            return size
    return 0


@settings(max_examples=400, deadline=None)
@given(
    previous=st.text(alphabet="ab ", max_size=60),
    current=st.text(alphabet="ab ", max_size=60),
    shared=st.text(alphabet="ab ", max_size=40),
)
def test_text_overlap_equals_trying_every_length(previous: str, current: str, shared: str) -> None:
    # A tiny alphabet makes repeats, near misses and several candidate starts common.
    previous, current = previous + shared, shared + current
    assert text_overlap(previous, current) == _overlap_by_every_length(previous, current)


def test_text_overlap_on_long_chunks() -> None:
    text = random_text(3000, seed=5)
    assert text_overlap(text[:1000], text[1000:2000]) == 0
    assert text_overlap(text[:1000], text[800:1800]) == 200
    assert text_overlap(text[:1000], text[:1000]) == 1000
    assert text_overlap("x" * 20, "x" * 30) == 20
    assert text_overlap("short", "short") == 0  # under MIN_TEXT_OVERLAP


def test_chunks_without_overlap_are_joined_by_a_line_break() -> None:
    records = {
        "x": ChunkRecord("x", "The first chunk ends here.", "d", 0),
        "y": ChunkRecord("y", "A second one starts here.", "d", 1),
    }
    result = ExpansionResult((seed("x", 0), neighbour("y", "x", 0, 0.4)))
    (passage,) = assemble_passages(result, records)
    assert passage.text == "The first chunk ends here.\nA second one starts here."


def test_offsets_that_touch_join_directly_and_a_gap_gets_a_line_break() -> None:
    records = {
        "x": ChunkRecord("x", "abc", "d", 0, 0),
        "y": ChunkRecord("y", "def", "d", 1, 3),
        "z": ChunkRecord("z", "ghi", "d", 2, 10),
    }
    result = ExpansionResult(
        (seed("y", 0), neighbour("x", "y", 0, 0.5), neighbour("z", "y", 0, 0.5))
    )
    (passage,) = assemble_passages(result, records)
    assert passage.text == "abcdef\nghi"


# -- grouping and order ---------------------------------------------------------------------------


def test_passages_follow_their_best_seed_rank_and_chunks_their_document_order() -> None:
    other = split("other", random_text(300, seed=2), size=80, overlap=10)
    records = {**RECORDS, **{r.chunk_id: r for r in other}}
    result = ExpansionResult(
        (
            seed("other-2", 0, 0.9),
            seed("doc-3", 1, 0.8),
            seed("doc-2", 2, 0.7),
            neighbour("other-1", "other-2", 0, 0.6),
            neighbour("doc-4", "doc-3", 1, 0.5),
            seed("doc-0", 3, 0.4),
        )
    )
    passages = assemble_passages(result, records, graph_of(CHUNKS, other))
    assert [p.chunk_ids for p in passages] == [
        ["other-1", "other-2"],
        ["doc-2", "doc-3", "doc-4"],
        ["doc-0"],
    ]
    assert [p.seed_rank for p in passages] == [0, 1, 3]
    assert [p.score for p in passages] == [0.9, 0.8, 0.4]


def test_a_chunk_without_a_record_is_kept_as_its_own_passage() -> None:
    result = ExpansionResult((seed("doc-1", 0), seed("unknown", 1)))
    passages = assemble_passages(result, RECORDS, graph_of(CHUNKS))
    assert [p.chunk_ids for p in passages] == [["doc-1"], ["unknown"]]
    assert passages[1].text == ""


def test_assembling_a_real_expansion_keeps_every_selected_chunk_once() -> None:
    rng = np.random.default_rng(3)
    vectors = {r.chunk_id: rng.standard_normal(6) for r in CHUNKS}
    query = vectors["doc-2"] + 0.1 * rng.standard_normal(6)
    result = expand(query, ["doc-2", "doc-4"], graph_of(CHUNKS), vectors, gamma=0.2, window=2)
    passages = assemble_passages(result, RECORDS, graph_of(CHUNKS))
    assembled = [c for p in passages for c in p.chunk_ids]
    assert sorted(assembled) == sorted(result.chunk_ids)
    for passage in passages:
        positions = [RECORDS[c].position for c in passage.chunk_ids]
        assert positions == list(range(positions[0], positions[0] + len(positions)))  # type: ignore[operator]
        first, last = RECORDS[passage.chunk_ids[0]], RECORDS[passage.chunk_ids[-1]]
        assert passage.text == DOC[first.start_index : last.start_index + len(last.text)]  # type: ignore[operator]


# -- token budget ---------------------------------------------------------------------------------


WORDS = {
    name: ChunkRecord(name, " ".join([name] * 10), "d", position, None)
    for position, name in enumerate(["p2", "p1", "s", "n1", "n2"])
}


def test_the_budget_drops_the_lowest_scoring_end_neighbour_first() -> None:
    result = ExpansionResult(
        (seed("s", 0), neighbour("p1", "s", 0, 0.5), neighbour("n1", "s", 0, 0.7))
    )
    trimmed = trim_to_token_budget(result, WORDS, 25, whitespace_counter)
    assert trimmed.chunk_ids == ["s", "n1"]
    assert trimmed.decisions == result.decisions


def test_an_inner_neighbour_is_not_dropped_before_the_end_beyond_it() -> None:
    result = ExpansionResult(
        (seed("s", 0), neighbour("n1", "s", 0, 0.6), neighbour("n2", "s", 0, 0.9))
    )
    # n1 scores lower, but dropping it would leave a hole: n2, at the end, goes first.
    assert trim_to_token_budget(result, WORDS, 25, whitespace_counter).chunk_ids == ["s", "n1"]
    assert trim_to_token_budget(result, WORDS, 10, whitespace_counter).chunk_ids == ["s"]


def test_seeds_are_never_dropped_even_over_budget() -> None:
    result = ExpansionResult(
        (seed("s", 0), seed("n2", 1), neighbour("p1", "s", 0, 0.9), neighbour("n1", "s", 0, 0.9))
    )
    trimmed = trim_to_token_budget(result, WORDS, 1, whitespace_counter)
    assert trimmed.chunk_ids == ["s", "n2"]


def test_a_neighbour_bridging_two_seeds_can_be_dropped() -> None:
    result = ExpansionResult(
        (seed("s", 0), seed("n2", 1), neighbour("p1", "s", 0, 0.9), neighbour("n1", "s", 0, 0.2))
    )
    trimmed = trim_to_token_budget(result, WORDS, 35, whitespace_counter)
    assert trimmed.chunk_ids == ["s", "n2", "p1"]
    passages = assemble_passages(trimmed, WORDS)
    assert [p.chunk_ids for p in passages] == [["p1", "s"], ["n2"]]


def test_a_result_within_budget_is_returned_unchanged() -> None:
    result = ExpansionResult((seed("s", 0), neighbour("p1", "s", 0, 0.1)))
    assert trim_to_token_budget(result, WORDS, 20, whitespace_counter) == result


@pytest.mark.parametrize("budget", [0, -5, 2.5, True])
def test_the_budget_is_validated(budget: object) -> None:
    with pytest.raises(InvalidSettingsError, match=f"max_tokens={budget!r}"):
        trim_to_token_budget(ExpansionResult(()), WORDS, budget, whitespace_counter)  # type: ignore[arg-type]


def test_random_budgets_keep_seeds_fit_when_possible_and_orphan_nothing() -> None:
    count = tiktoken_counter()
    graph = graph_of(CHUNKS)
    rng = np.random.default_rng(11)
    for case in range(25):
        vectors = {r.chunk_id: rng.standard_normal(5) for r in CHUNKS}
        seeds = list(rng.choice([r.chunk_id for r in CHUNKS], size=2, replace=False))
        result = expand(rng.standard_normal(5), seeds, graph, vectors, gamma=0.05, window=2)
        budget = int(rng.integers(1, 150))
        trimmed = trim_to_token_budget(result, RECORDS, budget, count, graph)
        assert trimmed.seed_ids == result.seed_ids, case
        assert set(trimmed.chunk_ids) <= set(result.chunk_ids)
        used = sum(count(p.text) for p in assemble_passages(trimmed, RECORDS, graph))
        assert used <= budget or trimmed.neighbor_ids == [], case
        # No neighbour is left cut off: every passage still holds a seed.
        for passage in assemble_passages(trimmed, RECORDS, graph):
            assert any(chunk.origin == "seed" for chunk in passage.chunks), case
