"""The SCAR expansion policy: decide, per retrieved seed, which adjacent chunks to add.

The decision rule lives in :mod:`scar_core.scoring`; this module walks the neighbour graph,
fetches vectors in one batch, validates them and records every decision.

Walk rule (documented contract):

* Seeds are processed best first. For each seed and each allowed direction the walk visits the
  chunks 1, 2, ..., ``window`` steps away.
* A chunk that is already selected (a seed, or a neighbour accepted earlier) is not decided again;
  the walk passes through it.
* Any other chunk is decided with ``S = cos(q, n) - lambda_ * (1 - cos(v, n)) > gamma * cos(q, c)``
  where ``c`` is the seed and ``v`` the chunk just before ``n`` on the walk (the seed itself at
  distance 1): the penalty is measured across the boundary ``n`` would cross, while the threshold
  stays relative to the seed's relevance.
* A rejected chunk ends the walk in that direction, so a passage never has holes. A rejected
  chunk may still be accepted later from another seed's side.
* A neighbour without a usable vector (missing, NaN, infinite, zero or of the wrong dimension)
  ends the walk too and is reported in :attr:`ExpansionResult.skipped`; it never raises.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from scar_core.errors import InvalidVectorError, MissingVectorError
from scar_core.graph import NeighborGraph, Step, steps_for
from scar_core.scoring import SAFE_NORM_HIGH, SAFE_NORM_LOW, as_unit_vector, unit_rows
from scar_core.settings import (
    DEFAULT_GAMMA,
    DEFAULT_LAMBDA,
    DEFAULT_WINDOW,
    Direction,
    ScarSettings,
)
from scar_core.vectors import VectorSource, lookup_vectors

__all__ = [
    "Decision",
    "ExpansionResult",
    "ScarPolicy",
    "SelectedChunk",
    "SkippedNeighbor",
    "as_graph",
    "expand",
    "expand_batch",
]

logger = logging.getLogger(__name__)

_SAFE_SQUARED_LOW = SAFE_NORM_LOW**2
_SAFE_SQUARED_HIGH = SAFE_NORM_HIGH**2

Origin = Literal["seed", "neighbor"]
SkipReason = Literal["missing_vector", "invalid_vector", "over_budget"]
Links = Mapping[str, tuple[str | None, str | None]]


@dataclass(frozen=True)
class Decision:
    """One decision of the SCAR rule on one candidate neighbour.

    Attributes:
        seed_id: The seed whose walk considered the neighbour.
        neighbor_id: The candidate chunk.
        via_id: The chunk across whose boundary the penalty was measured (the seed at distance 1).
        direction: ``"previous"`` or ``"next"``.
        distance: Steps from the seed (1 or more).
        relevance: ``cos(e_q, e_n)``.
        boundary_penalty: ``b = 1 - cos(e_via, e_n)``.
        score: ``S = relevance - lambda_ * b``.
        threshold: ``gamma * cos(e_q, e_seed)``.
        accepted: Whether ``score > threshold``.
    """

    seed_id: str
    neighbor_id: str
    via_id: str
    direction: Step
    distance: int
    relevance: float
    boundary_penalty: float
    score: float
    threshold: float
    accepted: bool


@dataclass(frozen=True)
class SelectedChunk:
    """A chunk in the expansion's output.

    Attributes:
        chunk_id: The chunk's id.
        origin: ``"seed"`` for a retrieved chunk, ``"neighbor"`` for an accepted neighbour.
        seed_id: The seed it belongs to (itself for a seed).
        seed_rank: Zero-based rank of that seed among the retrieved chunks.
        score: ``cos(e_q, e_c)`` for a seed; the expansion score ``S`` for a neighbour. Never None.
        decision: The decision that admitted a neighbour; ``None`` for a seed.
    """

    chunk_id: str
    origin: Origin
    seed_id: str
    seed_rank: int
    score: float
    decision: Decision | None = None


@dataclass(frozen=True)
class SkippedNeighbor:
    """A neighbour that could not be decided, and why."""

    seed_id: str
    neighbor_id: str
    reason: SkipReason
    detail: str


@dataclass(frozen=True)
class ExpansionResult:
    """What SCAR selected for one query.

    Attributes:
        selected: Seeds in rank order, then accepted neighbours in the order they were accepted.
        decisions: One record per neighbour that was decided (accepted or not).
        skipped: Neighbours that could not be decided (no usable vector).
    """

    selected: tuple[SelectedChunk, ...]
    decisions: tuple[Decision, ...] = ()
    skipped: tuple[SkippedNeighbor, ...] = field(default_factory=tuple)

    @property
    def chunk_ids(self) -> list[str]:
        """Every seed plus every accepted neighbour, without duplicates."""
        return [chunk.chunk_id for chunk in self.selected]

    @property
    def seed_ids(self) -> list[str]:
        """The seeds, best first."""
        return [chunk.chunk_id for chunk in self.selected if chunk.origin == "seed"]

    @property
    def neighbor_ids(self) -> list[str]:
        """The accepted neighbours, in the order they were accepted."""
        return [chunk.chunk_id for chunk in self.selected if chunk.origin == "neighbor"]

    def get(self, chunk_id: str) -> SelectedChunk | None:
        """Return the selected chunk with this id, or ``None``."""
        for chunk in self.selected:
            if chunk.chunk_id == chunk_id:
                return chunk
        return None


def as_graph(
    neighbors: Links | NeighborGraph, documents: Mapping[str, str] | None = None
) -> NeighborGraph:
    """Return ``neighbors`` as a :class:`NeighborGraph` (building one from a mapping if needed)."""
    if isinstance(neighbors, NeighborGraph):
        return neighbors
    return NeighborGraph(neighbors, documents)


class ScarPolicy:
    """The SCAR rule with fixed, validated settings.

    Args:
        settings: The rule's settings; the paper's defaults when omitted.

    Example:
        >>> import numpy as np
        >>> policy = ScarPolicy(ScarSettings(gamma=0.5))
        >>> vectors = {"a": np.array([1.0, 0.0]), "b": np.array([0.9, 0.1])}
        >>> policy.expand(np.array([1.0, 0.0]), ["a"], {"a": (None, "b")}, vectors).chunk_ids
        ['a', 'b']
    """

    def __init__(self, settings: ScarSettings | None = None) -> None:
        self.settings = settings or ScarSettings()

    def expand(
        self,
        query: npt.ArrayLike,
        seeds: Sequence[str],
        neighbors: Links | NeighborGraph,
        vectors: VectorSource,
    ) -> ExpansionResult:
        """Expand one query's seeds. See :func:`expand`."""
        query_matrix = numeric_array(query, "the query vector")
        if query_matrix.ndim != 1:
            raise InvalidVectorError(
                f"the query vector has shape {query_matrix.shape}; expected a 1-D array. "
                "For many queries at once use expand_batch."
            )
        return self.expand_batch(query_matrix[None, :], [seeds], neighbors, vectors)[0]

    def expand_batch(
        self,
        queries: npt.ArrayLike,
        seeds: Sequence[Sequence[str]],
        neighbors: Links | NeighborGraph,
        vectors: VectorSource,
    ) -> list[ExpansionResult]:
        """Expand many queries at once with one vector lookup and vectorised cosines.

        Args:
            queries: A ``(n_queries, d)`` array of query embeddings, any scale.
            seeds: For each query, its retrieved chunk ids, best first.
            neighbors: ``id -> (previous, next)`` links or a :class:`NeighborGraph`.
            vectors: ``id -> vector`` mapping or a :class:`~scar_core.vectors.VectorLookup`.

        Returns:
            One :class:`ExpansionResult` per query, in order.
        """
        return _expand_batch(queries, seeds, as_graph(neighbors), vectors, self.settings, False)

    def static_window(
        self,
        query: npt.ArrayLike,
        seeds: Sequence[str],
        neighbors: Links | NeighborGraph,
        vectors: VectorSource,
    ) -> ExpansionResult:
        """Accept every neighbour within the window: the static-window baseline, scored alike."""
        query_matrix = numeric_array(query, "the query vector")
        if query_matrix.ndim != 1:
            raise InvalidVectorError(
                f"the query vector has shape {query_matrix.shape}; expected a 1-D array."
            )
        return _expand_batch(
            query_matrix[None, :], [seeds], as_graph(neighbors), vectors, self.settings, True
        )[0]


