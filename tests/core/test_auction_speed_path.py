"""The one-pass solver against exhaustive search on random corpora, and the limits it documents."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_selection import corpus, naive_budget, total_bid

from scar_core import BudgetSettings, Chunk, InvalidSettingsError, ScarSettings, budget_select
from scar_core._settings import MAX_AUCTION_HITS, MAX_TOKEN_AUCTION_HITS


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 10_000), st.integers(1, 6), st.integers(1, 3), st.none() | st.floats(0.0, 1.0),
)  # fmt: skip
def test_any_chunk_budget_is_the_best_set_and_each_threshold_its_flip_point(seed, k, window, bonus):
    query, ranked, chunks = corpus(seed, documents=1 + seed % 2, length=3 + seed % 4)
    keep = 1 + seed % k
    bs = BudgetSettings(k=k, keep=keep, continuity_bonus=bonus, _window=window)
    got = budget_select(query, ranked, chunks, bs)
    alpha = got.continuity_bonus  # the query's own bonus where bonus is None
    naive_budget(query, ranked, chunks, k, keep, alpha, 0.1, window)
    best = naive_budget.total
    assert total_bid(query, chunks, set(got.chunk_ids), alpha, 0.1) == pytest.approx(best, abs=1e-9)
    for d in got.decisions:
        assert d.accepted == (d.score > d.threshold), d
        flip = {"without": [d.neighbor_id]} if d.accepted else {"with_": [d.neighbor_id]}
        naive_budget(query, ranked, chunks, k, keep, alpha, 0.1, window, **flip)
        loss = best - naive_budget.total
        if math.isfinite(loss) and loss > 1e-9:
            expected = d.score - loss if d.accepted else d.score + loss
            assert d.threshold == pytest.approx(min(max(expected, -1.2), 1.0), abs=1e-9), d


def test_more_hits_than_the_limit_are_refused_naming_both() -> None:
    query = np.array([1.0, 0.0])
    hits = [f"h{i}" for i in range(MAX_AUCTION_HITS + 1)]
    chunks = {h: Chunk(h, np.array([1.0, i / len(hits)]), None, None) for i, h in enumerate(hits)}
    too_many = BudgetSettings(k=MAX_AUCTION_HITS + 1)
    with pytest.raises(InvalidSettingsError, match=rf"{MAX_AUCTION_HITS + 1} retrieved.*k <= 1000"):
        budget_select(query, hits, chunks, too_many)


def test_an_adapter_k_past_the_limit_is_refused_when_it_is_set() -> None:
    with pytest.raises(InvalidSettingsError, match=r"k=1001 is more.*k <= 1000"):
        ScarSettings(k=MAX_AUCTION_HITS + 1)
    assert ScarSettings(k=MAX_AUCTION_HITS + 1, mode="paper").k == MAX_AUCTION_HITS + 1


def long_documents(k: int, seed: int = 0, dim: int = 16):
    """``k`` hits in documents of 40 chunks, each of 100 to 500 tokens."""
    from scar_core import Chunk, link_sequence

    rng = np.random.default_rng(seed)
    chunks = {}
    for d in range(k // 4 + 1):
        for link in link_sequence(f"d{d}", [f"d{d}-{p}" for p in range(40)]):
            chunks[link.chunk_id] = Chunk(link.chunk_id, rng.normal(size=dim), link.previous_id,
                                          link.next_id)  # fmt: skip
    query = rng.normal(size=dim)
    ranked = sorted(chunks, key=lambda c: -float(np.dot(chunks[c].vector, query)))[:k]
    tokens = {c: int(rng.integers(100, 501)) for c in chunks}
    return query, ranked, chunks, tokens


def test_a_huge_token_budget_needs_memory_that_does_not_grow_with_it() -> None:
    query, ranked, chunks, tokens = long_documents(100)
    peaks = []
    for limit in (8_000, 128_000):
        tracemalloc.start()
        selection = budget_select(query, ranked, chunks, BudgetSettings(k=100, max_tokens=limit),
                                  tokens)  # fmt: skip
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert sum(tokens[c] for c in selection.chunk_ids) <= limit
    assert max(peaks) < 300e6


def test_a_chunk_budget_at_the_limit_needs_memory_that_does_not_grow_as_k_squared_lists() -> None:
    query, ranked, chunks, _ = long_documents(MAX_AUCTION_HITS)
    tracemalloc.start()
    selection = budget_select(query, ranked, chunks, BudgetSettings(k=MAX_AUCTION_HITS))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(selection.chunk_ids) == MAX_AUCTION_HITS
    assert peak < 300e6  # 6.8 s and 669 MB before the way back read only its own cells


@pytest.mark.parametrize("limit", [4_000, 16_000, 128_000])
def test_near_equal_bids_keep_a_token_budget_s_fronts_within_the_grid(limit: int) -> None:
    # Hits that all bid about the same per token put almost every token sum on a front: before the
    # grid and one point per sum, k = 100 took 2.5 s and 1.2 GB at max_tokens = 4000 and ran out
    # of 6 GB at 16000 (benchmarks/token_limit.py).
    query, ranked, chunks, tokens = long_documents(MAX_TOKEN_AUCTION_HITS)
    rng = np.random.default_rng(1)
    chunks = {c: Chunk(c, query + 0.05 * rng.normal(size=query.size), x.previous_id, x.next_id)
              for c, x in chunks.items()}  # fmt: skip
    ranked = sorted(chunks, key=lambda c: -float(np.dot(chunks[c].vector, query)))
    tracemalloc.start()
    selection = budget_select(query, ranked, chunks, BudgetSettings(k=100, max_tokens=limit),
                              tokens)  # fmt: skip
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert sum(tokens[c] for c in selection.chunk_ids) <= limit
    assert peak < 300e6


def test_a_token_budget_at_its_limit_stays_under_300_mb_and_past_it_is_refused() -> None:
    query, ranked, chunks, tokens = long_documents(MAX_TOKEN_AUCTION_HITS + 1)
    at_limit = BudgetSettings(k=MAX_TOKEN_AUCTION_HITS, max_tokens=128_000)
    tracemalloc.start()
    selection = budget_select(query, ranked, chunks, at_limit, tokens)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert sum(tokens[c] for c in selection.chunk_ids) <= 128_000
    assert peak < 300e6  # k = 1000 with max_tokens = 128000 took 46 s and 12 GB with no limit
    past = BudgetSettings(k=MAX_TOKEN_AUCTION_HITS + 1, max_tokens=128_000)
    with pytest.raises(InvalidSettingsError, match=r"101 retrieved.*max_tokens=128000.*k <= 100"):
        budget_select(query, ranked, chunks, past, tokens)
    with pytest.raises(InvalidSettingsError, match=r"k=101 is more.*max_tokens=128000.*k <= 100"):
        ScarSettings(k=MAX_TOKEN_AUCTION_HITS + 1, max_tokens=128_000)
    assert ScarSettings(k=MAX_TOKEN_AUCTION_HITS, max_tokens=128_000).k == MAX_TOKEN_AUCTION_HITS
