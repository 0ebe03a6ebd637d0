"""Neighbour nodes and their stored vectors from a LlamaIndex ``PGVectorStore``, in one query.

LlamaIndex's ``PGVectorStore.get_nodes`` already returns each node with its embedding, so the
default :class:`~scar_llamaindex.StoreNeighborSource` expands over pgvector without embedding
anything, even when the index's docstore is empty. Two things cost time as the table grows:

* the store's table has no index on ``node_id``, so every fetch by id scans the whole table;
  :func:`create_node_id_index` adds one;
* ``get_nodes`` receives vectors as pgvector text and parses them (about 0.6 microseconds per
  dimension); :class:`PGVectorNodeSource` receives them in pgvector's binary form instead;
* a walk outwards from the retrieved nodes costs one round trip per ring of neighbours;
  :meth:`PGVectorNodeSource.fetch_window` walks the links stored in the rows in SQL (a
  ``WITH RECURSIVE`` query) and returns every ring up to a radius in one round trip.

Nothing here imports ``llama_index.vector_stores.postgres`` or ``sqlalchemy`` until it is used.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt
from llama_index.core.schema import BaseNode, NodeRelationship, TextNode
from llama_index.core.vector_stores.utils import metadata_dict_to_node

from scar_core._async_engines import AsyncEnginePerLoop
from scar_core._lazy import isinstance_if_loaded
from scar_core._sql_reads import SQLReads, StringArrayParameter, decode_pgvector_binary
from scar_core.errors import InvalidSettingsError, missing_dependency
from scar_llamaindex.sources import FetchedNodes, FetchedWindow

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine
    from sqlalchemy.ext.asyncio import AsyncEngine
    from sqlalchemy.sql.elements import TextClause

__all__ = ["PGVectorNodeSource", "create_node_id_index", "is_pgvector_store"]

logger = logging.getLogger(__name__)

#: PostgreSQL truncates longer identifiers.
_MAX_IDENTIFIER_BYTES = 63
#: SQLSTATE "invalid_text_representation": here, text cast to jsonb that is not JSON.
_INVALID_TEXT_REPRESENTATION = "22P02"
#: Keys of the links followed in the serialised node (``metadata_->>'_node_content'``).
_RELATIONSHIP_KEYS: dict[str, tuple[str, ...]] = {
    "previous": (str(NodeRelationship.PREVIOUS.value),),
    "next": (str(NodeRelationship.NEXT.value),),
    "both": (str(NodeRelationship.PREVIOUS.value), str(NodeRelationship.NEXT.value)),
}


def is_pgvector_store(vector_store: object) -> bool:
    """Whether ``vector_store`` is a LlamaIndex ``PGVectorStore``.

    The check never imports ``llama_index.vector_stores.postgres``: an object can only be one of
    its stores when the module is already loaded.
    """
    return isinstance_if_loaded(vector_store, "llama_index.vector_stores.postgres", "PGVectorStore")


def _pgvector_store_type() -> type[Any]:
    try:
        from llama_index.vector_stores.postgres import PGVectorStore
    except ImportError as error:  # pragma: no cover - exercised only without the extra
        raise missing_dependency("llama_index.vector_stores.postgres", "postgres") from error
    return PGVectorStore


@dataclass(frozen=True)
class _Table:
    """Where a ``PGVectorStore`` keeps its rows: ``<schema>.data_<table_name>``."""

    schema_name: str
    table_name: str
    half_precision: bool

    @classmethod
    def of(cls, vector_store: Any) -> _Table:
        if not isinstance(vector_store, _pgvector_store_type()):
            raise InvalidSettingsError(
                "expected a llama_index.vector_stores.postgres.PGVectorStore, not "
                f"{type(vector_store).__name__}."
            )
        # LlamaIndex names the table data_<table_name> (see its get_data_model).
        table = cls(
            str(vector_store.schema_name),
            f"data_{vector_store.table_name}",
            bool(vector_store.use_halfvec),
        )
        for name in (table.schema_name, table.table_name):
            if not name or '"' in name or "\x00" in name:
                raise InvalidSettingsError(
                    f"the store's table or schema name {name!r} is not a usable SQL identifier."
                )
        return table

    @property
    def qualified_name(self) -> str:
        return f'"{self.schema_name}"."{self.table_name}"'

    @property
    def vector_send(self) -> str:
        return "halfvec_send" if self.half_precision else "vector_send"

    @property
    def dtype(self) -> np.dtype[Any]:
        return np.dtype(">f2") if self.half_precision else np.dtype(">f4")


def _sync_engine(vector_store: Any, engine: Engine | None) -> tuple[Engine, bool]:
    """Return the engine to use and whether this module created it (and so disposes of it)."""
    if engine is not None:
        return engine, False
    client = vector_store.client
    if client is not None:
        return client, False
    url = vector_store.connection_string
    if not url or url == "None":
        raise InvalidSettingsError(
            "the PGVectorStore was built from engine objects and has not connected yet; pass "
            "engine= (a SQLAlchemy Engine on the same database)."
        )
    try:
        from sqlalchemy import create_engine
    except ImportError as error:  # pragma: no cover - exercised only without the extra
        raise missing_dependency("sqlalchemy", "postgres") from error
    return create_engine(url), True


def create_node_id_index(vector_store: Any, *, engine: Engine | None = None) -> str:
    """Index the ``node_id`` column of a LlamaIndex ``PGVectorStore``'s table.

    The store's table has a primary key on a serial ``id`` but no index on ``node_id``, so
    ``get_nodes(node_ids=...)``, and so every neighbour fetch, scans the whole table. Call this
    once, after the store has created its table (after the first ``add``); it is idempotent.

    Args:
        vector_store: The ``PGVectorStore``.
        engine: A SQLAlchemy engine on the store's database; by default the store's own.

    Returns:
        The index's name.

    Raises:
        InvalidSettingsError: If the store's table does not exist yet.
    """
    from sqlalchemy import text

    table = _Table.of(vector_store)
    bind, owned = _sync_engine(vector_store, engine)
    name = f"{table.table_name}_node_id_idx"
    if len(name.encode()) > _MAX_IDENTIFIER_BYTES:
        name = f"{table.table_name[: _MAX_IDENTIFIER_BYTES - 12]}_node_id_idx"
    try:
        with bind.begin() as connection:
            exists = connection.execute(
                text("SELECT to_regclass(:name) IS NOT NULL"),
                {"name": table.qualified_name},
            ).scalar_one()
            if not exists:
                raise InvalidSettingsError(
                    f"table {table.qualified_name} does not exist yet; add nodes to the store "
                    "(which creates it) before indexing it."
                )
            connection.execute(
                text(f'CREATE INDEX IF NOT EXISTS "{name}" ON {table.qualified_name} (node_id)')
            )
    finally:
        if owned:
            bind.dispose()
    return name


class _RingWalk:
    """:meth:`PGVectorNodeSource.fetch_window`'s walk, one ring of neighbours per fetch.

    Used when the table has no index on ``node_id``: the one-statement walk looks each reached
    id up with its own scan of the table, while a ring's ids come in one scan. The result is the
    recursive statement's: the nodes reached 1 to ``radius`` steps from a start node along one
    link key, the vectors of those and of the requested ids, and the ids looked up in vain.

    Drive it as: fetch ``request()`` (node ids, vector ids) and pass the result to ``add`` until
    ``request()`` returns ``None``; then read ``result()``.
    """

    def __init__(
        self, start: list[str], asked: list[str], radius: int, link_keys: Sequence[str]
    ) -> None:
        self._start = start
        self._asked = asked
        self._radius = radius
        self._keys = [NodeRelationship(key) for key in link_keys]
        self._depth = 0
        self._held: dict[str, BaseNode] = {}
        self._vectors: dict[str, npt.ArrayLike] = {}
        self._absent: set[str] = set()
        self._reached: dict[str, BaseNode] = {}
        self._frontier: list[tuple[str, NodeRelationship]] = []
        self._pending: list[tuple[str, NodeRelationship]] = []
        self._wanted: list[str] = []

    def request(self) -> tuple[list[str], list[str]] | None:
        """The node ids (and, first, vector ids) to fetch next, or ``None`` when done."""
        if self._depth == 0:
            return self._start, self._asked
        if self._depth > self._radius:
            return None
        steps = []
        for node_id, key in self._frontier:
            info = self._held[node_id].relationships.get(key)
            target = getattr(info, "node_id", None)
            if isinstance(target, str):
                steps.append((target, key))
        self._pending = list(dict.fromkeys(steps))
        self._wanted = [
            target
            for target in dict.fromkeys(t for t, _ in self._pending)
            if target not in self._held and target not in self._absent
        ]
        if not self._pending:
            return None
        return self._wanted, []

    def add(self, fetched: FetchedNodes) -> None:
        """Take in the fetch of the last request."""
        self._held.update(fetched.nodes)
        self._vectors.update(fetched.vectors)
        if self._depth == 0:
            self._absent.update(i for i in self._asked if i not in fetched.vectors)
            self._frontier = [
                (node_id, key)
                for node_id in self._start
                if node_id in self._held
                for key in self._keys
            ]
        else:
            self._absent.update(i for i in self._wanted if i not in self._held)
            self._frontier = []
            for target, key in self._pending:
                if target in self._held:
                    self._reached.setdefault(target, self._held[target])
                    self._frontier.append((target, key))
        self._depth += 1

    def result(self) -> FetchedWindow:
        """What the walk reached, as :meth:`PGVectorNodeSource.fetch_window` returns it."""
        wanted = [*self._reached, *self._asked]
        vectors = {i: self._vectors[i] for i in dict.fromkeys(wanted) if i in self._vectors}
        return FetchedWindow(dict(self._reached), vectors, frozenset(self._absent))


class PGVectorNodeSource:
    """Fetch neighbour nodes and their stored vectors from a ``PGVectorStore``, in one query.

    A :class:`~scar_llamaindex.NeighborSource` that reads only the database (the index's docstore
    may be empty): each fetch is one ``SELECT`` by ``node_id`` that returns the nodes asked for and
    the vectors of those and of the seeds, in pgvector's binary form (exact, nothing to parse).
    It is also a :class:`~scar_llamaindex.WindowNeighborSource`: :meth:`fetch_window` returns
    every node within a radius of the retrieved nodes in one statement, following the
    ``PREVIOUS`` / ``NEXT`` relationships stored in each row, so the postprocessor's whole walk
    usually costs one round trip. Nodes are rebuilt as ``PGVectorStore.get_nodes`` rebuilds them.
    Run :func:`create_node_id_index` once so that both queries use an index. Without it (checked
    at the first window, and logged once) the window is read ring by ring, one scan of the table
    per ring, as ``get_nodes`` would: the one-statement walk would scan the table once for every
    node it reaches.

    Args:
        vector_store: The index's ``PGVectorStore`` (``index.vector_store``).
        engine: SQLAlchemy engine for :meth:`fetch`; by default the store's own, taken at the
            first fetch (the retrieval before it connects the store), else one made from its
            ``connection_string``.
        async_engine: SQLAlchemy ``AsyncEngine`` for :meth:`afetch`; by default one per event
            loop, made from the store's ``async_connection_string``.

    Raises:
        InvalidSettingsError: If ``vector_store`` is not a LlamaIndex ``PGVectorStore``.

    Example:
        .. code-block:: python

            from scar_llamaindex import PGVectorNodeSource, SCARNodePostprocessor

            create_node_id_index(vector_store)
            postprocessor = SCARNodePostprocessor(
                neighbor_source=PGVectorNodeSource(vector_store), embed_model=embed_model
            )
    """

    def __init__(
        self,
        vector_store: Any,
        *,
        engine: Engine | None = None,
        async_engine: AsyncEngine | None = None,
    ) -> None:
        self._table = _Table.of(vector_store)
        self._vector_store = vector_store
        self._given_engine = engine
        # The sync engine is settled on first use: by then a store built from engine objects
        # has usually connected (the retrieval before the postprocessor connects it).
        self._engine: Engine | None = None
        self._owns_engine = False
        self._reads: SQLReads | None = None
        self._areads: SQLReads | None = None
        #: Whether the table has an index on node_id; read at the first window fetch.
        self._node_id_indexed: bool | None = None
        self._invalid_json_noted = False
        self._engine_lock = threading.Lock()
        self._by_id_statement: TextClause | None = None
        self._window_statement: TextClause | None = None
        self._async = AsyncEnginePerLoop(
            async_engine if async_engine is not None else vector_store.async_connection_string,
            driver_hint=(
                "async fetches need an async driver (postgresql+asyncpg:// or "
                "postgresql+psycopg://); pass async_engine=."
            ),
            missing_hint=(
                "the PGVectorStore has no async_connection_string; pass async_engine= (a "
                "SQLAlchemy AsyncEngine on the same database)."
            ),
        )

    def __repr__(self) -> str:
        return f"PGVectorNodeSource(table={self._table.qualified_name})"

    def _sync_reads(self) -> SQLReads:
        """Reads on the sync engine: the one given, the store's own, or one from its URL."""
        if self._reads is None:
            with self._engine_lock:
                if self._reads is None:
                    engine, owned = _sync_engine(self._vector_store, self._given_engine)
                    self._engine, self._owns_engine = engine, owned
                    # Single reads need no transaction: autocommit saves a BEGIN and a ROLLBACK.
                    self._reads = SQLReads(engine)
        return self._reads

    @property
    def _async_reads(self) -> SQLReads:
        """A :class:`SQLReads` for the async engines (its sync engine is not used by ``arows``)."""
        if self._areads is None:
            self._areads = SQLReads(self._async.current().sync_engine)
        return self._areads

    def _select(self) -> TextClause:
        """Rows by id: ``= ANY(array)`` is one bound value, however many ids are asked for.

        Its columns, like the window's, are of built-in types that psycopg reads alike from
        binary and text rows, so both are read in binary form (the vectors come as their bytes).
        """
        from sqlalchemy import text

        if self._by_id_statement is None:
            table = self._table
            self._by_id_statement = text(
                f"SELECT node_id, {table.vector_send}(embedding), text, metadata_ "  # noqa: S608 - identifiers checked and quoted
                f"FROM {table.qualified_name} WHERE node_id = ANY(CAST(:ids AS text[]))"
            )
        return self._by_id_statement

    def _window_select(self) -> TextClause:
        """One statement: walk the stored links from the start ids and return what it reached.

        ``walk`` holds one row per stored row reached: its id, the link key followed, its depth
        (0 for a start row), its row's columns, and ``linked_id``, the id its serialised node
        names under that key (read only below ``radius``, where the walk goes on). The result
        has three parts: the rows reached at depth >= 1 (as nodes), the linked ids no row holds
        (``found`` false), and the requested vector ids with their vectors, when stored.
        """
        from sqlalchemy import text

        if self._window_statement is not None:
            return self._window_statement
        table = self._table
        statement = f"""
WITH RECURSIVE start AS MATERIALIZED (
    SELECT
        stored.node_id,
        stored.embedding,
        stored.text,
        stored.metadata_,
        CAST(stored.metadata_ ->> '_node_content' AS jsonb) -> 'relationships' AS links
    FROM unnest(CAST(:start_ids AS text[])) AS asked(node_id)
    CROSS JOIN LATERAL (
        SELECT own.node_id, own.embedding, own.text, own.metadata_
        FROM {table.qualified_name} AS own
        WHERE own.node_id = asked.node_id
        OFFSET 0
    ) AS stored
),
walk(node_id, link_key, depth, linked_id, embedding, text, metadata_) AS (
    SELECT
        start.node_id,
        way.link_key,
        0,
        start.links -> way.link_key ->> 'node_id',
        start.embedding,
        start.text,
        start.metadata_
    FROM start
    CROSS JOIN unnest(CAST(:link_keys AS text[])) AS way(link_key)
  UNION ALL
    SELECT
        stored.node_id,
        walk.link_key,
        walk.depth + 1,
        CASE WHEN walk.depth + 1 < CAST(:radius AS integer) THEN
            CAST(stored.metadata_ ->> '_node_content' AS jsonb)
                -> 'relationships' -> walk.link_key ->> 'node_id'
        END,
        stored.embedding,
        stored.text,
        stored.metadata_
    FROM walk
    CROSS JOIN LATERAL (
        SELECT own.node_id, own.embedding, own.text, own.metadata_
        FROM {table.qualified_name} AS own
        WHERE own.node_id = walk.linked_id
        OFFSET 0
    ) AS stored
)
(
    SELECT DISTINCT ON (reached.node_id)
        reached.node_id, true, true, {table.vector_send}(reached.embedding),
        reached.text, CAST(reached.metadata_ AS text)
    FROM walk AS reached
    WHERE reached.depth > 0
)
UNION ALL
SELECT linking.linked_id, false, false, NULL, NULL, NULL
FROM walk AS linking
WHERE linking.linked_id IS NOT NULL
    AND NOT EXISTS (SELECT FROM walk AS reached WHERE reached.node_id = linking.linked_id)
UNION ALL
SELECT asked.node_id, false, stored.node_id IS NOT NULL, {table.vector_send}(stored.embedding),
    NULL, NULL
FROM unnest(CAST(:vector_ids AS text[])) AS asked(node_id)
LEFT JOIN LATERAL (
    SELECT own.node_id, own.embedding
    FROM {table.qualified_name} AS own
    WHERE own.node_id = asked.node_id
    OFFSET 0
) AS stored ON true
"""  # noqa: S608 - identifiers checked and quoted; values bound
        self._window_statement = text(statement)
        return self._window_statement

    @staticmethod
    def _index_query() -> TextClause:
        """Whether some index of the table starts with its ``node_id`` column."""
        from sqlalchemy import text

        return text(
            "SELECT EXISTS (SELECT FROM pg_index AS i JOIN pg_attribute AS a "
            "ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] "
            "WHERE i.indrelid = to_regclass(:table) AND a.attname = 'node_id')"
        )

    def _index_parameters(self) -> dict[str, str]:
        return {"table": self._table.qualified_name}

    def _note_index(self, indexed: bool) -> None:
        if not indexed:
            logger.warning(
                "table %s has no index on node_id, so every read of nodes by id scans it; SCAR "
                "reads the window ring by ring (one scan per ring) instead of in one statement. "
                "create_node_id_index(vector_store) adds the index.",
                self._table.qualified_name,
            )
        self._node_id_indexed = indexed

    def _note_invalid_json(self) -> None:
        if not self._invalid_json_noted:
            logger.warning(
                "table %s holds a row whose metadata_->>'_node_content' is not valid JSON, so "
                "the one-statement window failed; windows that reach such a row are read ring "
                "by ring, and the row becomes a TextNode without links (the walk ends there).",
                self._table.qualified_name,
            )
        self._invalid_json_noted = True

    @staticmethod
    def _ring_walk(parameters: Mapping[str, Any]) -> _RingWalk:
        return _RingWalk(
            parameters["start_ids"],
            parameters["vector_ids"],
            parameters["radius"],
            parameters["link_keys"],
        )

    def _decode(self, raw_vectors: Sequence[object]) -> list[npt.NDArray[np.float32] | None]:
        return decode_pgvector_binary(raw_vectors, self._table.dtype, np.float32)

    def _collect(self, node_ids: Sequence[str], rows: Sequence[Sequence[Any]]) -> FetchedNodes:
        wanted = set(node_ids)
        nodes: dict[str, BaseNode] = {}
        vectors: dict[str, npt.ArrayLike] = {}
        decoded = self._decode([row[1] for row in rows])
        for (node_id, _, text, metadata), vector in zip(rows, decoded, strict=True):
            if vector is not None:
                vectors.setdefault(node_id, vector)
            if node_id in wanted and node_id not in nodes:
                nodes[node_id] = _rebuild(node_id, text, metadata)
        return FetchedNodes(nodes, vectors)

    def _collect_window(self, rows: Sequence[Sequence[Any]]) -> FetchedWindow:
        nodes = _RowNodes()
        vectors: dict[str, npt.ArrayLike] = {}
        absent: set[str] = set()
        decoded = self._decode([row[3] for row in rows])
        for (node_id, as_node, found, _, text, metadata), vector in zip(rows, decoded, strict=True):
            if not found:
                absent.add(node_id)
                continue
            if vector is not None:
                vectors.setdefault(node_id, vector)
            if as_node:
                nodes.add(node_id, text, metadata)
        return FetchedWindow(nodes, vectors, frozenset(absent))

    @staticmethod
    def _window_parameters(
        start_ids: Sequence[str],
        vector_ids: Sequence[str],
        radius: int,
        direction: Literal["both", "previous", "next"],
    ) -> dict[str, Any] | None:
        """The statement's parameters, checked; ``None`` when there is nothing to ask."""
        if isinstance(radius, bool) or not isinstance(radius, int) or radius < 1:
            raise InvalidSettingsError(
                f"radius={radius!r} is not valid; it must be an integer >= 1 (the number of "
                "steps to walk from each start node)."
            )
        link_keys = _RELATIONSHIP_KEYS.get(direction)
        if link_keys is None:
            raise InvalidSettingsError(
                f"direction={direction!r} is not valid; use 'both', 'previous' or 'next'."
            )
        start = [i for i in dict.fromkeys(start_ids) if isinstance(i, str)]
        asked = [i for i in dict.fromkeys(vector_ids) if isinstance(i, str)]
        if not start and not asked:
            return None
        return {
            "start_ids": start,
            "link_keys": list(link_keys),
            "radius": radius,
            "vector_ids": asked,
        }

    @staticmethod
    def _ids(node_ids: Sequence[str], vector_ids: Sequence[str]) -> list[str]:
        return [i for i in dict.fromkeys([*node_ids, *vector_ids]) if isinstance(i, str)]

    def fetch(self, node_ids: Sequence[str], vector_ids: Sequence[str]) -> FetchedNodes:
        """Return the nodes of ``node_ids`` and the stored vectors of both lists, in one query."""
        ids = self._ids(node_ids, vector_ids)
        if not ids:
            return FetchedNodes()
        rows = self._sync_reads().rows(
            self._select(), {"ids": StringArrayParameter(tuple(ids))}, binary=True
        )
        return self._collect(node_ids, rows)

    async def afetch(self, node_ids: Sequence[str], vector_ids: Sequence[str]) -> FetchedNodes:
        """Async form of :meth:`fetch` (SQLAlchemy's asyncio engine, no worker thread)."""
        ids = self._ids(node_ids, vector_ids)
        if not ids:
            return FetchedNodes()
        rows = await self._async_reads.arows(
            self._async.current(),
            self._select(),
            {"ids": StringArrayParameter(tuple(ids))},
            binary=True,
        )
        return self._collect(node_ids, rows)

    def fetch_window(
        self,
        start_ids: Sequence[str],
        vector_ids: Sequence[str],
        radius: int,
        direction: Literal["both", "previous", "next"] = "both",
    ) -> FetchedWindow:
        """Return every node within ``radius`` steps of ``start_ids``, with vectors, in one query.

        The walk follows the ``PREVIOUS`` / ``NEXT`` relationships serialised in each row
        (``metadata_->>'_node_content'``, as LlamaIndex writes it) and stops at ids no row holds;
        those are reported in :attr:`~scar_llamaindex.FetchedWindow.absent`. Rows written
        outside LlamaIndex (no serialised node) end the walk.

        Args:
            start_ids: Where the walk starts (the retrieved nodes); returned as nodes only when
                reached from another start node.
            vector_ids: Ids whose stored vectors to return as well.
            radius: Steps to walk from each start node, ``>= 1``.
            direction: ``"both"``, ``"previous"`` or ``"next"``.

        Returns:
            The reached nodes, the vectors of those and of ``vector_ids``, and the absent ids.

        Raises:
            InvalidSettingsError: If ``radius`` or ``direction`` is not valid.
        """
        parameters = self._window_parameters(start_ids, vector_ids, radius, direction)
        if parameters is None:
            return FetchedWindow()
        if self._node_id_indexed is None:
            rows = self._sync_reads().rows(self._index_query(), self._index_parameters())
            self._note_index(bool(rows[0][0]))
        if not self._node_id_indexed:
            return self._walk_rings(parameters)
        try:
            rows = self._sync_reads().rows(self._window_select(), parameters, binary=True)
        except Exception as error:
            if not _invalid_stored_json(error):
                raise
            self._note_invalid_json()
            return self._walk_rings(parameters)
        return self._collect_window(rows)

    def _walk_rings(self, parameters: Mapping[str, Any]) -> FetchedWindow:
        walk = self._ring_walk(parameters)
        while (request := walk.request()) is not None:
            walk.add(self.fetch(*request))
        return walk.result()

    async def afetch_window(
        self,
        start_ids: Sequence[str],
        vector_ids: Sequence[str],
        radius: int,
        direction: Literal["both", "previous", "next"] = "both",
    ) -> FetchedWindow:
        """Async form of :meth:`fetch_window` (SQLAlchemy's asyncio engine, no worker thread)."""
        parameters = self._window_parameters(start_ids, vector_ids, radius, direction)
        if parameters is None:
            return FetchedWindow()
        if self._node_id_indexed is None:
            rows = await self._async_reads.arows(
                self._async.current(), self._index_query(), self._index_parameters()
            )
            self._note_index(bool(rows[0][0]))
        if not self._node_id_indexed:
            return await self._awalk_rings(parameters)
        try:
            rows = await self._async_reads.arows(
                self._async.current(), self._window_select(), parameters, binary=True
            )
        except Exception as error:
            if not _invalid_stored_json(error):
                raise
            self._note_invalid_json()
            return await self._awalk_rings(parameters)
        return self._collect_window(rows)

    async def _awalk_rings(self, parameters: Mapping[str, Any]) -> FetchedWindow:
        walk = self._ring_walk(parameters)
        while (request := walk.request()) is not None:
            walk.add(await self.afetch(*request))
        return walk.result()

    def close(self) -> None:
        """Dispose of the connection pool this object created (a shared engine is kept)."""
        if self._owns_engine and self._engine is not None:
            self._engine.dispose()

    async def aclose(self) -> None:
        """Dispose of the async pool of the running event loop (if this object created it)."""
        await self._async.dispose_current()


