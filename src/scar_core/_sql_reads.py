"""Read-only SQL on pooled connections, and pgvector's binary vectors.

The pgvector sources send one or two small ``SELECT`` statements per query. Through a SQLAlchemy
``Connection`` each costs about half a millisecond of Python on top of the database's own work
(``benchmarks/results/README.md``), which at HNSW speeds is a tenth of a search. :class:`SQLReads`
runs them on the pool's DBAPI connection instead: the statement is compiled once by the engine's
dialect, the connection is switched to autocommit for the read (a single read needs no
transaction, so no ``BEGIN`` and no ``ROLLBACK``) and switched back before it returns to the pool.

Statements go through SQLAlchemy as before, with the same results, when the engine's driver is
one this does not know how to drive (anything but psycopg 3 and psycopg2 when sync, and psycopg 3
when async), and when something watches the engine's statements (``echo=True`` logging, or a
``before_cursor_execute`` / ``after_cursor_execute`` listener: tracing such as OpenTelemetry's
SQLAlchemy instrumentation, or a statement counter), so that it keeps seeing every statement.
SQLAlchemy is imported only by the callers, so ``import scar_core`` stays numpy-only.

Connections that a reader opens itself (nothing else shares them) can live in a
:class:`DriverPool` instead of a SQLAlchemy pool: a deque of psycopg 3 connections, each with a
kept cursor, whose checkout costs a fraction of SQLAlchemy's. The engine then only compiles.

A statement may run with server settings (``hnsw.ef_search = 100``, as a vector store's
``index_query_options`` sets them). They are set with ``set_config(..., is_local => true)`` in a
transaction of their own, which is then rolled back, so they never outlive the statement and the
pooled connection goes back as it was.

On psycopg 3's direct path a read may ask for its rows in binary form (``binary=True``): a
``bytea`` column (such as ``vector_send(embedding)``) then arrives as its bytes rather than as
hex text twice as long that the server writes and the driver reads back, which saved a fifth
of a 37-row neighbourhood read (1.50 to 1.23 ms) in a replay on the benchmark machine. Every
other path reads the rows as text, into the same Python values for the built-in types the
callers select.

A query vector is passed as a :class:`VectorParameter`. On psycopg 3's direct path it travels in
pgvector's binary form (a few microseconds); everywhere else it is written as pgvector's text
``[x,y,...]``, which costs about a microsecond per dimension in Python (0.4 ms at d = 384).
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine
    from sqlalchemy.ext.asyncio import AsyncEngine
    from sqlalchemy.sql.elements import TextClause

__all__ = [
    "PGVECTOR_HEADER_BYTES",
    "DriverPool",
    "DriverPoolExhaustedError",
    "SQLReads",
    "Settings",
    "StringArrayParameter",
    "VectorParameter",
    "decode_pgvector_binary",
    "statements_watched",
]

Row = Sequence[Any]
#: Server settings for one statement: ``(name, value)`` pairs, such as ``("hnsw.ef_search", "100")``.
Settings = Sequence[tuple[str, str]]

_SYNC_DRIVERS = frozenset({"psycopg", "psycopg2"})
_ASYNC_DRIVERS = frozenset({"psycopg"})


def statements_watched(engine: Engine) -> bool:
    """Whether something sees an engine's statements: ``echo`` logging or a cursor listener."""
    dispatch = engine.dispatch
    return bool(engine.echo or dispatch.before_cursor_execute or dispatch.after_cursor_execute)


def _direct(dialect: Any, drivers: frozenset[str], engine: Engine) -> bool:
    """Whether statements may go to the driver connection itself rather than through SQLAlchemy."""
    return (
        dialect.driver in drivers
        and dialect.paramstyle == "pyformat"
        and not statements_watched(engine)
    )


@dataclass(frozen=True, eq=False)
class VectorParameter:
    """A pgvector value bound to a statement parameter, as in ``CAST(:query AS vector)``.

    The statement must cast the parameter to ``vector`` (or ``halfvec``): in binary form it is
    sent with no type, and the cast tells the server how to read it.

    Attributes:
        values: The vector, float32 (the precision of a ``vector`` column).
    """

    values: npt.NDArray[np.float32]

    def binary(self) -> bytes:
        """The binary form pgvector reads: the dimension, two unused bytes, then big-endian float32."""
        return (
            len(self.values).to_bytes(2, "big")
            + b"\0\0"
            + self.values.astype(">f4", copy=False).tobytes()
        )

    def text(self) -> str:
        """The text form ``[x,y,...]``; each float32 is written so that it reads back exactly."""
        return "[" + ",".join(map(repr, self.values.tolist())) + "]"


