"""Where the postprocessor gets neighbour nodes and their stored vectors from.

A :class:`NeighborSource` answers one batched request per hop: "give me these nodes, and the stored
vectors you hold for these ids". The default, :class:`StoreNeighborSource`, asks a LlamaIndex
docstore first and the vector store for whatever the docstore lacks, so an index whose nodes live
only in a vector database (an empty docstore) still expands. A store that can return nodes with
their embeddings in one call (pgvector's ``get_nodes``, for example) supplies neighbours and
vectors in one round trip, and nothing is re-embedded.

A source may also offer :class:`WindowNeighborSource`: every node within a number of steps of
the incoming nodes in one request (:class:`~scar_llamaindex.PGVectorNodeSource` walks the links in
SQL), so that the postprocessor rarely needs a second round trip.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

import numpy.typing as npt
from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.vector_stores.simple import SimpleVectorStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from scar_core.errors import InvalidSettingsError

__all__ = [
    "FetchedNodes",
    "FetchedWindow",
    "NeighborSource",
    "StoreNeighborSource",
    "WindowNeighborSource",
    "stored_embedding",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FetchedNodes:
    """What one fetch returned.

    Attributes:
        nodes: ``node id -> node`` for every requested node the source holds.
        vectors: ``node id -> stored vector`` for every id (requested as a node or as a vector)
            whose vector the source holds without embedding anything.
    """

    nodes: Mapping[str, BaseNode] = field(default_factory=dict)
    vectors: Mapping[str, npt.ArrayLike] = field(default_factory=dict)


@dataclass(frozen=True)
class FetchedWindow(FetchedNodes):
    """What one window fetch returned: nodes, vectors, and the ids known to be absent.

    Attributes:
        nodes: ``node id -> node`` for every node the walk reached (at least one step away from
            a start node) that the source holds.
        vectors: ``node id -> stored vector`` for the reached nodes and the requested vector ids.
        absent: Ids the source looked up, as reached nodes or as requested vector ids, and does
            not hold: a fetch of them would return nothing.
    """

    absent: frozenset[str] = frozenset()


@runtime_checkable
class NeighborSource(Protocol):
    """Anything that fetches neighbour nodes and stored vectors in batches.

    Implementations return only what they hold: a missing id is simply absent from the result,
    and the postprocessor then leaves that neighbour out (or embeds a node whose vector is
    missing). A store failure should raise; the postprocessor wraps it in
    :class:`~scar_core.errors.NeighborFetchError` and applies its ``on_error`` setting.
    Implementations must be safe to call concurrently.
    """

    def fetch(self, node_ids: Sequence[str], vector_ids: Sequence[str]) -> FetchedNodes:
        """Return the nodes of ``node_ids`` and the stored vectors of ``node_ids`` and ``vector_ids``."""
        ...

    async def afetch(self, node_ids: Sequence[str], vector_ids: Sequence[str]) -> FetchedNodes:
        """Async form of :meth:`fetch`."""
        ...


@runtime_checkable
class WindowNeighborSource(Protocol):
    """A :class:`NeighborSource` that can also return every node near some nodes in one request.

    The postprocessor uses :meth:`fetch_window` when the source offers it, to collect in one
    round trip what it would otherwise fetch one ring of neighbours at a time; it still uses
    :meth:`NeighborSource.fetch` for whatever lies beyond the window, so a window that follows
    links differently from the postprocessor costs round trips, never correctness.
    """

    def fetch_window(
        self,
        start_ids: Sequence[str],
        vector_ids: Sequence[str],
        radius: int,
        direction: Literal["both", "previous", "next"],
    ) -> FetchedWindow:
        """Return the nodes within ``radius`` steps of ``start_ids``, and vectors.

        Args:
            start_ids: Where the walk starts (the incoming nodes); they are not returned as
                nodes unless the walk reaches one from another.
            vector_ids: Ids whose stored vectors to return as well (the incoming nodes').
            radius: How many steps to walk from each start node, ``>= 1``.
            direction: Which links to follow: ``"both"``, ``"previous"`` or ``"next"``.
        """
        ...

    async def afetch_window(
        self,
        start_ids: Sequence[str],
        vector_ids: Sequence[str],
        radius: int,
        direction: Literal["both", "previous", "next"],
    ) -> FetchedWindow:
        """Async form of :meth:`fetch_window`."""
        ...


def stored_embedding(node: BaseNode) -> npt.ArrayLike | None:
    """Return the embedding a node carries, or ``None`` when it carries none (or an empty one)."""
    embedding = node.embedding
    if embedding is None:
        return None
    try:
        if len(embedding) == 0:
            return None
    except TypeError:
        # Not a sequence; let SCAR's vector validation report it.
        return embedding
    return embedding


def _unique(ids: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(ids))


class StoreNeighborSource:
    """Fetch neighbours from a LlamaIndex docstore, falling back to the vector store.

    * Nodes: ``docstore.get_nodes`` first; ids it lacks go to ``vector_store.get_nodes``, where
      the store supports it (``SimpleVectorStore`` does not: it keeps no nodes).
    * Vectors: a node's own ``embedding``; ``SimpleVectorStore``'s in-memory table; otherwise the
      embeddings that ``vector_store.get_nodes`` returns (pgvector returns them).

    Each :meth:`fetch` makes at most one docstore call and one vector-store call.

    Args:
        docstore: The index's docstore (``index.docstore``); may be empty.
        vector_store: The index's vector store (``index.vector_store``).

    Raises:
        InvalidSettingsError: If neither is given.

    Example:
        >>> from llama_index.core.storage.docstore import SimpleDocumentStore
        >>> source = StoreNeighborSource(docstore=SimpleDocumentStore())
        >>> source.fetch(["missing"], []).nodes
        {}
    """

    def __init__(
        self,
        docstore: BaseDocumentStore | None = None,
        vector_store: BasePydanticVectorStore | None = None,
    ) -> None:
        if docstore is None and vector_store is None:
            raise InvalidSettingsError(
                "StoreNeighborSource needs a docstore, a vector_store or both; got neither. "
                "Pass index.docstore and index.vector_store."
            )
        self._docstore = docstore
        self._vector_store = vector_store
        # None until a call tells; SimpleVectorStore is known not to hold nodes.
        self._store_gets_nodes: bool | None = (
            False if isinstance(vector_store, SimpleVectorStore) else None
        )

    @property
    def docstore(self) -> BaseDocumentStore | None:
        """The docstore asked first."""
        return self._docstore

    @property
    def vector_store(self) -> BasePydanticVectorStore | None:
        """The vector store asked for what the docstore lacks, and for vectors."""
        return self._vector_store

    def __repr__(self) -> str:
        docstore = type(self._docstore).__name__ if self._docstore is not None else None
        store = type(self._vector_store).__name__ if self._vector_store is not None else None
        return f"StoreNeighborSource(docstore={docstore}, vector_store={store})"

    def fetch(self, node_ids: Sequence[str], vector_ids: Sequence[str]) -> FetchedNodes:
        """Fetch nodes and stored vectors; see the class docstring for the order."""
        node_ids = _unique(node_ids)
        found: list[BaseNode] = []
        if self._docstore is not None and node_ids:
            found = self._docstore.get_nodes(node_ids, raise_error=False)
        plan = _Plan.after_docstore(node_ids, vector_ids, found, self._vector_store)
        stored: list[BaseNode] = []
        store = self._vector_store
        if store is not None and plan.store_request and self._store_gets_nodes is not False:
            try:
                stored = store.get_nodes(node_ids=plan.store_request)
            except NotImplementedError:
                self._note_store_lacks_get_nodes()
            else:
                self._store_gets_nodes = True
        return plan.finish(stored)

    async def afetch(self, node_ids: Sequence[str], vector_ids: Sequence[str]) -> FetchedNodes:
        """Async form of :meth:`fetch` (``aget_nodes`` on both stores)."""
        node_ids = _unique(node_ids)
        found: list[BaseNode] = []
        if self._docstore is not None and node_ids:
            found = await self._docstore.aget_nodes(node_ids, raise_error=False)
        plan = _Plan.after_docstore(node_ids, vector_ids, found, self._vector_store)
        stored: list[BaseNode] = []
        store = self._vector_store
        if store is not None and plan.store_request and self._store_gets_nodes is not False:
            try:
                stored = await store.aget_nodes(node_ids=plan.store_request)
            except NotImplementedError:
                self._note_store_lacks_get_nodes()
            else:
                self._store_gets_nodes = True
        return plan.finish(stored)

    def _note_store_lacks_get_nodes(self) -> None:
        if self._store_gets_nodes is None:
            logger.debug(
                "%s does not implement get_nodes; neighbours missing from the docstore "
                "cannot be fetched from it",
                type(self._vector_store).__name__,
            )
        self._store_gets_nodes = False


@dataclass
class _Plan:
    """One fetch's bookkeeping between the docstore call and the vector-store call."""

    node_ids: list[str]
    nodes: dict[str, BaseNode]
    vectors: dict[str, npt.ArrayLike]
    store_request: list[str]

    @classmethod
    def after_docstore(
        cls,
        node_ids: list[str],
        vector_ids: Sequence[str],
        found: Sequence[BaseNode],
        vector_store: BasePydanticVectorStore | None,
    ) -> _Plan:
        wanted = set(node_ids)
        nodes = {node.node_id: node for node in found if node.node_id in wanted}
        vectors: dict[str, npt.ArrayLike] = {}
        for node_id, node in nodes.items():
            embedding = stored_embedding(node)
            if embedding is not None:
                vectors[node_id] = embedding
        lacking_vectors = [i for i in _unique([*node_ids, *vector_ids]) if i not in vectors]
        if isinstance(vector_store, SimpleVectorStore):
            table = vector_store.data.embedding_dict
            for node_id in lacking_vectors:
                embedding = table.get(node_id)
                if embedding is not None and len(embedding) > 0:
                    vectors[node_id] = embedding
            lacking_vectors = [i for i in lacking_vectors if i not in vectors]
        request: list[str] = []
        if vector_store is not None:
            request = _unique([*(i for i in node_ids if i not in nodes), *lacking_vectors])
        return cls(node_ids, nodes, vectors, request)

    def finish(self, stored: Sequence[BaseNode]) -> FetchedNodes:
        """Merge what the vector store returned; ids nobody asked for are ignored."""
        requested = set(self.store_request)
        wanted_nodes = set(self.node_ids)
        for node in stored:
            node_id = node.node_id
            if node_id not in requested:
                continue
            if node_id in wanted_nodes and node_id not in self.nodes:
                self.nodes[node_id] = node
            embedding = stored_embedding(node)
            if embedding is not None and node_id not in self.vectors:
                self.vectors[node_id] = embedding
        return FetchedNodes(self.nodes, self.vectors)
