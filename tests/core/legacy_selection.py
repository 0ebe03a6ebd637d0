"""A frozen copy of scar_core/_selection.py before issue 45: the reference the new solver must match.

Both take the query vector, the retrieved chunk ids best first, and a mapping of every chunk they
may look at (its vector and its previous/next links). Neither reads from a store:
:class:`scar_core._driver.QueryDriver` decides what to read and then calls :func:`select`.

**Paper mode** (:func:`paper_expand`). Seeds are walked best first; in each allowed direction the
walk visits the chunks 1, 2, ... ``window`` steps away. A chunk already selected is passed
through. Any other chunk ``n`` is accepted when ``S > gamma * cos(q, seed)``, where ``S`` uses the
boundary between ``n`` and the chunk just before it on the walk. A rejection ends the walk in that
direction, so a passage has no holes.

**Budget mode** (:func:`budget_select`), the segment auction. Exactly ``k`` chunks (or, with
``max_tokens``, chunks of at most that many tokens) are chosen from the ``k`` retrieved chunks and
the chunks within ``window`` steps of them:

* the best ``keep`` retrieved chunks are always chosen;
* every passage (run of linked chosen chunks) holds a retrieved chunk;
* among such sets, the one with the highest total bid wins, where every chosen chunk bids its
  relevance ``cos(q, x)`` and every linked pair of chosen chunks adds ``alpha - lambda_ * b``.

So a neighbour joined to a chosen chunk bids ``S + alpha`` (``alpha`` is the continuity bonus:
by default each query's own, :func:`scar_core._scoring.query_continuity_bonus`),
and a run of two or three neighbours bids as a whole against the further hits it would displace.
The best set is found exactly, by one dynamic programme over the chains of linked candidates laid
end to end, vectorised over the weight taken (1 a chunk, or its tokens).

The programme (:func:`_sweep`) walks the candidates chain after chain; each chunk ``x`` is in one
of three states, reached from the state of the chunk before it (``pair`` is ``alpha - lambda_ * b``
with it, counted only inside a chain; at a chain's start, "from" means "after closing the run"):

============  ===============================  =============================================
state         meaning                          from, adding
============  ===============================  =============================================
``OUT``       not taken                        ``OUT`` or ``ANCHORED``, 0 (never ``OPEN``: a
                                               run must hold a hit; a forced hit is never OUT)
``OPEN``      taken, its run holds no hit yet  ``OUT``: ``v(x)``; ``OPEN``: ``v(x) + pair``
                                               (only if ``x`` is not a hit)
``ANCHORED``  taken, its run holds a hit       ``OUT``: ``v(x)`` if ``x`` is a hit; ``OPEN``:
                                               ``v(x) + pair`` if it is; ``ANCHORED``:
                                               ``v(x) + pair``
============  ===============================  =============================================

Each state's best total is kept for every weight taken so far (a chunk weighs 1, or its tokens),
as a numpy vector; the answer is the best ``OUT`` or ``ANCHORED`` total at weight ``k`` (or at
most ``max_tokens``). A second pass from the other end gives each decision's flip threshold.

A chunk whose vector is missing or unusable is never scored: as a neighbour it ends the walk and is
listed in :attr:`Selection.unscored`; as a retrieved chunk it keeps its rank (it bids like the
retrieved chunk just above it) but grows no passage.

This module is longer than most (about 700 lines) because it holds both selections and the exact
solver they share the chunk records, walk and passages with; split, the pieces would only import
each other.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from scar_core._scoring import (
    boundary_penalty,
    expansion_score,
    paper_threshold,
    query_continuity_bonus,
    unit_rows,
    unit_vector,
)
from scar_core._settings import BudgetSettings, Direction, PaperSettings

__all__ = [
    "Chunk",
    "Decision",
    "Selected",
    "Selection",
    "budget_select",
    "fill_in_order",
    "paper_expand",
    "select",
]

Step = Literal["previous", "next"]
Origin = Literal["hit", "neighbor"]


@dataclass(frozen=True)
class Chunk:
    """What SCAR needs to know of one chunk.

    Attributes:
        id: The chunk's id in the store.
        vector: Its embedding, or ``None`` when none could be had.
        previous_id: The id of the chunk before it in its document, if any.
        next_id: The id of the chunk after it, if any.
    """

    id: str
    vector: npt.ArrayLike | None = None
    previous_id: str | None = None
    next_id: str | None = None

    def step(self, direction: Step) -> str | None:
        """Return the id one step away in ``direction`` (a link to itself counts as none)."""
        target = self.previous_id if direction == "previous" else self.next_id
        return target if target and target != self.id else None


@dataclass(frozen=True)
class Decision:
    """How one neighbour was decided.

    Attributes:
        neighbor_id: The candidate chunk.
        seed_id: The retrieved chunk whose passage it would extend.
        via_id: The chunk across whose boundary the penalty was measured.
        direction: ``"previous"`` or ``"next"``.
        distance: Steps from the retrieved chunk.
        relevance: ``cos(q, n)``.
        boundary_penalty: ``b = 1 - cos(via, n)``.
        score: ``S = relevance - lambda_ * b``.
        threshold: The bar ``S`` was compared with: accepted exactly when ``S > threshold``. In
            paper mode ``gamma * cos(q, seed)``; in budget mode the score at which the auction's
            verdict on this neighbour would flip, all else equal: ``S`` less what taking it
            gains (or plus what it would cost) the best total bid, within the range of ``S``,
            ``[-1 - 2 * lambda_, 1]``.
        accepted: Whether it was selected.
    """

    neighbor_id: str
    seed_id: str
    via_id: str
    direction: Step
    distance: int
    relevance: float
    boundary_penalty: float
    score: float
    threshold: float
    accepted: bool


@dataclass(frozen=True)
class Selected:
    """One selected chunk.

    Attributes:
        chunk_id: Its id.
        origin: ``"hit"`` for a retrieved chunk, ``"neighbor"`` for an added one.
        seed_id: The retrieved chunk it belongs to (itself for a hit).
        seed_rank: Zero-based rank of that retrieved chunk.
        score: ``cos(q, c)`` for a hit, ``S`` for a neighbour.
        decision: The decision that added a neighbour; ``None`` for a hit.
    """

    chunk_id: str
    origin: Origin
    seed_id: str
    seed_rank: int
    score: float
    decision: Decision | None = None


@dataclass(frozen=True)
class Selection:
    """What SCAR selected for one query.

    Attributes:
        selected: The chunks: retrieved chunks best first, then neighbours (paper mode: in the
            order they were accepted; budget mode: by their retrieved chunk's rank, then distance).
        passages: Runs of adjacent selected chunks, ordered by their best hit's rank; inside a
            passage, chunks are in document order.
        decisions: Every neighbour decision, accepted or not.
        unscored: Chunks that were met but had no usable vector.
        continuity_bonus: Budget mode: the ``alpha`` this query's linked pairs were given (its own
            unless the settings fixed one); ``None`` in paper mode.
    """

    selected: tuple[Selected, ...]
    passages: tuple[tuple[str, ...], ...]
    decisions: tuple[Decision, ...] = ()
    unscored: tuple[str, ...] = field(default=())
    continuity_bonus: float | None = None

    @property
    def chunk_ids(self) -> list[str]:
        """Every selected chunk id, passage by passage."""
        return [chunk_id for passage in self.passages for chunk_id in passage]

    def get(self, chunk_id: str) -> Selected | None:
        """Return the selection record of ``chunk_id``, or ``None``."""
        return next((s for s in self.selected if s.chunk_id == chunk_id), None)


_STEPS: dict[str, tuple[Step, ...]] = {
    "both": ("previous", "next"),
    "previous": ("previous",),
    "next": ("next",),
}


def _steps(direction: Direction) -> tuple[Step, ...]:
    return _STEPS[direction]


class _Scored:
    """Unit vectors and query cosines of the chunks a selection touches, computed in one pass."""

    def __init__(self, query: npt.ArrayLike, chunks: Mapping[str, Chunk]) -> None:
        query_unit = unit_vector(query)
        ids = [c for c, chunk in chunks.items() if _vector_fits(chunk.vector, query_unit.shape[0])]
        matrix = np.array([chunks[c].vector for c in ids], dtype=np.float64).reshape(
            len(ids), query_unit.shape[0]
        )
        units, usable = unit_rows(matrix) if ids else (matrix, np.zeros(0, dtype=bool))
        self.units = {c: units[i] for i, c in enumerate(ids) if usable[i]}
        relevances = (units @ query_unit).tolist() if ids else []
        self.relevance = {c: relevances[i] for i, c in enumerate(ids) if usable[i]}

    def boundary_cosine(self, via: str, candidate: str) -> float:
        return float(self.units[via] @ self.units[candidate])


def _vector_fits(vector: object, dimension: int) -> bool:
    if vector is None:
        return False
    if isinstance(vector, np.ndarray):
        return bool(vector.shape == (dimension,))
    try:
        array = np.asarray(vector, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return array.shape == (dimension,)


def _hit_relevance(hits: Sequence[str], scored: _Scored) -> list[float]:
    """Each hit's cosine; a hit without a usable vector bids like the hit above it."""
    bids: list[float] = []
    for hit in hits:
        above = bids[-1] if bids else 1.0
        bids.append(scored.relevance.get(hit, above))
    return bids


