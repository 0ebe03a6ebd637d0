"""Read chunks and their stored vectors from a LangChain vector store, through its public API.

One small reader per store, chosen by the store's type (the store's package is imported only if
the store is of that type). Every reader answers one batched call, ``read(ids)``, with the
documents found and their vectors; a vector is ``None`` where the store does not give it back,
and the retriever then embeds the text once, through its cache.

=========================  =======================================================
store                      vectors read from
=========================  =======================================================
``InMemoryVectorStore``    its ``store`` dict
FAISS (community)          ``index.reconstruct`` of the rows its docstore maps
``PGVectorStore``          ``get(ids, include=["embeddings", ...])``
Chroma                     ``get(ids, include=["embeddings", ...])``
``QdrantVectorStore``      ``client.retrieve(..., with_vectors=True)``
anything else              ``get_by_ids``; vectors embedded (a warning says so)
=========================  =======================================================
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore

__all__ = ["StoreReader", "reader_for"]

Found = dict[str, tuple[Document, Any]]


class StoreReader:
    """The default reader: documents through ``get_by_ids``, no vectors.

    Args:
        store: The vector store to read from.
    """

    #: Whether the store gives vectors back; if not, the retriever embeds (and warns once).
    returns_vectors = False

    def __init__(self, store: VectorStore) -> None:
        self.store = store

    def read(self, ids: Sequence[str]) -> Found:
        """Return ``{id: (document, vector or None)}`` for the ids the store holds."""
        return {d.id: (d, None) for d in self.store.get_by_ids(list(ids)) if d.id}

    async def aread(self, ids: Sequence[str]) -> Found:
        """Async :meth:`read`: the store's async API where it has one, else a worker thread."""
        if type(self) is StoreReader:
            return {d.id: (d, None) for d in await self.store.aget_by_ids(list(ids)) if d.id}
        return await asyncio.to_thread(self.read, ids)


class _InMemoryReader(StoreReader):
    returns_vectors = True

    def read(self, ids: Sequence[str]) -> Found:
        rows = self.store.store  # type: ignore[attr-defined]
        return {
            i: (
                Document(id=i, page_content=rows[i]["text"], metadata=rows[i]["metadata"]),
                rows[i]["vector"],
            )
            for i in ids
            if i in rows
        }

    async def aread(self, ids: Sequence[str]) -> Found:
        return self.read(ids)  # a dict lookup: nothing to wait for


class _FaissReader(StoreReader):
    returns_vectors = True

    def __init__(self, store: VectorStore) -> None:
        super().__init__(store)
        self._mapped = -1
        self._row_of: dict[str, int] = {}

    def read(self, ids: Sequence[str]) -> Found:
        mapping: dict[int, str] = self.store.index_to_docstore_id  # type: ignore[attr-defined]
        if len(mapping) != self._mapped:  # documents were added or deleted since the last read
            self._row_of = {chunk_id: row for row, chunk_id in mapping.items()}
            self._mapped = len(mapping)
        found: Found = {}
        for chunk_id in ids:
            document = self.store.docstore.search(chunk_id)  # type: ignore[attr-defined]
            if isinstance(document, Document) and chunk_id in self._row_of:
                vector = self.store.index.reconstruct(self._row_of[chunk_id])  # type: ignore[attr-defined]
                found[chunk_id] = (Document(id=chunk_id, page_content=document.page_content,
                                            metadata=document.metadata), vector)  # fmt: skip
        return found

    async def aread(self, ids: Sequence[str]) -> Found:
        return self.read(ids)  # in-process index: nothing to wait for


def _vector(value: Any) -> Any:
    """A stored vector as the store returned it; pgvector may hand back its text form."""
    if isinstance(value, str):
        return np.asarray(json.loads(value), dtype=np.float64)
    return value


def _from_get(result: dict[str, Any]) -> Found:
    """Documents and vectors from a Chroma-style ``get`` result (ids, documents, metadatas...)."""
    vectors = result.get("embeddings")
    return {
        str(chunk_id): (
            Document(id=str(chunk_id), page_content=text or "", metadata=metadata or {}),
            _vector(vectors[n]) if vectors is not None else None,
        )
        for n, (chunk_id, text, metadata) in enumerate(
            zip(result["ids"], result["documents"], result["metadatas"], strict=True)
        )
    }


_GET_INCLUDE = ["documents", "metadatas", "embeddings"]


class _GetReader(StoreReader):
    """Stores whose ``get(ids, include=[...])`` returns vectors: PGVectorStore and Chroma."""

    returns_vectors = True

    def read(self, ids: Sequence[str]) -> Found:
        return _from_get(self.store.get(ids=list(ids), include=_GET_INCLUDE))  # type: ignore[attr-defined]

    async def aread(self, ids: Sequence[str]) -> Found:
        aget = getattr(self.store, "aget", None)
        if aget is None:
            return await asyncio.to_thread(self.read, ids)
        return _from_get(await aget(ids=list(ids), include=_GET_INCLUDE))


class _QdrantReader(StoreReader):
    returns_vectors = True

    def read(self, ids: Sequence[str]) -> Found:
        store: Any = self.store
        points = store.client.retrieve(
            store.collection_name, list(ids), with_payload=True, with_vectors=True
        )
        found: Found = {}
        for point in points:
            payload = point.payload or {}
            vector = point.vector
            if isinstance(vector, dict):  # named vectors: the store's own
                vector = vector.get(store.vector_name)
            document = Document(
                id=str(point.id),
                page_content=payload.get(store.content_payload_key) or "",
                metadata=payload.get(store.metadata_payload_key) or {},
            )
            found[str(point.id)] = (document, vector)
        return found


def reader_for(store: VectorStore) -> StoreReader:
    """Return the reader for ``store``'s type: the most direct public way to its vectors."""
    if type(store) is InMemoryVectorStore:  # a subclass may keep its rows elsewhere
        return _InMemoryReader(store)
    kinds = {cls.__module__.split(".")[0] + "." + cls.__name__ for cls in type(store).__mro__}
    if "langchain_community.FAISS" in kinds:
        return _FaissReader(store)
    if kinds & {"langchain_postgres.PGVectorStore", "langchain_chroma.Chroma"}:
        return _GetReader(store)
    if "langchain_qdrant.QdrantVectorStore" in kinds:
        return _QdrantReader(store)
    return StoreReader(store)
