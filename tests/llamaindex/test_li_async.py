"""The native async path: async fetches and embeddings in the event loop, no worker thread."""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Sequence

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
from llama_index.core.schema import BaseNode, QueryBundle

from scar_llamaindex import FetchedNodes, SCARNodePostprocessor

QUERY = "query"
ANGLES = [80.0, 30.0, 10.0, 20.0, 90.0]
TEXTS = [f"chunk {i}" for i in range(5)]


def unit(degrees: float) -> list[float]:
    return [math.cos(math.radians(degrees)), math.sin(math.radians(degrees))]


def table() -> TableEmbedding:
    return TableEmbedding(
        {t: unit(a) for t, a in zip(TEXTS, ANGLES, strict=True)}, {QUERY: unit(0.0)}
    )


class CountingSource:
    """A NeighborSource that records which of its two methods were used, and from which thread."""

    def __init__(self, nodes: Sequence[BaseNode]) -> None:
        self.nodes = {node.node_id: node for node in nodes}
        self.sync_calls = 0
        self.async_calls = 0
        self.threads: list[int] = []

    def fetch(self, node_ids: Sequence[str], vector_ids: Sequence[str]) -> FetchedNodes:
        self.sync_calls += 1
        self.threads.append(threading.get_ident())
        return FetchedNodes(nodes={i: self.nodes[i] for i in node_ids if i in self.nodes})

    async def afetch(self, node_ids: Sequence[str], vector_ids: Sequence[str]) -> FetchedNodes:
        self.async_calls += 1
        self.threads.append(threading.get_ident())
        await asyncio.sleep(0)
        return FetchedNodes(nodes={i: self.nodes[i] for i in node_ids if i in self.nodes})


async def test_async_path_embeds_the_query_when_the_bundle_has_no_embedding() -> None:
    model = table()
    chain = linked_nodes(TEXTS)
    scar = SCARNodePostprocessor(budget=None, docstore=docstore_of(chain), embed_model=model)
    bundle = QueryBundle(QUERY)
    assert bundle.embedding is None
    output = await scar.apostprocess_nodes(scored([chain[2]], [0.5]), bundle)
    assert [item.node.node_id for item in output] == ["n1", "n2", "n3"]
    assert model.embedded_queries == [QUERY]
    assert bundle.embedding is None  # the caller's bundle is not modified


async def test_async_path_reuses_a_filled_query_embedding() -> None:
    model = table()
    chain = linked_nodes(TEXTS, vectors=[unit(a) for a in ANGLES])
    scar = SCARNodePostprocessor(budget=None, docstore=docstore_of(chain), embed_model=model)
    await scar.apostprocess_nodes(scored([chain[2]], [0.5]), QueryBundle(QUERY, embedding=unit(0)))
    assert model.embedded_queries == []
    assert model.embedded_texts == []


async def test_async_path_runs_in_the_event_loop_thread_with_async_fetches() -> None:
    model = table()
    chain = linked_nodes(TEXTS)
    source = CountingSource(chain)
    scar = SCARNodePostprocessor(budget=None, neighbor_source=source, embed_model=model, window=2)
    await scar.apostprocess_nodes(scored([chain[2]], [0.5]), QueryBundle(QUERY))
    loop_thread = threading.get_ident()
    assert (source.sync_calls, source.async_calls) == (0, 2)
    assert set(source.threads) == {loop_thread}
    assert set(model.threads) == {loop_thread}  # the default wrapper would use a worker thread


@pytest.mark.parametrize("window", [1, 2])
@pytest.mark.parametrize("merge_passages", [False, True])
async def test_sync_and_async_paths_agree(window: int, merge_passages: bool) -> None:
    chain = linked_nodes(TEXTS)
    seeds = scored([chain[2], chain[4]], [0.5, 0.1])
    settings = {"window": window, "merge_passages": merge_passages}
    sync_out = SCARNodePostprocessor(
        budget=None, docstore=docstore_of(chain), embed_model=table(), **settings
    ).postprocess_nodes(seeds, QueryBundle(QUERY))
    async_out = await SCARNodePostprocessor(
        budget=None, docstore=docstore_of(chain), embed_model=table(), **settings
    ).apostprocess_nodes(seeds, QueryBundle(QUERY))
    assert ids_and_scores(async_out) == ids_and_scores(sync_out)
    assert [item.node.metadata for item in async_out] == [item.node.metadata for item in sync_out]
    assert [item.node.get_content() for item in async_out] == [
        item.node.get_content() for item in sync_out
    ]


async def test_async_retrieval_through_a_vector_store_only_index() -> None:
    model = table()
    store = FaissNodeStore(dimension=2)
    index = VectorStoreIndex.from_vector_store(store, embed_model=model)
    await index.ainsert_nodes(linked_nodes(TEXTS))
    model.embedded_texts.clear()
    model.embedded_queries.clear()
    retriever = index.as_retriever(similarity_top_k=1)
    seeds = await retriever.aretrieve(QUERY)
    scar = SCARNodePostprocessor.from_index(index, budget=None)
    output = await scar.apostprocess_nodes(seeds, QueryBundle(QUERY))
    assert [item.node.node_id for item in output] == ["n1", "n2", "n3"]
    # One query embedding for retrieval, one for SCAR (the async retriever does not share it);
    # neighbours and vectors came from the store.
    assert model.embedded_queries == [QUERY, QUERY]
    assert model.embedded_texts == []