def _passages(
    selected: Sequence[Selected], chunks: Mapping[str, Chunk]
) -> tuple[tuple[str, ...], ...]:
    """Group selected chunks into runs of linked chunks, best hit's rank first, document order."""
    ids = [s.chunk_id for s in selected]
    rank = {s.chunk_id: s.seed_rank for s in selected}
    runs = _runs(ids, chunks, {c for c in ids if c in chunks})
    return tuple(tuple(run) for run in sorted(runs, key=lambda run: min(rank[c] for c in run)))


def _runs(ids: Sequence[str], chunks: Mapping[str, Chunk], members: set[str]) -> list[list[str]]:
    """Split ``ids`` into runs of linked chunks, each in document order.

    Two members are linked when either names the other (``next`` or ``previous``); a chunk keeps
    one link each way, so inconsistent or circular links still give simple runs. An id outside
    ``members`` is a run of its own.
    """
    after: dict[str, str] = {}
    before: dict[str, str] = {}
    for chunk_id in (c for c in ids if c in members):
        chunk = chunks[chunk_id]
        for first, second in ((chunk_id, chunk.step("next")), (chunk.step("previous"), chunk_id)):
            free = first not in after and second not in before
            if free and first in members and second in members:
                after[first], before[second] = second, first
    placed: set[str] = set()
    runs: list[list[str]] = []
    for head in [*(c for c in ids if c not in before), *ids]:  # then any cycle, anywhere
        if head in placed:
            continue
        run = [head]
        placed.add(head)
        while (following := after.get(run[-1])) is not None and following not in placed:
            run.append(following)
            placed.add(following)
        runs.append(run)
    return runs


