"""Window sources: one request up front, the same selection as fetching ring by ring."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest
from li_support import linked_nodes, scored
from llama_index.core.schema import BaseNode, NodeRelationship, QueryBundle

from scar_core.budget import BudgetSettings
from scar_llamaindex import (
    FetchedNodes,
    FetchedWindow,
    SCARNodePostprocessor,
    WindowNeighborSource,
)
from scar_llamaindex._window import WINDOW_NODES, window_radius

Q = [1.0, 0.0]


def unit(degrees: float) -> list[float]:
    return [math.cos(math.radians(degrees)), math.sin(math.radians(degrees))]


class DictSource:
    """Nodes by id; counts fetches. Its window walks at most ``depth`` steps (None: as asked)."""

    def __init__(self, nodes: Sequence[BaseNode], depth: int | None = None) -> None:
        self.nodes = {node.node_id: node for node in nodes}
        self.depth = depth
        self.fetches: list[list[str]] = []
        self.windows = 0

    def fetch(self, node_ids: Sequence[str], vector_ids: Sequence[str]) -> FetchedNodes:
        self.fetches.append(list(node_ids))
        return FetchedNodes({i: self.nodes[i] for i in node_ids if i in self.nodes})

    async def afetch(self, node_ids: Sequence[str], vector_ids: Sequence[str]) -> FetchedNodes:
        return self.fetch(node_ids, vector_ids)


class WindowSource(DictSource):
    def fetch_window(
        self, start_ids: Sequence[str], vector_ids: Sequence[str], radius: int, direction: Any
    ) -> FetchedWindow:
        self.windows += 1
        keys = {
            "previous": [NodeRelationship.PREVIOUS],
            "next": [NodeRelationship.NEXT],
            "both": [NodeRelationship.PREVIOUS, NodeRelationship.NEXT],
        }[direction]
        steps = radius if self.depth is None else min(radius, self.depth)
        nodes: dict[str, BaseNode] = {}
        absent: set[str] = set()
        for start in start_ids:
            for key in keys:
                current = self.nodes.get(start)
                for _ in range(steps):
                    related = current.relationships.get(key) if current is not None else None
                    if related is None:
                        break
                    current = self.nodes.get(related.node_id)  # type: ignore[union-attr]
                    if current is None:
                        absent.add(related.node_id)  # type: ignore[union-attr]
                        break
                    nodes[current.node_id] = current
        return FetchedWindow(nodes, {}, frozenset(absent))

    async def afetch_window(
        self, start_ids: Sequence[str], vector_ids: Sequence[str], radius: int, direction: Any
    ) -> FetchedWindow:
        return self.fetch_window(start_ids, vector_ids, radius, direction)


def corpus() -> list[BaseNode]:
    angles = [80, 60, 20, 5, 15, 30, 70, 85, 88, 89]
    nodes: list[BaseNode] = list(
        linked_nodes(
            [f"a{i}" for i in range(10)],
            document_id="A",
            prefix="a",
            vectors=[unit(a) for a in angles],
        )
    )
    nodes += linked_nodes(
        [f"b{i}" for i in range(4)],
        document_id="B",
        prefix="b",
        vectors=[unit(a) for a in [50, 25, 45, 70]],
    )
    return nodes


def run(source: DictSource, seeds: list[str], **settings: Any) -> list[tuple[str, Any]]:
    nodes = {node.node_id: node for node in corpus()}
    incoming = scored([nodes[i] for i in seeds], [0.9 - 0.1 * i for i in range(len(seeds))])
    scar = SCARNodePostprocessor(neighbor_source=source, **settings)
    output = scar.postprocess_nodes(incoming, QueryBundle("q", embedding=Q))
    return [(item.node.node_id, item.score) for item in output]


SETTINGS: list[dict[str, Any]] = [
    {},
    {"budget": 5, "k": 1},
    {"budget": 8, "k": 1, "window": 2},
    {"budget": 6, "k": 1, "direction": "next"},
    {"budget": None, "window": 3, "gamma": 0.5},
]


@pytest.mark.parametrize("settings", SETTINGS)
@pytest.mark.parametrize("seeds", [["a3"], ["a3", "b1"], ["a0", "a9", "b2"]])
def test_a_window_gives_the_ring_by_ring_result_in_one_request(
    settings: dict[str, Any], seeds: list[str]
) -> None:
    window = WindowSource(corpus())
    assert isinstance(window, WindowNeighborSource)
    assert run(window, seeds, **settings) == run(DictSource(corpus()), seeds, **settings)
    assert window.windows == 1
    assert window.fetches == []


@pytest.mark.parametrize("depth", [0, 1])
def test_what_a_shallow_window_lacks_is_fetched_ring_by_ring(depth: int) -> None:
    window = WindowSource(corpus(), depth=depth)
    assert run(window, ["a3"], budget=6, k=1) == run(DictSource(corpus()), ["a3"], budget=6, k=1)
    assert window.windows == 1
    assert window.fetches, "nodes beyond the window come from fetch"


def test_an_absent_neighbour_is_not_asked_for_again() -> None:
    nodes = [node for node in corpus() if node.node_id != "a4"]
    window = WindowSource(nodes)
    lazy = DictSource(nodes)
    assert run(window, ["a3"], budget=6, k=1) == run(lazy, ["a3"], budget=6, k=1)
    assert window.fetches == []


async def test_the_async_path_uses_the_window_too() -> None:
    window = WindowSource(corpus())
    nodes = {node.node_id: node for node in corpus()}
    scar = SCARNodePostprocessor(neighbor_source=window, budget=6, k=1)
    incoming = scored([nodes["a3"]], [0.9])
    bundle = QueryBundle("q", embedding=Q)
    expected = [(i.node.node_id, i.score) for i in scar.postprocess_nodes(incoming, bundle)]
    output = await scar.apostprocess_nodes(incoming, bundle)
    assert [(i.node.node_id, i.score) for i in output] == expected
    assert window.windows == 2
    assert window.fetches == []


def test_the_window_radius_covers_every_ring_the_selection_can_reach() -> None:
    def settings(**values: Any) -> BudgetSettings:
        return BudgetSettings(
            **{"max_chunks": 10, "min_seeds": 3, "continuity_bonus": 0.2, **values}
        )

    assert window_radius(settings(), 3) == 8  # 7 free slots, then one step to look at
    assert window_radius(settings(min_seeds=10), 10) == 1
    assert window_radius(settings(window=2), 3) == 2
    assert window_radius(settings(max_chunks=50, min_seeds=20), 20) == WINDOW_NODES // 40
    assert window_radius(settings(max_chunks=200, min_seeds=100), 100) == 1
