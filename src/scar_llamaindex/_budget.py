"""Budget mode for one postprocessing call: prefetch, lazy lookups, selection attempts.

:func:`scar_core.budget.select_within_budget` lets a passage grow as far as the budget allows, so
the nodes it will need are not known in advance. :class:`BudgetRun`

1. prefetches, in one batched fetch per ring, the neighbours of every incoming node up to
   :data:`PREFETCH_HOPS` steps away (fewer when ``window`` is smaller; a source that fetches a
   whole window in one request is given a deeper one, and the rings are then answered from it);
   the first fetch also asks for the incoming nodes' stored vectors, as in plain mode; then
2. runs the selection over lookups that answer only from the nodes collected so far and record
   every node they were asked about and do not hold yet. When a run recorded such misses, the
   caller fetches all of them in one call and the (cheap, deterministic) selection runs again.

A run that recorded no miss answered every lookup from complete knowledge, so its result is
exactly the one :func:`~scar_core.budget.select_within_budget` gives over the whole store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np
import numpy.typing as npt
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore

from scar_core._lazy import LazyValues
from scar_core.budget import BudgetSettings, select_within_budget
from scar_core.graph import NeighborGraph, Step
from scar_core.policy import ExpansionResult
from scar_core.settings import ScarSettings
from scar_core.tokens import TokenCounter
from scar_llamaindex._expansion import ExpansionRun
from scar_llamaindex._links import NodeLinks
from scar_llamaindex.sources import FetchedNodes

__all__ = ["PREFETCH_HOPS", "BudgetRun"]

#: Rings of neighbours fetched around every incoming node before the first selection.
PREFETCH_HOPS = 2


class _RunLinks:
    """A :class:`~scar_core.graph.LinkLookup` over the nodes a run holds; records the misses.

    Links to nodes no store holds are cut, as in plain mode; links across documents are refused
    by the :class:`~scar_core.graph.NeighborGraph` of the known nodes.
    """

    def __init__(self, run: ExpansionRun, misses: dict[str, None]) -> None:
        self._run = run
        self._graph: NeighborGraph = run.graph()
        self._misses = misses

    def step(self, chunk_id: str, direction: Step) -> str | None:
        run = self._run
        if chunk_id not in run.known:
            if chunk_id not in run.unavailable:
                self._misses[chunk_id] = None
            return None
        target = run.link(chunk_id, direction)
        if target is None or target in run.unavailable:
            return None
        if target not in run.known:
            self._misses[target] = None
            return None
        return self._graph.step(chunk_id, direction)


class _RunVectors:
    """A :class:`~scar_core.vectors.VectorLookup` over the vectors a run holds; records misses."""

    def __init__(self, run: ExpansionRun, misses: dict[str, None]) -> None:
        self._run = run
        self._misses = misses

    def get_vectors(self, chunk_ids: Sequence[str]) -> dict[str, npt.NDArray[np.floating]]:
        found: dict[str, npt.NDArray[np.floating]] = {}
        for chunk_id in chunk_ids:
            if chunk_id in self._run.vectors:
                # Passed on as stored: scar_core reports an unusable one instead of failing here.
                found[chunk_id] = cast("npt.NDArray[np.floating]", self._run.vectors[chunk_id])
            elif chunk_id not in self._run.known and chunk_id not in self._run.unavailable:
                self._misses[chunk_id] = None
        return found


class _TokenCounts(LazyValues[int]):
    """Tokens of each known node's text (metadata not counted), counted once per call."""

    def __init__(self, run: ExpansionRun, count_tokens: TokenCounter) -> None:
        super().__init__(
            run.known,
            lambda node_id: count_tokens(
                run.known[node_id].get_content(metadata_mode=MetadataMode.NONE)
            ),
        )


class BudgetRun:
    """The fetch plan and the selection attempts of one budgeted call.

    Drive it as: fetch what :meth:`next_request` asks for and :meth:`absorb` it, until it returns
    ``None``; then repeatedly give the collected nodes vectors (:meth:`add_vectors`) and call
    :meth:`attempt`, fetching the ids it returns and passing them to :meth:`absorb_missing`,
    until it returns none. :attr:`result` then holds the selection.

    Args:
        nodes: The incoming nodes, best first (duplicates are dropped after the first).
        settings: The budget, with ``min_seeds`` already capped at the number of nodes.
        links: Where to read neighbour ids on a node.
        count_tokens: Counts a node's tokens; required when ``settings.max_tokens`` is set.
        prefetch_hops: Rings of neighbours collected before the first attempt (capped by
            ``settings.window``).
    """

    def __init__(
        self,
        nodes: Sequence[NodeWithScore],
        settings: BudgetSettings,
        links: NodeLinks,
        count_tokens: TokenCounter | None = None,
        prefetch_hops: int = PREFETCH_HOPS,
    ) -> None:
        hops = prefetch_hops if settings.window is None else min(settings.window, prefetch_hops)
        self.walk = ExpansionRun(
            nodes, ScarSettings(window=hops, direction=settings.direction), links
        )
        self.settings = settings
        self.token_counts = (
            _TokenCounts(self.walk, count_tokens) if count_tokens is not None else None
        )
        self.attempts = 0
        self.result: ExpansionResult | None = None

    @property
    def seeds(self) -> dict[str, NodeWithScore]:
        """The incoming nodes by id, best first."""
        return self.walk.seeds

    def window_request(self) -> tuple[list[str], list[str], int]:
        """Return ``(start ids, stored-vector ids, radius)`` to fetch the prefetch in one request."""
        return self.walk.window_request()

    def next_request(self) -> tuple[list[str], list[str]] | None:
        """Return the next prefetch ring ``(node ids, stored-vector ids)``, or ``None``."""
        return self.walk.next_request()

    def absorb(self, requested: Sequence[str], fetched: FetchedNodes) -> None:
        """Record a prefetch ring's nodes and vectors."""
        self.walk.absorb(requested, fetched)

    def absorb_missing(self, requested: Sequence[str], fetched: FetchedNodes) -> None:
        """Record the nodes an attempt missed."""
        self.walk.record(requested, fetched)

    def nodes_without_vectors(self) -> list[BaseNode]:
        """The collected nodes that still need a vector."""
        return self.walk.nodes_without_vectors()

    def add_vectors(self, vectors: dict[str, npt.ArrayLike]) -> None:
        """Record vectors computed by the embed model."""
        self.walk.add_vectors(vectors)

    def attempt(self, query_vector: npt.ArrayLike) -> list[str]:
        """Run the selection over the collected nodes; return the ids it missed, if any.

        Every collected node must have a vector (stored or embedded) before the call. When the
        return value is empty, :attr:`result` holds the exact selection.
        """
        self.attempts += 1
        misses: dict[str, None] = {}
        result = select_within_budget(
            query_vector,
            list(self.walk.seeds),
            _RunLinks(self.walk, misses),
            _RunVectors(self.walk, misses),
            self.settings,
            token_counts=self.token_counts,
        )
        if misses:
            return list(misses)
        self.result = result
        return []