def expand(
    query: npt.ArrayLike,
    seeds: Sequence[str],
    neighbors: Links | NeighborGraph,
    vectors: VectorSource,
    lambda_: float = DEFAULT_LAMBDA,
    gamma: float = DEFAULT_GAMMA,
    window: int = DEFAULT_WINDOW,
    *,
    direction: Direction = "both",
) -> ExpansionResult:
    """Add to each retrieved seed the adjacent chunks that continue its evidence.

    For seed ``c`` and neighbour ``n``: ``b = 1 - cos(e_c, e_n)``, ``S = cos(e_q, e_n) - lambda_ * b``,
    and ``n`` is accepted when ``S > gamma * cos(e_q, e_c)``. Seeds are never dropped.

    Args:
        query: The query embedding (1-D, any scale).
        seeds: Retrieved chunk ids, best first. Duplicates are ignored after the first.
        neighbors: ``id -> (previous id or None, next id or None)``, or a :class:`NeighborGraph`.
        vectors: ``id -> 1-D vector`` (any scale), or a :class:`~scar_core.vectors.VectorLookup`.
        lambda_: Boundary-penalty weight, ``>= 0``.
        gamma: Relative threshold in ``(0, 1]``.
        window: Maximum steps from a seed, integer ``>= 1``.
        direction: ``"both"``, ``"previous"`` or ``"next"``.

    Returns:
        The selected chunk ids, every decision and every skipped neighbour.

    Raises:
        InvalidSettingsError: If a setting is out of range.
        InvalidVectorError: If the query or a seed vector is NaN, infinite, zero or mis-shaped.
        MissingVectorError: If a seed has no vector.

    Example:
        >>> import numpy as np
        >>> vectors = {"a": np.array([1.0, 0.0]), "b": np.array([0.0, 1.0])}
        >>> expand(np.array([1.0, 0.0]), ["a"], {"a": (None, "b")}, vectors).chunk_ids
        ['a']
    """
    settings = ScarSettings(lambda_=lambda_, gamma=gamma, window=window, direction=direction)
    return ScarPolicy(settings).expand(query, seeds, neighbors, vectors)


