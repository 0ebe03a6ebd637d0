"""Fixtures of the demo tests: a deterministic stand-in embedder and an independent chunker."""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Sequence

import numpy as np
import pytest

_WORD = re.compile(r"[a-z0-9]+")


class HashingEmbedder:
    """Bag of words hashed into 64 buckets: deterministic, instant, and similar texts score high.

    A test double for the model, so the demo's own logic (retrieval, expansion, scoring) can be
    checked quickly and exactly. It implements :class:`scar_core.embedders.base.Embedder`.
    """

    dimension = 64

    @property
    def model_name(self) -> str:
        return "test:hashing-bag-of-words-64"

    def _vector(self, text: str) -> np.ndarray:
        vector = np.zeros(self.dimension, dtype=np.float32)
        for word in _WORD.findall(text.lower()):
            bucket = int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "little")
            vector[bucket % self.dimension] += 1.0
        vector[0] += 0.01  # no all-zero vector, even for a text without words
        return vector

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self._vector(text) for text in texts])

    def embed_query(self, text: str) -> np.ndarray:
        return self._vector(text)

    async def aembed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return await asyncio.to_thread(self.embed_documents, texts)

    async def aembed_query(self, text: str) -> np.ndarray:
        return await asyncio.to_thread(self.embed_query, text)


def reference_chunks(text: str, chunk_size: int) -> list[tuple[int, int]]:
    """``(start, end)`` of every chunk, from LangChain's splitter without start offsets.

    Offsets are recovered by searching each chunk's text forward from the previous chunk's end,
    independently of ``add_start_index``.
    """
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    pieces = RecursiveCharacterTextSplitter(chunk_size=chunk_size, chunk_overlap=0).split_text(text)
    ranges: list[tuple[int, int]] = []
    cursor = 0
    for piece in pieces:
        start = text.index(piece, cursor)
        ranges.append((start, start + len(piece)))
        cursor = start + len(piece)
    return ranges


@pytest.fixture
def hashing_embedder() -> HashingEmbedder:
    return HashingEmbedder()


@pytest.fixture
def chunk_ranges():
    """The independent chunker :func:`reference_chunks`."""
    return reference_chunks