def paper_expand(
    query: npt.ArrayLike,
    hits: Sequence[str],
    chunks: Mapping[str, Chunk],
    settings: PaperSettings,
) -> Selection:
    """Apply the paper's rule to the first ``settings.k`` hits.

    Args:
        query: The query embedding, any scale.
        hits: Retrieved chunk ids, best first.
        chunks: Every chunk the walks may reach, with vectors and links.
        settings: λ, γ, window and direction.

    Returns:
        The seeds plus the accepted neighbours, with every decision.
    """
    scored = _Scored(query, chunks)
    seeds = list(dict.fromkeys(hits))[: settings.k]
    bids = _hit_relevance(seeds, scored)
    selected = {s: Selected(s, "hit", s, r, bids[r]) for r, s in enumerate(seeds)}
    decisions: list[Decision] = []
    unscored: list[str] = []
    for rank, seed in enumerate(seeds):
        if seed not in scored.units:
            continue
        threshold = paper_threshold(scored.relevance[seed], settings.gamma)
        for direction in _steps(settings.direction):
            via = seed
            for distance in range(1, settings.window + 1):
                candidate = chunks[via].step(direction) if via in chunks else None
                if candidate is None or candidate == seed:
                    break
                if candidate in selected:
                    via = candidate
                    continue
                if candidate not in scored.units or via not in scored.units:
                    unscored.append(candidate)
                    break
                cosine = scored.boundary_cosine(via, candidate)
                relevance = scored.relevance[candidate]
                score = expansion_score(relevance, cosine, settings.lambda_)
                decision = Decision(
                    candidate, seed, via, direction, distance, relevance,
                    boundary_penalty(cosine), score, threshold, score > threshold,
                )  # fmt: skip
                decisions.append(decision)
                if not decision.accepted:
                    break
                selected[candidate] = Selected(candidate, "neighbor", seed, rank, score, decision)
                via = candidate
    picked = tuple(selected.values())
    return Selection(picked, _passages(picked, chunks), tuple(decisions), tuple(unscored))


