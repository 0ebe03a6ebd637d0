"""The embedder protocol every SCAR embedding backend implements.

An embedder turns texts into float32 vectors. SCAR only ever needs two calls: embed many document
chunks at once, and embed one query. Both have async forms for adapters that run in an event loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from scar_core.errors import EmbeddingError, InvalidTextError

__all__ = [
    "Embedder",
    "FloatMatrix",
    "FloatVector",
    "as_float32_matrix",
    "check_query_text",
    "check_texts",
]

FloatMatrix = npt.NDArray[np.float32]
FloatVector = npt.NDArray[np.float32]


@runtime_checkable
class Embedder(Protocol):
    """Anything that embeds documents and queries into float32 vectors of one dimension ``d``.

    Contract:

    * :attr:`model_name` identifies the vectors: two embedders with the same name must give the
      same vectors for the same text. It is the key of :class:`~scar_core.cache.VectorCache`, so it
      includes every option that changes vectors (output dimensions, prompts, normalisation).
    * :meth:`embed_documents` returns shape ``(n, d)``; :meth:`embed_query` returns shape ``(d,)``.
    * An empty or whitespace-only query raises :class:`~scar_core.errors.InvalidTextError`: its
      vector would carry no meaning, and SCAR's threshold is relative to it.
    * A backend failure raises :class:`~scar_core.errors.EmbeddingError`.
    """

    @property
    def model_name(self) -> str:
        """A stable identifier of the vectors this embedder produces."""
        ...

    def embed_documents(self, texts: Sequence[str]) -> FloatMatrix:
        """Embed document chunks; returns a float32 array of shape ``(len(texts), d)``."""
        ...

    def embed_query(self, text: str) -> FloatVector:
        """Embed one query; returns a float32 array of shape ``(d,)``."""
        ...

    async def aembed_documents(self, texts: Sequence[str]) -> FloatMatrix:
        """Async form of :meth:`embed_documents`."""
        ...

    async def aembed_query(self, text: str) -> FloatVector:
        """Async form of :meth:`embed_query`."""
        ...


def check_query_text(text: str) -> str:
    """Return ``text`` unchanged if it can be embedded as a query.

    Raises:
        InvalidTextError: If it is not a string, or is empty or whitespace only.
    """
    if not isinstance(text, str):
        raise InvalidTextError(
            f"the query must be a str, not {type(text).__name__}; pass the query text."
        )
    if not text.strip():
        raise InvalidTextError(
            f"the query text {text!r} is empty; an empty query has no meaningful embedding."
        )
    return text


def check_texts(texts: Sequence[str]) -> list[str]:
    """Return ``texts`` as a list after checking that every item is a string.

    Raises:
        InvalidTextError: If ``texts`` is a single string (a common slip) or holds a non-string.
    """
    if isinstance(texts, str):
        raise InvalidTextError(
            "embed_documents expects a sequence of texts, not one str; wrap it in a list."
        )
    checked = list(texts)
    for index, text in enumerate(checked):
        if not isinstance(text, str):
            raise InvalidTextError(
                f"text {index} is of type {type(text).__name__}; every document must be a str."
            )
    return checked


def as_float32_matrix(array: npt.ArrayLike, expected_rows: int, backend: str) -> FloatMatrix:
    """Convert a backend's output to a float32 ``(n, d)`` matrix, checking its shape.

    Raises:
        EmbeddingError: If the backend returned the wrong number of rows or not a 2-D array.
    """
    matrix = np.asarray(array, dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[0] != expected_rows:
        raise EmbeddingError(
            f"{backend} returned an array of shape {matrix.shape} for {expected_rows} texts; "
            f"expected ({expected_rows}, dimension)."
        )
    return matrix
