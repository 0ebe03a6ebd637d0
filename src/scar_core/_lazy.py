"""A mapping whose values are made on first lookup, for the adapters' per-query state.

Budgeted selection and passage assembly look up a fraction of the chunks a query has fetched
(token counts, text records); the adapters make those values only when asked, through
:class:`LazyValues`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

__all__ = ["LazyValues"]

V = TypeVar("V")


class LazyValues(Mapping[str, V], Generic[V]):
    """A value for each key of ``keys``, made the first time it is looked up, then kept.

    The keys are those of ``keys`` as it is at lookup time (it may grow). Looking up any other
    key raises ``KeyError``, as a mapping should.

    Args:
        keys: The mapping whose keys this one has (a query's known chunks, say).
        make: Makes the value of one key.
    """

    def __init__(self, keys: Mapping[str, object], make: Callable[[str], V]) -> None:
        self._keys = keys
        self._make = make
        self._made: dict[str, V] = {}

    def __getitem__(self, key: str) -> V:
        if key in self._made:
            return self._made[key]
        if key not in self._keys:
            raise KeyError(key)
        value = self._made[key] = self._make(key)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)
