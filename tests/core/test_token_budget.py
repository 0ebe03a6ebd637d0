"""Budget mode with ``max_tokens``: the auction against exhaustive search, its invariants, plumbing."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_selection import candidates_of, corpus, cos, passages_of

from scar_core import BudgetSettings, InvalidSettingsError, ScarSettings, budget_select
from scar_core import _selection as selection_module
from scar_core._chunks import Chunk
from scar_core._driver import QueryDriver
from scar_core._selection import fill_in_order
from scar_core._settings import estimate_tokens


def lengths(chunks, seed: int, low: int = 1, high: int = 9) -> dict[str, int]:
    rng = np.random.default_rng(seed + 1000)
    return {c: int(rng.integers(low, high + 1)) for c in sorted(chunks)}


def naive_tokens(query, ranked, chunks, tokens, k, keep, alpha, lam, window, limit, with_=(),
                 without=(), unit=1):  # fmt: skip
    """Every subset of the candidates whose tokens fit ``limit``, scored by the rules; best wins.

    The kept hits are the best ``keep`` as far as they fit in rank order (at least the best hit).
    Bids are fair to length: a chunk's bid is its relevance times its tokens over the candidates'
    mean, a linked pair's its bonus less penalty times its two chunks' mean of that ratio.
    With ``unit``, what must fit is each chunk's tokens in units of ``unit``, rounded up, within
    ``limit // unit`` units. ``naive_tokens.total`` holds the best total bid;
    ``naive_tokens.scale`` each chunk's ratio.
    """
    hits, room = ranked[:k], limit // unit
    units = {c: -(-count // unit) for c, count in tokens.items()}
    kept = hits[: fill_in_order([units[h] for h in hits[:keep]], room)]
    weight = units | {kept[0]: min(units[kept[0]], room)}
    counts = dict(tokens) | {kept[0]: min(tokens[kept[0]], limit)}
    candidates = candidates_of(ranked, chunks, k, window)
    mean = sum(counts[c] for c in candidates) / len(candidates)
    scale = {c: counts[c] / mean if mean else 1.0 for c in candidates}
    naive_tokens.scale = scale
    best, best_total = None, -math.inf
    for size in range(len(candidates) + 1):
        for subset in itertools.combinations(candidates, size):
            chosen = set(subset)
            if sum(weight[c] for c in chosen) > room:
                continue
            if not set(kept) | set(with_) <= chosen or chosen & set(without):
                continue
            if not all(any(c in hits for c in run) for run in passages_of(chosen, chunks)):
                continue
            total = fair_bid(query, chunks, chosen, alpha, lam, scale)
            if total > best_total:
                best, best_total = chosen, total
    naive_tokens.total = best_total
    return best


def fair_bid(query, chunks, chosen, alpha, lam, scale):
    """A set's total bid with bids scaled by length, written straight from the rule."""
    total = sum(cos(query, chunks[c].vector) * scale[c] for c in chosen)
    for c in chosen:
        n = chunks[c].next_id
        if n in chosen:
            bonus = alpha - lam * (1 - cos(chunks[c].vector, chunks[n].vector))
            total += bonus * (scale[c] + scale[n]) / 2
    return total


CASES = ((3, 1, 0.2, 1, 12), (3, 2, 0.5, 1, 20), (2, 1, 1.0, 2, 15), (4, 2, 0.0, 1, 9))


