"""The SCAR policy over arrays: many queries at once, at close to memory speed.

:func:`scar_core.policy.expand_batch` takes chunk ids and returns one
:class:`~scar_core.policy.ExpansionResult` per query, which costs Python work per decision.
:func:`expand_batch_arrays` takes rows of one vector matrix instead (seeds, links and vectors as
arrays) and returns a :class:`BatchExpansion` of arrays; the per-query result objects are built
only when asked for (:meth:`BatchExpansion.result`), and equal what ``expand_batch`` returns.

The walk rule is the one documented in :mod:`scar_core.policy`. How it is evaluated:

1. Every walk's path (up to ``window`` chunks per seed and direction) is read from the link
   arrays, step by step for all queries at once.
2. The seeds and every walk's first step are measured for the whole batch, in blocks of queries
   whose gathered rows fit in the processor's cache, into one reused buffer, with one call per
   block for each kind of dot product (squared norms, query dots, dots across the step), in the
   matrix's own precision (float32 stays float32).
3. A later step is only reached after the step before it was accepted or passed through, so only
   the later steps that can be reached are read: those after a step that passes or lands on a
   seed, measured in one batch per distance (a step out of a seed the way that seed's own walk
   goes is that walk's first step, and is copied rather than measured again). Any other step the
   walk reaches (one accepted earlier by another walk) is measured when the walk gets there.
4. Decisions are taken seed by seed and step by step, vectorised across queries, because a
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
from typing import Any

import numpy as np
import numpy.typing as npt

from scar_core.errors import InvalidVectorError, LinkError
from scar_core.graph import Step, steps_for
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
#: Rows per query from which a stacked matrix-vector product beats row-by-row dot products.
_MATMUL_WIDTH = 8
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
    Cosines are computed from dot products in the matrix's precision (a decision too close to
    call in float32 is settled in float64, but the figure stays). The per-position figures
    (relevance, penalty, score) are given where a decision was taken (:attr:`Outcome.ACCEPTED`
    or :attr:`Outcome.REJECTED`) and are NaN elsewhere: positions that were passed through, not
    reached or skipped are not decided, and positions that cannot be reached are not read.

    Attributes:
        seeds: ``(Q, k)`` seed rows, best first, duplicates removed, ``-1`` padding at the end.
        steps: The direction of each walk axis, ``("previous", "next")`` for ``"both"``.
        path: ``(Q, k, S, W)`` the rows on each walk, nearest first.
        outcome: ``(Q, k, S, W)`` an :class:`Outcome` code per position.
        relevance: ``(Q, k, S, W)`` ``cos(q, n)``; NaN where not decided.
        boundary_penalty: ``(Q, k, S, W)`` ``1 - cos(v, n)``, ``v`` the chunk before ``n``; NaN
            where not decided.
        score: ``(Q, k, S, W)`` ``relevance - lambda_ * boundary_penalty``; NaN where not
            decided.
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
        The paths and outcome of every walk position, and the cosines of every decision.

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
    steps = steps_for(settings.direction)
    path = _walk_paths(seed_rows, link_rows, steps, settings.window)
    context = _Context.create(query_rows, matrix, settings)
    first = _measure_steps(context, np.arange(query_rows.count), seed_rows, path[..., 0])
    _require_usable_seeds(first.via_usable, matrix, seed_rows)
    seed_relevance = np.where(seed_rows >= 0, first.via_relevance, np.nan)
    threshold = settings.gamma * seed_relevance
    walks = _decide(context, seed_rows, path, first, threshold)
    skipped = int(np.count_nonzero(walks.outcome == Outcome.SKIPPED))
    if skipped:
        logger.warning("skipped %d neighbour(s) whose vectors are unusable", skipped)
    return BatchExpansion(
        seeds=seed_rows,
        steps=steps,
        path=path,
        outcome=walks.outcome,
        relevance=walks.relevance,
        boundary_penalty=walks.boundary_penalty,
        score=walks.score,
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
    #: Squared norms, computed in the rows' precision (may overflow or underflow).
    squared: FloatArray

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
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            squared = _dots(array, array, array.dtype).astype(np.float64)
        # A NaN or infinite entry makes the squared norm NaN or infinite, and only a zero vector
        # (or one whose squares underflow) has a zero squared norm: one pass settles most batches.
        if not np.all(np.isfinite(squared) & (squared > 0)):
            cls._explain(array)
        return cls(array, squared)

    @staticmethod
    def _explain(array: npt.NDArray[np.floating]) -> None:
        """Raise for the first query that is not finite or is zero; return if there is none."""
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
        squared = self.squared
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
        # One column of links, with a -1 appended so that row -1 (no chunk) leads to -1.
        column = np.append(link_rows[:, 0 if step == "previous" else 1], -1)
        visited = [seed_rows]
        here = seed_rows
        for distance in range(window):
            following = column[here]
            for earlier in visited[:-1]:
                following[following == earlier] = -1
            # The row just left is a self-link; the walk stops there too.
            following[following == here] = -1
            path[:, :, walk, distance] = following
            visited.append(following)
            here = following
    return path


@dataclass
class _Context:
    """What every measurement needs: the queries (as given and scaled), matrix and settings."""

    queries: _Queries
    scaled: tuple[npt.NDArray[np.floating], FloatArray]
    matrix: npt.NDArray[np.floating]
    settings: ScarSettings
    #: Room for one block of gathered rows, reused by every block and step of the call (fresh
    #: memory would page-fault on every use).
    scratch: npt.NDArray[np.floating] = field(repr=False)

    @classmethod
    def create(
        cls, queries: _Queries, matrix: npt.NDArray[np.floating], settings: ScarSettings
    ) -> _Context:
        scaled = queries.scaled(np.dtype(matrix.dtype))
        row_bytes = max(1, matrix.shape[1] * matrix.dtype.itemsize)
        scratch = np.empty(
            max(matrix.shape[1], _BLOCK_BYTES // row_bytes * matrix.shape[1]), matrix.dtype
        )
        return cls(queries, scaled, matrix, settings, scratch)

    def buffer(self, size: int) -> npt.NDArray[np.floating]:
        """``size`` elements of the scratch memory (enlarged when too small), flat."""
        if size > self.scratch.size:
            self.scratch = np.empty(size, dtype=self.scratch.dtype)
        return self.scratch[:size]


@dataclass
class _Steps:
    """Cosines of one step on many walks, from the chunk before (``via``) to ``here``.

    ``via`` has shape ``(m, k)`` and ``here`` ``(m, k, S)``: every ``here[i, j, s]`` is a step
    from ``via[i, j]``, and row ``i`` belongs to query ``who[i]``.
    """

    via_relevance: FloatArray  # (m, k) cos(q, via)
    via_usable: npt.NDArray[np.bool_]  # (m, k)
    relevance: FloatArray  # (m, k, S) cos(q, here)
    edge: FloatArray  # (m, k, S) cos(via, here)
    usable: npt.NDArray[np.bool_]  # (m, k, S)


def _row_dots(
    left: npt.NDArray[np.floating],
    right: npt.NDArray[np.floating],
    out: npt.NDArray[np.floating],
) -> None:
    """Write the dot products along the last axis into ``out`` (``np.vecdot`` where it exists)."""
    vecdot = getattr(np, "vecdot", None)
    if vecdot is not None:
        vecdot(left, right, out=out)
    else:  # numpy < 2
        np.einsum("...x,...x->...", left, right, out=out)


def _dots(
    left: npt.NDArray[np.floating],
    right: npt.NDArray[np.floating],
    dtype: npt.DTypeLike = np.float64,
) -> npt.NDArray[np.floating]:
    """Dot products along the last axis, in a new array of ``dtype``.

    float64 by default; pass the operands' own dtype to keep their precision.
    """
    result = np.empty(np.broadcast_shapes(left.shape, right.shape)[:-1], dtype=dtype)
    _row_dots(left, right, result)
    return result


def _measure_steps(context: _Context, who: IntArray, via: IntArray, here: IntArray) -> _Steps:
    """Measure the cosines of the steps ``via -> here`` for the queries ``who``.

    The rows are gathered in blocks of queries that fit in cache, into one reused buffer, and
    each block takes one call per kind of dot product: squared norms, query dots (a stacked
    matrix-vector product) and the dots across each step. Dots are in the matrix's precision;
    rows float32 cannot square safely are settled in float64 afterwards.
    """
    matrix = context.matrix
    dtype = matrix.dtype
    n_walks, k = via.shape
    n_steps = here.shape[2]
    dimension = matrix.shape[1]
    width = k + k * n_steps
    rows = np.concatenate([via, here.reshape(n_walks, k * n_steps)], axis=1)
    query_matrix, query_norms = context.scaled
    # The whole batch in order reads the queries in place; a subset gathers them per block.
    in_place = who.shape[0] == query_matrix.shape[0] and bool(
        np.all(who == np.arange(who.shape[0]))
    )
    per_walk = (width + (0 if in_place else 1)) * dimension * dtype.itemsize
    block = max(1, min(n_walks, _BLOCK_BYTES // max(per_walk, 1)))
    buffer = context.buffer(block * (width + 1) * dimension)
    row_buffer = buffer[: block * width * dimension].reshape(block, width, dimension)
    query_buffer = buffer[block * width * dimension :].reshape(block, dimension)
    squared = np.empty((n_walks, width), dtype=dtype)
    dots = np.empty((n_walks, width), dtype=dtype)
    edge_dots = np.empty((n_walks, k, n_steps), dtype=dtype)
    # Overflow and NaN are left in the results, where the checks below look for them.
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        for start in range(0, n_walks, block):
            stop = min(n_walks, start + block)
            count = stop - start
            gathered = np.take(
                matrix, rows[start:stop], axis=0, out=row_buffer[:count], mode="clip"
            )
            if in_place:
                query = query_matrix[start:stop]
            else:
                query = np.take(
                    query_matrix, who[start:stop], axis=0, out=query_buffer[:count], mode="clip"
                )
            _row_dots(gathered, gathered, squared[start:stop])
            if width >= _MATMUL_WIDTH:
                np.matmul(gathered, query[:, :, None], out=dots[start:stop, :, None])
            else:
                _row_dots(gathered, query[:, None, :], dots[start:stop])
            _row_dots(
                gathered[:, :k, None, :],
                gathered[:, k:].reshape(count, k, n_steps, dimension),
                edge_dots[start:stop],
            )
    squared64 = squared.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        norms = np.sqrt(squared64)
        relevance = dots / (norms * query_norms[who, None])
        here_norms = norms[:, k:].reshape(n_walks, k, n_steps)
        edge = edge_dots / (norms[:, :k, None] * here_norms)
    low, high = _SAFE_SQUARED_NORM[np.dtype(dtype)]
    safe = (squared64 > low) & (squared64 < high)
    steps = _Steps(
        via_relevance=relevance[:, :k],
        via_usable=(via >= 0) & safe[:, :k],
        relevance=relevance[:, k:].reshape(n_walks, k, n_steps),
        edge=edge,
        usable=(here >= 0) & safe[:, k:].reshape(n_walks, k, n_steps),
    )
    _settle_exceptional_rows(steps, context, who, via, here)
    return steps


def _settle_exceptional_rows(
    steps: _Steps, context: _Context, who: IntArray, via: IntArray, here: IntArray
) -> None:
    """Decide usability, and compute cosines in float64, where squaring was not safe."""
    via_odd = (via >= 0) & ~steps.via_usable
    here_odd = (here >= 0) & ~steps.usable
    if not (np.any(via_odd) or np.any(here_odd)):
        return
    matrix = context.matrix
    rows = np.unique(np.concatenate([via[via_odd], here[here_odd]]))
    fine = {int(row) for row in rows if vector_problem(matrix[row], matrix.shape[1]) is None}
    if not fine:
        return
    fine_rows = np.fromiter(fine, dtype=np.int64)
    via_fine = via_odd & np.isin(via, fine_rows)
    here_fine = here_odd & np.isin(here, fine_rows)
    steps.via_usable |= via_fine
    steps.usable |= here_fine

    def unit(row: int) -> FloatArray:
        unit_row: FloatArray = as_unit_matrix(np.asarray(matrix[[row]], dtype=np.float64))[0]
        return unit_row

    def query_unit(walk: int) -> FloatArray:
        unit_query: FloatArray = context.queries.units(np.array([who[walk]]))[0]
        return unit_query

    # Recompute every cosine that touches a recovered row, from unit vectors in float64.
    for walk, rank in zip(*np.nonzero(via_fine), strict=True):
        steps.via_relevance[walk, rank] = float(unit(int(via[walk, rank])) @ query_unit(walk))
    touches = here_fine | (via_fine[:, :, None] & steps.usable)
    for walk, rank, step in zip(*np.nonzero(touches), strict=True):
        after = unit(int(here[walk, rank, step]))
        steps.relevance[walk, rank, step] = float(after @ query_unit(walk))
        if steps.via_usable[walk, rank]:
            steps.edge[walk, rank, step] = float(unit(int(via[walk, rank])) @ after)


def _require_usable_seeds(
    usable: npt.NDArray[np.bool_], matrix: npt.NDArray[np.floating], seed_rows: IntArray
) -> None:
    bad = (seed_rows >= 0) & ~usable
    if np.any(bad):
        query, rank = (int(i) for i in np.argwhere(bad)[0])
        row = int(seed_rows[query, rank])
        problem = vector_problem(matrix[row], matrix.shape[1]) or "unusable"
        raise InvalidVectorError(
            f"the vector of seed row {row} (query {query}, rank {rank}) is unusable: {problem}."
        )


@dataclass(frozen=True)
class _Judged:
    """The rule applied to measured steps: penalty, score and whether the score passes."""

    penalty: FloatArray
    score: FloatArray
    passes: npt.NDArray[np.bool_]


def _judge(
    context: _Context,
    steps: _Steps,
    threshold: FloatArray,
    who: npt.NDArray[np.integer],
    via: IntArray,
    here: IntArray,
    seed: IntArray,
) -> _Judged:
    """Score the steps ``via -> here`` (all of one shape) against ``threshold``.

    ``who``, ``via``, ``seed`` and ``threshold`` are broadcast to ``here``'s shape. In float32,
    decisions too close to call are settled in float64 (:func:`_settle_near_ties`).
    """
    settings = context.settings
    penalty = 1.0 - steps.edge
    score = steps.relevance - settings.lambda_ * penalty
    passes = score > threshold
    if context.matrix.dtype != np.float64:
        _settle_near_ties(
            passes,
            score,
            threshold,
            steps.usable,
            tuple(np.broadcast_to(rows, here.shape) for rows in (who, here, via, seed)),
            context,
        )
    return _Judged(penalty, score, passes)


def _settle_near_ties(
    passes: npt.NDArray[np.bool_],
    score: FloatArray,
    threshold: FloatArray,
    usable: npt.NDArray[np.bool_],
    rows: tuple[npt.NDArray[np.integer], ...],
    context: _Context,
) -> None:
    """Re-decide in float64 every decision float32 arithmetic could have got wrong.

    A float32 dot product of ``d`` terms errs by at most ``d * u`` times the norms' product
    (``u = 2**-24``), so each cosine by about ``2 d u``; the margin covers the score and the
    threshold together, doubled. ``rows`` holds, per decision, the query, the candidate, the
    chunk before it and the seed.
    """
    matrix, settings = context.matrix, context.settings
    dimension = matrix.shape[1]
    unit_roundoff = float(np.finfo(np.float32).eps) / 2
    margin = 4.0 * dimension * unit_roundoff * (1.0 + settings.lambda_ + settings.gamma)
    with np.errstate(invalid="ignore"):
        close = usable & (np.abs(score - threshold) <= margin)
    if not np.any(close):
        return
    where = np.nonzero(close)
    query, here, before, seed = (np.asarray(part[where]) for part in rows)
    settled = np.empty(len(query), dtype=bool)
    block = max(1, _BLOCK_BYTES // (3 * dimension * 8))
    for start in range(0, len(query), block):
        part = slice(start, start + block)
        queries = context.queries.units(query[part])
        # These rows were squared safely in float32, so their float64 norms are exact enough.
        candidate, via, origin = (
            np.asarray(matrix[chosen[part]], dtype=np.float64) for chosen in (here, before, seed)
        )
        candidate_norm = np.sqrt(_dots(candidate, candidate))
        relevance = _dots(candidate, queries) / candidate_norm
        boundary = _dots(via, candidate) / (np.sqrt(_dots(via, via)) * candidate_norm)
        seed_relevance = _dots(origin, queries) / np.sqrt(_dots(origin, origin))
        exact_score = relevance - settings.lambda_ * (1.0 - boundary)
        settled[part] = exact_score > settings.gamma * seed_relevance
    passes[where] = settled


@dataclass(frozen=True)
class _Walks:
    """The outcome and cosines of every walk position, ``(Q, k, S, W)``."""

    outcome: npt.NDArray[np.int8]
    relevance: FloatArray
    boundary_penalty: FloatArray
    score: FloatArray


@dataclass(frozen=True)
class _Table:
    """What is known of every walk position ``(Q, k, S, W)`` before it is reached."""

    measured: npt.NDArray[np.bool_]
    usable: npt.NDArray[np.bool_]
    passes: npt.NDArray[np.bool_]
    relevance: FloatArray
    penalty: FloatArray
    score: FloatArray

    @classmethod
    def empty(cls, shape: tuple[int, ...]) -> _Table:
        flags = [np.zeros(shape, dtype=bool) for _ in range(3)]
        figures = [np.full(shape, np.nan) for _ in range(3)]
        return cls(*flags, *figures)

    def store(self, at: tuple[Any, ...], steps: _Steps, judged: _Judged) -> None:
        """Record measured steps, shaped ``(m, 1, 1)``, at the ``m`` positions ``at``."""
        flat = np.ravel_multi_index(at, self.measured.shape)
        self.measured.ravel()[flat] = True
        for target, values in (
            (self.usable, steps.usable),
            (self.passes, judged.passes),
            (self.relevance, steps.relevance),
            (self.penalty, judged.penalty),
            (self.score, judged.score),
        ):
            target.ravel()[flat] = values.ravel()


def _on_seed(rows: IntArray, seeds: IntArray) -> npt.NDArray[np.bool_]:
    """Whether each of ``rows`` (shape ``(m, ...)``) is one of its query's ``seeds`` ``(m, k)``."""
    flat = np.ascontiguousarray(rows).reshape(rows.shape[0], int(np.prod(rows.shape[1:])))
    hit = np.zeros(flat.shape, dtype=bool)
    for column in range(seeds.shape[1]):
        hit |= flat == seeds[:, column, None]
    hit &= flat >= 0
    return hit.reshape(rows.shape)