def budget_select(
    query: npt.ArrayLike,
    hits: Sequence[str],
    chunks: Mapping[str, Chunk],
    settings: BudgetSettings,
    tokens: Mapping[str, int] | None = None,
) -> Selection:
    """Choose exactly ``settings.k`` chunks (fewer only when fewer exist) by the segment auction.

    The candidates are the first ``k`` retrieved chunks and every chunk within ``window`` steps of
    one of them. Among the sets of ``k`` candidates that hold the best ``keep`` retrieved chunks
    and in which every passage holds a retrieved chunk, the one with the highest total bid wins:

    ``sum of cos(q, x) over its chunks + sum of (alpha - lambda_ * b) over its linked pairs``

    A chunk linked to a chosen chunk therefore bids ``S + alpha``, as in the paper's formula plus
    the continuity bonus, and a whole run of neighbours bids together against single hits. The
    optimum is found exactly, by dynamic programming along the chains of linked candidates.

    With ``settings.max_tokens``, the budget is in tokens: among the same candidates, the set
    with the highest total bid whose ``tokens`` sum to at most ``max_tokens`` wins (a knapsack,
    solved exactly by the same programme). The best ``keep`` hits are kept as far as they fit
    together, in rank order; the best hit is kept even alone over the budget (then it is all
    that can be returned, with any chunk of no tokens), so the result is never empty.

    Args:
        query: The query embedding, any scale.
        hits: Retrieved chunk ids, best first; only the first ``k`` are used.
        chunks: Every chunk within ``window`` steps of the hits, with vectors and links.
        settings: Budget, kept hits, continuity bonus, λ, window, direction, ``max_tokens``.
        tokens: With ``max_tokens``: each candidate's tokens (every chunk of ``chunks`` and every
            hit); ignored otherwise.

    Returns:
        The selection, with a decision for every neighbour that was a candidate.

    Raises:
        ValueError: With ``max_tokens``, if a candidate has no token count.
    """
    scored = _Scored(query, chunks)
    ranked = list(dict.fromkeys(hits))[: settings.k]
    rank_of = {chunk_id: rank for rank, chunk_id in enumerate(ranked)}
    bids = _hit_relevance(ranked, scored)
    candidates, reach, unscored = _candidates(ranked, chunks, scored, settings)
    value = {c: bids[rank_of[c]] if c in rank_of else scored.relevance[c] for c in candidates}
    chains = _chains(candidates, chunks, scored)
    linked = {edge: scored.boundary_cosine(*edge) for c in chains for edge in itertools.pairwise(c)}
    penalty = {edge: boundary_penalty(cosine) for edge, cosine in linked.items()}
    alpha = settings.continuity_bonus
    if alpha is None:
        scored_hits = [scored.relevance[c] for c in ranked if c in scored.relevance]
        alpha = query_continuity_bonus(scored_hits, list(penalty.values()))
    pair = {edge: alpha - settings.lambda_ * b for edge, b in penalty.items()}
    kept = ranked[: settings.kept]
    weight = dict.fromkeys(candidates, 1)
    capacity = min(settings.k, len(candidates))
    if settings.max_tokens is not None:
        weight, kept = _token_weights(candidates, tokens, kept, settings.max_tokens)
        capacity = min(settings.max_tokens, sum(weight.values()))
    line = _Line(
        [c for chain in chains for c in chain],
        [value[c] for chain in chains for c in chain],
        [pair[(chain[p - 1], c)] if p else 0.0 for chain in chains for p, c in enumerate(chain)],
        [weight[c] for chain in chains for c in chain],
        [c in rank_of for chain in chains for c in chain],
        [c in kept for chain in chains for c in chain],
        [p == 0 for chain in chains for p in range(len(chain))],
    )
    auction = _Auction(line, capacity, exact=settings.max_tokens is None)
    picked = auction.picked
    lowest = -1.0 - 2.0 * settings.lambda_  # the lowest S there is

    taken = [c for c in ranked if c in picked]
    selected = {c: Selected(c, "hit", c, rank_of[c], bids[rank_of[c]]) for c in taken}
    decisions: list[Decision] = []
    for chain in chains:
        for position, chunk_id in enumerate(chain):
            if chunk_id in rank_of:
                continue
            seed, via, direction, steps = reach[chunk_id]
            if chunk_id in picked:  # its passage's nearest hit, which may not be the walk's
                seed, via, direction, steps = _nearest_hit(chain, position, rank_of, picked)
            known = linked.get((via, chunk_id), linked.get((chunk_id, via)))
            cosine = scored.boundary_cosine(via, chunk_id) if known is None else known
            score = expansion_score(scored.relevance[chunk_id], cosine, settings.lambda_)
            threshold = min(max(score - auction.gain(chunk_id), lowest), 1.0)  # S's range
            decision = Decision(
                chunk_id, seed, via, direction, steps, scored.relevance[chunk_id],
                boundary_penalty(cosine), score, threshold, chunk_id in picked,
            )  # fmt: skip
            decisions.append(decision)
            if decision.accepted:
                selected[chunk_id] = Selected(
                    chunk_id, "neighbor", seed, rank_of[seed], score, decision
                )
    neighbours = sorted(
        (s for s in selected.values() if s.origin == "neighbor"),
        key=lambda s: (s.seed_rank, s.decision.distance if s.decision else 0, s.chunk_id),
    )
    chosen = tuple([selected[c] for c in taken] + neighbours)
    return Selection(chosen, _passages(chosen, chunks), tuple(decisions), tuple(unscored), alpha)


