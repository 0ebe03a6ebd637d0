"""SCARRetriever over a real pgvector database (langchain-postgres PGVectorStore).

The same corpus, with the same float32 vectors, lives in a PGVectorStore and in an
InMemoryVectorStore; the retriever must return identical documents from both, and must not embed
a single chunk at query time on the database path.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from langchain_core.vectorstores import InMemoryVectorStore
from pg_support import Corpus, CountingEmbeddings, comparable, counting_engine, make_corpus

from scar_core.errors import InvalidSettingsError
from scar_langchain import (
    PGVectorChunks,
    PGVectorStoreVectors,
    PGVectorTable,
    SCARRetriever,
)

pytestmark = pytest.mark.postgres

langchain_postgres = pytest.importorskip("langchain_postgres")
sqlalchemy = pytest.importorskip("sqlalchemy")


class Setup:
    """One corpus in both stores, and a SQLAlchemy engine whose statements are counted."""

    def __init__(self, corpus: Corpus, uri: str, table: str) -> None:
        self.corpus = corpus
        self.table = table
        self.embeddings = CountingEmbeddings(corpus.vector_of_text(), corpus.queries)
        self.engine_pg = langchain_postgres.PGEngine.from_connection_string(uri)
        self.engine_pg.init_vectorstore_table(table, corpus.dimension)
        self.pg_store = langchain_postgres.PGVectorStore.create_sync(
            self.engine_pg, self.embeddings, table
        )
        documents = corpus.documents
        self.pg_store.add_embeddings(
            [d.page_content for d in documents],
            [corpus.vectors[d.id] for d in documents if d.id is not None],
            metadatas=[dict(d.metadata) for d in documents],
            ids=corpus.ids,
        )
        self.memory_store = InMemoryVectorStore(self.embeddings)
        self.memory_store.add_documents(documents, ids=corpus.ids)
        self.statements: list[str] = []
        self.sql = counting_engine(uri, self.statements)
        self.reset()

    def reset(self) -> None:
        self.embeddings.documents_embedded = 0
        self.embeddings.queries_embedded = 0
        self.statements.clear()

    def chunks(self) -> PGVectorChunks:
        return PGVectorChunks(self.sql, PGVectorTable(self.table))

    def close(self) -> None:
        self.sql.dispose()
        asyncio.run(self.engine_pg.close())


@pytest.fixture(scope="module")
def setup(postgres: Any) -> Iterator[Setup]:
    built = Setup(make_corpus(), postgres.uri("psycopg"), "scar_lc_corpus")
    yield built
    built.close()


@pytest.fixture(autouse=True)
def _fresh_counters(setup: Setup) -> None:
    setup.reset()


#: Budget mode (the default) and the paper's plain mode.
MODES: dict[str, dict[str, Any]] = {"budget": {}, "plain": {"budget": None, "gamma": 0.7}}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize(("window", "direction"), [(1, "both"), (2, "both"), (2, "next")])
def test_pg_default_sources_match_memory_without_embedding_chunks(
    setup: Setup, window: int, direction: str, mode: str
) -> None:
    settings = {"k": 3, "window": window, "direction": direction, **MODES[mode]}
    on_pg = SCARRetriever(vectorstore=setup.pg_store, **settings)
    in_memory = SCARRetriever(vectorstore=setup.memory_store, **settings)
    expanded = 0
    for query in setup.corpus.queries:
        from_pg = on_pg.invoke(query)
        assert setup.embeddings.documents_embedded == 0, query
        from_memory = in_memory.invoke(query)
        assert comparable(from_pg) == comparable(from_memory), query
        expanded += sum(len(d.metadata["scar_chunk_ids"]) - 1 for d in from_pg)
    assert setup.embeddings.queries_embedded == 2 * len(setup.corpus.queries)
    assert setup.embeddings.documents_embedded == 0
    assert expanded > 0, "the corpus should make SCAR add some neighbours"


def test_pg_the_default_vector_source_reads_the_store(setup: Setup) -> None:
    source = PGVectorStoreVectors(setup.pg_store)
    ids = setup.corpus.ids[:5]
    vectors = source.vectors_for({chunk_id: setup.corpus.documents[0] for chunk_id in ids})
    assert sorted(vectors) == sorted(ids)
    for chunk_id in ids:
        assert np.array_equal(vectors[chunk_id], setup.corpus.vectors[chunk_id])
    assert source.vectors_for({}) == {}
    with pytest.raises(InvalidSettingsError, match="PGVectorStore"):
        PGVectorStoreVectors(setup.memory_store)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("window", [1, 2])
def test_pg_chunks_as_both_sources_match_memory(setup: Setup, window: int, mode: str) -> None:
    chunks = setup.chunks()
    settings = {"k": 3, "window": window, **MODES[mode]}
    on_pg = SCARRetriever(
        vectorstore=setup.pg_store, neighbor_source=chunks, vector_source=chunks, **settings
    )
    in_memory = SCARRetriever(vectorstore=setup.memory_store, **settings)
    for query in setup.corpus.queries:
        assert comparable(on_pg.invoke(query)) == comparable(in_memory.invoke(query)), query
    assert setup.embeddings.documents_embedded == 0


def test_pg_one_statement_returns_documents_and_exact_vectors(setup: Setup) -> None:
    chunks = setup.chunks()
    ids = setup.corpus.ids[3:9]
    chunks.fetch(ids[:1])  # the first call also reads the table's column types
    setup.statements.clear()
    fetched = chunks.fetch(ids)
    assert len(setup.statements) == 1
    assert sorted(fetched.documents) == sorted(ids)
    assert sorted(fetched.vectors) == sorted(ids)
    by_store = {d.id: d for d in setup.pg_store.get_by_ids(ids)}
    for chunk_id in ids:
        assert fetched.documents[chunk_id] == by_store[chunk_id]
        assert fetched.vectors[chunk_id].dtype == np.float64
        assert np.array_equal(fetched.vectors[chunk_id], setup.corpus.vectors[chunk_id])
    setup.statements.clear()
    vectors = chunks.vectors_for({chunk_id: by_store[chunk_id] for chunk_id in ids})
    assert len(setup.statements) == 1
    assert all(np.array_equal(vectors[i], fetched.vectors[i]) for i in ids)


def test_pg_a_query_costs_one_statement_per_hop_plus_one_for_seed_vectors(setup: Setup) -> None:
    chunks = setup.chunks()
    chunks.fetch(setup.corpus.ids[:1])
    retriever = SCARRetriever(
        vectorstore=setup.pg_store, neighbor_source=chunks, vector_source=chunks, k=2, window=2
    )
    setup.statements.clear()
    retriever.invoke(next(iter(setup.corpus.queries)))
    # The seed search goes through the store's own engine; these are SCAR's statements only.
    assert 1 <= len(setup.statements) <= 3
    assert all(" = ANY(" in statement for statement in setup.statements)


def test_pg_unknown_and_malformed_ids_are_absent(setup: Setup) -> None:
    chunks = setup.chunks()
    known = setup.corpus.ids[0]
    fetched = chunks.fetch([known, "00000000-0000-0000-0000-000000000000", "not-a-uuid", known])
    assert list(fetched.documents) == [known]
    assert list(fetched.vectors) == [known]
    chunks.fetch([known])
    setup.statements.clear()
    assert chunks.fetch(["not-a-uuid"]).documents == {}
    assert chunks.fetch([]).documents == {}
    assert setup.statements == [], "nothing to look up means no statement"


def test_pg_an_uppercase_uuid_is_found_under_the_id_asked_for(setup: Setup) -> None:
    chunks = setup.chunks()
    known = setup.corpus.ids[1]
    fetched = chunks.fetch([known.upper()])
    assert list(fetched.documents) == [known.upper()]


async def test_pg_async_path_matches_sync(setup: Setup) -> None:
    chunks = setup.chunks()
    retriever = SCARRetriever(
        vectorstore=setup.pg_store, neighbor_source=chunks, vector_source=chunks, k=3, window=2
    )
    default_sources = SCARRetriever(vectorstore=setup.pg_store, k=3, window=2)
    try:
        for query in list(setup.corpus.queries)[:4]:
            expected = comparable(retriever.invoke(query))
            assert comparable(await retriever.ainvoke(query)) == expected
            assert comparable(await default_sources.ainvoke(query)) == expected
    finally:
        await chunks.aclose()
    assert setup.embeddings.documents_embedded == 0


def test_pg_a_missing_table_or_column_is_named(setup: Setup) -> None:
    with pytest.raises(InvalidSettingsError, match="does not exist"):
        PGVectorChunks(setup.sql, PGVectorTable("no_such_table")).fetch(setup.corpus.ids[:1])
    wrong_column = PGVectorTable(setup.table, embedding_column="vector")
    with pytest.raises(InvalidSettingsError, match=r"no column\(s\) \['vector'\]"):
        PGVectorChunks(setup.sql, wrong_column).fetch(setup.corpus.ids[:1])
    not_a_vector = PGVectorTable(setup.table, embedding_column="content")
    with pytest.raises(InvalidSettingsError, match="pgvector vector or halfvec"):
        PGVectorChunks(setup.sql, not_a_vector).fetch(setup.corpus.ids[:1])


@pytest.mark.parametrize(
    ("field", "value"),
    [("table_name", ""), ("id_column", 'id"; DROP TABLE x; --'), ("metadata_columns", "topic")],
)
def test_pg_table_names_are_validated(field: str, value: object) -> None:
    arguments: dict[str, Any] = {"table_name": "chunks", field: value}
    with pytest.raises(InvalidSettingsError, match=field if field != "id_column" else "id_column"):
        PGVectorTable(**arguments)


def test_pg_text_ids_and_metadata_columns(postgres: Any, table_name: str) -> None:
    engine = sqlalchemy.create_engine(postgres.uri("psycopg"))
    try:
        with engine.begin() as connection:
            connection.execute(
                sqlalchemy.text(
                    f'CREATE TABLE "{table_name}" (chunk_key text PRIMARY KEY, body text, '
                    "vec vector(3), topic integer)"
                )
            )
            connection.execute(
                sqlalchemy.text(
                    f"INSERT INTO \"{table_name}\" VALUES ('a-1', 'hello', '[1,2,0.5]', 7)"
                )
            )
        table = PGVectorTable(
            table_name,
            id_column="chunk_key",
            content_column="body",
            embedding_column="vec",
            metadata_json_column=None,
            metadata_columns=("topic",),
        )
        fetched = PGVectorChunks(engine, table).fetch(["a-1", "missing"])
        assert fetched.documents["a-1"].page_content == "hello"
        assert fetched.documents["a-1"].metadata == {"topic": 7}
        assert fetched.documents["a-1"].id == "a-1"
        assert fetched.vectors["a-1"].tolist() == [1.0, 2.0, 0.5]
    finally:
        engine.dispose()


def test_pg_chunks_made_from_a_url_own_their_pool(postgres: Any, setup: Setup) -> None:
    chunks = PGVectorChunks(postgres.uri("psycopg"), setup.table)
    try:
        assert sorted(chunks.fetch(setup.corpus.ids[:2]).documents) == sorted(setup.corpus.ids[:2])
    finally:
        chunks.close()


# --------------------------------------------------------------------------------------------
# search_with_vectors: the store's search, with the hits' vectors in the same statement


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize(("window", "direction"), [(1, "both"), (2, "both"), (2, "previous")])
def test_pg_search_source_matches_the_store_search_and_memory(
    setup: Setup, window: int, direction: str, mode: str
) -> None:
    chunks = setup.chunks()
    settings = {"k": 3, "window": window, "direction": direction, **MODES[mode]}
    with_vectors = SCARRetriever(vectorstore=setup.pg_store, search_source=chunks, **settings)
    in_memory = SCARRetriever(vectorstore=setup.memory_store, **settings)
    for query in setup.corpus.queries:
        assert comparable(with_vectors.invoke(query)) == comparable(in_memory.invoke(query)), query
    assert setup.embeddings.documents_embedded == 0


def test_pg_search_with_vectors_returns_the_store_hits_and_exact_vectors(setup: Setup) -> None:
    chunks = setup.chunks()
    for query, vector in setup.corpus.queries.items():
        hits = chunks.search_with_vectors(vector, k=4)
        by_store = setup.pg_store.similarity_search_by_vector(vector, k=4)
        assert [(d.id, d.page_content, d.metadata) for d in hits.documents] == [
            (d.id, d.page_content, d.metadata) for d in by_store
        ], query
        assert sorted(hits.vectors) == sorted(d.id for d in by_store if d.id is not None)
        for chunk_id, found in hits.vectors.items():
            assert np.array_equal(found, setup.corpus.vectors[chunk_id])


def test_pg_search_source_costs_a_search_and_one_fetch_per_query(setup: Setup) -> None:
    chunks = setup.chunks()
    chunks.fetch(setup.corpus.ids[:1])  # reads the table's column types once
    store_statements: list[str] = []

    def count_store(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        store_statements.append(statement)

    store_engine = setup.engine_pg._pool.sync_engine
    sqlalchemy.event.listen(store_engine, "before_cursor_execute", count_store)
    try:
        # Window 3 in budget mode: link_chunks ids are predictable, so every ring within the
        # window comes in one fetch after the search, and nothing lies beyond the window. With
        # 5 hits for a budget of 10, every hit is in the better half of the budget, whose
        # neighbourhoods are prefetched to the window (hits ranked below get one ring).
        retriever = SCARRetriever(
            vectorstore=setup.pg_store, search_source=chunks, window=3, fetch_k=5
        )
        for query in setup.corpus.queries:
            setup.statements.clear()
            retriever.invoke(query)
            assert len(setup.statements) == 2, query
            assert "ORDER BY" in setup.statements[0]
            assert " = ANY(" in setup.statements[1]
    finally:
        sqlalchemy.event.remove(store_engine, "before_cursor_execute", count_store)
    assert store_statements == [], "the store's own search is not used"
    assert setup.embeddings.documents_embedded == 0


async def test_pg_search_source_async_matches_sync(setup: Setup) -> None:
    chunks = setup.chunks()
    retriever = SCARRetriever(vectorstore=setup.pg_store, search_source=chunks)
    try:
        for query in list(setup.corpus.queries)[:4]:
            assert comparable(await retriever.ainvoke(query)) == comparable(retriever.invoke(query))
    finally:
        await chunks.aclose()


def test_pg_search_source_settings_are_checked(setup: Setup) -> None:
    chunks = setup.chunks()
    with pytest.raises(InvalidSettingsError, match="search_kwargs"):
        SCARRetriever(
            vectorstore=setup.pg_store, search_source=chunks, search_kwargs={"filter": {"a": 1}}
        )
    with pytest.raises(InvalidSettingsError, match="vectorstore="):
        SCARRetriever(
            base_retriever=setup.pg_store.as_retriever(),
            search_source=chunks,
            embeddings=setup.embeddings,
        )
    with pytest.raises(InvalidSettingsError, match="distance='dot'"):
        PGVectorTable(setup.table, distance="dot")  # type: ignore[arg-type]
    vector = next(iter(setup.corpus.queries.values()))
    with pytest.raises(InvalidSettingsError, match="k=0"):
        chunks.search_with_vectors(vector, k=0)
    with pytest.raises(InvalidSettingsError, match="finite"):
        chunks.search_with_vectors([float("nan")] * len(vector), k=3)
    # Finite as float64 but beyond float32, the column's precision.
    with pytest.raises(InvalidSettingsError, match="finite float32"):
        chunks.search_with_vectors([1e39] * len(vector), k=3)
    with pytest.raises(InvalidSettingsError, match="16001 dimensions"):
        chunks.search_with_vectors([0.5] * 16_001, k=3)


@pytest.mark.parametrize("distance", ["euclidean", "inner_product"])
def test_pg_search_with_vectors_orders_by_the_store_distance(
    postgres: Any, table_name: str, distance: str
) -> None:
    corpus = make_corpus(dimension=8, seed=3)
    strategy = {
        "euclidean": langchain_postgres.v2.indexes.DistanceStrategy.EUCLIDEAN,
        "inner_product": langchain_postgres.v2.indexes.DistanceStrategy.INNER_PRODUCT,
    }[distance]
    engine = langchain_postgres.PGEngine.from_connection_string(postgres.uri("psycopg"))
    sql = sqlalchemy.create_engine(postgres.uri("psycopg"))
    try:
        engine.init_vectorstore_table(table_name, corpus.dimension)
        embeddings = CountingEmbeddings(corpus.vector_of_text(), corpus.queries)
        store = langchain_postgres.PGVectorStore.create_sync(
            engine, embeddings, table_name, distance_strategy=strategy
        )
        documents = corpus.documents
        store.add_embeddings(
            [d.page_content for d in documents],
            [corpus.vectors[d.id] for d in documents if d.id is not None],
            metadatas=[dict(d.metadata) for d in documents],
            ids=corpus.ids,
        )
        chunks = PGVectorChunks(sql, PGVectorTable(table_name, distance=distance))  # type: ignore[arg-type]
        for vector in corpus.queries.values():
            hits = chunks.search_with_vectors(vector, k=5).documents
            assert [d.id for d in hits] == [
                d.id for d in store.similarity_search_by_vector(vector, k=5)
            ]
    finally:
        sql.dispose()
        asyncio.run(engine.close())


def test_pg_the_readme_search_source_example_runs(postgres: Any, setup: Setup) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    [example] = [
        b for b in re.findall(r"```py\n(.*?)```", readme, re.DOTALL) if "search_source" in b
    ]
    example = example.replace('PGVectorTable("docs"', f'PGVectorTable("{setup.table}"')
    setup.corpus.queries["What does the retransmission timer do?"] = next(
        iter(setup.corpus.queries.values())
    )
    namespace: dict[str, Any] = {"url": postgres.uri("psycopg"), "store": setup.pg_store}
    exec(compile(example, "README.md search_source example", "exec"), namespace)
    assert namespace["docs"], "the example retrieved nothing"
    assert all(d.metadata["scar_mode"] == "budget" for d in namespace["docs"])
    namespace["chunks"].close()
