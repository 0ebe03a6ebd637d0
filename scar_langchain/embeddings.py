"""LangChain ``Embeddings`` over SCAR's embedders: the bundled MiniLM by default, offline."""

from __future__ import annotations

from langchain_core.embeddings import Embeddings

from scar_core.embedders import Embedder, default_embedder

__all__ = ["SCAREmbeddings"]


class SCAREmbeddings(Embeddings):
    """Use a :mod:`scar_core.embedders` embedder wherever LangChain wants ``Embeddings``.

    Args:
        embedder: The embedder; ``None`` means the bundled all-MiniLM-L6-v2 (needs the
            ``sentence-transformers`` extra, no network).

    Example:
        >>> store = InMemoryVectorStore(SCAREmbeddings())  # doctest: +SKIP
    """

    def __init__(self, embedder: Embedder | None = None) -> None:
        self.embedder = embedder or default_embedder()
        self.model = self.embedder.model_name

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed chunk texts."""
        return [row.tolist() for row in self.embedder.embed_documents(texts)]

    def embed_query(self, text: str) -> list[float]:
        """Embed a query."""
        return list(self.embedder.embed_query(text).tolist())