def expand_batch(
    queries: npt.ArrayLike,
    seeds: Sequence[Sequence[str]],
    neighbors: Links | NeighborGraph,
    vectors: VectorSource,
    settings: ScarSettings | None = None,
) -> list[ExpansionResult]:
    """Expand many queries at once. See :meth:`ScarPolicy.expand_batch`."""
    return ScarPolicy(settings).expand_batch(queries, seeds, neighbors, vectors)


# --------------------------------------------------------------------------------------------
# Implementation


def _dedupe(ids: Sequence[str]) -> list[str]:
    seen: set[str] = set()
    unique: list[str] = []
    for chunk_id in ids:
        if not isinstance(chunk_id, str):
            raise InvalidVectorError(
                f"seed id {chunk_id!r} is of type {type(chunk_id).__name__}; chunk ids must be str."
            )
        if chunk_id not in seen:
            seen.add(chunk_id)
            unique.append(chunk_id)
    return unique


def numeric_array(value: npt.ArrayLike, what: str) -> npt.NDArray[np.float64]:
    """Return ``value`` as a float64 array, or raise :class:`InvalidVectorError` naming ``what``.

    Raises:
        InvalidVectorError: If ``value`` is not numeric or is ragged (rows of unequal lengths).
    """
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidVectorError(
            f"{what} is not a numeric array ({exc}); pass the embedding as numbers."
        ) from exc


