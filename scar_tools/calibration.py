"""A fixed continuity bonus for a whole corpus, without labels.

Budget mode works out ``alpha`` for each query by default
(:func:`scar_core._scoring.query_continuity_bonus`); this module is for a bonus fixed once per
corpus instead. ``alpha`` is in the cosine units of the embedding model. Models differ in how
alike they find two adjacent chunks (all-MiniLM-L6-v2: mean boundary penalty about 0.5 on the dev
sets; a model2vec model distilled from it: about 0.3), and the best ``alpha`` follows: on the
three dev sets, 0.5 times the corpus's mean boundary penalty is the best factor for the two models
together (and gives 0.25, the former fixed default, back for MiniLM). So a sample of your own
chunks, in document order, is all it takes::

    from scar_core import BudgetSettings
    from scar_tools.calibration import suggest_continuity_bonus
    alpha = suggest_continuity_bonus(embeddings.embed_documents(chunk_texts_in_order))
    settings = BudgetSettings(k=5, continuity_bonus=alpha)

``benchmarks/robustness.py`` checks the factor out of sample, one dev set left out at a time.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from scar_core._errors import InvalidSettingsError
from scar_core._scoring import unit_rows

__all__ = ["BONUS_PER_BOUNDARY_PENALTY", "suggest_continuity_bonus"]

#: ``alpha`` over the mean boundary penalty of adjacent chunks, fitted on the dev sets.
BONUS_PER_BOUNDARY_PENALTY = 0.5


def suggest_continuity_bonus(
    documents: Sequence[npt.ArrayLike] | npt.ArrayLike,
    factor: float = BONUS_PER_BOUNDARY_PENALTY,
) -> float:
    """Suggest ``continuity_bonus`` for your model: ``factor`` times the mean boundary penalty.

    Args:
        documents: The embeddings of consecutive chunks, in document order: one 2-D array or
            list of vectors (one document, as ``Embeddings.embed_documents`` returns it), or a
            list of them (one per document; pairs never span two documents).
            A few hundred adjacent pairs are plenty.
        factor: ``alpha`` per unit of mean boundary penalty (0.5, fitted on the dev sets).

    Returns:
        The suggested ``alpha``, rounded to three decimals.

    Raises:
        InvalidSettingsError: If no pair of adjacent chunks with usable vectors is given.
    """
    penalties: list[npt.NDArray[np.float64]] = []
    for vectors in _documents(documents):
        units, usable = unit_rows(np.asarray(vectors, dtype=np.float64))
        pairs = usable[:-1] & usable[1:]
        penalties.append(1.0 - np.einsum("ij,ij->i", units[:-1], units[1:])[pairs])
    every = np.concatenate(penalties) if penalties else np.zeros(0)
    if every.size == 0:
        raise InvalidSettingsError(
            "no two adjacent chunks with usable vectors were given; pass the embeddings of "
            "consecutive chunks of at least one document, in document order."
        )
    return round(factor * float(every.mean()), 3)


def _documents(documents: Sequence[npt.ArrayLike] | npt.ArrayLike) -> list[npt.ArrayLike]:
    """One document's vectors (a 2-D array or list of lists) or several documents' vectors."""
    try:
        single = np.asarray(documents, dtype=np.float64)
    except (TypeError, ValueError):  # documents of different lengths
        single = None
    if single is not None and single.ndim == 2:
        return [single]
    return list(documents)  # type: ignore[arg-type]