@pytest.mark.parametrize("grid", [None, 4])  # 4: limits of 9 to 20 weighed in units of 3 to 5
@pytest.mark.parametrize("seed", range(25))
def test_token_auction_finds_the_best_set_that_exhaustive_search_finds(
    seed: int, grid: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if grid is not None:  # past the grid, tokens are weighed in units, each count rounded up
        monkeypatch.setattr(selection_module, "TOKEN_GRID", grid)
    query, ranked, chunks = corpus(seed, length=5)
    tokens = lengths(chunks, seed)
    for k, keep, alpha, window, limit in CASES:
        bs = BudgetSettings(
            k=k, keep=keep, continuity_bonus=alpha, _window=window, max_tokens=limit
        )
        got = budget_select(query, ranked, chunks, bs, tokens)
        unit = 1 if grid is None else -(-limit // grid)
        want = naive_tokens(query, ranked, chunks, tokens, k, keep, alpha, 0.1, window, limit,
                            unit=unit)  # fmt: skip
        assert set(got.chunk_ids) == want, (k, keep, alpha, window, limit)
        spent = sum(tokens[c] for c in got.chunk_ids)
        assert spent <= limit or got.chunk_ids == [ranked[0]]


@pytest.mark.parametrize("seed", range(10))
def test_a_token_decisions_threshold_is_where_its_verdict_flips(seed: int) -> None:
    query, ranked, chunks = corpus(seed, length=5)
    tokens = lengths(chunks, seed)
    for k, keep, alpha, window, limit in CASES[:3]:
        bs = BudgetSettings(
            k=k, keep=keep, continuity_bonus=alpha, _window=window, max_tokens=limit
        )
        got = budget_select(query, ranked, chunks, bs, tokens)
        args = (query, ranked, chunks, tokens, k, keep, alpha, 0.1, window, limit)
        naive_tokens(*args)
        best = naive_tokens.total
        for d in got.decisions:
            assert d.accepted == (d.score > d.threshold), d
            flip = {"without": [d.neighbor_id]} if d.accepted else {"with_": [d.neighbor_id]}
            naive_tokens(*args, **flip)
            loss = best - naive_tokens.total
            if math.isfinite(loss) and loss > 1e-9:
                per_score = loss / naive_tokens.scale[d.neighbor_id]  # its bid moves this fast
                expected = d.score - per_score if d.accepted else d.score + per_score
                assert d.threshold == pytest.approx(min(max(expected, -1.2), 1.0), abs=1e-9), d


@given(
    st.integers(0, 10_000), st.integers(1, 10), st.integers(1, 3), st.floats(0.0, 1.0),
    st.integers(1, 60), st.integers(0, 30),
)  # fmt: skip
def test_token_budget_invariants_hold_on_random_graphs(seed, k, window, bonus, limit, longest):
    query, ranked, chunks = corpus(seed)
    tokens = lengths(chunks, seed, 0, longest)
    keep = 1 + seed % k
    settings = BudgetSettings(
        k=k, keep=keep, continuity_bonus=bonus, _window=window, max_tokens=limit
    )
    selection = budget_select(query, ranked, chunks, settings, tokens)
    ids = selection.chunk_ids
    assert len(ids) == len(set(ids)) >= 1
    kept = ranked[: fill_in_order([tokens[h] for h in ranked[:keep]], limit)]
    assert set(kept) <= set(ids)
    spent = sum(tokens[c] for c in ids)
    assert spent <= limit or (tokens[ranked[0]] > limit and spent == tokens[ranked[0]])
    for passage in selection.passages:
        assert any(c in ranked[:k] for c in passage)
    reordered = dict(reversed(list(chunks.items())))
    again = budget_select(query, list(ranked), reordered, settings, dict(tokens))
    assert again.passages == selection.passages
    assert [(d.neighbor_id, d.threshold) for d in again.decisions] == [
        (d.neighbor_id, d.threshold) for d in selection.decisions
    ]


def test_a_best_hit_over_the_budget_is_returned_alone() -> None:
    query, ranked, chunks = corpus(4)
    tokens = dict.fromkeys(chunks, 10) | {ranked[0]: 500}
    selection = budget_select(query, ranked, chunks, BudgetSettings(k=5, max_tokens=100), tokens)
    assert selection.chunk_ids == [ranked[0]]


def test_kept_hits_that_do_not_fit_together_are_kept_as_far_as_they_fit() -> None:
    query, ranked, chunks = corpus(5)
    tokens = dict.fromkeys(chunks, 10) | {ranked[0]: 60, ranked[1]: 60}
    settings = BudgetSettings(k=5, keep=2, max_tokens=100)
    selection = budget_select(query, ranked, chunks, settings, tokens)
    assert ranked[0] in selection.chunk_ids
    assert ranked[1] not in selection.chunk_ids
    assert sum(tokens[c] for c in selection.chunk_ids) <= 100


def test_a_missing_token_count_names_the_chunk() -> None:
    query, ranked, chunks = corpus(1)
    with pytest.raises(ValueError, match="token count of chunk"):
        budget_select(query, ranked, chunks, BudgetSettings(k=3, max_tokens=50), {})


def test_fill_in_order_stops_at_the_first_that_does_not_fit() -> None:
    assert [fill_in_order(c, 5) for c in ([], [6], [3, 3, 1], [2, 3, 1], [0, 5, 0])] == [
        0, 1, 1, 2, 3
    ]  # fmt: skip
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcde") == 2


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"max_tokens": 0}, "max_tokens=0"),
        ({"max_tokens": 10.5}, "max_tokens=10.5"),
        ({"max_tokens": True}, "max_tokens=True"),
        ({"mode": "paper", "max_tokens": 100}, "applies only to mode='budget'"),
        ({"mode": "paper", "tokenizer": len}, "applies only to mode='budget'"),
        ({"tokenizer": len}, "pass max_tokens too"),
        ({"max_tokens": 100, "tokenizer": 3}, "tokenizer=3"),
    ],
)
def test_bad_token_settings_are_refused_with_the_fix(given, named: str) -> None:
    with pytest.raises(InvalidSettingsError, match=named.replace("(", r"\(")):
        ScarSettings(**given)