@dataclass(frozen=True, eq=False)
class StringArrayParameter:
    """Strings bound as one array parameter, as in ``= ANY(CAST(:ids AS uuid[]))``.

    The statement must cast the parameter to an array type. On psycopg 3's direct path it
    travels as one array literal, typed by that cast: psycopg's own list adaptation dumps each
    element in Python, which took about a tenth of a millisecond for a query's 27 neighbour ids
    amid real queries on the benchmark machine. Everywhere else it is bound as a list.

    Attributes:
        values: The strings.
    """

    values: tuple[str, ...]

    def literal(self) -> str:
        r"""PostgreSQL's array literal, every element quoted: ``{"a","b \"c\""}``."""
        quoted = (value.replace("\\", "\\\\").replace('"', '\\"') for value in self.values)
        return "{" + ",".join(f'"{value}"' for value in quoted) + "}"


def _as_text(parameters: Mapping[str, Any]) -> dict[str, Any]:
    bound: dict[str, Any] = {}
    for name, value in parameters.items():
        if isinstance(value, VectorParameter):
            value = value.text()
        elif isinstance(value, StringArrayParameter):
            value = list(value.values)
        bound[name] = value
    return bound


@functools.cache
def _binary_dumper() -> type:
    """The psycopg 3 dumper for :class:`VectorParameter` (made once, on first use)."""
    from psycopg.adapt import Dumper
    from psycopg.pq import Format

    class _VectorBinaryDumper(Dumper):
        format = Format.BINARY
        oid = 0  # no type: the statement's CAST names it, whatever OID the extension got

        def dump(self, obj: Any) -> bytes:
            return obj.binary()  # type: ignore[no-any-return]

    return _VectorBinaryDumper


@functools.cache
def _array_literal_dumper() -> type:
    """The psycopg 3 dumper for :class:`StringArrayParameter` (made once, on first use)."""
    from psycopg.adapt import Dumper
    from psycopg.pq import Format

    class _StringArrayLiteralDumper(Dumper):
        format = Format.TEXT
        oid = 0  # no type: the statement's CAST names the array type

        def dump(self, obj: Any) -> bytes:
            return obj.literal().encode()  # type: ignore[no-any-return]

    return _StringArrayLiteralDumper


def _with_binary_vectors(cursor: Any) -> Any:
    """Let a psycopg 3 cursor (or connection) send :class:`VectorParameter` values in binary form.

    It also sends each :class:`StringArrayParameter` as one array literal.
    """
    cursor.adapters.register_dumper(VectorParameter, _binary_dumper())
    cursor.adapters.register_dumper(StringArrayParameter, _array_literal_dumper())
    return cursor


def _settings_statement(settings: Settings) -> tuple[TextClause, dict[str, str]]:
    """One ``SELECT set_config(...)`` for all ``settings``, local to the transaction."""
    from sqlalchemy import text

    calls = ", ".join(f"set_config(:name_{i}, :value_{i}, true)" for i in range(len(settings)))
    parameters: dict[str, str] = {}
    for i, (name, value) in enumerate(settings):
        parameters[f"name_{i}"] = name
        parameters[f"value_{i}"] = value
    return text(f"SELECT {calls}"), parameters


def _unusable(connection: object) -> bool:
    """Whether a DBAPI connection is closed or broken (its settings can no longer be changed)."""
    return bool(getattr(connection, "closed", False)) or bool(getattr(connection, "broken", False))


class DriverPoolExhaustedError(RuntimeError):
    """Every connection of a :class:`DriverPool` stayed in use for its whole ``timeout``."""


