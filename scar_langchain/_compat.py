"""Every use SCAR makes of another library's private attributes, one function each.

``tests/langchain/test_lc_compat.py`` pins each to the version range in ``pyproject.toml``, so an
upgrade that breaks one fails CI loudly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["chroma_collection", "chroma_max_batch_size", "faiss_filter"]


def faiss_filter(store: Any, condition: Any) -> Callable[[dict[str, Any]], bool]:
    """FAISS's own test of metadata against a search ``filter``: what its searches apply."""
    test: Callable[[dict[str, Any]], bool] = store._create_filter_func(condition)
    return test


def chroma_collection(store: Any) -> Any:
    """Chroma's collection, whose ``update`` writes metadata alone (the public one re-embeds)."""
    return store._collection


def chroma_max_batch_size(store: Any) -> int:
    """How many records one Chroma call may carry (its client has no public accessor)."""
    size: int = store._client.get_max_batch_size()
    return size
