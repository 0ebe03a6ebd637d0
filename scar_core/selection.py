"""SCAR's two selections over chunks already in memory: the paper's rule and the budget auction.

Both take the query vector, the retrieved chunk ids best first, and a mapping of every chunk they
may look at (its vector and its previous/next links). Neither reads from a store:
:class:`scar_core.driver.QueryDriver` decides what to read and then calls :func:`select`.

**Paper mode** (:func:`paper_expand`). Seeds are walked best first; in each allowed direction the
walk visits the chunks 1, 2, ... ``window`` steps away. A chunk already selected is passed
through. Any other chunk ``n`` is accepted when ``S > gamma * cos(q, seed)``, where ``S`` uses the
boundary between ``n`` and the chunk just before it on the walk. A rejection ends the walk in that
direction, so a passage has no holes.

**Budget mode** (:func:`budget_select`). Exactly ``k`` slots are filled one at a time:

* the best ``keep`` retrieved chunks are taken first;
* the best retrieved chunk not yet taken bids its relevance ``cos(q, x)``;
* every chunk adjacent to a taken chunk (within ``window`` steps of its retrieved chunk) bids
  ``S + alpha``, ``alpha`` being the continuity bonus;
* the highest bid takes the slot; a retrieved chunk wins a tie.

A chunk whose vector is missing or unusable is never scored: as a neighbour it ends the walk and is
listed in :attr:`Selection.unscored`; as a retrieved chunk it keeps its rank (it bids like the
retrieved chunk just above it) but grows no passage.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from scar_core.scoring import (
    boundary_penalty,
    expansion_score,
    paper_threshold,
    unit_rows,
    unit_vector,
)
from scar_core.settings import BudgetSettings, Direction, PaperSettings

__all__ = [
    "Chunk",
    "Decision",
    "Selected",
    "Selection",
    "budget_select",
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
        threshold: The bar ``S`` was compared with: ``gamma * cos(q, seed)`` in paper mode; in
            budget mode, the bid it had to beat minus the continuity bonus.
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
        decision: The decision that added a neighbour; ``None`` for a hit, except a hit that
            budget mode took as a continuation of an earlier chunk (its bid was ``S + alpha``).
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
        selected: The chunks, in the order they were selected.
        passages: Runs of adjacent selected chunks, ordered by their best hit's rank; inside a
            passage, chunks are in document order.
        decisions: Every neighbour decision, accepted or not.
        unscored: Chunks that were met but had no usable vector.
    """

    selected: tuple[Selected, ...]
    passages: tuple[tuple[str, ...], ...]
    decisions: tuple[Decision, ...] = ()
    unscored: tuple[str, ...] = field(default=())

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
    members = {s.chunk_id for s in selected}
    rank = {s.chunk_id: s.seed_rank for s in selected}

    def linked(chunk_id: str, direction: Step) -> str | None:
        chunk = chunks.get(chunk_id)
        target = chunk.step(direction) if chunk else None
        return target if target in members else None

    placed: set[str] = set()
    runs: list[tuple[str, ...]] = []
    for item in selected:
        if item.chunk_id in placed:
            continue
        head = item.chunk_id
        seen = {head}
        while (before := linked(head, "previous")) is not None and before not in seen:
            head = before
            seen.add(head)
        run = [head]
        while (after := linked(run[-1], "next")) is not None and after not in run:
            run.append(after)
        run = [c for c in run if c not in placed]
        placed.update(run)
        runs.append(tuple(run))
    return tuple(sorted(runs, key=lambda run: min(rank[c] for c in run)))


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
) -> Selection:
    """Fill exactly ``settings.k`` slots (fewer only when fewer chunks exist) by the auction.

    Args:
        query: The query embedding, any scale.
        hits: Retrieved chunk ids, best first.
        chunks: Every chunk within ``window`` steps of the hits, with vectors and links.
        settings: Budget, kept hits, continuity bonus, λ, window and direction.

    Returns:
        The selection, with a decision for every neighbour that bid.
    """
    scored = _Scored(query, chunks)
    ranked = list(dict.fromkeys(hits))
    rank_of = {chunk_id: rank for rank, chunk_id in enumerate(ranked)}
    bids = _hit_relevance(ranked, scored)
    alpha = settings.continuity_bonus
    steps = _steps(settings.direction)
    selected: dict[str, Selected] = {}
    frontier: dict[str, tuple[float, Decision, int]] = {}
    unscored: list[str] = []

    def take(item: Selected, distance: int) -> None:
        selected[item.chunk_id] = item
        frontier.pop(item.chunk_id, None)
        via = item.chunk_id
        if distance >= settings.window or via not in scored.units or via not in chunks:
            return
        for direction in steps:
            candidate = chunks[via].step(direction)
            if candidate is None or candidate in selected:
                continue
            if candidate not in scored.units:
                unscored.append(candidate)
                continue
            cosine = scored.boundary_cosine(via, candidate)
            relevance = scored.relevance[candidate]
            score = expansion_score(relevance, cosine, settings.lambda_)
            decision = Decision(
                candidate, item.seed_id, via, direction, distance + 1, relevance,
                boundary_penalty(cosine), score, math.nan, False,
            )  # fmt: skip
            if candidate not in frontier or score + alpha > frontier[candidate][0]:
                frontier[candidate] = (score + alpha, decision, item.seed_rank)

    for rank in range(min(settings.kept, len(ranked))):
        take(Selected(ranked[rank], "hit", ranked[rank], rank, bids[rank]), 0)
    decisions: list[Decision] = []
    next_hit = min(settings.kept, len(ranked))
    weakest_win = math.inf
    while len(selected) < settings.k:
        while next_hit < len(ranked) and ranked[next_hit] in selected:
            next_hit += 1
        hit_bid = bids[next_hit] if next_hit < len(ranked) else -math.inf
        best = max(frontier, key=lambda c: frontier[c][0], default=None)
        if best is not None and frontier[best][0] > hit_bid:
            bid, pending, seed_rank = frontier[best]
            competing = hit_bid if math.isfinite(hit_bid) else -1.0 - 2.0 * settings.lambda_
            decision = _decided(pending, competing - alpha, True)
            decisions.append(decision)
            weakest_win = min(weakest_win, bid)
            if best in rank_of:  # a retrieved chunk that won its slot as a continuation
                won = Selected(best, "hit", best, rank_of[best], bids[rank_of[best]], decision)
            else:
                won = Selected(
                    best, "neighbor", pending.seed_id, seed_rank, pending.score, decision
                )
            take(won, decision.distance)
        elif next_hit < len(ranked):
            weakest_win = min(weakest_win, hit_bid)
            hit = ranked[next_hit]
            take(Selected(hit, "hit", hit, next_hit, hit_bid), 0)
        else:
            break
    bar = weakest_win if math.isfinite(weakest_win) else -1.0 - 2.0 * settings.lambda_ + alpha
    decisions.extend(_decided(pending, bar - alpha, False) for _, pending, _ in frontier.values())
    picked = tuple(selected.values())
    return Selection(picked, _passages(picked, chunks), tuple(decisions), tuple(unscored))


def _decided(pending: Decision, threshold: float, accepted: bool) -> Decision:
    return Decision(
        pending.neighbor_id, pending.seed_id, pending.via_id, pending.direction, pending.distance,
        pending.relevance, pending.boundary_penalty, pending.score, threshold, accepted,
    )  # fmt: skip


def select(
    query: npt.ArrayLike,
    hits: Sequence[str],
    chunks: Mapping[str, Chunk],
    settings: BudgetSettings | PaperSettings,
) -> Selection:
    """Run the selection of ``settings``' mode: :func:`budget_select` or :func:`paper_expand`."""
    if isinstance(settings, PaperSettings):
        return paper_expand(query, hits, chunks, settings)
    return budget_select(query, hits, chunks, settings)
