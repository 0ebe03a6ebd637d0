"""Read neighbour nodes and their embeddings from LlamaIndex stores, sync or async.

One :class:`NodeReads` serves one query. It reads nodes by id through the stores' public APIs and
gives each one the vector SCAR needs:

===================================  ===========================================================
where the nodes live                 where their embeddings come from
===================================  ===========================================================
docstore + ``SimpleVectorStore``     ``vector_store.get(node_id)`` (the default index)
a vector store that keeps text       ``vector_store.get_nodes(node_ids=...)``, e.g. PGVector,
                                     Qdrant (their nodes come back with embeddings)
anything else                        the node text, embedded once through the embedding cache
===================================  ===========================================================
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, MetadataMode, NodeRelationship, RelatedNodeInfo
from llama_index.core.storage.docstore import BaseDocumentStore
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from scar_core.cache import EmbeddingCache
from scar_core.errors import NeighborFetchError
from scar_core.selection import Chunk

__all__ = ["NodeReads", "links_of", "node_store"]


def links_of(node: BaseNode) -> tuple[str | None, str | None]:
    """Return the ids of the nodes before and after ``node`` (its PREVIOUS/NEXT relationships)."""

    def linked(relationship: NodeRelationship) -> str | None:
        info = node.relationships.get(relationship)
        return info.node_id if isinstance(info, RelatedNodeInfo) and info.node_id else None

    return linked(NodeRelationship.PREVIOUS), linked(NodeRelationship.NEXT)


def node_store(
    docstore: BaseDocumentStore | None, vector_store: BasePydanticVectorStore | None
) -> BaseDocumentStore | BasePydanticVectorStore | None:
    """Return the store nodes are read from: a vector store that keeps text, else the docstore."""
    if vector_store is not None and vector_store.stores_text:
        return vector_store
    return docstore


def _own_async(store: BasePydanticVectorStore) -> bool:
    """Whether the store has its own ``aget_nodes`` (the base one blocks on the sync read)."""
    return type(store).aget_nodes is not BasePydanticVectorStore.aget_nodes


class NodeReads:
    """One query's reads: nodes by id, each with a vector, from the docstore or vector store.

    Args:
        docstore: The docstore, when nodes live there.
        vector_store: The vector store; its nodes are read when it keeps text.
        known: Nodes the query already holds (the retrieved ones); they are not read again unless
            the vector store can give the embedding they lack.
        embed_model: Called for the embed model when some node has no stored vector.
        cache: The cache that embeds each text once.
        use_async: Whether to call the store's ``aget_nodes`` on the async path.
    """

    def __init__(
        self,
        docstore: BaseDocumentStore | None,
        vector_store: BasePydanticVectorStore | None,
        known: Iterable[BaseNode],
        embed_model: Callable[[], BaseEmbedding],
        cache: Callable[[], EmbeddingCache],
        use_async: bool = True,
    ) -> None:
        self.docstore = docstore
        self.vector_store = vector_store
        self.store = node_store(docstore, vector_store)
        self.nodes: dict[str, BaseNode] = {}
        self.vectors: dict[str, Any] = {}
        self._embed_model = embed_model
        self._cache = cache
        self.use_async = use_async
        #: Texts embedded for this query because no store gave their vectors.
        self.embedded = 0
        #: Whether some node's vector had to come from its text (cached or not).
        self.fell_back = False
        #: The error of the store's ``aget_nodes``, when the sync read had to stand in for it.
        self.async_error: Exception | None = None
        self._take(known)

    # The sync and async reads: the same three steps, with the store's sync or async call.

    def read(self, ids: Sequence[str]) -> list[Chunk]:
        """Return the chunks of ``ids`` the stores hold, with vectors (ids not found are left out).

        Raises:
            NeighborFetchError: If the store fails.
        """
        wanted = self._to_read(ids)
        if wanted:
            try:
                self._take(self._sync_read(wanted))
            except Exception as error:
                raise self._fetch_error(wanted, error) from error
        if lacking := self._lacking(ids):
            self._embed(lacking)
        return self.chunks(ids)

    async def aread(self, ids: Sequence[str]) -> list[Chunk]:
        """Async :meth:`read`: ``aget_nodes`` where the store has a working one, else a thread."""
        wanted = self._to_read(ids)
        if wanted:
            try:
                self._take(await self._async_read(wanted))
            except Exception as error:
                raise self._fetch_error(wanted, error) from error
        if lacking := self._lacking(ids):
            await asyncio.to_thread(self._embed, lacking)
        return self.chunks(ids)

    # The steps both share.

    def _to_read(self, ids: Sequence[str]) -> list[str]:
        """Ids not known yet, and known ones without a vector that the vector store can give."""
        refetch = self.store is self.vector_store
        return [i for i in ids if i not in self.nodes or (refetch and i not in self.vectors)]

    def _sync_read(self, ids: list[str]) -> list[BaseNode]:
        if isinstance(self.store, BasePydanticVectorStore):
            return self.store.get_nodes(node_ids=ids)
        if self.store is None:
            return []
        return self.store.get_nodes(ids, raise_error=False)

    async def _async_read(self, ids: list[str]) -> list[BaseNode]:
        store = self.store
        if isinstance(store, BaseDocumentStore):
            return await store.aget_nodes(ids, raise_error=False)
        if isinstance(store, BasePydanticVectorStore) and self.use_async and _own_async(store):
            try:
                return await store.aget_nodes(node_ids=ids)
            except Exception as error:  # the sync read answers; the caller warns once
                self.async_error = error
        return await asyncio.to_thread(self._sync_read, ids)

    def _take(self, nodes: Iterable[BaseNode]) -> None:
        """Record nodes and the vectors they carry or the ``SimpleVectorStore`` holds."""
        for node in nodes:
            self.nodes.setdefault(node.node_id, node)
            vector = node.embedding
            if vector is None and isinstance(self.vector_store, SimpleVectorStore):
                try:
                    vector = self.vector_store.get(node.node_id)
                except KeyError:  # not in this store: embedded from its text instead
                    vector = None
            if vector is not None:
                self.vectors.setdefault(node.node_id, vector)

    def _lacking(self, ids: Sequence[str]) -> list[str]:
        return [i for i in ids if i in self.nodes and i not in self.vectors]

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
            f"{type(self.store).__name__} failed while SCAR read {len(ids)} node(s) by id "
            f"({type(error).__name__}: {error}); check that the store is reachable and holds "
            "the index's nodes."
        )
