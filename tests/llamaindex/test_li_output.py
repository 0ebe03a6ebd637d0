"""What the postprocessor returns: passage order, no duplicates, copies, merged passages."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from li_support import TableEmbedding, docstore_of, ids_and_scores, linked_nodes, scored
from llama_index.core.schema import (
    BaseNode,
    MetadataMode,
    NodeRelationship,
    QueryBundle,
    TextNode,
)

from scar_llamaindex import TRACE_METADATA_KEYS, FetchedNodes, SCARNodePostprocessor

QUERY = "query"
Q = [1.0, 0.0]


def unit(degrees: float) -> list[float]:
    return [math.cos(math.radians(degrees)), math.sin(math.radians(degrees))]


# Angles from the query. Accepted neighbours lie near it, rejected ones at 90°.
A_ANGLES = [90.0, 15.0, 5.0, 90.0, 20.0, 5.0, 20.0, 90.0]
B_ANGLES = [10.0, 5.0, 90.0]


@pytest.fixture
def corpus() -> tuple[list[TextNode], list[TextNode], TableEmbedding]:
    a_texts = [f"alpha {i}" for i in range(len(A_ANGLES))]
    b_texts = [f"beta {i}" for i in range(len(B_ANGLES))]
    doc_a = linked_nodes(a_texts, document_id="doc-a", prefix="A")
    doc_b = linked_nodes(b_texts, document_id="doc-b", prefix="B")
    vectors = {t: unit(a) for t, a in zip(a_texts + b_texts, A_ANGLES + B_ANGLES, strict=True)}
    return doc_a, doc_b, TableEmbedding(vectors)


def postprocess(
    corpus: tuple[list[TextNode], list[TextNode], TableEmbedding],
    seeds: Sequence[BaseNode],
    scores: Sequence[float],
    **settings: object,
) -> list:
    doc_a, doc_b, model = corpus
    scar = SCARNodePostprocessor(
        budget=None, docstore=docstore_of(doc_a + doc_b), embed_model=model, **settings
    )
    return scar.postprocess_nodes(scored(seeds, scores), QueryBundle(QUERY, embedding=Q))


def test_passages_follow_seed_rank_and_document_order_within(corpus) -> None:
    doc_a, doc_b, _ = corpus
    output = postprocess(corpus, [doc_a[5], doc_b[1], doc_a[2]], [0.9, 0.8, 0.7])
    # Passages: A4-A5-A6 (seed rank 0), B0-B1 (rank 1), A1-A2 (rank 2). Not id order, which
    # would put A1 first, and not "seeds then neighbours" either.
    assert [item.node.node_id for item in output] == ["A4", "A5", "A6", "B0", "B1", "A1", "A2"]


def test_two_seeds_in_one_passage_keep_document_order_and_their_own_scores(corpus) -> None:
    doc_a, _, _ = corpus
    output = postprocess(corpus, [doc_a[6], doc_a[4]], [0.9, 0.5])
    assert [item.node.node_id for item in output] == ["A4", "A5", "A6"]
    scores = dict(ids_and_scores(output))
    assert scores["A6"] == 0.9
    assert scores["A4"] == 0.5
    assert output[1].node.metadata["scar_origin"] == "neighbor"


def test_a_seed_that_is_also_a_neighbour_appears_once_with_its_retrieval_score(corpus) -> None:
    # LlamaIndex issue #23199: a neighbour must not overwrite a retrieved node's score.
    doc_a, _, _ = corpus
    output = postprocess(corpus, [doc_a[5], doc_a[4], doc_a[5]], [0.9, 0.3, 0.2])
    assert ids_and_scores(output) == [
        ("A4", 0.3),
        ("A5", 0.9),
        ("A6", pytest.approx(0.936, abs=1e-3)),
    ]
    assert output[0].node.metadata["scar_origin"] == "seed"


def test_every_seed_is_returned_even_when_nothing_is_added(corpus) -> None:
    doc_a, doc_b, _ = corpus
    # With gamma 1 no neighbour here is more relevant than its seed, so none is added.
    seeds = [doc_a[2], doc_b[1], doc_a[5]]
    output = postprocess(corpus, seeds, [0.3, 0.2, 0.1], gamma=1.0)
    assert ids_and_scores(output) == [("A2", 0.3), ("B1", 0.2), ("A5", 0.1)]


class ObjectSource:
    """A NeighborSource handing out the very node objects it holds (no copies)."""

    def __init__(self, nodes: Sequence[BaseNode]) -> None:
        self.nodes = {node.node_id: node for node in nodes}
        self.calls: list[tuple[list[str], list[str]]] = []

    def fetch(self, node_ids: Sequence[str], vector_ids: Sequence[str]) -> FetchedNodes:
        self.calls.append((list(node_ids), list(vector_ids)))
        return FetchedNodes(nodes={i: self.nodes[i] for i in node_ids if i in self.nodes})

    async def afetch(self, node_ids: Sequence[str], vector_ids: Sequence[str]) -> FetchedNodes:
        return self.fetch(node_ids, vector_ids)


def test_returned_nodes_are_copies_and_the_inputs_stay_untouched(corpus) -> None:
    doc_a, doc_b, model = corpus
    for node in doc_a:
        node.metadata["title"] = "Alpha"
        node.excluded_embed_metadata_keys = ["title"]  # the table embeds the bare text
    source = ObjectSource(doc_a + doc_b)
    before = {
        node.node_id: (dict(node.metadata), list(node.excluded_llm_metadata_keys)) for node in doc_a
    }
    seeds = scored([doc_a[5]], [0.9])
    scar = SCARNodePostprocessor(budget=None, neighbor_source=source, embed_model=model)
    output = scar.postprocess_nodes(seeds, QueryBundle(QUERY, embedding=Q))
    assert [item.node.node_id for item in output] == ["A4", "A5", "A6"]
    for node in doc_a:
        assert (dict(node.metadata), list(node.excluded_llm_metadata_keys)) == before[node.node_id]
    assert seeds[0].score == 0.9
    assert all(item.node is not source.nodes[item.node.node_id] for item in output)
    for item in output:
        llm_view = item.node.get_content(metadata_mode=MetadataMode.LLM)
        embed_view = item.node.get_content(metadata_mode=MetadataMode.EMBED)
        assert "scar_" not in llm_view
        assert "scar_" not in embed_view
        assert "title: Alpha" in llm_view
        assert item.node.excluded_embed_metadata_keys[0] == "title"
        assert set(item.node.metadata) - {"title"} <= set(TRACE_METADATA_KEYS)


def test_a_custom_neighbor_source_is_asked_once_per_hop(corpus) -> None:
    doc_a, doc_b, model = corpus
    source = ObjectSource(doc_a + doc_b)
    scar = SCARNodePostprocessor(budget=None, neighbor_source=source, embed_model=model, window=2)
    scar.postprocess_nodes(
        scored([doc_a[5], doc_a[2]], [0.9, 0.8]), QueryBundle(QUERY, embedding=Q)
    )
    assert source.calls == [(["A4", "A6", "A1", "A3"], ["A5", "A2"]), (["A7", "A0"], [])]


# -- merged passages ---------------------------------------------------------------------------

DOCUMENT = (
    "Section 3.2 says the sender retransmits after the timer fires. The receiver acknowledges "
    "every second segment, and the window shrinks when the buffer fills up completely."
)


def overlapping_chunks() -> list[TextNode]:
    """Three chunks of DOCUMENT overlapping by 20 characters, with their offsets, like a splitter."""
    spans = [(0, 70), (50, 120), (100, len(DOCUMENT))]
    nodes = linked_nodes([DOCUMENT[s:e] for s, e in spans], document_id="rfc", prefix="C")
    for node, (start, end) in zip(nodes, spans, strict=True):
        node.start_char_idx = start
        node.end_char_idx = end
    return nodes


def test_merge_passages_returns_one_node_per_passage_with_overlap_removed() -> None:
    chunks = overlapping_chunks()
    model = TableEmbedding(
        {c.text: unit(a) for c, a in zip(chunks, [15.0, 5.0, 15.0], strict=True)}
    )
    scar = SCARNodePostprocessor(
        budget=None, docstore=docstore_of(chunks), embed_model=model, merge_passages=True
    )
    output = scar.postprocess_nodes(scored([chunks[1]], [0.77]), QueryBundle(QUERY, embedding=Q))
    assert len(output) == 1
    merged = output[0]
    assert merged.node.get_content() == DOCUMENT
    assert merged.score == 0.77
    assert merged.node.metadata["scar_node_ids"] == ["C0", "C1", "C2"]
    assert merged.node.metadata["scar_seed_id"] == "C1"
    assert (merged.node.start_char_idx, merged.node.end_char_idx) == (0, len(DOCUMENT))
    assert merged.node.relationships[NodeRelationship.SOURCE].node_id == "rfc"
    assert NodeRelationship.PREVIOUS not in merged.node.relationships
    assert "scar_" not in merged.node.get_content(metadata_mode=MetadataMode.LLM)


def test_merge_passages_keeps_a_lone_seed_as_it_was_retrieved() -> None:
    chunks = overlapping_chunks()
    model = TableEmbedding(
        {c.text: unit(a) for c, a in zip(chunks, [90.0, 5.0, 90.0], strict=True)}
    )
    scar = SCARNodePostprocessor(
        budget=None, docstore=docstore_of(chunks), embed_model=model, merge_passages=True
    )
    output = scar.postprocess_nodes(scored([chunks[1]], [0.77]), QueryBundle(QUERY, embedding=Q))
    assert ids_and_scores(output) == [("C1", 0.77)]
    assert output[0].node.get_content() == chunks[1].text


def test_merge_passages_partial_run_stitches_only_the_selected_chunks() -> None:
    chunks = overlapping_chunks()
    model = TableEmbedding(
        {c.text: unit(a) for c, a in zip(chunks, [90.0, 5.0, 15.0], strict=True)}
    )
    scar = SCARNodePostprocessor(
        budget=None, docstore=docstore_of(chunks), embed_model=model, merge_passages=True
    )
    output = scar.postprocess_nodes(scored([chunks[1]], [0.77]), QueryBundle(QUERY, embedding=Q))
    assert [item.node.get_content() for item in output] == [DOCUMENT[50:]]
    assert output[0].node.metadata["scar_node_ids"] == ["C1", "C2"]
