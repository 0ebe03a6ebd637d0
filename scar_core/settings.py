"""SCAR's two modes and their settings, validated when they are made.

* :class:`BudgetSettings` (the default mode): exactly ``k`` chunks, where neighbours of the kept
  chunks and further retrieved chunks bid for the same slots.
* :class:`PaperSettings`: the paper's rule, ``k`` retrieved seeds each expanded with
  ``S > gamma * cos(q, c)``; the number of chunks varies.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from scar_core.errors import InvalidSettingsError

__all__ = [
    "DEFAULT_GAMMA",
    "DEFAULT_K",
    "DEFAULT_LAMBDA",
    "BudgetSettings",
    "Direction",
    "PaperSettings",
    "ScarSettings",
    "default_keep",
    "estimate_tokens",
    "take_settings",
]

Direction = Literal["both", "previous", "next"]

#: Chunks returned when nothing else is said; ``VectorStoreRetriever``'s default ``k``.
DEFAULT_K = 4
#: The paper's boundary-penalty weight.
DEFAULT_LAMBDA = 0.1
#: The paper's relative threshold.
DEFAULT_GAMMA = 0.8
#: How far a passage may grow from its retrieved chunk in budget mode; each step is one read.
DEFAULT_BUDGET_WINDOW = 2
#: The most retrieved chunks one budget auction weighs (``k``, budget mode). The auction solves
#: a programme of about ``5 * k`` candidates by ``k + 1`` counts, so time and memory grow as
#: ``k`` squared; past this limit the adapters and :func:`scar_core.select` refuse.
MAX_AUCTION_HITS = 1000


def default_keep(k: int) -> int:
    """Return how many of the best retrieved chunks budget mode always keeps at budget ``k``: 2.

    Chosen on the three dev sets (PrivacyQA, ContractNLI, paper4_dev) at k = 2, 3, 4, 5, 7, 10, 12
    and 15 with ``benchmarks/keep_sweep.py``: keeping 2 gains recall on fragmented queries at every
    k > 2 and set, and is never below top-k on all queries. Keeping 1 lost 3.6 points at k = 2 and
    2.1 at k = 3 on ContractNLI.
    """
    return min(k, 2)


def estimate_tokens(text: str) -> int:
    """Return the default token count of a text: ``ceil(len(text) / 4)``, four characters a token."""
    return -(-len(text) // 4)


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
            chunks. ``None`` (the default) works it out for each query from what the query read
            (:func:`scar_core.scoring.query_continuity_bonus`), so no model needs calibrating; a
            number fixes it in cosine units. With 0 (and ``lambda_=0``) budget mode is plain
            top-k.
        lambda_: Weight of the boundary penalty.
        window: How many steps a passage may grow from its retrieved chunk.
        direction: ``"both"``, ``"previous"`` or ``"next"``.
        max_tokens: A budget in tokens instead of chunks: the chosen chunks' tokens sum to at
            most ``max_tokens``, and ``k`` is only how many retrieved chunks are considered.
    """

    k: int = DEFAULT_K
    keep: int | None = None
    continuity_bonus: float | None = None
    lambda_: float = DEFAULT_LAMBDA
    window: int = DEFAULT_BUDGET_WINDOW
    direction: Direction = "both"
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        _check_int("k", self.k, 1)
        if self.keep is not None:
            _check_int("keep", self.keep, 1)
            if self.keep > self.k:
                raise InvalidSettingsError(
                    f"keep={self.keep} is larger than k={self.k}; at most k chunks are returned, "
                    "so lower keep or raise k."
                )
        if self.continuity_bonus is not None:
            _check_real("continuity_bonus", self.continuity_bonus, 0.0)
        _check_real("lambda_", self.lambda_, 0.0)
        _check_int("window", self.window, 1)
        _check_direction(self.direction)
        if self.max_tokens is not None:
            _check_int("max_tokens", self.max_tokens, 1)

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


