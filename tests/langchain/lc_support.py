"""A bag-of-words embedding and a linked in-memory store, shared by the LangChain tests."""

from __future__ import annotations

import hashlib
import re

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore

from scar_langchain import link_chunks


class WordHashEmbeddings(Embeddings):
    """Each word adds 1 to a hashed dimension: texts sharing words have high cosine."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self.calls = 0
        self.texts_embedded = 0

    def _vector(self, text: str) -> list[float]:
        vector = np.zeros(self.size)
        for word in re.findall(r"\w+", text.lower()):
            vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % self.size] += 1.0
        vector[0] += 0.01  # never a zero vector
        return vector.tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        self.texts_embedded += len(texts)
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


def documents(count: int = 6, length: int = 5) -> list[Document]:
    """``count`` documents of ``length`` chunks; chunk i of document d talks of topic d, part i."""
    return [
        Document(
            f"Document {d} is about topic{d}. Part {i} covers word{d}x{i} and word{d}x{i + 1}.",
            metadata={"source": f"doc{d}.txt"},
        )
        for d in range(count)
        for i in range(length)
    ]


def linked_store(embeddings: Embeddings | None = None) -> InMemoryVectorStore:
    chunks = link_chunks(documents(), trust_order=True)
    store = InMemoryVectorStore(embeddings or WordHashEmbeddings())
    store.add_documents(chunks, ids=[c.id for c in chunks])
    return store
