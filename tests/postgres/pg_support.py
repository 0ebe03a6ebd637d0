"""A synthetic corpus with controlled vectors, and embedding doubles that count their calls.

Vectors are float32 values (held as float64), so pgvector's float32 column stores them exactly and
the database path sees the very numbers the in-memory path sees.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from scar_langchain import link_chunks


@dataclass(frozen=True)
class Corpus:
    """Linked chunks of several documents, their vectors and some queries near chunks."""

    documents: list[Document]
    vectors: dict[str, list[float]]
    queries: dict[str, list[float]]
    dimension: int

    @property
    def ids(self) -> list[str]:
        return [document.id for document in self.documents if document.id is not None]

    def vector_of_text(self) -> dict[str, list[float]]:
        return {d.page_content: self.vectors[d.id] for d in self.documents if d.id is not None}


def as_float32_values(vector: np.ndarray) -> list[float]:
    return [float(x) for x in np.asarray(vector, dtype=np.float32)]


def make_corpus(
    *, documents: int = 6, chunks: int = 8, dimension: int = 16, queries: int = 8, seed: int = 7
) -> Corpus:
    """Each document is a random walk: a chunk's vector is its predecessor's plus noise, so
    neighbours are similar but not equal, and SCAR accepts some and rejects others."""
    rng = np.random.default_rng(seed)
    raw: list[Document] = []
    walks: list[np.ndarray] = []
    for doc in range(documents):
        current = rng.normal(size=dimension)
        for position in range(chunks):
            if position:
                current = current + rng.normal(scale=0.9, size=dimension)
            walks.append(current / np.linalg.norm(current))
            raw.append(
                Document(
                    page_content=f"document {doc} chunk {position} text",
                    metadata={"source": f"doc-{doc}.txt", "topic": doc % 3},
                )
            )
    linked = link_chunks(raw)
    vectors = {
        document.id: as_float32_values(vector)
        for document, vector in zip(linked, walks, strict=True)
        if document.id is not None
    }
    targets = rng.choice(len(walks), size=queries, replace=False)
    query_vectors = {
        f"query {index}": as_float32_values(walks[target] + rng.normal(scale=0.35, size=dimension))
        for index, target in enumerate(targets)
    }
    return Corpus(linked, vectors, query_vectors, dimension)


class CountingEmbeddings(Embeddings):
    """Looks vectors up by text; counts every document and query embedded."""

    def __init__(self, documents: dict[str, list[float]], queries: dict[str, list[float]]) -> None:
        self.documents = documents
        self.queries = queries
        self.documents_embedded = 0
        self.queries_embedded = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents_embedded += len(texts)
        return [list(self.documents[text]) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        self.queries_embedded += 1
        return list(self.queries[text])

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_documents(texts)

    async def aembed_query(self, text: str) -> list[float]:
        return self.embed_query(text)


def comparable(documents: Sequence[Document]) -> list[tuple[str, dict[str, object]]]:
    """Text and metadata of each output document, for exact comparison across stores."""
    return [(document.page_content, dict(document.metadata)) for document in documents]


def counting_engine(uri: str, statements: list[str]) -> Any:
    """A SQLAlchemy engine whose connections record every statement their cursors execute.

    The record is taken at the driver (a psycopg cursor class), so it sees the statements that
    go through SQLAlchemy and those sent on a pooled connection's own cursor alike.
    """
    import psycopg
    import sqlalchemy

    class CountingCursor(psycopg.Cursor[Any]):
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            statements.append(str(query))
            return super().execute(query, params, **kwargs)

    engine = sqlalchemy.create_engine(uri, connect_args={"cursor_factory": CountingCursor})
    with engine.connect():  # the dialect's first-connect queries are not the code's statements
        pass
    statements.clear()
    return engine
