"""SCAR's two modes and their settings, validated when they are made.

* :class:`BudgetSettings` (the default mode): exactly ``k`` chunks, where neighbours of the kept
  chunks and further retrieved chunks bid for the same slots.
* :class:`PaperSettings`: the paper's rule, ``k`` retrieved seeds each expanded with
  ``S > gamma * cos(q, c)``; the number of chunks varies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from scar_core.errors import InvalidSettingsError

__all__ = [
    "DEFAULT_CONTINUITY_BONUS",
    "DEFAULT_GAMMA",
    "DEFAULT_K",
    "DEFAULT_LAMBDA",
    "BudgetSettings",
    "Direction",
    "PaperSettings",
    "default_keep",
]

Direction = Literal["both", "previous", "next"]

#: Chunks returned when nothing else is said; ``VectorStoreRetriever``'s default ``k``.
DEFAULT_K = 4
#: The paper's boundary-penalty weight.
DEFAULT_LAMBDA = 0.1
#: The paper's relative threshold.
DEFAULT_GAMMA = 0.8
#: Continuity bonus (cosine units) for all-MiniLM-L6-v2, chosen on the dev sets with
#: ``benchmarks/budget_sweep.py``.
DEFAULT_CONTINUITY_BONUS = 0.25
#: How far a passage may grow from its retrieved chunk in budget mode; each step is one read.
DEFAULT_BUDGET_WINDOW = 2


def default_keep(k: int) -> int:
    """Return how many of the best retrieved chunks budget mode always keeps at budget ``k``: 2.

    Chosen on the three dev sets (PrivacyQA, ContractNLI, paper4_dev) at k = 2, 3, 4, 5, 7, 10, 12
    and 15 with ``benchmarks/keep_sweep.py``: keeping 2 gains recall on fragmented queries at every
    k > 2 and set, and is never below top-k on all queries. Keeping 1 lost 3.6 points at k = 2 and
    2.1 at k = 3 on ContractNLI.
    """
    return min(k, 2)


def _check_int(name: str, value: object, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidSettingsError(
            f"{name}={value!r} is not valid; it must be an integer >= {minimum}."
        )
    return value


def _check_real(name: str, value: object, low: float, high: float = math.inf) -> float:
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not math.isfinite(value)
        or not low <= value <= high
    ):
        bounds = f">= {low}" if high == math.inf else f"between {low} and {high}"
        raise InvalidSettingsError(f"{name}={value!r} is not valid; it must be a number {bounds}.")
    return float(value)


def _check_direction(value: object) -> None:
    if value not in ("both", "previous", "next"):
        raise InvalidSettingsError(
            f"direction={value!r} is not valid; use 'both', 'previous' or 'next'."
        )


@dataclass(frozen=True)
class BudgetSettings:
    """Budget mode: return exactly ``k`` chunks, spent where they cover the most evidence.

    Attributes:
        k: The budget: how many chunks to return.
        keep: How many of the best retrieved chunks are always kept; ``None`` means
            :func:`default_keep` of ``k``.
        continuity_bonus: ``alpha``, added for every linked pair of chosen chunks, so that a
            neighbour bids its expansion score ``S`` plus ``alpha`` against further retrieved
            chunks. With 0 (and ``lambda_=0``) budget mode is plain top-k.
        lambda_: Weight of the boundary penalty.
        window: How many steps a passage may grow from its retrieved chunk.
        direction: ``"both"``, ``"previous"`` or ``"next"``.
    """

    k: int = DEFAULT_K
    keep: int | None = None
    continuity_bonus: float = DEFAULT_CONTINUITY_BONUS
    lambda_: float = DEFAULT_LAMBDA
    window: int = DEFAULT_BUDGET_WINDOW
    direction: Direction = "both"

    def __post_init__(self) -> None:
        _check_int("k", self.k, 1)
        if self.keep is not None:
            _check_int("keep", self.keep, 1)
            if self.keep > self.k:
                raise InvalidSettingsError(
                    f"keep={self.keep} is larger than k={self.k}; at most k chunks are returned, "
                    "so lower keep or raise k."
                )
        _check_real("continuity_bonus", self.continuity_bonus, 0.0)
        _check_real("lambda_", self.lambda_, 0.0)
        _check_int("window", self.window, 1)
        _check_direction(self.direction)

    @property
    def kept(self) -> int:
        """The number of best retrieved chunks that are always kept."""
        return self.keep if self.keep is not None else min(self.k, default_keep(self.k))


@dataclass(frozen=True)
class PaperSettings:
    """The paper's rule: ``k`` seeds, each neighbour added when ``S > gamma * cos(q, seed)``.

    Attributes:
        k: How many retrieved chunks are seeds.
        lambda_: Weight of the boundary penalty.
        gamma: Relative threshold, in (0, 1].
        window: How many steps the walk may go from a seed (1 is the paper's ±1).
        direction: ``"both"``, ``"previous"`` or ``"next"``.
    """

    k: int = DEFAULT_K
    lambda_: float = DEFAULT_LAMBDA
    gamma: float = DEFAULT_GAMMA
    window: int = 1
    direction: Direction = "both"

    def __post_init__(self) -> None:
        _check_int("k", self.k, 1)
        _check_real("lambda_", self.lambda_, 0.0)
        if _check_real("gamma", self.gamma, 0.0, 1.0) == 0.0:
            raise InvalidSettingsError("gamma=0 is not valid; it must be in (0, 1] (paper: 0.8).")
        _check_int("window", self.window, 1)
        _check_direction(self.direction)
