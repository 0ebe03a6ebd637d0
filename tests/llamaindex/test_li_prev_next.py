"""SCARNodePostprocessor in the style of LlamaIndex's tests/postprocessor/test_prev_next.py.

Linked TextNodes in a SimpleDocumentStore with 2-D vectors at chosen angles from the query, so
every cosine is known in closed form and the expected nodes and scores are derived by hand.
"""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from llama_index.core.schema import QueryBundle, TextNode

from li_support import angle, docstore_of, ids_and_scores, linked_nodes, scored
from scar_core import BudgetSettings, Chunk, PaperSettings, budget_select, paper_expand
from scar_llamaindex import SCARNodePostprocessor

QUERY = QueryBundle("what does a2 say?", embedding=angle(0.0))

# Degrees from the query. a2 is the best hit and a3 continues it; a1 and a4 drift off topic;
# b1 is a weaker hit; c0 the weakest, and c1 continues it.
A = linked_nodes("a", [angle(d) for d in (85, 80, 10, 25, 88, 89)])
B = linked_nodes("b", [angle(d) for d in (70, 60, 75, 80)])
C = linked_nodes("c", [angle(d) for d in (65, 60)])
HITS = [A[2], B[1], C[0]]
SCORES = [0.91, 0.5, 0.45]


def cos(degrees: float) -> float:
    return math.cos(math.radians(degrees))


def s_score(degrees: float, via: float, lambda_: float = 0.1) -> float:
    """S of a neighbour at ``degrees`` reached across the boundary from a chunk at ``via``."""
    return cos(degrees) - lambda_ * (1 - cos(degrees - via))


def run(**settings: object) -> list:
    postprocessor = SCARNodePostprocessor(filters=None, docstore=docstore_of(A + B + C), **settings)
    return postprocessor.postprocess_nodes(scored(HITS, SCORES), QUERY)


def test_budget_mode_spends_the_weakest_hit_on_the_continuation() -> None:
    # keep = 2 (a2, b1). The third slot: a3, joined to a2, bids S + alpha (this query's
    # continuity bonus), above c0's cos 65° and a1's cos 80° + alpha - 0.1 b. Hits keep their
    # scores; a3 gets cos 25°.
    output = run()
    assert ids_and_scores(output) == [
        ("a2", 0.91),
        ("a3", pytest.approx(cos(25))),
        ("b1", 0.5),
    ]
    assert [n.node.metadata["scar_passage"] for n in output] == [0, 0, 1]
    assert [n.node.metadata["scar_origin"] for n in output] == ["hit", "neighbor", "hit"]
    assert [n.node.metadata["scar_seed_id"] for n in output] == ["a2", "a2", "b1"]
    decision = output[1].node.metadata["scar_decision"]
    assert decision["relevance"] == pytest.approx(cos(25))
    assert decision["boundary_penalty"] == pytest.approx(1 - cos(15))
    assert decision["score"] == pytest.approx(s_score(25, 10))
    assert output[1].node.metadata["scar_score"] == pytest.approx(s_score(25, 10))
    assert output[0].node.metadata["scar_score"] == pytest.approx(cos(10))


def test_paper_mode_expands_every_seed_by_the_papers_rule() -> None:
    # Thresholds 0.8 cos(seed): a3 (0.90 > 0.79) and c1 (0.50 > 0.34) pass; a1, b0, b2 fail.
    output = run(mode="paper")
    assert ids_and_scores(output) == [
        ("a2", 0.91),
        ("a3", pytest.approx(cos(25))),
        ("b1", 0.5),
        ("c0", 0.45),
        ("c1", pytest.approx(cos(60))),
    ]
    assert [n.node.metadata["scar_passage"] for n in output] == [0, 0, 1, 2, 2]


def test_a_preceding_neighbour_comes_before_its_hit() -> None:
    nodes = linked_nodes("d", [angle(d) for d in (80, 15, 5, 85)])
    postprocessor = SCARNodePostprocessor(filters=None, docstore=docstore_of(nodes), keep=1)
    output = postprocessor.postprocess_nodes(scored([nodes[2], nodes[0]], [0.8, 0.2]), QUERY)
    assert ids_and_scores(output) == [("d1", pytest.approx(cos(15))), ("d2", 0.8)]