class _PooledDriver:
    """One psycopg 3 connection of a :class:`DriverPool` in autocommit, with a cursor kept for it.

    The cursor is made once, with the dumpers of :class:`VectorParameter` and
    :class:`StringArrayParameter` registered on it; each read then asks it for binary or text
    rows.
    """

    __slots__ = ("connection", "cursor")

    def __init__(self, connection: Any) -> None:
        connection.autocommit = True
        self.connection = connection
        self.cursor = _with_binary_vectors(connection.cursor())

    def rows(
        self,
        sql: str,
        parameters: dict[str, Any],
        settings: tuple[str, dict[str, str]] | None,
        binary: bool,
    ) -> list[Row]:
        cursor = self.cursor
        if settings is None:
            cursor.execute(sql, parameters, binary=binary)
            return list(cursor.fetchall())
        connection = self.connection
        connection.autocommit = False
        try:
            cursor.execute(*settings)
            cursor.execute(sql, parameters, binary=binary)
            return list(cursor.fetchall())
        finally:
            if not _unusable(connection):
                connection.rollback()  # the settings end with the transaction
                connection.autocommit = True

    def reusable(self) -> bool:
        """Open, healthy, in autocommit and outside any transaction."""
        connection = self.connection
        return (
            not _unusable(connection)
            and connection.autocommit
            and connection.pgconn.transaction_status == _TRANSACTION_IDLE
        )

    def close(self) -> None:
        self.connection.close()


#: libpq's ``PQTRANS_IDLE``: connected, outside any transaction.
_TRANSACTION_IDLE = 0


class DriverPool:
    """psycopg 3 connections that a reader opens itself, reused last in, first out.

    :class:`SQLReads` checks a connection out of a SQLAlchemy pool for each statement and back in
    after it, which took 19 microseconds in a loop on the benchmark machine (and about 0.13 ms a
    statement amid real queries) where a deque takes a fraction of one; each connection here
    also keeps its cursor. Use it for connections nothing else shares: a
    SQLAlchemy engine's own pool stays in charge of its connections.

    At most ``open_limit`` connections are out at once: a read beyond that waits up to
    ``timeout`` seconds for one to come back. Up to ``idle_limit`` are kept open between reads;
    one that comes back broken, closed or inside a transaction is closed rather than kept.

    Args:
        connect: Opens one psycopg 3 ``Connection``.
        idle_limit: Connections kept open while idle.
        open_limit: Connections out at once, at most.
        timeout: Seconds a read waits for a connection when ``open_limit`` are out.
    """

    def __init__(
        self,
        connect: Callable[[], Any],
        *,
        idle_limit: int = 5,
        open_limit: int = 15,
        timeout: float = 30.0,
    ) -> None:
        self._connect = connect
        self._idle: deque[_PooledDriver] = deque()
        self._idle_limit = idle_limit
        self._open_limit = open_limit
        self._timeout = timeout
        self._slots = threading.BoundedSemaphore(open_limit)

    def checkout(self) -> _PooledDriver:
        """A connection of the pool's, or a new one: give it back with :meth:`checkin`.

        Raises:
            DriverPoolExhaustedError: If ``open_limit`` connections stay out for ``timeout``.
            Exception: Whatever ``connect`` raises when a new connection cannot be opened.
        """
        if not self._slots.acquire(timeout=self._timeout):
            raise DriverPoolExhaustedError(
                f"all {self._open_limit} connections of SCAR's own pool stayed in use for "
                f"{self._timeout:g} s; lower the concurrency of SCAR's queries, or read on the "
                "store's pool (PGVectorChunks.from_store(store, share_store_pool=True))."
            )
        try:
            return self._idle.pop()
        except IndexError:
            pass
        try:
            return _PooledDriver(self._connect())
        except BaseException:
            self._slots.release()
            raise

    def checkin(self, pooled: _PooledDriver) -> None:
        """Give back a connection from :meth:`checkout`: kept if healthy and room is left."""
        try:
            if not pooled.reusable():
                pooled.close()
                return
            self._idle.append(pooled)
            if len(self._idle) > self._idle_limit:  # threads returning at once may overshoot
                try:
                    surplus = self._idle.popleft()  # the longest idle
                except IndexError:
                    return
                surplus.close()
        finally:
            self._slots.release()

    def idle_count(self) -> int:
        """How many connections are open and idle."""
        return len(self._idle)

    def dispose(self) -> None:
        """Close the idle connections; those out close or stay as they come back."""
        while True:
            try:
                pooled = self._idle.pop()
            except IndexError:
                return
            pooled.close()


