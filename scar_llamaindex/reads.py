"""Read neighbour nodes and their stored vectors from LlamaIndex stores, sync or async.

A :class:`StoreReader`, chosen by the vector store's type (a subclass counts; no store package is
imported here but Chroma's filter converter, when a Chroma store is read), reads nodes by id in one
batched call, keeps only those the index holds and the search's restrictions admit, and finds
their stored vectors.

What the index holds: where the vector store keeps no text (Simple, FAISS), the nodes its
``index_struct`` maps, as its retriever searches only those; two indexes sharing one
``StorageContext`` (one vector store) hold only their own nodes. Where the vector store keeps the
text (Chroma, Qdrant, PGVector), the index keeps no map and its search covers the whole
collection or table, so that is what it holds.

The search's restrictions: its ``MetadataFilters``, and its ``vector_store_kwargs``, taken from an
allow-list per store: a name the reader applies to its reads, or one that only ranks or tunes the
search and cannot narrow it. Any other name, and a store option that narrows its searches, make
:meth:`StoreReader.unfilterable` say why SCAR refuses:

- ``SimpleVectorStore``: nodes from the docstore, kept if the index maps them, the vector store
  still holds them and their metadata passes the filters as ``SimpleVectorStore.query`` evaluates
  them (``build_metadata_filter_fn``); vectors by ``vector_store.get(id)``. Takes
  ``mmr_threshold``.
- ``FaissVectorStore``: nodes from the docstore, kept if the index's ``index_struct`` maps them;
  vectors by the FAISS index's ``reconstruct_batch`` at those rows. It cannot filter.
- ``ChromaVectorStore``: both by its collection's ``get(ids, where=<the filters in Chroma's
  form>, include=["embeddings", ...])`` (its ``get_nodes`` gives no vectors); async, in a thread.
  Takes ``mmr_threshold``, ``mmr_prefetch_factor`` and ``mmr_prefetch_k``.
- ``QdrantVectorStore``: ``get_nodes(node_ids=..., filters=..., shard_identifier=...)``, or its
  own ``aget_nodes`` (a worker thread once that fails: a sync client only). Takes
  ``shard_identifier`` (applied) and ``search_params``. A store sharded by custom shard keys
  needs the search's ``vector_store_kwargs`` stated.
- ``PGVectorStore``: ``get_nodes(node_ids=..., filters=...)`` or ``aget_nodes``. Takes
  ``ivfflat_probes``, ``hnsw_ef_search`` and the ``mmr_*`` names; a store built with
  ``customize_query_fn`` is refused (its reads by id do not pass through it).
- Any other store: ``get_nodes`` (nodes that carry their embeddings), or the docstore (nodes kept
  if the ``index_struct`` maps them); it cannot filter, and takes no ``vector_store_kwargs``.
  Texts of nodes without a stored vector are embedded, once, through the cache.

What no store gives a vector for, :class:`scar_core.query.ScarQuery` embeds (once, cached).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from llama_index.core.data_structs.data_structs import IndexDict
from llama_index.core.schema import BaseNode, NodeRelationship, RelatedNodeInfo
from llama_index.core.storage.docstore import BaseDocumentStore
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    FilterCondition,
    MetadataFilters,
)
from llama_index.core.vector_stores.utils import build_metadata_filter_fn, metadata_dict_to_node

__all__ = ["StoreReader", "links_of", "reader_for"]

#: Stores whose reads SCAR filters, as the error for the others says.
FILTERED_STORES = "SimpleVectorStore, ChromaVectorStore, QdrantVectorStore and PGVectorStore"


def links_of(node: BaseNode) -> tuple[str | None, str | None]:
    """Return the ids of the nodes before and after ``node`` (its PREVIOUS/NEXT relationships)."""
    infos = [node.relationships.get(r) for r in (NodeRelationship.PREVIOUS, NodeRelationship.NEXT)]
    ids = [i.node_id if isinstance(i, RelatedNodeInfo) and i.node_id else None for i in infos]
    return ids[0], ids[1]


class StoreReader:
    """The default reader: nodes by id through ``get_nodes``, with the vectors they carry.

    It cannot apply ``MetadataFilters`` (:meth:`unfilterable` says why); the readers of the
    stores it can filter derive from it.

    Args:
        docstore: The docstore, when nodes live there.
        vector_store: The vector store; nodes are read from it when it keeps text.
        index_struct: The index's map of vector store ids to node ids: a node read from the
            docstore that it does not map is no longer in the index, and is left out.
        filters: The search's filters; empty ones count as none.
        search_kwargs: The search's ``vector_store_kwargs``.
    """

    #: Whether the reader applies ``filters`` to what it reads.
    filterable: ClassVar[bool] = False
    #: The ``vector_store_kwargs`` the reader passes on to its reads of the store.
    applied_kwargs: ClassVar[frozenset[str]] = frozenset()
    #: The ``vector_store_kwargs`` that only rank or tune the store's search, never narrow it.
    ranking_kwargs: ClassVar[frozenset[str]] = frozenset()

    def __init__(
        self,
        docstore: BaseDocumentStore | None,
        vector_store: BasePydanticVectorStore | None,
        index_struct: IndexDict | None = None,
        filters: MetadataFilters | None = None,
        search_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.stores = (docstore, vector_store, index_struct, filters, search_kwargs)
        self.vector_store: Any = vector_store
        self.index_struct = index_struct
        self.filters = filters if filters is not None and filters.filters else None
        self.search_kwargs: Mapping[str, Any] = search_kwargs or {}
        # Nodes are read from a vector store that keeps text, else from the docstore.
        self.store: Any = vector_store if getattr(vector_store, "stores_text", False) else docstore
        #: The error of the store's ``aget_nodes``, after which the sync read stands in for it.
        self.async_error: Exception | None = None
        self._mapped: tuple[int, int, dict[str, str]] = (0, -1, {})  # see index_ids

    @property
    def name(self) -> str:
        """The class name of the store SCAR reads through (the vector store, if any)."""
        return type(self.vector_store if self.vector_store is not None else self.store).__name__

    def unfilterable(self) -> str | None:
        """Why the search's restrictions cannot be applied to the reads; ``None`` if they can be.

        Checked in turn: the ``vector_store_kwargs`` against the reader's allow-list, the store's
        own options, the filters.
        """
        known = self.applied_kwargs | self.ranking_kwargs
        refused = sorted(set(self.search_kwargs) - known)
        if refused:
            return (
                f"the search passes vector_store_kwargs {refused}, which SCAR neither applies to "
                "its reads nor knows to leave the search unrestricted (it takes "
                f"{sorted(known) or 'none'} from {self.name}; pass a filter as MetadataFilters "
                "instead)"
            )
        return self._narrowing_option() or self._filters_refused()

    def kwargs_needed(self) -> str | None:
        """Why the store's searches may carry ``vector_store_kwargs`` that narrow them, if so.

        A postprocessor built without the retriever must then be told them.
        """
        return None

    def _narrowing_option(self) -> str | None:
        """The store's own option that narrows its searches but not SCAR's reads, if any."""
        return None

    def _filters_refused(self) -> str | None:
        """Why the filters cannot be applied to this reader's reads; ``None`` if they can be."""
        if self.filters is None or self.filterable:
            return None
        if self.vector_store is None:
            return (
                "it has no vector store to filter with; pass vector_store=index.vector_store, or "
                "build it with from_retriever(retriever) or from_index(index, filters=...)"
            )
        return f"SCAR applies MetadataFilters to reads from {FILTERED_STORES} only"

    def nodes(self, ids: list[str]) -> list[BaseNode]:
        """Return the nodes of ``ids`` that the index holds and the filters admit, in one read."""
        if isinstance(self.store, BaseDocumentStore):
            return self._held(self.store.get_nodes(ids, raise_error=False))
        return list(self.store.get_nodes(node_ids=ids, **self._filter_kwargs()))

    async def anodes(self, ids: list[str]) -> list[BaseNode]:
        """Async :meth:`nodes`: the store's own ``aget_nodes``, else the sync read in a thread.

        When ``aget_nodes`` fails (Qdrant with only a sync client, say), the sync read runs in a
        worker thread and :attr:`async_error` keeps why; each call tries the async read first
        again, so one transient error changes nothing for later queries. If the sync read fails
        too, its error is raised from the async one.
        """
        store = self.store
        if isinstance(store, BaseDocumentStore):
            return self._held(await store.aget_nodes(ids, raise_error=False))
        if type(store).aget_nodes is BasePydanticVectorStore.aget_nodes:  # the base blocks
            return await asyncio.to_thread(self.nodes, ids)
        try:
            return list(await store.aget_nodes(node_ids=ids, **self._filter_kwargs()))
        except Exception as error:
            self.async_error = error
            try:
                return await asyncio.to_thread(self.nodes, ids)
            except Exception as sync_error:
                raise sync_error from error

    def vectors(self, nodes: Sequence[BaseNode]) -> dict[str, Any]:
        """Return ``{node id: stored vector}`` for those of ``nodes`` whose vector is known."""
        return {n.node_id: n.embedding for n in nodes if n.embedding is not None}

    def holds(self, node_id: str) -> bool:
        """Whether a node read from the docstore is still in the index (and the filters pass)."""
        return self.index_struct is None or self.index_id(node_id) is not None

    def index_id(self, node_id: str) -> str | None:
        """The node's id in the vector store as ``index_struct`` maps it; ``None`` if unmapped."""
        mapping = self.index_struct.nodes_dict if self.index_struct is not None else {}
        if self._mapped[:2] != (id(mapping), len(mapping)):  # nodes were added or deleted
            self._mapped = (id(mapping), len(mapping), {n: v for v, n in mapping.items()})
        # Checked against the map itself: an entry deleted since (its size then kept by an
        # addition, so the copy was not rebuilt) no longer counts.
        vector_id = self._mapped[2].get(node_id)
        return vector_id if vector_id is not None and mapping.get(vector_id) == node_id else None

    def _held(self, nodes: list[BaseNode]) -> list[BaseNode]:
        return [n for n in nodes if self.holds(n.node_id)]

    def _filter_kwargs(self) -> dict[str, Any]:
        applied = {k: v for k, v in self.search_kwargs.items() if k in self.applied_kwargs}
        if self.filters is None or not self.filterable:
            return applied
        # Nested under AND: QdrantVectorStore.get_nodes adds its id condition to the filter's
        # top-level ``should``, where an OR filter's conditions would admit any id.
        nested = MetadataFilters(filters=[self.filters], condition=FilterCondition.AND)
        return {"filters": nested, **applied}


