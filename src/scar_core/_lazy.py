"""Things the adapters do only when they must.

* :class:`LazyValues`: a mapping whose values are made on first lookup. Budgeted selection and
  passage assembly look up a fraction of the chunks a query has fetched (token counts, text
  records); the adapters make those values only when asked.
* :func:`isinstance_if_loaded`: a type check against an optional package's class that never
  imports the package.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

__all__ = ["LazyValues", "isinstance_if_loaded"]

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


def isinstance_if_loaded(value: object, module_name: str, class_name: str) -> bool:
    """Whether ``value`` is an instance of ``module_name.class_name``, without importing it.

    An object can only be an instance of a class whose module is already loaded, so an optional
    package that was never imported means ``False``, at no import cost.

    Args:
        value: The object to check.
        module_name: The module defining the class, such as ``"langchain_postgres.v2.vectorstores"``.
        class_name: The class's name in that module.
    """
    cls = getattr(sys.modules.get(module_name), class_name, None)
    return isinstance(cls, type) and isinstance(value, cls)
