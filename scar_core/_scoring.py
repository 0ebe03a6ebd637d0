"""The SCAR formula as plain numpy, free of ids, graphs and frameworks; both modes call it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from scar_core._errors import InvalidVectorError

FloatArray = npt.NDArray[np.float64]

#: Norms inside this range are squared and summed without overflow or loss of precision.
SAFE_NORM_LOW = 1e-100
SAFE_NORM_HIGH = 1e100

#: Budget mode: a linked pair of chosen chunks is worth this many places down the query's own list
#: of retrieved chunks ...
CONTINUITY_RANKS = 20.0
#: ... and at most this many times the mean boundary penalty of the linked pairs the query read.
CONTINUITY_CAP = 0.5


def boundary_penalty(boundary_cosine: float) -> float:
    """Return ``b = 1 - cos(e_c, e_n)``: low when two chunks read as one text."""
    return 1.0 - boundary_cosine


def expansion_score(relevance: float, boundary_cosine: float, lambda_: float) -> float:
    """Return ``S = cos(e_q, e_n) - lambda_ * (1 - cos(e_c, e_n))``.

    Args:
        relevance: ``cos(e_q, e_n)``, the neighbour's own relevance to the query.
        boundary_cosine: ``cos(e_c, e_n)`` across the boundary the neighbour would cross.
        lambda_: Weight of the boundary penalty.
    """
    return relevance - lambda_ * boundary_penalty(boundary_cosine)


def paper_threshold(seed_relevance: float, gamma: float) -> float:
    """Return the paper's bar ``gamma * cos(e_q, e_c)`` that ``S`` must exceed."""
    return gamma * seed_relevance


def query_continuity_bonus(
    hit_relevance: Sequence[float],
    boundary_penalties: Sequence[float],
    ranks: float = CONTINUITY_RANKS,
    cap: float = CONTINUITY_CAP,
) -> float:
    """Return one query's continuity bonus ``alpha``, in that query's own units.

    ``alpha = min(ranks * (max - min) / (k - 1), cap * mean(b))``, where ``max - min`` spans the
    cosines of the ``k`` retrieved chunks and ``b`` are the boundary penalties of the linked pairs
    the query read; docs/method.md says why it carries over between embedding models.

    Args:
        hit_relevance: ``cos(q, c)`` of each retrieved chunk, in any order.
        boundary_penalties: ``1 - cos`` across each linked pair of candidates.
        ranks: Places down the hit list that one linked pair is worth.
        cap: The most ``alpha`` can be, as a multiple of the mean boundary penalty.

    Returns:
        ``alpha`` (0 with fewer than two retrieved chunks or no linked pair).
    """
    if len(hit_relevance) < 2 or not len(boundary_penalties):
        return 0.0
    per_place = (max(hit_relevance) - min(hit_relevance)) / (len(hit_relevance) - 1)
    typical_boundary = float(np.mean(boundary_penalties))
    return max(0.0, min(ranks * per_place, cap * typical_boundary))


def unit_rows(matrix: npt.ArrayLike) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
    """Return ``(units, usable)``: each row at unit length, and whether it could be scaled.

    Rows that are zero, or hold NaN or infinite values, come back as zeros, marked unusable.
    """
    array = np.asarray(matrix, dtype=np.float64)
    if array.ndim != 2:
        raise InvalidVectorError(f"expected a 2-D array of vectors, got shape {array.shape}.")
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        norms = np.sqrt(np.einsum("ij,ij->i", array, array))
    # NaN and infinite rows fail both tests, so only rows of ordinary magnitude pass.
    ordinary = (norms > SAFE_NORM_LOW) & (norms < SAFE_NORM_HIGH)
    if ordinary.all():
        return array / norms[:, None], ordinary
    finite: npt.NDArray[np.bool_] = np.asarray(np.isfinite(array).all(axis=1))
    safe = np.where(finite[:, None], array, 0.0)
    # Dividing by the largest magnitude first keeps the squares from overflowing or underflowing.
    peaks = np.abs(safe).max(axis=1, initial=0.0)
    scaled = safe / np.where(peaks > 0, peaks, 1.0)[:, None]
    norms = np.linalg.norm(scaled, axis=1)
    usable = finite & (norms > 0)
    units = np.where(usable[:, None], scaled / np.where(usable, norms, 1.0)[:, None], 0.0)
    return units, usable


def unit_vector(vector: npt.ArrayLike, name: str = "the query vector") -> FloatArray:
    """Return a 1-D vector scaled to unit length, or raise naming what is wrong with it.

    Raises:
        InvalidVectorError: If the vector is not 1-D, is empty, zero, NaN or infinite.
    """
    array = np.asarray(vector, dtype=np.float64)
    if array.ndim != 1 or array.size == 0:
        raise InvalidVectorError(
            f"{name} has shape {array.shape}; expected a non-empty 1-D vector."
        )
    units, usable = unit_rows(array[None, :])
    if not usable[0]:
        problem = "NaN or infinite values" if not np.isfinite(array).all() else "zero length"
        raise InvalidVectorError(f"{name} has {problem}; check that the text is not empty.")
    result: FloatArray = units[0]
    return result
