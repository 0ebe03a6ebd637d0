"""Budget mode's per-query continuity bonus: its formula, its invariances, and its use."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from scar_core import BudgetSettings, PaperSettings, budget_select, select
from scar_core._scoring import CONTINUITY_CAP, CONTINUITY_RANKS, query_continuity_bonus
from tests.core.test_selection import candidates_of, corpus, cos, naive_budget

relevances = st.lists(st.floats(-1, 1), min_size=2, max_size=20)
penalties = st.lists(st.floats(0, 2), min_size=1, max_size=30)


def naive_bonus(hits: list[float], pairs: list[float]) -> float:
    """The docstring's formula, written as loops."""
    if len(hits) < 2 or not pairs:
        return 0.0
    highest, lowest = hits[0], hits[0]
    for h in hits:
        highest, lowest = max(highest, h), min(lowest, h)
    one_place = (highest - lowest) / (len(hits) - 1)
    total = 0.0
    for b in pairs:
        total += b
    return min(CONTINUITY_RANKS * one_place, CONTINUITY_CAP * total / len(pairs))


@pytest.mark.parametrize("seed", range(50))
def test_the_bonus_equals_the_naive_formula_on_random_data(seed: int) -> None:
    rng = np.random.default_rng(seed)
    hits = rng.uniform(-1, 1, size=rng.integers(2, 16)).tolist()
    pairs = rng.uniform(0, 2, size=rng.integers(1, 40)).tolist()
    assert query_continuity_bonus(hits, pairs) == pytest.approx(naive_bonus(hits, pairs))


def test_without_two_hits_or_a_linked_pair_there_is_no_bonus() -> None:
    assert query_continuity_bonus([0.9], [0.3]) == 0.0
    assert query_continuity_bonus([], [0.3]) == 0.0
    assert query_continuity_bonus([0.9, 0.5], []) == 0.0
    assert query_continuity_bonus([0.5, 0.5, 0.5], [0.3]) == 0.0  # a flat hit list: no price


@given(relevances, penalties, st.floats(-1, 1))
def test_shifting_every_cosine_leaves_the_places_term_unchanged(hits, pairs, shift) -> None:
    uncapped = [1e9] * len(pairs)  # a cap that never binds isolates the places term
    moved = [h + shift for h in hits]
    assert query_continuity_bonus(moved, uncapped) == pytest.approx(
        query_continuity_bonus(hits, uncapped), abs=1e-9
    )


@given(relevances, penalties, st.floats(0.01, 10))
def test_scaling_cosine_differences_and_penalties_scales_the_bonus(hits, pairs, scale) -> None:
    alpha = query_continuity_bonus(hits, pairs)
    scaled = query_continuity_bonus([scale * h for h in hits], [scale * b for b in pairs])
    assert scaled == pytest.approx(scale * alpha, rel=1e-9, abs=1e-12)
    assert 0.0 <= alpha <= CONTINUITY_CAP * max(pairs) + 1e-12


@pytest.mark.parametrize("seed", range(30))
def test_the_default_auction_uses_the_bonus_of_what_the_query_read(seed: int) -> None:
    query, ranked, chunks = corpus(seed, length=6)
    for k, keep, window in ((3, 1, 2), (4, 2, 1), (5, 2, 2)):
        got = budget_select(query, ranked, chunks, BudgetSettings(k=k, keep=keep, _window=window))
        candidates = set(candidates_of(ranked, chunks, k, window))
        pairs = [
            1 - cos(chunks[c].vector, chunks[n].vector)
            for c in candidates
            if (n := chunks[c].next_id) in candidates
        ]
        hits = [cos(query, chunks[h].vector) for h in ranked[:k]]
        alpha = naive_bonus(hits, pairs)
        assert not math.isclose(alpha, 0.0)
        want = naive_budget(query, ranked, chunks, k, keep, alpha, 0.1, window)
        assert set(got.chunk_ids) == want
        assert got.continuity_bonus == pytest.approx(alpha)


def test_a_fixed_bonus_is_used_as_given_and_paper_mode_has_none() -> None:
    query, ranked, chunks = corpus(3, length=6)
    fixed = budget_select(query, ranked, chunks, BudgetSettings(k=4, continuity_bonus=0.3))
    assert fixed.continuity_bonus == 0.3
    assert select(query, ranked, chunks, PaperSettings(k=2)).continuity_bonus is None
