"""Each private name ``scar_llamaindex._compat`` reads exists and means what SCAR takes it to mean.

The installed packages must lie in the ranges ``pyproject.toml`` allows: CI installs the newest
release of each range, so an upgrade that renames or changes one of these names fails here, by
name, and not silently in a query. A store package that is missing fails too: CI installs them.
"""

from __future__ import annotations

import sys
import uuid
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever
from llama_index.core.schema import QueryBundle, TextNode
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
)
from packaging.requirements import Requirement

from li_support import QUERY, WordHashEmbedding, hash_index
from scar_llamaindex import _compat

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest's own dependency before 3.11
    import tomli as tomllib

PYPROJECT = Path(__file__).parents[2] / "pyproject.toml"
#: The distributions whose private names ``_compat`` reads.
READ_FROM = [
    "llama-index-core",
    "llama-index-vector-stores-chroma",
    "llama-index-vector-stores-qdrant",
    "llama-index-vector-stores-postgres",
]
TENANT = MetadataFilters(filters=[MetadataFilter(key="tenant", value="t1")])


def allowed(distribution: str) -> list[Requirement]:
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    found = [Requirement(r) for reqs in extras.values() for r in reqs]
    return [r for r in found if r.name == distribution]


@pytest.mark.parametrize("distribution", READ_FROM)
def test_the_installed_version_is_in_the_range_pyproject_allows(distribution: str) -> None:
    requirements = allowed(distribution)
    assert requirements, f"pyproject.toml names no range for {distribution}"
    installed = version(distribution)
    for requirement in requirements:
        assert requirement.specifier.contains(installed, prereleases=True), (
            f"{distribution} {installed} is outside {requirement}: check each private name "
            "scar_llamaindex/_compat.py reads from it, then widen the range"
        )


def test_the_index_s_embed_model() -> None:
    model = WordHashEmbedding()
    assert _compat.index_embed_model(hash_index(model)) is model


def test_what_the_retriever_searches_with_is_what_its_query_carries() -> None:
    model, own = WordHashEmbedding(), WordHashEmbedding(model_name="own")
    index = hash_index(model)
    doc_ids = ["doc1", "doc2"]
    kwargs = {"mmr_threshold": 0.5}
    retriever = index.as_retriever(
        filters=TENANT, doc_ids=doc_ids, vector_store_kwargs=kwargs, embed_model=own
    )
    search = _compat.retriever_search(retriever)
    assert search.vector_index is index
    assert search.embed_model is own
    assert search.vector_store_kwargs == kwargs
    query = retriever._build_vector_store_query(QueryBundle(QUERY, embedding=[1.0]))
    assert search.filters is query.filters is TENANT
    assert search.node_ids == frozenset(query.node_ids or ())
    assert search.node_ids == frozenset(index.index_struct.nodes_dict.values())
    assert search.doc_ids == frozenset(query.doc_ids or ()) == frozenset(doc_ids)
    plain = _compat.retriever_search(VectorIndexRetriever(index))
    assert (plain.embed_model, plain.filters, plain.node_ids, plain.doc_ids) == (
        model,
        None,
        None,
        None,
    )
    assert plain.vector_store_kwargs == {}


def test_the_search_methods_are_vector_index_retriever_s_own() -> None:
    assert all(name in vars(VectorIndexRetriever) for name in _compat.SEARCH_METHODS)
    assert _compat.search_overrides(hash_index().as_retriever()) == []

    class OwnQuery(VectorIndexRetriever):
        def _build_vector_store_query(self, query_bundle: QueryBundle) -> VectorStoreQuery:
            return super()._build_vector_store_query(query_bundle)

    assert _compat.search_overrides(OwnQuery(hash_index())) == ["_build_vector_store_query"]


