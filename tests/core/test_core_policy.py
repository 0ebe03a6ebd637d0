"""The SCAR policy on hand-built vectors whose cosines are known exactly.

The vectors use 3-4-5 triangles so that every cosine is an exact ratio: with ``q = (1, 0, 0)``,
``cos(q, (3, 4, 0)) = 0.6`` and ``cos((3, 4, 0), (4, 3, 0)) = 24/25 = 0.96``.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest

from scar_core import ExpansionResult, NeighborGraph, ScarPolicy, ScarSettings, expand, expand_batch
from scar_core.errors import InvalidSettingsError, InvalidVectorError, MissingVectorError

Q = np.array([1.0, 0.0, 0.0])


def line(*ids: str) -> dict[str, tuple[str | None, str | None]]:
    """Links of one document whose chunks are ``ids`` in order."""
    return {
        chunk: (ids[i - 1] if i > 0 else None, ids[i + 1] if i + 1 < len(ids) else None)
        for i, chunk in enumerate(ids)
    }


def decided(result: ExpansionResult) -> list[tuple[str, str, bool]]:
    return [(d.seed_id, d.neighbor_id, d.accepted) for d in result.decisions]


# -- the rule itself -------------------------------------------------------------------------------


def test_scores_thresholds_and_penalties_match_the_formula() -> None:
    vectors = {"c": [1.0, 0.0, 0.0], "n": [3.0, 4.0, 0.0], "m": [4.0, 3.0, 0.0]}
    result = expand(Q, ["c"], line("n", "c", "m"), vectors, lambda_=0.1, gamma=0.5)
    by_neighbour = {d.neighbor_id: d for d in result.decisions}
    n, m = by_neighbour["n"], by_neighbour["m"]
    # n: cos(q, n) = 0.6, cos(c, n) = 0.6, b = 0.4, S = 0.6 - 0.04 = 0.56 > 0.5 * 1
    assert n.relevance == pytest.approx(0.6)
    assert n.boundary_penalty == pytest.approx(0.4)
    assert n.score == pytest.approx(0.56)
    assert n.threshold == pytest.approx(0.5)
    assert n.accepted
    # m: cos(q, m) = 0.8, b = 0.2, S = 0.78
    assert m.score == pytest.approx(0.78)
    assert m.accepted
    assert result.chunk_ids == ["c", "n", "m"]
    assert result.get("n") is not None
    assert result.get("n").score == pytest.approx(0.56)  # type: ignore[union-attr]
    assert result.get("c").score == pytest.approx(1.0)  # type: ignore[union-attr]


def test_a_tie_is_rejected_because_the_rule_is_strict() -> None:
    vectors = {"c": [1.0, 0.0, 0.0], "n": [3.0, 4.0, 0.0]}
    # lambda 0: S = cos(q, n) = 0.6 exactly; threshold = 0.6 * cos(q, c) = 0.6 exactly.
    tie = expand(Q, ["c"], line("c", "n"), vectors, lambda_=0.0, gamma=0.6)
    (decision,) = tie.decisions
    assert decision.score == decision.threshold == 0.6
    assert not decision.accepted
    assert tie.chunk_ids == ["c"]
    just_below = expand(Q, ["c"], line("c", "n"), vectors, lambda_=0.0, gamma=0.6 - 1e-12)
    assert just_below.chunk_ids == ["c", "n"]


def test_gamma_one_needs_a_neighbour_more_relevant_than_its_seed() -> None:
    vectors = {"c": [4.0, 3.0, 0.0], "better": [1.0, 0.0, 0.0], "worse": [3.0, 4.0, 0.0]}
    result = expand(Q, ["c"], line("worse", "c", "better"), vectors, lambda_=0.0, gamma=1.0)
    assert result.chunk_ids == ["c", "better"]


def test_a_weak_seed_gets_a_lower_bar() -> None:
    vectors = {"weak": [3.0, 4.0, 0.0], "strong": [1.0, 0.0, 0.0], "n1": [3.0, 0.0, 4.0]}
    vectors["n2"] = vectors["n1"]
    links = {
        "weak": (None, "n1"),
        "n1": ("weak", None),
        "strong": (None, "n2"),
        "n2": ("strong", None),
    }
    result = expand(Q, ["strong", "weak"], links, vectors, lambda_=0.0, gamma=0.8)
    # cos(q, n) = 0.6 for both neighbours: above 0.8 * 0.6 (weak seed), below 0.8 * 1 (strong).
    assert result.chunk_ids == ["strong", "weak", "n1"]


def test_with_a_negative_seed_relevance_a_lower_gamma_raises_the_bar() -> None:
    # The paper's rule as written: threshold = gamma * cos(q, c). For cos(q, c) < 0 a smaller
    # gamma gives a *higher* threshold, so "lower gamma expands more" holds only for seeds with
    # non-negative relevance (every practical retrieval result). Pinned here so it stays known.
    q = np.array([1.0, 0.0])
    vectors = {
        "c": [-3.0, 4.0],
        "n": [-1.0, math.sqrt(15.0)],
    }  # cos(q, c) = -0.6, cos(q, n) = -0.25
    links = line("c", "n")
    assert expand(q, ["c"], links, vectors, lambda_=0.0, gamma=0.8).chunk_ids == ["c", "n"]
    assert expand(q, ["c"], links, vectors, lambda_=0.0, gamma=0.2).chunk_ids == ["c"]


# -- edges, windows and directions ----------------------------------------------------------------


ALL_RELEVANT = {name: [1.0, 0.01 * i, 0.0] for i, name in enumerate(["a", "b", "c", "d", "e"])}


def test_a_seed_at_either_edge_has_neighbours_on_one_side_only() -> None:
    links = line("a", "b", "c", "d", "e")
    first = expand(Q, ["a"], links, ALL_RELEVANT)
    assert decided(first) == [("a", "b", True)]
    last = expand(Q, ["e"], links, ALL_RELEVANT)
    assert decided(last) == [("e", "d", True)]


def test_a_window_larger_than_the_document_stops_at_its_edges() -> None:
    result = expand(Q, ["c"], line("a", "b", "c", "d", "e"), ALL_RELEVANT, window=50)
    assert set(result.chunk_ids) == {"a", "b", "c", "d", "e"}
    assert sorted(d.neighbor_id for d in result.decisions) == ["a", "b", "d", "e"]
    assert {d.distance for d in result.decisions} == {1, 2}


def test_a_one_chunk_document_has_no_neighbours() -> None:
    result = expand(Q, ["a"], {"a": (None, None)}, ALL_RELEVANT, window=3)
    assert result.chunk_ids == ["a"]
    assert result.decisions == ()


def test_direction_previous_and_next() -> None:
    links = line("a", "b", "c", "d", "e")
    assert expand(Q, ["c"], links, ALL_RELEVANT, window=2, direction="previous").chunk_ids == [
        "c",
        "b",
        "a",
    ]
    assert expand(Q, ["c"], links, ALL_RELEVANT, window=2, direction="next").chunk_ids == [
        "c",
        "d",
        "e",
    ]


def test_window_two_needs_the_chunk_between_to_be_accepted() -> None:
    vectors = {"c": [1.0, 0.0, 0.0], "mid": [0.0, 1.0, 0.0], "far": [1.0, 0.0, 0.0]}
    result = expand(Q, ["c"], line("c", "mid", "far"), vectors, window=2)
    assert decided(result) == [("c", "mid", False)]  # "far" is never decided: no holes
    assert result.chunk_ids == ["c"]


def test_window_two_measures_the_penalty_against_the_accepted_neighbour() -> None:
    vectors = {"c": [1.0, 0.0, 0.0], "mid": [4.0, 3.0, 0.0], "far": [3.0, 4.0, 0.0]}
    result = expand(Q, ["c"], line("c", "mid", "far"), vectors, lambda_=0.5, gamma=0.5, window=2)
    mid, far = result.decisions
    assert (mid.via_id, mid.distance) == ("c", 1)
    assert (far.via_id, far.distance) == ("mid", 2)
    # b(mid, far) = 1 - 24/25 = 0.04, not b(c, far) = 0.4.
    assert far.boundary_penalty == pytest.approx(0.04)
    assert far.score == pytest.approx(0.6 - 0.5 * 0.04)
    # The threshold stays the seed's: 0.5 * cos(q, c) = 0.5, not 0.5 * cos(q, mid) = 0.4.
    assert far.threshold == pytest.approx(0.5)
    assert mid.threshold == pytest.approx(0.5)
    assert result.chunk_ids == ["c", "mid", "far"]


def test_window_two_threshold_is_not_relative_to_the_neighbour() -> None:
    # far scores 0.6 - 0.1 * 0.04 = 0.596: above 0.7 * cos(q, mid) = 0.56 but below 0.7 * 1.
    vectors = {"c": [1.0, 0.0, 0.0], "mid": [4.0, 3.0, 0.0], "far": [3.0, 4.0, 0.0]}
    result = expand(Q, ["c"], line("c", "mid", "far"), vectors, lambda_=0.1, gamma=0.7, window=2)
    assert decided(result) == [("c", "mid", True), ("c", "far", False)]


# -- seeds, duplicates and repeated decisions -----------------------------------------------------


def test_a_neighbour_that_is_a_seed_is_not_decided_and_the_walk_passes_through_it() -> None:
    links = line("a", "b", "c", "d")
    result = expand(Q, ["b", "c"], links, ALL_RELEVANT, window=2, direction="next")
    assert ("b", "c", True) not in decided(result)
    assert all(d.neighbor_id not in {"b", "c"} for d in result.decisions)
    (b_to_d,) = [d for d in result.decisions if d.seed_id == "b"]
    assert (b_to_d.neighbor_id, b_to_d.via_id, b_to_d.distance) == ("d", "c", 2)
    assert [c.origin for c in result.selected] == ["seed", "seed", "neighbor"]


def test_an_accepted_neighbour_is_not_decided_twice() -> None:
    result = expand(Q, ["a", "c"], line("a", "b", "c"), ALL_RELEVANT)
    assert [d.neighbor_id for d in result.decisions] == ["b"]
    chunk = result.get("b")
    assert chunk is not None
    assert (chunk.seed_id, chunk.seed_rank) == ("a", 0)


def test_a_rejected_neighbour_may_be_accepted_from_another_seed() -> None:
    vectors = {"strong": [1.0, 0.0, 0.0], "n": [3.0, 4.0, 0.0], "weak": [3.0, 0.0, 4.0]}
    result = expand(Q, ["strong", "weak"], line("strong", "n", "weak"), vectors, lambda_=0.0)
    assert decided(result) == [("strong", "n", False), ("weak", "n", True)]
    assert result.chunk_ids == ["strong", "weak", "n"]


def test_duplicate_seeds_count_once_with_their_first_rank() -> None:
    result = expand(Q, ["b", "a", "b", "a"], line("a", "b"), ALL_RELEVANT)
    assert result.seed_ids == ["b", "a"]
    assert [c.seed_rank for c in result.selected] == [0, 1]
    assert result.decisions == ()


def test_no_seeds_give_an_empty_result() -> None:
    result = expand(Q, [], line("a", "b"), ALL_RELEVANT)
    assert result.chunk_ids == []
    assert result.decisions == ()
    assert expand_batch(np.stack([Q, Q]), [[], []], {}, {})[1].chunk_ids == []


# -- bad links ------------------------------------------------------------------------------------


def test_self_links_are_ignored() -> None:
    links = {"a": ("a", "b"), "b": ("a", "b")}
    result = expand(Q, ["a", "b"], links, ALL_RELEVANT, window=3)
    assert result.chunk_ids == ["a", "b"]
    assert result.decisions == ()


def test_cycles_are_walked_at_most_once() -> None:
    links = {"a": ("c", "b"), "b": ("a", "c"), "c": ("b", "a")}
    result = expand(Q, ["a"], links, ALL_RELEVANT, window=10)
    assert sorted(result.chunk_ids) == ["a", "b", "c"]
    assert sorted(d.neighbor_id for d in result.decisions) == ["b", "c"]


def test_links_across_known_documents_are_refused() -> None:
    links = {"a": (None, "b"), "b": ("a", "x"), "x": ("b", None)}
    graph = NeighborGraph(links, {"a": "doc1", "b": "doc1", "x": "doc2"})
    assert expand(Q, ["b"], graph, {**ALL_RELEVANT, "x": [1.0, 0.0, 0.0]}).chunk_ids == ["b", "a"]
    # Without document ids the same link is followed.
    assert "x" in expand(Q, ["b"], links, {**ALL_RELEVANT, "x": [1.0, 0.0, 0.0]}).chunk_ids


def test_dangling_links_are_skipped_without_losing_the_seed() -> None:
    result = expand(Q, ["a"], {"a": ("ghost", "b")}, ALL_RELEVANT)
    assert result.chunk_ids == ["a", "b"]
    assert [(s.neighbor_id, s.reason) for s in result.skipped] == [("ghost", "missing_vector")]


# -- vectors ---------------------------------------------------------------------------------------


def test_a_zero_query_is_refused() -> None:
    with pytest.raises(InvalidVectorError, match="zero vector"):
        expand(np.zeros(3), ["a"], line("a", "b"), ALL_RELEVANT)


def test_a_nan_query_or_a_matrix_query_is_refused() -> None:
    with pytest.raises(InvalidVectorError, match="NaN"):
        expand(np.array([np.nan, 1.0, 0.0]), ["a"], {}, ALL_RELEVANT)
    with pytest.raises(InvalidVectorError, match="1-D"):
        expand(np.ones((2, 3)), ["a"], {}, ALL_RELEVANT)


def test_a_zero_seed_is_refused_and_a_missing_seed_vector_too() -> None:
    with pytest.raises(InvalidVectorError, match=r"seed 'z'.*zero vector"):
        expand(Q, ["z"], line("z", "a"), {**ALL_RELEVANT, "z": [0.0, 0.0, 0.0]})
    with pytest.raises(MissingVectorError, match="seed 'nope' has no vector"):
        expand(Q, ["nope"], {}, ALL_RELEVANT)


def test_a_zero_neighbour_is_skipped_with_a_warning_naming_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    vectors = {**ALL_RELEVANT, "z": [0.0, 0.0, 0.0]}
    with caplog.at_level(logging.WARNING, logger="scar_core"):
        result = expand(Q, ["b"], line("z", "b", "c"), vectors)
    assert result.chunk_ids == ["b", "c"]
    (skipped,) = result.skipped
    assert (skipped.neighbor_id, skipped.reason) == ("z", "invalid_vector")
    assert "'z'" in caplog.text
    assert "zero vector" in caplog.text


@pytest.mark.parametrize(
    ("bad", "detail"),
    [
        ([np.inf, 0.0, 0.0], "NaN or infinite"),
        ([1.0, 0.0], "dimension 2"),
        ([[1.0, 0.0, 0.0]], "1-D"),
    ],
)
def test_other_unusable_neighbours_are_skipped(bad: list[float], detail: str) -> None:
    result = expand(Q, ["a"], line("a", "bad"), {**ALL_RELEVANT, "bad": bad})
    assert result.chunk_ids == ["a"]
    assert detail in result.skipped[0].detail


def test_non_normalised_vectors_give_identical_decisions() -> None:
    rng = np.random.default_rng(5)
    ids = [f"c{i}" for i in range(12)]
    vectors = {i: rng.standard_normal(8) for i in ids}
    query = rng.standard_normal(8)
    scaled = {i: v * rng.uniform(0.01, 100.0) for i, v in vectors.items()}
    for window in (1, 2):
        plain = expand(
            query / np.linalg.norm(query),
            ["c3", "c8"],
            line(*ids),
            {i: v / np.linalg.norm(v) for i, v in vectors.items()},
            lambda_=0.1,
            gamma=0.3,
            window=window,
        )
        other = expand(
            query * 42.0, ["c3", "c8"], line(*ids), scaled, lambda_=0.1, gamma=0.3, window=window
        )
        assert other.chunk_ids == plain.chunk_ids
        assert decided(other) == decided(plain)
        np.testing.assert_allclose(
            [d.score for d in other.decisions], [d.score for d in plain.decisions]
        )
        np.testing.assert_allclose(
            [d.threshold for d in other.decisions], [d.threshold for d in plain.decisions]
        )


def test_float32_vectors_and_lookup_objects_work() -> None:
    from scar_core import InMemoryVectors

    vectors = InMemoryVectors({k: np.asarray(v, dtype=np.float32) for k, v in ALL_RELEVANT.items()})
    assert expand(Q.astype(np.float32), ["b"], line("a", "b", "c"), vectors).chunk_ids == [
        "b",
        "a",
        "c",
    ]


# -- settings --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"lambda_": -0.1}, r"lambda_=-0\.1 is not valid; it must be a finite number >= 0"),
        ({"lambda_": float("inf")}, r"lambda_=inf"),
        ({"gamma": 0}, r"gamma=0 is not valid; it must lie in \(0, 1\]"),
        ({"gamma": 1.5}, r"gamma=1\.5 is not valid; it must lie in \(0, 1\]"),
        ({"gamma": -0.2}, r"gamma=-0\.2"),
        ({"window": 0}, r"window=0 is not valid; it must be an integer >= 1"),
        ({"window": 1.5}, r"window=1\.5 is not valid; it must be an integer >= 1"),
        ({"window": True}, r"window=True is not valid"),
        ({"direction": "sideways"}, r"direction='sideways' is not valid; use one of both"),
    ],
)
def test_settings_errors_name_the_value_and_the_valid_range(
    settings: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidSettingsError, match=message):
        ScarSettings(**settings)  # type: ignore[arg-type]
    with pytest.raises(InvalidSettingsError, match=message):
        expand(Q, ["a"], {}, ALL_RELEVANT, **settings)  # type: ignore[arg-type]


def test_edge_values_that_are_allowed() -> None:
    assert ScarSettings(gamma=1).gamma == 1.0
    assert ScarSettings(lambda_=0).lambda_ == 0.0
    assert ScarSettings(window=7).window == 7


def test_numpy_scalars_are_accepted_and_stored_as_python_numbers() -> None:
    settings = ScarSettings(lambda_=np.float32(0.25), gamma=np.float64(0.5), window=np.int64(2))
    assert type(settings.lambda_) is float
    assert type(settings.gamma) is float
    assert type(settings.window) is int
    assert settings.window == 2
    assert ScarPolicy(settings).settings is settings


def test_expand_batch_needs_one_seed_list_per_query() -> None:
    with pytest.raises(InvalidVectorError, match="2 queries but 1 seed lists"):
        expand_batch(np.stack([Q, Q]), [["a"]], {}, ALL_RELEVANT)
