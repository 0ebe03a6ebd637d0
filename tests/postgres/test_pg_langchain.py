"""SCARRetriever over a real pgvector database (langchain-postgres PGVectorStore).

The same corpus, with the same float32 vectors, lives in a PGVectorStore and in an
InMemoryVectorStore; the retriever must return identical documents from both, and must not embed
a single chunk at query time on the database path.
"""

from __future__ import annotations

import asyncio
import gc
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
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


def filled_store(engine: Any, corpus: Corpus, table: str, **options: Any) -> Any:
    """A PGVectorStore on ``table`` (already created) holding ``corpus`` with its vectors."""
    store = langchain_postgres.PGVectorStore.create_sync(
        engine, CountingEmbeddings(corpus.vector_of_text(), corpus.queries), table, **options
    )
    documents = corpus.documents
    store.add_embeddings(
        [d.page_content for d in documents],
        [corpus.vectors[d.id] for d in documents if d.id is not None],
        metadatas=[dict(d.metadata) for d in documents],
        ids=corpus.ids,
    )
    return store


@contextmanager
def store_statements(setup: Setup, engine: Any = None) -> Iterator[list[str]]:
    """Collect the statements the store's engine (``PGEngine``) runs inside the block."""
    seen: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    store_engine = (engine or setup.engine_pg)._pool.sync_engine
    sqlalchemy.event.listen(store_engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        sqlalchemy.event.remove(store_engine, "before_cursor_execute", count)


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


@pytest.mark.parametrize("with_enum", [False, True])
def test_pg_metadata_columns_keep_their_values_in_binary_and_text_rows(
    postgres: Any, table_name: str, with_enum: bool
) -> None:
    """Rows come in binary unless a column's type is outside the built-ins psycopg reads alike
    from both forms; an enum (read as bytes from a binary row) keeps the rows in text."""
    import datetime
    import decimal

    engine = sqlalchemy.create_engine(postgres.uri("psycopg"))
    colour = f"{table_name}_colour"
    try:
        with engine.begin() as connection:
            connection.execute(sqlalchemy.text(f"CREATE TYPE \"{colour}\" AS ENUM ('red', 'blue')"))
            extra = f', colour "{colour}"' if with_enum else ""
            connection.execute(
                sqlalchemy.text(
                    f'CREATE TABLE "{table_name}" (id uuid PRIMARY KEY, body text, vec vector(2), '
                    f"meta jsonb, topic integer, weight numeric, tags text[], seen timestamptz"
                    f"{extra})"
                )
            )
            values = "'red'" if with_enum else ""
            connection.execute(
                sqlalchemy.text(
                    f"INSERT INTO \"{table_name}\" VALUES ('6f1c4c1e-5d0a-4d8e-9a57-2f0b1c7e9a11', "
                    "'hello', '[1,0.5]', '{\"k\": [1, \"two\"]}', 7, 1.25, ARRAY['x', 'y'], "
                    f"'2024-02-29 01:02:03+00'{', ' + values if values else ''})"
                )
            )
        columns = ("topic", "weight", "tags", "seen", *(("colour",) if with_enum else ()))
        table = PGVectorTable(
            table_name,
            id_column="id",
            content_column="body",
            embedding_column="vec",
            metadata_json_column="meta",
            metadata_columns=columns,
        )
        chunks = PGVectorChunks(engine, table)
        chunk_id = "6f1c4c1e-5d0a-4d8e-9a57-2f0b1c7e9a11"
        fetched = chunks.fetch([chunk_id])
        [hit] = chunks.search_with_vectors([1.0, 0.5], 1).documents
        expected = {
            "k": [1, "two"],
            "topic": 7,
            "weight": decimal.Decimal("1.25"),
            "tags": ["x", "y"],
            "seen": datetime.datetime(2024, 2, 29, 1, 2, 3, tzinfo=datetime.UTC),
        }
        if with_enum:
            expected["colour"] = "red"
        assert fetched.documents[chunk_id].metadata == expected
        assert hit.metadata == expected
        assert fetched.vectors[chunk_id].tolist() == [1.0, 0.5]
        assert chunks._layout is not None
        assert chunks._layout.binary_rows is not with_enum
    finally:
        with engine.begin() as connection:
            connection.execute(sqlalchemy.text(f'DROP TABLE IF EXISTS "{table_name}"'))
            connection.execute(sqlalchemy.text(f'DROP TYPE IF EXISTS "{colour}"'))
        engine.dispose()


def test_pg_chunks_made_from_a_url_own_their_pool(postgres: Any, setup: Setup) -> None:
    """A psycopg URL: the sync reads run in a DriverPool; the engine made for it only compiles."""
    chunks = PGVectorChunks(postgres.uri("psycopg"), setup.table)
    connections: Any = chunks._connections
    try:
        for _ in range(3):
            found = chunks.fetch(setup.corpus.ids[:2]).documents
            assert sorted(found) == sorted(setup.corpus.ids[:2])
        assert connections._pool.idle_count() == 1, "one connection served the reads in turn"
        assert connections.engine.pool.checkedin() == 0, "the engine never connected"
    finally:
        chunks.close()
    assert connections._pool.idle_count() == 0
    # An engine passed in keeps serving the reads from its own pool.
    engine = sqlalchemy.create_engine(postgres.uri("psycopg"))
    given = PGVectorChunks(engine, setup.table)
    try:
        given.fetch(setup.corpus.ids[:2])
        assert given._connections._pool is None  # type: ignore[attr-defined]
        assert engine.pool.checkedin() == 1  # type: ignore[attr-defined]
    finally:
        given.close()
        engine.dispose()


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
    with store_statements(setup) as by_store:
        # Window 3 in budget mode: link_chunks ids are predictable, so every ring within the
        # window comes in one fetch after the search, and nothing lies beyond the window. With
        # 5 hits for a budget of 10, every hit is in the better half of the budget, whose
        # neighbourhoods are prefetched to the window (hits ranked below get none).
        retriever = SCARRetriever(
            vectorstore=setup.pg_store, search_source=chunks, window=3, fetch_k=5
        )
        for query in setup.corpus.queries:
            setup.statements.clear()
            retriever.invoke(query)
            assert len(setup.statements) == 2, query
            assert "ORDER BY" in setup.statements[0]
            assert " = ANY(" in setup.statements[1]
    assert by_store == [], "the store's own search is not used"
    assert setup.embeddings.documents_embedded == 0


@pytest.mark.parametrize("sources", ["search_source", "default"])
def test_pg_batch_on_threads_matches_one_query_at_a_time(setup: Setup, sources: str) -> None:
    """LangChain's ``batch`` invokes on a thread pool: one cold source serves them all at once."""
    queries = list(setup.corpus.queries) * 3
    warm, cold = setup.chunks(), setup.chunks()

    def retriever(chunks: PGVectorChunks) -> SCARRetriever:
        if sources == "default":
            return SCARRetriever(vectorstore=setup.pg_store, window=2)
        return SCARRetriever(vectorstore=setup.pg_store, search_source=chunks, window=2)

    try:
        one_at_a_time = retriever(warm)
        expected = [comparable(one_at_a_time.invoke(query)) for query in queries]
        answers = retriever(cold).batch(queries, config={"max_concurrency": 6})
        assert [comparable(answer) for answer in answers] == expected
    finally:
        warm.close()
        cold.close()


def test_pg_by_default_threads_that_start_together_share_one_pool_of_its_own(
    postgres: Any, setup: Setup
) -> None:
    """A fresh store engine: six threads ask for its pool of SCAR's own at once."""
    import scar_langchain.pgvector as pgvector

    queries = list(setup.corpus.queries) * 3
    in_memory = SCARRetriever(vectorstore=setup.memory_store, window=2)
    expected = [comparable(in_memory.invoke(query)) for query in queries]
    engine = langchain_postgres.PGEngine.from_connection_string(postgres.uri("psycopg"))
    try:
        store = langchain_postgres.PGVectorStore.create_sync(engine, setup.embeddings, setup.table)
        retriever = SCARRetriever(vectorstore=store, window=2)
        answers = retriever.batch(queries, config={"max_concurrency": 6})
        assert [comparable(answer) for answer in answers] == expected
        own = pgvector._SETTINGS_COPY_POOLS[engine]
        assert own is not None
        assert own.usable
        assert 1 <= own.pool.idle_count() <= 5
    finally:
        asyncio.run(engine.close())


async def test_pg_abatch_matches_one_query_at_a_time(setup: Setup) -> None:
    queries = list(setup.corpus.queries) * 3
    chunks = setup.chunks()
    retriever = SCARRetriever(vectorstore=setup.pg_store, search_source=chunks, budget=None, k=2)
    try:
        expected = [comparable(retriever.invoke(query)) for query in queries]
        answers = await retriever.abatch(queries, config={"max_concurrency": 6})
        assert [comparable(answer) for answer in answers] == expected
    finally:
        await chunks.aclose()
        chunks.close()


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
        store = filled_store(engine, corpus, table_name, distance_strategy=strategy)
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
    setup.corpus.queries["What does the retransmission timer do?"] = next(
        iter(setup.corpus.queries.values())
    )
    namespace: dict[str, Any] = {"store": setup.pg_store}
    exec(compile(example, "README.md search_source example", "exec"), namespace)
    assert namespace["docs"], "the example retrieved nothing"
    assert all(d.metadata["scar_mode"] == "budget" for d in namespace["docs"])
    namespace["chunks"].close()


# --------------------------------------------------------------------------------------------
# PGVectorChunks.from_store: the table, distance and index options read from the store itself


def test_pg_chunks_from_the_store_match_memory_sync_and_async(setup: Setup) -> None:
    chunks = PGVectorChunks.from_store(setup.pg_store)
    assert chunks.table == PGVectorTable(setup.table)
    with_vectors = SCARRetriever(vectorstore=setup.pg_store, search_source=chunks, k=3)
    in_memory = SCARRetriever(vectorstore=setup.memory_store, k=3)

    async def run_async() -> list[Any]:
        try:
            return [comparable(await with_vectors.ainvoke(q)) for q in setup.corpus.queries]
        finally:
            await chunks.aclose()

    try:
        expected = [comparable(in_memory.invoke(q)) for q in setup.corpus.queries]
        assert [comparable(with_vectors.invoke(q)) for q in setup.corpus.queries] == expected
        assert asyncio.run(run_async()) == expected
    finally:
        chunks.close()
    assert setup.embeddings.documents_embedded == 0


def test_pg_table_from_a_store_with_its_own_layout(postgres: Any, table_name: str) -> None:
    from langchain_postgres import Column
    from langchain_postgres.v2.indexes import DistanceStrategy, HNSWQueryOptions

    corpus = make_corpus(dimension=8, seed=5)
    engine = langchain_postgres.PGEngine.from_connection_string(postgres.uri("psycopg"))
    layout = {
        "content_column": "body",
        "embedding_column": "vec",
        "metadata_json_column": "extra",
        "id_column": "chunk_key",
    }
    try:
        engine.init_vectorstore_table(
            table_name, corpus.dimension, metadata_columns=[Column("topic", "INTEGER")], **layout
        )
        store = filled_store(
            engine,
            corpus,
            table_name,
            metadata_columns=["topic"],
            distance_strategy=DistanceStrategy.EUCLIDEAN,
            index_query_options=HNSWQueryOptions(ef_search=17),
            **layout,
        )
        table = PGVectorTable.from_store(store)
        assert table == PGVectorTable(
            table_name,
            metadata_columns=("topic",),
            distance="euclidean",
            search_settings=(("hnsw.ef_search", "17"),),
            **layout,
        )
        chunks = PGVectorChunks.from_store(store)
        try:
            for vector in corpus.queries.values():
                hits = chunks.search_with_vectors(vector, k=5).documents
                by_store = store.similarity_search_by_vector(vector, k=5)
                assert [(d.id, d.page_content, d.metadata) for d in hits] == [
                    (d.id, d.page_content, d.metadata) for d in by_store
                ]
        finally:
            chunks.close()
    finally:
        asyncio.run(engine.close())


def test_pg_search_settings_reach_the_search_sync_and_async(postgres: Any, table_name: str) -> None:
    """HNSW returns at most ef_search rows (pgvector's iterative scans are off by default)."""
    corpus = make_corpus(dimension=8, seed=9)
    engine = langchain_postgres.PGEngine.from_connection_string(postgres.uri("psycopg"))
    sql = sqlalchemy.create_engine(postgres.uri("psycopg"))
    try:
        engine.init_vectorstore_table(table_name, corpus.dimension)
        filled_store(engine, corpus, table_name)
        with sql.begin() as connection:
            connection.exec_driver_sql(
                f'CREATE INDEX ON "{table_name}" USING hnsw (embedding vector_cosine_ops)'
            )
        index_only = (("enable_seqscan", "off"),)
        narrow = PGVectorChunks(
            sql, PGVectorTable(table_name, search_settings=(*index_only, ("hnsw.ef_search", "2")))
        )
        wide = PGVectorChunks(sql, PGVectorTable(table_name, search_settings=index_only))
        vector = next(iter(corpus.queries.values()))

        async def found_async() -> int:
            try:
                return len((await narrow.asearch_with_vectors(vector, k=5)).documents)
            finally:
                await narrow.aclose()

        assert len(wide.search_with_vectors(vector, k=5).documents) == 5
        assert len(narrow.search_with_vectors(vector, k=5).documents) == 2
        assert asyncio.run(found_async()) == 2
        assert len(wide.search_with_vectors(vector, k=5).documents) == 5, "settings leaked"
    finally:
        sql.dispose()
        asyncio.run(engine.close())


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ((("hnsw.ef_search; DROP TABLE x", "2"),), "not a PostgreSQL setting name"),
        ((("hnsw.ef_search", True),), "string or a number"),
        ((("hnsw.ef_search",),), "not a \\(name, value\\) pair"),
        ("hnsw.ef_search=2", "pairs"),
        ((("work_mem", "4MB\x00"),), "NUL"),
    ],
)
def test_pg_search_settings_are_validated(settings: Any, message: str) -> None:
    with pytest.raises(InvalidSettingsError, match=message):
        PGVectorTable("chunks", search_settings=settings)


