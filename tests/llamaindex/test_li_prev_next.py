"""SCARNodePostprocessor in the style of LlamaIndex's tests/postprocessor/test_prev_next.py.

Linked TextNodes in a SimpleDocumentStore, 2-D vectors at chosen angles from the query, so every
cosine is known in closed form: the expected nodes and scores are derived by hand from the
paper's rule and then also checked against ``scar_core.expand``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from li_support import TableEmbedding, docstore_of, ids_and_scores, linked_nodes, scored
from llama_index.core.schema import QueryBundle

from scar_core import expand
from scar_llamaindex import SCARNodePostprocessor

# Angles (degrees) of each chunk's vector from the query's; the seed is n2.
ANGLES = [80.0, 30.0, 10.0, 20.0, 90.0]
TEXTS = [f"chunk {i}" for i in range(len(ANGLES))]
QUERY = "what does chunk two say?"


def unit(degrees: float) -> list[float]:
    return [math.cos(math.radians(degrees)), math.sin(math.radians(degrees))]


def cos_deg(degrees: float) -> float:
    return math.cos(math.radians(degrees))


def s_score(angle_n: float, angle_via: float, lambda_: float = 0.1) -> float:
    """The paper's S for a neighbour at angle_n reached across the boundary from angle_via."""
    return cos_deg(angle_n) - lambda_ * (1 - cos_deg(angle_n - angle_via))


@pytest.fixture
def embed_model() -> TableEmbedding:
    return TableEmbedding(
        {text: unit(angle) for text, angle in zip(TEXTS, ANGLES, strict=True)}, {QUERY: unit(0.0)}
    )


@pytest.fixture
def chain() -> list:
    return linked_nodes(TEXTS)


def run(chain: list, embed_model: TableEmbedding, **settings: object) -> list:
    postprocessor = SCARNodePostprocessor(
        budget=None, docstore=docstore_of(chain), embed_model=embed_model, **settings
    )
    return postprocessor.postprocess_nodes(
        scored([chain[2]], [0.42]), QueryBundle(QUERY, embedding=unit(0.0))
    )


def test_paper_settings_add_both_continuing_neighbours_with_their_s_scores(
    chain: list, embed_model: TableEmbedding
) -> None:
    # threshold = 0.8 * cos 10° = 0.788; S(n1) = cos 30° - 0.1 (1 - cos 20°) = 0.860 and
    # S(n3) = cos 20° - 0.1 (1 - cos 10°) = 0.938 pass; the seed keeps the retriever's 0.42.
    output = run(chain, embed_model)
    assert ids_and_scores(output) == [
        ("n1", pytest.approx(s_score(30, 10))),
        ("n2", 0.42),
        ("n3", pytest.approx(s_score(20, 10))),
    ]


@pytest.mark.parametrize(
    ("direction", "expected_ids"),
    [("next", ["n2", "n3"]), ("previous", ["n1", "n2"]), ("both", ["n1", "n2", "n3"])],
)
def test_direction_limits_the_side_expanded(
    chain: list, embed_model: TableEmbedding, direction: str, expected_ids: list[str]
) -> None:
    output = run(chain, embed_model, direction=direction)
    assert [item.node.node_id for item in output] == expected_ids


def test_window_two_considers_the_next_ring_and_rejects_what_does_not_continue(
    chain: list, embed_model: TableEmbedding
) -> None:
    # n0 (80°) and n4 (90°) have S = 0.138 and -0.066, far below 0.788: not added.
    output = run(chain, embed_model, window=2)
    assert [item.node.node_id for item in output] == ["n1", "n2", "n3"]
    assert output[0].node.metadata["scar_score"] == pytest.approx(s_score(30, 10))


def test_window_two_walks_through_an_accepted_neighbour_with_the_penalty_across_that_boundary() -> (
    None
):
    angles = [25.0, 30.0, 10.0, 20.0, 90.0]
    texts = [f"chunk {i}" for i in range(5)]
    model = TableEmbedding({t: unit(a) for t, a in zip(texts, angles, strict=True)})
    chain = linked_nodes(texts)
    postprocessor = SCARNodePostprocessor(
        budget=None, docstore=docstore_of(chain), embed_model=model, window=2
    )
    output = postprocessor.postprocess_nodes(
        scored([chain[2]], [0.42]), QueryBundle(QUERY, embedding=unit(0.0))
    )
    assert ids_and_scores(output) == [
        ("n0", pytest.approx(s_score(25, 30))),  # b measured from n1, the chunk it joins
        ("n1", pytest.approx(s_score(30, 10))),
        ("n2", 0.42),
        ("n3", pytest.approx(s_score(20, 10))),
    ]
    assert output[0].node.metadata["scar_via_id"] == "n1"
    assert output[0].node.metadata["scar_distance"] == 2