class _SimpleReader(StoreReader):
    """Nodes from the docstore, kept as ``SimpleVectorStore.query`` would find them.

    A node is kept if the index maps it (another index may share the vector store), the vector
    store still holds it and its stored metadata passes the filters (``build_metadata_filter_fn``,
    as the query uses); vectors by ``vector_store.get``, in process.
    """

    filterable = True
    ranking_kwargs = frozenset({"mmr_threshold"})

    def __init__(self, *stores: Any) -> None:
        super().__init__(*stores)
        metadata = lambda node_id: self.vector_store.data.metadata_dict[node_id]  # noqa: E731
        self._admits = build_metadata_filter_fn(metadata, self.filters)

    def _filters_refused(self) -> str | None:
        nested = any(isinstance(f, MetadataFilters) for f in getattr(self.filters, "filters", []))
        return "its filter evaluation does not take nested MetadataFilters" if nested else None

    def holds(self, node_id: str) -> bool:
        data = self.vector_store.data
        if not super().holds(node_id):  # another index's node, in the shared vector store
            return False
        if node_id not in data.embedding_dict:  # deleted from the index, left in the docstore
            return False
        return self.filters is None or (node_id in data.metadata_dict and self._admits(node_id))

    def vectors(self, nodes: Sequence[BaseNode]) -> dict[str, Any]:
        found = super().vectors(nodes)
        for node in nodes:
            with contextlib.suppress(KeyError):  # not in this store: embedded from its text
                found.setdefault(node.node_id, self.vector_store.get(node.node_id))
        return found