@pytest.mark.parametrize("top_n", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("mode", ["budget", "paper"])
def test_the_selection_is_scar_cores_on_the_same_vectors(mode: str, top_n: int) -> None:
    everything = {
        n.node_id: Chunk(
            n.node_id,
            n.embedding,
            n.prev_node and n.prev_node.node_id,
            n.next_node and n.next_node.node_id,
        )
        for n in A + B + C
    }
    ids = [n.node_id for n in HITS]
    if mode == "paper":
        expected = paper_expand(QUERY.embedding, ids, everything, PaperSettings(k=top_n))
    else:
        expected = budget_select(QUERY.embedding, ids, everything, BudgetSettings(k=top_n))
    output = run(mode=mode, top_n=top_n)
    assert [n.node.node_id for n in output] == expected.chunk_ids
    for node in output:
        record = expected.get(node.node.node_id)
        assert record is not None
        assert node.node.metadata["scar_score"] == pytest.approx(record.score)
        if record.decision is not None:
            assert node.node.metadata["scar_decision"]["threshold"] == pytest.approx(
                record.decision.threshold
            )


def test_settings_reach_the_selection() -> None:
    # With keep=3 every hit stays: plain top-k. With no bonus, b1 (0.5) beats a1 and c0 alike.
    assert [n.node.node_id for n in run(keep=3)] == ["a2", "b1", "c0"]
    assert [n.node.node_id for n in run(continuity_bonus=0.0)] == ["a2", "a3", "b1"]
    assert [n.node.node_id for n in run(mode="paper", gamma=1.0)] == ["a2", "b1", "c0", "c1"]
    assert [n.node.node_id for n in run(mode="paper", direction="previous")] == ["a2", "b1", "c0"]
    # gamma 0.05: a0 passes (S 0.087 > 0.049), but two steps from a2: only with window=2.
    assert [n.node.node_id for n in run(mode="paper", gamma=0.05)][:3] == ["a1", "a2", "a3"]
    wide = [n.node.node_id for n in run(mode="paper", gamma=0.05, window=2)]
    assert wide[:4] == ["a0", "a1", "a2", "a3"]


def test_neighbours_never_lack_a_score_and_hits_keep_theirs_even_none() -> None:
    output = SCARNodePostprocessor(
        filters=None, docstore=docstore_of(A + B + C), mode="paper"
    ).postprocess_nodes(scored(HITS, [None, 0.5, 0.45]), QUERY)
    scores = dict(ids_and_scores(output))
    assert scores["a2"] is None
    assert scores["a3"] == pytest.approx(cos(25))
    assert scores["c1"] == pytest.approx(cos(60))


def test_the_stores_and_the_callers_nodes_are_not_changed() -> None:
    docstore = docstore_of(A + B + C)
    hits = scored([n.model_copy(deep=True) for n in HITS], SCORES)
    before = [n.node.model_dump() for n in hits]
    SCARNodePostprocessor(filters=None, docstore=docstore, mode="paper").postprocess_nodes(
        hits, QUERY
    )
    assert [n.node.model_dump() for n in hits] == before
    assert docstore.get_node("a3").metadata == {}


def test_scar_metadata_is_hidden_from_the_llm_and_the_embedder() -> None:
    node = run()[1].node
    assert isinstance(node, TextNode)
    assert "scar_" not in node.get_content(metadata_mode="llm")
    assert "scar_" not in node.get_content(metadata_mode="embed")
    assert "scar_decision" in node.get_content(metadata_mode="all")


def test_nothing_is_lost_in_paper_mode_and_kept_hits_never_in_budget_mode() -> None:
    for keep in (1, 2, 3):
        output = {n.node.node_id for n in run(keep=keep)}
        assert {n.node_id for n in HITS[:keep]} <= output
    assert {n.node_id for n in HITS} <= {n.node.node_id for n in run(mode="paper")}


def test_empty_input_gives_empty_output() -> None:
    assert run_empty() == []


def run_empty() -> list:
    return SCARNodePostprocessor(filters=None, docstore=docstore_of(A)).postprocess_nodes([], QUERY)


def test_a_query_without_embedding_is_embedded_with_the_embed_model() -> None:
    from li_support import WordHashEmbedding

    model = WordHashEmbedding({"what does a2 say?": angle(0.0)})
    postprocessor = SCARNodePostprocessor(
        filters=None, docstore=docstore_of(A + B + C), embed_model=model
    )
    output = postprocessor.postprocess_nodes(scored(HITS, SCORES), query_str="what does a2 say?")
    assert [n.node.node_id for n in output] == ["a2", "a3", "b1"]
    assert model.queries_embedded == 1
    assert np.isclose(output[1].score, cos(25))


@settings(max_examples=40, deadline=None)
@given(
    angles=st.lists(st.floats(0, 180), min_size=2, max_size=9),
    picks=st.lists(st.integers(0, 8), min_size=1, max_size=6, unique=True),
    top_n=st.none() | st.integers(1, 8),
    mode=st.sampled_from(["budget", "paper"]),
)
def test_counts_kept_hits_and_order_hold_for_any_chain(
    angles: list[float], picks: list[int], top_n: int | None, mode: str
) -> None:
    nodes = linked_nodes("p", [angle(d) for d in angles])
    hits = scored([nodes[i % len(nodes)] for i in picks], [1.0 - r / 10 for r in range(len(picks))])
    scar = SCARNodePostprocessor(filters=None, docstore=docstore_of(nodes), mode=mode, top_n=top_n)
    output = scar.postprocess_nodes(hits, QUERY)
    ids = [n.node.node_id for n in output]
    unique_hits = list(dict.fromkeys(h.node.node_id for h in hits))
    k = top_n or len(hits)
    assert len(ids) == len(set(ids))
    assert all(n.score is not None for n in output if n.node.metadata["scar_origin"] == "neighbor")
    if mode == "budget":
        assert len(ids) <= k
        assert len(ids) == k or len(unique_hits) < k
        assert set(unique_hits[: BudgetSettings(k=k).kept]) <= set(ids)
    else:
        assert set(unique_hits[:k]) <= set(ids)
    for passage in {n.node.metadata["scar_passage"] for n in output}:
        positions = [
            int(n.node.node_id[1:]) for n in output if n.node.metadata["scar_passage"] == passage
        ]
        assert positions == list(range(positions[0], positions[0] + len(positions)))
    assert asyncio.run(scar.apostprocess_nodes(hits, QUERY)) == output