def test_pg_search_settings_may_be_a_mapping() -> None:
    table = PGVectorTable("chunks", search_settings={"hnsw.ef_search": 100})  # type: ignore[arg-type]
    assert table.search_settings == (("hnsw.ef_search", "100"),)


def test_pg_a_search_source_that_searches_differently_is_refused(setup: Setup) -> None:
    other_distance = PGVectorChunks(setup.sql, PGVectorTable(setup.table, distance="euclidean"))
    with pytest.raises(InvalidSettingsError, match=r"distance 'euclidean'.*from_store"):
        SCARRetriever(vectorstore=setup.pg_store, search_source=other_distance)
    other_table = PGVectorChunks(setup.sql, PGVectorTable("somewhere_else"))
    with pytest.raises(InvalidSettingsError, match="table_name 'somewhere_else'"):
        SCARRetriever(vectorstore=setup.pg_store, search_source=other_table)
    # Its hits replace the store's, documents included: the columns must match too.
    more_metadata = PGVectorChunks(setup.sql, PGVectorTable(setup.table, metadata_columns=("a",)))
    with pytest.raises(
        InvalidSettingsError, match=r"metadata_columns \('a',\) \(the store's: \(\)\)"
    ):
        SCARRetriever(vectorstore=setup.pg_store, search_source=more_metadata)
    # As neighbour and vector sources they may read any table: nothing is searched there.
    SCARRetriever(vectorstore=setup.pg_store, neighbor_source=other_distance)


