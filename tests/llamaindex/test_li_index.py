"""SCARNodePostprocessor on a real VectorStoreIndex: counts, reads, embeddings, sync and async."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.schema import NodeWithScore, QueryBundle

from li_support import (
    QUERY,
    CountingDocstore,
    WordHashEmbedding,
    documents,
    hash_index,
    splitter,
)
from scar_llamaindex import SCARNodePostprocessor

QUERIES = [QUERY, "topic1 part 4 word1x4", "word0x0 and word5x6", "Document 2 is about topic2"]


@pytest.fixture(scope="module")
def index() -> VectorStoreIndex:
    return hash_index()


def retrieve(index: VectorStoreIndex, query: str, k: int) -> list[NodeWithScore]:
    return index.as_retriever(similarity_top_k=k).retrieve(query)


def summary(output: list[NodeWithScore]) -> list[tuple[str, float | None, dict[str, Any]]]:
    return [(n.node.node_id, n.score, n.node.metadata) for n in output]


@pytest.mark.parametrize("k", range(1, 9))
@pytest.mark.parametrize("query", QUERIES)
def test_by_default_as_many_nodes_come_back_as_went_in(
    index: VectorStoreIndex, query: str, k: int
) -> None:
    hits = retrieve(index, query, k)
    output = SCARNodePostprocessor.from_index(index, filters=None).postprocess_nodes(
        hits, query_str=query
    )
    assert len(output) == len(hits) == k
    assert len({n.node.node_id for n in output}) == k


@pytest.mark.parametrize("top_n", range(1, 7))
@pytest.mark.parametrize("query", QUERIES)
def test_top_n_gives_exactly_top_n(index: VectorStoreIndex, query: str, top_n: int) -> None:
    hits = retrieve(index, query, 4)
    scar = SCARNodePostprocessor.from_index(index, filters=None, top_n=top_n)
    output = scar.postprocess_nodes(hits, query_str=query)
    assert len(output) == top_n
    assert len({n.node.node_id for n in output}) == top_n


def test_fewer_only_when_fewer_exist() -> None:
    tiny = VectorStoreIndex.from_documents(
        documents(count=1, length=2),
        embed_model=WordHashEmbedding(),
        transformations=[splitter()],
    )
    hits = retrieve(tiny, QUERY, 1)
    scar = SCARNodePostprocessor.from_index(tiny, filters=None, top_n=6)
    assert len(scar.postprocess_nodes(hits, query_str=QUERY)) == 2


def test_paper_mode_keeps_every_seed_and_the_count_varies(index: VectorStoreIndex) -> None:
    hits = retrieve(index, QUERY, 3)
    paper = SCARNodePostprocessor.from_index(index, filters=None, mode="paper", gamma=0.6)
    output = paper.postprocess_nodes(hits, query_str=QUERY)
    assert {h.node.node_id for h in hits} <= {n.node.node_id for n in output}
    assert len(output) > 3
    seeds = SCARNodePostprocessor.from_index(
        index, filters=None, mode="paper", top_n=1
    ).postprocess_nodes(hits, QueryBundle(QUERY))
    assert {n.node.metadata["scar_seed_id"] for n in seeds} == {hits[0].node.node_id}


def test_passages_are_runs_of_linked_nodes_in_document_order(index: VectorStoreIndex) -> None:
    hits = retrieve(index, QUERY, 6)
    output = SCARNodePostprocessor.from_index(index, filters=None).postprocess_nodes(
        hits, query_str=QUERY
    )
    passages = [n.node.metadata["scar_passage"] for n in output]
    assert passages == sorted(passages)
    for before, after in itertools.pairwise(output):
        if before.node.metadata["scar_passage"] == after.node.metadata["scar_passage"]:
            assert before.node.next_node is not None
            assert before.node.next_node.node_id == after.node.node_id


def test_vectors_come_from_the_simple_vector_store_with_two_reads_at_most() -> None:
    embed_model = WordHashEmbedding()
    docstore = CountingDocstore()
    index = hash_index(embed_model, docstore)
    for query in QUERIES:
        hits = retrieve(index, query, 4)
        assert all(h.node.embedding is None for h in hits)  # the docstore holds no vectors
        texts, docstore.reads = embed_model.texts_embedded, 0
        scar = SCARNodePostprocessor.from_index(
            index, filters=None, continuity_bonus=0.5
        )  # a neighbour is taken
        output = scar.postprocess_nodes(hits, QueryBundle(query))
        assert embed_model.texts_embedded == texts
        assert docstore.reads <= 2
        assert {n.node.metadata["scar_embedded"] for n in output} == {0}
        assert any(n.node.metadata["scar_origin"] == "neighbor" for n in output)


async def test_async_reads_are_counted_alike() -> None:
    embed_model = WordHashEmbedding()
    docstore = CountingDocstore()
    index = hash_index(embed_model, docstore)
    hits = await index.as_retriever(similarity_top_k=4).aretrieve(QUERY)
    texts, docstore.reads = embed_model.texts_embedded, 0
    await SCARNodePostprocessor.from_index(index, filters=None).apostprocess_nodes(
        hits, QueryBundle(QUERY)
    )
    assert embed_model.texts_embedded == texts
    assert 1 <= docstore.reads <= 2


@pytest.mark.parametrize(
    "settings", [{}, {"top_n": 6}, {"keep": 3}, {"mode": "paper"}, {"mode": "paper", "window": 2}]
)
@pytest.mark.parametrize("query", QUERIES)
async def test_async_equals_sync(index: VectorStoreIndex, query: str, settings: Any) -> None:
    hits = retrieve(index, query, 5)
    scar = SCARNodePostprocessor.from_index(index, filters=None, **settings)
    expected = scar.postprocess_nodes(hits, QueryBundle(query))
    assert summary(await scar.apostprocess_nodes(hits, QueryBundle(query))) == summary(expected)


def test_in_a_query_engine(index: VectorStoreIndex) -> None:
    from llama_index.core.llms import MockLLM

    scar = SCARNodePostprocessor.from_index(index, filters=None)
    engine = index.as_query_engine(llm=MockLLM(), similarity_top_k=4, node_postprocessors=[scar])
    response = engine.query(QUERY)
    assert len(response.source_nodes) == 4
    assert {"scar_origin", "scar_passage"} <= set(response.source_nodes[0].node.metadata)


@pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")
def test_qdrant_gives_nodes_with_vectors_and_a_sync_only_client_still_serves_async() -> None:
    import llama_index.vector_stores.qdrant as qdrant
    import qdrant_client

    client = qdrant_client.QdrantClient(location=":memory:")
    embed_model = WordHashEmbedding()
    store = qdrant.QdrantVectorStore(client=client, collection_name="scar")
    index = VectorStoreIndex.from_documents(
        documents(),
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=embed_model,
        transformations=[splitter()],
    )
    scar = SCARNodePostprocessor.from_index(index, filters=None, top_n=5)
    hits = retrieve(index, QUERY, 4)
    texts = embed_model.texts_embedded
    expected = scar.postprocess_nodes(hits, QueryBundle(QUERY))
    assert embed_model.texts_embedded == texts
    assert any(n.node.metadata["scar_origin"] == "neighbor" for n in expected)
    with pytest.warns(
        UserWarning, match=r"(?s)QdrantVectorStore\.aget_nodes failed.*worker thread"
    ):
        output = asyncio.run(scar.apostprocess_nodes(hits, QueryBundle(QUERY)))
    assert summary(output) == summary(expected)
    again = asyncio.run(scar.apostprocess_nodes(hits, QueryBundle(QUERY)))  # no second warning
    assert summary(again) == summary(expected)
