"""SCAR core: Semantic Continuity-Aware Retrieval as plain numpy, free of any framework.

The one entry point most code needs is :func:`expand`::

    from scar_core import expand
    result = expand(query_vector, seed_ids, neighbors, vectors, lambda_=0.1, gamma=0.8, window=1)
    result.chunk_ids   # seeds plus accepted neighbours
    result.decisions   # S, threshold and b of every neighbour considered
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from scar_core.baselines import (
    CrossEncoderReranker,
    available_offline_cross_encoder,
    parent_retrieval,
    static_window,
    top_k,
)
from scar_core.cache import CachedEmbedder, VectorCache
from scar_core.embedders.base import Embedder
from scar_core.embedders.openai import OpenAIEmbedder
from scar_core.embedders.sentence_transformers import SentenceTransformerEmbedder
from scar_core.errors import (
    CacheCorruptedError,
    DataFormatError,
    EmbeddingError,
    InvalidSettingsError,
    InvalidTextError,
    InvalidVectorError,
    LinkError,
    MissingDependencyError,
    MissingVectorError,
    NeighborFetchError,
    ScarError,
)
from scar_core.graph import LinkedChunk, NeighborGraph, chunk_id_for, link_sequence
from scar_core.policy import (
    Decision,
    ExpansionResult,
    ScarPolicy,
    SelectedChunk,
    SkippedNeighbor,
    expand,
    expand_batch,
)
from scar_core.scoring import expansion_scores
from scar_core.settings import ScarSettings
from scar_core.vectors import InMemoryVectors, VectorLookup

try:
    __version__ = version("scar-retrieval")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0"

__all__ = [
    "CacheCorruptedError",
    "CachedEmbedder",
    "CrossEncoderReranker",
    "DataFormatError",
    "Decision",
    "Embedder",
    "EmbeddingError",
    "ExpansionResult",
    "InMemoryVectors",
    "InvalidSettingsError",
    "InvalidTextError",
    "InvalidVectorError",
    "LinkError",
    "LinkedChunk",
    "MissingDependencyError",
    "MissingVectorError",
    "NeighborFetchError",
    "NeighborGraph",
    "OpenAIEmbedder",
    "ScarError",
    "ScarPolicy",
    "ScarSettings",
    "SelectedChunk",
    "SentenceTransformerEmbedder",
    "SkippedNeighbor",
    "VectorCache",
    "VectorLookup",
    "__version__",
    "available_offline_cross_encoder",
    "chunk_id_for",
    "expand",
    "expand_batch",
    "expansion_scores",
    "link_sequence",
    "parent_retrieval",
    "static_window",
    "top_k",
]
