"""Embedding fallback for nodes whose vectors no store holds, behind a content-keyed cache."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, MetadataMode

from scar_core.vectors import InMemoryVectors
from scar_llamaindex.embedding import ScarEmbedding

__all__ = ["TextVectorCache", "cache_model_key", "embed_text_of"]


class TextVectorCache(Protocol):
    """A ``(model, text) -> vector`` cache, such as :class:`scar_core.cache.VectorCache`.

    Implementations must be safe to call from several threads at once.
    """

    def get_many(
        self, model: str, texts: Sequence[str]
    ) -> Sequence[npt.NDArray[np.floating] | None]:
        """Return the cached vector of each text, or ``None`` for a miss, in order."""
        ...

    def put_many(self, model: str, texts: Sequence[str], vectors: npt.ArrayLike) -> None:
        """Store one vector per text (a ``(len(texts), d)`` array)."""
        ...


class MemoryTextVectorCache:
    """A thread-safe in-memory :class:`TextVectorCache` that lives as long as the postprocessor."""

    def __init__(self) -> None:
        self._vectors = InMemoryVectors()

    @staticmethod
    def _key(model: str, text: str) -> str:
        # The model name and the text are separated by a byte no model name contains.
        return f"{model}\x1f{text}"

    def get_many(
        self, model: str, texts: Sequence[str]
    ) -> Sequence[npt.NDArray[np.floating] | None]:
        """Return the cached vector of each text, or ``None`` for a miss, in order."""
        keys = [self._key(model, text) for text in texts]
        found = self._vectors.get_vectors(keys)
        return [found.get(key) for key in keys]

    def put_many(self, model: str, texts: Sequence[str], vectors: npt.ArrayLike) -> None:
        """Store one vector per text as float32; rows with NaN or infinite values are not kept."""
        matrix = np.asarray(vectors, dtype=np.float32)
        self._vectors.update(
            (self._key(model, text), row)
            for text, row in zip(texts, matrix, strict=True)
            if np.isfinite(row).all()
        )

    def __len__(self) -> int:
        return len(self._vectors)


def cache_model_key(embed_model: BaseEmbedding) -> str:
    """Return the cache key of an embed model's document vectors.

    A :class:`~scar_llamaindex.ScarEmbedding` uses its scar_core embedder's name, the key
    :class:`scar_core.cache.CachedEmbedder` uses, so one :class:`scar_core.cache.VectorCache` can
    serve both. Any other model is keyed by its LlamaIndex class and model name.
    """
    if isinstance(embed_model, ScarEmbedding):
        return embed_model.embedder.model_name
    return f"llamaindex/{embed_model.class_name()}/{embed_model.model_name}"


def embed_text_of(node: BaseNode) -> str:
    """Return the text LlamaIndex embeds for a node at ingestion (content plus embed metadata)."""
    return node.get_content(metadata_mode=MetadataMode.EMBED)


def missing_texts(
    cache: TextVectorCache, model: str, nodes: Sequence[BaseNode]
) -> tuple[dict[str, npt.ArrayLike], dict[str, list[str]]]:
    """Split nodes into cache hits (``id -> vector``) and misses (``text -> ids``)."""
    texts = [embed_text_of(node) for node in nodes]
    found = cache.get_many(model, texts)
    hits: dict[str, npt.ArrayLike] = {}
    misses: dict[str, list[str]] = {}
    for node, text, vector in zip(nodes, texts, found, strict=True):
        if vector is not None:
            hits[node.node_id] = vector
        else:
            misses.setdefault(text, []).append(node.node_id)
    return hits, misses


def spread(
    misses: dict[str, list[str]], vectors: npt.NDArray[np.float32]
) -> dict[str, npt.ArrayLike]:
    """Give each missed node the vector computed for its text."""
    result: dict[str, npt.ArrayLike] = {}
    for ids, vector in zip(misses.values(), vectors, strict=True):
        for node_id in ids:
            result[node_id] = vector
    return result
