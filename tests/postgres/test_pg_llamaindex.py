"""SCARNodePostprocessor over a real pgvector database (llama-index-vector-stores-postgres).

The checks ``tests/llamaindex/test_li_stores.py`` runs on the embedded stores, on PGVectorStore:
the index lives only in PostgreSQL (PGVectorStore keeps the text, so the docstore is empty), and
the postprocessor must read the nodes and their embeddings through ``get_nodes``/``aget_nodes``
(their nodes carry the embeddings), embed no node, read at most twice per query beyond the
search, and answer for the same hits as the same nodes and vectors in memory (a
SimpleDocumentStore and a SimpleVectorStore) do, sync and async alike. And on a filtered search,
no neighbour the search's filter excludes comes back (``get_nodes``/``aget_nodes`` with filters).
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
    Built,
    check_answers,
    check_async_equals_sync,
    check_cold_and_warm,
    check_guarded,
    check_round_trips,
    check_vectors,
    guarded_nodes,
    hits,
    memory,
    names,
    pgvector_built,
    scar,
)
from scar_llamaindex import SCARNodePostprocessor

pytestmark = pytest.mark.postgres

pytest.importorskip("llama_index.vector_stores.postgres")


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
