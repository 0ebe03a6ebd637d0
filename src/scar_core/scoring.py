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
]

FloatArray = npt.NDArray[np.float64]


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
    safe = np.where(norms > 0, norms, 1.0)
    return np.asarray(array / safe[:, None], dtype=np.float64)


def as_unit_vector(vector: npt.ArrayLike) -> FloatArray:
    """Scale a 1-D vector to unit length; a zero vector stays zero."""
    array = np.asarray(vector, dtype=np.float64)
    norm = float(np.linalg.norm(array))
    return array / norm if norm > 0 else array


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
