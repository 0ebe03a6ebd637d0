"""Where chunk vectors come from, so that neighbours are not re-embedded on every query.

SCAR computes ``cos(q, c)``, ``cos(q, n)`` and ``cos(c, n)`` from vectors, never from a store's
scores. A :class:`NeighborVectorSource` supplies those vectors, in order of preference:

1. read them from the store that already holds them (:class:`InMemoryStoreVectors`,
   :class:`FaissStoreVectors`, and for a ``PGVectorStore`` :class:`~scar_langchain.PGVectorChunks`
   or, through its public API, :class:`~scar_langchain.PGVectorStoreVectors`);
2. otherwise compute them with an ``Embeddings`` model (:class:`EmbeddingVectors`), ideally one
   behind a cache (LangChain's ``CacheBackedEmbeddings``, or :class:`ScarEmbeddings` over
   ``scar_core``'s ``CachedEmbedder``) so each chunk is embedded once.

:class:`FallbackVectors` chains the two: the store first, the model for whatever it lacks.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore

__all__ = [
    "EmbeddingVectors",
    "FaissStoreVectors",
    "FallbackVectors",
    "InMemoryStoreVectors",
    "NeighborVectorSource",
    "default_vector_source",
    "store_vector_source",
]

logger = logging.getLogger(__name__)

FloatVector = npt.NDArray[np.float64]


@runtime_checkable
class NeighborVectorSource(Protocol):
    """Supplies the vectors of chunks (seeds and neighbours alike) in one call per batch.

    Implementations return vectors only for the chunks they can; a chunk left out has no vector,
    and SCAR skips it as a neighbour (a seed without one is an error).
    """

    def vectors_for(self, chunks: Mapping[str, Document]) -> dict[str, FloatVector]:
        """Return ``chunk id -> vector`` for the chunks in ``chunks`` (``chunk id -> Document``)."""
        ...

    async def avectors_for(self, chunks: Mapping[str, Document]) -> dict[str, FloatVector]:
        """Async form of :meth:`vectors_for`."""
        ...


def _as_vector(value: Any) -> FloatVector:
    return np.asarray(value, dtype=np.float64)


class InMemoryStoreVectors:
    """Reads the vectors an ``InMemoryVectorStore`` already holds (``store.store[id]["vector"]``).

    No embedding call is made; a chunk absent from the store is left out.

    Args:
        vectorstore: The store the chunks were added to.
    """

    def __init__(self, vectorstore: InMemoryVectorStore) -> None:
        self.vectorstore = vectorstore

    def vectors_for(self, chunks: Mapping[str, Document]) -> dict[str, FloatVector]:
        """Return the stored vectors of ``chunks``."""
        table = self.vectorstore.store
        found: dict[str, FloatVector] = {}
        for chunk_id in chunks:
            entry = table.get(chunk_id)
            if entry is not None and entry.get("vector") is not None:
                found[chunk_id] = _as_vector(entry["vector"])
        return found

    async def avectors_for(self, chunks: Mapping[str, Document]) -> dict[str, FloatVector]:
        """Same as :meth:`vectors_for`: the vectors are already in memory."""
        return self.vectors_for(chunks)


class FaissStoreVectors:
    """Reads vectors back from a FAISS index (LangChain community's ``FAISS`` store).

    It relies only on the FAISS store's contract: ``store.index`` is a ``faiss.Index`` that can
    ``reconstruct`` its vectors (flat indexes can; IVF indexes after ``make_direct_map()``), and
    ``store.index_to_docstore_id`` maps index positions to document ids. When the index cannot
    reconstruct, nothing is returned and the retriever's fallback embeds instead.

    Args:
        vectorstore: The FAISS store the chunks were added to, under their chunk ids.
    """

    def __init__(self, vectorstore: Any) -> None:
        if not is_faiss_like(vectorstore):
            raise TypeError(
                f"{type(vectorstore).__name__} is not a FAISS store: it needs an `index` with "
                "`reconstruct` and an `index_to_docstore_id` mapping."
            )
        self.vectorstore = vectorstore
        self._lock = threading.Lock()
        self._position_of: dict[str, int] = {}
        self._mapping_size = -1

    def _positions(self, chunk_ids: Sequence[str]) -> dict[str, int]:
        """Map chunk ids to index positions, rebuilding the reverse map when it is stale."""
        mapping: Mapping[int, str] = self.vectorstore.index_to_docstore_id
        with self._lock:
            if self._mapping_size != len(mapping) or any(
                mapping.get(self._position_of[c]) != c for c in chunk_ids if c in self._position_of
            ):
                self._position_of = {chunk_id: position for position, chunk_id in mapping.items()}
                self._mapping_size = len(mapping)
            return {c: self._position_of[c] for c in chunk_ids if c in self._position_of}

    def vectors_for(self, chunks: Mapping[str, Document]) -> dict[str, FloatVector]:
        """Return the vectors of ``chunks`` reconstructed from the index in one batch."""
        positions = self._positions(list(chunks))
        if not positions:
            return {}
        index = self.vectorstore.index
        keys = np.fromiter(positions.values(), dtype=np.int64, count=len(positions))
        try:
            if hasattr(index, "reconstruct_batch"):
                matrix = np.asarray(index.reconstruct_batch(keys), dtype=np.float64)
            else:
                matrix = np.vstack([_as_vector(index.reconstruct(int(key))) for key in keys])
        except RuntimeError as exc:
            logger.warning(
                "the FAISS index %s cannot reconstruct vectors (%s); falling back to embedding",
                type(index).__name__,
                exc,
            )
            return {}
        return {chunk_id: matrix[row] for row, chunk_id in enumerate(positions)}

    async def avectors_for(self, chunks: Mapping[str, Document]) -> dict[str, FloatVector]:
        """Same as :meth:`vectors_for`: the index is in process memory."""
        return self.vectors_for(chunks)


class EmbeddingVectors:
    """Computes chunk vectors with an ``Embeddings`` model, one batched call per request.

    This re-embeds on every call unless the model caches. Put a cache in front:
    ``CacheBackedEmbeddings.from_bytes_store(model, InMemoryByteStore(), namespace=...)`` from
    ``langchain_classic.embeddings`` (any ``ByteStore``, such as a ``LocalFileStore``), or a
    :class:`~scar_langchain.ScarEmbeddings` over ``scar_core.embedders.CachedEmbedder``.

    Args:
        embeddings: The model that embedded the stored chunks.
    """

    def __init__(self, embeddings: Embeddings) -> None:
        self.embeddings = embeddings

    @staticmethod
    def _texts(chunks: Mapping[str, Document]) -> tuple[list[str], list[str]]:
        ids = list(chunks)
        return ids, [chunks[chunk_id].page_content for chunk_id in ids]

    def vectors_for(self, chunks: Mapping[str, Document]) -> dict[str, FloatVector]:
        """Embed the texts of ``chunks`` with ``embed_documents``."""
        if not chunks:
            return {}
        ids, texts = self._texts(chunks)
        return _pair(ids, self.embeddings.embed_documents(texts))

    async def avectors_for(self, chunks: Mapping[str, Document]) -> dict[str, FloatVector]:
        """Embed the texts of ``chunks`` with ``aembed_documents``."""
        if not chunks:
            return {}
        ids, texts = self._texts(chunks)
        return _pair(ids, await self.embeddings.aembed_documents(texts))


def _pair(ids: list[str], vectors: Sequence[Sequence[float]]) -> dict[str, FloatVector]:
    if len(vectors) != len(ids):
        raise ValueError(
            f"the embeddings model returned {len(vectors)} vectors for {len(ids)} texts."
        )
    return {chunk_id: _as_vector(vector) for chunk_id, vector in zip(ids, vectors, strict=True)}


class FallbackVectors:
    """Asks ``primary`` first and ``fallback`` only for the chunks ``primary`` left out.

    Args:
        primary: Usually the store's own vectors.
        fallback: Usually :class:`EmbeddingVectors` over a cached model.
    """

    def __init__(self, primary: NeighborVectorSource, fallback: NeighborVectorSource) -> None:
        self.primary = primary
        self.fallback = fallback

    def vectors_for(self, chunks: Mapping[str, Document]) -> dict[str, FloatVector]:
        """Return vectors from ``primary``, completed by ``fallback``."""
        found = self.primary.vectors_for(chunks)
        missing = {chunk_id: doc for chunk_id, doc in chunks.items() if chunk_id not in found}
        if missing:
            found.update(self.fallback.vectors_for(missing))
        return found

    async def avectors_for(self, chunks: Mapping[str, Document]) -> dict[str, FloatVector]:
        """Async form of :meth:`vectors_for`."""
        found = await self.primary.avectors_for(chunks)
        missing = {chunk_id: doc for chunk_id, doc in chunks.items() if chunk_id not in found}
        if missing:
            found.update(await self.fallback.avectors_for(missing))
        return found


def computes_vectors(source: NeighborVectorSource) -> bool:
    """Whether ``source`` embeds every chunk it is asked about (no stored vectors to read)."""
    if isinstance(source, FallbackVectors):
        return computes_vectors(source.primary)
    return isinstance(source, EmbeddingVectors)


def is_faiss_like(vectorstore: object) -> bool:
    """Whether ``vectorstore`` follows the FAISS store contract (``index`` + id mapping)."""
    index = getattr(vectorstore, "index", None)
    return hasattr(index, "reconstruct") and isinstance(
        getattr(vectorstore, "index_to_docstore_id", None), Mapping
    )


def store_vector_source(vectorstore: VectorStore | None) -> NeighborVectorSource | None:
    """Return a source that reads ``vectorstore``'s own vectors, or ``None`` if it cannot."""
    if isinstance(vectorstore, InMemoryVectorStore):
        return InMemoryStoreVectors(vectorstore)
    if vectorstore is not None and is_faiss_like(vectorstore):
        return FaissStoreVectors(vectorstore)
    from scar_langchain.pgvector import PGVectorStoreVectors, is_pgvector_store

    if is_pgvector_store(vectorstore):
        return PGVectorStoreVectors(vectorstore)
    return None


def default_vector_source(
    vectorstore: VectorStore | None, embeddings: Embeddings
) -> NeighborVectorSource:
    """Pick the cheapest vector source for a setup.

    The store's own vectors when it holds them (with ``embeddings`` for any chunk it lacks),
    otherwise ``embeddings`` alone.

    Args:
        vectorstore: The store searched for seeds, if any.
        embeddings: The model that embedded the stored chunks.

    Returns:
        The vector source the retriever uses when none is given.
    """
    from_store = store_vector_source(vectorstore)
    embedded = EmbeddingVectors(embeddings)
    if from_store is None:
        return embedded
    return FallbackVectors(from_store, embedded)
