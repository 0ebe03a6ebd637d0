"""Where SCAR gets chunk vectors from: a small lookup protocol and an in-memory implementation."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol, cast, runtime_checkable

import numpy as np
import numpy.typing as npt

__all__ = ["InMemoryVectors", "VectorLookup", "VectorSource", "lookup_vectors"]


@runtime_checkable
class VectorLookup(Protocol):
    """Anything that returns the vectors it knows for a batch of chunk ids.

    Implementations return only the ids they know; a missing id is simply absent from the result
    (SCAR then skips that neighbour). One call per batch keeps round trips to a store at one.
    """

    def get_vectors(self, chunk_ids: Sequence[str]) -> dict[str, npt.NDArray[np.floating]]:
        """Return ``id -> vector`` for every id in ``chunk_ids`` that has a vector."""
        ...


#: What :func:`scar_core.expand` accepts as vectors: a plain mapping or a lookup.
VectorSource = Mapping[str, npt.ArrayLike] | VectorLookup


def lookup_vectors(source: VectorSource, chunk_ids: Sequence[str]) -> dict[str, npt.ArrayLike]:
    """Fetch the vectors of ``chunk_ids`` from a mapping or a :class:`VectorLookup` in one call."""
    # The attribute test is what isinstance(source, VectorLookup) checks, at a fraction of the
    # cost of a runtime protocol check (this runs once per selection step).
    get_vectors = getattr(source, "get_vectors", None)
    if callable(get_vectors):
        return dict(get_vectors(chunk_ids))
    table = cast(Mapping[str, npt.ArrayLike], source)
    return {chunk_id: table[chunk_id] for chunk_id in chunk_ids if chunk_id in table}


class InMemoryVectors:
    """A thread-safe ``chunk id -> vector`` table that implements :class:`VectorLookup`.

    Args:
        vectors: Initial ``id -> vector`` entries.

    Example:
        >>> table = InMemoryVectors({"a": [1.0, 0.0]})
        >>> sorted(table.get_vectors(["a", "missing"]))
        ['a']
    """

    def __init__(self, vectors: Mapping[str, npt.ArrayLike] | None = None) -> None:
        self._lock = threading.Lock()
        self._vectors: dict[str, npt.NDArray[np.float32]] = {}
        if vectors:
            self.update(vectors.items())

    def update(self, items: Iterable[tuple[str, npt.ArrayLike]]) -> None:
        """Insert or replace vectors."""
        converted = [(key, np.asarray(value, dtype=np.float32)) for key, value in items]
        with self._lock:
            self._vectors.update(converted)

    def get_vectors(self, chunk_ids: Sequence[str]) -> dict[str, npt.NDArray[np.floating]]:
        """Return the known vectors of ``chunk_ids``."""
        with self._lock:
            return {key: self._vectors[key] for key in chunk_ids if key in self._vectors}

    def __len__(self) -> int:
        with self._lock:
            return len(self._vectors)

    def __contains__(self, chunk_id: object) -> bool:
        with self._lock:
            return chunk_id in self._vectors
