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
from typing import Any, Literal

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
    candidates, reach, unscored = _candidates(ranked, chunks, scored, settings)
    value = {c: bids[rank_of[c]] if c in rank_of else scored.relevance[c] for c in candidates}
    chains = _chains(candidates, chunks, scored)
    linked = {edge: scored.boundary_cosine(*edge) for c in chains for edge in itertools.pairwise(c)}
    pair = {
        edge: settings.continuity_bonus - settings.lambda_ * boundary_penalty(cosine)
        for edge, cosine in linked.items()
    }
    kept = set(ranked[: settings.kept])
    auction = _Auction(chains, value, pair, rank_of, kept, min(settings.k, len(candidates)))
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
    return Selection(chosen, _passages(chosen, chunks), tuple(decisions), tuple(unscored))


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
    ring = [(c, c) for c in ranked if c in scored.units and c in chunks]
    for step in range(1, settings.window + 1):
        reached: list[tuple[str, str]] = []
        for via, seed in ring:
            for direction in _steps(settings.direction):
                target = chunks[via].step(direction)
                if target is None or target in seen:
                    continue
                seen.add(target)
                if target not in scored.units or target not in chunks:
                    unscored.append(target)
                    continue
                reach[target] = (seed, via, direction, step)
                reached.append((target, seed))
        ring = reached
    return [*ranked, *reach], reach, unscored


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
#: Along a chain: the chunk is not taken / taken in a run without a hit yet / taken, run has one.
_OUT, _OPEN, _ANCHORED = 0, 1, 2


def _chain_table(
    chain: Sequence[str],
    value: Mapping[str, float],
    pair: Mapping[tuple[str, str], float],
    hit: Sequence[bool],
    forced: Sequence[bool],
    budget: int,
) -> tuple[list[float], list[int], list[tuple[list[int], list[int], list[int]]]]:
    """The best total of each count of chunks taken from one chain, its end state and the moves.

    A run of taken chunks must hold a hit; a forced chunk must be taken. The lists run up to the
    most chunks the chain can give. ``moves[position][state][count]`` is the state before
    ``position`` on the best way to ``state`` with ``count`` chunks taken.
    """
    if not any(hit):
        return [0.0], [_OUT], []
    budget = min(budget, len(chain))
    out, opened, anchored = [0.0] + [_NONE] * budget, [_NONE] * (budget + 1), [_NONE] * (budget + 1)
    moves: list[tuple[list[int], list[int], list[int]]] = []
    for position, chunk_id in enumerate(chain):
        alone = value[chunk_id]
        joined = alone + (pair[(chain[position - 1], chunk_id)] if position else 0.0)
        new_out, new_opened, new_anchored = ([_NONE] * (budget + 1) for _ in range(3))
        came: tuple[list[int], list[int], list[int]] = ([_OUT] * (budget + 1),
                                                        [_OUT] * (budget + 1),
                                                        [_OUT] * (budget + 1))  # fmt: skip
        for count in range(min(position, budget) + 1):
            left, open_run, held = out[count], opened[count], anchored[count]
            if not forced[position]:  # leave it: ends a run, which must hold a hit
                new_out[count], came[_OUT][count] = (
                    (left, _OUT) if left >= held else (held, _ANCHORED)
                )
            if count == budget:
                continue
            if hit[position]:  # take it: the run now holds a hit
                new_anchored[count + 1], came[_ANCHORED][count + 1] = max(
                    (left + alone, _OUT), (open_run + joined, _OPEN), (held + joined, _ANCHORED)
                )
            else:
                new_opened[count + 1], came[_OPEN][count + 1] = max(
                    (left + alone, _OUT), (open_run + joined, _OPEN)
                )
                new_anchored[count + 1], came[_ANCHORED][count + 1] = held + joined, _ANCHORED
        out, opened, anchored = new_out, new_opened, new_anchored
        moves.append(came)
    ends = [_OUT if out[n] >= anchored[n] else _ANCHORED for n in range(budget + 1)]
    return [max(out[n], anchored[n]) for n in range(budget + 1)], ends, moves


def _chain_pick(
    chain: Sequence[str],
    moves: Sequence[tuple[list[int], list[int], list[int]]],
    state: int,
    count: int,
) -> list[str]:
    """Walk the moves back from ``state`` with ``count`` chunks taken at the chain's end."""
    picked: list[str] = []
    for position in range(len(chain) - 1, -1, -1):
        before = moves[position][state][count]
        if state != _OUT:
            picked.append(chain[position])
            count -= 1
        state = before
    return picked


