"""A LangChain embeddings model over a benchmark corpus, shared by the benchmark scripts."""

from __future__ import annotations

from bench_support import Corpus
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