def test_chroma_s_where_is_the_one_its_query_uses() -> None:
    import chromadb
    from llama_index.vector_stores.chroma import ChromaVectorStore

    client = chromadb.EphemeralClient()
    store = ChromaVectorStore(chroma_collection=client.create_collection(f"c{uuid.uuid4().hex}"))
    nodes = [
        TextNode(
            id_=f"n{i}", text=f"node {i}", embedding=[1.0, i], metadata={"tenant": f"t{i % 2}"}
        )
        for i in range(6)
    ]
    store.add(nodes)
    where = _compat.chroma_where(TENANT)
    assert where == {"tenant": {"$eq": "t1"}}
    read = store.client.get(ids=[n.node_id for n in nodes], where=where)["ids"]
    query = VectorStoreQuery(query_embedding=[1.0, 0.0], similarity_top_k=6, filters=TENANT)
    assert sorted(read) == sorted(store.query(query).ids or []) == ["n1", "n3", "n5"]
    with pytest.raises(ValueError, match="not supported"):  # what SCAR refuses by
        _compat.chroma_where(
            MetadataFilters(filters=[MetadataFilter(key="k", value="x")], condition="not")
        )
    text = MetadataFilter(key="k", value="x", operator=FilterOperator.TEXT_MATCH)
    with pytest.raises(ValueError, match="not supported"):
        _compat.chroma_where(MetadataFilters(filters=[text], condition=FilterCondition.AND))


def test_qdrant_s_sharding_method() -> None:
    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient, models

    client = QdrantClient(location=":memory:")
    sharded = QdrantVectorStore(
        "scar-sharded",
        client=client,
        sharding_method=models.ShardingMethod.CUSTOM,
        shard_keys=["t1"],
        shard_key_selector_fn=lambda key: models.ShardKeySelector(shard_keys=[key]),
    )
    assert _compat.qdrant_custom_sharded(sharded)
    assert not _compat.qdrant_custom_sharded(QdrantVectorStore("scar-plain", client=client))
    auto = QdrantVectorStore("scar-auto", client=client, sharding_method=models.ShardingMethod.AUTO)
    assert not _compat.qdrant_custom_sharded(auto)


def test_pgvector_s_customize_query_fn() -> None:
    from llama_index.vector_stores.postgres import PGVectorStore

    def customized(stmt: Any, table: Any, **kwargs: Any) -> Any:
        return stmt

    uri = "postgresql+psycopg://scar:scar@127.0.0.1:9/scar"  # never connected: it is lazy
    options: dict[str, Any] = {"table_name": "t", "embed_dim": 2}
    built = [
        PGVectorStore.from_params(connection_string=uri, async_connection_string=uri, **options)
        for options in (options, options | {"customize_query_fn": customized})
    ]
    assert [_compat.pg_customizes_queries(store) for store in built] == [False, True]


async def test_an_embed_model_s_query_vectors_are_kept_sync_and_async() -> None:
    model = WordHashEmbedding()
    assert _compat.query_vector(model, ["sync"]) is None  # and it is watched from now on
    vector = model.get_query_embedding("sync")
    other = await model.aget_query_embedding("async")
    assert _compat.query_vector(model, ["sync"]) == vector
    assert _compat.query_vector(model, ["async"]) == other
    both = _compat.query_vector(model, ["sync", "async"])
    assert both == model.get_agg_embedding_from_queries(["sync", "async"])
    assert _compat.query_vector(WordHashEmbedding(), ["sync"]) is None  # another model's: no


async def test_aretrieve_keeps_its_query_embedding_to_itself() -> None:
    """Why :func:`_compat.query_vector` exists; if this fails, LlamaIndex passes it on now."""
    index: VectorStoreIndex = hash_index()
    retriever = index.as_retriever(similarity_top_k=2)
    synced, awaited = QueryBundle(QUERY), QueryBundle(QUERY)
    retriever.retrieve(synced)
    await retriever.aretrieve(awaited)
    assert synced.embedding is not None
    assert awaited.embedding is None


def test_query_vectors_are_kept_in_a_bounded_store() -> None:
    model = WordHashEmbedding()
    _compat.watch(model)
    for i in range(_compat._KEPT + 5):
        model.get_query_embedding(f"query {i}")
    assert len(_compat._vectors) <= _compat._KEPT
    assert _compat.query_vector(model, ["query 0"]) is None
    assert _compat.query_vector(model, [f"query {_compat._KEPT + 4}"]) is not None
