"""Where neighbour chunks come from: a small protocol and the two LangChain implementations.

A :class:`NeighborSource` answers one batched request per walk step: "give me these chunk ids".
It may hand back vectors along with the documents when the backend returns both in one round
trip (a pgvector row holds both); whatever vectors it does not supply are then asked of the
retriever's :class:`~scar_langchain.NeighborVectorSource`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
from langchain_core.documents import Document
from langchain_core.stores import BaseStore
from langchain_core.vectorstores import VectorStore

from scar_langchain._links import DEFAULT_KEYS, ChunkMetadataKeys, read_links

__all__ = [
    "DocstoreNeighbors",
    "FetchedChunks",
    "NeighborSource",
    "SearchHits",
    "VectorSearchSource",
    "VectorStoreNeighbors",
]

FloatVector = npt.NDArray[np.floating]


@dataclass(frozen=True)
class FetchedChunks:
    """The chunks a :class:`NeighborSource` found for one request.

    Attributes:
        documents: ``chunk id -> Document`` for every requested id that exists. Ids the backend
            does not know are simply absent. Any mapping will do: one that makes each
            ``Document`` when it is first looked up (as :class:`~scar_langchain.PGVectorChunks`
            does) saves the work for the chunks a query never uses.
        vectors: ``chunk id -> vector`` for the chunks whose stored vectors came back in the
            same round trip; empty when the backend returns documents only.
    """

    documents: Mapping[str, Document]
    vectors: dict[str, FloatVector] = field(default_factory=dict)


@dataclass(frozen=True)
class SearchHits:
    """What a :class:`VectorSearchSource` returns: search hits together with their vectors.

    Attributes:
        documents: The hits, best first, as the vector store's own search returns them.
        vectors: ``chunk id -> stored vector`` of the hits.
    """

    documents: list[Document]
    vectors: Mapping[str, FloatVector]


@runtime_checkable
class VectorSearchSource(Protocol):
    """Searches the store and returns each hit's stored vector in the same round trip."""

    def search_with_vectors(self, query_vector: Sequence[float], k: int) -> SearchHits:
        """Return the ``k`` best hits for ``query_vector`` and their vectors."""
        ...

    async def asearch_with_vectors(self, query_vector: Sequence[float], k: int) -> SearchHits:
        """Async form of :meth:`search_with_vectors`."""
        ...


@runtime_checkable
class NeighborSource(Protocol):
    """Fetches chunks by id, in one batched call per request."""

    def fetch(self, chunk_ids: Sequence[str]) -> FetchedChunks:
        """Return the chunks (and, if available, their vectors) of ``chunk_ids``."""
        ...

    async def afetch(self, chunk_ids: Sequence[str]) -> FetchedChunks:
        """Async form of :meth:`fetch`, using the backend's native async API."""
        ...


def _by_requested_id(
    documents: Sequence[Document], chunk_ids: Sequence[str], keys: ChunkMetadataKeys
) -> dict[str, Document]:
    wanted = set(chunk_ids)
    found: dict[str, Document] = {}
    for document in documents:
        chunk_id = document.id if document.id in wanted else read_links(document, keys).chunk_id
        if chunk_id in wanted and chunk_id not in found:
            found[chunk_id] = document
    return found


class VectorStoreNeighbors:
    """Fetches chunks with ``VectorStore.get_by_ids`` / ``aget_by_ids``.

    Args:
        vectorstore: The store the chunks were added to, under their chunk ids.
        keys: Metadata keys, used to recognise a returned chunk whose ``Document.id`` is unset.
    """

    def __init__(self, vectorstore: VectorStore, keys: ChunkMetadataKeys = DEFAULT_KEYS) -> None:
        self.vectorstore = vectorstore
        self.keys = keys

    def fetch(self, chunk_ids: Sequence[str]) -> FetchedChunks:
        """Return the stored chunks of ``chunk_ids`` in one ``get_by_ids`` call."""
        documents = self.vectorstore.get_by_ids(list(chunk_ids))
        return FetchedChunks(_by_requested_id(documents, chunk_ids, self.keys))

    async def afetch(self, chunk_ids: Sequence[str]) -> FetchedChunks:
        """Return the stored chunks of ``chunk_ids`` in one ``aget_by_ids`` call."""
        documents = await self.vectorstore.aget_by_ids(list(chunk_ids))
        return FetchedChunks(_by_requested_id(documents, chunk_ids, self.keys))


class DocstoreNeighbors:
    """Fetches chunks from a key-value store (``BaseStore[str, Document]``) with ``mget``.

    Args:
        docstore: A store holding each chunk under its chunk id, for example LangChain's
            ``InMemoryStore`` or a ``create_kv_docstore`` over a ``LocalFileStore``.
    """

    def __init__(self, docstore: BaseStore[str, Document]) -> None:
        self.docstore = docstore

    def fetch(self, chunk_ids: Sequence[str]) -> FetchedChunks:
        """Return the stored chunks of ``chunk_ids`` in one ``mget`` call."""
        ids = list(chunk_ids)
        return FetchedChunks(_keyed(ids, self.docstore.mget(ids)))

    async def afetch(self, chunk_ids: Sequence[str]) -> FetchedChunks:
        """Return the stored chunks of ``chunk_ids`` in one ``amget`` call."""
        ids = list(chunk_ids)
        return FetchedChunks(_keyed(ids, await self.docstore.amget(ids)))


def _keyed(chunk_ids: Sequence[str], values: Sequence[Document | None]) -> dict[str, Document]:
    found: dict[str, Document] = {}
    for chunk_id, value in zip(chunk_ids, values, strict=False):
        if isinstance(value, Document):
            found[chunk_id] = (
                value if value.id == chunk_id else value.model_copy(update={"id": chunk_id})
            )
    return found
