"""Exception types raised by SCAR.

Every failure SCAR raises on purpose is a :class:`ScarError`. Each subclass also derives from the
built-in exception a caller would expect (``ValueError``, ``ImportError``...), so code that already
catches those keeps working.
"""

from __future__ import annotations

__all__ = [
    "DataFormatError",
    "EmbeddingError",
    "InvalidSettingsError",
    "InvalidVectorError",
    "MissingDependencyError",
    "NeighborFetchError",
    "ScarError",
    "missing_dependency",
]


class ScarError(Exception):
    """Base class of every error SCAR raises on purpose."""


class InvalidSettingsError(ScarError, ValueError):
    """A setting is out of range or does not apply to the chosen mode; the message says the fix."""


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
    """Build the error for an optional backend that is asked for but not installed.

    Args:
        package: The import name that failed.
        extra: The ``scar-retrieval`` extra that installs it.

    Returns:
        An error whose message gives the exact install command.
    """
    return MissingDependencyError(
        f"{package!r} is not installed. Install it with: pip install 'scar-retrieval[{extra}]'"
    )