def fill_in_order(counts: Iterable[int], limit: int) -> int:
    """Return how many of the first ``counts`` fit ``limit`` together.

    Stops at the first that does not fit (reading no further, so ``counts`` may be lazy); at
    least 1 when there are any: the first is taken even alone over the limit.
    """
    total = taken = 0
    for taken, count in enumerate(counts, 1):
        total += count
        if total > limit:
            return max(taken - 1, 1)
    return taken


def _token_weights(
    candidates: Sequence[str],
    tokens: Mapping[str, int] | None,
    kept: Sequence[str],
    limit: int,
) -> tuple[dict[str, int], list[str]]:
    """Each candidate's tokens, and the kept hits that fit ``limit`` in rank order.

    The best hit is kept even alone over ``limit``: it then weighs ``limit``, filling the budget.

    Raises:
        ValueError: If a candidate has no token count, or one that is not an integer >= 0.
    """
    weight: dict[str, int] = {}
    for chunk_id in candidates:
        count = (tokens or {}).get(chunk_id)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ValueError(
                f"max_tokens is set, but the token count of chunk {chunk_id!r} is {count!r}; "
                "pass tokens={chunk id: integer >= 0} for every chunk within reach of the hits."
            )
        weight[chunk_id] = count
    kept = list(kept[: fill_in_order([weight[c] for c in kept], limit)])
    if kept:
        weight[kept[0]] = min(weight[kept[0]], limit)
    return weight, kept


