"""The vectorised policy against a naive pure-Python reference, on random graphs and vectors.

The reference below is written from the rule and the documented walk, not from the
implementation: plain lists, ``math.fsum`` dot products, one decision at a time.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import numpy as np
import pytest

from scar_core import NeighborGraph, ScarSettings, expand, expand_batch


def dot(a: list[float], b: list[float]) -> float:
    return math.fsum(x * y for x, y in zip(a, b, strict=True))


def cos(a: list[float], b: list[float]) -> float:
    return dot(a, b) / math.sqrt(dot(a, a) * dot(b, b))


def usable(vector: list[float] | None, dimension: int) -> bool:
    return (
        vector is not None
        and len(vector) == dimension
        and all(math.isfinite(x) for x in vector)
        and any(x != 0 for x in vector)
    )


@dataclass
class World:
    """Links (possibly broken), document ids, and vectors (some missing or unusable)."""

    links: dict[str, tuple[str | None, str | None]]
    documents: dict[str, str]
    vectors: dict[str, list[float]]
    dimension: int

    def step(self, chunk: str, direction: str) -> str | None:
        pair = self.links.get(chunk)
        if pair is None:
            return None
        target = pair[0] if direction == "previous" else pair[1]
        if target is None or target == "" or target == chunk:
            return None
        here, there = self.documents.get(chunk), self.documents.get(target)
        if here is not None and there is not None and here != there:
            return None
        return target


def naive_expand(
    world: World, query: list[float], seeds: list[str], settings: ScarSettings
) -> tuple[list[str], list[tuple[str, str, str, float, float, float, bool]]]:
    """Return (selected ids, decisions as (seed, neighbour, via, S, threshold, b, accepted))."""
    ordered_seeds: list[str] = []
    for seed in seeds:
        if seed not in ordered_seeds:
            ordered_seeds.append(seed)
    selected = list(ordered_seeds)
    decisions = []
    sides = ["previous", "next"] if settings.direction == "both" else [settings.direction]
    for seed in ordered_seeds:
        threshold = settings.gamma * cos(query, world.vectors[seed])
        for side in sides:
            behind, here, visited = seed, seed, {seed}
            for _ in range(settings.window):
                ahead = world.step(here, side)
                if ahead is None or ahead in visited:
                    break
                visited.add(ahead)
                here = ahead
                if ahead in selected:
                    behind = ahead
                    continue
                if not usable(world.vectors.get(ahead), world.dimension):
                    break
                penalty = 1.0 - cos(world.vectors[behind], world.vectors[ahead])
                score = cos(query, world.vectors[ahead]) - settings.lambda_ * penalty
                accepted = score > threshold
                decisions.append((seed, ahead, behind, score, threshold, penalty, accepted))
                if not accepted:
                    break
                selected.append(ahead)
                behind = ahead
    return selected, decisions


def random_world(rng: random.Random, dimension: int) -> World:
    """A few documents in order, then damage: self-links, dangling, cross-document, cycles."""
    links: dict[str, tuple[str | None, str | None]] = {}
    documents: dict[str, str] = {}
    for d in range(rng.randint(1, 4)):
        ids = [f"d{d}c{i}" for i in range(rng.randint(1, 9))]
        for i, chunk in enumerate(ids):
            links[chunk] = (ids[i - 1] if i else None, ids[i + 1] if i + 1 < len(ids) else None)
            documents[chunk] = f"doc{d}"
    names = list(links)
    for _ in range(rng.randint(0, 4)):
        chunk = rng.choice(names)
        previous, following = links[chunk]
        damage = rng.choice(["self", "dangling", "elsewhere", "empty"])
        target = {"self": chunk, "dangling": "ghost", "elsewhere": rng.choice(names), "empty": ""}[
            damage
        ]
        links[chunk] = (target, following) if rng.random() < 0.5 else (previous, target)
    if rng.random() < 0.5:  # forget some document ids, so cross-document links are followed
        for chunk in rng.sample(names, k=len(names) // 2):
            documents.pop(chunk)
    vectors: dict[str, list[float]] = {}
    for chunk in names:
        roll = rng.random()
        if roll < 0.06:
            continue  # missing
        if roll < 0.09:
            vectors[chunk] = [0.0] * dimension
        elif roll < 0.11:
            vectors[chunk] = [math.nan] + [1.0] * (dimension - 1)
        else:
            scale = rng.uniform(0.1, 10.0)
            vectors[chunk] = [scale * rng.gauss(0.3, 1.0) for _ in range(dimension)]
    return World(links, documents, vectors, dimension)


def random_case(
    rng: random.Random,
) -> tuple[World, list[list[float]], list[list[str]], ScarSettings]:
    dimension = rng.randint(2, 12)
    world = random_world(rng, dimension)
    good = [c for c in world.links if usable(world.vectors.get(c), dimension)]
    queries, seed_lists = [], []
    for _ in range(rng.randint(1, 4)):
        queries.append([rng.gauss(0.3, 1.0) for _ in range(dimension)])
        seeds = rng.sample(good, k=rng.randint(0, min(5, len(good))))
        if seeds and rng.random() < 0.3:
            seeds.append(rng.choice(seeds))  # a duplicate
        seed_lists.append(seeds)
    settings = ScarSettings(
        lambda_=rng.choice([0.0, 0.1, rng.uniform(0.0, 1.0)]),
        gamma=rng.choice([0.8, 1.0, rng.uniform(0.05, 1.0)]),
        window=rng.choice([1, 1, 2, 3]),
        direction=rng.choice(["both", "both", "previous", "next"]),
    )
    return world, queries, seed_lists, settings


def near_tie(decisions: list[tuple[str, str, str, float, float, float, bool]]) -> bool:
    return any(abs(score - threshold) < 1e-9 for _, _, _, score, threshold, _, _ in decisions)


@pytest.mark.parametrize("case_seed", range(40))
def test_expand_and_expand_batch_agree_with_the_naive_reference(case_seed: int) -> None:
    rng = random.Random(case_seed)
    compared = 0
    for _ in range(10):
        world, queries, seed_lists, settings = random_case(rng)
        graph = NeighborGraph(world.links, world.documents)
        arrays = {k: np.asarray(v) for k, v in world.vectors.items()}
        batch = expand_batch(np.asarray(queries), seed_lists, graph, arrays, settings)
        assert len(batch) == len(queries)
        for query, seeds, from_batch in zip(queries, seed_lists, batch, strict=True):
            expected_ids, expected = naive_expand(world, query, seeds, settings)
            if near_tie(expected):
                continue  # rounding may legitimately decide a tie either way
            single = expand(
                np.asarray(query),
                seeds,
                graph,
                arrays,
                settings.lambda_,
                settings.gamma,
                settings.window,
                direction=settings.direction,
            )
            for result in (single, from_batch):
                assert result.chunk_ids == expected_ids
                got = [(d.seed_id, d.neighbor_id, d.via_id, d.accepted) for d in result.decisions]
                assert got == [(s, n, v, a) for s, n, v, _, _, _, a in expected]
                np.testing.assert_allclose(
                    [d.score for d in result.decisions], [e[3] for e in expected], atol=1e-9
                )
                np.testing.assert_allclose(
                    [d.threshold for d in result.decisions], [e[4] for e in expected], atol=1e-9
                )
                np.testing.assert_allclose(
                    [d.boundary_penalty for d in result.decisions],
                    [e[5] for e in expected],
                    atol=1e-9,
                )
                for chunk in result.selected:
                    if chunk.origin == "neighbor":
                        assert chunk.decision is not None
                        assert chunk.score == chunk.decision.score
            compared += 1
    assert compared >= 10
