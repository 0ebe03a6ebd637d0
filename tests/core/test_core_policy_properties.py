"""Hypothesis invariants of the SCAR policy on random documents, vectors and settings."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from scar_core import NeighborGraph, expand
from scar_core.baselines import static_window

DIRECTIONS = st.sampled_from(["both", "previous", "next"])


@dataclass
class Corpus:
    sequences: dict[str, list[str]]
    vectors: dict[str, np.ndarray]
    query: np.ndarray
    seeds: list[str]

    @property
    def graph(self) -> NeighborGraph:
        return NeighborGraph.from_sequences(self.sequences)

    def position(self, chunk: str) -> tuple[str, int]:
        for document, ids in self.sequences.items():
            if chunk in ids:
                return document, ids.index(chunk)
        raise KeyError(chunk)


def nonzero_vector(dimension: int, low: float) -> st.SearchStrategy[np.ndarray]:
    element = st.floats(low, 1.0, allow_nan=False, allow_infinity=False)
    return (
        st.lists(element, min_size=dimension, max_size=dimension)
        .map(np.asarray)
        .filter(lambda v: float(np.linalg.norm(v)) > 1e-3)
    )


@st.composite
def corpora(draw: st.DrawFn, positive: bool = False) -> Corpus:
    """Documents of 1-8 chunks; vectors anywhere (or in the positive orthant); 0-5 seeds."""
    dimension = draw(st.integers(2, 6))
    low = 0.01 if positive else -1.0
    sizes = draw(st.lists(st.integers(1, 8), min_size=1, max_size=3))
    sequences = {f"doc{d}": [f"d{d}c{i}" for i in range(size)] for d, size in enumerate(sizes)}
    ids = [chunk for chunk_ids in sequences.values() for chunk in chunk_ids]
    vectors = {chunk: draw(nonzero_vector(dimension, low)) for chunk in ids}
    query = draw(nonzero_vector(dimension, low))
    seeds = draw(st.lists(st.sampled_from(ids), max_size=5))
    return Corpus(sequences, vectors, query, seeds)


@st.composite
def one_topic_corpora(draw: st.DrawFn) -> Corpus:
    """Every vector, the query's too, within angle asin(0.3) of one direction ``u``.

    Then for any chunks ``v, n`` and seed ``c``: ``cos(q, n) >= cos(2 asin 0.3) = 1 - 2 * 0.3**2
    = 0.82`` and ``b(v, n) <= 0.18``, so with ``lambda_ <= 1`` every ``S >= 0.82 - 0.18 = 0.64``,
    while every threshold ``gamma * cos(q, c) <= gamma <= 0.6``: every neighbour clears its bar.
    """
    corpus = draw(corpora())
    dimension = corpus.query.shape[0]
    direction = draw(nonzero_vector(dimension, -1.0))
    direction = direction / np.linalg.norm(direction)

    def near_direction() -> np.ndarray:
        noise = draw(nonzero_vector(dimension, -1.0))
        radius = draw(st.floats(0.0, 0.3))
        scale = draw(st.floats(0.1, 10.0))
        return scale * (direction + radius * noise / np.linalg.norm(noise))

    vectors = {chunk: near_direction() for chunk in corpus.vectors}
    return Corpus(corpus.sequences, vectors, near_direction(), corpus.seeds)


def window_around(corpus: Corpus, window: int, direction: str) -> set[str]:
    allowed: set[str] = set()
    for seed in corpus.seeds:
        document, index = corpus.position(seed)
        low = index - window if direction in ("both", "previous") else index
        high = index + window if direction in ("both", "next") else index
        ids = corpus.sequences[document]
        allowed.update(ids[max(low, 0) : high + 1])
    return allowed


@settings(max_examples=150, deadline=None)
@given(
    corpus=corpora(),
    lambda_=st.floats(0.0, 2.0),
    gamma=st.floats(0.01, 1.0),
    window=st.integers(1, 4),
    direction=DIRECTIONS,
)
def test_output_holds_every_seed_and_nothing_outside_the_window(
    corpus: Corpus, lambda_: float, gamma: float, window: int, direction: str
) -> None:
    result = expand(
        corpus.query,
        corpus.seeds,
        corpus.graph,
        corpus.vectors,
        lambda_,
        gamma,
        window,
        direction=direction,  # type: ignore[arg-type]
    )
    assert set(corpus.seeds) <= set(result.chunk_ids)
    assert result.seed_ids == list(dict.fromkeys(corpus.seeds))
    assert len(result.chunk_ids) == len(set(result.chunk_ids))
    assert set(result.chunk_ids) <= window_around(corpus, window, direction)
    for chunk in result.selected:
        assert chunk.score is not None
        assert math.isfinite(chunk.score)


@settings(max_examples=150, deadline=None)
@given(
    corpus=corpora(positive=True),
    lambda_=st.floats(0.0, 2.0),
    gamma=st.floats(0.01, 1.0),
    factor=st.floats(0.0, 1.0, exclude_min=True),
    window=st.integers(1, 3),
    direction=DIRECTIONS,
)
def test_lowering_gamma_never_removes_a_chunk(
    corpus: Corpus, lambda_: float, gamma: float, factor: float, window: int, direction: str
) -> None:
    # Positive-orthant vectors keep every seed's relevance >= 0. (With a negative relevance
    # the threshold gamma * cos(q, c) rises as gamma falls: the rule itself is not monotone.)
    lower = gamma * factor
    assume(lower > 0)
    common = (corpus.query, corpus.seeds, corpus.graph, corpus.vectors, lambda_)
    strict = expand(*common, gamma, window, direction=direction)  # type: ignore[arg-type]
    loose = expand(*common, lower, window, direction=direction)  # type: ignore[arg-type]
    assert set(strict.chunk_ids) <= set(loose.chunk_ids)


@settings(max_examples=80, deadline=None)
@given(
    corpus=one_topic_corpora(),
    lambda_=st.floats(0.0, 1.0),
    gamma=st.floats(0.01, 0.6),
    window=st.integers(1, 3),
    direction=DIRECTIONS,
)
def test_when_every_neighbour_clears_its_bar_scar_equals_the_static_window(
    corpus: Corpus, lambda_: float, gamma: float, window: int, direction: str
) -> None:
    static = static_window(
        corpus.query,
        corpus.seeds,
        corpus.graph,
        corpus.vectors,
        window,
        direction,  # type: ignore[arg-type]
        lambda_=lambda_,
        gamma=gamma,
    )
    assert all(d.score > d.threshold + 0.03 for d in static.decisions)  # the derivation holds
    scar = expand(
        corpus.query,
        corpus.seeds,
        corpus.graph,
        corpus.vectors,
        lambda_,
        gamma,
        window,
        direction=direction,  # type: ignore[arg-type]
    )
    assert scar.chunk_ids == static.chunk_ids
    assert scar.decisions == static.decisions


@settings(max_examples=80, deadline=None)
@given(
    corpus=corpora(),
    lambda_=st.floats(0.0, 2.0),
    gamma=st.floats(0.01, 1.0),
    window=st.integers(1, 3),
    scales=st.lists(st.floats(0.01, 100.0), min_size=30, max_size=30),
)
def test_deterministic_and_blind_to_vector_scale_and_mapping_order(
    corpus: Corpus, lambda_: float, gamma: float, window: int, scales: list[float]
) -> None:
    args = (lambda_, gamma, window)
    first = expand(corpus.query, corpus.seeds, corpus.graph, corpus.vectors, *args)
    again = expand(corpus.query, corpus.seeds, corpus.graph, corpus.vectors, *args)
    assert first == again
    reordered = dict(reversed(list(corpus.vectors.items())))
    assert expand(corpus.query, corpus.seeds, corpus.graph, reordered, *args) == first
    assume(all(abs(d.score - d.threshold) > 1e-9 for d in first.decisions))
    scaled = {c: v * scales[i % len(scales)] for i, (c, v) in enumerate(corpus.vectors.items())}
    rescaled = expand(corpus.query * scales[-1], corpus.seeds, corpus.graph, scaled, *args)
    assert rescaled.chunk_ids == first.chunk_ids
    assert [d.accepted for d in rescaled.decisions] == [d.accepted for d in first.decisions]
    np.testing.assert_allclose(
        [d.score for d in rescaled.decisions], [d.score for d in first.decisions], atol=1e-9
    )


any_magnitude = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-1e-160, max_value=1e-160),
    st.floats(min_value=-1e160, max_value=1e160),
)


@given(st.lists(any_magnitude, min_size=1, max_size=8), st.booleans())
def test_the_fast_unit_vector_equals_the_checked_one_bit_for_bit(
    values: list[float], strided: bool
) -> None:
    """unit_vector_or_problem (one dot product) against vector_problem + as_unit_vector, for
    vectors of any magnitude, contiguous or not; no floating-point warning escapes (pytest turns
    warnings into errors)."""
    from scar_core.policy import unit_vector_or_problem, vector_problem
    from scar_core.scoring import as_unit_vector

    array = np.array(values, dtype=np.float64)
    if strided:
        array = np.repeat(array, 2)[::2]
    unit, problem = unit_vector_or_problem(array, len(values))
    expected_problem = vector_problem(array, len(values))
    assert problem == expected_problem
    if expected_problem is None:
        assert unit is not None
        with np.errstate(over="ignore", under="ignore"):
            expected = as_unit_vector(array)
        np.testing.assert_array_equal(unit, expected)
    else:
        assert unit is None
