"""Where neighbours and vectors come from: docstore, vector store, both, or neither."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
from li_support import (
    FaissNodeStore,
    TableEmbedding,
    docstore_of,
    ids_and_scores,
    linked_nodes,
    scored,
)
from llama_index.core import VectorStoreIndex
from llama_index.core.postprocessor import PrevNextNodePostprocessor
from llama_index.core.schema import NodeRelationship, QueryBundle, RelatedNodeInfo, TextNode
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.vector_stores import SimpleVectorStore

from scar_core import InvalidSettingsError, expand
from scar_llamaindex import SCARNodePostprocessor, StoreNeighborSource

QUERY = "query"


def unit(degrees: float) -> list[float]:
    return [math.cos(math.radians(degrees)), math.sin(math.radians(degrees))]


# n2 is the seed; n1 and n3 continue it, n0 and n4 do not (see test_li_prev_next for the maths).
ANGLES = [80.0, 30.0, 10.0, 20.0, 90.0]
TEXTS = [f"chunk {i}" for i in range(5)]
VECTORS = [unit(a) for a in ANGLES]


def table() -> TableEmbedding:
    return TableEmbedding(dict(zip(TEXTS, VECTORS, strict=True)), {QUERY: unit(0.0)})


def expected_by_core(window: int = 1) -> list[str]:
    links = {
        f"n{i}": (f"n{i - 1}" if i else None, f"n{i + 1}" if i < 4 else None) for i in range(5)
    }
    vectors = {f"n{i}": np.array(v) for i, v in enumerate(VECTORS)}
    return sorted(expand(np.array(unit(0.0)), ["n2"], links, vectors, window=window).chunk_ids)


def faiss_index(embed_model: TableEmbedding) -> tuple[VectorStoreIndex, FaissNodeStore]:
    store = FaissNodeStore(dimension=2)
    index = VectorStoreIndex.from_vector_store(store, embed_model=embed_model)
    index.insert_nodes(linked_nodes(TEXTS))
    embed_model.embedded_texts.clear()  # count only what happens after ingestion
    return index, store


def test_faiss_index_keeps_nodes_only_in_the_vector_store() -> None:
    index, _ = faiss_index(table())
    assert index.docstore.docs == {}


def test_plain_prev_next_fails_on_the_empty_docstore_scar_does_not() -> None:
    # The LlamaIndex issues #11934/#14829: nodes only in a vector DB break PrevNext.
    model = table()
    index, store = faiss_index(model)
    seeds = index.as_retriever(similarity_top_k=1).retrieve(QueryBundle(QUERY))
    assert [s.node.node_id for s in seeds] == ["n2"]
    with pytest.raises(ValueError, match="not found"):
        PrevNextNodePostprocessor(docstore=index.docstore, mode="both").postprocess_nodes(seeds)

    scar = SCARNodePostprocessor(
        budget=None, docstore=index.docstore, vector_store=store, embed_model=model
    )
    output = scar.postprocess_nodes(seeds, QueryBundle(QUERY, embedding=unit(0.0)))
    assert [item.node.node_id for item in output] == ["n1", "n2", "n3"]
    assert [item.node.get_content() for item in output] == ["chunk 1", "chunk 2", "chunk 3"]
    # Neighbours and the seed's vector came from the store's get_nodes; nothing was embedded.
    assert model.embedded_texts == []


def test_vector_store_only_fetches_neighbours_and_vectors_in_one_call_per_hop() -> None:
    model = table()
    index, store = faiss_index(model)
    seeds = index.as_retriever(similarity_top_k=1).retrieve(QueryBundle(QUERY))
    store.get_nodes_calls.clear()
    scar = SCARNodePostprocessor(budget=None, vector_store=store, embed_model=model, window=2)
    output = scar.postprocess_nodes(seeds, QueryBundle(QUERY, embedding=unit(0.0)))
    assert sorted(item.node.node_id for item in output) == expected_by_core(window=2)
    # Hop 1 asks for both neighbours plus the seed's vector; hop 2 for the next ring.
    assert [sorted(call) for call in store.get_nodes_calls] == [["n1", "n2", "n3"], ["n0", "n4"]]
    assert model.embedded_texts == []


def test_l2_distance_scores_do_not_drive_the_decisions() -> None:
    # FAISS scores are distances (lower is better); SCAR computes cosines from the vectors.
    model = table()
    index, store = faiss_index(model)
    seeds = index.as_retriever(similarity_top_k=1).retrieve(QueryBundle(QUERY))
    distance = seeds[0].score
    assert distance == pytest.approx(2 - 2 * math.cos(math.radians(10)), abs=1e-6)
    scar = SCARNodePostprocessor(budget=None, vector_store=store, embed_model=model)
    output = scar.postprocess_nodes(seeds, QueryBundle(QUERY, embedding=unit(0.0)))
    assert ids_and_scores(output) == [
        ("n1", pytest.approx(math.cos(math.radians(30)) - 0.1 * (1 - math.cos(math.radians(20))))),
        ("n2", distance),
        ("n3", pytest.approx(math.cos(math.radians(20)) - 0.1 * (1 - math.cos(math.radians(10))))),
    ]
    assert output[1].node.metadata["scar_relevance"] == pytest.approx(math.cos(math.radians(10)))


def test_simple_vector_store_supplies_vectors_so_nothing_is_embedded() -> None:
    model = table()
    index = VectorStoreIndex(linked_nodes(TEXTS), embed_model=model)
    assert isinstance(index.vector_store, SimpleVectorStore)
    model.embedded_texts.clear()
    seeds = index.as_retriever(similarity_top_k=1).retrieve(QUERY)
    scar = SCARNodePostprocessor.from_index(index, budget=None)
    output = scar.postprocess_nodes(seeds, QueryBundle(QUERY, embedding=unit(0.0)))
    assert sorted(item.node.node_id for item in output) == expected_by_core()
    assert model.embedded_texts == []


def test_docstore_without_vectors_falls_back_to_the_embed_model() -> None:
    model = table()
    chain = linked_nodes(TEXTS)
    scar = SCARNodePostprocessor(budget=None, docstore=docstore_of(chain), embed_model=model)
    output = scar.postprocess_nodes(
        scored([chain[2]], [0.9]), QueryBundle(QUERY, embedding=unit(0.0))
    )
    assert sorted(item.node.node_id for item in output) == expected_by_core()
    assert sorted(model.embedded_texts) == ["chunk 1", "chunk 2", "chunk 3"]


def test_node_embeddings_are_used_before_anything_else() -> None:
    model = table()
    chain = linked_nodes(TEXTS, vectors=VECTORS)
    scar = SCARNodePostprocessor(budget=None, docstore=docstore_of(chain), embed_model=model)
    scar.postprocess_nodes(scored([chain[2]], [0.9]), QueryBundle(QUERY, embedding=unit(0.0)))
    assert model.embedded_texts == []


def test_missing_neighbour_is_not_expanded_and_the_reason_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = table()
    chain = linked_nodes(TEXTS)
    docstore = docstore_of([chain[1], chain[2]])  # n3 was never stored
    scar = SCARNodePostprocessor(budget=None, docstore=docstore, embed_model=model, window=2)
    with caplog.at_level(logging.DEBUG, logger="scar_llamaindex"):
        output = scar.postprocess_nodes(
            scored([chain[2]], [0.9]), QueryBundle(QUERY, embedding=unit(0.0))
        )
    assert [item.node.node_id for item in output] == ["n1", "n2"]
    assert any("'n3'" in r.getMessage() and r.levelno == logging.DEBUG for r in caplog.records)
    assert all(r.levelno < logging.WARNING for r in caplog.records)


def test_simple_vector_store_cannot_supply_nodes_so_an_empty_docstore_expands_nothing() -> None:
    model = table()
    index = VectorStoreIndex(linked_nodes(TEXTS), embed_model=model)
    seeds = index.as_retriever(similarity_top_k=1).retrieve(QUERY)
    scar = SCARNodePostprocessor(
        budget=None,
        docstore=SimpleDocumentStore(),
        vector_store=index.vector_store,
        embed_model=model,
    )
    output = scar.postprocess_nodes(seeds, QueryBundle(QUERY, embedding=unit(0.0)))
    assert [item.node.node_id for item in output] == ["n2"]


def test_nodes_without_relationships_come_back_unchanged_apart_from_the_trace() -> None:
    model = TableEmbedding({"alone": unit(5.0), "other": unit(50.0)})
    nodes = [TextNode(id_="a", text="alone"), TextNode(id_="b", text="other")]
    scar = SCARNodePostprocessor(
        budget=None, docstore=docstore_of(nodes), embed_model=model, window=3
    )
    output = scar.postprocess_nodes(
        scored(nodes, [0.7, 0.3]), QueryBundle(QUERY, embedding=unit(0.0))
    )
    assert ids_and_scores(output) == [("a", 0.7), ("b", 0.3)]
    assert [item.node.get_content() for item in output] == ["alone", "other"]


def test_links_from_metadata_keys_for_nodes_ingested_elsewhere() -> None:
    model = table()
    nodes = [
        TextNode(
            id_=f"n{i}",
            text=text,
            metadata={"prev": f"n{i - 1}" if i else None, "next": f"n{i + 1}" if i < 4 else None},
            excluded_embed_metadata_keys=["prev", "next"],
        )
        for i, text in enumerate(TEXTS)
    ]
    scar = SCARNodePostprocessor(
        budget=None,
        docstore=docstore_of(nodes),
        embed_model=model,
        previous_id_key="prev",
        next_id_key="next",
    )
    output = scar.postprocess_nodes(
        scored([nodes[2]], [0.9]), QueryBundle(QUERY, embedding=unit(0.0))
    )
    assert [item.node.node_id for item in output] == ["n1", "n2", "n3"]


def test_malformed_links_are_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    model = table()
    seed = TextNode(
        id_="n2",
        text="chunk 2",
        metadata={"prev": 17, "next": "n2"},
        excluded_embed_metadata_keys=["prev", "next"],
    )
    scar = SCARNodePostprocessor(
        budget=None,
        docstore=docstore_of([seed]),
        embed_model=model,
        previous_id_key="prev",
        next_id_key="next",
    )
    with caplog.at_level(logging.WARNING, logger="scar_llamaindex"):
        output = scar.postprocess_nodes(
            scored([seed], [0.9]), QueryBundle(QUERY, embedding=unit(0.0))
        )
    assert ids_and_scores(output) == [("n2", 0.9)]
    messages = [r.getMessage() for r in caplog.records]
    assert sum("must be strings, not int" in m for m in messages) == 1
    assert sum("links the node to itself" in m for m in messages) == 1


def test_cross_document_links_are_refused() -> None:
    model = table()
    chain = linked_nodes(TEXTS)
    chain[3].relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id="another-doc")
    scar = SCARNodePostprocessor(budget=None, docstore=docstore_of(chain), embed_model=model)
    output = scar.postprocess_nodes(
        scored([chain[2]], [0.9]), QueryBundle(QUERY, embedding=unit(0.0))
    )
    assert [item.node.node_id for item in output] == ["n1", "n2"]


def test_a_source_needs_a_store() -> None:
    with pytest.raises(InvalidSettingsError, match="neither"):
        StoreNeighborSource()
    with pytest.raises(InvalidSettingsError, match="somewhere to fetch neighbours from"):
        SCARNodePostprocessor()
