"""SCAR's settings: :class:`ScarSettings` (the adapters'), and each mode's at one query's ``k``."""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal

from scar_core._errors import InvalidSettingsError

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
#: The same with a token budget (``max_tokens``), whose programme keeps a front of up to
#: ``TOKEN_GRID + 1`` token sums per state and candidate: at this limit one selection took at
#: most 0.35 s and 160 MiB whatever ``max_tokens``.
MAX_TOKEN_AUCTION_HITS = 100
#: A token budget is weighed in units of ``ceil(max_tokens / TOKEN_GRID)`` tokens, each chunk's
#: count rounded up: exact up to this many tokens, and past it the answer still fits while no
#: front holds more than ``TOKEN_GRID + 1`` points.
TOKEN_GRID = 4096


def auction_limit(max_tokens: int | None) -> int:
    """The most retrieved chunks one budget auction weighs, with or without a token budget."""
    return MAX_AUCTION_HITS if max_tokens is None else MAX_TOKEN_AUCTION_HITS


#: Each number setting's ``(kind, lowest, highest)``, checked and in the JSON schema (``gamma``'s
#: lowest excluded).
BOUNDS: dict[str, tuple[type, float, float]] = {
    "k": (int, 1, math.inf),
    "keep": (int, 1, math.inf),
    "window": (int, 1, math.inf),
    "max_tokens": (int, 1, math.inf),
    "lambda_": (float, 0.0, math.inf),
    "continuity_bonus": (float, 0.0, math.inf),
    "gamma": (float, 0.0, 1.0),
}
_BUDGET_ONLY = ("keep", "continuity_bonus", "max_tokens", "tokenizer")
_PAPER_ONLY = ("gamma", "window", "direction")
#: Functions, not data: left out when an adapter is serialised.
FUNCTIONS = ("tokenizer", "neighbor_filter")


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


