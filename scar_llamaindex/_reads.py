"""Read neighbour nodes and their stored vectors from LlamaIndex stores, sync or async.

A :class:`StoreReader`, picked by the vector store's type (:func:`reader_for`), reads nodes by id
in one batched call, keeps those the index holds and the search's restrictions admit, and finds
their stored vectors; each reader's docstring says how, for its store.

What the index holds: where the vector store keeps no text (Simple, FAISS), the nodes its
``index_struct`` maps, as its retriever searches only those; two indexes sharing one
``StorageContext`` (one vector store) hold only their own nodes. Where the vector store keeps the
text (Chroma, Qdrant, PGVector), the index keeps no map and its search covers the whole
collection or table, so that is what it holds.

The search's restrictions: its ``MetadataFilters``; its ``node_ids`` and ``doc_ids``; and its
``vector_store_kwargs``, taken from an allow-list per store, of names the reader applies to its
reads (:attr:`StoreReader.applied_kwargs`) and of names that only rank or tune the search and
cannot narrow it (:attr:`StoreReader.ranking_kwargs`). Any other name, and a store option that
narrows its searches, make :meth:`StoreReader.unfilterable` say why SCAR refuses. What no store
gives a vector for, the postprocessor embeds from the node's text.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection, Mapping, Sequence
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

from scar_core._errors import (
    InvalidSettingsError,
    NeighborFetchError,
    unfilterable_store_error,
    warn_once,
)
from scar_core._settings import ScarSettings
from scar_llamaindex import _compat

__all__ = ["StoreReader", "checked_reader", "links_of", "reader_for"]

#: Stores whose reads SCAR filters, as the error for the others says.
FILTERED_STORES = "SimpleVectorStore, ChromaVectorStore, QdrantVectorStore and PGVectorStore"


def links_of(node: BaseNode) -> tuple[str | None, str | None]:
    """Return the ids of the nodes before and after ``node`` (its PREVIOUS/NEXT relationships)."""
    infos = [node.relationships.get(r) for r in (NodeRelationship.PREVIOUS, NodeRelationship.NEXT)]
    ids = [i.node_id if isinstance(i, RelatedNodeInfo) and i.node_id else None for i in infos]
    return ids[0], ids[1]


class StoreReader:
    """The default reader: nodes by id through ``get_nodes``, with the vectors they carry.

    Any other store: ``get_nodes`` where the vector store keeps text, else the docstore (nodes
    kept if the ``index_struct`` maps them). It cannot apply ``MetadataFilters`` and takes no
    ``vector_store_kwargs`` (:meth:`unfilterable` says why); the readers of the stores it can
    filter derive from it.

    It takes the index's stores, then the search's ``filters`` (empty ones count as none),
    ``vector_store_kwargs``, ``node_ids`` and ``doc_ids`` (no node outside them is read), and
    whether those kwargs were stated (else the store may need them, see :meth:`unfilterable`).
    A node read from the docstore that ``index_struct`` does not map is left out.
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
        node_ids: Collection[str] | None = None,
        doc_ids: Collection[str] | None = None,
        *,
        kwargs_stated: bool = True,
    ) -> None:
        #: What the reader was made of: it reads these, and no others.
        self.stores = (
            docstore, vector_store, index_struct, filters, search_kwargs, node_ids, doc_ids,
        )  # fmt: skip
        self.vector_store: Any = vector_store
        self.index_struct = index_struct
        self.filters = filters if filters is not None and filters.filters else None
        self.search_kwargs: Mapping[str, Any] = search_kwargs or {}
        self.node_ids, self.doc_ids, self.kwargs_stated = node_ids, doc_ids, kwargs_stated
        # Nodes are read from a vector store that keeps text, else from the docstore.
        self.store: Any = vector_store if getattr(vector_store, "stores_text", False) else docstore
        #: The error of the store's ``aget_nodes``, after which the sync read stands in for it.
        self.async_error: Exception | None = None
        self._mapped: tuple[int, int, dict[str, str]] = (0, -1, {})  # see index_id

    @property
    def name(self) -> str:
        """The class name of the store SCAR reads through (the vector store, if any)."""
        return type(self.vector_store if self.vector_store is not None else self.store).__name__

    def unfilterable(self) -> str | None:
        """Why the search's restrictions cannot be applied to the reads; ``None`` if they can be.

        Checked in turn: the ``vector_store_kwargs`` against the reader's allow-list, then the
        store's own options and the filters (:meth:`_refused`).
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
        return self._refused()

    def _refused(self) -> str | None:
        """Why the store's options or the filters keep SCAR from filtering its reads, if so."""
        if self.filters is None or self.filterable:
            return None
        if self.vector_store is None:
            return (
                "it has no vector store to filter with; pass vector_store=index.vector_store, or "
                "build it with from_retriever(retriever) or from_index(index, filters=...)"
            )
        return f"SCAR applies MetadataFilters to reads from {FILTERED_STORES} only"

    def nodes(self, ids: list[str]) -> list[BaseNode]:
        """Return the nodes of ``ids`` that the index holds and the search admits, in one read."""
        return self._bounded(self._read(ids))

    async def anodes(self, ids: list[str]) -> list[BaseNode]:
        """Async :meth:`nodes`: the store's own ``aget_nodes``, else the sync read in a thread.

        When ``aget_nodes`` fails (Qdrant with only a sync client, say), the sync read runs in a
        worker thread and :attr:`async_error` keeps why (:meth:`warn_async` warns once); each
        call tries the async read first again, so one transient error changes nothing for later
        queries. If the sync read fails too, its error is raised from the async one.
        """
        store = self.store
        if isinstance(store, BaseDocumentStore):
            return self._bounded(self._held(await store.aget_nodes(ids, raise_error=False)))
        if type(store).aget_nodes is BasePydanticVectorStore.aget_nodes:  # the base blocks
            return await asyncio.to_thread(self.nodes, ids)
        try:
            return self._bounded(await store.aget_nodes(node_ids=ids, **self._filter_kwargs()))
        except Exception as error:
            self.async_error = error
            try:
                return await asyncio.to_thread(self.nodes, ids)
            except Exception as sync_error:
                raise sync_error from error

    def _read(self, ids: list[str]) -> list[BaseNode]:
        if isinstance(self.store, BaseDocumentStore):
            return self._held(self.store.get_nodes(ids, raise_error=False))
        return list(self.store.get_nodes(node_ids=ids, **self._filter_kwargs()))

    def _bounded(self, nodes: Sequence[BaseNode]) -> list[BaseNode]:
        """The nodes within the retriever's ``node_ids`` and ``doc_ids``."""
        return [
            n
            for n in nodes
            if (self.node_ids is None or n.node_id in self.node_ids)
            and (self.doc_ids is None or n.ref_doc_id in self.doc_ids)
        ]

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

    def fetch_error(self, ids: list[str], error: Exception) -> NeighborFetchError:
        """SCAR's error for a read of ``ids`` that failed with ``error``."""
        return NeighborFetchError(
            f"{self.name} failed while SCAR read {len(ids)} node(s) by id "
            f"({type(error).__name__}: {error}); check that the store is reachable and holds "
            "the index's nodes."
        )

    def warn_async(self) -> None:
        """Warn, once per store, that its ``aget_nodes`` failed and a worker thread read it."""
        if (error := self.async_error) is not None:
            warn_once(
                "async",
                self.store,
                f"{type(self.store).__name__}.aget_nodes failed ({type(error).__name__}: "
                f"{error}), so SCAR read it with get_nodes in a worker thread. Give the store a "
                "working async client to use its async path.",
                stacklevel=4,  # the caller of the postprocessor's shell
            )

    def no_vectors_warning(self, model_name: str) -> str:
        """The warning for nodes the store gave no vector for, with the way to stored ones."""
        if self.vector_store is None:
            fix = "pass vector_store=index.vector_store, or build it with from_index(index, filters=...)"
        elif self.index_struct is None:
            fix = "build it with from_index(index, filters=...), which also passes the index's index_struct"
        else:
            fix = (
                "use a store SCAR reads vectors from (Simple, FAISS, Chroma, Qdrant, PGVector, "
                "or one whose get_nodes returns embeddings)"
            )
        return (
            f"{self.name} gave no stored embeddings for some nodes, so SCAR embedded their text "
            f"with {model_name!r} (each text once, then cached; counted in "
            f"metadata['scar_embedded']). To read stored vectors instead, {fix}."
        )


