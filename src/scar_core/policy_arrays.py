"""The SCAR policy over arrays: many queries at once, at close to memory speed.

:func:`scar_core.policy.expand_batch` takes chunk ids and returns one
:class:`~scar_core.policy.ExpansionResult` per query, which costs Python work per decision.
:func:`expand_batch_arrays` takes rows of one vector matrix instead (seeds, links and vectors as
arrays) and returns a :class:`BatchExpansion` of arrays; the per-query result objects are built
only when asked for (:meth:`BatchExpansion.result`), and equal what ``expand_batch`` returns.

The walk rule is the one documented in :mod:`scar_core.policy`. How it is evaluated:

1. Every walk's path (up to ``window`` chunks per seed and direction) is read from the link
   arrays, rank by rank for all queries at once.
2. The cosines each decision needs (query-chunk and chunk-chunk along the path) are computed in
   blocks of queries whose gathered vectors fit in the processor's cache, in the matrix's own
   precision (float32 stays float32).
3. Decisions are taken seed by seed and step by step, vectorised across queries, because a
   chunk accepted for one seed is passed through, not decided again, by the seeds after it.

Float32 arithmetic can misjudge a score within about ``d * 1e-7`` of its threshold, so every
decision that close, and every vector whose magnitude float32 cannot square safely, is settled
again in float64 from the original rows: the accepted chunks are exactly those of the float64
path.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np
import numpy.typing as npt

from scar_core.errors import InvalidVectorError, LinkError
from scar_core.graph import Step
from scar_core.policy import (
    Decision,
    ExpansionResult,
    SelectedChunk,
    SkippedNeighbor,
    vector_problem,
)
from scar_core.scoring import as_unit_matrix
from scar_core.settings import ScarSettings

__all__ = ["BatchExpansion", "Outcome", "expand_batch_arrays"]

logger = logging.getLogger(__name__)

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

#: Bytes of gathered vectors per block of queries (about a core's share of cache).
_BLOCK_BYTES = 1 << 21
#: Squared norms outside this range are not squared safely in the compute precision.
_SAFE_SQUARED_NORM = {
    np.dtype(np.float32): (1e-30, 1e30),
    np.dtype(np.float64): (1e-200, 1e200),
}


class Outcome(IntEnum):
    """What happened at one position of a walk (:attr:`BatchExpansion.outcome`)."""

    #: The walk ended before this position, or the path has no chunk here.
    NOT_REACHED = 0
    #: Decided and accepted.
    ACCEPTED = 1
    #: Decided and rejected; the walk ends here.
    REJECTED = 2
    #: Already selected (a seed or accepted earlier), so passed through without a decision.
    PASSED = 3
    #: No usable vector (NaN, infinite or zero); the walk ends here.
    SKIPPED = 4


@dataclass(frozen=True)
class BatchExpansion:
    """The SCAR decisions for a batch of queries, as arrays.

    Shapes use ``Q`` queries, ``k`` seed columns, ``S`` directions (:attr:`steps`) and ``W`` the
    window. Rows index the vector matrix given to :func:`expand_batch_arrays`; ``-1`` means none.
    Cosines are in the matrix's precision, except where a decision was settled in float64.

    Attributes:
        seeds: ``(Q, k)`` seed rows, best first, duplicates removed, ``-1`` padding at the end.
        steps: The direction of each walk axis, ``("previous", "next")`` for ``"both"``.
        path: ``(Q, k, S, W)`` the rows on each walk, nearest first.
        outcome: ``(Q, k, S, W)`` an :class:`Outcome` code per position.
        relevance: ``(Q, k, S, W)`` ``cos(q, n)``; NaN where there is no usable vector.
        boundary_penalty: ``(Q, k, S, W)`` ``1 - cos(v, n)``, ``v`` the chunk before ``n``.
        score: ``(Q, k, S, W)`` ``relevance - lambda_ * boundary_penalty``.
        seed_relevance: ``(Q, k)`` ``cos(q, seed)``; NaN for padding.
        threshold: ``(Q, k)`` ``gamma * seed_relevance``.
    """

    seeds: IntArray
    steps: tuple[Step, ...]
    path: IntArray
    outcome: npt.NDArray[np.int8]
    relevance: FloatArray
    boundary_penalty: FloatArray
    score: FloatArray
    seed_relevance: FloatArray
    threshold: FloatArray
    _queries: _Queries = field(repr=False)
    _vectors: npt.NDArray[np.floating] = field(repr=False)
    _settings: ScarSettings = field(repr=False)

    @property
    def decision_count(self) -> int:
        """How many neighbours were decided (accepted or rejected) over the whole batch."""
        decided = (self.outcome == Outcome.ACCEPTED) | (self.outcome == Outcome.REJECTED)
        return int(np.count_nonzero(decided))

    def selected_rows(self, query: int) -> IntArray:
        """The rows one query selected: its seeds, then accepted neighbours in acceptance order."""
        seeds = self.seeds[query]
        accepted = self.path[query][self.outcome[query] == Outcome.ACCEPTED]
        return np.concatenate([seeds[seeds >= 0], accepted]).astype(np.int64)

    def result(self, query: int, chunk_ids: Sequence[str]) -> ExpansionResult:
        """Build one query's :class:`~scar_core.policy.ExpansionResult`, as ``expand`` would.

        The figures are recomputed in float64 from the query's rows, so they match
        :func:`~scar_core.policy.expand_batch` to rounding.

        Args:
            query: The query's index in the batch.
            chunk_ids: The id of every matrix row (``chunk_ids[row]``).

        Returns:
            Seeds in rank order, then accepted neighbours, every decision and every skip.
        """
        seeds = [int(row) for row in self.seeds[query] if row >= 0]
        path = self.path[query]
        outcome = self.outcome[query]
        rows = np.unique(np.concatenate([np.asarray(seeds, dtype=np.int64), path[path >= 0]]))
        position = {int(row): index for index, row in enumerate(rows)}
        units = as_unit_matrix(np.asarray(self._vectors[rows], dtype=np.float64))
        relevance = units @ self._queries.units(np.array([query]))[0]
        settings = self._settings
        selected = [
            SelectedChunk(
                chunk_ids[seed], "seed", chunk_ids[seed], rank, float(relevance[position[seed]])
            )
            for rank, seed in enumerate(seeds)
        ]
        decisions: list[Decision] = []
        skipped: list[SkippedNeighbor] = []
        for rank, seed in enumerate(seeds):
            seed_id = chunk_ids[seed]
            threshold = settings.gamma * float(relevance[position[seed]])
            for walk, step in enumerate(self.steps):
                via = seed
                for distance in range(path.shape[2]):
                    code = outcome[rank, walk, distance]
                    row = int(path[rank, walk, distance])
                    if code == Outcome.PASSED:
                        via = row
                        continue
                    if code == Outcome.SKIPPED:
                        detail = vector_problem(self._vectors[row], self._vectors.shape[1])
                        skipped.append(
                            SkippedNeighbor(
                                seed_id, chunk_ids[row], "invalid_vector", detail or "unusable"
                            )
                        )
                        break
                    if code not in (Outcome.ACCEPTED, Outcome.REJECTED):
                        break
                    penalty = 1.0 - float(units[position[via]] @ units[position[row]])
                    cosine = float(relevance[position[row]])
                    decision = Decision(
                        seed_id=seed_id,
                        neighbor_id=chunk_ids[row],
                        via_id=chunk_ids[via],
                        direction=step,
                        distance=distance + 1,
                        relevance=cosine,
                        boundary_penalty=penalty,
                        score=cosine - settings.lambda_ * penalty,
                        threshold=threshold,
                        accepted=code == Outcome.ACCEPTED,
                    )
                    decisions.append(decision)
                    if code == Outcome.REJECTED:
                        break
                    selected.append(
                        SelectedChunk(
                            chunk_ids[row], "neighbor", seed_id, rank, decision.score, decision
                        )
                    )
                    via = row
        return ExpansionResult(tuple(selected), tuple(decisions), tuple(skipped))


def expand_batch_arrays(
    queries: npt.ArrayLike,
    vectors: npt.ArrayLike,
    seeds: npt.ArrayLike,
    links: npt.ArrayLike,
    settings: ScarSettings | None = None,
) -> BatchExpansion:
    """Expand many queries' seeds at once over a vector matrix; see the module docstring.

    Args:
        queries: ``(Q, d)`` query embeddings, any scale.
        vectors: ``(N, d)`` chunk vectors, one row per chunk, any scale. float32 is kept as it
            is (and is faster); other types are read as float64.
        seeds: ``(Q, k)`` integer rows of each query's retrieved chunks, best first. ``-1`` pads
            a row's end; a repeated row is ignored after its first occurrence.
        links: ``(N, 2)`` integer rows of each chunk's previous and next chunk, ``-1`` for none.
            Links are followed as given (an in-memory :class:`~scar_core.graph.NeighborGraph`
            also refuses links across documents; leave such links out here). A walk stops
            before revisiting a chunk, so cycles are harmless.
        settings: The rule's settings; the paper's defaults when omitted.

    Returns:
        The paths, cosines and outcome of every walk position.

    Raises:
        InvalidVectorError: If a query or a seed's vector is unusable, or an argument has the
            wrong shape, type or range.
        LinkError: If ``links`` has the wrong shape or a row out of range.

    Example:
        >>> import numpy as np
        >>> vectors = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]], dtype=np.float32)
        >>> links = np.array([[-1, 1], [0, 2], [1, -1]])
        >>> batch = expand_batch_arrays([[1.0, 0.0]], vectors, [[0]], links)
        >>> batch.selected_rows(0).tolist()
        [0, 1]
    """
    settings = settings or ScarSettings()
    query_rows = _Queries.check(queries)
    matrix = _check_vectors(vectors, query_rows.dimension)
    seed_rows = _check_seeds(seeds, query_rows.count, matrix.shape[0])
    link_rows = _check_links(links, matrix.shape[0])
    steps: tuple[Step, ...] = (
        ("previous", "next") if settings.direction == "both" else (settings.direction,)
    )
    path = _walk_paths(seed_rows, link_rows, steps, settings.window)
    slots = np.concatenate(
        [np.broadcast_to(seed_rows[:, :, None, None], (*path.shape[:3], 1)), path], axis=3
    )
    geometry = _Geometry.measure(query_rows, matrix, slots)
    geometry.settle_exceptional_rows(query_rows, matrix, slots)
    _require_usable_seeds(geometry, matrix, seed_rows)
    relevance = geometry.relevance[..., 1:]
    penalty = 1.0 - geometry.edge
    score = relevance - settings.lambda_ * penalty
    seed_relevance = np.where(seed_rows >= 0, geometry.relevance[:, :, 0, 0], np.nan)
    threshold = settings.gamma * seed_relevance
    passes = score > threshold[:, :, None, None]
    if geometry.compute_dtype != np.float64:
        _settle_near_ties(
            passes, score, threshold, geometry.usable[..., 1:], query_rows, matrix, slots, settings
        )
    outcome = _decide(seed_rows, path, geometry.usable[..., 1:], passes)
    skipped = int(np.count_nonzero(outcome == Outcome.SKIPPED))
    if skipped:
        logger.warning("skipped %d neighbour(s) whose vectors are unusable", skipped)
    return BatchExpansion(
        seeds=seed_rows,
        steps=steps,
        path=path,
        outcome=outcome,
        relevance=np.where(geometry.usable[..., 1:], relevance, np.nan),
        boundary_penalty=np.where(geometry.usable[..., 1:], penalty, np.nan),
        score=np.where(geometry.usable[..., 1:], score, np.nan),
        seed_relevance=seed_relevance,
        threshold=threshold,
        _queries=query_rows,
        _vectors=matrix,
        _settings=settings,
    )


# --------------------------------------------------------------------------------------------
# Validation


@dataclass(frozen=True)
class _Queries:
    """The query matrix as given (float32 kept), validated like the object path's."""

    rows: npt.NDArray[np.floating]

    @classmethod
    def check(cls, queries: npt.ArrayLike) -> _Queries:
        array = np.asarray(queries)
        if array.dtype != np.float32:
            try:
                array = np.asarray(array, dtype=np.float64)
            except (TypeError, ValueError) as error:
                raise InvalidVectorError(f"the query matrix is not numeric ({error}).") from error
        if array.ndim != 2 or array.shape[1] == 0:
            raise InvalidVectorError(
                f"queries have shape {array.shape}; expected (n_queries, dimension) with "
                "dimension > 0."
            )
        finite = np.isfinite(array).all(axis=1)
        if not finite.all():
            raise InvalidVectorError(
                f"query {int(np.argmin(finite))} has NaN or infinite values; check the embedding "
                "model's output."
            )
        nonzero = np.any(array, axis=1)
        if not nonzero.all():
            raise InvalidVectorError(
                f"query {int(np.argmin(nonzero))} is a zero vector, so its cosine to any chunk is "
                "undefined; check that the query text is not empty."
            )
        return cls(array)

    @property
    def count(self) -> int:
        return int(self.rows.shape[0])

    @property
    def dimension(self) -> int:
        return int(self.rows.shape[1])

    def units(self, indices: npt.NDArray[np.integer]) -> FloatArray:
        """The queries at ``indices`` scaled to unit length, in float64."""
        return as_unit_matrix(np.asarray(self.rows[indices], dtype=np.float64))

    def scaled(self, dtype: np.dtype[np.floating]) -> tuple[npt.NDArray[np.floating], FloatArray]:
        """The queries in ``dtype`` and their norms, rescaled first where squaring is unsafe."""
        squared = _vecdot(self.rows, self.rows)
        low, high = _SAFE_SQUARED_NORM[np.dtype(self.rows.dtype)]
        if np.all((squared > low) & (squared < high)):
            return self.rows.astype(dtype, copy=False), np.sqrt(squared)
        units = self.units(np.arange(self.count))
        return units.astype(dtype, copy=False), np.ones(self.count)


