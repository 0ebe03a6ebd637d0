"""Test doubles and builders shared by the LlamaIndex adapter tests.

* ``TableEmbedding``: a LlamaIndex embed model whose vectors the test chooses, counting its calls.
* ``FaissNodeStore``: a real FAISS ``IndexFlatL2`` behind LlamaIndex's vector-store interface that
  keeps text (``stores_text=True``) and answers ``get_nodes`` with embeddings, like pgvector; its
  query scores are raw L2 distances, like llama-index-vector-stores-faiss.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import faiss
import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import (
    BaseNode,
    NodeRelationship,
    NodeWithScore,
    RelatedNodeInfo,
    TextNode,
)
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryResult,
)


class TableEmbedding(BaseEmbedding):
    """Embeds by table lookup: ``texts`` for documents, ``queries`` for queries.

    An unknown text raises ``KeyError``, so an unexpected embedding call cannot pass unnoticed.
    ``embedded_texts`` lists every document text embedded, ``embedded_queries`` every query;
    ``threads`` records the thread of each call.
    """

    _texts: dict[str, list[float]] = PrivateAttr()
    _queries: dict[str, list[float]] = PrivateAttr()
    _lock: threading.Lock = PrivateAttr()
    _embedded_texts: list[str] = PrivateAttr()
    _embedded_queries: list[str] = PrivateAttr()
    _threads: list[int] = PrivateAttr()

    def __init__(
        self,
        texts: Mapping[str, Sequence[float]],
        queries: Mapping[str, Sequence[float]] | None = None,
        model_name: str = "table",
    ) -> None:
        super().__init__(model_name=model_name, embed_batch_size=64)
        self._texts = {key: [float(v) for v in value] for key, value in texts.items()}
        self._queries = {key: [float(v) for v in value] for key, value in (queries or {}).items()}
        self._lock = threading.Lock()
        self._embedded_texts = []
        self._embedded_queries = []
        self._threads = []

    @property
    def embedded_texts(self) -> list[str]:
        return self._embedded_texts

    @property
    def embedded_queries(self) -> list[str]:
        return self._embedded_queries

    @property
    def threads(self) -> list[int]:
        return self._threads

    @classmethod
    def class_name(cls) -> str:
        return "TableEmbedding"

    def _record(self, bucket: list[str], items: Sequence[str]) -> None:
        with self._lock:
            bucket.extend(items)
            self._threads.append(threading.get_ident())

    def _get_query_embedding(self, query: str) -> list[float]:
        self._record(self.embedded_queries, [query])
        return list(self._queries[query])

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        self._record(self.embedded_texts, [text])
        return list(self._texts[text])

    async def _aget_text_embedding(self, text: str) -> list[float]:
        return self._get_text_embedding(text)

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        self._record(self.embedded_texts, texts)
        return [list(self._texts[text]) for text in texts]

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._get_text_embeddings(texts)


class FaissNodeStore(BasePydanticVectorStore):
    """An in-memory vector store over ``faiss.IndexFlatL2`` that keeps nodes and text."""

    stores_text: bool = True
    _index: Any = PrivateAttr()
    _nodes: dict[str, BaseNode] = PrivateAttr()
    _row_ids: list[str] = PrivateAttr()
    _get_nodes_calls: list[list[str]] = PrivateAttr()

    def __init__(self, dimension: int) -> None:
        super().__init__()
        self._index = faiss.IndexFlatL2(dimension)
        self._nodes = {}
        self._row_ids = []
        self._get_nodes_calls = []

    @property
    def get_nodes_calls(self) -> list[list[str]]:
        """The id list of every get_nodes call, in order."""
        return self._get_nodes_calls

    @classmethod
    def class_name(cls) -> str:
        return "FaissNodeStore"

    @property
    def client(self) -> Any:
        return self._index

    def add(self, nodes: Sequence[BaseNode], **add_kwargs: Any) -> list[str]:
        matrix = np.asarray([node.get_embedding() for node in nodes], dtype=np.float32)
        self._index.add(matrix)
        for node in nodes:
            self._nodes[node.node_id] = node.model_copy()
            self._row_ids.append(node.node_id)
        return [node.node_id for node in nodes]

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        raise NotImplementedError("not needed by these tests")

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        vector = np.asarray([query.query_embedding], dtype=np.float32)
        distances, rows = self._index.search(vector, query.similarity_top_k)
        found = [
            (float(d), self._row_ids[r])
            for d, r in zip(distances[0], rows[0], strict=True)
            if r >= 0
        ]
        # Like pgvector's query results: nodes without their embeddings.
        nodes = [
            self._nodes[node_id].model_copy(update={"embedding": None}) for _, node_id in found
        ]
        return VectorStoreQueryResult(
            nodes=nodes,
            similarities=[distance for distance, _ in found],
            ids=[node_id for _, node_id in found],
        )

    def get_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None
    ) -> list[BaseNode]:
        assert node_ids, "an empty id list would return every node"
        self._get_nodes_calls.append(list(node_ids))
        return [self._nodes[i].model_copy() for i in node_ids if i in self._nodes]

    async def aget_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None
    ) -> list[BaseNode]:
        return self.get_nodes(node_ids, filters)


def linked_nodes(
    texts: Sequence[str],
    *,
    document_id: str = "doc",
    prefix: str = "n",
    vectors: Sequence[Sequence[float]] | None = None,
) -> list[TextNode]:
    """Return one TextNode per text, ids ``{prefix}0...``, linked PREVIOUS/NEXT like a parser."""
    nodes = [
        TextNode(
            id_=f"{prefix}{position}",
            text=text,
            embedding=list(vectors[position]) if vectors is not None else None,
        )
        for position, text in enumerate(texts)
    ]
    for position, node in enumerate(nodes):
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=document_id)
        if position > 0:
            node.relationships[NodeRelationship.PREVIOUS] = RelatedNodeInfo(
                node_id=nodes[position - 1].node_id
            )
        if position + 1 < len(nodes):
            node.relationships[NodeRelationship.NEXT] = RelatedNodeInfo(
                node_id=nodes[position + 1].node_id
            )
    return nodes


def docstore_of(nodes: Sequence[BaseNode]) -> SimpleDocumentStore:
    docstore = SimpleDocumentStore()
    docstore.add_documents(list(nodes))
    return docstore


def scored(nodes: Sequence[BaseNode], scores: Sequence[float]) -> list[NodeWithScore]:
    return [
        NodeWithScore(node=node, score=score) for node, score in zip(nodes, scores, strict=True)
    ]


def ids_and_scores(output: Sequence[NodeWithScore]) -> list[tuple[str, float | None]]:
    return [(item.node.node_id, item.score) for item in output]