class _SimpleReader(StoreReader):
    """``SimpleVectorStore``: nodes from the docstore, kept as its ``query`` would find them.

    A node is kept if the index maps it (another index may share the vector store), the vector
    store still holds it and its stored metadata passes the filters (``build_metadata_filter_fn``,
    as the query uses); vectors by ``vector_store.get``, in process. Takes ``mmr_threshold``.
    """

    filterable = True
    ranking_kwargs = frozenset({"mmr_threshold"})

    def __init__(self, *stores: Any, **bounds: Any) -> None:
        super().__init__(*stores, **bounds)
        metadata = lambda node_id: self.vector_store.data.metadata_dict[node_id]  # noqa: E731
        self._admits = build_metadata_filter_fn(metadata, self.filters)

    def _refused(self) -> str | None:
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
    """``FaissVectorStore``: nodes from the docstore, kept if the index's ``index_struct`` maps them.

    Vectors by the FAISS index's ``reconstruct_batch`` at those rows, in process. It cannot
    filter its own search, so SCAR cannot filter its reads either.
    """

    def _refused(self) -> str | None:
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
    """``ChromaVectorStore``: nodes and vectors in one ``get`` of its collection.

    ``get(ids, where=<the filters as its query makes them>, include=["embeddings", ...])``, as
    ``get_nodes`` leaves vectors out; async, in a worker thread (it has no ``aget_nodes``). Takes
    ``mmr_threshold``, ``mmr_prefetch_factor`` and ``mmr_prefetch_k``.
    """

    filterable = True
    ranking_kwargs = frozenset({"mmr_threshold", "mmr_prefetch_factor", "mmr_prefetch_k"})

    def _refused(self) -> str | None:
        try:
            self._where()
        except ValueError as error:  # an operator or condition Chroma has no form for
            return f"its filter conversion refuses these filters ({error})"
        return None

    def _where(self) -> dict[str, Any]:
        return {} if self.filters is None else {"where": _compat.chroma_where(self.filters)}

    def _read(self, ids: list[str]) -> list[BaseNode]:
        include = ["embeddings", "documents", "metadatas"]
        got = self.vector_store.client.get(ids=ids, include=include, **self._where())
        texts = zip(got["documents"], got["metadatas"], strict=True)
        try:
            nodes = [metadata_dict_to_node(metadata, text=text) for text, metadata in texts]
        except ValueError:  # legacy metadata: get_nodes reads it (filtered alike), without vectors
            return super()._read(ids)
        for node, vector in zip(nodes, got["embeddings"], strict=True):
            node.embedding = [float(x) for x in vector]
        return nodes