class SQLReads:
    """Run read-only statements on pooled DBAPI connections of SQLAlchemy engines.

    One instance serves one sync engine and any number of async engines; it keeps each
    statement's compiled text per dialect.

    Args:
        engine: The sync engine whose pool serves :meth:`rows`, and whose dialect compiles the
            statements.
        pool: Connections of the reader's own that serve :meth:`rows` instead of the engine's
            pool (the engine then only compiles); psycopg 3 only.
    """

    def __init__(self, engine: Engine, pool: DriverPool | None = None) -> None:
        self._engine = engine
        self._pool = pool
        self._autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
        self._compiled: dict[tuple[str, str, str], str] = {}

    def _sql(self, statement: TextClause, dialect: Any) -> str:
        key = (statement.text, dialect.name, dialect.driver)
        sql = self._compiled.get(key)
        if sql is None:
            sql = self._compiled[key] = str(statement.compile(dialect=dialect))
        return sql

    def _driver_settings(
        self, settings: Settings, dialect: Any
    ) -> tuple[str, dict[str, str]] | None:
        """The statement that sets ``settings``, compiled for the driver, and its values."""
        if not settings:
            return None
        statement, values = _settings_statement(settings)
        return self._sql(statement, dialect), values

    def rows(
        self,
        statement: TextClause,
        parameters: Mapping[str, Any],
        settings: Settings = (),
        *,
        binary: bool = False,
    ) -> list[Row]:
        """Run ``statement`` with ``parameters`` and return every row.

        Args:
            statement: A ``sqlalchemy.text`` statement with ``:name`` parameters; its compiled
                form is kept, by SQL text and dialect.
            parameters: The values of the statement's parameters.
            settings: Server settings for this statement alone (``(name, value)`` pairs). With
                none the read runs in autocommit; with some, in a transaction that sets them
                and is rolled back.
            binary: Ask for the rows in binary form where the driver connection is used
                directly with psycopg 3. Only for statements whose columns are built-in types
                (psycopg reads a type it has no binary loader for as bytes, not text).

        Returns:
            The rows as the driver returns them (tuples).
        """
        dialect = self._engine.dialect
        if not _direct(dialect, _SYNC_DRIVERS, self._engine):
            if settings:
                setter, values = _settings_statement(settings)
                with self._engine.connect() as connection:
                    connection.execute(setter, values)
                    found: list[Row] = list(connection.execute(statement, _as_text(parameters)))
                    connection.rollback()
                    return found
            with self._autocommit.connect() as connection:
                return list(connection.execute(statement, _as_text(parameters)).all())
        sql = self._sql(statement, dialect)
        driver_setter = self._driver_settings(settings, dialect)
        if self._pool is not None:
            pooled_driver = self._pool.checkout()
            try:
                return pooled_driver.rows(sql, dict(parameters), driver_setter, binary)
            finally:
                self._pool.checkin(pooled_driver)
        # On return the pool rolls the connection back; one the server dropped fails that and
        # the pool discards it, as it does for SQLAlchemy's own statements.
        pooled = self._engine.raw_connection()
        try:
            driver: Any = pooled.driver_connection
            was_autocommit = bool(driver.autocommit)
            autocommit = not settings
            if was_autocommit != autocommit:
                driver.autocommit = autocommit
            try:
                if dialect.driver == "psycopg":
                    cursor = _with_binary_vectors(driver.cursor(binary=binary))
                    bound = dict(parameters)
                else:
                    cursor = driver.cursor()
                    bound = _as_text(parameters)
                try:
                    if driver_setter is not None:
                        cursor.execute(*driver_setter)
                    cursor.execute(sql, bound)
                    return list(cursor.fetchall())
                finally:
                    cursor.close()
                    if settings and not _unusable(driver):
                        driver.rollback()  # the settings end with the transaction
            finally:
                if was_autocommit != autocommit and not _unusable(driver):
                    driver.autocommit = was_autocommit
        finally:
            pooled.close()

    async def arows(
        self,
        engine: AsyncEngine,
        statement: TextClause,
        parameters: Mapping[str, Any],
        settings: Settings = (),
        *,
        binary: bool = False,
    ) -> list[Row]:
        """Async form of :meth:`rows`, on ``engine`` (an ``AsyncEngine`` of the running loop).

        On the direct path the pool's connection is checked out with ``AsyncEngine.raw_connection``
        rather than through an ``AsyncConnection``, whose wrapping (an execution-options copy of
        the engine, a greenlet hop per call, the transaction bookkeeping) cost 0.74-0.79 ms a
        statement on a ``PGVectorStore``'s pool in a side-by-side timing on the benchmark machine
        (``benchmarks/results/README.md``, section 5).
        """
        dialect = engine.dialect
        if not _direct(dialect, _ASYNC_DRIVERS, engine.sync_engine):
            options = {} if settings else {"isolation_level": "AUTOCOMMIT"}
            async with engine.execution_options(**options).connect() as connection:
                if settings:
                    await connection.execute(*_settings_statement(settings))
                result = await connection.execute(statement, _as_text(parameters))
                found: list[Row] = list(result.all())
                if settings:
                    await connection.rollback()
                return found
        from sqlalchemy.util import greenlet_spawn

        pooled = await engine.raw_connection()
        try:
            driver: Any = pooled.driver_connection
            was_autocommit = bool(driver.autocommit)
            autocommit = not settings
            if was_autocommit != autocommit:
                await driver.set_autocommit(autocommit)
            try:
                async with _with_binary_vectors(driver.cursor(binary=binary)) as cursor:
                    driver_setter = self._driver_settings(settings, dialect)
                    if driver_setter is not None:
                        await cursor.execute(*driver_setter)
                    await cursor.execute(self._sql(statement, dialect), dict(parameters))
                    return list(await cursor.fetchall())
            finally:
                if settings and not _unusable(driver):
                    await driver.rollback()  # the settings end with the transaction
                if was_autocommit != autocommit and not _unusable(driver):
                    await driver.set_autocommit(was_autocommit)
        finally:
            # Returning it runs the pool's reset, which awaits the driver: in a greenlet, as
            # SQLAlchemy's own AsyncConnection.close() does.
            await greenlet_spawn(pooled.close)