def _measure_positions(
    context: _Context,
    at: tuple[Any, ...],
    walks: tuple[IntArray, IntArray, FloatArray],
    table: _Table,
    first: _Steps | None = None,
) -> None:
    """Measure and judge the later walk positions ``at``: query, rank, walk and distance > 0.

    With ``first`` (the first steps' cosines), a step that leaves one of the query's seeds the
    way that seed's own walk goes is that walk's first step, so its cosines are copied from
    ``first`` instead of measured again. (Seeds next to each other make this common: the walk
    passes through the next seed and then takes that seed's first step.)
    """
    seed_rows, path, threshold = walks
    query, rank, walk, distance = (np.asarray(part) for part in at)
    rank, walk = (np.broadcast_to(part, query.shape) for part in (rank, walk))
    via = path[query, rank, walk, distance - 1]
    here = path[query, rank, walk, distance]
    fresh = np.arange(query.shape[0])
    parts: list[tuple[IntArray, _Steps]] = []
    if first is not None:
        match = seed_rows[query] == via[:, None]
        other = match.argmax(axis=1)
        source = np.ravel_multi_index((query, other, walk), first.usable.shape)
        same = match.any(axis=1) & (path[..., 0].ravel()[source] == here)
        copied = np.flatnonzero(same)
        if copied.size:
            source = source[copied]
            unused = np.empty((copied.size, 0))
            steps = _Steps(
                unused,
                unused.astype(bool),
                first.relevance.ravel()[source][:, None, None],
                first.edge.ravel()[source][:, None, None],
                first.usable.ravel()[source][:, None, None],
            )
            parts.append((copied, steps))
            fresh = np.flatnonzero(~same)
    if fresh.size:
        steps = _measure_steps(context, query[fresh], via[fresh, None], here[fresh, None, None])
        parts.append((fresh, steps))
    for chosen, steps in parts:
        position = query[chosen], rank[chosen]
        judged = _judge(
            context,
            steps,
            threshold[position][:, None, None],
            query[chosen, None, None],
            via[chosen, None, None],
            here[chosen, None, None],
            seed_rows[position][:, None, None],
        )
        table.store((*position, walk[chosen], distance), steps, judged)