#: How the walk first reached a neighbour: its retrieved chunk, the chunk beside it, the step.
_Reach = tuple[str, str, Step, int]


def _candidates(
    ranked: Sequence[str],
    chunks: Mapping[str, Chunk],
    scored: _Scored,
    settings: BudgetSettings,
) -> tuple[list[str], dict[str, _Reach], list[str]]:
    """The retrieved chunks and the scored chunks within ``window`` steps of them.

    A walk stops at a chunk without a usable vector (listed as unscored) and grows from none.
    Returns the candidates, how each neighbour was first reached, and the unscored chunks.
    """
    seen = set(ranked)
    reach: dict[str, _Reach] = {}
    unscored: list[str] = []
    seed_of = {c: c for c in ranked if c in scored.units and c in chunks}
    for step in range(1, settings.window + 1):
        reached: dict[str, str] = {}
        for target, via, direction in step_out(seed_of, chunks, settings.direction, seen):
            if target not in scored.units or target not in chunks:
                unscored.append(target)
                continue
            reach[target] = (seed_of[via], via, direction, step)
            reached[target] = seed_of[via]
        seed_of = reached
    return [*ranked, *reach], reach, unscored


def step_out(
    ring: Iterable[str], chunks: Mapping[str, Chunk], direction: Direction, seen: set[str]
) -> list[tuple[str, str, Step]]:
    """One step of the walk out from ``ring``: the chunks not ``seen`` yet, each once.

    The one ring walk both the query driver (what to read next) and the budget auction (which
    candidates it weighs) take. Returns ``(target, the chunk it was reached from, direction)``
    and adds each target to ``seen``.
    """
    reached = []
    for via in ring:
        for step in _steps(direction):
            target = chunks[via].step(step)
            if target is not None and target not in seen:
                seen.add(target)
                reached.append((target, via, step))
    return reached


def _chains(
    candidates: Sequence[str], chunks: Mapping[str, Chunk], scored: _Scored
) -> list[list[str]]:
    """Split the candidates into runs of linked chunks (see :func:`_runs`).

    A chunk without a usable vector is a run of its own: no boundary can be measured across it.
    """
    usable = {c for c in candidates if c in scored.units and c in chunks}
    return _runs(candidates, chunks, usable)


def _nearest_hit(
    chain: Sequence[str], position: int, rank_of: Mapping[str, int], picked: set[str]
) -> _Reach:
    """Where a chosen neighbour belongs: the nearest retrieved chunk of its own passage.

    Returns that chunk, the chunk beside the neighbour on its side, the direction from it to the
    neighbour, and the steps between them. Equal distances go to the better rank.
    """
    found: list[tuple[int, int, int]] = []
    for side in (-1, 1):
        index = position + side
        while 0 <= index < len(chain) and chain[index] in picked:
            if chain[index] in rank_of:
                found.append((abs(index - position), rank_of[chain[index]], index))
                break
            index += side
    _, _, index = min(found)
    if index < position:
        return chain[index], chain[position - 1], "next", position - index
    return chain[index], chain[position + 1], "previous", index - position


_NONE = -math.inf
#: Along the candidates: the chunk is not taken / taken in a run without a hit yet / taken, in a
#: run that holds one.
_OUT, _OPEN, _ANCHORED = 0, 1, 2


