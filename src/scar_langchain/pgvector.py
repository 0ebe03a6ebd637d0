"""Chunks and their stored vectors from PostgreSQL with pgvector, so nothing is re-embedded.

Two readers for the table of a ``langchain_postgres.PGVectorStore``:

* :class:`PGVectorChunks` queries the table directly: a batch of chunks comes back with its
  vectors in one query, the vectors in pgvector's binary form (exact float32, no text to parse).
  Its search returns the hits with their vectors. ``PGVectorChunks.from_store(store)`` reads the
  table, columns, distance strategy and index query options from the store, and serves as the
  retriever's ``search_source`` (and so as its ``neighbor_source`` and ``vector_source``).
  :class:`~scar_langchain.SCARRetriever` given a ``PGVectorStore`` and no sources uses one
  that reads on a sync pool of its own, opened with the settings of the store's own connections
  (:func:`default_store_chunks`).
* :class:`PGVectorStoreVectors` reads vectors through the store's own public
  ``get(ids=..., include=["embeddings"])``: one SQL query per batch and nothing to configure.
  The retriever falls back to it when this langchain-postgres version keeps the store's table
  elsewhere. The store returns each vector as text, which costs about 0.6 microseconds per
  dimension to parse.

Neither imports ``langchain_postgres`` or ``sqlalchemy`` until it is built, so
``scar_langchain`` imports without the ``postgres`` extra.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import threading
import uuid
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

import numpy as np
import numpy.typing as npt
from langchain_core.documents import Document

from scar_core._async_engines import AsyncEnginePerLoop
from scar_core._lazy import LazyValues, isinstance_if_loaded
from scar_core._sql_reads import (
    DriverPool,
    Row,
    Settings,
    SQLReads,
    StringArrayParameter,
    VectorParameter,
    decode_pgvector_binary,
    statements_watched,
)
from scar_core.errors import InvalidSettingsError, missing_dependency
from scar_langchain._links import ChunkLinks, ChunkMetadataKeys, links_in_metadata
from scar_langchain._neighbors import FetchedChunks, SearchHits

if TYPE_CHECKING:
    from sqlalchemy.engine import URL, Engine
    from sqlalchemy.ext.asyncio import AsyncEngine
    from sqlalchemy.sql.elements import TextClause

__all__ = [
    "PGVectorChunks",
    "PGVectorStoreVectors",
    "PGVectorTable",
    "check_search_matches_store",
    "default_store_chunks",
    "is_pgvector_store",
    "runs_hybrid_search",
]

logger = logging.getLogger(__name__)

FloatVector = npt.NDArray[np.float64]
#: Documents and vectors read from the table, by the chunk id asked for.
_Rows = tuple[Mapping[str, Document], dict[str, FloatVector]]

#: A store's distance strategy, as langchain-postgres names its ``DistanceStrategy`` members.
Distance = Literal["cosine", "euclidean", "inner_product"]
#: pgvector's ordering operator for each distance strategy.
_DISTANCE_OPERATORS: dict[str, str] = {"cosine": "<=>", "euclidean": "<->", "inner_product": "<#>"}

#: A UUID as PostgreSQL prints it (lower case, hyphenated).
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

#: Column types psycopg reads into the same Python values from binary rows as from text rows
#: (``udt_name`` spelling; arrays of them too). A type outside it, such as an enum, would come
#: back from a binary row as bytes, so a table with one is read as text.
_SAME_IN_BINARY = frozenset(
    {
        "bool", "bpchar", "bytea", "date", "float4", "float8", "int2", "int4", "int8",
        "interval", "json", "jsonb", "name", "numeric", "text", "time", "timestamp",
        "timestamptz", "timetz", "uuid", "varchar",
    }
)  # fmt: skip

#: The most dimensions a pgvector ``vector`` or ``halfvec`` column can have.
PGVECTOR_MAX_DIMENSIONS = 16_000

#: The big-endian element type of pgvector's binary form, by column type.
_BINARY_DTYPE: dict[str, np.dtype[Any]] = {"vector": np.dtype(">f4"), "halfvec": np.dtype(">f2")}


def is_pgvector_store(vectorstore: object) -> bool:
    """Whether ``vectorstore`` is a ``langchain_postgres.PGVectorStore``.

    The check never imports ``langchain_postgres``: an object can only be one of its stores when
    the module is already loaded.
    """
    return isinstance_if_loaded(vectorstore, "langchain_postgres.v2.vectorstores", "PGVectorStore")


def _text_vector(value: object) -> FloatVector | None:
    """Read a vector as the store hands it back: pgvector text ``"[1,2,3]"``, or a sequence."""
    if value is None:
        return None
    if isinstance(value, str):
        body = value.strip()
        if len(body) < 2 or body[0] != "[" or body[-1] != "]":
            return None
        try:
            # pgvector prints the shortest decimal that reads back as the stored float32.
            values = np.array(body[1:-1].split(","), dtype=np.float32)
        except ValueError:
            return None
        return np.asarray(values, dtype=np.float64)
    return np.asarray(value, dtype=np.float64)


#: langchain-postgres ``DistanceStrategy`` member names, and the distance each one is.
_DISTANCE_BY_STRATEGY: dict[str, Distance] = {
    "COSINE_DISTANCE": "cosine",
    "EUCLIDEAN": "euclidean",
    "INNER_PRODUCT": "inner_product",
}
#: What a ``PGVectorStore``'s inner store must have for :meth:`PGVectorTable.from_store`.
_STORE_ATTRIBUTES = (
    "engine",
    "table_name",
    "schema_name",
    "id_column",
    "content_column",
    "embedding_column",
    "metadata_json_column",
    "metadata_columns",
    "distance_strategy",
    "index_query_options",
    "hybrid_search_config",
)
#: A server setting's name: ``work_mem``, or ``extension.name`` such as ``hnsw.ef_search``.
_SETTING_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*(\.[A-Za-z_][A-Za-z0-9_$]*)?")


def _store_internals(vectorstore: object) -> Any:
    """The ``AsyncPGVectorStore`` inside a ``PGVectorStore``: its table, columns and engine.

    langchain-postgres keeps it in a private attribute; every attribute used is checked, so a
    version that moved them fails here with a clear message, not mid-query.
    """
    if not is_pgvector_store(vectorstore):
        raise InvalidSettingsError(
            f"expected a langchain_postgres.PGVectorStore, not {type(vectorstore).__name__}; "
            "for another store build PGVectorTable(...) by hand."
        )
    inner = getattr(vectorstore, "_PGVectorStore__vs", None)
    missing = [name for name in _STORE_ATTRIBUTES if not hasattr(inner, name)]
    if inner is None or missing:
        raise InvalidSettingsError(
            "cannot read the table of this PGVectorStore (this langchain-postgres version keeps "
            f"it elsewhere; missing {missing or ['the inner store']}). Build "
            "PGVectorTable(...) with the names the store was created with instead."
        )
    return inner


def default_store_chunks(vectorstore: object) -> PGVectorChunks | None:
    """What :class:`~scar_langchain.SCARRetriever` reads a ``PGVectorStore`` with by default.

    A :class:`PGVectorChunks` over the store's table (neighbours and vectors in one statement per
    batch, vectors in binary form, and, see :func:`runs_hybrid_search`, the search with the hits'
    vectors) whose reads run on a sync connection pool of its own (for an async caller, in the
    event loop's default executor: the whole query in one thread once the pool is open). That
    pool opens its connections with the settings of the store's own (libpq's options as one of
    them used them: host, user, password, TLS, ``options``), so it reaches the same database as
    the store however the store's engine was made; every retriever of one store engine shares
    it. Reads while something watches the store engine's
    statements (``echo``, a cursor listener), reads for a store whose driver is not psycopg 3,
    and every read once a connection of its own has failed to open run on the store's own pool
    (``share_store_pool=True``).

    Returns ``None`` for any other store, or when this langchain-postgres version keeps the
    store's table or engine elsewhere; the retriever then reads through the store's public API.
    """
    if not is_pgvector_store(vectorstore):
        return None
    try:
        table = PGVectorTable.from_store(vectorstore)
        connections = _StoreSettingsPools(_StorePool(vectorstore))
    except InvalidSettingsError as error:
        logger.debug("reading the PGVectorStore through its public API: %s", error)
        return None
    return PGVectorChunks._on(table, connections)


def runs_hybrid_search(vectorstore: object) -> bool:
    """Whether a ``PGVectorStore`` ranks by dense and full-text search together.

    Its search then cannot be replaced by :meth:`PGVectorChunks.search_with_vectors`.
    """
    return _store_internals(vectorstore).hybrid_search_config is not None


def check_search_matches_store(vectorstore: object, search_source: object) -> None:
    """Refuse a :class:`PGVectorChunks` search that would rank differently from the store's.

    It must read the store's table and columns with the store's distance strategy and index
    query options (its hits replace the store's, documents included), and the store must not run
    hybrid (dense + full-text) search, which it would replace with a dense one. Anything else
    (another store, another search source, a langchain-postgres version whose table cannot be
    read) is left unchecked.

    Raises:
        InvalidSettingsError: Naming each difference, and :meth:`PGVectorChunks.from_store`.
    """
    if not isinstance(search_source, PGVectorChunks) or not is_pgvector_store(vectorstore):
        return
    try:
        expected = PGVectorTable.from_store(vectorstore)
    except InvalidSettingsError as error:
        logger.debug("search_source not checked against the store: %s", error)
        return
    if runs_hybrid_search(vectorstore):
        raise InvalidSettingsError(
            "this PGVectorStore runs hybrid search (hybrid_search_config), which search_source= "
            "would replace with a dense-only search; drop search_source= (and pass "
            "neighbor_source= and vector_source= for the fast neighbour reads)."
        )
    table = search_source.table
    differences = [
        f"{name} {getattr(table, name)!r} (the store's: {getattr(expected, name)!r})"
        for name in (field.name for field in fields(PGVectorTable))
        if getattr(table, name) != getattr(expected, name)
    ]
    if differences:
        raise InvalidSettingsError(
            "search_source= would not search as the store does: its "
            + "; ".join(differences)
            + ". Build it with PGVectorChunks.from_store(store)."
        )


def _parse_setting(text: str) -> tuple[str, str]:
    """``"hnsw.ef_search = 100"`` (a ``QueryOptions.to_parameter()`` item) as a pair."""
    name, separator, value = text.partition("=")
    if not separator:
        raise InvalidSettingsError(
            f"index query option {text!r} is not of the form 'name = value'; pass "
            "PGVectorTable(search_settings=...) yourself."
        )
    return name.strip(), value.strip().strip("'")


def _checked_settings(settings: object) -> tuple[tuple[str, str], ...]:
    pairs = list(settings.items()) if isinstance(settings, Mapping) else settings
    if isinstance(pairs, (str, bytes)) or not isinstance(pairs, Iterable):
        raise InvalidSettingsError(
            f"search_settings={settings!r} is not valid; give (name, value) pairs, such as "
            "(('hnsw.ef_search', '100'),)."
        )
    checked: list[tuple[str, str]] = []
    for pair in pairs:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise InvalidSettingsError(
                f"search_settings item {pair!r} is not a (name, value) pair, such as "
                "('hnsw.ef_search', '100')."
            )
        name, value = pair
        if not isinstance(name, str) or not _SETTING_NAME.fullmatch(name):
            raise InvalidSettingsError(
                f"search setting name {name!r} is not a PostgreSQL setting name, such as "
                "'hnsw.ef_search' or 'ivfflat.probes'."
            )
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise InvalidSettingsError(
                f"search setting {name}={value!r} is not valid; give its value as a string or "
                "a number."
            )
        if "\x00" in str(value):
            raise InvalidSettingsError(f"search setting {name}={value!r} contains a NUL byte.")
        checked.append((name, str(value)))
    return tuple(checked)


class PGVectorStoreVectors:
    """Reads the vectors a ``langchain_postgres.PGVectorStore`` holds, through its public ``get``.

    One ``get(ids=..., include=["embeddings"])`` per batch: one SQL query, no embedding call. A
    chunk the table lacks is left out.

    Args:
        vectorstore: The store the chunks were added to, under their chunk ids.

    Raises:
        InvalidSettingsError: If ``vectorstore`` is not a ``PGVectorStore``.
    """

    def __init__(self, vectorstore: Any) -> None:
        if not is_pgvector_store(vectorstore):
            raise InvalidSettingsError(
                f"PGVectorStoreVectors needs a langchain_postgres.PGVectorStore, not "
                f"{type(vectorstore).__name__}."
            )
        self.vectorstore = vectorstore

    @staticmethod
    def _vectors(chunk_ids: Sequence[str], found: Mapping[str, Any]) -> dict[str, FloatVector]:
        requested = _requested_by_key(chunk_ids)
        vectors: dict[str, FloatVector] = {}
        for returned_id, value in zip(
            found.get("ids", []), found.get("embeddings", []), strict=True
        ):
            chunk_id = requested.get(_key(str(returned_id)))
            vector = _text_vector(value)
            if chunk_id is not None and vector is not None:
                vectors[chunk_id] = vector
        return vectors

    def vectors_for(self, chunks: Mapping[str, Document]) -> dict[str, FloatVector]:
        """Return the stored vectors of ``chunks`` (``chunk id -> Document``) in one query."""
        chunk_ids = list(chunks)
        if not chunk_ids:
            return {}
        return self._vectors(chunk_ids, self.vectorstore.get(ids=chunk_ids, include=["embeddings"]))

    async def avectors_for(self, chunks: Mapping[str, Document]) -> dict[str, FloatVector]:
        """Async form of :meth:`vectors_for` (the store's ``aget``)."""
        chunk_ids = list(chunks)
        if not chunk_ids:
            return {}
        found = await self.vectorstore.aget(ids=chunk_ids, include=["embeddings"])
        return self._vectors(chunk_ids, found)


def _check_identifier(name: str, value: object) -> None:
    if not isinstance(value, str) or not value or '"' in value or "\x00" in value:
        raise InvalidSettingsError(
            f"{name}={value!r} is not valid; it must be a non-empty SQL identifier without double "
            "quotes (the name given to init_vectorstore_table / PGVectorStore.create)."
        )


@dataclass(frozen=True)
class PGVectorTable:
    """The table of a ``langchain_postgres.PGVectorStore``: its name and column names.

    The defaults are those of ``PGEngine.init_vectorstore_table`` and ``PGVectorStore.create``;
    give the same names you gave them.

    Attributes:
        table_name: The table (``PGVectorStore.get_table_name()``).
        schema_name: Its schema.
        id_column: The chunk id column (a UUID column by default).
        content_column: The text column.
        embedding_column: The pgvector column (``vector`` or ``halfvec``).
        metadata_json_column: The JSON metadata column, or ``None`` when there is none.
        metadata_columns: Columns read into metadata under their own names, as the store does.
        distance: The store's distance strategy, which orders the hits of
            :meth:`PGVectorChunks.search_with_vectors`: ``"cosine"`` (the store's default),
            ``"euclidean"`` or ``"inner_product"``.
        search_settings: Server settings for the search alone, as ``(name, value)`` pairs:
            what the store's ``index_query_options`` sets, such as
            ``(("hnsw.ef_search", "100"),)``. The search then runs in a transaction that sets
            them locally and is rolled back.

    Use :meth:`from_store` to read all of this from the store itself.
    """

    table_name: str
    schema_name: str = "public"
    id_column: str = "langchain_id"
    content_column: str = "content"
    embedding_column: str = "embedding"
    metadata_json_column: str | None = "langchain_metadata"
    metadata_columns: tuple[str, ...] = ()
    distance: Distance = "cosine"
    search_settings: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        for name in ("table_name", "schema_name", "id_column", "content_column"):
            _check_identifier(name, getattr(self, name))
        _check_identifier("embedding_column", self.embedding_column)
        if self.metadata_json_column is not None:
            _check_identifier("metadata_json_column", self.metadata_json_column)
        if isinstance(self.metadata_columns, str) or not isinstance(
            self.metadata_columns, Iterable
        ):
            raise InvalidSettingsError(
                f"metadata_columns={self.metadata_columns!r} is not valid; it must be a tuple of "
                "column names."
            )
        object.__setattr__(self, "metadata_columns", tuple(self.metadata_columns))
        for column in self.metadata_columns:
            _check_identifier("a metadata column", column)
        if self.distance not in _DISTANCE_OPERATORS:
            raise InvalidSettingsError(
                f"distance={self.distance!r} is not valid; use one of "
                f"{', '.join(_DISTANCE_OPERATORS)} (the store's distance_strategy)."
            )
        object.__setattr__(self, "search_settings", _checked_settings(self.search_settings))

    @classmethod
    def from_store(cls, vectorstore: Any) -> PGVectorTable:
        """The table, columns, distance strategy and index query options of a ``PGVectorStore``.

        Args:
            vectorstore: A ``langchain_postgres.PGVectorStore``.

        Returns:
            The table as the store searches it.

        Raises:
            InvalidSettingsError: If ``vectorstore`` is not a ``PGVectorStore``, or its
                langchain-postgres version keeps the table elsewhere (then build the
                ``PGVectorTable`` by hand, with the names the store was created with).
        """
        inner = _store_internals(vectorstore)
        strategy = getattr(inner.distance_strategy, "name", None)
        distance = _DISTANCE_BY_STRATEGY.get(str(strategy))
        if distance is None:
            raise InvalidSettingsError(
                f"the store's distance_strategy {inner.distance_strategy!r} is not one "
                f"PGVectorChunks can search with ({', '.join(_DISTANCE_BY_STRATEGY)})."
            )
        options = inner.index_query_options
        settings = (
            () if options is None else tuple(_parse_setting(s) for s in options.to_parameter())
        )
        return cls(
            table_name=inner.table_name,
            schema_name=inner.schema_name,
            id_column=inner.id_column,
            content_column=inner.content_column,
            embedding_column=inner.embedding_column,
            metadata_json_column=inner.metadata_json_column,
            metadata_columns=tuple(inner.metadata_columns),
            distance=distance,
            search_settings=settings,
        )

    @property
    def qualified_name(self) -> str:
        """``"schema"."table"``, quoted for SQL."""
        return f'"{self.schema_name}"."{self.table_name}"'


@dataclass(frozen=True)
class _Layout:
    """What the table looks like, read once from the catalogue."""

    ids_are_uuids: bool
    vector_type: str
    id_type: str
    #: Whether rows may come in binary form: every column is read the same from either form.
    binary_rows: bool = False


class _Connections(Protocol):
    """Where :class:`PGVectorChunks` runs its statements.

    :class:`_OwnPools`, :class:`_StorePool` and :class:`_StoreSettingsPools` implement it.
    """

    def rows(
        self,
        statement: TextClause,
        parameters: Mapping[str, Any],
        settings: Settings = (),
        *,
        binary: bool = False,
    ) -> list[Row]: ...

    async def arows(
        self,
        statement: TextClause,
        parameters: Mapping[str, Any],
        settings: Settings = (),
        *,
        binary: bool = False,
    ) -> list[Row]: ...

    def sync_reads_in_any_thread(self) -> bool:
        """Whether :meth:`rows` may run in any thread, with no event loop of the caller's."""
        ...

    def close(self) -> None: ...

    async def aclose(self) -> None: ...


class _OwnPools:
    """Reads on pools of :class:`PGVectorChunks`' own: one sync engine, one async per loop.

    An engine made here from a ``postgresql+psycopg`` URL only compiles: its sync reads run in a
    :class:`~scar_core._sql_reads.DriverPool` of connections opened as the engine would open
    them (the dialect's own connect arguments), which nothing else shares. An engine passed in
    keeps serving its reads from its own pool.
    """

    def __init__(
        self, connection: str | URL | Engine, async_connection: str | URL | AsyncEngine | None
    ) -> None:
        try:
            import sqlalchemy
        except ImportError as error:  # pragma: no cover - exercised only without the extra
            raise missing_dependency("sqlalchemy", "postgres") from error
        self._owns_engine = isinstance(connection, (str, sqlalchemy.URL))
        self.engine: Engine = (
            sqlalchemy.create_engine(connection)
            if isinstance(connection, (str, sqlalchemy.URL))
            else connection
        )
        self._pool: DriverPool | None = None
        if self._owns_engine and self.engine.dialect.driver == "psycopg":
            arguments, keywords = self.engine.dialect.create_connect_args(self.engine.url)
            connect = functools.partial(self.engine.dialect.connect, *arguments, **keywords)
            self._pool = DriverPool(connect)
        # Single reads need no transaction: autocommit saves a BEGIN and a ROLLBACK per query.
        self._reads = SQLReads(self.engine, self._pool)
        self._async = AsyncEnginePerLoop(
            async_connection if async_connection is not None else self.engine.url,
            driver_hint=(
                "the async methods need an async driver; use a postgresql+psycopg:// URL "
                "or pass async_connection= (a URL or an AsyncEngine)."
            ),
        )

    def rows(
        self,
        statement: TextClause,
        parameters: Mapping[str, Any],
        settings: Settings = (),
        *,
        binary: bool = False,
    ) -> list[Row]:
        return self._reads.rows(statement, parameters, settings, binary=binary)

    async def arows(
        self,
        statement: TextClause,
        parameters: Mapping[str, Any],
        settings: Settings = (),
        *,
        binary: bool = False,
    ) -> list[Row]:
        engine = self._async.current()
        return await self._reads.arows(engine, statement, parameters, settings, binary=binary)

    def sync_reads_in_any_thread(self) -> bool:
        """Always: the sync reads run on this object's own sync engine or pool."""
        return True

    def close(self) -> None:
        if self._owns_engine:
            self.engine.dispose()
        if self._pool is not None:
            self._pool.dispose()

    async def aclose(self) -> None:
        await self._async.dispose_current()


class _StorePool:
    """Reads on a ``PGVectorStore``'s own pool, on the event loop that pool belongs to.

    langchain-postgres's ``PGEngine`` runs the store's statements on a background event loop;
    these reads are handed to that loop the same way (``_run_as_sync`` / ``_run_as_async``).
    """

    def __init__(self, vectorstore: object) -> None:
        store_engine: Any = getattr(vectorstore, "_engine", None)
        missing = [
            name
            for name in ("_pool", "_run_as_sync", "_run_as_async")
            if not hasattr(store_engine, name)
        ]
        if missing:
            raise InvalidSettingsError(
                "cannot share this PGVectorStore's pool (this langchain-postgres version keeps "
                f"its engine elsewhere; missing {missing}); use share_store_pool=False."
            )
        #: The store's ``PGEngine``: its pool, and the loop its statements run on.
        self.store_engine = store_engine
        self._pool: AsyncEngine = store_engine._pool
        self._reads = SQLReads(self._pool.sync_engine)

    def watched(self) -> bool:
        """Whether something sees the store engine's statements (``echo``, a cursor listener)."""
        return statements_watched(self._pool.sync_engine)

    def connection_settings(self) -> _ConnectionSettings | None:
        """How the store's connections are opened, read from one of them; ``None`` unless psycopg 3."""
        return self.store_engine._run_as_sync(  # type: ignore[no-any-return]
            _read_connection_settings(self._pool)
        )

    async def aconnection_settings(self) -> _ConnectionSettings | None:
        """Async form of :meth:`connection_settings`."""
        return await self.store_engine._run_as_async(  # type: ignore[no-any-return]
            _read_connection_settings(self._pool)
        )

    def rows(
        self,
        statement: TextClause,
        parameters: Mapping[str, Any],
        settings: Settings = (),
        *,
        binary: bool = False,
    ) -> list[Row]:
        read = self._reads.arows(self._pool, statement, parameters, settings, binary=binary)
        return self.store_engine._run_as_sync(read)  # type: ignore[no-any-return]

    async def arows(
        self,
        statement: TextClause,
        parameters: Mapping[str, Any],
        settings: Settings = (),
        *,
        binary: bool = False,
    ) -> list[Row]:
        read = self._reads.arows(self._pool, statement, parameters, settings, binary=binary)
        return await self.store_engine._run_as_async(read)  # type: ignore[no-any-return]

    def sync_reads_in_any_thread(self) -> bool:
        """Never: each read goes to the store's loop thread, which async calls reach directly."""
        return False

    def close(self) -> None:
        """The pool is the store's: nothing to dispose of."""

    async def aclose(self) -> None:
        """The pool is the store's: nothing to dispose of."""


class _ConnectError(Exception):
    """A pool of SCAR's own could not open a connection with the store's settings."""


@dataclass(frozen=True)
class _ConnectionSettings:
    """How a ``PGVectorStore``'s psycopg 3 connections are opened, read from a live one.

    Attributes:
        conninfo: libpq's connection options as that connection used them (``PQconninfo``), the
            password included (so it is left out of ``repr``).
        prepare_threshold: psycopg's executions before a statement is prepared (``None``: never,
            as behind a transaction-mode PgBouncer).
        prepared_max: psycopg's most prepared statements per connection.
    """

    conninfo: str = field(repr=False)
    prepare_threshold: int | None
    prepared_max: int | None

    @classmethod
    def of(cls, connection: object) -> _ConnectionSettings | None:
        """Read them from a psycopg ``AsyncConnection``; ``None`` for another driver's."""
        import psycopg
        from psycopg.conninfo import make_conninfo

        if not isinstance(connection, psycopg.AsyncConnection):
            return None
        options = {
            option.keyword.decode(): option.val.decode()
            for option in connection.pgconn.info
            if option.val is not None
        }
        return cls(
            make_conninfo("", **options), connection.prepare_threshold, connection.prepared_max
        )

    def connect(self) -> Any:
        """Open a sync psycopg connection with these settings (for SCAR's own pool).

        Raises:
            _ConnectError: If the server cannot be reached or refuses the connection.
        """
        import psycopg

        try:
            connection = psycopg.connect(self.conninfo, prepare_threshold=self.prepare_threshold)
        except psycopg.OperationalError as error:
            raise _ConnectError(str(error)) from error
        connection.prepared_max = self.prepared_max
        return connection


async def _read_connection_settings(pool: AsyncEngine) -> _ConnectionSettings | None:
    """The settings of one of ``pool``'s connections, checked out and back in on its loop."""
    from sqlalchemy.util import greenlet_spawn

    pooled = await pool.raw_connection()
    try:
        return _ConnectionSettings.of(pooled.driver_connection)
    finally:
        await greenlet_spawn(pooled.close)


class _SettingsCopyPool:
    """A sync connection pool of SCAR's own, opening connections with a store's settings.

    Attributes:
        settings: How its connections are opened.
        pool: The connections (a :class:`~scar_core._sql_reads.DriverPool`).
        reads: Runs statements on them (a SQLAlchemy engine that never connects compiles them).
        usable: Cleared when a connection fails to open: the store's pool serves from then on.
    """

    def __init__(self, settings: _ConnectionSettings) -> None:
        import sqlalchemy

        self.settings = settings
        self.pool = DriverPool(settings.connect)
        self.reads = SQLReads(sqlalchemy.create_engine("postgresql+psycopg://"), self.pool)
        self.usable = True


#: The pool of SCAR's own for each store engine (``PGEngine``), or ``None`` where there is none
#: (not psycopg 3): shared by every retriever of the engine's stores, so that one made per
#: request does not open connections of its own, and disposed of when the engine is collected.
_SETTINGS_COPY_POOLS: weakref.WeakKeyDictionary[Any, _SettingsCopyPool | None] = (
    weakref.WeakKeyDictionary()
)
_SETTINGS_COPY_POOLS_LOCK = threading.Lock()


#: What :data:`_SETTINGS_COPY_POOLS` answers for a store engine it has not seen yet.
_UNSEEN = object()


def _registered_pool(store: _StorePool) -> object:
    """The registered pool of ``store``'s engine: a pool, ``None``, or :data:`_UNSEEN`."""
    with _SETTINGS_COPY_POOLS_LOCK:
        return _SETTINGS_COPY_POOLS.get(store.store_engine, _UNSEEN)


def _register_pool(
    store: _StorePool, settings: _ConnectionSettings | None
) -> _SettingsCopyPool | None:
    """Register a pool for ``store``'s engine made with ``settings``, unless one was first."""
    key = store.store_engine
    made = None if settings is None else _SettingsCopyPool(settings)
    with _SETTINGS_COPY_POOLS_LOCK:
        if key in _SETTINGS_COPY_POOLS:  # another thread was first; `made` never connected
            return _SETTINGS_COPY_POOLS[key]
        _SETTINGS_COPY_POOLS[key] = made
    if made is not None:
        weakref.finalize(key, made.pool.dispose)
    return made


def _settings_copy_pool(store: _StorePool) -> _SettingsCopyPool | None:
    """The pool of SCAR's own for ``store``'s engine, made on first use."""
    known = _registered_pool(store)
    if known is not _UNSEEN:
        return cast("_SettingsCopyPool | None", known)
    # Read outside the lock: it waits for the store's event loop.
    return _register_pool(store, store.connection_settings())


async def _asettings_copy_pool(store: _StorePool) -> _SettingsCopyPool | None:
    """Async form of :func:`_settings_copy_pool`, for a store engine with no loop thread too."""
    known = _registered_pool(store)
    if known is not _UNSEEN:
        return cast("_SettingsCopyPool | None", known)
    return _register_pool(store, await store.aconnection_settings())


class _StoreSettingsPools:
    """Reads on a sync pool of SCAR's own opened with the store's settings; else on the store's.

    Async reads run that pool's sync reads in the event loop's default executor (a thread): on
    the benchmark machine that cost less than a read on the store's pool, which hands each
    statement to the store's loop thread and runs it on the async driver
    (``benchmarks/results/README.md``, section 1, session 12).

    The store's pool serves reads while something watches the store engine's statements (so
    logging and tracing keep seeing them), a store whose driver is not psycopg 3, and every read
    once a connection of SCAR's own has failed to open (a password that has since changed, a
    creator function's token): such a failure is logged once and the read is retried on the
    store's pool, so no query fails for it.
    """

    def __init__(self, store: _StorePool) -> None:
        self._store = store

    def rows(
        self,
        statement: TextClause,
        parameters: Mapping[str, Any],
        settings: Settings = (),
        *,
        binary: bool = False,
    ) -> list[Row]:
        if not self._store.watched():
            own = _settings_copy_pool(self._store)
            if own is not None and own.usable:
                found = _own_rows(own, statement, parameters, settings, binary)
                if found is not None:
                    return found
        return self._store.rows(statement, parameters, settings, binary=binary)

    async def arows(
        self,
        statement: TextClause,
        parameters: Mapping[str, Any],
        settings: Settings = (),
        *,
        binary: bool = False,
    ) -> list[Row]:
        if not self._store.watched():
            own = await _asettings_copy_pool(self._store)
            if own is not None and own.usable:
                found = await asyncio.to_thread(
                    _own_rows, own, statement, parameters, settings, binary
                )
                if found is not None:
                    return found
        return await self._store.arows(statement, parameters, settings, binary=binary)

    def sync_reads_in_any_thread(self) -> bool:
        """Whether SCAR's own pool is open and serves the reads, and a fallback could too.

        The store's pool serves a read that SCAR's own cannot (one whose connection fails to
        open); its sync form runs on the store's loop thread, which a ``PGEngine`` made with
        ``from_engine`` in an async app does not have.
        """
        own = _registered_pool(self._store)
        return (
            isinstance(own, _SettingsCopyPool)
            and own.usable
            and not self._store.watched()
            and getattr(self._store.store_engine, "_loop", None) is not None
        )

    def close(self) -> None:
        """Close the idle connections of SCAR's own pool (it reopens them if used again)."""
        own = _registered_pool(self._store)
        if isinstance(own, _SettingsCopyPool):
            own.pool.dispose()

    async def aclose(self) -> None:
        """Async form of :meth:`close`, off the event loop (the store's pool stays the store's)."""
        await asyncio.to_thread(self.close)


def _own_rows(
    own: _SettingsCopyPool,
    statement: TextClause,
    parameters: Mapping[str, Any],
    settings: Settings,
    binary: bool,
) -> list[Row] | None:
    """Read on SCAR's own pool; ``None`` (and the pool set aside) when it cannot connect."""
    try:
        return own.reads.rows(statement, parameters, settings, binary=binary)
    except _ConnectError as error:
        if own.usable:
            own.usable = False
            logger.warning(
                "could not open a connection of SCAR's own with the PGVectorStore's settings "
                "(%s); reading on the store's pool from now on, which costs its event-loop "
                "hand-over per statement",
                error,
            )
        own.pool.dispose()
        return None


class _RowDocuments(LazyValues[Document]):
    """Fetched rows by chunk id: each ``Document`` made on first lookup, links read without one.

    A query reads the links of about twice as many fetched chunks as it selects; the metadata
    parsed for the links is kept for the ``Document``, if it is made.

    Args:
        reader: The source that read the rows.
        rows: The rows, by the chunk id asked for.
    """

    def __init__(self, reader: PGVectorChunks, rows: Mapping[str, Sequence[Any]]) -> None:
        super().__init__(rows, self._made_document)
        self._reader = reader
        self._rows = rows
        self._metadata: dict[str, dict[str, Any]] = {}

    def _metadata_of(self, chunk_id: str) -> dict[str, Any]:
        metadata = self._metadata.get(chunk_id)
        if metadata is None:
            metadata = self._metadata[chunk_id] = self._reader._metadata(self._rows[chunk_id])
        return metadata

    def chunk_links(self, chunk_id: str, keys: ChunkMetadataKeys) -> ChunkLinks:
        """The links of one chunk, from its metadata (see :meth:`KnownChunks.links_of`)."""
        return links_in_metadata(chunk_id, self._metadata_of(chunk_id), keys)

    def _made_document(self, chunk_id: str) -> Document:
        metadata = self._metadata.pop(chunk_id, None)
        return self._reader._document(chunk_id, self._rows[chunk_id], metadata)


class PGVectorChunks:
    """Reads chunks and their stored vectors by id from a langchain-postgres table, in one query.

    It implements both :class:`~scar_langchain.NeighborSource` (``fetch``: documents with their
    vectors) and :class:`~scar_langchain.NeighborVectorSource` (``vectors_for``), so a
    :class:`~scar_langchain.SCARRetriever` given it for both makes no embedding call for chunks.
    Vectors travel in pgvector's binary form and come back exactly as stored (float32).

    The first call reads the table's column types from the catalogue and checks the columns
    exist. Ids that cannot be in the table (a non-UUID id for a UUID column) are left out.

    :meth:`from_store` builds it from a ``PGVectorStore``: the same table, columns, distance
    strategy and index query options, over the store's database.

    Args:
        connection: A SQLAlchemy URL (``postgresql+psycopg://...``) or a SQLAlchemy ``Engine``.
        table: The store's table, or just its name when it uses the default columns.
        async_connection: URL or ``AsyncEngine`` for the async methods; by default the URL of
            ``connection``, which suits the psycopg 3 driver (it is both sync and async).

    Raises:
        MissingDependencyError: If SQLAlchemy is not installed (the ``postgres`` extra).
        InvalidSettingsError: If a table or column name is not a valid identifier.

    Example:
        .. code-block:: python

            from scar_langchain import PGVectorChunks, PGVectorTable, SCARRetriever

            chunks = PGVectorChunks.from_store(store)  # store: a PGVectorStore
            retriever = SCARRetriever(vectorstore=store, search_source=chunks)
    """

    def __init__(
        self,
        connection: str | URL | Engine,
        table: PGVectorTable | str,
        *,
        async_connection: str | URL | AsyncEngine | None = None,
    ) -> None:
        table = table if isinstance(table, PGVectorTable) else PGVectorTable(table)
        self._start(table, _OwnPools(connection, async_connection))

    @classmethod
    def _on(cls, table: PGVectorTable, connections: _Connections) -> PGVectorChunks:
        """A reader of ``table`` whose statements run on ``connections``."""
        chunks = cls.__new__(cls)
        chunks._start(table, connections)
        return chunks

    def _start(self, table: PGVectorTable, connections: _Connections) -> None:
        self.table = table
        self._connections = connections
        self._layout: _Layout | None = None
        self._layout_lock = threading.Lock()
        self._search_statement: TextClause | None = None
        self._by_id_statements: dict[bool, TextClause] = {}

    @classmethod
    def from_store(
        cls,
        vectorstore: Any,
        *,
        connection: str | URL | Engine | None = None,
        async_connection: str | URL | AsyncEngine | None = None,
        share_store_pool: bool = False,
    ) -> PGVectorChunks:
        """Read the table of a ``langchain_postgres.PGVectorStore`` as the store itself does.

        The table, its columns, the distance strategy and the index query options
        (``hnsw.ef_search`` and the like) come from the store, so the search orders and cuts
        its hits as the store's own search does.

        By default it connects with the URL of the store's engine, in a connection pool of its
        own (the store's pool belongs to its background event loop); a ``postgresql+asyncpg``
        URL is used with psycopg 3 for the sync methods. When the store's engine connects
        through a creator function (a cloud connector) rather than its URL, pass
        ``connection=`` (and ``async_connection=``) yourself, or share the store's pool.

        Args:
            vectorstore: A ``PGVectorStore``.
            connection: URL or ``Engine`` for the sync methods, instead of the store's URL.
            async_connection: URL or ``AsyncEngine`` for the async methods; by default the
                store's URL, or ``connection``'s when that is given.
            share_store_pool: Read on the store's own connection pool instead, through the
                store's engine and event loop as the store's own methods do: no connection of
                its own, whatever the engine connects with, but each statement pays the
                store's hand-over to its loop thread. ``SCARRetriever`` given a
                ``PGVectorStore`` and no sources falls back to it when it cannot use a pool
                of its own (:func:`default_store_chunks`).

        Returns:
            The chunk reader, to give as ``SCARRetriever(search_source=...)``.

        Raises:
            InvalidSettingsError: If ``vectorstore`` is not a ``PGVectorStore`` whose table can
                be read, or its URL cannot serve a sync connection.
        """
        table = PGVectorTable.from_store(vectorstore)
        if share_store_pool:
            if connection is not None or async_connection is not None:
                raise InvalidSettingsError(
                    "share_store_pool=True reads on the store's pool; drop connection= and "
                    "async_connection=, or share_store_pool."
                )
            return cls._on(table, _StorePool(vectorstore))
        if connection is None:
            store_url = _store_internals(vectorstore).engine.url
            connection = _sync_url(store_url)
            if async_connection is None:
                async_connection = store_url
        return cls(connection, table, async_connection=async_connection)

    def __repr__(self) -> str:
        return f"PGVectorChunks(table={self.table.qualified_name})"

    # -- SQL ----------------------------------------------------------------------------------

    def _catalogue_query(self) -> TextClause:
        from sqlalchemy import text

        return text(
            "SELECT column_name, udt_name FROM information_schema.columns "
            "WHERE table_schema = :schema AND table_name = :table"
        )

    def _read_layout(self, rows: Iterable[Sequence[Any]]) -> _Layout:
        types = {str(name): str(udt) for name, udt in rows}
        table = self.table
        if not types:
            raise InvalidSettingsError(
                f"table {table.qualified_name} does not exist (or this connection cannot see it);"
                " check PGVectorTable's table_name and schema_name."
            )
        wanted = [table.id_column, table.content_column, table.embedding_column]
        if table.metadata_json_column is not None:
            wanted.append(table.metadata_json_column)
        wanted.extend(table.metadata_columns)
        missing = [column for column in wanted if column not in types]
        if missing:
            raise InvalidSettingsError(
                f"table {table.qualified_name} has no column(s) {missing}; it has "
                f"{sorted(types)}. Give PGVectorTable the names the store was created with."
            )
        vector_type = types[table.embedding_column]
        if vector_type not in _BINARY_DTYPE:
            raise InvalidSettingsError(
                f"column {table.embedding_column!r} is of type {vector_type}; expected a pgvector "
                "vector or halfvec column."
            )
        id_type = types[table.id_column]
        if not id_type.replace("_", "").isalnum():
            raise InvalidSettingsError(
                f"column {table.id_column!r} has type {id_type!r}, which cannot name an array type."
            )
        # The id, the vector and the JSON metadata are selected as text, bytea and text.
        read_as_stored = [types[table.content_column], *(types[c] for c in table.metadata_columns)]
        return _Layout(
            ids_are_uuids=id_type == "uuid",
            vector_type=vector_type,
            id_type=id_type,
            binary_rows=all(udt.removeprefix("_") in _SAME_IN_BINARY for udt in read_as_stored),
        )

    def _select(self, with_documents: bool) -> TextClause:
        """Rows by id: ``= ANY(array)`` is one bound value, however many ids are asked for."""
        from sqlalchemy import text

        cached = self._by_id_statements.get(with_documents)
        if cached is not None:
            return cached
        table = self.table
        layout = self._layout
        assert layout is not None
        # Ids come back as text: the driver would otherwise build a UUID object per row.
        columns = [
            f'"{table.id_column}"::text',
            f'{layout.vector_type}_send("{table.embedding_column}")',
        ]
        if with_documents:
            columns.extend(self._document_outputs(""))
        statement = (
            f"SELECT {', '.join(columns)} FROM {table.qualified_name} "  # noqa: S608 - identifiers checked and quoted
            f'WHERE "{table.id_column}" = ANY(CAST(:ids AS {layout.id_type}[]))'
        )
        compiled = self._by_id_statements[with_documents] = text(statement)
        return compiled

    def _search_select(self) -> TextClause:
        """The store's own search, with each hit's vector in pgvector's binary form.

        ``ORDER BY embedding <op> query LIMIT k`` with the store's distance operator, which an
        HNSW or IVFFlat index on the column serves, as it serves the store's search.
        """
        from sqlalchemy import text

        if self._search_statement is not None:
            return self._search_statement
        table = self.table
        layout = self._layout
        assert layout is not None
        embedding = f'"{table.embedding_column}"'
        operator = _DISTANCE_OPERATORS[table.distance]
        distance = f"{embedding} {operator} CAST(:query AS {layout.vector_type})"
        document_columns = self._document_columns()
        stored = [c for c in document_columns if c != "NULL"]
        inner = [f'"{table.id_column}"', embedding, *stored, f"{distance} AS scar_distance"]
        outer = [f'hits."{table.id_column}"::text', f"{layout.vector_type}_send(hits.{embedding})"]
        outer.extend(self._document_outputs("hits."))
        outer.append("hits.scar_distance")
        # The binary form is made for the k hits only: in the select list of the scan itself,
        # an exact search (no index) would make it for every row before keeping k.
        statement = (
            f"SELECT {', '.join(outer)} FROM ("  # noqa: S608 - identifiers checked and quoted
            f"SELECT {', '.join(inner)} FROM {table.qualified_name} "
            f"ORDER BY {distance} LIMIT :k) AS hits ORDER BY hits.scar_distance"
        )
        self._search_statement = text(statement)
        return self._search_statement

    def _binary_rows(self) -> bool:
        layout = self._layout
        assert layout is not None
        return layout.binary_rows

    def _document_columns(self) -> list[str]:
        """Text, JSON metadata (``NULL`` when the table has none) and metadata columns."""
        table = self.table
        json_column = table.metadata_json_column
        columns = [f'"{table.content_column}"']
        columns.append(f'"{json_column}"' if json_column is not None else "NULL")
        columns.extend(f'"{column}"' for column in table.metadata_columns)
        return columns

    def _document_outputs(self, prefix: str) -> list[str]:
        """:meth:`_document_columns` as the reader selects them, each name after ``prefix``.

        The JSON metadata comes as text: psycopg would parse every row's JSON as it arrives,
        where :meth:`_document` parses it only for the chunks a query makes into documents.
        """
        columns = self._document_columns()
        outputs = [column if column == "NULL" else prefix + column for column in columns]
        if outputs[1] != "NULL":
            outputs[1] += "::text"
        return outputs

    @staticmethod
    def _search_parameters(query_vector: npt.ArrayLike, k: int) -> dict[str, Any]:
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise InvalidSettingsError(f"k={k!r} is not valid; it must be an integer >= 1.")
        # At the column's precision (float32): a value beyond float32's range becomes infinite.
        with np.errstate(over="ignore"):
            values = np.asarray(query_vector, dtype=np.float32)
        if values.ndim != 1 or not values.size or not np.isfinite(values).all():
            raise InvalidSettingsError(
                "the query vector must be a non-empty 1-D array of finite float32 numbers; got "
                f"shape {values.shape}. Check the embedding model's output."
            )
        if values.size > PGVECTOR_MAX_DIMENSIONS:
            raise InvalidSettingsError(
                f"the query vector has {values.size} dimensions; a pgvector column holds at most "
                f"{PGVECTOR_MAX_DIMENSIONS}. Check the embedding model's output."
            )
        return {"query": VectorParameter(values), "k": k}

    def _hits(self, rows: Sequence[Sequence[Any]]) -> SearchHits:
        documents: list[Document] = []
        vectors: dict[str, FloatVector] = {}
        for row, vector in zip(rows, self._decode(rows), strict=True):
            chunk_id = str(row[0])
            documents.append(self._document(chunk_id, row))
            if vector is not None:
                vectors[chunk_id] = vector
        return SearchHits(documents, vectors)

    def _queryable(self, chunk_ids: Iterable[str]) -> dict[str, str]:
        """Map each id the table could hold, in the table's own spelling, to the id asked for."""
        layout = self._layout
        assert layout is not None
        requested: dict[str, str] = {}
        for chunk_id in chunk_ids:
            if not isinstance(chunk_id, str):
                continue
            if layout.ids_are_uuids:
                if _CANONICAL_UUID.fullmatch(chunk_id):  # as the database prints it
                    requested.setdefault(chunk_id, chunk_id)
                    continue
                try:
                    requested.setdefault(str(uuid.UUID(chunk_id)), chunk_id)
                except ValueError:
                    logger.debug("id %r is not a UUID, so it cannot be in the table", chunk_id)
                continue
            requested.setdefault(chunk_id, chunk_id)
        return requested

    def _decode(self, rows: Sequence[Sequence[Any]]) -> list[FloatVector | None]:
        """The vector of each row (its second column, in binary form), or ``None``."""
        layout = self._layout
        assert layout is not None
        stored = _BINARY_DTYPE[layout.vector_type]
        return decode_pgvector_binary([row[1] for row in rows], stored, np.float64)

    def _metadata(self, row: Sequence[Any]) -> dict[str, Any]:
        # The JSON metadata arrives as text (see _document_outputs) and is parsed here, when the
        # chunk is first looked at: for a fetched neighbour, only if the query uses it.
        json_metadata = json.loads(row[3]) if isinstance(row[3], str) else row[3]
        metadata: dict[str, Any] = dict(json_metadata) if isinstance(json_metadata, Mapping) else {}
        for offset, column in enumerate(self.table.metadata_columns):
            metadata[column] = row[4 + offset]
        return metadata

    def _document(
        self, chunk_id: str, row: Sequence[Any], metadata: dict[str, Any] | None = None
    ) -> Document:
        if metadata is None:
            metadata = self._metadata(row)
        return Document(id=chunk_id, page_content=str(row[2]), metadata=metadata)

    def _collect(
        self, requested: Mapping[str, str], rows: Sequence[Sequence[Any]], with_documents: bool
    ) -> _Rows:
        """Vectors now; each ``Document`` when first looked up (a query uses few of them)."""
        rows_by_id: dict[str, Sequence[Any]] = {}
        vectors: dict[str, FloatVector] = {}
        for row, vector in zip(rows, self._decode(rows), strict=True):
            chunk_id = requested.get(str(row[0]))
            if chunk_id is None:
                continue
            if vector is not None:
                vectors[chunk_id] = vector
            if with_documents:
                rows_by_id[chunk_id] = row
        return _RowDocuments(self, rows_by_id), vectors

    # -- sync ---------------------------------------------------------------------------------

    def _ensure_layout(self) -> None:
        if self._layout is not None:
            return
        with self._layout_lock:
            if self._layout is None:
                rows = self._connections.rows(
                    self._catalogue_query(),
                    {"schema": self.table.schema_name, "table": self.table.table_name},
                )
                self._layout = self._read_layout(rows)

    def _run(self, chunk_ids: Sequence[str], with_documents: bool) -> _Rows:
        self._ensure_layout()
        requested = self._queryable(chunk_ids)
        if not requested:
            return {}, {}
        rows = self._connections.rows(
            self._select(with_documents),
            {"ids": StringArrayParameter(tuple(requested))},
            binary=self._binary_rows(),
        )
        return self._collect(requested, rows, with_documents)

    def fetch(self, chunk_ids: Sequence[str]) -> FetchedChunks:
        """Return the chunks of ``chunk_ids`` with their stored vectors, in one query."""
        documents, vectors = self._run(chunk_ids, with_documents=True)
        return FetchedChunks(documents, dict(vectors))

    def vectors_for(self, chunks: Mapping[str, Document]) -> dict[str, FloatVector]:
        """Return the stored vectors of ``chunks`` (``chunk id -> Document``), in one query."""
        return self._run(list(chunks), with_documents=False)[1]

    def search_with_vectors(self, query_vector: npt.ArrayLike, k: int) -> SearchHits:
        """Search the table as the store does, and return the hits with their stored vectors.

        One SQL statement: the store's search with no filter (same table, same distance
        strategy, same index, same ``search_settings``), each hit with its vector in binary
        form. Given as
        ``SCARRetriever(search_source=...)`` it replaces the store's search, which returns no
        vectors, and so saves the round trip that would read the hits' vectors afterwards.

        Args:
            query_vector: The query's embedding.
            k: How many hits, best first.

        Returns:
            The hits and their vectors.

        Raises:
            InvalidSettingsError: If ``k`` is not a positive integer or the query vector is
                not a finite 1-D vector.
        """
        parameters = self._search_parameters(query_vector, k)
        self._ensure_layout()
        settings = self.table.search_settings
        rows = self._connections.rows(
            self._search_select(), parameters, settings, binary=self._binary_rows()
        )
        return self._hits(rows)

    def _sync_reads_in_any_thread(self) -> bool:
        """Whether the sync methods may run in a worker thread for an async caller.

        :class:`~scar_langchain.SCARRetriever` then runs a whole async query in one worker
        thread rather than handing each statement to one.
        """
        return self._connections.sync_reads_in_any_thread()

    def close(self) -> None:
        """Dispose of the connection pool this object created (an engine passed in is kept)."""
        self._connections.close()

    # -- async --------------------------------------------------------------------------------

    async def _aensure_layout(self) -> None:
        if self._layout is not None:
            return
        rows = await self._connections.arows(
            self._catalogue_query(),
            {"schema": self.table.schema_name, "table": self.table.table_name},
        )
        layout = self._read_layout(rows)
        with self._layout_lock:
            if self._layout is None:
                self._layout = layout

    async def _arun(self, chunk_ids: Sequence[str], with_documents: bool) -> _Rows:
        await self._aensure_layout()
        requested = self._queryable(chunk_ids)
        if not requested:
            return {}, {}
        rows = await self._connections.arows(
            self._select(with_documents),
            {"ids": StringArrayParameter(tuple(requested))},
            binary=self._binary_rows(),
        )
        return self._collect(requested, rows, with_documents)

    async def afetch(self, chunk_ids: Sequence[str]) -> FetchedChunks:
        """Async form of :meth:`fetch` (SQLAlchemy's asyncio engine)."""
        documents, vectors = await self._arun(chunk_ids, with_documents=True)
        return FetchedChunks(documents, dict(vectors))

    async def avectors_for(self, chunks: Mapping[str, Document]) -> dict[str, FloatVector]:
        """Async form of :meth:`vectors_for`."""
        return (await self._arun(list(chunks), with_documents=False))[1]

    async def asearch_with_vectors(self, query_vector: npt.ArrayLike, k: int) -> SearchHits:
        """Async form of :meth:`search_with_vectors`."""
        parameters = self._search_parameters(query_vector, k)
        await self._aensure_layout()
        settings = self.table.search_settings
        rows = await self._connections.arows(
            self._search_select(), parameters, settings, binary=self._binary_rows()
        )
        return self._hits(rows)

    async def aclose(self) -> None:
        """Dispose of the async pool of the running event loop (if this object created it)."""
        await self._connections.aclose()


def _sync_url(url: URL) -> URL:
    """The store engine's URL with a sync driver: psycopg 3 serves both, asyncpg only async."""
    if url.get_backend_name() != "postgresql":
        raise InvalidSettingsError(
            f"the store's engine connects to {url.get_backend_name()!r}, not PostgreSQL; pass "
            "connection= to PGVectorChunks.from_store."
        )
    if url.get_driver_name() in ("psycopg", "psycopg2"):
        return url
    options = sorted(set(url.query) - {"host", "port"})
    if options:
        raise InvalidSettingsError(
            f"the store's engine uses the {url.get_driver_name()} driver with URL options "
            f"{options}, which psycopg may read differently; pass connection= (a "
            "postgresql+psycopg:// URL or an Engine) to PGVectorChunks.from_store."
        )
    return url.set(drivername="postgresql+psycopg")


def _key(chunk_id: str) -> str:
    """A UUID in canonical spelling; any other id as it is."""
    try:
        return str(uuid.UUID(chunk_id))
    except ValueError:
        return chunk_id


def _requested_by_key(chunk_ids: Iterable[str]) -> dict[str, str]:
    requested: dict[str, str] = {}
    for chunk_id in chunk_ids:
        requested.setdefault(_key(chunk_id), chunk_id)
    return requested
