"""Zero-label calibration: suggest SCAR's settings for an embedding model and corpus.

Nothing here needs a labelled query. The method measures how strongly the model marks textual
continuity in *this* corpus:

* ``adjacent`` = mean ``cos(e_i, e_{i+1})`` over consecutive chunks of the same document;
* ``background`` = mean ``cos(e_i, e_j)`` over all pairs of chunks of the same document;
* ``continuity_signal = adjacent - background`` (averaged over documents with 3 or more chunks).

The continuity bonus of budgeted selection is ``alpha = 1.5 * continuity_signal``: a neighbour
continuing a passage is credited with the extra similarity that adjacency itself carries, with
a margin. The factor 1.5 was fitted once, on all-MiniLM-L6-v2 and on a model2vec model distilled
from it, over ContractNLI, PrivacyQA and paper4_dev; across those 18 (model, set, budget) cases it
kept recall within 2 points of the best ``alpha`` found with labels (README, "Calibration").

``lambda_`` stays at the paper's 0.1 (the paper's ablation and ours show it matters little).
``gamma`` for plain SCAR is *derived*, not fitted: plain SCAR accepts a neighbour when
``S + (1 - gamma) * cos(q, c) > cos(q, c)``, so the same bonus at a typical seed relevance ``r``
gives ``gamma = 1 - alpha / r``. ``r`` is estimated, without queries, as the mean cosine between a
chunk and its most similar non-adjacent chunk of the same document.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

import numpy as np
import numpy.typing as npt

from scar_core.errors import InvalidSettingsError
from scar_core.scoring import as_unit_matrix
from scar_core.settings import DEFAULT_LAMBDA

__all__ = ["BONUS_PER_SIGNAL", "Calibration", "calibrate"]

#: alpha = BONUS_PER_SIGNAL * continuity_signal (fitted once across two models and three sets).
BONUS_PER_SIGNAL = 1.5
#: Documents with fewer chunks carry no usable signal.
MIN_CHUNKS_PER_DOCUMENT = 3
#: Largest document (in chunks) used whole; larger ones are subsampled for speed.
MAX_CHUNKS_PER_DOCUMENT = 2000


@dataclass(frozen=True)
class Calibration:
    """Settings suggested for one embedding model on one corpus.

    Attributes:
        continuity_bonus: ``alpha`` for budgeted selection.
        lambda_: Boundary-penalty weight (the paper's 0.1).
        gamma: Derived relative threshold for plain SCAR.
        continuity_signal: Mean adjacent-chunk cosine minus mean same-document cosine.
        adjacent_cosine: Mean cosine of consecutive chunks.
        background_cosine: Mean cosine of all same-document pairs.
        typical_relevance: Estimated relevance of a good seed (``r``).
        documents: Documents that contributed.
        chunks: Chunks in those documents.
        model_name: The embedding model, when given.
    """

    continuity_bonus: float
    lambda_: float
    gamma: float
    continuity_signal: float
    adjacent_cosine: float
    background_cosine: float
    typical_relevance: float
    documents: int
    chunks: int
    model_name: str | None = None

    def to_dict(self) -> dict[str, object]:
        """Return the calibration as JSON-ready values."""
        return asdict(self)


def calibrate(
    documents: Mapping[str, npt.ArrayLike],
    *,
    model_name: str | None = None,
    seed: int = 0,
) -> Calibration:
    """Suggest ``continuity_bonus``, ``lambda_`` and ``gamma`` from a corpus's chunk vectors.

    Args:
        documents: ``document id -> (n_chunks, d)`` array of chunk embeddings in reading order.
        model_name: Recorded in the result.
        seed: Seed of the subsampling of very large documents.

    Returns:
        The suggested settings and the statistics they come from.

    Raises:
        InvalidSettingsError: If no document has at least 3 chunks.
    """
    rng = np.random.default_rng(seed)
    adjacent: list[float] = []
    background: list[float] = []
    nearest: list[float] = []
    weights: list[int] = []
    for matrix_like in documents.values():
        matrix = as_unit_matrix(np.asarray(matrix_like, dtype=np.float64))
        count = matrix.shape[0]
        if matrix.ndim != 2 or count < MIN_CHUNKS_PER_DOCUMENT:
            continue
        adjacent.append(float(np.mean(np.einsum("ij,ij->i", matrix[:-1], matrix[1:]))))
        positions = np.arange(count)
        if count > MAX_CHUNKS_PER_DOCUMENT:
            positions = np.sort(rng.choice(count, MAX_CHUNKS_PER_DOCUMENT, replace=False))
        sample = matrix[positions]
        similarity = sample @ sample.T
        upper = np.triu_indices(len(positions), 1)
        background.append(float(np.mean(similarity[upper])))
        too_close = np.abs(positions[:, None] - positions[None, :]) <= 1
        similarity[too_close] = -np.inf
        best = similarity.max(axis=1)
        nearest.append(float(np.mean(best[np.isfinite(best)])))
        weights.append(count)
    if not adjacent:
        raise InvalidSettingsError(
            f"calibration needs documents of at least {MIN_CHUNKS_PER_DOCUMENT} chunks; none of "
            f"the {len(documents)} given has that many. Use a larger sample of the corpus."
        )
    adjacent_cosine = float(np.mean(adjacent))
    background_cosine = float(np.mean(background))
    signal = max(adjacent_cosine - background_cosine, 0.0)
    bonus = BONUS_PER_SIGNAL * signal
    relevance = float(np.mean(nearest))
    gamma = float(np.clip(1.0 - bonus / relevance, 0.05, 1.0)) if relevance > 0 else 1.0
    return Calibration(
        continuity_bonus=round(bonus, 4),
        lambda_=DEFAULT_LAMBDA,
        gamma=round(gamma, 3),
        continuity_signal=signal,
        adjacent_cosine=adjacent_cosine,
        background_cosine=background_cosine,
        typical_relevance=relevance,
        documents=len(adjacent),
        chunks=int(sum(weights)),
        model_name=model_name,
    )