@dataclass(frozen=True)
class _Line:
    """The candidates as one line, chain after chain, with what the auction needs of each.

    ``joins[p]`` is the pair bid between chunk ``p - 1`` and chunk ``p`` (0 where ``p`` starts a
    chain: a run never crosses a chain's edge); ``weights`` are 1 (a budget in chunks) or tokens.
    """

    ids: list[str]
    values: list[float]
    joins: list[float]
    weights: list[int]
    hits: list[bool]
    forced: list[bool]
    starts: list[bool]

    def reversed(self) -> _Line:
        """The same line read from its end: chains and runs are the same, joins move by one."""
        n = len(self.ids)
        ends = [p == n - 1 or self.starts[p + 1] for p in range(n)]
        joins = [0.0 if ends[p] else self.joins[p + 1] for p in range(n)]
        return _Line(self.ids[::-1], self.values[::-1], joins[::-1], self.weights[::-1],
                     self.hits[::-1], self.forced[::-1], ends[::-1])  # fmt: skip


def _sweep(line: _Line, capacity: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int8]]:
    """The best totals along the line, by state and weight taken, and the moves to them.

    ``totals[p][state][w]`` is the best total of the chunks before ``p`` weighing exactly ``w``,
    chunk ``p - 1`` in ``state``, with every run closed so far holding a hit and every forced
    chunk taken; ``moves[p - 1][state][w]`` is the state of chunk ``p - 2`` on that best way.
    One pass, each step a max-plus product of the three states, vectorised over the weight.
    """
    n, size = len(line.ids), capacity + 1
    totals = np.full((n + 1, 3, size), _NONE)
    totals[0, _OUT, 0] = 0.0
    moves = np.zeros((n, 3, size), dtype=np.int8)
    for p in range(n):
        weight = line.weights[p]
        bids = np.array(_steps_of(line, p), dtype=np.float64)  # [before][after]
        ways = totals[p][:, None, :] + bids[:, :, None]
        first_two = np.maximum(ways[_OUT], ways[_OPEN])
        best = np.maximum(first_two, ways[_ANCHORED])
        came = np.where(ways[_ANCHORED] > first_two, _ANCHORED, ways[_OPEN] > ways[_OUT])
        totals[p + 1, _OUT], moves[p, _OUT] = best[_OUT], came[_OUT]
        if weight < size:  # taking the chunk moves its total ``weight`` up
            totals[p + 1, _OPEN:, weight:] = best[_OPEN:, : size - weight]
            moves[p, _OPEN:, weight:] = came[_OPEN:, : size - weight]
    return totals, moves


def _steps_of(line: _Line, p: int) -> list[list[float]]:
    """What chunk ``p`` adds to the total for each state of the chunk before and its own.

    Leaving it closes the run before, which must then hold a hit; taking it joins the run before
    unless ``p`` starts a chain (then the run before closes, and it opens one); a run that takes
    a hit holds one from then on. A forced chunk cannot be left.
    """
    value, join = line.values[p], line.joins[p]
    start, hit = line.starts[p], line.hits[p]
    leave = _NONE if line.forced[p] else 0.0
    after_open = _NONE if start else value + join
    after_held = value if start else value + join
    return [
        [leave, _NONE if hit else value, value if hit else _NONE],  # from OUT
        [_NONE, _NONE if hit else after_open, after_open if hit else _NONE],  # from OPEN
        [leave, _NONE if hit or not start else value, after_held if hit or not start else _NONE],
    ]