def _integer_array(value: npt.ArrayLike, what: str, error: type[Exception]) -> IntArray:
    array = np.asarray(value)
    if array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.integer):
        raise error(f"{what} must be an integer array; got dtype {array.dtype}.")
    return np.asarray(array, dtype=np.int64)


def _check_vectors(vectors: npt.ArrayLike, dimension: int) -> npt.NDArray[np.floating]:
    array = np.asarray(vectors)
    if array.dtype != np.float32:
        try:
            array = np.asarray(array, dtype=np.float64)
        except (TypeError, ValueError) as error:
            raise InvalidVectorError(f"the vector matrix is not numeric ({error}).") from error
    if array.ndim != 2 or array.shape[1] != dimension:
        raise InvalidVectorError(
            f"the vector matrix has shape {array.shape}; expected (n_chunks, {dimension}), "
            "the queries' dimension."
        )
    return array


def _check_seeds(seeds: npt.ArrayLike, n_queries: int, n_rows: int) -> IntArray:
    rows = _integer_array(seeds, "seeds", InvalidVectorError)
    if rows.ndim != 2 or rows.shape[0] != n_queries:
        raise InvalidVectorError(
            f"seeds have shape {rows.shape}; expected ({n_queries}, k): one row per query."
        )
    if rows.size and (rows.min() < -1 or rows.max() >= n_rows):
        raise InvalidVectorError(
            f"seed rows must lie in [-1, {n_rows - 1}] (-1 pads); got values from {rows.min()} "
            f"to {rows.max()}."
        )
    padding = rows < 0
    if rows.shape[1] > 1 and np.any(padding[:, :-1] & ~padding[:, 1:]):
        query = int(np.nonzero((padding[:, :-1] & ~padding[:, 1:]).any(axis=1))[0][0])
        raise InvalidVectorError(
            f"the seeds of query {query} have -1 before a real row; -1 may only pad the end."
        )
    ordered = np.sort(rows, axis=1)
    repeated = (ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)
    if not np.any(repeated):
        return rows
    deduplicated = np.full_like(rows, -1)
    for query in range(n_queries):
        unique = list(dict.fromkeys(int(row) for row in rows[query] if row >= 0))
        deduplicated[query, : len(unique)] = unique
    return deduplicated