def test_pg_a_hybrid_store_keeps_its_own_search(setup: Setup) -> None:
    from langchain_postgres.v2.hybrid_search_config import HybridSearchConfig

    hybrid = langchain_postgres.PGVectorStore.create_sync(
        setup.engine_pg, setup.embeddings, setup.table, hybrid_search_config=HybridSearchConfig()
    )
    with pytest.raises(InvalidSettingsError, match="hybrid search"):
        SCARRetriever(vectorstore=hybrid, search_source=PGVectorChunks.from_store(hybrid))


def test_pg_from_store_refuses_what_is_not_a_pgvector_store(setup: Setup) -> None:
    with pytest.raises(InvalidSettingsError, match="InMemoryVectorStore"):
        PGVectorChunks.from_store(setup.memory_store)
    with pytest.raises(InvalidSettingsError, match="InMemoryVectorStore"):
        PGVectorTable.from_store(setup.memory_store)


def test_pg_from_store_on_an_asyncpg_engine_reads_with_psycopg(postgres: Any, setup: Setup) -> None:
    pytest.importorskip("asyncpg")
    engine = langchain_postgres.PGEngine.from_connection_string(postgres.uri("asyncpg"))
    store = langchain_postgres.PGVectorStore.create_sync(engine, setup.embeddings, setup.table)
    chunks = PGVectorChunks.from_store(store)

    async def fetched_async() -> list[str]:
        try:
            return sorted((await chunks.afetch(setup.corpus.ids[:3])).documents)
        finally:
            await chunks.aclose()

    try:
        assert chunks._connections.engine.dialect.driver == "psycopg"  # type: ignore[union-attr]
        assert sorted(chunks.fetch(setup.corpus.ids[:3]).documents) == sorted(setup.corpus.ids[:3])
        assert asyncio.run(fetched_async()) == sorted(setup.corpus.ids[:3])
    finally:
        chunks.close()
        asyncio.run(engine.close())


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql+psycopg://u:p@h/db", "postgresql+psycopg://u:p@h/db"),
        ("postgresql+psycopg2://u@h/db", "postgresql+psycopg2://u@h/db"),
        ("postgresql+asyncpg://u:p@h:5433/db", "postgresql+psycopg://u:p@h:5433/db"),
        ("postgresql+asyncpg://u@/db?host=/run/pg", "postgresql+psycopg://u@/db?host=/run/pg"),
    ],
)
def test_pg_the_store_url_gets_a_sync_driver(url: str, expected: str) -> None:
    from scar_langchain.pgvector import _sync_url

    assert _sync_url(sqlalchemy.make_url(url)) == sqlalchemy.make_url(expected)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgresql+asyncpg://u@h/db?ssl=require", "URL options \\['ssl'\\]"),
        ("mysql+aiomysql://u@h/db", "not PostgreSQL"),
    ],
)
def test_pg_a_store_url_without_a_safe_sync_form_asks_for_a_connection(
    url: str, message: str
) -> None:
    from scar_langchain.pgvector import _sync_url

    with pytest.raises(InvalidSettingsError, match=message):
        _sync_url(sqlalchemy.make_url(url))