def test_gamma_one_requires_a_neighbour_more_relevant_than_its_seed(
    chain: list, embed_model: TableEmbedding
) -> None:
    output = run(chain, embed_model, gamma=1.0)
    assert ids_and_scores(output) == [("n2", 0.42)]


def test_lambda_moves_a_neighbour_across_the_threshold(embed_model: TableEmbedding) -> None:
    # n3 lies 40° from the query and 30° from the seed; with gamma 0.76 the threshold is 0.748:
    # without the penalty S = cos 40° = 0.766 passes, with lambda 1 S = 0.766 - 0.134 fails.
    angles = [80.0, 90.0, 10.0, 40.0, 90.0]
    model = TableEmbedding({t: unit(a) for t, a in zip(TEXTS, angles, strict=True)})
    threshold = 0.76 * cos_deg(10)
    no_penalty = s_score(40, 10, lambda_=0.0)
    with_penalty = s_score(40, 10, lambda_=1.0)
    assert no_penalty > threshold > with_penalty
    chain = linked_nodes(TEXTS)
    kept = run(chain, model, gamma=0.76, lambda_=0.0)
    dropped = run(chain, model, gamma=0.76, lambda_=1.0)
    assert [item.node.node_id for item in kept] == ["n2", "n3"]
    assert [item.node.node_id for item in dropped] == ["n2"]


@pytest.mark.parametrize("window", [1, 2, 3])
@pytest.mark.parametrize("direction", ["both", "previous", "next"])
def test_matches_scar_core_expand_on_the_same_vectors(
    chain: list, embed_model: TableEmbedding, window: int, direction: str
) -> None:
    output = run(chain, embed_model, window=window, direction=direction)
    links = {
        f"n{i}": (f"n{i - 1}" if i > 0 else None, f"n{i + 1}" if i < 4 else None) for i in range(5)
    }
    vectors = {f"n{i}": np.array(unit(a)) for i, a in enumerate(ANGLES)}
    reference = expand(
        np.array(unit(0.0)), ["n2"], links, vectors, window=window, direction=direction
    )
    assert sorted(item.node.node_id for item in output) == sorted(reference.chunk_ids)
    for item in output:
        chunk = reference.get(item.node.node_id)
        assert chunk is not None
        expected = 0.42 if chunk.origin == "seed" else chunk.score
        assert item.score == pytest.approx(expected)


def test_neighbours_carry_the_decision_trace(chain: list, embed_model: TableEmbedding) -> None:
    output = run(chain, embed_model)
    neighbour = output[2].node
    assert neighbour.metadata["scar_origin"] == "neighbor"
    assert neighbour.metadata["scar_seed_id"] == "n2"
    assert neighbour.metadata["scar_direction"] == "next"
    assert neighbour.metadata["scar_score"] == pytest.approx(s_score(20, 10))
    assert neighbour.metadata["scar_threshold"] == pytest.approx(0.8 * cos_deg(10))
    assert neighbour.metadata["scar_boundary_penalty"] == pytest.approx(1 - cos_deg(10))
    assert neighbour.metadata["scar_relevance"] == pytest.approx(cos_deg(20))
    seed = output[1].node
    assert seed.metadata["scar_origin"] == "seed"
    assert seed.metadata["scar_relevance"] == pytest.approx(cos_deg(10))


def test_postprocess_without_a_query_is_refused(chain: list, embed_model: TableEmbedding) -> None:
    postprocessor = SCARNodePostprocessor(
        budget=None, docstore=docstore_of(chain), embed_model=embed_model
    )
    with pytest.raises(ValueError, match="needs the query"):
        postprocessor.postprocess_nodes(scored([chain[2]], [0.42]))


def test_query_str_is_embedded_with_the_embed_model(
    chain: list, embed_model: TableEmbedding
) -> None:
    postprocessor = SCARNodePostprocessor(
        budget=None, docstore=docstore_of(chain), embed_model=embed_model
    )
    output = postprocessor.postprocess_nodes(scored([chain[2]], [0.42]), query_str=QUERY)
    assert [item.node.node_id for item in output] == ["n1", "n2", "n3"]
    assert embed_model.embedded_queries == [QUERY]


def test_empty_retrieval_returns_nothing(chain: list, embed_model: TableEmbedding) -> None:
    postprocessor = SCARNodePostprocessor(
        budget=None, docstore=docstore_of(chain), embed_model=embed_model
    )
    assert postprocessor.postprocess_nodes([], query_str=QUERY) == []
    assert embed_model.embedded_queries == []