class _Auction:
    """The set of candidates with the highest total bid, and what each verdict is worth.

    One dynamic programme over the candidates laid end to end, chain after chain, with the weight
    taken as a vectorised dimension. A budget of ``k`` chunks is the case where every chunk
    weighs 1 and exactly ``k`` (or as many as can be) are taken; a budget of tokens takes any
    weight up to the capacity. ``picked`` is the best set; :meth:`gain` tells, for a neighbour,
    how much the best total falls if its verdict is reversed, from the totals of the passes from
    both ends.
    """

    def __init__(self, line: _Line, capacity: int, exact: bool) -> None:
        self.line, self.exact, n = line, exact, len(line.ids)
        self.forward, moves = _sweep(line, capacity)
        final = np.maximum(self.forward[n, _OUT], self.forward[n, _ANCHORED])
        reachable = np.flatnonzero(final > _NONE)
        #: The weight of the best set: exactly the most that can be taken, or the best up to it.
        self.target = int(reachable[-1]) if exact else capacity
        weight = self.target if exact else int(np.argmax(final))
        self.total = float(final[weight])
        self.index = {c: p for p, c in enumerate(line.ids)}
        self.picked: set[str] = set()
        state = (
            _ANCHORED
            if self.forward[n, _ANCHORED, weight] > self.forward[n, _OUT, weight]
            else _OUT
        )
        for p in range(n - 1, -1, -1):
            before = int(moves[p, state, weight])
            if state != _OUT:
                self.picked.add(line.ids[p])
                weight -= line.weights[p]
            state = before
        self.backward = _sweep(line.reversed(), capacity)[0]

    def _combine(
        self, left: npt.NDArray[np.float64], right: npt.NDArray[np.float64], weight: int
    ) -> float:
        """The best ``left[a] + right[b]`` with ``a + weight + b`` the target (or at most it)."""
        room = self.target - weight
        if room < 0:
            return _NONE
        right = right if self.exact else np.maximum.accumulate(right)
        return float(np.max(left[: room + 1] + right[room::-1]))

    def gain(self, chunk_id: str) -> float:
        """What taking this neighbour is worth to the best total: > 0 if taken, <= 0 if not.

        It is the best total less the best total with the verdict reversed (taken: without it;
        left: with it), signed, so that ``S > S - gain`` exactly when the candidate is taken.
        """
        line, p = self.line, self.index[chunk_id]
        left, right = self.forward[p], self.backward[len(line.ids) - 1 - p]
        closed_left = np.maximum(left[_OUT], left[_ANCHORED])
        closed_right = np.maximum(right[_OUT], right[_ANCHORED])
        if chunk_id in self.picked:  # the best set without it
            flipped = self._combine(closed_left, closed_right, 0)
        else:  # the best set with it: its run must hold a hit on one side or the other
            ends = p == len(line.ids) - 1 or line.starts[p + 1]
            nothing = np.full_like(closed_left, _NONE)
            opens, holds = (
                (nothing, nothing) if line.starts[p]
                else (left[_OPEN] + line.joins[p], left[_ANCHORED] + line.joins[p])
            )  # fmt: skip
            goes_on, holds_after = (
                (nothing, nothing) if ends
                else (right[_OPEN] + line.joins[p + 1], right[_ANCHORED] + line.joins[p + 1])
            )  # fmt: skip
            fresh = closed_left if line.starts[p] else left[_OUT]
            stops = closed_right if ends else right[_OUT]
            weight = line.weights[p]
            flipped = line.values[p] + max(
                self._combine(holds, np.maximum(np.maximum(stops, goes_on), holds_after), weight),
                self._combine(np.maximum(fresh, opens), holds_after, weight),
            )
        loss = max(self.total - flipped, 0.0)  # the best total is the best: never < 0
        if chunk_id in self.picked:  # a tie keeps it: it must clear its bar, if only just
            return loss or _TIE
        return -loss


#: What a neighbour taken on a tie clears its bar by.
_TIE = 1e-12


def select(
    query: npt.ArrayLike,
    hits: Sequence[str],
    chunks: Mapping[str, Chunk],
    settings: BudgetSettings | PaperSettings,
    tokens: Mapping[str, int] | None = None,
) -> Selection:
    """Run the selection of ``settings``' mode: :func:`budget_select` or :func:`paper_expand`.

    ``tokens`` (each chunk's tokens) is needed by budget mode with ``max_tokens`` only.
    """
    if isinstance(settings, PaperSettings):
        return paper_expand(query, hits, chunks, settings)
    return budget_select(query, hits, chunks, settings, tokens)
