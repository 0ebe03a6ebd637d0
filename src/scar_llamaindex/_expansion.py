"""One postprocessing call's state: which nodes to fetch per hop, and what SCAR then decides.

The sync and async paths of :class:`~scar_llamaindex.SCARNodePostprocessor` drive the same
:class:`ExpansionRun`; only the I/O (fetching, embedding) differs between them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy.typing as npt
from llama_index.core.schema import BaseNode, NodeWithScore

from scar_core.graph import NeighborGraph, Step, steps_for
from scar_core.policy import ExpansionResult, ScarPolicy
from scar_core.settings import ScarSettings
from scar_llamaindex._links import NodeLinks
from scar_llamaindex.sources import FetchedNodes, stored_embedding

logger = logging.getLogger(__name__)


class ExpansionRun:
    """The fetch plan and the collected nodes and vectors of one call.

    Args:
        nodes: The retrieved nodes, best first (duplicates are dropped after the first).
        settings: The SCAR settings of the call.
        links: Where to read neighbour ids on a node.
    """

    def __init__(
        self, nodes: Sequence[NodeWithScore], settings: ScarSettings, links: NodeLinks
    ) -> None:
        self.settings = settings
        self.links = links
        self.seeds: dict[str, NodeWithScore] = {}
        for scored in nodes:
            self.seeds.setdefault(scored.node.node_id, scored)
        self.known: dict[str, BaseNode] = {}
        self.vectors: dict[str, npt.ArrayLike] = {}
        # Links are read once per node, so a malformed link is reported once.
        self._links_of: dict[str, tuple[str | None, str | None]] = {}
        for node_id, scored_node in self.seeds.items():
            self._know(node_id, scored_node.node)
        self.unavailable: set[str] = set()
        self._frontier: list[tuple[str, Step]] = [
            (node_id, step) for node_id in self.seeds for step in steps_for(settings.direction)
        ]
        self._targets: dict[tuple[str, Step], str] = {}
        self._hops_done = 0

    def _know(self, node_id: str, node: BaseNode) -> None:
        self.known[node_id] = node
        self._links_of[node_id] = (
            self.links.neighbor_id(node, "previous"),
            self.links.neighbor_id(node, "next"),
        )
        embedding = stored_embedding(node)
        if embedding is not None:
            self.vectors.setdefault(node_id, embedding)

    def link(self, node_id: str, step: Step) -> str | None:
        """The id a known node's link names in direction ``step`` (whether fetched or not)."""
        previous_id, next_id = self._links_of[node_id]
        return previous_id if step == "previous" else next_id

    @property
    def seed_ids(self) -> list[str]:
        """The seeds' ids, best first."""
        return list(self.seeds)

    def window_request(self) -> tuple[list[str], list[str], int]:
        """Return ``(start ids, stored-vector ids, radius)`` for fetching the whole walk at once.

        The start ids are the seeds; the vector ids, the seeds without a vector; the radius, the
        number of hops :meth:`next_request` will walk.
        """
        return (
            list(self.seeds),
            [i for i in self.seeds if i not in self.vectors],
            self.settings.window,
        )

    def next_request(self) -> tuple[list[str], list[str]] | None:
        """Return the next hop's ``(node ids to fetch, ids whose stored vectors to fetch)``.

        The first hop also asks for the seeds' stored vectors, so a store that returns nodes with
        their embeddings answers both in one round trip. ``None`` means there is nothing left.
        """
        while self._hops_done < self.settings.window and self._frontier:
            self._targets = {}
            for node_id, step in self._frontier:
                target = self.link(node_id, step)
                if target is not None and target not in self.unavailable:
                    self._targets[(node_id, step)] = target
            node_ids = list(dict.fromkeys(t for t in self._targets.values() if t not in self.known))
            vector_ids = (
                [i for i in self.seeds if i not in self.vectors] if self._hops_done == 0 else []
            )
            if node_ids or vector_ids:
                return node_ids, vector_ids
            self._advance()
        return None

    def absorb(self, requested: Sequence[str], fetched: FetchedNodes) -> None:
        """Record a fetch's nodes and vectors, and move the walk one hop on."""
        self.record(requested, fetched)
        self._advance()

    def record(self, requested: Sequence[str], fetched: FetchedNodes) -> None:
        """Record a fetch's nodes and vectors without moving the walk (a fetch outside the plan)."""
        for node_id in requested:
            node = fetched.nodes.get(node_id)
            if node is None:
                self.unavailable.add(node_id)
                logger.debug(
                    "neighbour %r is in neither the docstore nor the vector store; "
                    "the walk stops before it",
                    node_id,
                )
                continue
            self._know(node_id, node)
        for node_id, vector in fetched.vectors.items():
            if node_id in self.known and node_id not in self.vectors:
                self.vectors[node_id] = vector

    def _advance(self) -> None:
        self._frontier = [
            (target, step) for (_, step), target in self._targets.items() if target in self.known
        ]
        self._targets = {}
        self._hops_done += 1

    def nodes_without_vectors(self) -> list[BaseNode]:
        """Every seed and fetched neighbour that still needs a vector, in a stable order."""
        return [node for node_id, node in self.known.items() if node_id not in self.vectors]

    def add_vectors(self, vectors: dict[str, npt.ArrayLike]) -> None:
        """Record vectors computed by the embed model."""
        for node_id, vector in vectors.items():
            self.vectors.setdefault(node_id, vector)

    def graph(self) -> NeighborGraph:
        """The links among the known nodes; links to unavailable nodes are cut."""
        links: dict[str, tuple[str | None, str | None]] = {}
        documents: dict[str, str] = {}
        for node_id, node in self.known.items():
            previous_id, next_id = self._links_of[node_id]
            links[node_id] = (
                previous_id if previous_id in self.known else None,
                next_id if next_id in self.known else None,
            )
            document_id = self.links.document_id(node)
            if document_id is not None:
                documents[node_id] = document_id
        return NeighborGraph(links, documents)

    def decide(self, query_vector: npt.ArrayLike, graph: NeighborGraph) -> ExpansionResult:
        """Apply the SCAR rule to the seeds with the collected vectors."""
        return ScarPolicy(self.settings).expand(query_vector, self.seed_ids, graph, self.vectors)