class _Accepted:
    """The rows each query accepted so far (few), to pass them through when met again."""

    def __init__(self, n_queries: int, capacity: int) -> None:
        self.rows = np.full((capacity, n_queries), -1, dtype=np.int64)
        self.count = np.zeros(n_queries, dtype=np.int64)
        self.some = np.zeros(n_queries, dtype=bool)
        self.most = 0

    def mark_known(
        self,
        known: npt.NDArray[np.bool_],
        walking: npt.NDArray[np.intp],
        candidate: IntArray,
        *,
        compressed: bool = False,
    ) -> None:
        """Set ``known`` where the candidate was accepted earlier.

        ``known`` and ``candidate`` cover every query, or only ``walking`` when ``compressed``.
        """
        if not self.most:
            return
        some = self.some[walking]
        queries = walking[some]
        rows = candidate[some] if compressed else candidate[queries]
        earlier = (self.rows[: self.most, queries] == rows).any(axis=0)
        if compressed:
            known[some] |= earlier
        else:
            known[queries] |= earlier

    def record(self, queries: npt.NDArray[np.intp], rows: IntArray) -> None:
        """Add ``rows``, accepted by ``queries`` (each query at most once)."""
        if queries.size:
            self.rows[self.count[queries], queries] = rows
            self.count[queries] += 1
            self.some[queries] = True
            self.most = max(self.most, int(self.count[queries].max()))