def _check_query_matrix(queries: npt.ArrayLike) -> npt.NDArray[np.float64]:
    matrix = numeric_array(queries, "the query matrix")
    if matrix.ndim != 2 or matrix.shape[1] == 0:
        raise InvalidVectorError(
            f"queries have shape {matrix.shape}; expected (n_queries, dimension) with dimension > 0."
        )
    finite: npt.NDArray[np.bool_] = np.asarray(np.isfinite(matrix).all(axis=1))
    for index in range(matrix.shape[0]):
        if not finite[index]:
            raise InvalidVectorError(
                f"query {index} has NaN or infinite values; check the embedding model's output."
            )
        if not np.any(matrix[index]):
            raise InvalidVectorError(
                f"query {index} is a zero vector, so its cosine to any chunk is undefined; "
                "check that the query text is not empty."
            )
    return unit_rows(matrix)


def vector_problem(vector: npt.ArrayLike, dimension: int) -> str | None:
    """Return why a vector is unusable, or ``None`` when it is fine."""
    try:
        array = np.asarray(vector, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        return f"it is not numeric ({exc})"
    if array.ndim != 1:
        return f"it has shape {array.shape}, not a 1-D array"
    if array.shape[0] != dimension:
        return f"it has dimension {array.shape[0]}, but the query has dimension {dimension}"
    if not np.isfinite(array).all():
        return "it has NaN or infinite values"
    if not np.any(array):
        return "it is a zero vector"
    return None


def unit_vector_or_problem(
    vector: npt.ArrayLike, dimension: int
) -> tuple[npt.NDArray[np.float64] | None, str | None]:
    """Return ``(unit vector, None)``, or ``(None, why it is unusable)``.

    The same checks as :func:`vector_problem` and the same unit vector as
    :func:`~scar_core.scoring.as_unit_vector`, with one dot product on the common path (a vector
    of ordinary magnitude) instead of several passes: per-chunk selection calls it often.
    """
    try:
        array = np.asarray(vector, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        return None, f"it is not numeric ({exc})"
    if array.ndim == 1 and array.shape[0] == dimension:
        if not array.flags.c_contiguous:
            # np.linalg.norm takes its dot product on a contiguous copy; a strided one can sum
            # in another order and differ in the last bit.
            array = array.copy()
        # vdot is the BLAS dot product np.linalg.norm takes of a 1-D float64 array (sqrt(x . x)),
        # so the result is bit for bit as_unit_vector's whenever the norm lies in its plain
        # range; unlike x @ x it raises no floating-point warning (an overflow is just inf, which
        # the range check sends to the slow path), so no errstate is needed.
        squared = float(np.vdot(array, array))
        if _SAFE_SQUARED_LOW < squared < _SAFE_SQUARED_HIGH:
            unit: npt.NDArray[np.float64] = array / math.sqrt(squared)
            return unit, None
    problem = vector_problem(array, dimension)
    if problem is not None:
        return None, problem
    return as_unit_vector(array), None


@dataclass
class _Walk:
    """The candidate path of one seed in one direction, with the cosines precomputed."""

    direction: Step
    path: list[str]


def _expand_batch(
    queries: npt.ArrayLike,
    seeds_per_query: Sequence[Sequence[str]],
    graph: NeighborGraph,
    vectors: VectorSource,
    settings: ScarSettings,
    accept_all: bool,
) -> list[ExpansionResult]:
    query_units = _check_query_matrix(queries)
    if len(seeds_per_query) != query_units.shape[0]:
        raise InvalidVectorError(
            f"got {query_units.shape[0]} queries but {len(seeds_per_query)} seed lists; "
            "pass one seed list per query."
        )
    dimension = query_units.shape[1]
    steps = steps_for(settings.direction)

    # 1. Plan every walk from the graph alone, and collect every id that needs a vector.
    plans: list[tuple[list[str], dict[str, list[_Walk]]]] = []
    needed: dict[str, None] = {}
    for raw_seeds in seeds_per_query:
        seeds = _dedupe(raw_seeds)
        walks = {
            seed: [_Walk(step, graph.walk(seed, step, settings.window)) for step in steps]
            for seed in seeds
        }
        plans.append((seeds, walks))
        for seed in seeds:
            needed[seed] = None
            for walk in walks[seed]:
                needed.update(dict.fromkeys(walk.path))

    # 2. One lookup for the whole batch; validate and normalise into one matrix.
    found = lookup_vectors(vectors, list(needed))
    row_of: dict[str, int] = {}
    rows: list[npt.NDArray[np.float64]] = []
    problems: dict[str, str] = {}
    for chunk_id in needed:
        if chunk_id not in found:
            continue
        problem = vector_problem(found[chunk_id], dimension)
        if problem is not None:
            problems[chunk_id] = problem
            continue
        row_of[chunk_id] = len(rows)
        rows.append(np.asarray(found[chunk_id], dtype=np.float64))
    matrix = np.vstack(rows) if rows else np.zeros((0, dimension))
    units = unit_rows(matrix) if rows else matrix

    results: list[ExpansionResult] = []
    for query_index, (seeds, walks) in enumerate(plans):
        for seed in seeds:
            if seed in problems:
                raise InvalidVectorError(
                    f"the vector of seed {seed!r} is unusable: {problems[seed]}."
                )
            if seed not in row_of:
                raise MissingVectorError(
                    f"seed {seed!r} has no vector; every retrieved chunk needs one "
                    "(check that it was embedded and stored under this id)."
                )
        # 3. Cosines to the query for every chunk this query touches, in one product.
        touched = list(
            dict.fromkeys(
                [*seeds, *(c for s in seeds for w in walks[s] for c in w.path if c in row_of)]
            )
        )
        relevance_values = units[[row_of[c] for c in touched]] @ query_units[query_index]
        relevance = dict(zip(touched, relevance_values.tolist(), strict=True))
        results.append(
            _decide(seeds, walks, relevance, units, row_of, problems, settings, accept_all)
        )
    return results


def _decide(
    seeds: list[str],
    walks: dict[str, list[_Walk]],
    relevance: dict[str, float],
    units: npt.NDArray[np.float64],
    row_of: dict[str, int],
    problems: dict[str, str],
    settings: ScarSettings,
    accept_all: bool,
) -> ExpansionResult:
    selected: dict[str, SelectedChunk] = {
        seed: SelectedChunk(seed, "seed", seed, rank, relevance[seed])
        for rank, seed in enumerate(seeds)
    }
    decisions: list[Decision] = []
    skipped: list[SkippedNeighbor] = []
    for rank, seed in enumerate(seeds):
        threshold = settings.gamma * relevance[seed]
        for walk in walks[seed]:
            via = seed
            for distance, candidate in enumerate(walk.path, start=1):
                if candidate in selected:
                    via = candidate
                    continue
                if candidate not in row_of:
                    reason: SkipReason = (
                        "invalid_vector" if candidate in problems else "missing_vector"
                    )
                    detail = problems.get(candidate, "no vector is stored for it")
                    log = logger.warning if reason == "invalid_vector" else logger.debug
                    log("skipped neighbour %r of seed %r: %s", candidate, seed, detail)
                    skipped.append(SkippedNeighbor(seed, candidate, reason, detail))
                    break
                boundary_cosine = float(units[row_of[via]] @ units[row_of[candidate]])
                penalty = 1.0 - boundary_cosine
                score = relevance[candidate] - settings.lambda_ * penalty
                accepted = accept_all or score > threshold
                decision = Decision(
                    seed_id=seed,
                    neighbor_id=candidate,
                    via_id=via,
                    direction=walk.direction,
                    distance=distance,
                    relevance=relevance[candidate],
                    boundary_penalty=penalty,
                    score=score,
                    threshold=threshold,
                    accepted=accepted,
                )
                decisions.append(decision)
                if not accepted:
                    break
                selected[candidate] = SelectedChunk(
                    candidate, "neighbor", seed, rank, score, decision
                )
                via = candidate
    return ExpansionResult(tuple(selected.values()), tuple(decisions), tuple(skipped))