#: pgvector's binary vector (``vector_send`` / ``halfvec_send``): int16 dimension, int16 unused,
#: then the big-endian values.
PGVECTOR_HEADER_BYTES = 4


def decode_pgvector_binary(
    values: Sequence[object], stored: np.dtype[Any], wanted: type[np.floating[Any]]
) -> list[npt.NDArray[Any] | None]:
    """Decode pgvector's binary form of each value; ``None`` where a value is not one.

    A batch whose values all have the same length is decoded with one buffer and one cast,
    rather than one of each per row.

    Args:
        values: What the driver returned for ``vector_send(...)`` (``bytes``), row by row.
        stored: The big-endian element type: ``>f4`` for ``vector``, ``>f2`` for ``halfvec``.
        wanted: The element type of the returned arrays (``np.float64`` or ``np.float32``).

    Returns:
        One array (or ``None``) per value, in order.
    """
    payloads = [
        v
        if type(v) is bytes
        else bytes(v)
        if isinstance(v, (bytes, bytearray, memoryview))
        else b""
        for v in values
    ]
    length = len(payloads[0]) if payloads else 0
    body = length - PGVECTOR_HEADER_BYTES
    if body > 0 and body % stored.itemsize == 0:
        dimension = body // stored.itemsize
        header = dimension.to_bytes(2, "big")
        if all(len(payload) == length and payload.startswith(header) for payload in payloads):
            # One strided view over the joined rows, skipping each header; one cast copies it.
            frame = np.ndarray(
                (len(payloads), dimension),
                dtype=stored,
                buffer=b"".join(payloads),
                offset=PGVECTOR_HEADER_BYTES,
                strides=(length, stored.itemsize),
            )
            return list(frame.astype(wanted))
    return [_decode_one(payload, stored, wanted) for payload in payloads]


def _decode_one(
    payload: bytes, stored: np.dtype[Any], wanted: type[np.floating[Any]]
) -> npt.NDArray[Any] | None:
    if len(payload) < PGVECTOR_HEADER_BYTES:
        return None
    dimension = int.from_bytes(payload[:2], "big")
    if len(payload) != PGVECTOR_HEADER_BYTES + dimension * stored.itemsize:
        return None
    return np.frombuffer(payload, dtype=stored, offset=PGVECTOR_HEADER_BYTES).astype(wanted)