class _FaissReader(StoreReader):
    """Nodes from the docstore; vectors by ``reconstruct_batch`` at the index's rows, in process.

    ``FaissVectorStore`` cannot filter its own search, so SCAR cannot filter its reads either.
    """

    def _filters_refused(self) -> str | None:
        return None if self.filters is None else "FaissVectorStore cannot filter by metadata"

    def vectors(self, nodes: Sequence[BaseNode]) -> dict[str, Any]:
        # Without the index's map (not built with from_index), the rows are unknown.
        found = super().vectors(nodes)
        mapped = {n.node_id: self.index_id(n.node_id) for n in nodes if n.node_id not in found}
        rows = {i: int(row) for i, row in mapped.items() if row is not None and row.isdigit()}
        at = np.asarray(list(rows.values()), dtype=np.int64)
        with contextlib.suppress(RuntimeError):  # e.g. IVF without a direct map: text embedded
            found.update(zip(rows, self.vector_store.client.reconstruct_batch(at), strict=True))
        return found


class _ChromaReader(StoreReader):
    """Nodes and vectors in one ``get`` of the collection (``get_nodes`` leaves vectors out).

    The filters go in as the ``where`` clause ``ChromaVectorStore.query`` makes of them.
    """

    filterable = True
    ranking_kwargs = frozenset({"mmr_threshold", "mmr_prefetch_factor", "mmr_prefetch_k"})

    def _filters_refused(self) -> str | None:
        try:
            self._where()
        except ValueError as error:  # an operator or condition Chroma has no form for
            return f"its filter conversion refuses these filters ({error})"
        return None

    def _where(self) -> dict[str, Any]:
        from llama_index.vector_stores.chroma.base import _to_chroma_filter  # no public name

        return {} if self.filters is None else {"where": _to_chroma_filter(self.filters)}

    def nodes(self, ids: list[str]) -> list[BaseNode]:
        include = ["embeddings", "documents", "metadatas"]
        got = self.vector_store.client.get(ids=ids, include=include, **self._where())
        texts = zip(got["documents"], got["metadatas"], strict=True)
        try:
            nodes = [metadata_dict_to_node(metadata, text=text) for text, metadata in texts]
        except ValueError:  # legacy metadata: get_nodes reads it (filtered alike), without vectors
            return super().nodes(ids)
        for node, vector in zip(nodes, got["embeddings"], strict=True):
            node.embedding = [float(x) for x in vector]
        return nodes  # async: in a worker thread, as ChromaVectorStore has no aget_nodes


