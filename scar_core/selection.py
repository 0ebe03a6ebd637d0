"""SCAR's two selections over chunks already in memory: the paper's rule and the budget auction.

Both take the query vector, the retrieved chunk ids best first, and a mapping of every chunk they
may look at (its vector and its previous/next links). Neither reads from a store:
:class:`scar_core.driver.QueryDriver` decides what to read and then calls :func:`select`.

**Paper mode** (:func:`paper_expand`). Seeds are walked best first; in each allowed direction the
walk visits the chunks 1, 2, ... ``window`` steps away. A chunk already selected is passed
through. Any other chunk ``n`` is accepted when ``S > gamma * cos(q, seed)``, where ``S`` uses the
boundary between ``n`` and the chunk just before it on the walk. A rejection ends the walk in that
direction, so a passage has no holes.

**Budget mode** (:func:`budget_select`), the segment auction. Exactly ``k`` chunks are chosen
from the ``k`` retrieved chunks and the chunks within ``window`` steps of them:

* the best ``keep`` retrieved chunks are always chosen;
* every passage (run of linked chosen chunks) holds a retrieved chunk;
* among such sets, the one with the highest total bid wins, where every chosen chunk bids its
  relevance ``cos(q, x)`` and every linked pair of chosen chunks adds ``alpha - lambda_ * b``.

So a neighbour joined to a chosen chunk bids ``S + alpha`` (``alpha`` is the continuity bonus),
and a run of two or three neighbours bids as a whole against the further hits it would displace.
The best set is found exactly, by dynamic programming along each chain of linked candidates.

A chunk whose vector is missing or unusable is never scored: as a neighbour it ends the walk and is
listed in :attr:`Selection.unscored`; as a retrieved chunk it keeps its rank (it bids like the
retrieved chunk just above it) but grows no passage.
"""

from __future__ import annotations

import itertools
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
            budget mode, the relevance of the best retrieved chunk left out minus the continuity
            bonus (what a lone neighbour had to beat; a run of neighbours bids as a whole).
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
    """Choose exactly ``settings.k`` chunks (fewer only when fewer exist) by the segment auction.

    The candidates are the first ``k`` retrieved chunks and every chunk within ``window`` steps of
    one of them. Among the sets of ``k`` candidates that hold the best ``keep`` retrieved chunks
    and in which every passage holds a retrieved chunk, the one with the highest total bid wins:

    ``sum of cos(q, x) over its chunks + sum of (alpha - lambda_ * b) over its linked pairs``

    A chunk linked to a chosen chunk therefore bids ``S + alpha``, as in the paper's formula plus
    the continuity bonus, and a whole run of neighbours bids together against single hits. The
    optimum is found exactly, by dynamic programming along each chain of linked candidates.

    Args:
        query: The query embedding, any scale.
        hits: Retrieved chunk ids, best first; only the first ``k`` are used.
        chunks: Every chunk within ``window`` steps of the hits, with vectors and links.
        settings: Budget, kept hits, continuity bonus, λ, window and direction.

    Returns:
        The selection, with a decision for every neighbour that was a candidate.
    """
    scored = _Scored(query, chunks)
    ranked = list(dict.fromkeys(hits))[: settings.k]
    rank_of = {chunk_id: rank for rank, chunk_id in enumerate(ranked)}
    bids = _hit_relevance(ranked, scored)
    candidates, distance, unscored = _candidates(ranked, chunks, scored, settings)
    value = {c: bids[rank_of[c]] if c in rank_of else scored.relevance[c] for c in candidates}
    chains = _chains(candidates, chunks, scored)
    pair = {
        (a, b): settings.continuity_bonus
        - settings.lambda_ * boundary_penalty(scored.boundary_cosine(a, b))
        for chain in chains
        for a, b in itertools.pairwise(chain)
    }
    kept = set(ranked[: settings.kept])
    picked = _best_set(chains, value, pair, rank_of, kept, min(settings.k, len(candidates)))

    taken = [c for c in ranked if c in picked]
    left = [bids[rank_of[c]] for c in ranked if c not in picked]
    price = (left[0] if left else -1.0 - 2.0 * settings.lambda_) - settings.continuity_bonus
    selected = {c: Selected(c, "hit", c, rank_of[c], bids[rank_of[c]]) for c in taken}
    decisions: list[Decision] = []
    for chain in chains:
        for position, chunk_id in enumerate(chain):
            if chunk_id in rank_of:
                continue
            seed, via, steps = _nearest_hit(chain, position, rank_of, picked)
            direction: Step = "next" if chain.index(seed) < position else "previous"
            cosine = scored.boundary_cosine(via, chunk_id)
            score = expansion_score(scored.relevance[chunk_id], cosine, settings.lambda_)
            decision = Decision(
                chunk_id, seed, via, direction, steps, scored.relevance[chunk_id],
                boundary_penalty(cosine), score, price, chunk_id in picked,
            )  # fmt: skip
            decisions.append(decision)
            if decision.accepted:
                selected[chunk_id] = Selected(
                    chunk_id, "neighbor", seed, rank_of[seed], score, decision
                )
    neighbours = sorted(
        (s for s in selected.values() if s.origin == "neighbor"),
        key=lambda s: (s.seed_rank, distance.get(s.chunk_id, 0), s.chunk_id),
    )
    chosen = tuple([selected[c] for c in taken] + neighbours)
    return Selection(chosen, _passages(chosen, chunks), tuple(decisions), tuple(unscored))


