"""The selections against naive loops written straight from the rules, plus their invariants."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from scar_core import (
    BudgetSettings,
    Chunk,
    InvalidSettingsError,
    InvalidVectorError,
    PaperSettings,
    QueryDriver,
    budget_select,
    link_sequence,
    paper_expand,
    select,
)


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def corpus(seed: int, documents: int = 3, length: int = 8, dim: int = 6):
    rng = np.random.default_rng(seed)
    chunks: dict[str, Chunk] = {}
    for d in range(documents):
        for link in link_sequence(f"doc{d}", [f"doc{d}-{p}" for p in range(length)]):
            vector = rng.normal(size=dim)
            chunks[link.chunk_id] = Chunk(link.chunk_id, vector, link.previous_id, link.next_id)
    query = rng.normal(size=dim)
    ranked = sorted(chunks, key=lambda c: -cos(query, chunks[c].vector))
    return query, ranked, chunks


def naive_paper(query, ranked, chunks, k, lam, gamma, window):
    seeds = ranked[:k]
    chosen = list(seeds)
    for seed in seeds:
        bar = gamma * cos(query, chunks[seed].vector)
        for attr in ("previous_id", "next_id"):
            via = seed
            for _ in range(window):
                n = getattr(chunks[via], attr)
                if n is None:
                    break
                if n not in chosen:
                    s = cos(query, chunks[n].vector) - lam * (
                        1 - cos(chunks[via].vector, chunks[n].vector)
                    )
                    if not s > bar:
                        break
                    chosen.append(n)
                via = n
    return chosen


def candidates_of(ranked, chunks, k, window):
    """The k hits and every chunk within ``window`` steps of one, by a plain breadth-first walk."""
    hits = ranked[:k]
    reach = {h: 0 for h in hits}
    for step in range(1, window + 1):
        for c, d in list(reach.items()):
            if d == step - 1:
                for n in (chunks[c].previous_id, chunks[c].next_id):
                    if n is not None and n not in reach:
                        reach[n] = step
    return sorted(reach)


def total_bid(query, chunks, chosen, alpha, lam):
    """A set's total bid, as the module docstring defines it."""
    total = sum(cos(query, chunks[c].vector) for c in chosen)
    for c in chosen:
        n = chunks[c].next_id
        if n in chosen:
            total += alpha - lam * (1 - cos(chunks[c].vector, chunks[n].vector))
    return total


def naive_budget(query, ranked, chunks, k, keep, alpha, lam, window, with_=(), without=()):
    """Every set of k candidates, scored as the docstring says; the best one wins.

    ``with_`` and ``without``: chunks the set must hold, and must not. Returns the best set;
    ``naive_budget.total`` holds its total bid.
    """
    hits = ranked[:k]
    candidates = candidates_of(ranked, chunks, k, window)
    size = min(k, len(candidates))
    best, best_total = None, -math.inf
    for subset in itertools.combinations(candidates, size):
        chosen = set(subset)
        if not set(hits[:keep]) | set(with_) <= chosen or chosen & set(without):
            continue
        if not all(any(c in hits for c in run) for run in passages_of(chosen, chunks)):
            continue
        total = total_bid(query, chunks, chosen, alpha, lam)
        if total > best_total:
            best, best_total = chosen, total
    naive_budget.total = best_total
    return best


def passages_of(chosen, chunks):
    runs, seen = [], set()
    for c in sorted(chosen):
        if c in seen:
            continue
        head = c
        while chunks[head].previous_id in chosen:
            head = chunks[head].previous_id
        run = [head]
        while chunks[run[-1]].next_id in chosen:
            run.append(chunks[run[-1]].next_id)
        seen.update(run)
        runs.append(run)
    return runs


@pytest.mark.parametrize("seed", range(40))
def test_paper_rule_equals_the_naive_loop(seed: int) -> None:
    query, ranked, chunks = corpus(seed)
    for gamma, window in ((0.8, 1), (0.3, 2), (0.1, 3)):
        got = paper_expand(query, ranked, chunks, PaperSettings(k=3, gamma=gamma, window=window))
        want = naive_paper(query, ranked, chunks, 3, 0.1, gamma, window)
        assert [s.chunk_id for s in got.selected] == want
        assert sorted(got.chunk_ids) == sorted(want)