def check_int(name: str, value: object, minimum: int = 1) -> int:
    """Return ``value`` if it is an integer >= ``minimum`` (not a bool), else raise naming it."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidSettingsError(
            f"{name}={value!r} is not valid; it must be an integer >= {minimum}."
        )
    return value


def _check(name: str, value: object) -> None:
    kind, low, high = BOUNDS[name]
    if kind is int:
        check_int(name, value, int(low))
        return
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not math.isfinite(value)
        or not low <= value <= high
    ):
        bounds = f">= {low}" if high == math.inf else f"between {low} and {high}"
        raise InvalidSettingsError(f"{name}={value!r} is not valid; it must be a number {bounds}.")
    if name == "gamma" and value == low:
        raise InvalidSettingsError("gamma=0 is not valid; it must be in (0, 1] (paper: 0.8).")


@dataclass(frozen=True)
class BudgetSettings:
    """Budget mode: return exactly ``k`` chunks, spent where they cover the most evidence.

    The fields are :class:`ScarSettings`' of the same names (``k``: the budget, or with
    ``max_tokens`` how many retrieved chunks are weighed). Passages grow up to two steps from
    their retrieved chunk, both ways; ``_window`` is for studies only. A ``continuity_bonus`` of 0
    with ``lambda_=0`` is plain top-k.
    """

    k: int = DEFAULT_K
    keep: int | None = None
    continuity_bonus: float | None = None
    lambda_: float = DEFAULT_LAMBDA
    max_tokens: int | None = None
    _window: int = field(default=DEFAULT_BUDGET_WINDOW, repr=False)

    def __post_init__(self) -> None:
        for name in ("k", "keep", "continuity_bonus", "lambda_", "max_tokens"):
            if getattr(self, name) is not None:
                _check(name, getattr(self, name))
            if name == "keep" and self.keep is not None and self.keep > self.k:
                raise InvalidSettingsError(
                    f"keep={self.keep} is larger than k={self.k}; at most k chunks are "
                    "returned, so lower keep or raise k."
                )
        check_int("_window", self._window)

    @property
    def window(self) -> int:
        """How many steps a passage may grow from its retrieved chunk."""
        return self._window

    @property
    def direction(self) -> Direction:
        """Passages grow both ways."""
        return "both"

    @property
    def kept(self) -> int:
        """The number of best retrieved chunks that are always kept."""
        return self.keep if self.keep is not None else default_keep(self.k)


@dataclass(frozen=True)
class PaperSettings:
    """The paper's rule: ``k`` seeds, each neighbour added when ``S > gamma * cos(q, seed)``.

    The fields are :class:`ScarSettings`' of the same names (``k``: the seeds).
    """

    k: int = DEFAULT_K
    lambda_: float = DEFAULT_LAMBDA
    gamma: float = DEFAULT_GAMMA
    window: int = 1
    direction: Direction = "both"

    def __post_init__(self) -> None:
        for name in ("k", "lambda_", "gamma", "window"):
            _check(name, getattr(self, name))
        if self.direction not in ("both", "previous", "next"):
            raise InvalidSettingsError(
                f"direction={self.direction!r} is not valid; use 'both', 'previous' or 'next'."
            )


def _json_schema_extra(schema: dict[str, Any], cls: type) -> None:
    properties = schema.get("properties", {})
    for name, (kind, low, high) in BOUNDS.items():
        if name in properties:
            low_key = "exclusiveMinimum" if name == "gamma" else "minimum"
            properties[name][low_key] = int(low) if kind is int else low
            if high != math.inf:
                properties[name]["maximum"] = high


def _function_json_schema(schema: Any, handler: Any) -> dict[str, Any]:
    return {}


@dataclass(frozen=True)
class ScarSettings:
    """Every setting the adapters take, declared once: names, defaults, bounds and messages.

    ``SCARRetriever`` and ``SCARNodePostprocessor`` take these as keyword arguments and keep
    them in their ``settings``; an unknown name is refused by :func:`take_settings`. Under
    pydantic (the adapters) each field has its description and bounds in the JSON schema, and
    serialises as data; ``tokenizer`` and ``neighbor_filter``, being functions, are left out
    of ``model_dump()``, ``model_dump_json()`` and ``to_json()``, and must be passed again when
    an adapter is rebuilt from its data.

    Raises:
        InvalidSettingsError: For a value out of range, or a setting of the other mode, with
            the fix in the message.
    """

    __pydantic_config__: ClassVar[dict[str, Any]] = {
        "use_attribute_docstrings": True,
        "json_schema_extra": _json_schema_extra,
    }

    mode: Literal["budget", "paper"] = "budget"
    """"budget" (exactly k chunks) or "paper" (the paper's rule on k seeds; the count varies)."""
    k: int | None = None
    """Chunks returned (budget) or seeds (paper); None: the adapter's default (LangChain: 4;
    LlamaIndex: as many nodes as it receives). With max_tokens: how many retrieved chunks the
    auction considers, so raise it with the budget (e.g. k=20 for max_tokens=2000)."""
    lambda_: float = DEFAULT_LAMBDA
    """Weight of the boundary penalty, both modes."""
    keep: int | None = None
    """Budget mode: the best retrieved chunks always kept (default: 2, at most k)."""
    continuity_bonus: float | None = None
    """Budget mode: alpha, the bonus of a continuing neighbour; None: worked out for each query
    from what it read (no calibration needed)."""
    gamma: float | None = None
    """Paper mode: the relative threshold (0.8), in (0, 1]."""
    window: int | None = None
    """Paper mode: how many steps a passage may grow from its seed (1)."""
    direction: Direction | None = None
    """Paper mode: "both", "previous" or "next" ("both")."""
    max_tokens: int | None = None
    """Budget mode: a budget in tokens instead of chunks: the set with the highest total bid
    whose tokens fit (the best keep hits as far as they fit, in rank order; the best hit even
    alone over the budget, so a result is never empty)."""
    tokenizer: Callable[[str], int] | None = None
    """Budget mode, with max_tokens: counts a chunk's tokens from its text; None:
    ceil(len(text) / 4). E.g. lambda t: len(encoding.encode(t)). A function: left out when
    serialised."""
    neighbor_filter: Callable[[Mapping[str, Any]], bool] | None = None
    """Whether a neighbour may be returned, from its metadata; applied to every neighbour read,
    on top of the search's own filter. A function: left out when serialised."""
    allow_unfiltered_neighbors: bool = False
    """Read neighbours without a search filter SCAR cannot apply (only where no filter guards
    access); filters it can apply are still applied."""

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

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        """Pydantic's schema (plain dicts, so no pydantic import), leaving out :data:`FUNCTIONS`."""
        schema = handler(source)
        for item in handler.resolve_ref_schema(schema)["schema"]["fields"]:
            if item["name"] in FUNCTIONS:
                item["serialization_exclude"] = True
                metadata = item["schema"].setdefault("metadata", {})
                metadata["pydantic_js_functions"] = [_function_json_schema]
        return schema

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
        check_int(name, k)
        if self.mode == "budget" and k > (limit := auction_limit(self.max_tokens)):
            budget = "" if self.max_tokens is None else f" with max_tokens={self.max_tokens}"
            raise InvalidSettingsError(
                f"{name}={k} is more retrieved chunks than the budget auction weighs{budget}; the "
                f"limit is {name} <= {limit} (its time and memory grow as {name} squared). "
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
        keep = None if self.keep is None else min(self.keep, k)
        return BudgetSettings(k, keep, self.continuity_bonus, self.lambda_, self.max_tokens)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The setting names, in declaration order."""
        return tuple(f.name for f in fields(cls))


def take_settings(
    given: dict[str, Any], owner: str, own: Iterable[str], hints: Mapping[str, str] | None = None
) -> ScarSettings:
    """Pop SCAR's settings from ``given`` (an adapter's keyword arguments; its ``own`` stay).

    An unknown name is refused with ``hints[name]``, else the nearest known names.
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
