"""Exception types raised by SCAR.

Every failure SCAR raises on purpose is a :class:`ScarError`. The subclasses also derive from the
built-in exception a caller would expect (``ValueError``, ``KeyError``, ``ImportError``), so code
that already catches those keeps working.
"""

from __future__ import annotations

__all__ = [
    "CacheCorruptedError",
    "DataFormatError",
    "EmbeddingError",
    "InvalidSettingsError",
    "InvalidTextError",
    "InvalidVectorError",
    "LinkError",
    "MissingDependencyError",
    "MissingVectorError",
    "NeighborFetchError",
    "ScarError",
]


class ScarError(Exception):
    """Base class of every error SCAR raises on purpose."""


class InvalidSettingsError(ScarError, ValueError):
    """A setting is outside its valid range. The message names the value and the range."""


class InvalidVectorError(ScarError, ValueError):
    """A query or seed vector is NaN, infinite, zero-norm or of the wrong dimension."""


class InvalidTextError(ScarError, ValueError):
    """A text given to an embedder is not a string, or is an empty or whitespace-only query."""


class MissingVectorError(ScarError, KeyError):
    """No vector is known for a chunk id that needs one (a seed's, for example)."""

    def __str__(self) -> str:
        # KeyError quotes its argument; a readable message is more useful here.
        return str(self.args[0]) if self.args else ""


class LinkError(ScarError, ValueError):
    """Neighbour links are malformed in a way that cannot be skipped safely."""


class DataFormatError(ScarError, ValueError):
    """A benchmark, corpus or chunk metadata does not have the documented format."""


class EmbeddingError(ScarError, RuntimeError):
    """An embedding backend failed after its retries were used up."""


class NeighborFetchError(ScarError, RuntimeError):
    """A store failed while SCAR was fetching neighbour chunks or their vectors."""


class CacheCorruptedError(ScarError, RuntimeError):
    """An on-disk vector cache could not be read back. It is rebuilt, never unpickled."""


class MissingDependencyError(ScarError, ImportError):
    """An optional dependency is missing. The message names the extra that installs it."""


def missing_dependency(package: str, extra: str) -> MissingDependencyError:
    """Build the error raised when an optional backend is asked for but not installed.

    Args:
        package: The import name that failed.
        extra: The ``scar-retrieval`` extra that installs it.

    Returns:
        An error whose message gives the exact install command.
    """
    return MissingDependencyError(
        f"{package!r} is not installed. Install it with: pip install 'scar-retrieval[{extra}]'"
    )
