"""SCAR core: Semantic Continuity-Aware Retrieval as plain numpy, free of any framework.

Most code needs :class:`QueryDriver` (one query, reading what it asks for: what the adapters
use) or :func:`select` (everything in memory)::

    from scar_core import BudgetSettings, Chunk, select
    selection = select(query_vector, hit_ids, chunks_by_id, BudgetSettings(k=4))
    selection.chunk_ids    # exactly 4 ids, passage by passage
    selection.decisions    # S, threshold and b of every neighbour that was considered
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from scar_core._driver import QueryDriver, VectorMemory, distinct_ids
from scar_core._errors import (
    DataFormatError,
    EmbeddingError,
    InvalidSettingsError,
    InvalidVectorError,
    MissingDependencyError,
    MissingQueryError,
    NeighborFetchError,
    ScarError,
)
from scar_core._links import ChunkLinks, chunk_id_for, link_sequence
from scar_core._passages import stitch
from scar_core._scoring import boundary_penalty, expansion_score, paper_threshold
from scar_core._selection import (
    Chunk,
    Decision,
    Selected,
    Selection,
    budget_select,
    paper_expand,
    select,
)
from scar_core._settings import BudgetSettings, PaperSettings, ScarSettings, default_keep

try:
    __version__ = version("scar-retrieval")
except PackageNotFoundError:  # pragma: no cover - a source tree without install
    __version__ = "0.0.0"

__all__ = [
    "BudgetSettings",
    "Chunk",
    "ChunkLinks",
    "DataFormatError",
    "Decision",
    "EmbeddingError",
    "InvalidSettingsError",
    "InvalidVectorError",
    "MissingDependencyError",
    "MissingQueryError",
    "NeighborFetchError",
    "PaperSettings",
    "QueryDriver",
    "ScarError",
    "ScarSettings",
    "Selected",
    "Selection",
    "VectorMemory",
    "__version__",
    "boundary_penalty",
    "budget_select",
    "chunk_id_for",
    "default_keep",
    "distinct_ids",
    "expansion_score",
    "link_sequence",
    "paper_expand",
    "paper_threshold",
    "select",
    "stitch",
]
