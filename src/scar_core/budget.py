"""Budgeted SCAR: spend a fixed number of chunk (or token) slots on the chunks that cover most.

Expansion of selected chunks competes with further retrieved chunks for every slot.

Why: plain SCAR decides each neighbour against its own seed and so returns a variable number of
chunks. A RAG engineer usually has a context budget instead, and the honest baseline at a budget
of ``B`` chunks is plain top-``B``. This policy spends the same ``B`` slots better.

The rule (greedy, one slot at a time):

* A further retrieved chunk ``x`` (the best one not yet selected) bids ``cos(e_q, e_x)``.
* Every unselected chunk ``n`` adjacent to a selected chunk ``v`` bids
  ``S + alpha`` with ``S = cos(e_q, e_n) - lambda_ * (1 - cos(e_v, e_n))``: SCAR's expansion score
  plus a *continuity bonus* ``alpha`` (in cosine units) for continuing a passage.
* The highest bid takes the slot (a retrieved chunk wins a tie). Repeat until the budget is full.

The first ``min_seeds`` retrieved chunks are always kept: no retrieved seed is ever lost.
``alpha`` depends on the embedding model's cosine scale; :mod:`scar_core.calibrate` estimates it
from the corpus alone. With MiniLM-L6 it is about 0.2.

Recorded decisions use the plain-SCAR vocabulary: an accepted neighbour's ``threshold`` is the
bid it beat, minus ``alpha`` (so ``score > threshold`` holds); the neighbours still bidding when
the budget ran out are recorded as rejected against the weakest bid that won a slot, or, when
they entered the race after the last slot was taken, as skipped with reason ``"over_budget"``.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import numpy.typing as npt

from scar_core.errors import InvalidSettingsError, InvalidVectorError, MissingVectorError
from scar_core.graph import LinkLookup, NeighborGraph, Step, steps_for
from scar_core.policy import (
    Decision,
    ExpansionResult,
    Links,
    SelectedChunk,
    SkippedNeighbor,
    SkipReason,
    numeric_array,
    unit_vector_or_problem,
)
from scar_core.settings import DEFAULT_LAMBDA, Direction, validate_direction, validate_lambda
from scar_core.vectors import VectorSource, lookup_vectors

__all__ = [
    "DEFAULT_BUDGET",
    "DEFAULT_CONTINUITY_BONUS",
    "DEFAULT_SEEDS",
    "BudgetSettings",
    "default_budget_settings",
    "select_within_budget",
    "validate_continuity_bonus",
]

#: Continuity bonus measured best for all-MiniLM-L6-v2 on the dev sets (see the README).
DEFAULT_CONTINUITY_BONUS = 0.2
#: The adapters' shipped chunk budget.
DEFAULT_BUDGET = 10
#: The adapters' shipped number of retrieved chunks that are always kept.
DEFAULT_SEEDS = 3


@dataclass(frozen=True)
class BudgetSettings:
    """Settings of budgeted selection.

    Attributes:
        max_chunks: How many chunks to return (the budget ``B``), integer ``>= min_seeds``.
        continuity_bonus: ``alpha``, added to a neighbour's expansion score when it bids against
            a further retrieved chunk; ``>= 0``. ``0`` makes expansion rare (close to top-B).
        lambda_: Boundary-penalty weight, as in plain SCAR; ``>= 0``.
        min_seeds: How many of the best retrieved chunks are always kept; integer ``>= 1``.
        window: How far from its seed a passage may grow, or ``None`` for no limit other than
            the budget.
        direction: ``"both"``, ``"previous"`` or ``"next"``.
        max_tokens: Optional token budget; when set, a chunk that would overflow it is passed
            over (seeds kept under ``min_seeds`` are never dropped). Needs ``token_counts``.
    """

    max_chunks: int
    continuity_bonus: float = DEFAULT_CONTINUITY_BONUS
    lambda_: float = DEFAULT_LAMBDA
    min_seeds: int = 1
    window: int | None = None
    direction: Direction = "both"
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        _check_positive_int("min_seeds", self.min_seeds)
        _check_positive_int("max_chunks", self.max_chunks)
        if self.max_chunks < self.min_seeds:
            raise InvalidSettingsError(
                f"max_chunks={self.max_chunks} is smaller than the {self.min_seeds} seeds that are "
                "always kept; raise the budget or lower the number of seeds (k)."
            )
        bonus = self.continuity_bonus
        if (
            not isinstance(bonus, (int, float))
            or isinstance(bonus, bool)
            or not math.isfinite(bonus)
            or bonus < 0
        ):
            raise InvalidSettingsError(
                f"continuity_bonus={bonus!r} is not valid; it must be a finite number >= 0 "
                "(about 0.2 for MiniLM-L6; `scar calibrate` estimates it for your model)."
            )
        validate_lambda(self.lambda_)
        if self.window is not None:
            _check_positive_int("window", self.window)
        validate_direction(self.direction)
        if self.max_tokens is not None:
            _check_positive_int("max_tokens", self.max_tokens)


def default_budget_settings() -> BudgetSettings:
    """Return the configuration the adapters ship with (``scar eval``'s method ``default``)."""
    return BudgetSettings(
        max_chunks=DEFAULT_BUDGET,
        continuity_bonus=DEFAULT_CONTINUITY_BONUS,
        min_seeds=DEFAULT_SEEDS,
    )


def validate_continuity_bonus(value: object) -> float:
    """Return a continuity bonus an adapter was given as a float, or raise.

    Any real number type (numpy scalars included, booleans not) that is finite and ``>= 0``.

    Raises:
        InvalidSettingsError: Naming the value and the valid range.
    """
    if (
        not isinstance(value, numbers.Real)
        or isinstance(value, (bool, np.bool_))
        or not math.isfinite(value)
        or value < 0
    ):
        raise InvalidSettingsError(
            f"continuity_bonus={value!r} is not valid; it must be a finite number >= 0 "
            "(0.2 for all-MiniLM-L6-v2; `scar calibrate` estimates it for your model)."
        )
    return float(value)


def _check_positive_int(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidSettingsError(f"{name}={value!r} is not valid; it must be an integer >= 1.")


_priority = operator.attrgetter("priority")


def _query_unit(query: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """The query as a unit vector, or an :class:`InvalidVectorError` saying what is wrong."""
    query_vector = numeric_array(query, "the query vector")
    if query_vector.ndim != 1 or query_vector.shape[0] == 0:
        raise InvalidVectorError(f"the query vector has shape {query_vector.shape}; expected 1-D.")
    unit, _ = unit_vector_or_problem(query_vector, query_vector.shape[0])
    if unit is not None:
        return unit
    if not np.isfinite(query_vector).all():
        raise InvalidVectorError("the query vector has NaN or infinite values.")
    raise InvalidVectorError("the query vector is zero; check that the query is not empty.")


@dataclass(slots=True)
class _Bid:
    priority: float
    chunk_id: str
    via_id: str
    seed_id: str
    seed_rank: int
    direction: Step
    distance: int
    relevance: float
    penalty: float
    score: float


def select_within_budget(
    query: npt.ArrayLike,
    ranked_ids: Sequence[str],
    neighbors: Links | LinkLookup,
    vectors: VectorSource,
    settings: BudgetSettings,
    *,
    token_counts: Mapping[str, int] | None = None,
) -> ExpansionResult:
    """Pick ``settings.max_chunks`` chunks for a query; see the module docstring for the rule.

    Args:
        query: The query embedding (1-D, any scale).
        ranked_ids: Retrieved chunk ids, best first. Provide at least ``max_chunks`` of them when
            you can, so that further retrieved chunks can compete with expansion.
        neighbors: ``id -> (previous, next)`` links, a :class:`NeighborGraph`, or any
            :class:`~scar_core.graph.LinkLookup` (which may fetch links lazily from a store).
        vectors: ``id -> vector`` or a :class:`~scar_core.vectors.VectorLookup`; the vectors of a
            newly selected chunk's neighbours are fetched in one batch.
        settings: The budget and the bonus.
        token_counts: Tokens of each chunk, needed with ``settings.max_tokens``.

    Returns:
        The selection: retrieved chunks have origin ``"seed"`` (score ``cos(q, c)``), added
        neighbours origin ``"neighbor"`` (score ``S``), each with its decision.

    Raises:
        InvalidVectorError: If the query or a kept seed's vector is unusable.
        MissingVectorError: If a kept seed has no vector.
        InvalidSettingsError: If ``max_tokens`` is set without ``token_counts``.
    """
    if settings.max_tokens is not None and token_counts is None:
        raise InvalidSettingsError(
            "max_tokens is set but token_counts is None; pass the token count of each chunk."
        )
    query_unit = _query_unit(query)
    # The attribute test is what isinstance(neighbors, LinkLookup) checks, at a fraction of the
    # cost of a runtime protocol check (adapters call this once per query or more).
    graph: LinkLookup = (
        cast(LinkLookup, neighbors)
        if callable(getattr(neighbors, "step", None))
        else NeighborGraph(cast(Links, neighbors))
    )
    steps = steps_for(settings.direction)
    ranked = list(dict.fromkeys(ranked_ids))
    dimension = query_unit.shape[0]

    units: dict[str, npt.NDArray[np.float64]] = {}
    relevance: dict[str, float] = {}
    problems: dict[str, str] = {}

    def load(ids: Sequence[str]) -> None:
        wanted = [c for c in ids if c not in units and c not in problems]
        if not wanted:
            return
        if len(wanted) > 1:
            wanted = list(dict.fromkeys(wanted))
        found = lookup_vectors(vectors, wanted)
        for chunk_id in wanted:
            if chunk_id not in found:
                problems[chunk_id] = "no vector is stored for it"
                continue
            unit, problem = unit_vector_or_problem(found[chunk_id], dimension)
            if unit is None:
                problems[chunk_id] = problem or "it is unusable"
                continue
            units[chunk_id] = unit
            relevance[chunk_id] = float(unit.dot(query_unit))

    load(ranked)
    forced = ranked[: settings.min_seeds]
    for seed in forced:
        if seed not in units:
            detail = problems.get(seed, "")
            if detail == "no vector is stored for it":
                raise MissingVectorError(f"seed {seed!r} has no vector; every kept seed needs one.")
            raise InvalidVectorError(f"the vector of seed {seed!r} is unusable: {detail}.")
    usable = [c for c in ranked if c in units]
    tokens_left = settings.max_tokens

    selected: dict[str, SelectedChunk] = {}
    distance_of: dict[str, int] = {}
    decisions: list[Decision] = []
    skipped: list[SkippedNeighbor] = []
    frontier: dict[str, _Bid] = {}
    passed_over: set[str] = set()
    weakest_winning_bid = math.inf
    floor = -(1.0 + 2.0 * settings.lambda_)

    def fits(chunk_id: str) -> bool:
        return (
            tokens_left is None
            or token_counts is None
            or token_counts.get(chunk_id, 0) <= tokens_left
        )

    def take(chunk: SelectedChunk, distance: int) -> None:
        nonlocal tokens_left
        selected[chunk.chunk_id] = chunk
        distance_of[chunk.chunk_id] = distance
        frontier.pop(chunk.chunk_id, None)
        if tokens_left is not None and token_counts is not None:
            tokens_left -= token_counts.get(chunk.chunk_id, 0)
        grow(chunk.chunk_id, chunk.seed_id, chunk.seed_rank, distance)

    def grow(via: str, seed: str, seed_rank: int, distance: int) -> None:
        if settings.window is not None and distance >= settings.window:
            return
        candidates = [(step, graph.step(via, step)) for step in steps]
        load([c for _, c in candidates if c is not None and c not in selected])
        for step, candidate in candidates:
            if candidate is None or candidate in selected or candidate in passed_over:
                continue
            if candidate not in units:
                reason: SkipReason = (
                    "missing_vector"
                    if problems[candidate] == "no vector is stored for it"
                    else "invalid_vector"
                )
                skipped.append(SkippedNeighbor(seed, candidate, reason, problems[candidate]))
                passed_over.add(candidate)
                continue
            penalty = 1.0 - float(units[via].dot(units[candidate]))
            score = relevance[candidate] - settings.lambda_ * penalty
            bid = _Bid(
                score + settings.continuity_bonus,
                candidate,
                via,
                seed,
                seed_rank,
                step,
                distance + 1,
                relevance[candidate],
                penalty,
                score,
            )
            current = frontier.get(candidate)
            if current is None or bid.priority > current.priority:
                frontier[candidate] = bid

    rank_of = {chunk_id: rank for rank, chunk_id in enumerate(ranked)}
    for seed in forced:
        take(SelectedChunk(seed, "seed", seed, rank_of[seed], relevance[seed]), 0)

    cursor = 0
    while len(selected) < settings.max_chunks:
        while cursor < len(usable) and (usable[cursor] in selected or not fits(usable[cursor])):
            cursor += 1
        next_seed = usable[cursor] if cursor < len(usable) else None
        seed_bid = relevance[next_seed] if next_seed is not None else -math.inf
        if tokens_left is not None:
            for chunk_id in [c for c in frontier if not fits(c)]:
                passed_over.add(chunk_id)
                del frontier[chunk_id]
        best = max(frontier.values(), key=_priority, default=None)
        if best is not None and best.priority > seed_bid:
            competing = seed_bid if next_seed is not None else floor + settings.continuity_bonus
            decision = Decision(
                best.seed_id,
                best.chunk_id,
                best.via_id,
                best.direction,
                best.distance,
                best.relevance,
                best.penalty,
                best.score,
                competing - settings.continuity_bonus,
                True,
            )
            decisions.append(decision)
            weakest_winning_bid = min(weakest_winning_bid, best.priority)
            take(
                SelectedChunk(
                    best.chunk_id, "neighbor", best.seed_id, best.seed_rank, best.score, decision
                ),
                best.distance,
            )
        elif next_seed is not None:
            weakest_winning_bid = min(weakest_winning_bid, seed_bid)
            take(SelectedChunk(next_seed, "seed", next_seed, rank_of[next_seed], seed_bid), 0)
        else:
            break

    bar = (
        weakest_winning_bid
        if math.isfinite(weakest_winning_bid)
        else floor + settings.continuity_bonus
    )
    for bid in frontier.values():
        if bid.priority > bar:
            detail = f"the budget was full before its bid of {bid.priority:.4f} was compared"
            skipped.append(SkippedNeighbor(bid.seed_id, bid.chunk_id, "over_budget", detail))
            continue
        decisions.append(
            Decision(
                bid.seed_id,
                bid.chunk_id,
                bid.via_id,
                bid.direction,
                bid.distance,
                bid.relevance,
                bid.penalty,
                bid.score,
                bar - settings.continuity_bonus,
                False,
            )
        )
    return ExpansionResult(tuple(selected.values()), tuple(decisions), tuple(skipped))
