"""The zero-label continuity bonus against a naive loop, and its errors."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from scar_core import InvalidSettingsError
from scar_tools.calibration import suggest_continuity_bonus


def naive(documents, factor):
    penalties = []
    for vectors in documents:
        for a, b in itertools.pairwise(vectors):
            cosine = sum(x * y for x, y in zip(a, b, strict=True)) / (
                math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
            )
            penalties.append(1 - cosine)
    return round(factor * sum(penalties) / len(penalties), 3)


@pytest.mark.parametrize("seed", range(10))
def test_the_suggestion_is_the_factor_times_the_mean_boundary_penalty(seed: int) -> None:
    rng = np.random.default_rng(seed)
    documents = [rng.normal(size=(int(rng.integers(2, 9)), 5)) for _ in range(3)]
    lists = [d.tolist() for d in documents]
    assert suggest_continuity_bonus(documents) == naive(lists, 0.5)
    assert suggest_continuity_bonus(documents, factor=0.7) == naive(lists, 0.7)
    assert suggest_continuity_bonus(documents[0]) == naive(lists[:1], 0.5)
    # One document as embed_documents returns it: a list of lists of floats.
    assert suggest_continuity_bonus(lists[0]) == naive(lists[:1], 0.5)


def test_pairs_never_span_two_documents_and_unusable_vectors_are_skipped() -> None:
    same = np.array([[1.0, 0.0], [1.0, 0.0]])
    opposite = np.array([[-1.0, 0.0]])
    assert suggest_continuity_bonus([same, opposite]) == 0.0
    assert suggest_continuity_bonus([[[1.0, 0.0], [0.0, 0.0], [0.0, 1.0], [0.0, 1.0]]]) == 0.0


@pytest.mark.parametrize("documents", [[], [np.ones((1, 3))], [[[0.0, 0.0], [1.0, 0.0]]]])
def test_no_usable_pair_is_refused_with_the_fix(documents) -> None:
    with pytest.raises(InvalidSettingsError, match="consecutive chunks"):
        suggest_continuity_bonus(documents)