#: Settings that apply to one mode only, with the fix when given for the other.
_BUDGET_ONLY = ("keep", "continuity_bonus", "max_tokens", "tokenizer")
_PAPER_ONLY = ("gamma", "window", "direction")


@dataclass(frozen=True)
class ScarSettings:
    """Every setting the adapters take, declared once: names, defaults, ranges and messages.

    ``SCARRetriever`` and ``SCARNodePostprocessor`` take these as keyword arguments and keep
    them in their ``settings``; an unknown name is refused by :func:`take_settings`.

    Attributes:
        mode: ``"budget"`` (exactly ``k`` chunks) or ``"paper"`` (the paper's rule on ``k``
            seeds; the count varies).
        k: Chunks returned (budget) or seeds (paper); ``None``: the adapter's default
            (LangChain: 4; LlamaIndex: as many nodes as it receives). With ``max_tokens``:
            how many retrieved chunks the auction considers, so raise it with the budget
            (e.g. ``k=20`` for ``max_tokens=2000``).
        lambda_: Weight of the boundary penalty, both modes.
        keep: Budget mode: the best retrieved chunks always kept (default: 2, at most ``k``).
        continuity_bonus: Budget mode: ``alpha``, the bonus of a continuing neighbour; ``None``:
            worked out for each query from what it read (no calibration needed).
        max_tokens: Budget mode: a budget in tokens instead of chunks. The chunks returned are
            the set with the highest total bid whose tokens fit ``max_tokens`` (the best
            ``keep`` hits are kept as far as they fit, in rank order; the best hit is kept
            even alone over the budget, so a result is never empty).
        tokenizer: Budget mode, with ``max_tokens``: counts a chunk's tokens from its text;
            ``None``: :func:`estimate_tokens`, ``ceil(len(text) / 4)``. Pass your LLM's
            counter for exact budgets, e.g. ``lambda t: len(encoding.encode(t))``.
        gamma: Paper mode: the relative threshold.
        window: Paper mode: how many steps a passage may grow from its seed (1).
        direction: Paper mode: ``"both"``, ``"previous"`` or ``"next"``.
        neighbor_filter: Whether a neighbour may be returned, from its metadata; applied to
            every neighbour read, on top of the search's own filter.
        allow_unfiltered_neighbors: Read neighbours without a search filter SCAR cannot apply
            (only where no filter guards access); filters it can apply are still applied.

    Raises:
        InvalidSettingsError: For a value out of range, or a setting of the other mode, with
            the fix in the message.
    """

    mode: Literal["budget", "paper"] = "budget"
    k: int | None = None
    lambda_: float = DEFAULT_LAMBDA
    keep: int | None = None
    continuity_bonus: float | None = None
    gamma: float | None = None
    window: int | None = None
    direction: Direction | None = None
    max_tokens: int | None = None
    tokenizer: Callable[[str], int] | None = None
    neighbor_filter: Callable[[Mapping[str, Any]], bool] | None = None
    allow_unfiltered_neighbors: bool = False

    def __post_init__(self) -> None:
        if self.mode not in ("budget", "paper"):
            raise InvalidSettingsError(f"mode={self.mode!r} is not valid; use 'budget' or 'paper'.")
        other = "paper" if self.mode == "budget" else "budget"
        for name in _PAPER_ONLY if self.mode == "budget" else _BUDGET_ONLY:
            if getattr(self, name) is not None:
                raise InvalidSettingsError(
                    f"{name}={getattr(self, name)!r} does not apply to mode={self.mode!r}: it "
                    f"applies only to mode={other!r}; pass mode={other!r} or drop {name}."
                )
        if self.tokenizer is not None and not callable(self.tokenizer):
            raise InvalidSettingsError(
                f"tokenizer={self.tokenizer!r} is a {type(self.tokenizer).__name__}, not a "
                "function; pass a function of a text that returns its token count, e.g. "
                "tokenizer=lambda text: len(encoding.encode(text)) with a tiktoken encoding."
            )
        if self.tokenizer is not None and self.max_tokens is None:
            raise InvalidSettingsError(
                f"tokenizer={self.tokenizer!r} counts tokens only for a token budget: pass "
                "max_tokens too (e.g. max_tokens=2000), or drop tokenizer."
            )
        if self.neighbor_filter is not None and not callable(self.neighbor_filter):
            raise InvalidSettingsError(
                f"neighbor_filter={self.neighbor_filter!r} is not callable; pass a function of a "
                "chunk's metadata that returns True for chunks the query may see."
            )
        if not isinstance(self.allow_unfiltered_neighbors, bool):
            raise InvalidSettingsError(
                f"allow_unfiltered_neighbors={self.allow_unfiltered_neighbors!r} must be True "
                "or False."
            )
        self.for_query(self.k if self.k is not None else max(DEFAULT_K, self.keep or 1), True)

    def for_query(
        self, k: int, strict: bool = False, name: str = "k"
    ) -> BudgetSettings | PaperSettings:
        """Return the mode's settings at budget ``k`` (``keep`` is capped at ``k`` unless strict).

        Args:
            k: The budget (budget mode) or seeds (paper mode).
            strict: Refuse ``keep > k`` instead of capping it (when ``k`` was set, not a call's).
            name: What the adapter calls ``k``, for messages (LlamaIndex: ``top_n``).

        Raises:
            InvalidSettingsError: If ``k`` or a setting is out of range.
        """
        _check_int(name, k, 1)
        if self.mode == "budget" and k > MAX_AUCTION_HITS:
            raise InvalidSettingsError(
                f"{name}={k} is more retrieved chunks than the budget auction weighs; the limit "
                f"is {name} <= {MAX_AUCTION_HITS} (its time and memory grow as {name} squared). "
                f"Lower {name}, or use mode='paper', which expands {name} seeds one by one."
            )
        if strict and self.mode == "budget" and self.keep is not None and self.keep > k:
            raise InvalidSettingsError(
                f"keep={self.keep} is larger than {name}={k}; at most {name} chunks are "
                f"returned, so lower keep or raise {name}."
            )
        if self.mode == "paper":
            paper = {n: getattr(self, n) for n in _PAPER_ONLY if getattr(self, n) is not None}
            return PaperSettings(k=k, lambda_=self.lambda_, **paper)
        budget: dict[str, Any] = {"lambda_": self.lambda_}
        if self.continuity_bonus is not None:
            budget["continuity_bonus"] = self.continuity_bonus
        if self.keep is not None:
            budget["keep"] = min(self.keep, k)
        if self.max_tokens is not None:
            budget["max_tokens"] = self.max_tokens
        return BudgetSettings(k=k, **budget)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The setting names, in declaration order."""
        return tuple(f.name for f in fields(cls))


def take_settings(
    given: dict[str, Any], owner: str, own: Iterable[str], hints: Mapping[str, str] | None = None
) -> ScarSettings:
    """Move SCAR's settings out of an adapter's keyword arguments, refusing unknown names.

    Args:
        given: The keyword arguments; SCAR's settings are popped from it.
        owner: The adapter's name, for messages.
        own: The adapter's own argument names, left in ``given``.
        hints: Names users bring from elsewhere, with what to write instead.

    Returns:
        The settings, validated.

    Raises:
        InvalidSettingsError: For an unknown name (with the nearest known ones) or a bad value.
    """
    known = (*ScarSettings.names(), *own)
    for name in given:
        if name in known:
            continue
        hint = (hints or {}).get(name)
        if hint is None:
            near = difflib.get_close_matches(name, known, n=2, cutoff=0.6)
            hint = f"did you mean {' or '.join(near)}?" if near else f"known: {', '.join(known)}."
        raise InvalidSettingsError(f"{owner} got an unknown setting {name}={given[name]!r}; {hint}")
    return ScarSettings(**{n: given.pop(n) for n in ScarSettings.names() if n in given})