@pytest.mark.parametrize("seed", range(30))
def test_segment_auction_finds_the_best_set_that_exhaustive_search_finds(seed: int) -> None:
    query, ranked, chunks = corpus(seed, length=6)
    for k, keep, alpha, window in ((3, 1, 0.2, 2), (4, 2, 0.5, 1), (5, 2, 0.0, 2), (4, 1, 1.0, 3)):
        bs = BudgetSettings(k=k, keep=keep, continuity_bonus=alpha, _window=window)
        got = budget_select(query, ranked, chunks, bs)
        want = naive_budget(query, ranked, chunks, k, keep, alpha, 0.1, window)
        assert set(got.chunk_ids) == want
        assert len(got.chunk_ids) == len(want)


@pytest.mark.parametrize("seed", range(12))
def test_a_budget_decisions_threshold_is_where_its_verdict_flips(seed: int) -> None:
    query, ranked, chunks = corpus(seed, length=6)
    for k, keep, alpha, window in ((3, 1, 0.2, 2), (4, 2, 0.5, 1), (4, 1, 0.05, 2)):
        bs = BudgetSettings(k=k, keep=keep, continuity_bonus=alpha, _window=window)
        got = budget_select(query, ranked, chunks, bs)
        naive_budget(query, ranked, chunks, k, keep, alpha, 0.1, window)
        best = naive_budget.total
        for d in got.decisions:
            assert d.accepted == (d.score > d.threshold), d
            flip = {"without": [d.neighbor_id]} if d.accepted else {"with_": [d.neighbor_id]}
            naive_budget(query, ranked, chunks, k, keep, alpha, 0.1, window, **flip)
            loss = best - naive_budget.total  # what reversing the verdict costs
            if math.isfinite(loss) and loss > 1e-9:
                expected = d.score - loss if d.accepted else d.score + loss
                expected = min(max(expected, -1.2), 1.0)  # clamped to the range of S (lambda 0.1)
                assert d.threshold == pytest.approx(expected, abs=1e-9), d


def test_hand_built_cosines_decide_as_the_formula_says() -> None:
    # seed s = e1; neighbour n at 60 degrees from s; query = e1.
    s = np.array([1.0, 0.0])
    n = np.array([0.5, math.sqrt(3) / 2])
    chunks = {"s": Chunk("s", s, None, "n"), "n": Chunk("n", n, "s", None)}
    query = np.array([1.0, 0.0])
    # S = cos(q, n) - 0.1 * (1 - cos(s, n)) = 0.5 - 0.05 = 0.45; threshold = gamma * 1.
    accepted = paper_expand(query, ["s"], chunks, PaperSettings(k=1, gamma=0.44))
    rejected = paper_expand(query, ["s"], chunks, PaperSettings(k=1, gamma=0.46))
    assert accepted.chunk_ids == ["s", "n"]
    assert rejected.chunk_ids == ["s"]
    decision = accepted.decisions[0]
    assert decision.score == pytest.approx(0.45)
    assert decision.boundary_penalty == pytest.approx(0.5)
    assert decision.threshold == pytest.approx(0.44)


def test_budget_counts_and_keeps_hits() -> None:
    query, ranked, chunks = corpus(3)
    for k in range(1, 16):
        selection = select(query, ranked, chunks, BudgetSettings(k=k))
        assert len(selection.chunk_ids) == k
        assert len(set(selection.chunk_ids)) == k
        kept = BudgetSettings(k=k).kept
        assert set(ranked[:kept]) <= set(selection.chunk_ids)


def test_budget_returns_fewer_only_when_fewer_exist() -> None:
    query, ranked, chunks = corpus(4, documents=1, length=3)
    assert len(select(query, ranked, chunks, BudgetSettings(k=10)).chunk_ids) == 3


def test_passages_are_in_document_order_and_ranked_by_best_hit() -> None:
    query, ranked, chunks = corpus(5)
    selection = select(query, ranked, chunks, BudgetSettings(k=10, continuity_bonus=0.6))
    rank = {c: ranked.index(c) for c in chunks}
    for passage in selection.passages:
        for before, after in itertools.pairwise(passage):
            assert chunks[before].next_id == after
    best = [min(rank[c] for c in p if selection.get(c).origin == "hit") for p in selection.passages]
    assert best == sorted(best)


@st.composite
def queries(draw):
    seed = draw(st.integers(0, 10_000))
    mode = draw(st.sampled_from(["budget", "paper"]))
    k = draw(st.integers(1, 12))
    window = draw(st.integers(1, 4))
    if mode == "paper":
        chosen = PaperSettings(k=k, window=window, gamma=draw(st.floats(0.05, 1.0)))
    else:
        keep = draw(st.integers(1, k))
        bonus = draw(st.none() | st.floats(0.0, 1.0))  # None: each query's own
        chosen = BudgetSettings(k=k, keep=keep, continuity_bonus=bonus, _window=window)
    return seed, chosen


