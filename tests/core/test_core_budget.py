"""Budgeted selection: an independent reference loop, invariants and validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scar_core import InvalidSettingsError, MissingVectorError, NeighborGraph
from scar_core.budget import BudgetSettings, select_within_budget


def _reference(query, ranked, order, vectors, budget, bonus, lambda_, min_seeds):
    """Plain loop over one document given as an ordered id list (written from the docstring)."""

    def cos(a, b):
        dot = math.fsum(x * y for x, y in zip(a, b, strict=True))
        return dot / math.sqrt(math.fsum(x * x for x in a) * math.fsum(y * y for y in b))

    position = {c: i for i, c in enumerate(order)}
    chosen = list(dict.fromkeys(ranked))[:min_seeds]
    while len(chosen) < budget:
        remaining = [c for c in ranked if c not in chosen]
        best_id, best_bid = (
            (remaining[0], cos(query, vectors[remaining[0]])) if remaining else (None, -math.inf)
        )
        for via in chosen:
            for offset in (-1, 1):
                index = position[via] + offset
                if not 0 <= index < len(order) or order[index] in chosen:
                    continue
                n = order[index]
                bid = cos(query, vectors[n]) - lambda_ * (1 - cos(vectors[via], vectors[n])) + bonus
                if bid > best_bid:
                    best_id, best_bid = n, bid
        if best_id is None:
            break
        chosen.append(best_id)
    return chosen


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    size=st.integers(1, 14),
    budget=st.integers(1, 12),
    bonus=st.sampled_from([0.0, 0.05, 0.2, 0.5]),
    lambda_=st.sampled_from([0.0, 0.1, 0.4]),
    min_seeds=st.integers(1, 3),
)
def test_matches_the_reference_loop(seed, size, budget, bonus, lambda_, min_seeds):
    rng = np.random.default_rng(seed)
    order = [f"c{i}" for i in range(size)]
    vectors = {c: rng.normal(size=6) * rng.uniform(0.1, 5) for c in order}
    query = rng.normal(size=6)
    ranked = sorted(order, key=lambda c: -float(vectors[c] @ query / np.linalg.norm(vectors[c])))
    ranked = ranked[: max(1, size // 2)]
    min_seeds = min(min_seeds, len(ranked))
    budget = max(budget, min_seeds)
    graph = NeighborGraph.from_sequences({"doc": order})
    result = select_within_budget(
        query,
        ranked,
        graph,
        vectors,
        BudgetSettings(
            max_chunks=budget, continuity_bonus=bonus, lambda_=lambda_, min_seeds=min_seeds
        ),
    )
    expected = _reference(query, ranked, order, vectors, budget, bonus, lambda_, min_seeds)
    assert result.chunk_ids == expected
    assert set(ranked[:min_seeds]) <= set(result.chunk_ids)
    assert len(result.chunk_ids) == len(set(result.chunk_ids)) == min(budget, size)
    for decision in result.decisions:
        assert (decision.score > decision.threshold) == decision.accepted


def test_no_bonus_and_no_penalty_is_top_b_when_everything_is_ranked():
    rng = np.random.default_rng(7)
    order = [f"c{i}" for i in range(20)]
    vectors = {c: rng.normal(size=8) for c in order}
    query = rng.normal(size=8)
    ranked = sorted(order, key=lambda c: -float(vectors[c] @ query / np.linalg.norm(vectors[c])))
    result = select_within_budget(
        query,
        ranked,
        NeighborGraph.from_sequences({"d": order}),
        vectors,
        BudgetSettings(max_chunks=7, continuity_bonus=0.0, lambda_=0.0),
    )
    assert result.chunk_ids == ranked[:7]


def test_a_continuing_neighbour_beats_a_weaker_distant_chunk():
    # q = e0. a = e0 (cos 1); b continues a: cos(q, b) = 0.6, cos(a, b) = 0.6 -> b = (0.6, 0.8, 0)
    # S(b) = 0.6 - 0.1 * (1 - 0.6) = 0.56; bid = 0.56 + 0.2 = 0.76.
    # far chunk z: cos(q, z) = 0.7 -> z = (0.7, 0, sqrt(0.51)); bids 0.7 < 0.76, so b wins slot 2.
    vectors = {
        "a": np.array([1.0, 0.0, 0.0]),
        "b": np.array([0.6, 0.8, 0.0]),
        "z": np.array([0.7, 0.0, math.sqrt(0.51)]),
    }
    graph = NeighborGraph.from_sequences({"d1": ["a", "b"], "d2": ["z"]})
    result = select_within_budget(
        np.array([1.0, 0.0, 0.0]), ["a", "z", "b"], graph, vectors, BudgetSettings(max_chunks=2)
    )
    assert result.chunk_ids == ["a", "b"]
    (decision,) = [d for d in result.decisions if d.accepted]
    assert decision.score == pytest.approx(0.56)
    assert decision.threshold == pytest.approx(0.7 - 0.2)
    # With a bonus of 0.1 the bid is 0.66 < 0.7: the distant chunk wins instead.
    result = select_within_budget(
        np.array([1.0, 0.0, 0.0]),
        ["a", "z", "b"],
        graph,
        vectors,
        BudgetSettings(max_chunks=2, continuity_bonus=0.1),
    )
    assert result.chunk_ids == ["a", "z"]
    assert [(d.neighbor_id, d.accepted) for d in result.decisions] == [("b", False)]


def test_token_budget_passes_over_chunks_that_do_not_fit_and_keeps_seeds():
    vectors = {"a": np.array([1.0, 0.0]), "b": np.array([0.9, 0.1]), "c": np.array([0.8, 0.2])}
    graph = NeighborGraph.from_sequences({"d": ["a", "b", "c"]})
    counts = {"a": 50, "b": 40, "c": 5}
    result = select_within_budget(
        np.array([1.0, 0.0]),
        ["a", "b", "c"],
        graph,
        vectors,
        BudgetSettings(max_chunks=3, max_tokens=60),
        token_counts=counts,
    )
    assert result.chunk_ids[0] == "a"
    assert "b" not in result.chunk_ids  # 50 + 40 > 60
    assert sum(counts[c] for c in result.chunk_ids) <= 60
    over = select_within_budget(
        np.array([1.0, 0.0]),
        ["a"],
        graph,
        vectors,
        BudgetSettings(max_chunks=1, max_tokens=10),
        token_counts=counts,
    )
    assert over.chunk_ids == ["a"]  # a seed is kept even when it alone exceeds the budget


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_chunks": 2, "min_seeds": 3}, "max_chunks=2 is smaller than the 3 seeds"),
        ({"max_chunks": 0}, "max_chunks=0"),
        ({"max_chunks": 5, "continuity_bonus": -0.1}, "continuity_bonus=-0.1"),
        ({"max_chunks": 5, "lambda_": -1.0}, "lambda_=-1.0"),
        ({"max_chunks": 5, "window": 0}, "window=0"),
    ],
)
def test_settings_are_validated(kwargs, message):
    with pytest.raises(InvalidSettingsError, match=message):
        BudgetSettings(**kwargs)


def test_a_kept_seed_without_a_vector_is_an_error_and_a_missing_neighbour_is_skipped():
    graph = NeighborGraph.from_sequences({"d": ["a", "b", "c"]})
    with pytest.raises(MissingVectorError, match="'a'"):
        select_within_budget(np.array([1.0, 0.0]), ["a"], graph, {}, BudgetSettings(max_chunks=2))
    result = select_within_budget(
        np.array([1.0, 0.0]),
        ["a"],
        graph,
        {"a": np.array([1.0, 0.0])},
        BudgetSettings(max_chunks=3),
    )
    assert result.chunk_ids == ["a"]
    assert [(s.neighbor_id, s.reason) for s in result.skipped] == [("b", "missing_vector")]