def test_settings_for_a_query_carry_max_tokens() -> None:
    settings = ScarSettings(max_tokens=300, tokenizer=len)
    assert settings.for_query(7) == BudgetSettings(k=7, max_tokens=300)


def _found(chunk_id: str, vector, text: str, previous=None, following=None) -> Chunk:
    return Chunk(chunk_id, vector, previous, following, True, text, item=chunk_id)


def test_scar_query_counts_each_text_once_with_the_tokenizer() -> None:
    e = np.eye(3)
    texts = {"a": "x" * 40, "b": "y" * 400, "c": "z" * 40}
    calls: list[str] = []

    def count(text: str) -> int:
        calls.append(text)
        return len(text) // 10

    settings = ScarSettings(max_tokens=10, tokenizer=count)
    query = QueryDriver.for_adapter(e[0], [_found("b", e[0], texts["b"], None, "c")], settings, 1)
    while ids := query.wanted():
        query.receive([_found(i, e[0] + 0.1 * e[1], texts[i], "b", None) for i in ids])
    placed = query.returned()
    assert [c.id for c, _ in placed] == ["b"]  # b is 40 tokens: the best hit, alone
    assert sorted(calls) == sorted([texts["b"], texts["c"]])
    query = QueryDriver.for_adapter(e[0], [_found("a", e[0], texts["a"], None, "c")], settings, 1)
    while ids := query.wanted():
        query.receive([_found(i, e[0] + 0.1 * e[1], texts[i], "a", None) for i in ids])
    assert [c.id for c, _ in query.returned()] == ["a", "c"]  # 4 + 4 tokens fit 10


def test_unlinked_hits_fill_the_tokens_in_rank_order() -> None:
    hits = [Chunk(i, None, text="w" * n, item=i) for i, n in (("a", 40), ("b", 40), ("c", 40))]
    settings = ScarSettings(max_tokens=25)  # the estimate: 10 + 10 fit, the third would not
    query = QueryDriver.for_adapter(None, hits, settings, 3)
    assert [c.id for c, _ in query.returned()] == ["a", "b"]


def test_a_tokenizer_that_returns_no_count_is_named() -> None:
    e = np.eye(2)
    settings = ScarSettings(max_tokens=10, tokenizer=lambda t: "many")
    query = QueryDriver.for_adapter(e[0], [_found("a", e[0], "text")], settings, 1)
    while query.wanted():
        query.receive([])
    with pytest.raises(InvalidSettingsError, match="tokenizer returned 'many'"):
        query.returned()