def _check_links(links: npt.ArrayLike, n_rows: int) -> IntArray:
    rows = _integer_array(links, "links", LinkError)
    if rows.shape != (n_rows, 2):
        raise LinkError(
            f"links have shape {rows.shape}; expected ({n_rows}, 2): the previous and next row "
            "of every chunk, -1 for none."
        )
    if rows.size and (rows.min() < -1 or rows.max() >= n_rows):
        raise LinkError(f"link rows must lie in [-1, {n_rows - 1}]; -1 means no neighbour.")
    return rows


# --------------------------------------------------------------------------------------------
# Paths, cosines, decisions


def _walk_paths(
    seed_rows: IntArray, link_rows: IntArray, steps: tuple[Step, ...], window: int
) -> IntArray:
    """Return ``(Q, k, S, W)`` rows on each walk; a walk stops at -1 and before a revisit."""
    path = np.full((*seed_rows.shape, len(steps), window), -1, dtype=np.int64)
    for walk, step in enumerate(steps):
        column = 0 if step == "previous" else 1
        visited = [seed_rows]
        here = seed_rows
        for distance in range(window):
            following = np.where(here >= 0, link_rows[np.maximum(here, 0), column], -1)
            for earlier in visited:
                following = np.where(following == earlier, -1, following)
            path[:, :, walk, distance] = following
            visited.append(following)
            here = following
    return path


