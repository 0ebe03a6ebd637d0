"""Budgeted selection for one query, with neighbours fetched lazily from the store.

:func:`scar_core.budget.select_within_budget` walks as far as the budget lets a passage grow, so
the chunks it will need are not known in advance. Asking the store one chunk at a time would cost
a round trip per slot; :class:`BudgetRun` instead

1. prefetches the neighbours of the retrieved chunks, deeper around the better ranked ones:
   :data:`DEEP_PREFETCH_HOPS` steps around the :data:`DEEP_PREFETCH_SEEDS` best (the selection
   takes the best chunks first, so theirs are the passages that grow longest),
   :data:`PREFETCH_HOPS` around the rest of the better half of the budget, and nothing around
   the chunks ranked below it, which seldom take a slot (never deeper than ``window``); when
   one does, its neighbours are a miss of the first attempt (step 2). When chunk ids follow
   :func:`~scar_langchain.link_chunks`' naming, the ids of every ring are known from the
   retrieved chunks alone and all rings come in one batched call; otherwise each ring costs one
   call, since its ids are read from the ring before it. Then it
2. runs the selection over lookups that answer only from what the pool holds and *record* every
   chunk they were asked about and do not know yet. When a run recorded such misses, the driver
   fetches all of them in one call (with :data:`EXTEND_HOPS` further predicted rings beyond
   each) and the (cheap, deterministic) selection runs again.

A run that recorded no miss answered every lookup from complete knowledge, so its result is
exactly the one :func:`~scar_core.budget.select_within_budget` gives over the whole store:
predictions only decide what is fetched early, never what the walk follows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from scar_core._lazy import LazyValues
from scar_core.budget import BudgetSettings, select_within_budget
from scar_core.graph import NeighborGraph, Step, steps_for
from scar_core.policy import ExpansionResult
from scar_core.tokens import TokenCounter
from scar_langchain._pool import QueryPool

__all__ = [
    "DEEP_PREFETCH_HOPS",
    "DEEP_PREFETCH_SEEDS",
    "EMBEDDED_PREFETCH_HOPS",
    "EXTEND_HOPS",
    "PREFETCH_HOPS",
    "BudgetRun",
    "PoolLinks",
    "PoolTokenCounts",
    "PoolVectors",
    "prefetch_depths",
]

#: Rings of neighbours fetched around a retrieved chunk in the better half of the budget (by
#: rank) before the first selection.
PREFETCH_HOPS = 3
#: The same when chunk vectors are computed, not read: every prefetched chunk costs an embedding.
EMBEDDED_PREFETCH_HOPS = 2
#: Predicted rings fetched beyond each chunk a selection attempt reached but the pool lacked.
EXTEND_HOPS = 2
#: How many of the best retrieved chunks get the deeper prefetch, and how deep it goes. On the
#: end-to-end benchmark's corpora this removes most second reads for a few more rows (the
#: statements column of ``benchmarks/results/e2e_latency.md``).
DEEP_PREFETCH_SEEDS = 3
DEEP_PREFETCH_HOPS = 5
#: Rings prefetched around the retrieved chunks ranked below the better half of the budget. One
#: ring each cost 7-9 more rows a query for 0.01-0.06 fewer statements, and was 0.5-0.9 ms slower
#: behind HNSW (``benchmarks/results/README.md``, section 1, session 11).
TAIL_PREFETCH_HOPS = 0


def prefetch_depths(
    seed_count: int, settings: BudgetSettings, most_hops: int, deep_hops: int
) -> list[int]:
    """How many rings to prefetch around each retrieved chunk, by rank (best first).

    The :data:`DEEP_PREFETCH_SEEDS` best get ``deep_hops`` (at least ``most_hops``), the rest of
    the better half of the budget ``most_hops``, the chunks ranked below that
    :data:`TAIL_PREFETCH_HOPS` (none); never more than ``settings.window``. In a one-off count
    over 300 queries of the end-to-end benchmark's 10k x 384 corpus (budget 10), the chunks
    ranked 6 to 10 took a slot 40 times in 1,500 chances; each time one does, its neighbours
    cost one more fetch, where fetching a ring around them all cost 7-9 more rows every query.
    """
    hops = prefetch_hops(settings, most_hops)
    deep = max(hops, prefetch_hops(settings, deep_hops))
    half_budget = max(DEEP_PREFETCH_SEEDS, settings.max_chunks // 2)
    return [
        deep if rank < DEEP_PREFETCH_SEEDS else hops if rank < half_budget else TAIL_PREFETCH_HOPS
        for rank in range(seed_count)
    ]


def prefetch_hops(settings: BudgetSettings, most: int = PREFETCH_HOPS) -> int:
    """Rings to prefetch around one rank tier of retrieved chunks: ``most``, or a smaller window."""
    return most if settings.window is None else min(settings.window, most)


def _settled(pool: QueryPool, chunk_id: str) -> bool:
    """Whether the pool knows a chunk, or knows that the store does not hold it."""
    return chunk_id in pool.documents or chunk_id in pool.requested


class PoolLinks:
    """A :class:`~scar_core.graph.LinkLookup` over the chunks a query's pool holds.

    A chunk that is neither fetched nor known to be absent is recorded in ``misses`` and treated
    as having no link for this run.

    Args:
        pool: The query's pool.
        misses: Collects the ids the lookup could not answer for.
        edges: Collects ``(known chunk, direction)`` for each step that led to a miss.
    """

    def __init__(
        self, pool: QueryPool, misses: dict[str, None], edges: list[tuple[str, Step]]
    ) -> None:
        self._pool = pool
        self._graph: NeighborGraph = pool.links()
        self._misses = misses
        self._edges = edges

    def step(self, chunk_id: str, direction: Step) -> str | None:
        """Return the chunk one step away, or ``None`` (also when that chunk is not known yet)."""
        if chunk_id not in self._pool.documents:
            if not _settled(self._pool, chunk_id):
                self._misses[chunk_id] = None
            return None
        target = self._graph.step(chunk_id, direction)
        if target is None or _settled(self._pool, target):
            # A target the store lacks is returned: it has no vector, so it is reported skipped.
            return target
        self._misses[target] = None
        self._edges.append((chunk_id, direction))
        return None


class PoolVectors:
    """A :class:`~scar_core.vectors.VectorLookup` over the vectors a query's pool holds.

    Args:
        pool: The query's pool.
        misses: Collects the ids of chunks that are not fetched yet.
    """

    def __init__(self, pool: QueryPool, misses: dict[str, None]) -> None:
        self._pool = pool
        self._misses = misses

    def get_vectors(self, chunk_ids: Sequence[str]) -> dict[str, npt.NDArray[np.floating]]:
        """Return the known vectors of ``chunk_ids``; record the chunks not fetched yet."""
        found: dict[str, npt.NDArray[np.floating]] = {}
        for chunk_id in chunk_ids:
            vector = self._pool.vectors.get(chunk_id)
            if vector is not None:
                found[chunk_id] = vector
            elif not _settled(self._pool, chunk_id):
                self._misses[chunk_id] = None
        return found


class PoolTokenCounts(LazyValues[int]):
    """Token counts of the pool's chunks, counted on first use and kept for the query.

    Args:
        pool: The query's pool.
        count_tokens: The token counter applied to each chunk's ``page_content``.
    """

    def __init__(self, pool: QueryPool, count_tokens: TokenCounter) -> None:
        super().__init__(
            pool.documents,
            lambda chunk_id: count_tokens(pool.documents[chunk_id].page_content),
        )


class BudgetRun:
    """The fetch plan and the selection attempts of one budgeted query.

    Drive it as: fetch what :meth:`prefetch_request` asks for until it returns ``None``; then
    repeatedly supply vectors for the pool's new chunks and call :meth:`attempt`, fetching the
    ids it returns, until it returns none. :attr:`result` then holds the selection.

    Args:
        pool: The query's pool, holding the retrieved chunks (best first) as its seeds.
        settings: The budget; ``settings.window`` also limits the prefetch.
        token_counts: Token counts, required when ``settings.max_tokens`` is set.
        most_hops: The prefetch depth around the retrieved chunks in the better half of the
            budget; :data:`EMBEDDED_PREFETCH_HOPS` when every fetched chunk must be embedded, so
            that the prefetch does not buy round trips with embedding calls.
        deep_hops: The predicted depth around the :data:`DEEP_PREFETCH_SEEDS` best retrieved
            chunks; no deeper than ``most_hops`` (the default) turns it off.
    """

    def __init__(
        self,
        pool: QueryPool,
        settings: BudgetSettings,
        token_counts: Mapping[str, int] | None = None,
        *,
        most_hops: int = PREFETCH_HOPS,
        deep_hops: int = 0,
    ) -> None:
        self.pool = pool
        self.settings = settings
        self.token_counts = token_counts
        #: Rings to prefetch around each retrieved chunk, by rank.
        self.depths = prefetch_depths(len(pool.seeds), settings, most_hops, deep_hops)
        # Beyond a fixed window the walk never goes, so predicting past a miss would be waste.
        self.extend_hops = EXTEND_HOPS if settings.window is None else 0
        self._steps = steps_for(settings.direction)
        self._first_request_sent = False
        self._rings_predicted = False
        self.attempts = 0
        self.result: ExpansionResult | None = None

    def prefetch_request(self) -> list[str] | None:
        """Return the next neighbours to fetch, or ``None`` once the prefetch is done.

        The first request holds the first ring (read from the seeds' links) and the predicted ids
        of the further rings. When some deeper-prefetched seed is not named by position, each
        later request holds the chunks within the prefetch depth that the walk from the seeds
        reaches but the pool does not know yet. (A walk stops at the first unknown chunk, so each
        later request discovers one more ring along every chain that is still short.)
        """
        if not self._first_request_sent:
            self._first_request_sent = True
            # When every deeper-prefetched seed is named by position, its further rings were
            # requested by prediction: no walk is needed to find them (a chain whose links
            # disagree with the names is still followed, as a miss of the first attempt).
            self._rings_predicted = all(
                self.pool.named_by_position(seed)
                for seed, depth in zip(self.pool.seeds, self.depths, strict=True)
                if depth > 1
            )
            wanted = self.pool.unfetched_neighbors(
                self.settings.direction, [min(depth, 1) for depth in self.depths]
            )
            predicted = (
                chunk_id
                for seed, depth in zip(self.pool.seeds, self.depths, strict=True)
                if depth > 1
                for step in self._steps
                for chunk_id in self.pool.predicted_ids(seed, step, 2, depth)
            )
            wanted = self.pool.unrequested([*wanted, *predicted])
            if wanted:
                return wanted
        if max(self.depths, default=1) > 1 and not self._rings_predicted:
            wanted = self.pool.unfetched_neighbors(self.settings.direction, self.depths)
            if wanted:
                return wanted
        return None

    def attempt(self) -> list[str]:
        """Run the selection over what the pool holds; return the ids it missed, if any.

        Every known chunk must have had its vector asked for before the call. When the return
        value is empty, :attr:`result` holds the exact selection; otherwise it holds the misses
        and the predicted ids of up to :data:`EXTEND_HOPS` further rings beyond each.
        """
        self.attempts += 1
        misses: dict[str, None] = {}
        edges: list[tuple[str, Step]] = []
        result = select_within_budget(
            self.pool.query_vector,
            self.pool.seeds,
            PoolLinks(self.pool, misses, edges),
            PoolVectors(self.pool, misses),
            self.settings,
            token_counts=self.token_counts,
        )
        if misses:
            predicted = (
                chunk_id
                for known, step in edges
                for chunk_id in self.pool.predicted_ids(known, step, 2, 1 + self.extend_hops)
            )
            return (
                self.pool.unrequested([*misses, *predicted]) if self.extend_hops else list(misses)
            )
        self.result = result
        return []
