"""Read neighbour nodes and their stored vectors from LlamaIndex stores, sync or async.

A :class:`StoreReader`, chosen by the vector store's type (a subclass counts; no store package is
imported here), reads nodes by id in one batched call and finds their stored vectors:

- ``SimpleVectorStore``: nodes from the docstore, vectors by ``vector_store.get(id)``.
- ``FaissVectorStore``: nodes from the docstore, vectors by the FAISS index's
  ``reconstruct_batch`` at the rows the index's ``index_struct`` maps them to.
- ``ChromaVectorStore``: both by its collection's ``get(ids, include=["embeddings", ...])`` (its
  ``get_nodes`` gives no vectors); async, in a worker thread.
- ``QdrantVectorStore``, ``PGVectorStore``, any store whose nodes carry their embeddings:
  ``get_nodes``, or its own ``aget_nodes`` (a worker thread once that fails: Qdrant with a sync
  client). Texts of nodes without a stored vector are embedded, once, through the cache.

One :class:`NodeReads` serves one query: it keeps what was read and embeds what no store gave.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.data_structs.data_structs import IndexDict
from llama_index.core.schema import BaseNode, MetadataMode, NodeRelationship, RelatedNodeInfo
from llama_index.core.storage.docstore import BaseDocumentStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore
from llama_index.core.vector_stores.utils import metadata_dict_to_node

from scar_core.cache import EmbeddingCache
from scar_core.errors import NeighborFetchError
from scar_core.selection import Chunk

__all__ = ["NodeReads", "StoreReader", "links_of", "reader_for"]


def links_of(node: BaseNode) -> tuple[str | None, str | None]:
    """Return the ids of the nodes before and after ``node`` (its PREVIOUS/NEXT relationships)."""
    infos = [node.relationships.get(r) for r in (NodeRelationship.PREVIOUS, NodeRelationship.NEXT)]
    ids = [i.node_id if isinstance(i, RelatedNodeInfo) and i.node_id else None for i in infos]
    return ids[0], ids[1]


class StoreReader:
    """The default reader: nodes by id through ``get_nodes``, with the vectors they carry.

    Args:
        docstore: The docstore, when nodes live there.
        vector_store: The vector store; nodes are read from it when it keeps text.
        index_struct: The index's map of vector store ids to node ids (FAISS rows).
    """

    def __init__(
        self,
        docstore: BaseDocumentStore | None,
        vector_store: BasePydanticVectorStore | None,
        index_struct: IndexDict | None = None,
    ) -> None:
        self.stores = (docstore, vector_store, index_struct)
        self.vector_store: Any = vector_store
        self.index_struct = index_struct
        # Nodes are read from a vector store that keeps text, else from the docstore.
        self.store: Any = vector_store if getattr(vector_store, "stores_text", False) else docstore
        #: The error of the store's ``aget_nodes``, after which the sync read stands in for it.
        self.async_error: Exception | None = None

    def nodes(self, ids: list[str]) -> list[BaseNode]:
        """Return the nodes of ``ids`` the store holds, in one batched read."""
        if isinstance(self.store, BaseDocumentStore):
            return self.store.get_nodes(ids, raise_error=False)
        return list(self.store.get_nodes(node_ids=ids))

    async def anodes(self, ids: list[str]) -> list[BaseNode]:
        """Async :meth:`nodes`: the store's own ``aget_nodes`` while it works, else a thread."""
        store = self.store
        if isinstance(store, BaseDocumentStore):
            return await store.aget_nodes(ids, raise_error=False)
        own = type(store).aget_nodes is not BasePydanticVectorStore.aget_nodes  # base: blocks
        if own and self.async_error is None:
            try:
                return list(await store.aget_nodes(node_ids=ids))
            except Exception as error:  # e.g. Qdrant with a sync client; the postprocessor warns
                self.async_error = error
        return await asyncio.to_thread(self.nodes, ids)

    def vectors(self, nodes: Sequence[BaseNode]) -> dict[str, Any]:
        """Return ``{node id: stored vector}`` for those of ``nodes`` whose vector is known."""
        return {n.node_id: n.embedding for n in nodes if n.embedding is not None}


class _SimpleReader(StoreReader):
    """Nodes from the docstore; vectors by ``SimpleVectorStore.get``, in process."""

    def vectors(self, nodes: Sequence[BaseNode]) -> dict[str, Any]:
        found = super().vectors(nodes)
        for node in nodes:
            with contextlib.suppress(KeyError):  # not in this store: embedded from its text
                found.setdefault(node.node_id, self.vector_store.get(node.node_id))
        return found


class _FaissReader(StoreReader):
    """Nodes from the docstore; vectors by ``reconstruct_batch`` at the index's rows, in process."""

    _rows: tuple[int, int, dict[str, int]] = (0, -1, {})  # (map's id, its size, node id -> row)

    def vectors(self, nodes: Sequence[BaseNode]) -> dict[str, Any]:
        # Without the index's map (not built with from_index), the rows are unknown.
        mapping = self.index_struct.nodes_dict if self.index_struct is not None else {}
        if self._rows[:2] != (id(mapping), len(mapping)):  # nodes were added or deleted
            row_of = {n: int(r) for r, n in mapping.items() if r.isdigit()}
            self._rows = (id(mapping), len(mapping), row_of)
        found = super().vectors(nodes)
        ids = [n.node_id for n in nodes if n.node_id in self._rows[2] and n.node_id not in found]
        rows = np.asarray([self._rows[2][i] for i in ids], dtype=np.int64)
        with contextlib.suppress(RuntimeError):  # e.g. IVF without a direct map: text embedded
            found.update(zip(ids, self.vector_store.client.reconstruct_batch(rows), strict=True))
        return found


