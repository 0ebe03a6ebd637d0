"""SCARNodePostprocessor over a real pgvector database (llama-index-vector-stores-postgres).

The checks ``tests/llamaindex/test_li_stores.py`` runs on the embedded stores, on PGVectorStore:
the index lives only in PostgreSQL (PGVectorStore keeps the text, so the docstore is empty), and
the postprocessor must read the nodes and their embeddings through ``get_nodes``/``aget_nodes``
(their nodes carry the embeddings), embed no node, read at most twice per query beyond the
search, and answer for the same hits as the same nodes and vectors in memory (a
SimpleDocumentStore and a SimpleVectorStore) do, sync and async alike. And on a filtered search,
no neighbour the search's filter excludes comes back (``get_nodes``/``aget_nodes`` with filters);
two indexes on one table search, and so hold, the whole table; a store whose searches pass through
``customize_query_fn`` is refused, as SCAR's reads by id do not.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.schema import QueryBundle
from llama_index.core.vector_stores import FilterCondition, MetadataFilter, MetadataFilters

from li_stores import (
    GUARDED_QUERY,
    QUERIES,
    ROUND_TRIPS,
    WAYS_FORWARD,
    Built,
    build,
    check_answers,
    check_async_equals_sync,
    check_cold_and_warm,
    check_guarded,
    check_round_trips,
    check_vectors,
    check_within_index,
    guarded_nodes,
    hits,
    memory,
    names,
    pgvector_built,
    pgvector_store,
    scar,
    shared,
)
from scar_core._errors import InvalidSettingsError
from scar_llamaindex import SCARNodePostprocessor

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def built(postgres: Any) -> Iterator[Built]:
    on_pg = pgvector_built(postgres.uri("psycopg"), "scar_li_pg")
    yield on_pg
    asyncio.run(on_pg.index.vector_store.close())


@pytest.fixture(scope="module")
def guarded(postgres: Any) -> Iterator[Built]:
    on_pg = pgvector_built(postgres.uri("psycopg"), "scar_li_pg_guarded", nodes=guarded_nodes)
    yield on_pg
    asyncio.run(on_pg.index.vector_store.close())


BUNDLE = QueryBundle(GUARDED_QUERY)


@pytest.fixture(scope="module")
def reference() -> Built:
    return memory()


def test_the_nodes_live_only_in_postgresql(built: Built) -> None:
    assert len(built.docstore.docs) == 0


def test_pg_gives_back_the_nodes_links_and_vectors_of_memory(
    built: Built, reference: Built
) -> None:
    check_vectors(built, reference)


def test_pg_answers_equal_the_in_memory_path_and_embed_nothing(
    built: Built, reference: Built
) -> None:
    check_answers(built, reference)


def test_no_node_is_embedded_at_query_time_cold_or_warm(built: Built, tmp_path: Path) -> None:
    check_cold_and_warm(built, tmp_path)


async def test_async_equals_sync_through_aget_nodes(built: Built) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # aget_nodes works: no fallback to a worker thread
        await check_async_equals_sync(built)


async def test_at_most_two_round_trips_per_query_beyond_the_search(built: Built) -> None:
    await check_round_trips(built)
    ROUND_TRIPS.clear()
    query = QUERIES[0]
    await scar(built).apostprocess_nodes(hits(built, query, 4), QueryBundle(query))
    assert "pgvector.get_nodes" not in ROUND_TRIPS  # the async path reads asynchronously
    assert 1 <= ROUND_TRIPS["pgvector.aget_nodes"] <= 2


async def test_nothing_the_search_filter_excludes_comes_back(guarded: Built) -> None:
    await check_guarded(guarded)


async def test_an_or_filter_is_applied_whole(guarded: Built) -> None:
    filters = MetadataFilters(
        filters=[
            MetadataFilter(key="access", value="public"),
            MetadataFilter(key="access", value="internal"),
        ],
        condition=FilterCondition.OR,
    )
    retriever = guarded.index.as_retriever(similarity_top_k=2, filters=filters)
    bundle = QueryBundle(GUARDED_QUERY)
    found = await retriever.aretrieve(bundle)
    postprocessor = SCARNodePostprocessor.from_retriever(retriever, mode="paper", window=2)
    for output in (
        postprocessor.postprocess_nodes(found, bundle),
        await postprocessor.apostprocess_nodes(found, bundle),
    ):
        assert "a2" not in names(output)
        assert len(output) > len(found)


async def test_two_indexes_on_one_table_search_and_hold_the_whole_table(postgres: Any) -> None:
    public, internal = shared("pgvector", pgvector_store(postgres.uri("psycopg"), "scar_li_shared"))
    try:
        assert names(internal.as_retriever(similarity_top_k=1).retrieve(BUNDLE)) == ["a2"]
        everything = public.index.as_retriever(similarity_top_k=8).retrieve(BUNDLE)
        assert "a2" in names(everything)  # the public index's own search covers the table
        await check_within_index(public)
    finally:
        await public.index.vector_store.close()


def public_only(stmt: Any, table: Any, **kwargs: Any) -> Any:
    """A customize_query_fn that keeps the search to public rows, as a tenant clause would."""
    return stmt.where(table.metadata_["access"].astext == "public")


async def test_a_store_whose_searches_customize_their_sql_is_refused(postgres: Any) -> None:
    uri = postgres.uri("psycopg")
    store = pgvector_store(uri, "scar_li_customized", customize_query_fn=public_only)
    built = build("pgvector", store, nodes=guarded_nodes)
    try:
        retriever = built.index.as_retriever(similarity_top_k=4)
        found = await retriever.aretrieve(BUNDLE)
        assert "a2" not in names(found)  # the customised search leaves the secret node out
        refused = rf"(?s)PGVectorStore: it is built with customize_query_fn.*{WAYS_FORWARD}"
        with pytest.raises(InvalidSettingsError, match=refused):
            SCARNodePostprocessor.from_retriever(retriever)
        with pytest.raises(InvalidSettingsError, match=refused):
            SCARNodePostprocessor.from_index(built.index, filters=None)
        guarded = SCARNodePostprocessor.from_retriever(
            retriever, neighbor_filter=lambda metadata: metadata["access"] == "public"
        )
        assert "a2" not in names(await guarded.apostprocess_nodes(found, BUNDLE))
    finally:
        await store.close()