def _candidates(
    ranked: Sequence[str],
    chunks: Mapping[str, Chunk],
    scored: _Scored,
    settings: BudgetSettings,
) -> tuple[list[str], dict[str, int], list[str]]:
    """The retrieved chunks and the scored chunks within ``window`` steps of them.

    A walk stops at a chunk without a usable vector (listed as unscored) and grows from none.
    """
    distance = dict.fromkeys(ranked, 0)
    unscored: list[str] = []
    ring = [c for c in ranked if c in scored.units and c in chunks]
    for step in range(1, settings.window + 1):
        if not ring:
            break
        reached: list[str] = []
        for via in ring:
            for direction in _steps(settings.direction):
                target = chunks[via].step(direction)
                if target is None or target in distance:
                    continue
                if target not in scored.units or target not in chunks:
                    if target not in unscored:
                        unscored.append(target)
                    continue
                distance[target] = step
                reached.append(target)
        ring = reached
    return list(distance), distance, unscored


def _chains(
    candidates: Sequence[str], chunks: Mapping[str, Chunk], scored: _Scored
) -> list[list[str]]:
    """Split the candidates into runs linked next to previous, each in document order.

    A chunk without a usable vector is a run of its own: no boundary can be measured across it.
    """
    members = set(candidates)

    def linked(chunk_id: str, direction: Step) -> str | None:
        if chunk_id not in scored.units or chunk_id not in chunks:
            return None
        target = chunks[chunk_id].step(direction)
        return target if target in members and target in scored.units else None

    placed: set[str] = set()
    chains: list[list[str]] = []
    for chunk_id in candidates:
        if chunk_id in placed:
            continue
        head = chunk_id
        while (before := linked(head, "previous")) is not None and before not in placed:
            if before == chunk_id:  # a cycle of links: start anywhere
                break
            head = before
        chain = [head]
        placed.add(head)
        while (after := linked(chain[-1], "next")) is not None and after not in placed:
            chain.append(after)
            placed.add(after)
        chains.append(chain)
    return chains


def _nearest_hit(
    chain: Sequence[str], position: int, rank_of: Mapping[str, int], picked: set[str]
) -> tuple[str, str, int]:
    """The retrieved chunk a neighbour belongs to, the chunk beside it on that side, and steps.

    A taken neighbour belongs to the nearest retrieved chunk of its own passage; one left out to
    the nearest retrieved chunk on its chain. Equal distances go to the better rank.
    """
    inside = chain[position] in picked
    found: list[tuple[int, int, int]] = []
    for side in (-1, 1):
        index = position + side
        while 0 <= index < len(chain) and (not inside or chain[index] in picked):
            if chain[index] in rank_of:
                found.append((abs(index - position), rank_of[chain[index]], index))
                break
            index += side
    _, _, index = min(found)
    return (
        chain[index],
        chain[position - 1 if index < position else position + 1],
        abs(index - position),
    )


