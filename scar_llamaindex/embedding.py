"""A LlamaIndex embed model over SCAR's embedders: the bundled MiniLM by default, offline."""

from __future__ import annotations

import asyncio
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr

from scar_core.embedders import Embedder, default_embedder

__all__ = ["SCAREmbedding"]


class SCAREmbedding(BaseEmbedding):
    """Use a :mod:`scar_core.embedders` embedder wherever LlamaIndex wants an embed model.

    Args:
        embedder: The embedder; ``None`` means the bundled all-MiniLM-L6-v2 (needs the
            ``sentence-transformers`` extra, no network).
        **kwargs: Passed to ``BaseEmbedding`` (e.g. ``embed_batch_size``).

    Examples:
        ```python
        from llama_index.core import VectorStoreIndex
        from scar_llamaindex import SCAREmbedding

        index = VectorStoreIndex(nodes, embed_model=SCAREmbedding())
        ```
    """

    _embedder: Embedder = PrivateAttr()

    def __init__(self, embedder: Embedder | None = None, **kwargs: Any) -> None:
        embedder = embedder if embedder is not None else default_embedder()
        super().__init__(model_name=embedder.model_name, **kwargs)
        self._embedder = embedder

    @classmethod
    def class_name(cls) -> str:
        """Return the class name."""
        return "SCAREmbedding"

    def _get_query_embedding(self, query: str) -> list[float]:
        return [float(x) for x in self._embedder.embed_query(query)]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return await asyncio.to_thread(self._get_query_embedding, query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._get_text_embeddings([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return [[float(x) for x in row] for row in self._embedder.embed_documents(texts)]
