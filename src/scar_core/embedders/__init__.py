"""Embedding backends behind one small protocol, :class:`Embedder`.

Importing this package loads nothing heavy: each backend is imported when first named, and each
backend imports its own library (torch, openai) only when first used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scar_core.cache import CachedEmbedder
    from scar_core.embedders.base import Embedder
    from scar_core.embedders.openai import OpenAIEmbedder
    from scar_core.embedders.sentence_transformers import SentenceTransformerEmbedder

__all__ = ["CachedEmbedder", "Embedder", "OpenAIEmbedder", "SentenceTransformerEmbedder"]

_HOMES = {
    "CachedEmbedder": "scar_core.cache",
    "Embedder": "scar_core.embedders.base",
    "OpenAIEmbedder": "scar_core.embedders.openai",
    "SentenceTransformerEmbedder": "scar_core.embedders.sentence_transformers",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
