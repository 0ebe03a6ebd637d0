"""SQLReads on a real PostgreSQL: the same rows as SQLAlchemy, and a pool left as it was found."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scar_core._sql_reads import (
    DriverPool,
    DriverPoolExhaustedError,
    SQLReads,
    StringArrayParameter,
    VectorParameter,
    decode_pgvector_binary,
)

pytestmark = pytest.mark.postgres

sqlalchemy = pytest.importorskip("sqlalchemy")

STATEMENT = (
    "SELECT n, CAST(n AS text) || '%', CAST(:ids AS text[]) @> ARRAY[CAST(n AS text)] "
    "FROM generate_series(1, :count) AS n ORDER BY n"
)
PARAMETERS = {"ids": ["2", "3"], "count": 4}
#: The query vector's round trip: the server reads it and sends back what it read, in binary.
VECTOR_STATEMENT = (
    "SELECT vector_send(CAST(:query AS vector)), halfvec_send(CAST(:query AS halfvec)), :k"
)
QUERY = np.array([0.1, -2.5, 1e-30, 6.0e4, -0.0], dtype=np.float32)  # within halfvec's range


def assert_vector_read_back(rows: list[Any]) -> None:
    """The server read the query exactly (and as a halfvec, rounded to half precision)."""
    [vector] = decode_pgvector_binary([rows[0][0]], np.dtype(">f4"), np.float32)
    [halfvec] = decode_pgvector_binary([rows[0][1]], np.dtype(">f2"), np.float32)
    assert vector is not None
    assert halfvec is not None
    np.testing.assert_array_equal(vector, QUERY)
    np.testing.assert_array_equal(halfvec, QUERY.astype(np.float16).astype(np.float32))
    assert int(rows[0][2]) == 7


@pytest.fixture(params=["psycopg", "psycopg2"])
def engine(request: pytest.FixtureRequest, postgres: Any) -> Iterator[Any]:
    pytest.importorskip(request.param)
    # One pooled connection, so every read checks out the very connection the test inspects.
    built = sqlalchemy.create_engine(postgres.uri(request.param), pool_size=1, max_overflow=0)
    yield built
    built.dispose()


def through_sqlalchemy(engine: Any, statement: Any) -> list[tuple[Any, ...]]:
    with engine.connect() as connection:
        return [tuple(row) for row in connection.execute(statement, PARAMETERS)]


def test_rows_equal_sqlalchemy_and_the_connection_is_returned_unchanged(engine: Any) -> None:
    reads = SQLReads(engine)
    statement = sqlalchemy.text(STATEMENT)
    expected = through_sqlalchemy(engine, statement)
    assert expected == [(1, "1%", False), (2, "2%", True), (3, "3%", True), (4, "4%", False)]
    for _ in range(3):  # the compiled statement is reused
        assert [tuple(row) for row in reads.rows(statement, PARAMETERS)] == expected
    pooled = engine.raw_connection()
    try:
        assert pooled.driver_connection.autocommit is False
    finally:
        pooled.close()
    # The engine's own transactions still work as transactions.
    with engine.begin() as connection:
        connection.exec_driver_sql("CREATE TEMPORARY TABLE kept (n int)")
        connection.exec_driver_sql("INSERT INTO kept VALUES (1)")
    with engine.connect() as connection:
        connection.exec_driver_sql("INSERT INTO kept VALUES (2)")
        connection.rollback()
        assert connection.exec_driver_sql("SELECT count(*) FROM kept").scalar() == 1


def test_a_query_vector_reaches_the_server_exactly(
    engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Binary on psycopg 3 (also once psycopg prepares the statement), text on psycopg2."""
    if engine.dialect.driver == "psycopg":

        def no_text(parameter: VectorParameter) -> str:
            raise AssertionError("psycopg 3 should get the query vector in binary form")

        monkeypatch.setattr(VectorParameter, "text", no_text)
    reads = SQLReads(engine)
    statement = sqlalchemy.text(VECTOR_STATEMENT)
    for _ in range(7):  # psycopg prepares a statement on its sixth run
        assert_vector_read_back(reads.rows(statement, {"query": VectorParameter(QUERY), "k": 7}))


