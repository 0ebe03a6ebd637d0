"""SCAR for LangChain: a retriever that adds a chunk's neighbours only when they continue it."""

from __future__ import annotations

__all__: list[str] = []