@given(queries())
def test_the_driver_reads_ring_by_ring_and_selects_what_the_full_graph_gives(case) -> None:
    seed, chosen = case
    query, ranked, chunks = corpus(seed)
    hits = [Chunk(c, None, chunks[c].previous_id, chunks[c].next_id) for c in ranked[: chosen.k]]
    driver = QueryDriver(query, hits, chosen)
    while ids := driver.wanted():
        driver.receive(chunks[i] for i in ids if i in chunks)
    assert driver.reads <= chosen.window
    assert driver.result().chunk_ids == select(query, ranked, chunks, chosen).chunk_ids


def test_the_driver_refuses_a_receive_it_did_not_ask_for() -> None:
    query, ranked, chunks = corpus(3)
    driver = QueryDriver(query, [chunks[ranked[0]]], BudgetSettings(k=3))
    with pytest.raises(RuntimeError, match=r"call wanted\(\) first"):
        driver.receive([chunks[ranked[1]]])
    ids = driver.wanted()
    driver.receive(chunks[i] for i in ids if i in chunks)
    with pytest.raises(RuntimeError, match="no read outstanding"):
        driver.receive([])


def test_a_hit_without_a_usable_vector_keeps_its_place_and_is_never_lost() -> None:
    query, ranked, chunks = corpus(6)
    broken = dict(chunks)
    broken[ranked[0]] = Chunk(ranked[0], [math.nan] * 6, chunks[ranked[0]].previous_id, None)
    broken[ranked[1]] = Chunk(ranked[1], None, None, None)
    selection = select(query, ranked, broken, BudgetSettings(k=4, keep=2))
    assert ranked[0] in selection.chunk_ids
    assert ranked[1] in selection.chunk_ids
    assert len(selection.chunk_ids) == 4


def test_a_neighbour_without_a_vector_is_reported_not_scored() -> None:
    s = Chunk("s", [1.0, 0.0], None, "n")
    n = Chunk("n", None, "s", None)
    selection = paper_expand([1.0, 0.0], ["s"], {"s": s, "n": n}, PaperSettings(k=1))
    assert selection.chunk_ids == ["s"]
    assert selection.unscored == ("n",)


@pytest.mark.parametrize(
    ("make", "named"),
    [
        (lambda: BudgetSettings(k=0), "k=0"),
        (lambda: BudgetSettings(k=3, keep=4), "keep=4"),
        (lambda: BudgetSettings(continuity_bonus=-0.1), "continuity_bonus=-0.1"),
        (lambda: BudgetSettings(lambda_=math.nan), "lambda_=nan"),
        (lambda: PaperSettings(direction="up"), "direction='up'"),  # type: ignore[arg-type]
        (lambda: PaperSettings(gamma=1.5), "gamma=1.5"),
        (lambda: PaperSettings(gamma=0), "gamma=0"),
        (lambda: PaperSettings(window=0), "window=0"),
        (lambda: PaperSettings(k=True), "k=True"),
    ],
)
def test_bad_settings_name_the_value(make, named: str) -> None:
    with pytest.raises(InvalidSettingsError, match=named.replace("(", r"\(")):
        make()


@pytest.mark.parametrize("query", [[0.0, 0.0], [math.nan, 1.0], [], [[1.0, 0.0]]])
def test_a_bad_query_vector_is_refused(query) -> None:
    with pytest.raises(InvalidVectorError, match="query vector"):
        select(query, ["a"], {"a": Chunk("a", [1.0, 0.0])}, BudgetSettings(k=1))


def test_chunks_of_another_dimension_are_kept_unscored_not_a_crash() -> None:
    chunks = {"a": Chunk("a", [1.0, 0.0, 0.0], None, "b"), "b": Chunk("b", [1.0, 0.0, 0.0], "a")}
    assert select([1.0, 0.0], ["a"], chunks, BudgetSettings(k=1)).chunk_ids == ["a"]
    assert paper_expand([1.0, 0.0], ["a"], chunks, PaperSettings(k=1)).chunk_ids == ["a"]


@given(
    st.lists(
        st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), min_size=3, max_size=3),
        min_size=1,
        max_size=6,
    )
)
def test_unit_rows_agree_with_a_naive_norm_and_flag_every_unusable_row(rows) -> None:
    from scar_core._scoring import unit_rows

    units, usable = unit_rows(np.array(rows))
    for row, unit, ok in zip(rows, units, usable, strict=True):
        finite = all(math.isfinite(x) for x in row)
        assert ok == (finite and any(x != 0 for x in row))
        if ok:
            peak = max(abs(x) for x in row)
            scaled = [x / peak for x in row]
            norm = math.sqrt(sum(x * x for x in scaled))
            assert np.allclose(unit, [x / norm for x in scaled], rtol=1e-12, atol=1e-300)
        else:
            assert not unit.any()


