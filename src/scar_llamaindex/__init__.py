"""SCAR for LlamaIndex: a node postprocessor that adds neighbours only when they continue a node."""

from __future__ import annotations

__all__: list[str] = []
