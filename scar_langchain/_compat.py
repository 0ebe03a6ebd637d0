"""Every use SCAR makes of another library's private attributes, one function each.

Where a store offers no public way to do what SCAR needs, the private attribute is reached here
and nowhere else, and ``tests/langchain/test_compat.py`` pins each one to the version range in
``pyproject.toml``: it checks that the installed version is inside that range and that the
attribute exists and behaves as used here, so an upgrade that breaks one fails CI loudly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["chroma_collection", "chroma_max_batch_size", "faiss_filter"]


def faiss_filter(store: Any, condition: Any) -> Callable[[dict[str, Any]], bool]:
    """FAISS's own test of a chunk's metadata against a search ``filter`` (a dict or a function).

    ``FAISS._create_filter_func`` (langchain-community) is what its searches apply; a read by id
    has no public filter, and evaluating the dict form anew would drift from FAISS's semantics.
    """
    test: Callable[[dict[str, Any]], bool] = store._create_filter_func(condition)
    return test


def chroma_collection(store: Any) -> Any:
    """The ``chromadb.Collection`` behind a langchain-chroma ``Chroma`` (its ``_collection``).

    Chroma's public ``update_documents`` re-embeds the texts; the collection's ``update`` writes
    metadata alone, which is what ``link_store`` needs.
    """
    return store._collection


def chroma_max_batch_size(store: Any) -> int:
    """How many records one Chroma call may carry: its client's ``get_max_batch_size()``.

    langchain-chroma keeps the client in ``_client``, and exposes no public accessor.
    """
    size: int = store._client.get_max_batch_size()
    return size