def _codes(usable: npt.NDArray[np.bool_], passes: npt.NDArray[np.bool_]) -> npt.NDArray[np.int8]:
    """The :class:`Outcome` a decision gives: skipped if unusable, else accepted or rejected."""
    decided = np.where(passes, np.int8(Outcome.ACCEPTED), np.int8(Outcome.REJECTED))
    return np.where(usable, decided, np.int8(Outcome.SKIPPED))


def _decide(
    context: _Context,
    seed_rows: IntArray,
    path: IntArray,
    first: _Steps,
    threshold: FloatArray,
) -> _Walks:
    """Walk every seed's paths in rank order, vectorised across queries.

    The first steps are measured beforehand for the whole batch. A later step is reached only
    after the step before it was accepted or passed through, so before the walk, later steps
    are measured (in one batch per distance) only where the step before passes or lands on a
    seed. The walk measures any other step it reaches (one accepted by an earlier walk) when it
    gets there.
    """
    n_queries, k, n_steps, window = path.shape
    walks = (seed_rows, path, threshold)
    table = _Table.empty(path.shape)
    judged = _judge(
        context,
        first,
        threshold[:, :, None],
        np.arange(n_queries)[:, None, None],
        seed_rows[:, :, None],
        path[..., 0],
        seed_rows[:, :, None],
    )
    on_seed = _on_seed(path[..., 0], seed_rows)
    reach = first.usable & (judged.passes | on_seed)
    for distance in range(1, window):
        reached = np.nonzero(reach & (path[..., distance] >= 0))
        if reached[0].size == 0:
            break
        _measure_positions(context, (*reached, distance), walks, table, first)
        here = path[(*reached, distance)]
        lands_on_seed = _on_seed(here[:, None], seed_rows[reached[0]])[:, 0]
        reach = np.zeros(reach.shape, dtype=bool)
        reach[reached] = table.usable[(*reached, distance)] & (
            table.passes[(*reached, distance)] | lands_on_seed
        )

    # Walk-major copies, so that every step's slice across queries is contiguous.
    path_by_walk = np.ascontiguousarray(path.transpose(1, 2, 3, 0))  # (k, S, W, Q)
    on_seed_by_walk = np.ascontiguousarray(on_seed.transpose(1, 2, 0))
    # What a decision at each first step would give; later steps' are read when reached.
    first_codes = np.ascontiguousarray(_codes(first.usable, judged.passes).transpose(1, 2, 0))
    outcome = np.zeros((k, n_steps, window, n_queries), dtype=np.int8)
    accepted = _Accepted(n_queries, k * n_steps * window)
    passed, decline = np.int8(Outcome.PASSED), np.int8(Outcome.NOT_REACHED)
    for rank in range(k):
        present = seed_rows[:, rank] >= 0
        for walk in range(n_steps):
            # The first step, for every query at once.
            candidate = path_by_walk[rank, walk, 0]
            active = present & (candidate >= 0)
            known = active & on_seed_by_walk[rank, walk]
            accepted.mark_known(known, np.flatnonzero(active & accepted.some), candidate)
            codes = np.where(
                known, passed, np.where(active & ~known, first_codes[rank, walk], decline)
            )
            outcome[rank, walk, 0] = codes
            taken = codes == Outcome.ACCEPTED
            accepted.record(np.flatnonzero(taken), candidate[taken])
            # Later steps, for the few walks still going (as indices).
            walking = np.flatnonzero(known | taken)
            for distance in range(1, window):
                candidate = path_by_walk[rank, walk, distance][walking]
                walking, candidate = walking[candidate >= 0], candidate[candidate >= 0]
                if walking.size == 0:
                    break
                known = (seed_rows[walking] == candidate[:, None]).any(axis=1)
                accepted.mark_known(known, walking, candidate, compressed=True)
                deciding = walking[~known]
                missing = deciding[~table.measured[deciding, rank, walk, distance]]
                if missing.size:
                    every = np.full_like(missing, rank), np.full_like(missing, walk)
                    _measure_positions(context, (missing, *every, distance), walks, table, first)
                at = (walking, rank, walk, distance)
                codes = np.where(known, passed, _codes(table.usable[at], table.passes[at]))
                outcome[rank, walk, distance, walking] = codes
                taken = codes == Outcome.ACCEPTED
                accepted.record(walking[taken], candidate[taken])
                walking = walking[known | taken]
    outcome = np.ascontiguousarray(outcome.transpose(3, 0, 1, 2))
    decided = (outcome == Outcome.ACCEPTED) | (outcome == Outcome.REJECTED)
    # 0 where decided, NaN elsewhere: adding it masks without a branch per element.
    with np.errstate(invalid="ignore"):
        mask = np.divide(0.0, decided.astype(np.float64))
    figures = []
    for first_figure, figure in (
        (first.relevance, table.relevance),
        (judged.penalty, table.penalty),
        (judged.score, table.score),
    ):
        figure[..., 0] = first_figure
        figure += mask
        figures.append(figure)
    return _Walks(outcome, *figures)
