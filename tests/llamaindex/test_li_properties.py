"""Hypothesis: on random chains, seeds and vectors the adapter keeps SCAR's invariants.

Checked against ``scar_core.expand`` for the selection and against a naive passage ordering
written here from chunk positions.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from li_support import docstore_of, linked_nodes, scored
from llama_index.core.schema import QueryBundle

from scar_core import expand
from scar_llamaindex import SCARNodePostprocessor

VECTOR = st.lists(st.integers(-3, 3), min_size=3, max_size=3).filter(any)


@st.composite
def scenarios(draw: st.DrawFn) -> dict:
    length = draw(st.integers(1, 10))
    vectors = draw(st.lists(VECTOR, min_size=length, max_size=length))
    seed_positions = draw(
        st.lists(st.integers(0, length - 1), min_size=1, max_size=min(length + 2, 6))
    )
    missing = draw(st.sets(st.integers(0, length - 1), max_size=length))
    return {
        "vectors": vectors,
        "seeds": seed_positions,
        "missing": missing - set(seed_positions),
        "query": draw(VECTOR),
        "window": draw(st.integers(1, 3)),
        "direction": draw(st.sampled_from(["both", "previous", "next"])),
        "gamma": draw(st.sampled_from([0.5, 0.8, 1.0])),
        "lambda_": draw(st.sampled_from([0.0, 0.1, 0.5])),
    }


def naive_passage_order(selected: list[int], seed_rank: dict[int, int]) -> list[int]:
    """Runs of consecutive positions, ordered by their best seed's rank."""
    runs: list[list[int]] = []
    for position in sorted(selected):
        if runs and runs[-1][-1] == position - 1:
            runs[-1].append(position)
        else:
            runs.append([position])
    runs.sort(key=lambda run: min(seed_rank[p] for p in run))
    return [p for run in runs for p in run]


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios())
def test_adapter_keeps_the_invariants_and_matches_the_core(scenario: dict) -> None:
    vectors = scenario["vectors"]
    nodes = linked_nodes([f"t{i}" for i in range(len(vectors))], vectors=vectors)
    stored = [n for i, n in enumerate(nodes) if i not in scenario["missing"]]
    seeds = [nodes[p] for p in scenario["seeds"]]
    scores = [float(-rank) for rank in range(len(seeds))]
    knobs = {k: scenario[k] for k in ("window", "direction", "gamma", "lambda_")}
    scar = SCARNodePostprocessor(budget=None, docstore=docstore_of(stored), **knobs)
    bundle = QueryBundle("q", embedding=[float(v) for v in scenario["query"]])
    output = scar.postprocess_nodes(scored(seeds, scores), bundle)
    again = scar.postprocess_nodes(scored(seeds, scores), bundle)

    ids = [item.node.node_id for item in output]
    position = {node.node_id: i for i, node in enumerate(nodes)}
    seed_ids = list(dict.fromkeys(s.node_id for s in seeds))
    # Nothing lost, nothing twice, deterministic.
    assert set(seed_ids) <= set(ids)
    assert len(ids) == len(set(ids))
    assert [(i.node.node_id, i.score) for i in again] == [(i.node.node_id, i.score) for i in output]
    # Within the window of some seed, and never a node the store could not supply.
    for chunk_id in ids:
        assert min(abs(position[chunk_id] - position[s]) for s in seed_ids) <= scenario["window"]
        assert chunk_id in seed_ids or position[chunk_id] not in scenario["missing"]
    # The same selection and scores as the core, given the vectors the store holds.
    links = {
        f"n{i}": (f"n{i - 1}" if i else None, f"n{i + 1}" if i + 1 < len(nodes) else None)
        for i in range(len(nodes))
    }
    available = {n.node_id: np.array(n.embedding, dtype=float) for n in stored + seeds}
    reference = expand(
        np.array(scenario["query"], dtype=float), seed_ids, links, available, **knobs
    )
    assert sorted(ids) == sorted(reference.chunk_ids)
    first_score = {s.node_id: score for s, score in reversed(list(zip(seeds, scores, strict=True)))}
    for item in output:
        chunk = reference.get(item.node.node_id)
        assert chunk is not None
        if chunk.origin == "seed":
            assert item.score == first_score[item.node.node_id]
        else:
            assert item.score == chunk.score
    # Passage order.
    seed_rank = {position[c.chunk_id]: c.seed_rank for c in reference.selected}
    expected = naive_passage_order([position[i] for i in ids], seed_rank)
    assert [position[i] for i in ids] == expected