@dataclass
class _Geometry:
    """Cosines of every walk position: slot 0 is the seed, slots 1..W the path."""

    compute_dtype: np.dtype[np.floating]
    squared_norm: FloatArray  # (Q, k, S, W+1)
    relevance: FloatArray  # (Q, k, S, W+1) cos(q, slot)
    edge: FloatArray  # (Q, k, S, W) cos(slot t, slot t+1)
    usable: npt.NDArray[np.bool_]  # (Q, k, S, W+1)

    @classmethod
    def measure(
        cls, query_rows: _Queries, matrix: npt.NDArray[np.floating], slots: IntArray
    ) -> _Geometry:
        n_queries, dimension = query_rows.count, query_rows.dimension
        dtype = matrix.dtype
        queries, query_norms = query_rows.scaled(np.dtype(dtype))
        seeds = np.maximum(slots[:, :, 0, 0], 0)
        path = np.maximum(slots[..., 1:], 0)
        per_query = (seeds.shape[1] + int(np.prod(path.shape[1:]))) * dimension * dtype.itemsize
        block = max(1, _BLOCK_BYTES // max(per_query, 1))
        squared = np.empty(slots.shape, dtype=np.float64)
        dots = np.empty(slots.shape, dtype=np.float64)
        edge_dots = np.empty(path.shape, dtype=np.float64)
        # Gathered rows land in buffers reused across blocks: fresh memory would page-fault.
        seed_buffer = np.empty((block, *seeds.shape[1:], dimension), dtype=dtype)
        path_buffer = np.empty((block, *path.shape[1:], dimension), dtype=dtype)
        for start in range(0, n_queries, block):
            stop = min(n_queries, start + block)
            seed_rows = np.take(
                matrix, seeds[start:stop], axis=0, out=seed_buffer[: stop - start], mode="clip"
            )
            seed_rows = seed_rows[:, :, None, :]
            path_rows = np.take(
                matrix, path[start:stop], axis=0, out=path_buffer[: stop - start], mode="clip"
            )
            query = queries[start:stop, None, None, :]
            squared[start:stop, :, :, :1] = _vecdot(seed_rows, seed_rows)[..., None]
            squared[start:stop, :, :, 1:] = _vecdot(path_rows, path_rows)
            dots[start:stop, :, :, :1] = _vecdot(seed_rows, query)[..., None]
            dots[start:stop, :, :, 1:] = _vecdot(path_rows, query[..., None, :])
            edge_dots[start:stop, :, :, 0] = _vecdot(seed_rows, path_rows[..., 0, :])
            edge_dots[start:stop, :, :, 1:] = _vecdot(path_rows[..., :-1, :], path_rows[..., 1:, :])
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            norms = np.sqrt(squared)
            relevance = dots / (norms * query_norms[:, None, None, None])
            edge = edge_dots / (norms[..., :-1] * norms[..., 1:])
        low, high = _SAFE_SQUARED_NORM[np.dtype(dtype)]
        usable = (slots >= 0) & (squared > low) & (squared < high)
        return cls(np.dtype(dtype), squared, relevance, edge, usable)

    def settle_exceptional_rows(
        self, query_rows: _Queries, matrix: npt.NDArray[np.floating], slots: IntArray
    ) -> None:
        """Decide usability, and compute cosines in float64, where squaring was not safe."""
        present = slots >= 0
        exceptional = present & ~self.usable
        if not np.any(exceptional):
            return
        rows = np.unique(slots[exceptional])
        problems = {int(row): vector_problem(matrix[row], matrix.shape[1]) for row in rows}
        fine = np.array([problems[int(row)] is None for row in rows], dtype=bool)
        recovered = exceptional & np.isin(slots, rows[fine])
        self.usable |= recovered
        # Recompute every cosine that touches a recovered row, from unit vectors in float64.
        touches = recovered.copy()
        touches[..., 1:] |= recovered[..., :-1]
        for index in zip(*np.nonzero(touches), strict=True):
            query, rank, walk, slot = (int(i) for i in index)
            here = int(slots[query, rank, walk, slot])
            units = as_unit_matrix(np.asarray(matrix[[here]], dtype=np.float64))
            query_unit = query_rows.units(np.array([query]))[0]
            self.relevance[query, rank, walk, slot] = float(units[0] @ query_unit)
            if slot > 0 and self.usable[query, rank, walk, slot - 1]:
                before = int(slots[query, rank, walk, slot - 1])
                pair = as_unit_matrix(np.asarray(matrix[[before, here]], dtype=np.float64))
                self.edge[query, rank, walk, slot - 1] = float(pair[0] @ pair[1])


def _vecdot(left: npt.NDArray[np.floating], right: npt.NDArray[np.floating]) -> FloatArray:
    """Dot products along the last axis (``np.vecdot`` where numpy has it).

    Overflow and NaN are left in the result, where the callers look for them.
    """
    vecdot = getattr(np, "vecdot", None)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        if vecdot is not None:
            return np.asarray(vecdot(left, right), dtype=np.float64)
        return np.asarray(np.einsum("...x,...x->...", left, right), dtype=np.float64)


def _require_usable_seeds(
    geometry: _Geometry, matrix: npt.NDArray[np.floating], seed_rows: IntArray
) -> None:
    bad = (seed_rows >= 0) & ~geometry.usable[:, :, 0, 0]
    if np.any(bad):
        query, rank = (int(i) for i in np.argwhere(bad)[0])
        row = int(seed_rows[query, rank])
        problem = vector_problem(matrix[row], matrix.shape[1]) or "unusable"
        raise InvalidVectorError(
            f"the vector of seed row {row} (query {query}, rank {rank}) is unusable: {problem}."
        )


def _settle_near_ties(
    passes: npt.NDArray[np.bool_],
    score: FloatArray,
    threshold: FloatArray,
    usable: npt.NDArray[np.bool_],
    query_rows: _Queries,
    matrix: npt.NDArray[np.floating],
    slots: IntArray,
    settings: ScarSettings,
) -> None:
    """Re-decide in float64 every decision float32 arithmetic could have got wrong.

    A float32 dot product of ``d`` terms errs by at most ``d * u`` times the norms' product
    (``u = 2**-24``), so each cosine by about ``2 d u``; the margin covers the score and the
    threshold together, doubled.
    """
    dimension = matrix.shape[1]
    unit_roundoff = float(np.finfo(np.float32).eps) / 2
    margin = 4.0 * dimension * unit_roundoff * (1.0 + settings.lambda_ + settings.gamma)
    with np.errstate(invalid="ignore"):
        close = usable & (np.abs(score - threshold[:, :, None, None]) <= margin)
    if not np.any(close):
        return
    query, rank, walk, distance = np.nonzero(close)
    here = slots[query, rank, walk, distance + 1]
    before = slots[query, rank, walk, distance]
    seed = slots[query, rank, walk, 0]
    settled = np.empty(len(query), dtype=bool)
    block = max(1, _BLOCK_BYTES // (3 * dimension * 8))
    for start in range(0, len(query), block):
        part = slice(start, start + block)
        queries = query_rows.units(query[part])
        # These rows were squared safely in float32, so their float64 norms are exact enough.
        candidate, via, origin = (
            np.asarray(matrix[rows[part]], dtype=np.float64) for rows in (here, before, seed)
        )
        candidate_norm = np.sqrt(_vecdot(candidate, candidate))
        relevance = _vecdot(candidate, queries) / candidate_norm
        boundary = _vecdot(via, candidate) / (np.sqrt(_vecdot(via, via)) * candidate_norm)
        seed_relevance = _vecdot(origin, queries) / np.sqrt(_vecdot(origin, origin))
        exact_score = relevance - settings.lambda_ * (1.0 - boundary)
        settled[part] = exact_score > settings.gamma * seed_relevance
    passes[query, rank, walk, distance] = settled


def _decide(
    seed_rows: IntArray,
    path: IntArray,
    usable: npt.NDArray[np.bool_],
    passes: npt.NDArray[np.bool_],
) -> npt.NDArray[np.int8]:
    """Walk every seed's paths in rank order, vectorised across queries."""
    n_queries, k, n_steps, window = path.shape
    outcome = np.zeros(path.shape, dtype=np.int8)
    selected = np.full((n_queries, k + k * n_steps * window), -1, dtype=np.int64)
    selected[:, :k] = seed_rows
    count = np.full(n_queries, k, dtype=np.int64)
    everyone = np.arange(n_queries)
    for rank in range(k):
        present = seed_rows[:, rank] >= 0
        for walk in range(n_steps):
            alive = present
            for distance in range(window):
                candidate = path[:, rank, walk, distance]
                active = alive & (candidate >= 0)
                if not np.any(active):
                    break
                filled = selected[:, : int(count.max())]
                known = active & (filled == candidate[:, None]).any(axis=1)
                deciding = active & ~known
                skipped = deciding & ~usable[:, rank, walk, distance]
                deciding &= ~skipped
                accepted = deciding & passes[:, rank, walk, distance]
                rejected = deciding & ~accepted
                codes = outcome[:, rank, walk, distance]
                codes[known] = Outcome.PASSED
                codes[skipped] = Outcome.SKIPPED
                codes[accepted] = Outcome.ACCEPTED
                codes[rejected] = Outcome.REJECTED
                takers = everyone[accepted]
                selected[takers, count[takers]] = candidate[takers]
                count[takers] += 1
                alive = known | accepted
    return outcome
