"""The array fast path (``expand_batch_arrays``) against the id-based ``expand_batch``.

``expand_batch`` is itself checked against a naive reference (test_core_policy_reference); here
random worlds (broken links, cycles, NaN and zero vectors, repeated seeds, float32 and float64)
must give the same selections, decisions and skips through both paths.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from test_core_policy_reference import World, naive_expand, near_tie

from scar_core import NeighborGraph, ScarSettings, expand_batch
from scar_core.errors import InvalidVectorError, LinkError
from scar_core.policy import ExpansionResult
from scar_core.policy_arrays import Outcome, expand_batch_arrays


def graph_of(links: np.ndarray, ids: list[str]) -> NeighborGraph:
    return NeighborGraph(
        {
            ids[row]: (
                ids[links[row, 0]] if links[row, 0] >= 0 else None,
                ids[links[row, 1]] if links[row, 1] >= 0 else None,
            )
            for row in range(len(ids))
        }
    )


def summary(result: ExpansionResult) -> tuple[object, ...]:
    return (
        result.chunk_ids,
        [(c.origin, c.seed_id, c.seed_rank) for c in result.selected],
        [
            (d.seed_id, d.neighbor_id, d.via_id, d.direction, d.distance, d.accepted)
            for d in result.decisions
        ],
        [(s.seed_id, s.neighbor_id, s.reason, s.detail) for s in result.skipped],
    )


def assert_same_as_object_path(
    queries: np.ndarray,
    vectors: np.ndarray,
    seeds: np.ndarray,
    links: np.ndarray,
    settings: ScarSettings,
) -> None:
    ids = [f"chunk-{row}" for row in range(vectors.shape[0])]
    expected = expand_batch(
        queries,
        [[ids[row] for row in query if row >= 0] for query in seeds],
        graph_of(links, ids),
        {ids[row]: vectors[row] for row in range(len(ids))},
        settings,
    )
    batch = expand_batch_arrays(queries, vectors, seeds, links, settings)
    for query, want in enumerate(expected):
        got = batch.result(query, ids)
        assert summary(got) == summary(want), query
        for mine, theirs in zip(got.decisions, want.decisions, strict=True):
            assert mine.score == pytest.approx(theirs.score, abs=1e-9)
            assert mine.threshold == pytest.approx(theirs.threshold, abs=1e-9)
            assert mine.boundary_penalty == pytest.approx(theirs.boundary_penalty, abs=1e-9)
        for mine, theirs in zip(got.selected, want.selected, strict=True):
            assert mine.score == pytest.approx(theirs.score, abs=1e-9)
        assert [ids[row] for row in batch.selected_rows(query)] == want.chunk_ids
    decided = sum(len(result.decisions) for result in expected)
    assert batch.decision_count == decided


def random_world(
    rng: np.random.Generator, dtype: type[np.floating]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, ScarSettings]:
    n_rows = int(rng.integers(5, 60))
    dimension = int(rng.integers(2, 12))
    vectors = rng.standard_normal((n_rows, dimension))
    for row in range(1, n_rows):
        if rng.random() < 0.8:
            vectors[row] = vectors[row - 1] + rng.normal(scale=0.7, size=dimension)
    if rng.random() < 0.3:
        vectors[rng.integers(n_rows)] = np.nan
    if rng.random() < 0.2:
        vectors[rng.integers(n_rows)] = 0.0
    links = np.full((n_rows, 2), -1)
    for row in range(n_rows):
        if rng.random() < 0.85 and row + 1 < n_rows:
            links[row, 1] = row + 1
        if rng.random() < 0.85 and row > 0:
            links[row, 0] = row - 1
        if rng.random() < 0.05:  # a stray link: maybe a cycle or a self-link
            links[row, int(rng.integers(2))] = int(rng.integers(n_rows))
    usable = [r for r in range(n_rows) if np.isfinite(vectors[r]).all() and np.any(vectors[r])]
    n_queries, k = int(rng.integers(1, 6)), int(rng.integers(1, 6))
    seeds = np.full((n_queries, k), -1)
    for query in range(n_queries):
        count = int(rng.integers(1, min(k, len(usable)) + 1))
        seeds[query, :count] = rng.choice(usable, size=count, replace=True)  # repeats allowed
    settings = ScarSettings(
        lambda_=float(rng.choice([0.0, 0.1, 0.5])),
        gamma=float(rng.choice([0.3, 0.8, 1.0])),
        window=int(rng.integers(1, 4)),
        direction=str(rng.choice(["both", "previous", "next"])),  # type: ignore[arg-type]
    )
    queries = rng.standard_normal((n_queries, dimension))
    return queries, vectors.astype(dtype), seeds, links, settings


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("seed", range(40))
def test_random_worlds_match_the_object_path(
    seed: int, dtype: type[np.floating], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    world = random_world(np.random.default_rng(seed), dtype)
    assert_same_as_object_path(*world)


@pytest.mark.parametrize("seed", range(10))
def test_near_ties_are_settled_as_in_float64(seed: int) -> None:
    """Each neighbour's score is within 2e-8 (relative) of its threshold: float32 sums of
    1024 terms cannot tell the sides apart, the settled decision must."""
    rng = np.random.default_rng(100 + seed)
    dimension = 1024
    for _ in range(5):
        seed_vector = rng.standard_normal(dimension)
        neighbour = seed_vector + rng.normal(scale=0.6, size=dimension)
        query = seed_vector + rng.normal(scale=0.8, size=dimension)
        vectors = np.stack([seed_vector, neighbour]).astype(np.float32)
        exact = vectors.astype(np.float64)
        unit = exact / np.linalg.norm(exact, axis=1, keepdims=True)
        q = query / np.linalg.norm(query)
        score = unit[1] @ q - 0.1 * (1 - unit[0] @ unit[1])
        gamma = float(score / (unit[0] @ q)) * (1 + float(rng.choice([-2e-8, 2e-8])))
        if not 0 < gamma <= 1:
            continue
        settings = ScarSettings(gamma=gamma, window=1, direction="next")
        links = np.array([[-1, 1], [0, -1]])
        assert_same_as_object_path(query[None, :], vectors, np.array([[0]]), links, settings)


def test_magnitudes_float32_cannot_square_are_handled_in_float64() -> None:
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((6, 8))
    vectors[2] *= 1e25
    vectors[3] *= 1e-25
    links = np.array([[-1, 1], [0, 2], [1, 3], [2, 4], [3, 5], [4, -1]])
    seeds = np.array([[2, -1], [1, 3]])
    queries = vectors[[2, 3]] + rng.normal(scale=0.1, size=(2, 8))
    for gamma in (0.2, 0.6, 0.95):
        settings = ScarSettings(gamma=gamma, window=2)
        assert_same_as_object_path(queries, vectors.astype(np.float32), seeds, links, settings)


def test_the_docstring_example_and_outcome_codes() -> None:
    vectors = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]], dtype=np.float32)
    links = np.array([[-1, 1], [0, 2], [1, -1]])
    batch = expand_batch_arrays([[1.0, 0.0]], vectors, [[0]], links, ScarSettings(window=2))
    assert batch.selected_rows(0).tolist() == [0, 1]
    assert batch.steps == ("previous", "next")
    assert batch.outcome[0, 0, 1].tolist() == [Outcome.ACCEPTED, Outcome.REJECTED]
    assert batch.outcome[0, 0, 0].tolist() == [Outcome.NOT_REACHED, Outcome.NOT_REACHED]
    assert batch.path[0, 0, 1].tolist() == [1, 2]
    assert batch.threshold[0, 0] == pytest.approx(0.8)
    assert batch.decision_count == 2


def test_a_seed_of_another_rank_is_passed_through() -> None:
    vectors = np.array([[1.0, 0.0], [1.0, 0.05], [0.95, 0.1]], dtype=np.float32)
    links = np.array([[-1, 1], [0, 2], [1, -1]])
    batch = expand_batch_arrays([[1.0, 0.0]], vectors, [[0, 1]], links, ScarSettings(window=2))
    assert batch.outcome[0, 0, 1].tolist() == [Outcome.PASSED, Outcome.ACCEPTED]
    assert batch.selected_rows(0).tolist() == [0, 1, 2]


@pytest.mark.parametrize(("n_queries", "k"), [(0, 3), (2, 0), (1, 2)])
def test_empty_batches_and_padding_only_seeds(n_queries: int, k: int) -> None:
    vectors = np.eye(4, dtype=np.float32)
    links = np.array([[-1, 1], [0, 2], [1, 3], [2, -1]])
    seeds = np.full((n_queries, k), -1)
    batch = expand_batch_arrays(np.ones((n_queries, 4)), vectors, seeds, links, ScarSettings())
    assert batch.outcome.shape == (n_queries, k, 2, 1)
    assert batch.decision_count == 0
    assert np.isnan(batch.score).all()


def test_unusable_seed_vectors_are_refused() -> None:
    vectors = np.array([[1.0, 0.0], [np.nan, 1.0]])
    with pytest.raises(InvalidVectorError, match=r"seed row 1 \(query 0, rank 1\).*NaN"):
        expand_batch_arrays([[1.0, 0.0]], vectors, [[0, 1]], np.full((2, 2), -1))


@pytest.mark.parametrize(
    ("queries", "seeds", "links", "error", "message"),
    [
        ([[1.0, 0.0], [np.nan, 0.0]], [[0], [0]], None, InvalidVectorError, "query 1 has NaN"),
        ([[0.0, 0.0]], [[0]], None, InvalidVectorError, "query 0 is a zero vector"),
        ([[1.0, 0.0]], [0], None, InvalidVectorError, "one row per query"),
        ([[1.0, 0.0]], [[3]], None, InvalidVectorError, r"lie in \[-1, 2\]"),
        ([[1.0, 0.0]], [[-1, 0]], None, InvalidVectorError, "may only pad the end"),
        ([[1.0, 0.0]], [[0.0]], None, InvalidVectorError, "integer array"),
        ([[1.0, 0.0]], [[0]], np.zeros((2, 2), dtype=int), LinkError, r"expected \(3, 2\)"),
        ([[1.0, 0.0]], [[0]], np.full((3, 2), 5), LinkError, r"lie in \[-1, 2\]"),
        ([[1.0, 0.0, 0.0]], [[0]], None, InvalidVectorError, r"expected \(n_chunks, 3\)"),
    ],
)
def test_bad_arguments_name_the_problem(
    queries: list[list[float]],
    seeds: object,
    links: np.ndarray | None,
    error: type[Exception],
    message: str,
) -> None:
    vectors = np.eye(3, 2)
    link_rows = np.full((3, 2), -1) if links is None else links
    with pytest.raises(error, match=message):
        expand_batch_arrays(queries, vectors, seeds, link_rows)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Against the naive reference (test_core_policy_reference), on worlds shaped like retrieval:
# seeds bunched in a few documents, so walks pass through other seeds and reach far steps.


def reference_world(vectors: np.ndarray, links: np.ndarray) -> World:
    ids = [f"chunk-{row}" for row in range(vectors.shape[0])]
    return World(
        links={
            ids[row]: tuple(ids[int(link)] if link >= 0 else None for link in links[row])  # type: ignore[misc]
            for row in range(len(ids))
        },
        documents={},
        vectors={ids[row]: [float(x) for x in vectors[row]] for row in range(len(ids))},
        dimension=vectors.shape[1],
    )


def bunched_world(
    rng: np.random.Generator, dtype: type[np.floating], dimension: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, ScarSettings]:
    """Documents of chunks whose vectors drift, queries near a few of them, bunched seeds."""
    n_documents, length = int(rng.integers(1, 4)), int(rng.integers(3, 12))
    n_rows = n_documents * length
    vectors = rng.standard_normal((n_rows, dimension))
    for row in range(1, n_rows):
        if row % length:
            vectors[row] = 0.6 * vectors[row - 1] + 0.8 * vectors[row]
    vectors *= rng.uniform(0.2, 5.0, size=(n_rows, 1))
    if rng.random() < 0.3:
        vectors[rng.integers(n_rows)] = np.nan
    links = np.full((n_rows, 2), -1)
    for row in range(n_rows):
        if row % length:
            links[row, 0] = row - 1
        if (row + 1) % length:
            links[row, 1] = row + 1
        if rng.random() < 0.08:  # one-way, self or cross-document links
            links[row, int(rng.integers(2))] = int(rng.integers(n_rows))
    good = [row for row in range(n_rows) if np.isfinite(vectors[row]).all()]
    n_queries, k = int(rng.integers(1, 8)), int(rng.integers(1, 7))
    seeds = np.full((n_queries, k), -1)
    queries = np.empty((n_queries, dimension))
    for query in range(n_queries):
        start = int(rng.choice(good))
        window = [row for row in good if abs(row - start) <= 4]
        chosen = rng.choice(window, size=int(rng.integers(1, min(k, len(window)) + 1)))
        seeds[query, : len(chosen)] = chosen
        mean = vectors[chosen].mean(axis=0)
        queries[query] = mean / np.linalg.norm(mean) + rng.normal(scale=0.3, size=dimension)
    settings = ScarSettings(
        lambda_=float(rng.choice([0.0, 0.1, 0.5])),
        gamma=float(rng.choice([0.3, 0.6, 0.8, 1.0])),
        window=int(rng.integers(1, 5)),
        direction=str(rng.choice(["both", "both", "previous", "next"])),  # type: ignore[arg-type]
    )
    return queries, vectors.astype(dtype), seeds, links, settings


def assert_same_as_reference(
    queries: np.ndarray,
    vectors: np.ndarray,
    seeds: np.ndarray,
    links: np.ndarray,
    settings: ScarSettings,
) -> int:
    """Compare selections and decisions with the naive reference; return how many compared."""
    world = reference_world(vectors, links)
    batch = expand_batch_arrays(queries, vectors, seeds, links, settings)
    compared = 0
    for query in range(queries.shape[0]):
        seed_ids = [f"chunk-{row}" for row in seeds[query] if row >= 0]
        selected, decisions = naive_expand(
            world, list(map(float, queries[query])), seed_ids, settings
        )
        if near_tie(decisions):
            continue  # fsum and float64 dot products may differ there; tested separately
        assert [f"chunk-{row}" for row in batch.selected_rows(query)] == selected, query
        outcome = batch.outcome[query]
        decided = (outcome == Outcome.ACCEPTED) | (outcome == Outcome.REJECTED)
        rows = batch.path[query][decided]
        codes = outcome[decided]
        assert sorted(
            (f"chunk-{row}", code == Outcome.ACCEPTED)
            for row, code in zip(rows, codes, strict=True)
        ) == sorted((neighbour, accepted) for _, neighbour, _, _, _, _, accepted in decisions)
        # Figures are given exactly where a decision was taken.
        for figure in (batch.relevance, batch.boundary_penalty, batch.score):
            assert np.array_equal(np.isnan(figure[query]), ~decided)
        scores = sorted(batch.score[query][decided])
        assert scores == pytest.approx(sorted(d[3] for d in decisions), abs=1e-4)
        compared += 1
    return compared


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("seed", range(60))
def test_bunched_seeds_match_the_naive_reference(
    seed: int, dtype: type[np.floating], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    rng = np.random.default_rng(1000 + seed)
    world = bunched_world(rng, dtype, int(rng.integers(2, 16)))
    assert_same_as_reference(*world)
    assert_same_as_object_path(*world)


@pytest.mark.parametrize("seed", range(12))
def test_near_ties_beyond_the_first_step_are_settled_as_in_float64(seed: int) -> None:
    """A later step's score (reached through an accepted step or through another seed) within
    2e-8 of its threshold: float32 cannot tell the sides apart, the settled decision must."""
    rng = np.random.default_rng(300 + seed)
    dimension = 1024
    tried = 0
    while tried < 4:
        base = rng.standard_normal(dimension)
        rows = [base]
        for _ in range(3):
            rows.append(0.9 * rows[-1] + 0.45 * rng.standard_normal(dimension))
        vectors = np.stack(rows).astype(np.float32)
        exact = vectors.astype(np.float64)
        unit = exact / np.linalg.norm(exact, axis=1, keepdims=True)
        query = base + rng.normal(scale=0.5, size=dimension)
        q = query / np.linalg.norm(query)
        links = np.array([[-1, 1], [0, 2], [1, 3], [2, -1]])
        # Seeds 0 and 1 (rank order): seed 0's walk passes through seed 1 and decides row 2 at
        # distance 2, with the penalty across 1 -> 2 and seed 0's threshold.
        seeds = np.array([[0, 1]]) if rng.random() < 0.5 else np.array([[0]])
        lambda_ = 0.1
        score = unit[2] @ q - lambda_ * (1 - unit[1] @ unit[2])
        gamma = float(score / (unit[0] @ q)) * (1 + float(rng.choice([-2e-8, 2e-8])))
        if not 0 < gamma <= 1:
            continue
        if seeds.shape[1] == 1:  # row 1 must be accepted first for row 2 to be reached
            first = unit[1] @ q - lambda_ * (1 - unit[0] @ unit[1])
            if not first > gamma * (unit[0] @ q) + 1e-3:
                continue
        tried += 1
        settings = ScarSettings(lambda_=lambda_, gamma=gamma, window=3, direction="next")
        assert_same_as_object_path(query[None, :], vectors, seeds, links, settings)
        world = reference_world(vectors, links)
        selected, _ = naive_expand(
            world, list(map(float, query)), [f"chunk-{row}" for row in seeds[0]], settings
        )
        batch = expand_batch_arrays(query[None, :], vectors, seeds, links, settings)
        assert [f"chunk-{row}" for row in batch.selected_rows(0)] == selected
