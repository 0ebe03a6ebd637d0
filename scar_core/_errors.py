"""Exception types raised by SCAR.

Every failure SCAR raises on purpose is a :class:`ScarError`. Each subclass also derives from the
built-in exception a caller would expect (``ValueError``, ``ImportError``...), so code that already
catches those keeps working.
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any


class ScarError(Exception):
    """Base class of every error SCAR raises on purpose."""


class InvalidSettingsError(ScarError, ValueError):
    """A setting is out of range or does not apply to the chosen mode; the message says the fix."""


class MissingQueryError(ScarError, ValueError):
    """A postprocessor was called without the query it needs."""


class InvalidVectorError(ScarError, ValueError):
    """A query vector is NaN, infinite, zero or of the wrong shape."""


class DataFormatError(ScarError, ValueError):
    """A benchmark, corpus or chunk metadata does not have the documented format."""


class EmbeddingError(ScarError, RuntimeError):
    """An embedding backend failed after its own retries were used up."""


class NeighborFetchError(ScarError, RuntimeError):
    """A store failed while SCAR was reading neighbour chunks or their vectors."""


class MissingDependencyError(ScarError, ImportError):
    """An optional dependency is missing; the message names the extra that installs it."""


def missing_dependency(package: str, extra: str) -> MissingDependencyError:
    """The error for a missing optional ``package``, naming the ``extra`` that installs it."""
    return MissingDependencyError(
        f"{package!r} is not installed. Install it with: pip install 'scar-retrieval[{extra}]'"
    )


def unfilterable_store_error(store: str, why: str) -> InvalidSettingsError:
    """The error, in both adapters, for a search filter SCAR cannot apply to neighbours read."""
    return InvalidSettingsError(
        f"SCAR cannot apply the search's filter to the neighbours it reads from {store}: {why}. "
        "A neighbour read without the filter could be a chunk the search itself may not return, "
        "so SCAR refuses. Either pass neighbor_filter=<a function of a chunk's metadata that "
        "returns True for chunks this query may see>, which SCAR applies to every neighbour, or "
        "pass allow_unfiltered_neighbors=True if no filter guards access to this store's chunks."
    )


def settings_error_in(error: Exception) -> InvalidSettingsError | None:
    """Return the :class:`InvalidSettingsError` a pydantic ``ValidationError`` wraps, if any."""
    details: list[dict[str, Any]] = getattr(error, "errors", list)()
    wrapped = [d.get("ctx", {}).get("error") for d in details]
    return next((e for e in wrapped if isinstance(e, InvalidSettingsError)), None)


_warned: dict[tuple[str, int], weakref.ref[Any] | None] = {}


def warn_once(reason: str, owner: object, message: str, stacklevel: int = 3) -> None:
    """Warn ``message`` the first time ``reason`` comes up for ``owner`` (a store, an adapter)."""
    key = (reason, id(owner))
    known = _warned.get(key)
    if known is not None and known() is owner:
        return
    try:
        _warned[key] = weakref.ref(owner, lambda _: _warned.pop(key, None))
    except TypeError:  # an object without weak references: warned once per id
        if key in _warned:
            return
        _warned[key] = None
    warnings.warn(message, stacklevel=stacklevel)