def test_a_failing_statement_leaves_the_pool_usable(engine: Any) -> None:
    reads = SQLReads(engine)
    # The driver's own error (SQLReads does not wrap it); the retrievers report it as a fetch error.
    with pytest.raises(Exception, match="not a number"):
        reads.rows(sqlalchemy.text("SELECT CAST(:value AS integer)"), {"value": "not a number"})
    assert reads.rows(sqlalchemy.text("SELECT :value"), {"value": 5})[0][0] in (5, "5")


def fail_a_read_after_killing(reads: SQLReads, postgres: Any, pid: int) -> None:
    """End the server process ``pid`` from another connection; the next read then fails."""
    killer = sqlalchemy.create_engine(postgres.uri("psycopg"))
    with killer.connect() as connection:
        connection.execute(sqlalchemy.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    killer.dispose()
    with pytest.raises(Exception):  # noqa: B017, PT011 - the driver's own disconnect error
        reads.rows(sqlalchemy.text("SELECT 1"), {})


def test_a_connection_killed_under_it_is_dropped_from_the_pool(engine: Any, postgres: Any) -> None:
    reads = SQLReads(engine)
    pid = reads.rows(sqlalchemy.text("SELECT pg_backend_pid()"), {})[0][0]
    fail_a_read_after_killing(reads, postgres, pid)
    fresh = reads.rows(sqlalchemy.text("SELECT pg_backend_pid()"), {})[0][0]
    assert fresh != pid


def test_async_rows_equal_sync_rows(postgres: Any) -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    sync_engine = sqlalchemy.create_engine(postgres.uri("psycopg"))
    reads = SQLReads(sync_engine)
    statement = sqlalchemy.text(STATEMENT)
    expected = [tuple(row) for row in reads.rows(statement, PARAMETERS)]

    async def read() -> tuple[list[tuple[Any, ...]], bool]:
        engine = create_async_engine(postgres.uri("psycopg"), pool_size=1, max_overflow=0)
        try:
            rows = [tuple(row) for row in await reads.arows(engine, statement, PARAMETERS)]
            rows_again = [tuple(row) for row in await reads.arows(engine, statement, PARAMETERS)]
            assert rows_again == rows
            async with engine.connect() as connection:
                pooled = await connection.get_raw_connection()
                autocommit = bool(pooled.driver_connection.autocommit)
            return rows, autocommit
        finally:
            await engine.dispose()

    rows, autocommit = asyncio.run(read())
    assert rows == expected
    assert autocommit is False
    sync_engine.dispose()


def test_an_async_failing_statement_returns_its_connection_unchanged(postgres: Any) -> None:
    """The async direct path checks out a raw pooled connection: a failure must still return it
    (one connection in the pool, so a leak would block the next read) as it came."""
    from sqlalchemy.ext.asyncio import create_async_engine

    reads = SQLReads(sqlalchemy.create_engine(postgres.uri("psycopg")))
    failing = sqlalchemy.text("SELECT CAST(:value AS integer)")

    async def read() -> tuple[Any, Any, bool]:
        engine = create_async_engine(postgres.uri("psycopg"), pool_size=1, max_overflow=0)
        try:
            with pytest.raises(Exception, match="not a number"):
                await reads.arows(engine, failing, {"value": "not a number"})
            with pytest.raises(Exception, match="not a number"):
                await reads.arows(
                    engine, failing, {"value": "not a number"}, [("work_mem", "99kB")]
                )
            found = await asyncio.wait_for(reads.arows(engine, failing, {"value": "7"}), 10)
            setting = await reads.arows(engine, sqlalchemy.text("SHOW work_mem"), {})
            async with engine.connect() as connection:
                pooled = await connection.get_raw_connection()
                autocommit = bool(pooled.driver_connection.autocommit)
            return found[0][0], setting[0][0], autocommit
        finally:
            await engine.dispose()

    value, work_mem, autocommit = asyncio.run(read())
    assert value == 7
    assert work_mem != "99kB"
    assert autocommit is False


def test_an_async_query_vector_reaches_the_server_exactly(postgres: Any) -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    sync_engine = sqlalchemy.create_engine(postgres.uri("psycopg"))
    reads = SQLReads(sync_engine)

    async def read() -> list[Any]:
        engine = create_async_engine(postgres.uri("psycopg"))
        try:
            statement = sqlalchemy.text(VECTOR_STATEMENT)
            return await reads.arows(engine, statement, {"query": VectorParameter(QUERY), "k": 7})
        finally:
            await engine.dispose()

    assert_vector_read_back(asyncio.run(read()))
    sync_engine.dispose()


def test_statements_go_through_sqlalchemy_while_something_listens(postgres: Any) -> None:
    """Tracing hooks on the engine (OpenTelemetry, a counter) keep seeing every statement."""
    engine = sqlalchemy.create_engine(postgres.uri("psycopg"))
    seen: list[str] = []

    def listen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    reads = SQLReads(engine)
    statement = sqlalchemy.text(STATEMENT)
    direct = [tuple(row) for row in reads.rows(statement, PARAMETERS)]
    assert seen == []
    sqlalchemy.event.listen(engine, "before_cursor_execute", listen)
    assert [tuple(row) for row in reads.rows(statement, PARAMETERS)] == direct
    assert len(seen) == 1
    assert "generate_series" in seen[0]
    sqlalchemy.event.remove(engine, "before_cursor_execute", listen)
    reads.rows(statement, PARAMETERS)
    assert len(seen) == 1
    engine.dispose()


def test_statements_go_through_sqlalchemy_on_an_echoing_engine(
    postgres: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """echo=True logs every statement; SQLReads keeps that promise."""
    engine = sqlalchemy.create_engine(postgres.uri("psycopg"), echo=True)
    reads = SQLReads(engine)
    with caplog.at_level("INFO", logger="sqlalchemy.engine"):
        rows = reads.rows(sqlalchemy.text(STATEMENT), PARAMETERS)
    assert [row[0] for row in rows] == [1, 2, 3, 4]
    assert any("generate_series" in record.getMessage() for record in caplog.records)
    # Through SQLAlchemy the query vector goes as text, and still arrives exactly.
    vector_rows = reads.rows(
        sqlalchemy.text(VECTOR_STATEMENT), {"query": VectorParameter(QUERY), "k": 7}
    )
    assert_vector_read_back(vector_rows)
    engine.dispose()


#: Two server settings, and the statement that reads them back.
SETTINGS = [("work_mem", "7MB"), ("statement_timeout", "12345")]
SHOW_SETTINGS = "SELECT current_setting('work_mem'), current_setting('statement_timeout'), :k"


def test_settings_hold_for_the_statement_alone(engine: Any) -> None:
    """Set for the one statement, gone afterwards, on the very connection the pool hands out."""
    reads = SQLReads(engine)
    statement = sqlalchemy.text(SHOW_SETTINGS)
    before = [tuple(row) for row in reads.rows(statement, {"k": 1})]
    assert before[0][:2] != ("7MB", "12345ms")
    for _ in range(2):
        rows = reads.rows(statement, {"k": 1}, SETTINGS)
        assert tuple(rows[0]) == ("7MB", "12345ms", 1)
        assert [tuple(row) for row in reads.rows(statement, {"k": 1})] == before
    pooled = engine.raw_connection()
    try:
        assert pooled.driver_connection.autocommit is False
    finally:
        pooled.close()
    # A failing statement takes its settings with it, and the pool stays usable.
    with pytest.raises(Exception, match="invalid input syntax"):
        reads.rows(sqlalchemy.text("SELECT CAST(:value AS integer)"), {"value": "x"}, SETTINGS)
    assert [tuple(row) for row in reads.rows(statement, {"k": 1})] == before


def test_settings_also_hold_through_sqlalchemy(postgres: Any) -> None:
    engine = sqlalchemy.create_engine(postgres.uri("psycopg"), echo=True, pool_size=1)
    reads = SQLReads(engine)
    statement = sqlalchemy.text(SHOW_SETTINGS)
    before = [tuple(row) for row in reads.rows(statement, {"k": 1})]
    assert tuple(reads.rows(statement, {"k": 1}, SETTINGS)[0]) == ("7MB", "12345ms", 1)
    assert [tuple(row) for row in reads.rows(statement, {"k": 1})] == before
    engine.dispose()


@pytest.mark.parametrize("echo", [False, True], ids=["direct", "through-sqlalchemy"])
def test_async_settings_hold_for_the_statement_alone(postgres: Any, echo: bool) -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    sync_engine = sqlalchemy.create_engine(postgres.uri("psycopg"))
    reads = SQLReads(sync_engine)
    statement = sqlalchemy.text(SHOW_SETTINGS)

    async def read() -> tuple[list[Any], list[Any], list[Any], bool]:
        engine = create_async_engine(
            postgres.uri("psycopg"), echo=echo, pool_size=1, max_overflow=0
        )
        try:
            before = [tuple(row) for row in await reads.arows(engine, statement, {"k": 2})]
            during = [
                tuple(row) for row in await reads.arows(engine, statement, {"k": 2}, SETTINGS)
            ]
            after = [tuple(row) for row in await reads.arows(engine, statement, {"k": 2})]
            async with engine.connect() as connection:
                pooled = await connection.get_raw_connection()
                autocommit = bool(pooled.driver_connection.autocommit)
            return before, during, after, autocommit
        finally:
            await engine.dispose()

    before, during, after, autocommit = asyncio.run(read())
    assert during == [("7MB", "12345ms", 2)]
    assert after == before != during
    assert autocommit is False
    sync_engine.dispose()


#: A value of each type the pgvector chunk reader lets come in binary rows, by ``udt_name``.
SAMPLE_OF_TYPE = {
    "bool": "true",
    "bpchar": "CAST('ab' AS char(3))",
    "bytea": "CAST('\\x00ff10' AS bytea)",
    "date": "DATE '2024-02-29'",
    "float4": "CAST(1.5 AS real)",
    "float8": "CAST(-2.25e-300 AS double precision)",
    "int2": "CAST(-7 AS smallint)",
    "int4": "CAST(123456 AS integer)",
    "int8": "CAST(9007199254740993 AS bigint)",
    "interval": "INTERVAL '1 day 02:03:04.5'",
    "json": """CAST('{"a": [1, 2.5, null], "b": "é"}' AS json)""",
    "jsonb": """CAST('{"a": {"b": true}}' AS jsonb)""",
    "name": "CAST('a_name' AS name)",
    "numeric": "CAST(12345678901234567890.125 AS numeric)",
    "text": "'text with ünïcode'",
    "time": "TIME '01:02:03.25'",
    "timestamp": "TIMESTAMP '2024-02-29 01:02:03.5'",
    "timestamptz": "TIMESTAMPTZ '2024-02-29 01:02:03.5+05:30'",
    "timetz": "CAST('01:02:03+02' AS timetz)",
    "uuid": "CAST('6f1c4c1e-5d0a-4d8e-9a57-2f0b1c7e9a11' AS uuid)",
    "varchar": "CAST('vc' AS varchar(5))",
}


def test_binary_rows_read_as_text_rows_for_every_type_let_through(postgres: Any) -> None:
    """Each type PGVectorChunks reads from binary rows gives the value text rows give (sync and
    async), alone, as an array, and as NULL."""
    from sqlalchemy.ext.asyncio import create_async_engine

    from scar_langchain.pgvector import _SAME_IN_BINARY

    assert set(SAMPLE_OF_TYPE) == _SAME_IN_BINARY
    columns = [
        f"{sample}, ARRAY[{sample}, NULL], CAST(NULL AS {udt})"
        for udt, sample in SAMPLE_OF_TYPE.items()
    ]
    statement = sqlalchemy.text("SELECT " + ", ".join(columns))
    engine = sqlalchemy.create_engine(postgres.uri("psycopg"))
    reads = SQLReads(engine)

    async def read_async() -> list[Any]:
        async_engine = create_async_engine(postgres.uri("psycopg"))
        try:
            return await reads.arows(async_engine, statement, {}, binary=True)
        finally:
            await async_engine.dispose()

    try:
        [as_text] = reads.rows(statement, {})
        [as_binary] = reads.rows(statement, {}, binary=True)
        [as_binary_async] = asyncio.run(read_async())
        # Why the list: a type psycopg has no binary loader for comes back as bytes.
        point = sqlalchemy.text("SELECT point(1, 2)")
        assert reads.rows(point, {})[0][0] == "(1,2)"
        assert isinstance(reads.rows(point, {}, binary=True)[0][0], bytes)
    finally:
        engine.dispose()
    assert len(as_text) == 3 * len(SAMPLE_OF_TYPE)
    assert tuple(as_binary) == tuple(as_text)
    assert tuple(as_binary_async) == tuple(as_text)


# -- a pool of the reader's own (DriverPool) -------------------------------------------------


def own_pool(postgres: Any, **limits: Any) -> DriverPool:
    psycopg = pytest.importorskip("psycopg")
    return DriverPool(lambda: psycopg.connect(postgres.handle.get_uri()), **limits)


def own_reads(pool: DriverPool) -> SQLReads:
    """Reads on ``pool``; the engine only compiles (it has no server to connect to)."""
    return SQLReads(sqlalchemy.create_engine("postgresql+psycopg://"), pool)


def backend_pid(reads: SQLReads) -> int:
    return int(reads.rows(sqlalchemy.text("SELECT pg_backend_pid()"), {})[0][0])


def test_own_pool_rows_equal_sqlalchemy_on_one_reused_connection(
    postgres: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_text(parameter: VectorParameter) -> str:
        raise AssertionError("the own pool should send the query vector in binary form")

    monkeypatch.setattr(VectorParameter, "text", no_text)
    engine = sqlalchemy.create_engine(postgres.uri("psycopg"))
    pool = own_pool(postgres)
    reads = own_reads(pool)
    statement = sqlalchemy.text(STATEMENT)
    expected = through_sqlalchemy(engine, statement)
    engine.dispose()
    pids = set()
    for _ in range(7):  # psycopg prepares a statement on its sixth run
        assert [tuple(row) for row in reads.rows(statement, PARAMETERS)] == expected
        vector_rows = reads.rows(
            sqlalchemy.text(VECTOR_STATEMENT),
            {"query": VectorParameter(QUERY), "k": 7},
            binary=True,
        )
        assert_vector_read_back(vector_rows)
        pids.add(backend_pid(reads))
    assert len(pids) == 1, "one connection served every read in turn"
    assert pool.idle_count() == 1
    pool.dispose()
    assert pool.idle_count() == 0
    assert backend_pid(reads) not in pids, "a disposed pool opens a new connection when used"
    pool.dispose()


def test_own_pool_settings_hold_for_the_statement_alone(postgres: Any) -> None:
    pool = own_pool(postgres)
    reads = own_reads(pool)
    statement = sqlalchemy.text(SHOW_SETTINGS)
    before = [tuple(row) for row in reads.rows(statement, {"k": 1})]
    assert before[0][:2] != ("7MB", "12345ms")
    for _ in range(2):
        assert tuple(reads.rows(statement, {"k": 1}, SETTINGS)[0]) == ("7MB", "12345ms", 1)
        assert [tuple(row) for row in reads.rows(statement, {"k": 1})] == before
    with pytest.raises(Exception, match="invalid input syntax"):
        reads.rows(sqlalchemy.text("SELECT CAST(:value AS integer)"), {"value": "x"}, SETTINGS)
    assert [tuple(row) for row in reads.rows(statement, {"k": 1})] == before
    pooled = pool.checkout()
    try:
        assert pooled.connection.autocommit is True, "back in autocommit after each read"
    finally:
        pool.checkin(pooled)
    pool.dispose()


def test_own_pool_keeps_a_connection_after_a_failing_statement_but_drops_a_killed_one(
    postgres: Any,
) -> None:
    pool = own_pool(postgres)
    reads = own_reads(pool)
    pid = backend_pid(reads)
    with pytest.raises(Exception, match="not a number"):
        reads.rows(sqlalchemy.text("SELECT CAST(:value AS integer)"), {"value": "not a number"})
    assert backend_pid(reads) == pid, "an error in autocommit leaves the connection usable"
    fail_a_read_after_killing(reads, postgres, pid)
    assert pool.idle_count() == 0, "the broken connection was closed, not kept"
    assert backend_pid(reads) != pid
    pool.dispose()


def test_own_pool_limits_connections_out_and_kept(postgres: Any) -> None:
    pool = own_pool(postgres, idle_limit=1, open_limit=2, timeout=0.05)
    first, second = pool.checkout(), pool.checkout()
    with pytest.raises(DriverPoolExhaustedError, match="all 2 connections"):
        pool.checkout()
    pool.checkin(first)
    pool.checkin(second)
    assert pool.idle_count() == 1
    assert first.connection.closed, "beyond idle_limit the longest idle connection is closed"
    assert not second.connection.closed
    again = pool.checkout()
    assert again is second
    pool.checkin(again)
    pool.dispose()
    assert second.connection.closed


#: Any text PostgreSQL can store: no NUL, no lone surrogates.
STORABLE_TEXT = st.text(
    alphabet=st.characters(exclude_characters="\x00", exclude_categories=["Cs"])
)


@pytest.mark.parametrize("path", ["psycopg", "psycopg2", "own pool"])
def test_a_string_array_parameter_reads_back_every_string(
    postgres: Any, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Quotes, backslashes, braces, commas, blanks, "NULL": one literal on psycopg 3, a list else."""
    pytest.importorskip(path.split()[0] if path != "own pool" else "psycopg")
    literals: list[str] = []
    literal = StringArrayParameter.literal

    def counted(parameter: StringArrayParameter) -> str:
        literals.append(literal(parameter))
        return literals[-1]

    monkeypatch.setattr(StringArrayParameter, "literal", counted)
    pool = own_pool(postgres) if path == "own pool" else None
    engine = sqlalchemy.create_engine(postgres.uri(path if pool is None else "psycopg"))
    reads = SQLReads(engine, pool)
    statement = sqlalchemy.text("SELECT CAST(:ids AS text[])")

    @settings(max_examples=60, deadline=None)
    @given(values=st.lists(STORABLE_TEXT, max_size=6))
    def reads_back(values: list[str]) -> None:
        [row] = reads.rows(statement, {"ids": StringArrayParameter(tuple(values))})
        assert list(row[0]) == values

    try:
        reads_back()
        reads_back_edge = ["NULL", "", " a ", '"', "\\", "{,}", "é😀"]
        [row] = reads.rows(statement, {"ids": StringArrayParameter(tuple(reads_back_edge))})
        assert list(row[0]) == reads_back_edge
    finally:
        engine.dispose()
        if pool is not None:
            pool.dispose()
    assert bool(literals) == (path != "psycopg2"), "psycopg 3 gets one literal, psycopg2 a list"
