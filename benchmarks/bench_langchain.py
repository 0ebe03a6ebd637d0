"""LangChain pieces shared by the benchmark scripts: an embeddings model over a benchmark corpus,
and a langchain-postgres table loaded with it."""

from __future__ import annotations

import uuid
from typing import Any

from bench_postgres import copy_rows, create_hnsw_index
from bench_support import Corpus, chunk_metadata, make_queries
from langchain_core.embeddings import Embeddings


class CorpusEmbeddings(Embeddings):
    """Returns the corpus's stored vectors by text, at once, and counts every text embedded.

    Query embedding costs nothing, so timings compare retrieval alone.

    Args:
        corpus: The corpus whose chunk texts and vectors are served.
        queries: ``query text -> vector``.
        rows_as_lists: Return chunk vectors as lists of floats; ``False`` returns the corpus's
            float32 rows themselves, which an ``InMemoryVectorStore`` keeps as they are (so that
            100k x 1536 fits in memory).
    """

    def __init__(
        self, corpus: Corpus, queries: dict[str, list[float]], *, rows_as_lists: bool = True
    ) -> None:
        self.rows = {corpus.text(row): row for row in range(corpus.size)}
        self.vectors = corpus.vectors
        self.queries = queries
        self.rows_as_lists = rows_as_lists
        self.texts_embedded = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.texts_embedded += len(texts)
        rows = [self.vectors[self.rows[text]] for text in texts]
        if self.rows_as_lists:
            return [row.tolist() for row in rows]
        return rows  # type: ignore[return-value]

    def embed_query(self, text: str) -> list[float]:
        return self.queries[text]


def load_langchain_table(server: Any, corpus: Corpus, table: str) -> tuple[Any, float]:
    """Create ``table`` the langchain-postgres way and bulk-load the corpus into it.

    Rows carry the ids, texts, vectors and link metadata that ``link_chunks`` would write.

    Returns:
        The ``PGEngine`` the table was created with, and the seconds the load took.
    """
    from langchain_postgres import PGEngine
    from psycopg.types.json import Json

    engine = PGEngine.from_connection_string(server.get_uri(driver="psycopg"))
    engine.init_vectorstore_table(table, corpus.dimension)
    rows = (
        (
            uuid.UUID(corpus.chunk_id(row)),
            corpus.text(row),
            corpus.vectors[row],
            Json(chunk_metadata(corpus, row)),
        )
        for row in range(corpus.size)
    )
    seconds = copy_rows(
        server.get_uri(),
        table,
        ["langchain_id", "content", "embedding", "langchain_metadata"],
        ["uuid", "text", "vector", "json"],
        rows,
    )
    return engine, seconds


def query_set(corpus: Corpus, count: int, name: str, seed: int = 1) -> dict[str, list[float]]:
    """``count`` queries near the corpus's chunks, each under a text ``"<name> <i>"``, in order."""
    vectors = make_queries(corpus, count, seed=seed)
    return {f"{name} {i}": vector.tolist() for i, vector in enumerate(vectors)}


def hnsw_store(
    server: Any, corpus: Corpus, table: str, queries: dict[str, list[float]]
) -> tuple[Any, CorpusEmbeddings]:
    """A ``PGVectorStore`` over ``table``, loaded with the corpus, behind an HNSW index.

    Its embeddings model answers ``queries`` (text -> vector) and counts chunk embeddings.
    """
    from langchain_postgres import PGVectorStore

    embeddings = CorpusEmbeddings(corpus, queries, rows_as_lists=False)
    engine, _ = load_langchain_table(server, corpus, table)
    built = create_hnsw_index(server.get_uri(), table)
    print(f"{corpus.size:,} rows in {table}, HNSW built in {built:.0f}s", flush=True)
    return PGVectorStore.create_sync(engine, embeddings, table), embeddings
