"""One query embedding per query: SCAR reuses the retriever's, sync and async, in a query engine too.

``VectorIndexRetriever.retrieve`` leaves its embedding on the ``QueryBundle``; ``aretrieve`` keeps
it to itself, so SCAR takes the vector the embed model computed (``scar_llamaindex._compat``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import NodeWithScore, QueryBundle

from li_support import QUERY, WordHashEmbedding, hash_index
from scar_llamaindex import SCARNodePostprocessor

Build = Callable[[VectorStoreIndex], SCARNodePostprocessor]
BUILDS: dict[str, Build] = {
    "from_index": lambda index: SCARNodePostprocessor.from_index(index, filters=None),
    "from_retriever": lambda index: SCARNodePostprocessor.from_retriever(index.as_retriever()),
}


def summary(output: list[NodeWithScore]) -> list[tuple[str, float | None, dict[str, Any]]]:
    return [(n.node.node_id, n.score, n.node.metadata) for n in output]


def expected(index: VectorStoreIndex, query: str) -> list[tuple[str, float | None, Any]]:
    """The sync answer on the same index, with a model of its own (the counted one is not used)."""
    model = WordHashEmbedding()
    hits = index.as_retriever(similarity_top_k=4, embed_model=model).retrieve(query)
    scar = SCARNodePostprocessor.from_index(index, filters=None, embed_model=model)
    return summary(scar.postprocess_nodes(hits, QueryBundle(query)))


@pytest.mark.parametrize("build", BUILDS)
async def test_each_query_is_embedded_once_sync_and_async(build: str) -> None:
    model = WordHashEmbedding()
    index = hash_index(model)
    scar, retriever = BUILDS[build](index), index.as_retriever(similarity_top_k=4)
    for i in range(3):  # a new question each time: no vector from an earlier query serves it
        query = f"{QUERY} word{i}x1"
        before = model.queries_embedded
        hits = retriever.retrieve(query)
        sync = scar.postprocess_nodes(hits, query_str=query)
        assert model.queries_embedded == before + 1
        query = f"{QUERY} word{i}x2"
        hits = await retriever.aretrieve(query)  # its embedding stays inside the retriever
        output = await scar.apostprocess_nodes(hits, query_str=query)
        assert model.queries_embedded == before + 2
        assert summary(output) == expected(index, query)
    assert summary(sync) == expected(index, f"{QUERY} word2x1")


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("engine", ["as_query_engine", "RetrieverQueryEngine"])
async def test_a_query_engine_embeds_each_query_once_sync_and_async(
    build: str, engine: str
) -> None:
    model = WordHashEmbedding()
    index = hash_index(model)
    scar = BUILDS[build](index)
    run: BaseQueryEngine
    if engine == "as_query_engine":
        run = index.as_query_engine(llm=MockLLM(), similarity_top_k=4, node_postprocessors=[scar])
    else:
        retriever = index.as_retriever(similarity_top_k=4)
        run = RetrieverQueryEngine.from_args(retriever, llm=MockLLM(), node_postprocessors=[scar])
    before = model.queries_embedded
    response = run.query(f"{QUERY} sync")
    assert model.queries_embedded == before + 1
    aresponse = await run.aquery(f"{QUERY} async")
    assert model.queries_embedded == before + 2
    assert summary(response.source_nodes) == expected(index, f"{QUERY} sync")
    assert summary(aresponse.source_nodes) == expected(index, f"{QUERY} async")


async def test_another_model_s_vector_is_never_taken() -> None:
    """A postprocessor with its own embed model embeds with it: vectors are kept per model."""
    index = hash_index()
    own = WordHashEmbedding(model_name="own")
    scar = SCARNodePostprocessor.from_index(index, filters=None, embed_model=own)
    hits = await index.as_retriever(similarity_top_k=4).aretrieve(QUERY)
    await scar.apostprocess_nodes(hits, query_str=QUERY)
    assert own.queries_embedded == 1
    await scar.apostprocess_nodes(hits, query_str=QUERY)  # its own vector, kept
    assert own.queries_embedded == 1