@pytest.mark.parametrize("seed", range(40))
def test_every_chosen_chunk_is_labelled_and_scored_by_what_it_is(seed: int) -> None:
    query, ranked, chunks = corpus(seed)
    settings = BudgetSettings(k=8, keep=1, continuity_bonus=0.5)
    selection = budget_select(query, ranked[:8], chunks, settings)  # the 8 retrieved chunks
    for item in selection.selected:
        assert item.origin == ("hit" if item.chunk_id in ranked[:8] else "neighbor")
        if item.origin == "hit":
            assert item.score == pytest.approx(cos(query, chunks[item.chunk_id].vector))
            assert item.seed_rank == ranked.index(item.chunk_id)
            assert item.decision is None
        else:
            decision = item.decision
            assert decision is not None
            assert decision.accepted
            via = chunks[decision.via_id].vector
            b = 1 - cos(via, chunks[item.chunk_id].vector)
            assert decision.boundary_penalty == pytest.approx(b)
            assert item.score == pytest.approx(cos(query, chunks[item.chunk_id].vector) - 0.1 * b)
            passage = next(p for p in selection.passages if item.chunk_id in p)
            assert item.seed_id in passage
            steps = abs(passage.index(item.seed_id) - passage.index(item.chunk_id))
            assert decision.distance == steps


@given(
    st.integers(0, 10_000), st.integers(1, 12), st.integers(1, 4), st.none() | st.floats(0.0, 1.0)
)
def test_budget_invariants_hold_on_random_graphs(
    seed: int, k: int, window: int, bonus: float | None
) -> None:
    query, ranked, chunks = corpus(seed)
    keep = 1 + seed % k
    settings = BudgetSettings(k=k, keep=keep, continuity_bonus=bonus, _window=window)
    selection = budget_select(query, ranked, chunks, settings)
    ids = selection.chunk_ids
    assert len(ids) == len(set(ids)) == k  # 24 chunks: a budget of 12 can always be filled
    assert set(ranked[:keep]) <= set(ids)
    for passage in selection.passages:
        assert any(c in ranked[:k] for c in passage)
    decided = {d.neighbor_id for d in selection.decisions if d.accepted}
    assert decided == {c for c in ids if c not in ranked[:k]}


@pytest.mark.parametrize("seed", range(10))
def test_without_bonus_or_penalty_budget_mode_is_plain_top_k(seed: int) -> None:
    query, ranked, chunks = corpus(seed)
    for k in (1, 4, 9):
        settings = BudgetSettings(k=k, continuity_bonus=0.0, lambda_=0.0)
        selection = budget_select(query, ranked, chunks, settings)
        assert sorted(selection.chunk_ids) == sorted(ranked[:k])


@st.composite
def tangled_graphs(draw):
    """Chunks whose links disagree, loop, or point at chunks that are not there."""
    size = draw(st.integers(2, 12))
    names = [f"c{i}" for i in range(size)]
    target = st.sampled_from([*names, "missing", None])
    rng = np.random.default_rng(draw(st.integers(0, 10_000)))
    chunks = {n: Chunk(n, rng.normal(size=4), draw(target), draw(target)) for n in names}
    k = draw(st.integers(1, size))
    return rng.normal(size=4), names, chunks, k, draw(st.integers(1, 3))


@given(tangled_graphs())
def test_inconsistent_or_circular_links_never_lose_a_hit(case) -> None:
    query, names, chunks, k, window = case
    settings = BudgetSettings(k=k, continuity_bonus=0.5, _window=window)
    selection = budget_select(query, names[:k], chunks, settings)
    assert len(selection.chunk_ids) == len(set(selection.chunk_ids)) == k
    assert set(names[: settings.kept]) <= set(selection.chunk_ids)
    assert selection.chunk_ids == budget_select(query, names[:k], chunks, settings).chunk_ids
    for item in selection.selected:
        assert item.origin == "hit" or (item.decision is not None and item.decision.accepted)
    paper = paper_expand(query, names[:k], chunks, PaperSettings(k=k, window=window, gamma=0.3))
    assert set(names[:k]) <= set(paper.chunk_ids)
    assert len(paper.chunk_ids) == len(set(paper.chunk_ids))
