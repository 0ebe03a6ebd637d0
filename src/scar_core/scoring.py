"""The SCAR maths as plain numpy functions, free of ids, graphs and frameworks.

For a query ``q``, a seed chunk ``c`` and a candidate neighbour ``n``:

* boundary penalty ``b = 1 - cos(e_c, e_n)``
* expansion score ``S = cos(e_q, e_n) - lambda_ * b``
* accept ``n`` when ``S > gamma * cos(e_q, e_c)``

Cosines are always computed from the vectors, so the rule holds whatever the vectors' scale.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

__all__ = [
    "ExpansionScores",
    "as_unit_matrix",
    "as_unit_vector",
    "expansion_scores",
    "row_norms",
    "unit_rows",
]

FloatArray = npt.NDArray[np.float64]

#: Norms inside this range are computed without overflow or precision loss in the squares.
SAFE_NORM_LOW = 1e-100
SAFE_NORM_HIGH = 1e100


class ExpansionScores(NamedTuple):
    """Vectorised outcome of the SCAR rule for a batch of (seed, neighbour) pairs."""

    boundary_penalty: FloatArray
    score: FloatArray
    threshold: FloatArray
    accepted: npt.NDArray[np.bool_]


def row_norms(matrix: npt.ArrayLike) -> FloatArray:
    """Return the Euclidean norm of each row of a 2-D array."""
    array = np.asarray(matrix, dtype=np.float64)
    return np.asarray(np.sqrt(np.einsum("ij,ij->i", array, array)), dtype=np.float64)


def as_unit_matrix(matrix: npt.ArrayLike) -> FloatArray:
    """Scale each row to unit length. Rows of zero norm stay zero (their cosines are 0).

    Args:
        matrix: A 2-D array of vectors, one per row, of any scale.

    Returns:
        A float64 array of the same shape whose non-zero rows have norm 1.
    """
    array = np.asarray(matrix, dtype=np.float64)
    norms = row_norms(array)
    # Squaring entries near 1e200 overflows and near 1e-200 underflows, so a finite row whose
    # norm falls outside a safe range is first divided by its largest magnitude (then every entry
    # lies in [-1, 1], one of them at +-1). Rows in the range keep the plain, exact path.
    rescale = np.isfinite(array).all(axis=1) & ~((norms > SAFE_NORM_LOW) & (norms < SAFE_NORM_HIGH))
    if array.shape[1] > 0 and np.any(rescale):
        array = array.copy()
        peaks = np.max(np.abs(array[rescale]), axis=1)
        array[rescale] = array[rescale] / np.where(peaks > 0, peaks, 1.0)[:, None]
        norms = row_norms(array)
    safe = np.where(norms > 0, norms, 1.0)
    return np.asarray(array / safe[:, None], dtype=np.float64)


def as_unit_vector(vector: npt.ArrayLike) -> FloatArray:
    """Scale a 1-D vector to unit length; a zero vector stays zero. Any finite scale is safe."""
    array = np.asarray(vector, dtype=np.float64)
    with np.errstate(over="ignore", under="ignore"):
        norm = float(np.linalg.norm(array))
    if array.ndim == 1 and array.size and not SAFE_NORM_LOW < norm < SAFE_NORM_HIGH:
        rescaled: FloatArray = as_unit_matrix(array[None, :])[0]
        return rescaled
    return array / norm if norm > 0 else array


def unit_rows(matrix: npt.NDArray[np.float64]) -> FloatArray:
    """Scale each finite, non-zero row of a 2-D array to unit length, whatever its magnitude.

    Rows of ordinary magnitude are divided by their ``np.linalg.norm``; a row whose norm would
    overflow or lose precision takes the rescaling path of :func:`as_unit_matrix`. Each row's
    result depends on that row alone.
    """
    with np.errstate(over="ignore", under="ignore"):
        norms = np.linalg.norm(matrix, axis=1)
    unsafe = ~((norms > SAFE_NORM_LOW) & (norms < SAFE_NORM_HIGH))
    units = np.asarray(matrix / np.where(unsafe, 1.0, norms)[:, None], dtype=np.float64)
    if np.any(unsafe):
        units[unsafe] = as_unit_matrix(matrix[unsafe])
    return units


def expansion_scores(
    neighbor_relevance: npt.ArrayLike,
    boundary_cosine: npt.ArrayLike,
    seed_relevance: npt.ArrayLike,
    *,
    lambda_: float,
    gamma: float,
) -> ExpansionScores:
    """Apply the SCAR rule to many (seed, neighbour) pairs at once.

    Args:
        neighbor_relevance: ``cos(e_q, e_n)`` for each pair.
        boundary_cosine: ``cos(e_c, e_n)`` across the boundary the neighbour would cross.
        seed_relevance: ``cos(e_q, e_c)`` of the seed each pair belongs to.
        lambda_: Boundary-penalty weight.
        gamma: Relative threshold.

    Returns:
        The penalty, score, threshold and acceptance of every pair, as arrays.
    """
    relevance = np.asarray(neighbor_relevance, dtype=np.float64)
    penalty = 1.0 - np.asarray(boundary_cosine, dtype=np.float64)
    score = relevance - lambda_ * penalty
    threshold = gamma * np.asarray(seed_relevance, dtype=np.float64)
    return ExpansionScores(penalty, score, threshold, score > threshold)