_NONE = -math.inf
#: Along a chain: the chunk is not taken / taken in a run without a hit yet / taken, run has one.
_OUT, _OPEN, _ANCHORED = 0, 1, 2


def _chain_table(
    chain: Sequence[str],
    value: Mapping[str, float],
    pair: Mapping[tuple[str, str], float],
    hit: Sequence[bool],
    forced: Sequence[bool],
    budget: int,
) -> tuple[list[float], list[int], list[list[list[tuple[int, int] | None]]]]:
    """The best total of each count of chunks taken from one chain, its end state and the moves.

    A run of taken chunks must hold a hit; a forced chunk must be taken. The lists run up to the
    most chunks the chain can give.
    """
    if not any(hit):
        return [0.0], [_OUT], [[[(0, _OUT), None, None]] for _ in chain]
    budget = min(budget, len(chain))
    best = [[_NONE] * 3 for _ in range(budget + 1)]
    best[0][_OUT] = 0.0
    moves: list[list[list[tuple[int, int] | None]]] = []
    for position, chunk_id in enumerate(chain):
        bonus = pair[(chain[position - 1], chunk_id)] if position else 0.0
        new = [[_NONE] * 3 for _ in range(budget + 1)]
        came: list[list[tuple[int, int] | None]] = [[None] * 3 for _ in range(budget + 1)]
        for count in range(min(position, budget) + 1):
            for state in (_OUT, _OPEN, _ANCHORED):
                total = best[count][state]
                if total == _NONE:
                    continue
                if not forced[position] and state != _OPEN and total > new[count][_OUT]:
                    new[count][_OUT], came[count][_OUT] = total, (count, state)
                if count == budget:
                    continue
                gain = value[chunk_id] + (bonus if state != _OUT else 0.0)
                after = _ANCHORED if hit[position] or state == _ANCHORED else _OPEN
                if total + gain > new[count + 1][after]:
                    new[count + 1][after], came[count + 1][after] = total + gain, (count, state)
        best = new
        moves.append(came)
    ends = [_OUT if best[n][_OUT] >= best[n][_ANCHORED] else _ANCHORED for n in range(budget + 1)]
    return [best[n][ends[n]] for n in range(budget + 1)], ends, moves


def _chain_pick(
    chain: Sequence[str],
    moves: Sequence[Sequence[Sequence[tuple[int, int] | None]]],
    state: int,
    count: int,
) -> list[str]:
    """Walk the moves back from ``state`` with ``count`` chunks taken at the chain's end."""
    picked: list[str] = []
    for position in range(len(chain) - 1, -1, -1):
        if state != _OUT:
            picked.append(chain[position])
        move = moves[position][count][state]
        assert move is not None  # the totals came from a move
        count, state = move
    return picked


def _best_set(
    chains: Sequence[Sequence[str]],
    value: Mapping[str, float],
    pair: Mapping[tuple[str, str], float],
    rank_of: Mapping[str, int],
    kept: set[str],
    k: int,
) -> set[str]:
    """The set of candidates with the highest total bid, of size ``k`` or as large as can be."""
    tables = []
    for chain in chains:
        hit = [c in rank_of for c in chain]
        forced = [c in kept for c in chain]
        tables.append(_chain_table(chain, value, pair, hit, forced, k))
    # Combine the chains: best[i][n] is the best total of n chunks from the first i chains.
    best = [0.0] + [_NONE] * k
    split: list[list[int]] = []
    for totals, _, _ in tables:
        new, share = [_NONE] * (k + 1), [0] * (k + 1)
        for before in range(k + 1):
            if best[before] == _NONE:
                continue
            for count in range(min(len(totals), k + 1 - before)):
                if totals[count] != _NONE and best[before] + totals[count] > new[before + count]:
                    new[before + count], share[before + count] = best[before] + totals[count], count
        best = new
        split.append(share)
    size = max(n for n in range(k + 1) if best[n] != _NONE)
    picked: set[str] = set()
    for index in range(len(chains) - 1, -1, -1):
        count = split[index][size]
        _, ends, moves = tables[index]
        if count:
            picked.update(_chain_pick(chains[index], moves, ends[count], count))
        size -= count
    return picked


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
