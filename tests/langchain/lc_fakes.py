"""Test doubles for the LangChain adapter tests: embeddings whose vectors the test controls."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping, Sequence

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

_WORD = re.compile(r"[a-z0-9]+")


class CountingEmbeddings(Embeddings):
    """Base for fakes: records every text embedded, split by call kind."""

    def __init__(self) -> None:
        self.document_calls: list[list[str]] = []
        self.query_calls: list[str] = []

    @property
    def documents_embedded(self) -> int:
        return sum(len(batch) for batch in self.document_calls)

    def vector(self, text: str) -> list[float]:
        raise NotImplementedError

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.document_calls.append(list(texts))
        return [self.vector(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        self.query_calls.append(text)
        return self.vector(text)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_documents(texts)

    async def aembed_query(self, text: str) -> list[float]:
        return self.embed_query(text)


class TableEmbeddings(CountingEmbeddings):
    """Vectors looked up by exact text; the test decides every cosine."""

    def __init__(self, table: Mapping[str, Sequence[float]]) -> None:
        super().__init__()
        self.table = {text: [float(x) for x in vector] for text, vector in table.items()}

    def vector(self, text: str) -> list[float]:
        return list(self.table[text])


class HashingEmbeddings(CountingEmbeddings):
    """A deterministic bag-of-words embedding: words hashed into ``dimension`` buckets.

    A small pseudo-random component seeded by the whole text breaks ties between texts that
    share the same words, so rankings do not depend on a store's tie order.
    """

    def __init__(self, dimension: int = 64, jitter: float = 0.01) -> None:
        super().__init__()
        self.dimension = dimension
        self.jitter = jitter

    def vector(self, text: str) -> list[float]:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
        values = [
            float(x) for x in self.jitter * np.random.default_rng(seed).random(self.dimension)
        ]
        for word in _WORD.findall(text.lower()):
            digest = hashlib.sha256(word.encode()).digest()
            values[int.from_bytes(digest[:4], "big") % self.dimension] += 1.0
        norm = math.sqrt(sum(v * v for v in values))
        return [v / norm for v in values]


def chain_documents(source: str, texts: Sequence[str]) -> list[Document]:
    """Unlinked chunks of one document, in order, as a splitter would emit them."""
    return [Document(page_content=text, metadata={"source": source}) for text in texts]