class _ChromaReader(StoreReader):
    """Nodes and vectors in one ``get`` of the collection (``get_nodes`` leaves vectors out)."""

    def nodes(self, ids: list[str]) -> list[BaseNode]:
        include = ["embeddings", "documents", "metadatas"]
        got = self.vector_store.client.get(ids=ids, include=include)
        texts = zip(got["documents"], got["metadatas"], strict=True)
        try:
            nodes = [metadata_dict_to_node(metadata, text=text) for text, metadata in texts]
        except ValueError:  # legacy metadata: get_nodes reads it, without vectors
            return super().nodes(ids)
        for node, vector in zip(nodes, got["embeddings"], strict=True):
            node.embedding = [float(x) for x in vector]
        return nodes  # async: in a worker thread, as ChromaVectorStore has no aget_nodes


_READERS: dict[str, type[StoreReader]] = {
    "SimpleVectorStore": _SimpleReader,
    "FaissVectorStore": _FaissReader,  # not FaissMapVectorStore: its id map is private
    "ChromaVectorStore": _ChromaReader,
}


def reader_for(
    docstore: BaseDocumentStore | None,
    vector_store: BasePydanticVectorStore | None,
    index_struct: IndexDict | None = None,
) -> StoreReader:
    """Return the reader for the vector store's type (the first LlamaIndex class it derives from)."""
    mro = type(vector_store).__mro__
    kind = next((c.__name__ for c in mro if c.__module__.startswith("llama_index.")), "")
    return _READERS.get(kind, StoreReader)(docstore, vector_store, index_struct)


class NodeReads:
    """One query's reads: nodes by id, each with a vector, from the docstore or vector store.

    Args:
        reader: The reader of the postprocessor's stores.
        known: Nodes the query already holds (the retrieved ones); they are not read again unless
            the vector store can give the embedding they lack.
        embed_model: Called for the embed model when some node has no stored vector.
        cache: The cache that embeds each text once.
    """

    def __init__(
        self,
        reader: StoreReader,
        known: Iterable[BaseNode],
        embed_model: Callable[[], BaseEmbedding],
        cache: Callable[[], EmbeddingCache],
    ) -> None:
        self.reader = reader
        self.nodes: dict[str, BaseNode] = {}
        self.vectors: dict[str, Any] = {}
        self._embed_model = embed_model
        self._cache = cache
        #: Texts embedded for this query because no store gave their vectors.
        self.embedded = 0
        #: Whether some node's vector had to come from its text (cached or not).
        self.fell_back = False
        self._take(list(known))

    def read(self, ids: Sequence[str]) -> list[Chunk]:
        """Return the chunks of ``ids`` the stores hold, with vectors (ids not found are left out).

        Raises:
            NeighborFetchError: If the store fails.
        """
        if wanted := self._to_read(ids):
            try:
                self._take(self.reader.nodes(wanted))
            except Exception as error:
                raise self._fetch_error(wanted, error) from error
        if lacking := [i for i in ids if i in self.nodes and i not in self.vectors]:
            self._embed(lacking)
        return self.chunks(ids)

    async def aread(self, ids: Sequence[str]) -> list[Chunk]:
        """Async :meth:`read`: the store's async read where it has one, else a worker thread."""
        if wanted := self._to_read(ids):
            try:
                self._take(await self.reader.anodes(wanted))
            except Exception as error:
                raise self._fetch_error(wanted, error) from error
        if lacking := [i for i in ids if i in self.nodes and i not in self.vectors]:
            await asyncio.to_thread(self._embed, lacking)
        return self.chunks(ids)

    def _to_read(self, ids: Sequence[str]) -> list[str]:
        """Ids not known yet, and known ones without a vector that the vector store can give."""
        refetch = self.reader.store is self.reader.vector_store
        return [i for i in ids if i not in self.nodes or (refetch and i not in self.vectors)]

    def _take(self, nodes: list[BaseNode]) -> None:
        """Record nodes and the vectors they carry or the vector store holds."""
        for node in nodes:
            self.nodes.setdefault(node.node_id, node)
        for node_id, vector in self.reader.vectors(nodes).items():
            self.vectors.setdefault(node_id, vector)

    def _embed(self, ids: list[str]) -> None:
        """Embed the text of nodes no store gave a vector for, once each through the cache."""
        model = self._embed_model()
        texts = [self.nodes[i].get_content(metadata_mode=MetadataMode.EMBED) for i in ids]
        # The class keeps apart models that share a name (BaseEmbedding's default is "unknown").
        key = f"{type(model).__module__}.{type(model).__qualname__}/{model.model_name}"
        matrix, computed = self._cache().embed(key, texts, model.get_text_embedding_batch)
        self.vectors.update(zip(ids, matrix, strict=True))
        self.embedded += computed
        self.fell_back = True

    def chunks(self, ids: Sequence[str]) -> list[Chunk]:
        """Return the chunks of the known nodes among ``ids``, with what vectors are known."""
        return [
            Chunk(i, self.vectors.get(i), *links_of(self.nodes[i])) for i in ids if i in self.nodes
        ]

    def _fetch_error(self, ids: Sequence[str], error: Exception) -> NeighborFetchError:
        return NeighborFetchError(
            f"{type(self.reader.store).__name__} failed while SCAR read {len(ids)} node(s) by id "
            f"({type(error).__name__}: {error}); check that the store is reachable and holds "
            "the index's nodes."
        )