class _QdrantReader(StoreReader):
    """``QdrantVectorStore``: ``get_nodes``/``aget_nodes`` with the filters and the search's shard.

    Takes ``shard_identifier`` (applied to the reads) and ``search_params``. A store sharded by
    custom shard keys needs the search's ``vector_store_kwargs`` stated: a search that names a
    shard sees only that shard.
    """

    filterable = True
    applied_kwargs = frozenset({"shard_identifier"})
    ranking_kwargs = frozenset({"search_params"})

    def _refused(self) -> str | None:
        if self.kwargs_stated or not _compat.qdrant_custom_sharded(self.vector_store):
            return None
        return (
            f"{self.name} is sharded by custom shard keys, and a search that names one "
            "(vector_store_kwargs={'shard_identifier': ...}) sees only that shard; state the "
            "search's vector_store_kwargs (vector_store_kwargs={} for a search of every shard), "
            "or build it with from_retriever(retriever)"
        )


class _PGReader(StoreReader):
    """``PGVectorStore``: ``get_nodes``/``aget_nodes`` with the filters, applied as its search does.

    Takes ``ivfflat_probes``, ``hnsw_ef_search`` and the ``mmr_*`` names. A store built with
    ``customize_query_fn`` is refused: the function rewrites the search's SQL (a tenant clause,
    say), and the reads by id do not pass through it.
    """

    filterable = True
    ranking_kwargs = frozenset(
        {"ivfflat_probes", "hnsw_ef_search", "mmr_threshold", "mmr_prefetch_factor",
         "mmr_prefetch_k"}
    )  # fmt: skip

    def _refused(self) -> str | None:
        if not _compat.pg_customizes_queries(self.vector_store):
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
    *restrictions: Any,
    **bounds: Any,
) -> StoreReader:
    """Return the reader for the vector store's type (the first LlamaIndex class it derives from).

    ``restrictions`` and ``bounds``: the rest of :class:`StoreReader`'s arguments.
    """
    mro = type(vector_store).__mro__
    kind = next((c.__name__ for c in mro if c.__module__.startswith("llama_index.")), "")
    return _READERS.get(kind, StoreReader)(docstore, vector_store, *restrictions, **bounds)


def checked_reader(*stores: Any, settings: ScarSettings, **bounds: Any) -> StoreReader:
    """Return :func:`reader_for` ``(*stores, **bounds)``, if it can read as the search does.

    The ``settings``' ``neighbor_filter`` or ``allow_unfiltered_neighbors`` stands in for the
    restrictions the reader cannot apply.

    Raises:
        InvalidSettingsError: If the reader cannot apply the search's restrictions and neither
            stands in for them, or if there is no store to read nodes from.
    """
    reader = reader_for(*stores, **bounds)
    why = reader.unfilterable()
    if why is not None and not (settings.neighbor_filter or settings.allow_unfiltered_neighbors):
        raise unfilterable_store_error(reader.name, why)
    if reader.store is None:
        held = "no vector store" if reader.vector_store is None else "a vector store that "
        held += "" if reader.vector_store is None else "keeps no text (stores_text=False)"
        raise InvalidSettingsError(
            f"SCARNodePostprocessor has no docstore and {held}, so it cannot read neighbour "
            "nodes; pass docstore=index.docstore and vector_store=index.vector_store, or "
            "build it with SCARNodePostprocessor.from_index(index, filters=...)."
        )
    return reader
