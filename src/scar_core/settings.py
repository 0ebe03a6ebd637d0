"""Validated settings of the SCAR expansion policy."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Literal

import numpy as np

from scar_core.errors import InvalidSettingsError

__all__ = ["DEFAULT_GAMMA", "DEFAULT_LAMBDA", "DEFAULT_WINDOW", "Direction", "ScarSettings"]

Direction = Literal["both", "previous", "next"]

#: The paper's boundary-penalty weight.
DEFAULT_LAMBDA = 0.1
#: The paper's relative acceptance threshold.
DEFAULT_GAMMA = 0.8
#: Neighbours one step away on each side.
DEFAULT_WINDOW = 1

_DIRECTIONS: tuple[str, ...] = ("both", "previous", "next")


@dataclass(frozen=True)
class ScarSettings:
    """Settings of the SCAR rule ``cos(q, n) - lambda_ * (1 - cos(c, n)) > gamma * cos(q, c)``.

    Attributes:
        lambda_: Weight of the boundary penalty ``b = 1 - cos(e_c, e_n)``; ``>= 0``. ``0`` turns
            the penalty off (the paper's ablation).
        gamma: Relative threshold in ``(0, 1]``. A neighbour must score at least ``gamma`` times
            the seed's own relevance. At ``gamma = 1`` a neighbour must be *more* relevant than
            its seed, after the penalty, so expansion becomes rare; lower values expand more.
        window: How many steps away from a seed a neighbour may lie (integer ``>= 1``). With a
            window of 2 the chunk two steps away is considered only when the chunk between was
            accepted (or already selected), so a passage never has holes.
        direction: Which side of a seed to expand: ``"both"``, ``"previous"`` or ``"next"``.
    """

    lambda_: float = DEFAULT_LAMBDA
    gamma: float = DEFAULT_GAMMA
    window: int = DEFAULT_WINDOW
    direction: Direction = "both"

    def __post_init__(self) -> None:
        validate_lambda(self.lambda_)
        validate_gamma(self.gamma)
        validate_window(self.window)
        # Store plain Python numbers: a numpy float32 gamma would make thresholds float32.
        object.__setattr__(self, "lambda_", float(self.lambda_))
        object.__setattr__(self, "gamma", float(self.gamma))
        object.__setattr__(self, "window", int(self.window))
        validate_direction(self.direction)

    @classmethod
    def paper(cls, window: int = 1) -> ScarSettings:
        """Return the paper's settings (lambda 0.1, gamma 0.8) at the given window."""
        return cls(lambda_=DEFAULT_LAMBDA, gamma=DEFAULT_GAMMA, window=window)


def _is_real_number(value: object) -> bool:
    # numbers.Real admits numpy scalars (np.float32, np.int64) as well as int and float.
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _is_integer(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def validate_lambda(lambda_: float) -> None:
    """Reject a boundary-penalty weight that is not a finite number ``>= 0``."""
    if not _is_real_number(lambda_) or not math.isfinite(lambda_) or lambda_ < 0:
        raise InvalidSettingsError(
            f"lambda_={lambda_!r} is not valid; it must be a finite number >= 0 "
            "(the paper uses 0.1; 0 disables the boundary penalty)."
        )


def validate_gamma(gamma: float) -> None:
    """Reject a relative threshold outside ``(0, 1]``."""
    if not _is_real_number(gamma) or not math.isfinite(gamma) or not 0 < gamma <= 1:
        raise InvalidSettingsError(
            f"gamma={gamma!r} is not valid; it must lie in (0, 1] "
            "(the paper uses 0.8; lower values expand more)."
        )


def validate_window(window: int) -> None:
    """Reject a window that is not an integer ``>= 1``."""
    if not _is_integer(window) or window < 1:
        raise InvalidSettingsError(
            f"window={window!r} is not valid; it must be an integer >= 1 "
            "(1 considers the adjacent chunks, 2 also the chunks two steps away)."
        )


def validate_direction(direction: object) -> None:
    """Raise :class:`InvalidSettingsError` unless ``direction`` is both, previous or next."""
    if direction not in _DIRECTIONS:
        raise InvalidSettingsError(
            f"direction={direction!r} is not valid; use one of {', '.join(_DIRECTIONS)}."
        )


def validate_k(k: int, name: str = "k") -> None:
    """Reject a retrieval depth that is not an integer ``>= 1``."""
    if not _is_integer(k) or k < 1:
        raise InvalidSettingsError(f"{name}={k!r} is not valid; it must be an integer >= 1.")
