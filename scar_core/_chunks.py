"""The chunk records, the selections' answer and the walk along links, shared by the core."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from scar_core._scoring import unit_rows
from scar_core._settings import Direction

Step = Literal["previous", "next"]
Origin = Literal["hit", "neighbor"]


@dataclass(frozen=True)
class Chunk:
    """One chunk, as the selections weigh it and as the adapter hands it back.

    Attributes:
        id: Its id in the store (``""``: the search gave none; the driver gives it one).
        vector: Its embedding, or ``None`` when none could be had.
        previous_id: The id of the chunk before it in its document, if any.
        next_id: The id of the chunk after it, if any.
        linked: Whether it went through linking, even without neighbours (a one-chunk document).
        text: Its text: counted with ``max_tokens``, embedded if no store gives its vector.
        metadata: Its metadata, for ``neighbor_filter`` and to tell equal ids apart.
        item: The adapter's own object (a ``Document``, a node), handed back untouched.
        window_ids: The ids two steps before and after it, where its links name them: a hint
            that lets the query driver read the chunks one and two steps from a hit at once
            (it keeps one two steps away only if the chunk between links to it).
    """

    id: str
    vector: npt.ArrayLike | None = None
    previous_id: str | None = None
    next_id: str | None = None
    linked: bool = False
    text: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict, repr=False)
    item: Any = field(default=None, repr=False)
    window_ids: tuple[str | None, str | None] = (None, None)

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


def steps(direction: Direction) -> tuple[Step, ...]:
    """The steps a walk in ``direction`` takes from each chunk."""
    return ("previous", "next") if direction == "both" else (direction,)


class Scored:
    """Unit vectors and query cosines of the chunks a selection touches, computed in one pass.

    Args:
        query: The query's unit vector (:func:`~scar_core._scoring.unit_vector`).
        chunks: The chunks; those whose vector is missing, of another dimension, zero, NaN or
            infinite get none (they are unscored).
    """

    def __init__(self, query: npt.NDArray[np.float64], chunks: Mapping[str, Chunk]) -> None:
        self.query = query
        ids = [c for c, chunk in chunks.items() if _fits(chunk.vector, query.shape[0])]
        matrix = np.array([chunks[c].vector for c in ids], dtype=np.float64).reshape(
            len(ids), query.shape[0]
        )
        units, usable = unit_rows(matrix) if ids else (matrix, np.zeros(0, dtype=bool))
        self.units = {c: units[i] for i, c in enumerate(ids) if usable[i]}
        relevances = (units @ query).tolist() if ids else []
        self.relevance = {c: relevances[i] for i, c in enumerate(ids) if usable[i]}

    def boundary_cosine(self, via: str, candidate: str) -> float:
        """``cos(e_via, e_candidate)``, both usable."""
        return float(self.units[via] @ self.units[candidate])


def _fits(vector: object, dimension: int) -> bool:
    if isinstance(vector, np.ndarray) or vector is None:
        return vector is not None and vector.shape == (dimension,)
    try:
        return np.asarray(vector, dtype=np.float64).shape == (dimension,)
    except (TypeError, ValueError):
        return False


def hit_relevance(hits: Sequence[str], scored: Scored) -> list[float]:
    """Each hit's cosine; a hit without a usable vector bids like the hit above it."""
    bids: list[float] = []
    for hit in hits:
        above = bids[-1] if bids else 1.0
        bids.append(scored.relevance.get(hit, above))
    return bids


def passages(
    selected: Sequence[Selected], chunks: Mapping[str, Chunk]
) -> tuple[tuple[str, ...], ...]:
    """Group selected chunks into runs of linked chunks, best hit's rank first, document order."""
    ids = [s.chunk_id for s in selected]
    rank = {s.chunk_id: s.seed_rank for s in selected}
    found = runs(ids, chunks, {c for c in ids if c in chunks})
    return tuple(tuple(run) for run in sorted(found, key=lambda run: min(rank[c] for c in run)))


def runs(ids: Sequence[str], chunks: Mapping[str, Chunk], members: set[str]) -> list[list[str]]:
    """Split ``ids`` into runs of linked ``members``, each in document order (others: alone).

    A chunk keeps one link each way, so inconsistent or circular links still give simple runs.
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


def step_out(
    ring: Iterable[str], chunks: Mapping[str, Chunk], direction: Direction, seen: set[str]
) -> list[tuple[str, str, Step]]:
    """One step out from ``ring``: ``(target, from, step)`` once per target, added to ``seen``."""
    reached = []
    for via in ring:
        for step in steps(direction):
            target = chunks[via].step(step)
            if target is not None and target not in seen:
                seen.add(target)
                reached.append((target, via, step))
    return reached
