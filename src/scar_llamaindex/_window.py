"""Answer one call's fetches from a window of neighbours fetched up front.

When the neighbour source is a :class:`~scar_llamaindex.WindowNeighborSource`, the postprocessor
fetches every node within a radius of the incoming nodes in one request, then walks ring by ring
exactly as it would over any source, but each ring is answered from that window. Only ids the
window did not look up (beyond its radius, or reached by links the source followed differently)
go to the source, so the result is the same as fetching ring by ring; only the round trips differ.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy.typing as npt
from llama_index.core.schema import BaseNode

from scar_core.budget import BudgetSettings
from scar_llamaindex.sources import FetchedNodes, FetchedWindow

#: Most nodes a budget-mode window request asks for (incoming nodes x directions x radius).
WINDOW_NODES = 64


def window_radius(settings: BudgetSettings, incoming: int) -> int:
    """How many rings around the incoming nodes budget mode fetches in its one window request.

    The selection keeps every incoming node and fills the ``free = max_chunks - min_seeds``
    other slots with neighbours, each adjacent to a node already selected; it then looks one
    step further, at the next candidates. So no node beyond ``free + 1`` steps (or ``window``
    steps) is ever looked at, and a window that deep needs no second round trip. The radius is
    capped so that the request asks for at most about :data:`WINDOW_NODES` nodes; rings beyond
    are fetched ring by ring if the selection reaches them.

    Args:
        settings: The call's budget settings.
        incoming: The number of distinct incoming nodes.

    Returns:
        The radius, ``>= 1``.
    """
    needed = max(settings.max_chunks - settings.min_seeds, 0) + 1
    if settings.window is not None:
        needed = min(needed, settings.window)
    directions = 2 if settings.direction == "both" else 1
    cap = max(1, WINDOW_NODES // max(1, incoming * directions))
    return max(1, min(needed, cap))


class WindowAnswers:
    """What a window fetch holds, and which requests it can answer without the source.

    Args:
        window: The window's nodes, vectors and known-absent ids.
        vector_ids: The ids whose vectors the window request asked for.
    """

    def __init__(self, window: FetchedWindow, vector_ids: Sequence[str]) -> None:
        self._nodes = window.nodes
        self._vectors = window.vectors
        self._absent = window.absent
        # Every id whose vector the window looked up: asked for, reached, or found absent.
        self._vectors_looked_up = {*vector_ids, *window.nodes, *window.absent}

    def split(
        self, node_ids: Sequence[str], vector_ids: Sequence[str]
    ) -> tuple[FetchedNodes, list[str], list[str]]:
        """Answer what the window can; return the answer and the node and vector ids left over.

        A node id the window found absent is answered (by its absence), so it is recorded as
        unavailable and never asked for again.
        """
        nodes: dict[str, BaseNode] = {}
        vectors: dict[str, npt.ArrayLike] = {}
        node_rest: list[str] = []
        vector_rest: list[str] = []
        for node_id in node_ids:
            node = self._nodes.get(node_id)
            if node is not None:
                nodes[node_id] = node
                vector = self._vectors.get(node_id)
                if vector is not None:
                    vectors[node_id] = vector
            elif node_id not in self._absent:
                node_rest.append(node_id)
        for node_id in vector_ids:
            vector = self._vectors.get(node_id)
            if vector is not None:
                vectors[node_id] = vector
            elif node_id not in self._vectors_looked_up:
                vector_rest.append(node_id)
        return FetchedNodes(nodes, vectors), node_rest, vector_rest


def merged(answered: FetchedNodes, fetched: FetchedNodes) -> FetchedNodes:
    """The window's answer completed by what the source returned for the rest."""
    return FetchedNodes(
        {**fetched.nodes, **answered.nodes}, {**fetched.vectors, **answered.vectors}
    )