# --------------------------------------------------------------------------------------------
# The default for a PGVectorStore: PGVectorChunks, sync reads on a pool of its own opened with the
# store's connection settings, async reads on the store's pool


def statements_while_answering(
    setup: Setup, retriever: SCARRetriever, queries: list[str]
) -> list[str]:
    """The statements the store's own engine runs while ``retriever`` answers ``queries``.

    The engine is watched meanwhile (a ``before_cursor_execute`` listener), so the default
    sources read on the store's pool, where the listener sees them.
    """
    retriever.invoke(queries[0])  # the first call also reads the table's column types
    with store_statements(setup) as seen:
        for query in queries:
            retriever.invoke(query)
    return seen


@contextmanager
def driver_statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, list[str]]]:
    """Record what psycopg's sync and async cursors execute, by cursor kind.

    The store's pool is async (its engine runs on an event loop); a pool of SCAR's own is sync.
    ``"sync_threads"`` names the thread of each sync statement.
    """
    import psycopg

    seen: dict[str, list[str]] = {"sync": [], "async": [], "sync_threads": []}
    sync_execute = psycopg.Cursor.execute
    async_execute = psycopg.AsyncCursor.execute

    def recording_sync(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        seen["sync"].append(str(query))
        seen["sync_threads"].append(threading.current_thread().name)
        return sync_execute(cursor, query, *args, **kwargs)

    async def recording_async(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        seen["async"].append(str(query))
        return await async_execute(cursor, query, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(psycopg.Cursor, "execute", recording_sync)
        patch.setattr(psycopg.AsyncCursor, "execute", recording_async)
        yield seen


def test_pg_by_default_reads_run_on_a_pool_of_their_own(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    retriever = SCARRetriever(vectorstore=setup.pg_store, window=3, fetch_k=5)
    in_memory = SCARRetriever(vectorstore=setup.memory_store, window=3, fetch_k=5)
    queries = list(setup.corpus.queries)
    retriever.invoke(queries[0])  # reads the store's settings and the table's column types
    with driver_statements(monkeypatch) as seen:
        answers = [comparable(retriever.invoke(query)) for query in queries]
    # The search with the hits' vectors, then one batch of neighbours: none on the store's pool.
    assert seen["async"] == []
    assert len(seen["sync"]) == 2 * len(queries)
    assert all("vector_send(" in statement for statement in seen["sync"])
    assert answers == [comparable(in_memory.invoke(query)) for query in queries]
    assert setup.embeddings.documents_embedded == 0
    # Async calls read on the same sync pool, in the event loop's default executor.
    loop_threads: list[str] = []

    async def answered_async() -> list[Any]:
        loop_threads.append(threading.current_thread().name)
        return [comparable(await retriever.ainvoke(query)) for query in queries]

    with driver_statements(monkeypatch) as seen:
        assert asyncio.run(answered_async()) == answers
    assert seen["async"] == []
    assert len(seen["sync"]) == 2 * len(queries)
    assert loop_threads[0] not in seen["sync_threads"], "never on the event loop's thread"


def test_pg_by_default_a_fetched_chunk_becomes_a_document_only_if_returned(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Budgeted selection reads the links of fetched rows without making their Documents."""
    import scar_langchain.pgvector as pgvector

    made: list[str] = []
    linked: list[str] = []
    make = pgvector._RowDocuments._made_document
    read = pgvector._RowDocuments.chunk_links

    def counted_make(rows: Any, chunk_id: str) -> Any:
        made.append(chunk_id)
        return make(rows, chunk_id)

    def counted_read(rows: Any, chunk_id: str, keys: Any) -> Any:
        linked.append(chunk_id)
        return read(rows, chunk_id, keys)

    monkeypatch.setattr(pgvector._RowDocuments, "_made_document", counted_make)
    monkeypatch.setattr(pgvector._RowDocuments, "chunk_links", counted_read)
    retriever = SCARRetriever(vectorstore=setup.pg_store, window=3)
    in_memory = SCARRetriever(vectorstore=setup.memory_store, window=3)
    for query in setup.corpus.queries:
        made.clear()
        linked.clear()
        answer = retriever.invoke(query)
        assert comparable(answer) == comparable(in_memory.invoke(query))
        returned = {
            chunk_id for passage in answer for chunk_id in passage.metadata["scar_chunk_ids"]
        }
        assert set(made) <= returned, "no Document for a fetched chunk the answer leaves out"
        assert len(made) == len(set(made)), "each made once"
        assert set(made) <= set(linked)


@pytest.mark.parametrize("sources", ["default", "search_source", "shared store pool"])
def test_pg_an_async_query_runs_in_one_worker_thread_when_its_reads_can(
    setup: Setup, sources: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Default sources (once their pool is open) and a search_source with a pool of its own run a
    whole async query in one worker thread; on the store's shared pool each read stays async."""
    chunks: PGVectorChunks | None = None
    if sources == "search_source":
        chunks = PGVectorChunks.from_store(setup.pg_store)
    elif sources == "shared store pool":
        chunks = PGVectorChunks.from_store(setup.pg_store, share_store_pool=True)
    retriever = SCARRetriever(vectorstore=setup.pg_store, search_source=chunks, window=2)
    in_memory = SCARRetriever(vectorstore=setup.memory_store, window=2)
    queries = list(setup.corpus.queries)
    expected = [comparable(in_memory.invoke(query)) for query in queries]
    retriever.invoke(queries[0])  # opens the pool, reads the table's column types
    retrieved_in: list[str] = []
    retrieve = SCARRetriever._retrieve

    def recorded(self: SCARRetriever, *args: Any) -> Any:
        retrieved_in.append(threading.current_thread().name)
        return retrieve(self, *args)

    monkeypatch.setattr(SCARRetriever, "_retrieve", recorded)

    async def answered() -> tuple[list[Any], str]:
        answers = [comparable(await retriever.ainvoke(query)) for query in queries]
        return answers, threading.current_thread().name

    try:
        with driver_statements(monkeypatch) as seen:
            answers, loop_thread = asyncio.run(answered())
        assert answers == expected
        if sources == "shared store pool":
            assert retrieved_in == []
            assert seen["sync"] == []
        else:
            assert len(retrieved_in) == len(queries), "one hand-over a query"
            assert loop_thread not in retrieved_in
            assert seen["async"] == []
            assert set(seen["sync_threads"]) <= set(retrieved_in)
    finally:
        if chunks is not None:
            chunks.close()


async def test_pg_by_default_a_store_engine_without_a_loop_thread_serves_async_calls(
    postgres: Any, setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``PGEngine.from_engine`` in an async app has no loop thread: settings are read async."""
    from sqlalchemy.ext.asyncio import create_async_engine

    queries = list(setup.corpus.queries)
    in_memory = SCARRetriever(vectorstore=setup.memory_store, k=3)
    expected = [comparable(in_memory.invoke(query)) for query in queries]
    engine = langchain_postgres.PGEngine.from_engine(create_async_engine(postgres.uri("psycopg")))
    try:
        store = await langchain_postgres.PGVectorStore.create(engine, setup.embeddings, setup.table)
        retriever = SCARRetriever(vectorstore=store, k=3)
        with driver_statements(monkeypatch) as seen:
            answers = [comparable(await retriever.ainvoke(query)) for query in queries]
        assert answers == expected
        assert sum("vector_send(" in statement for statement in seen["sync"]) >= 2 * len(queries)
        assert not any("vector_send(" in statement for statement in seen["async"])
    finally:
        await engine.close()


def test_pg_by_default_a_watched_store_engine_sees_every_statement(setup: Setup) -> None:
    """While a listener watches the store's engine (tracing), reads go through the store's pool."""
    retriever = SCARRetriever(vectorstore=setup.pg_store, window=3, fetch_k=5)
    queries = list(setup.corpus.queries)
    seen = statements_while_answering(setup, retriever, queries)
    assert len(seen) == 2 * len(queries)
    assert all("vector_send(" in statement for statement in seen)
    assert sum("ORDER BY" in statement for statement in seen) == len(queries)
    assert setup.statements == []
    assert setup.embeddings.documents_embedded == 0


def test_pg_by_default_the_pool_of_its_own_connects_as_the_store_does(
    postgres: Any, setup: Setup
) -> None:
    """Settings the store's engine got outside its URL (connect_args) reach the own pool too."""
    import scar_langchain.pgvector as pgvector

    engine = langchain_postgres.PGEngine.from_connection_string(
        postgres.uri("psycopg"),
        connect_args={"application_name": "scar-settings-test", "prepare_threshold": None},
    )
    try:
        store = langchain_postgres.PGVectorStore.create_sync(engine, setup.embeddings, setup.table)
        chunks = pgvector.default_store_chunks(store)
        assert chunks is not None
        rows = chunks._connections.rows(
            sqlalchemy.text("SELECT current_setting('application_name'), pg_backend_pid()"), {}
        )
        name, pid = rows[0]
        assert name == "scar-settings-test"
        own = pgvector._SETTINGS_COPY_POOLS[engine]
        assert own is not None
        assert own.usable
        pooled = own.pool.checkout()
        try:
            driver = pooled.connection
            assert driver.prepare_threshold is None, "psycopg's setting, not libpq's, copied too"
            assert driver.info.backend_pid == pid, "the pool of its own served the read"
        finally:
            own.pool.checkin(pooled)
        settings = own.settings
        assert "host=" in settings.conninfo
        assert "conninfo" not in repr(settings), "it may hold a password"
        # Every retriever of the engine's stores shares that pool.
        again = SCARRetriever(vectorstore=store)
        again.invoke(next(iter(setup.corpus.queries)))
        assert pgvector._SETTINGS_COPY_POOLS[engine] is own
        chunks.close()
    finally:
        asyncio.run(engine.close())


def test_pg_by_default_the_pool_of_its_own_closes_with_the_store_engine(
    postgres: Any, setup: Setup
) -> None:
    name = "scar-closes-with-the-engine"

    def sessions() -> int:
        with setup.sql.connect() as connection:
            return int(
                connection.execute(
                    sqlalchemy.text(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = :name"
                    ),
                    {"name": name},
                ).scalar_one()
            )

    def settled(expected: int) -> bool:
        for _ in range(100):  # a closed connection's server process ends a moment later
            if sessions() == expected:
                return True
            time.sleep(0.02)
        return False

    engine = langchain_postgres.PGEngine.from_connection_string(
        postgres.uri("psycopg"), connect_args={"application_name": name}
    )
    store = langchain_postgres.PGVectorStore.create_sync(engine, setup.embeddings, setup.table)
    SCARRetriever(vectorstore=store).invoke(next(iter(setup.corpus.queries)))
    asyncio.run(engine.close())  # the store's own pool
    assert settled(1), "the pool of SCAR's own still holds its connection"
    del store, engine
    gc.collect()
    assert settled(0)


def test_pg_by_default_a_connection_that_cannot_open_falls_back_to_the_store_pool(
    postgres: Any, setup: Setup, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A role that may no longer log in: the store's open connection still serves every read."""
    import scar_langchain.pgvector as pgvector

    role = "scar_revoked_role"
    with setup.sql.connect() as connection:
        connection.execute(sqlalchemy.text(f"DROP ROLE IF EXISTS {role}"))
        connection.execute(sqlalchemy.text(f"CREATE ROLE {role} LOGIN"))
        connection.execute(sqlalchemy.text(f'GRANT SELECT ON "{setup.table}" TO {role}'))
        connection.commit()
    url = sqlalchemy.make_url(postgres.uri("psycopg")).set(username=role)
    engine = langchain_postgres.PGEngine.from_connection_string(url)
    try:
        store = langchain_postgres.PGVectorStore.create_sync(engine, setup.embeddings, setup.table)
        queries = list(setup.corpus.queries)
        store.similarity_search(queries[0])  # the store's pool now holds an open connection
        with setup.sql.connect() as connection:
            connection.execute(sqlalchemy.text(f"ALTER ROLE {role} NOLOGIN"))
            connection.commit()
        retriever = SCARRetriever(vectorstore=store, k=3)
        in_memory = SCARRetriever(vectorstore=setup.memory_store, k=3)
        with (
            caplog.at_level("WARNING", logger="scar_langchain.pgvector"),
            driver_statements(monkeypatch) as seen,
        ):
            answers = [comparable(retriever.invoke(query)) for query in queries]
        assert answers == [comparable(in_memory.invoke(query)) for query in queries]
        assert seen["sync"] == [], "no connection of its own ever opened"
        assert len(seen["async"]) >= 2 * len(queries)
        warned = [r for r in caplog.records if "from now on" in r.getMessage()]
        assert len(warned) == 1, "said once"
        assert "not permitted to log in" in warned[0].getMessage()
        own = pgvector._SETTINGS_COPY_POOLS[engine]
        assert own is not None
        assert not own.usable
    finally:
        asyncio.run(engine.close())
        with setup.sql.connect() as connection:
            connection.execute(sqlalchemy.text(f'REVOKE SELECT ON "{setup.table}" FROM {role}'))
            connection.execute(sqlalchemy.text(f"DROP ROLE {role}"))
            connection.commit()


def test_pg_by_default_search_kwargs_keep_the_store_search(setup: Setup) -> None:
    retriever = SCARRetriever(vectorstore=setup.pg_store, search_kwargs={"filter": None})
    in_memory = SCARRetriever(vectorstore=setup.memory_store)
    queries = list(setup.corpus.queries)
    seen = statements_while_answering(setup, retriever, queries)
    searches = [statement for statement in seen if "ORDER BY" in statement]
    assert len(searches) == len(queries)
    assert not any("vector_send(" in statement for statement in searches), "the store's search"
    assert any("vector_send(" in statement for statement in seen), "neighbours in binary"
    for query in queries:
        assert comparable(retriever.invoke(query)) == comparable(in_memory.invoke(query))


def test_pg_a_hybrid_store_is_searched_by_the_store(setup: Setup) -> None:
    from langchain_postgres.v2.hybrid_search_config import HybridSearchConfig

    hybrid = langchain_postgres.PGVectorStore.create_sync(
        setup.engine_pg, setup.embeddings, setup.table, hybrid_search_config=HybridSearchConfig()
    )
    retriever = SCARRetriever(vectorstore=hybrid)
    queries = list(setup.corpus.queries)[:3]
    searches = [s for s in statements_while_answering(setup, retriever, queries) if "ORDER BY" in s]
    assert searches
    assert not any("vector_send(" in statement for statement in searches)


def test_pg_without_readable_internals_the_public_api_serves(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    import scar_langchain.pgvector as pgvector

    monkeypatch.setattr(
        pgvector, "_STORE_ATTRIBUTES", (*pgvector._STORE_ATTRIBUTES, "not_in_any_version")
    )
    assert pgvector.default_store_chunks(setup.pg_store) is None
    retriever = SCARRetriever(vectorstore=setup.pg_store, k=3)
    in_memory = SCARRetriever(vectorstore=setup.memory_store, k=3)
    queries = list(setup.corpus.queries)
    seen = statements_while_answering(setup, retriever, queries)
    assert seen
    assert not any("vector_send(" in statement for statement in seen), "text, through get()"
    for query in queries:
        assert comparable(retriever.invoke(query)) == comparable(in_memory.invoke(query))


def test_pg_sharing_the_store_pool_takes_no_connection_of_its_own(setup: Setup) -> None:
    with pytest.raises(InvalidSettingsError, match="share_store_pool"):
        PGVectorChunks.from_store(setup.pg_store, connection=setup.sql, share_store_pool=True)
    shared = PGVectorChunks.from_store(setup.pg_store, share_store_pool=True)
    fetched = shared.fetch(setup.corpus.ids[:4])
    assert sorted(fetched.documents) == sorted(setup.corpus.ids[:4])
    shared.close()  # the pool is the store's: it stays open
    assert setup.pg_store.get_by_ids(setup.corpus.ids[:1])


def test_pg_by_default_a_store_on_asyncpg_is_read_on_its_pool(postgres: Any, setup: Setup) -> None:
    """asyncpg takes the SQLAlchemy path (the query vector as text); same results."""
    import scar_langchain.pgvector as pgvector

    pytest.importorskip("asyncpg")
    engine = langchain_postgres.PGEngine.from_connection_string(postgres.uri("asyncpg"))
    store = langchain_postgres.PGVectorStore.create_sync(engine, setup.embeddings, setup.table)
    on_asyncpg = SCARRetriever(vectorstore=store, k=3, window=2)
    in_memory = SCARRetriever(vectorstore=setup.memory_store, k=3, window=2)
    queries = list(setup.corpus.queries)[:4]

    async def answered_async() -> list[Any]:
        return [comparable(await on_asyncpg.ainvoke(query)) for query in queries]

    try:
        expected = [comparable(in_memory.invoke(query)) for query in queries]
        assert comparable(on_asyncpg.invoke(queries[0])) == expected[0]
        assert pgvector._SETTINGS_COPY_POOLS[engine] is None, "psycopg 3 only: no pool of its own"
        with store_statements(setup, engine) as seen:
            assert [comparable(on_asyncpg.invoke(query)) for query in queries] == expected
        assert any("vector_send(" in statement for statement in seen), "the table, read directly"
        assert asyncio.run(answered_async()) == expected
    finally:
        asyncio.run(engine.close())
    assert setup.embeddings.documents_embedded == 0
