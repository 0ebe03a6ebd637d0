"""Deterministic embeddings, linked nodes and counting stores: the LlamaIndex and pgvector tests."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
from llama_index.core import Document, StorageContext, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import (
    NodeRelationship,
    NodeWithScore,
    RelatedNodeInfo,
    TextNode,
)
from llama_index.core.storage.docstore import SimpleDocumentStore

QUERY = "What does part 2 of the topic3 document cover? word3x2 word3x3"


class WordHashEmbedding(BaseEmbedding):
    """Each word adds 1 to a hashed dimension, so texts sharing words have a high cosine.

    ``table`` pins chosen texts to chosen vectors. Counts the texts and queries it embeds.
    """

    size: int = 64
    _table: dict[str, list[float]] = PrivateAttr(default_factory=dict)
    _texts: int = PrivateAttr(default=0)
    _queries: int = PrivateAttr(default=0)

    def __init__(self, table: dict[str, list[float]] | None = None, **kwargs: Any) -> None:
        super().__init__(model_name=kwargs.pop("model_name", "word-hash"), **kwargs)
        self._table = dict(table or {})

    @property
    def texts_embedded(self) -> int:
        return self._texts

    @property
    def queries_embedded(self) -> int:
        return self._queries

    def vector(self, text: str) -> list[float]:
        if text in self._table:
            return list(self._table[text])
        vector = np.zeros(self.size)
        for word in re.findall(r"\w+", text.lower()):
            vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % self.size] += 1.0
        vector[0] += 0.01  # never a zero vector
        return vector.tolist()

    def _get_text_embedding(self, text: str) -> list[float]:
        self._texts += 1
        return self.vector(text)

    def _get_query_embedding(self, query: str) -> list[float]:
        self._queries += 1
        return self.vector(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)


class CountingDocstore(SimpleDocumentStore):
    """A SimpleDocumentStore that counts its batched reads (sync and async)."""

    reads: int = 0

    def get_nodes(self, node_ids: list[str], raise_error: bool = True) -> list[Any]:
        self.reads += 1
        return super().get_nodes(node_ids, raise_error)

    async def aget_nodes(self, node_ids: list[str], raise_error: bool = True) -> list[Any]:
        self.reads += 1
        return await super().aget_nodes(node_ids, raise_error)


class BrokenDocstore(SimpleDocumentStore):
    """A SimpleDocumentStore whose reads by id fail, as a lost database connection would."""

    def get_nodes(self, node_ids: list[str], raise_error: bool = True) -> list[Any]:
        raise ConnectionError("connection reset by peer")

    async def aget_nodes(self, node_ids: list[str], raise_error: bool = True) -> list[Any]:
        raise ConnectionError("connection reset by peer")


def angle(degrees: float) -> list[float]:
    """A unit 2-D vector at ``degrees`` from the query's direction ``[1, 0]``."""
    return [math.cos(math.radians(degrees)), math.sin(math.radians(degrees))]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def linked_nodes(
    document: str, vectors: Sequence[Sequence[float] | None], *, embedded: bool = True
) -> list[TextNode]:
    """Nodes ``{document}0..`` of one document, linked as LlamaIndex node parsers link them."""
    nodes = []
    for i, vector in enumerate(vectors):
        relationships = {NodeRelationship.SOURCE: RelatedNodeInfo(node_id=document)}
        if i > 0:
            relationships[NodeRelationship.PREVIOUS] = RelatedNodeInfo(node_id=f"{document}{i - 1}")
        if i < len(vectors) - 1:
            relationships[NodeRelationship.NEXT] = RelatedNodeInfo(node_id=f"{document}{i + 1}")
        nodes.append(
            TextNode(
                id_=f"{document}{i}",
                text=f"{document} chunk {i}",
                embedding=list(vector) if embedded and vector is not None else None,
                relationships=relationships,
            )
        )
    return nodes


def docstore_of(nodes: Sequence[TextNode], store: SimpleDocumentStore | None = None) -> Any:
    store = store if store is not None else SimpleDocumentStore()
    store.add_documents(list(nodes))
    return store


def scored(nodes: Sequence[TextNode], scores: Sequence[float | None]) -> list[NodeWithScore]:
    return [NodeWithScore(node=n, score=s) for n, s in zip(nodes, scores, strict=True)]


def ids_and_scores(output: Sequence[NodeWithScore]) -> list[tuple[str, float | None]]:
    return [(n.node.node_id, n.score) for n in output]


def documents(count: int = 6, length: int = 6) -> list[Document]:
    """``count`` documents of ``length`` parts; part i of document d talks of topic d, part i."""
    return [
        Document(
            text=" ".join(
                f"Document {d} is about topic{d}. Part {i} covers word{d}x{i} and word{d}x{i + 1}."
                for i in range(length)
            ),
            id_=f"doc{d}",
        )
        for d in range(count)
    ]


def hash_index(
    embed_model: WordHashEmbedding | None = None, docstore: SimpleDocumentStore | None = None
) -> VectorStoreIndex:
    """The default index (SimpleDocumentStore + SimpleVectorStore), one node per part."""
    storage = StorageContext.from_defaults(docstore=docstore or SimpleDocumentStore())
    return VectorStoreIndex.from_documents(
        documents(),
        storage_context=storage,
        embed_model=embed_model or WordHashEmbedding(),
        transformations=[splitter()],
    )


def splitter() -> SentenceSplitter:
    """One node per part (it prints that 12 tokens is small: harmless here)."""
    return SentenceSplitter(chunk_size=12, chunk_overlap=0, tokenizer=str.split)