class _QdrantReader(StoreReader):
    """``get_nodes``/``aget_nodes`` with the filters and the search's shard, as its search uses."""

    filterable = True
    applied_kwargs = frozenset({"shard_identifier"})
    ranking_kwargs = frozenset({"search_params"})

    def kwargs_needed(self) -> str | None:
        # No public accessor for the sharding method in llama-index-vector-stores-qdrant; it is
        # a str enum, so it equals its value ("custom": ShardingMethod.CUSTOM).
        if getattr(self.vector_store, "_sharding_method", None) != "custom":
            return None
        return (
            f"{self.name} is sharded by custom shard keys, and a search that names one "
            "(vector_store_kwargs={'shard_identifier': ...}) sees only that shard"
        )


class _PGReader(StoreReader):
    """``get_nodes``/``aget_nodes`` with the filters, which the store applies as its search does.

    A store built with ``customize_query_fn`` is refused: the function rewrites the search's SQL
    (a tenant clause, say), and the reads by id do not pass through it.
    """

    filterable = True
    ranking_kwargs = frozenset(
        {"ivfflat_probes", "hnsw_ef_search", "mmr_threshold", "mmr_prefetch_factor",
         "mmr_prefetch_k"}
    )  # fmt: skip

    def _narrowing_option(self) -> str | None:
        # No public accessor for the customiser in llama-index-vector-stores-postgres.
        if getattr(self.vector_store, "_customize_query_fn", None) is None:
            return None
        return (
            "it is built with customize_query_fn, which rewrites its searches' SQL, and its reads "
            "by id (get_nodes) do not pass through it"
        )


_READERS: dict[str, type[StoreReader]] = {
    "SimpleVectorStore": _SimpleReader,
    "FaissVectorStore": _FaissReader,  # not FaissMapVectorStore: its id map is private
    "ChromaVectorStore": _ChromaReader,
    "QdrantVectorStore": _QdrantReader,
    "PGVectorStore": _PGReader,
}


def reader_for(
    docstore: BaseDocumentStore | None,
    vector_store: BasePydanticVectorStore | None,
    index_struct: IndexDict | None = None,
    filters: MetadataFilters | None = None,
    search_kwargs: Mapping[str, Any] | None = None,
) -> StoreReader:
    """Return the reader for the vector store's type (the first LlamaIndex class it derives from)."""
    mro = type(vector_store).__mro__
    kind = next((c.__name__ for c in mro if c.__module__.startswith("llama_index.")), "")
    reader = _READERS.get(kind, StoreReader)
    return reader(docstore, vector_store, index_struct, filters, search_kwargs)
