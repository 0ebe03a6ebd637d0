"""SCAR for LlamaIndex: a node postprocessor that adds neighbours only when they continue a node.

Usage::

    from scar_llamaindex import SCARNodePostprocessor

    postprocessor = SCARNodePostprocessor.from_index(index)  # budget mode: 10 nodes
    # Retrieve about k (3) nodes: every one is kept, and neighbours fill the budget.
    engine = index.as_query_engine(similarity_top_k=3, node_postprocessors=[postprocessor])

    paper = SCARNodePostprocessor.from_index(index, budget=None)  # the paper's rule, exactly
"""

from __future__ import annotations

from scar_core.errors import missing_dependency

try:
    import llama_index.core  # noqa: F401 - checked here so the hint names the extra
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise missing_dependency("llama_index.core", "llamaindex") from error

from scar_llamaindex._output import TRACE_METADATA_KEYS
from scar_llamaindex._vectors import MemoryTextVectorCache, TextVectorCache
from scar_llamaindex.embedding import ScarEmbedding
from scar_llamaindex.pgvector import PGVectorNodeSource, create_node_id_index
from scar_llamaindex.postprocessor import OnError, SCARNodePostprocessor
from scar_llamaindex.sources import (
    FetchedNodes,
    FetchedWindow,
    NeighborSource,
    StoreNeighborSource,
    WindowNeighborSource,
    stored_embedding,
)

__all__ = [
    "TRACE_METADATA_KEYS",
    "FetchedNodes",
    "FetchedWindow",
    "MemoryTextVectorCache",
    "NeighborSource",
    "OnError",
    "PGVectorNodeSource",
    "SCARNodePostprocessor",
    "ScarEmbedding",
    "StoreNeighborSource",
    "TextVectorCache",
    "WindowNeighborSource",
    "create_node_id_index",
    "stored_embedding",
]