class _RowNodes(Mapping[str, BaseNode]):
    """The nodes of a window's rows, each rebuilt when first looked up.

    Rebuilding a node parses its serialised JSON and validates it (tens of microseconds); a
    window holds more nodes than a selection usually looks at, so the rest are never rebuilt.
    """

    def __init__(self) -> None:
        self._rows: dict[str, tuple[object, object]] = {}
        self._built: dict[str, BaseNode] = {}

    def add(self, node_id: str, text: object, metadata: object) -> None:
        """Keep a row's text and metadata (the first row of an id wins, as in a fetch)."""
        self._rows.setdefault(node_id, (text, metadata))

    def __getitem__(self, node_id: str) -> BaseNode:
        node = self._built.get(node_id)
        if node is None:
            text, metadata = self._rows[node_id]
            node = self._built[node_id] = _rebuild(node_id, text, metadata)
        return node

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._rows

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)


def _invalid_stored_json(error: BaseException) -> bool:
    """Whether a failed statement failed on text that is not valid JSON (SQLSTATE 22P02).

    psycopg and asyncpg errors carry the SQLSTATE; SQLAlchemy wraps them in ``orig``.
    """
    cause = getattr(error, "orig", None) or error
    return getattr(cause, "sqlstate", None) == _INVALID_TEXT_REPRESENTATION


def _rebuild(node_id: str, text: object, metadata: object) -> BaseNode:
    """Rebuild a node from its row the way ``PGVectorStore.get_nodes`` does."""
    if isinstance(metadata, (str, bytes)):
        # asyncpg, and the window query, return the json column as text.
        try:
            metadata = json.loads(metadata)
        except ValueError:
            metadata = None
    metadata_dict = dict(metadata) if isinstance(metadata, dict) else {}
    try:
        node = metadata_dict_to_node(metadata_dict)
        node.set_content(str(text))
    except (ValueError, TypeError, KeyError):
        # A row written outside LlamaIndex: no serialised node in its metadata.
        node = TextNode(id_=node_id, text=str(text), metadata=metadata_dict)
    return node