def _max_plus(first: Sequence[float], second: Sequence[float], k: int) -> list[float]:
    """Best totals of ``n`` chunks taken from two groups, ``first[a] + second[n - a]``, n <= k."""
    out = [_NONE] * (k + 1)
    for a, x in enumerate(first[: k + 1]):
        if x == _NONE:
            continue
        for b, y in enumerate(second[: k + 1 - a]):
            if y != _NONE and x + y > out[a + b]:
                out[a + b] = x + y
    return out


class _Auction:
    """The set of candidates with the highest total bid, and what each verdict is worth.

    ``picked`` is the best set, of size ``k`` or as large as can be. :meth:`gain` tells, for a
    neighbour, how much the best total falls if its verdict is reversed.
    """

    def __init__(
        self,
        chains: Sequence[Sequence[str]],
        value: Mapping[str, float],
        pair: Mapping[tuple[str, str], float],
        rank_of: Mapping[str, int],
        kept: set[str],
        k: int,
    ) -> None:
        self.chains, self.value, self.pair, self.k = chains, value, pair, k
        self.hit = [[c in rank_of for c in chain] for chain in chains]
        self.forced = [[c in kept for c in chain] for chain in chains]
        tables = [self._table(i, value, self.forced[i]) for i in range(len(chains))]
        # prefix[i] / suffix[i]: best totals from the chains before / from chain i on.
        self.prefix = [[0.0] + [_NONE] * k]
        for totals, _, _ in tables:
            self.prefix.append(_max_plus(self.prefix[-1], totals, k))
        self.suffix = [[0.0] + [_NONE] * k]
        for totals, _, _ in reversed(tables):
            self.suffix.insert(0, _max_plus(totals, self.suffix[0], k))
        best = self.prefix[-1]
        self.size = max(n for n in range(k + 1) if best[n] != _NONE)
        self.total = best[self.size]
        self.chain_of = {c: i for i, chain in enumerate(chains) for c in chain}
        self._others: dict[int, list[float]] = {}
        self.picked = self._pick(tables)

    def _table(
        self, index: int, value: Mapping[str, float], forced: Sequence[bool]
    ) -> tuple[list[float], list[int], list[tuple[list[int], list[int], list[int]]]]:
        return _chain_table(self.chains[index], value, self.pair, self.hit[index], forced, self.k)

    def _pick(self, tables: Sequence[tuple[list[float], list[int], Any]]) -> set[str]:
        """Walk the best combination back, chain by chain, then inside each chain."""
        picked: set[str] = set()
        size = self.size
        for index in range(len(self.chains) - 1, -1, -1):
            totals, ends, moves = tables[index]
            before = self.prefix[index]
            count = next(  # of equal totals, the most chunks from the later chain, as built
                c for c in range(min(len(totals), size + 1) - 1, -1, -1)
                if totals[c] != _NONE and before[size - c] != _NONE
                and before[size - c] + totals[c] == self._after(index, size)
            )  # fmt: skip
            if count:
                picked.update(_chain_pick(self.chains[index], moves, ends[count], count))
            size -= count
        return picked

    def _after(self, index: int, size: int) -> float:
        """The best total of ``size`` chunks from the chains up to and including ``index``."""
        return self.prefix[index + 1][size]

    def gain(self, chunk_id: str) -> float:
        """What taking this candidate is worth to the best total: > 0 if taken, <= 0 if not.

        It is the best total less the best total with the verdict reversed (taken: without it;
        left: with it), signed, so that ``S > S - gain`` exactly when the candidate is taken.
        """
        index = self.chain_of[chunk_id]
        position = self.chains[index].index(chunk_id)
        value: Mapping[str, float]
        if chunk_id in self.picked:  # the best set without it
            value, forced = {**self.value, chunk_id: _NONE}, self.forced[index]
        else:  # the best set with it
            value = self.value
            forced = [f or p == position for p, f in enumerate(self.forced[index])]
        totals = self._table(index, value, forced)[0]
        if index not in self._others:  # the best totals of every other chain, once per chain
            self._others[index] = _max_plus(self.prefix[index], self.suffix[index + 1], self.k)
        others = self._others[index]
        reversed_total = max(
            (others[self.size - c] + totals[c] for c in range(min(len(totals), self.size + 1))
             if totals[c] != _NONE and others[self.size - c] != _NONE),
            default=_NONE,
        )  # fmt: skip
        loss = max(self.total - reversed_total, 0.0)  # the best total is the best: never < 0
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
) -> Selection:
    """Run the selection of ``settings``' mode: :func:`budget_select` or :func:`paper_expand`."""
    if isinstance(settings, PaperSettings):
        return paper_expand(query, hits, chunks, settings)
    return budget_select(query, hits, chunks, settings)
