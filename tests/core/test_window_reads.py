"""The driver reads both rings at once where the links name the chunks two steps away."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from test_selection import corpus

from scar_core import BudgetSettings, Chunk, PaperSettings, QueryDriver


def hinted(chunks: dict[str, Chunk]) -> dict[str, Chunk]:
    """The chunks with the ids two steps away, as link_chunks writes them."""

    def two(chunk_id: str | None, step: str) -> str | None:
        return None if chunk_id is None else chunks[chunk_id].step(step)  # type: ignore[arg-type]

    return {
        i: replace(c, window_ids=(two(c.previous_id, "previous"), two(c.next_id, "next")))
        for i, c in chunks.items()
    }


def run(query, hits, chunks, chosen, excluded=frozenset()):
    """Drive one query; the store holds ``chunks`` less ``excluded`` (a filter, a deletion)."""
    driver = QueryDriver(query, hits, chosen)
    asked: list[list[str]] = []
    while ids := driver.wanted():
        asked.append(ids)
        driver.receive(chunks[i] for i in ids if i in chunks and i not in excluded)
    return driver, asked


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 10_000), st.integers(1, 12), st.integers(1, 4), st.sampled_from(["budget", "paper"]),
    st.lists(st.integers(0, 23), max_size=6), st.lists(st.integers(0, 23), max_size=3),
)  # fmt: skip
def test_one_read_selects_what_two_reads_select_and_no_more(
    seed, k, window, mode, excluded_rows, stale_rows
) -> None:
    query, ranked, chunks = corpus(seed)
    names = sorted(chunks)
    chosen = (
        BudgetSettings(k=k, _window=window)
        if mode == "budget"
        else PaperSettings(k=k, window=window)
    )
    excluded = frozenset(names[r] for r in excluded_rows) - set(ranked[:k])
    with_hints = hinted(chunks)
    for row in stale_rows:  # a stale hint names another chunk: the links read decide
        name = names[row]
        with_hints[name] = replace(with_hints[name], window_ids=(names[(row + 5) % 24], None))
    plain_hits = [replace(chunks[c], vector=None) for c in ranked[:k]]
    hinted_hits = [replace(with_hints[c], vector=None) for c in ranked[:k]]
    before, two_reads = run(query, plain_hits, chunks, chosen, excluded)
    after, one_read = run(query, hinted_hits, with_hints, chosen, excluded)
    assert set(after.chunks) == set(before.chunks)
    assert after.missing >= before.missing
    assert after.result().chunk_ids == before.result().chunk_ids
    assert [d.threshold for d in after.result().decisions] == [
        d.threshold for d in before.result().decisions
    ]
    # A chunk kept beyond a hit was reached through chunks the store returned, step by step.
    reached = set(ranked[:k])
    for _ in range(chosen.window):
        reached |= {
            n for c in reached if c in after.chunks
            for n in (chunks[c].previous_id, chunks[c].next_id) if n and n not in excluded
        }  # fmt: skip
    assert set(after.chunks) <= reached
    if not stale_rows and chosen.window == 2:
        assert len(one_read) == 1
    assert len(one_read) <= len(two_reads) + 1


def test_a_chunk_two_steps_away_is_dropped_when_the_one_between_is_filtered_out() -> None:
    query, _, chunks = corpus(7, documents=1, length=5)
    with_hints = hinted(chunks)
    hit = "doc0-2"
    hits = [replace(with_hints[hit], vector=None)]
    driver, asked = run(query, hits, with_hints, BudgetSettings(k=3), excluded={"doc0-3"})
    assert asked == [["doc0-2", "doc0-1", "doc0-3", "doc0-0", "doc0-4"]]  # one read, both rings
    assert "doc0-4" not in driver.chunks
    assert "doc0-3" in driver.missing
    assert "doc0-4" not in driver.result().chunk_ids
    assert {"doc0-1", "doc0-0"} <= set(driver.chunks)


def test_old_links_without_window_ids_read_ring_by_ring() -> None:
    query, _, chunks = corpus(8, documents=1, length=5)
    hits = [replace(chunks["doc0-2"], vector=None)]
    driver, asked = run(query, hits, chunks, BudgetSettings(k=3))
    assert asked == [["doc0-2", "doc0-1", "doc0-3"], ["doc0-0", "doc0-4"]]
    assert driver.reads == 2
    assert np.isfinite(driver.result().decisions[0].threshold)
