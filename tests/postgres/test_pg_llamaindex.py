"""SCARNodePostprocessor over a real pgvector database (llama-index-vector-stores-postgres).

The index lives only in PostgreSQL (PGVectorStore keeps the text, so the docstore is empty). The
postprocessor must read neighbours and their embeddings through ``get_nodes``/``aget_nodes``,
embed no node, read at most twice per query, and answer for the same hits as the same nodes
and vectors in memory (a SimpleDocumentStore and a SimpleVectorStore) do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import NodeWithScore, QueryBundle

from li_support import QUERY, WordHashEmbedding, documents, splitter
from scar_llamaindex import SCARNodePostprocessor

pytestmark = pytest.mark.postgres

postgres_store = pytest.importorskip("llama_index.vector_stores.postgres")

QUERIES = [QUERY, "topic1 part 4 word1x4", "word0x0 and word5x6"]
SETTINGS: list[dict[str, Any]] = [{}, {"top_n": 6}, {"mode": "paper", "gamma": 0.6}]


class CountingPGVectorStore(postgres_store.PGVectorStore):  # type: ignore[misc]
    """The real PGVectorStore; ``get_nodes``/``aget_nodes`` (SCAR's only reads) count calls."""

    _reads: int = PrivateAttr(default=0)

    def get_nodes(self, *args: Any, **kwargs: Any) -> Any:
        self._reads += 1
        return super().get_nodes(*args, **kwargs)

    async def aget_nodes(self, *args: Any, **kwargs: Any) -> Any:
        self._reads += 1
        return await super().aget_nodes(*args, **kwargs)


class Indexes:
    def __init__(self, uri: str, table: str) -> None:
        nodes = splitter().get_nodes_from_documents(documents())
        self.embed_model = WordHashEmbedding()
        self.store = CountingPGVectorStore.from_params(
            connection_string=uri, async_connection_string=uri, table_name=table, embed_dim=64
        )
        self.pg = VectorStoreIndex(
            nodes,
            storage_context=StorageContext.from_defaults(vector_store=self.store),
            embed_model=self.embed_model,
        )
        self.memory = VectorStoreIndex(nodes, embed_model=WordHashEmbedding())

    def hits(self, index: VectorStoreIndex, query: str) -> list[NodeWithScore]:
        return index.as_retriever(similarity_top_k=4).retrieve(QueryBundle(query))


@pytest.fixture(scope="module")
def indexes(postgres: Any) -> Iterator[Indexes]:
    built = Indexes(postgres.uri("psycopg"), "scar_li_pg")
    yield built
    asyncio.run(built.store.close())


def answer(output: list[NodeWithScore]) -> list[tuple[str, Any, str, int]]:
    return [
        (n.node.node_id, pytest.approx(n.score, abs=1e-5), n.node.metadata["scar_origin"],
         n.node.metadata["scar_embedded"])
        for n in output
    ]  # fmt: skip


@pytest.mark.parametrize("settings", SETTINGS)
@pytest.mark.parametrize("query", QUERIES)
def test_pgvector_answers_as_memory_does_without_embedding(
    indexes: Indexes, query: str, settings: dict[str, Any]
) -> None:
    assert len(indexes.pg.docstore.docs) == 0  # the nodes live only in PostgreSQL
    hits = indexes.hits(indexes.pg, query)
    texts, indexes.store._reads = indexes.embed_model.texts_embedded, 0
    output = SCARNodePostprocessor.from_index(indexes.pg, **settings).postprocess_nodes(
        hits, QueryBundle(query)
    )
    assert indexes.embed_model.texts_embedded == texts
    assert 1 <= indexes.store._reads <= (2 if settings.get("mode") != "paper" else 1)
    memory = SCARNodePostprocessor.from_index(indexes.memory, **settings).postprocess_nodes(
        hits, QueryBundle(query)
    )
    assert answer(output) == answer(memory)
    assert any(n.node.metadata["scar_origin"] == "neighbor" for n in output)


@pytest.mark.parametrize("settings", SETTINGS)
async def test_the_async_path_reads_pgvector_asynchronously(
    indexes: Indexes, settings: dict[str, Any]
) -> None:
    hits = indexes.hits(indexes.pg, QUERY)
    scar = SCARNodePostprocessor.from_index(indexes.pg, **settings)
    expected = scar.postprocess_nodes(hits, QueryBundle(QUERY))
    indexes.store._reads = 0
    output = await scar.apostprocess_nodes(hits, QueryBundle(QUERY))  # no warning: aget_nodes
    assert answer(output) == answer(expected)
    assert 1 <= indexes.store._reads <= 2
