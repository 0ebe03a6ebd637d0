"""Budget mode, the default: the same selection as scar_core.budget, in few round trips."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from li_support import (
    FaissNodeStore,
    TableEmbedding,
    docstore_of,
    ids_and_scores,
    linked_nodes,
    scored,
)
from llama_index.core import VectorStoreIndex
from llama_index.core.schema import BaseNode, QueryBundle, TextNode

from scar_core.budget import BudgetSettings, select_within_budget
from scar_core.errors import NeighborFetchError
from scar_llamaindex import FetchedNodes, SCARNodePostprocessor

QUERY = "query"
Q = [1.0, 0.0]


def unit(degrees: float) -> list[float]:
    return [math.cos(math.radians(degrees)), math.sin(math.radians(degrees))]


def cos_deg(degrees: float) -> float:
    return math.cos(math.radians(degrees))


def chain_links(count: int, prefix: str = "n") -> dict[str, tuple[str | None, str | None]]:
    return {
        f"{prefix}{i}": (
            f"{prefix}{i - 1}" if i else None,
            f"{prefix}{i + 1}" if i + 1 < count else None,
        )
        for i in range(count)
    }


class CountingSource:
    """A NeighborSource over a dict of nodes that records every call, sync or async."""

    def __init__(self, nodes: Sequence[BaseNode]) -> None:
        self.nodes = {node.node_id: node for node in nodes}
        self.calls: list[tuple[list[str], list[str]]] = []
        self.sync_calls = 0
        self.async_calls = 0

    def _answer(self, node_ids: Sequence[str], vector_ids: Sequence[str]) -> FetchedNodes:
        self.calls.append((list(node_ids), list(vector_ids)))
        return FetchedNodes(nodes={i: self.nodes[i] for i in node_ids if i in self.nodes})

    def fetch(self, node_ids: Sequence[str], vector_ids: Sequence[str]) -> FetchedNodes:
        self.sync_calls += 1
        return self._answer(node_ids, vector_ids)

    async def afetch(self, node_ids: Sequence[str], vector_ids: Sequence[str]) -> FetchedNodes:
        self.async_calls += 1
        await asyncio.sleep(0)
        return self._answer(node_ids, vector_ids)


# -- hand-built ----------------------------------------------------------------------------------

# Document A: A1 is the best hit and A2 continues it; document B holds two lesser hits.
A_ANGLES = [89.0, 10.0, 40.0]
B_ANGLES = [35.0, 37.0]


@pytest.fixture
def hand() -> tuple[list[TextNode], list[TextNode]]:
    doc_a = linked_nodes(
        [f"a{i}" for i in range(3)],
        document_id="A",
        prefix="A",
        vectors=[unit(a) for a in A_ANGLES],
    )
    doc_b = linked_nodes(
        [f"b{i}" for i in range(2)],
        document_id="B",
        prefix="B",
        vectors=[unit(a) for a in B_ANGLES],
    )
    return doc_a, doc_b


def test_every_incoming_node_is_kept_and_the_best_neighbour_fills_the_free_slot(hand) -> None:
    doc_a, doc_b = hand
    incoming = scored([doc_a[1], doc_b[0], doc_b[1]], [0.9, 0.8, 0.7])
    bundle = QueryBundle(QUERY, embedding=Q)
    scar = SCARNodePostprocessor(docstore=docstore_of(doc_a + doc_b), budget=4, k=1)
    output = scar.postprocess_nodes(incoming, bundle)
    # One free slot. Bids: A2 = S(A2) + 0.2 with S(A2) = cos 40° - 0.1 (1 - cos 30°) = 0.753;
    # A0 = cos 89° - 0.1 (1 - cos 79°) + 0.2 = 0.137. A2 wins; passages in best-seed order.
    s_a2 = cos_deg(40) - 0.1 * (1 - cos_deg(30))
    assert ids_and_scores(output) == [
        ("A1", 0.9),
        ("A2", pytest.approx(s_a2)),
        ("B0", 0.8),
        ("B1", 0.7),
    ]
    neighbour = output[1].node.metadata
    assert neighbour["scar_mode"] == "budget"
    assert neighbour["scar_origin"] == "neighbor"
    assert neighbour["scar_boundary_penalty"] == pytest.approx(1 - cos_deg(30))
    assert output[0].node.metadata["scar_origin"] == "seed"


def test_min_seeds_incoming_nodes_are_kept_whatever_the_bids(hand) -> None:
    doc_a, doc_b = hand
    incoming = scored([doc_a[1], doc_b[0], doc_b[1]], [0.9, 0.8, 0.7])
    scar = SCARNodePostprocessor(docstore=docstore_of(doc_a + doc_b), budget=3, k=3)
    output = scar.postprocess_nodes(incoming, QueryBundle(QUERY, embedding=Q))
    assert ids_and_scores(output) == [("A1", 0.9), ("B0", 0.8), ("B1", 0.7)]


def test_fewer_incoming_nodes_than_the_budget_leave_the_slots_to_neighbours(hand) -> None:
    doc_a, doc_b = hand
    scar = SCARNodePostprocessor(docstore=docstore_of(doc_a + doc_b))
    output = scar.postprocess_nodes(scored([doc_a[1]], [0.9]), QueryBundle(QUERY, embedding=Q))
    # Budget 10, one incoming node: its whole document is in reach, nothing else competes.
    assert [item.node.node_id for item in output] == ["A0", "A1", "A2"]


def test_more_incoming_nodes_than_the_budget_keeps_them_all_and_warns_once(
    hand, caplog: pytest.LogCaptureFixture
) -> None:
    doc_a, doc_b = hand
    nodes = doc_a + doc_b
    incoming = scored(nodes, [0.5, 0.9, 0.1, 0.8, 0.7])
    scar = SCARNodePostprocessor(docstore=docstore_of(nodes), budget=3, k=2)
    bundle = QueryBundle(QUERY, embedding=Q)
    with caplog.at_level(logging.WARNING, logger="scar_llamaindex"):
        first = scar.postprocess_nodes(incoming, bundle)
        second = scar.postprocess_nodes(incoming, bundle)
    assert ids_and_scores(first) == ids_and_scores(second)
    assert {item.node.node_id for item in first} == {n.node_id for n in nodes}  # none lost
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "5 nodes arrived for a budget of 3" in warnings[0]


# -- random chains: equal to select_within_budget --------------------------------------------------

VECTOR = st.lists(st.integers(-3, 3), min_size=3, max_size=3).filter(any)


@st.composite
def scenarios(draw: st.DrawFn) -> dict:
    length = draw(st.integers(1, 12))
    vectors = draw(st.lists(VECTOR, min_size=length, max_size=length))
    seeds = draw(st.lists(st.integers(0, length - 1), min_size=1, max_size=min(length + 2, 8)))
    missing = draw(st.sets(st.integers(0, length - 1), max_size=length // 2))
    k = draw(st.integers(1, 4))
    return {
        "vectors": vectors,
        "seeds": seeds,
        "missing": missing - set(seeds),
        "query": draw(VECTOR),
        "k": k,
        "budget": k + draw(st.integers(0, 6)),
        "window": draw(st.sampled_from([None, None, 1, 2, 3])),
        "direction": draw(st.sampled_from(["both", "both", "previous", "next"])),
        "continuity_bonus": draw(st.sampled_from([0.0, 0.1, 0.2, 0.5])),
        "lambda_": draw(st.sampled_from([0.0, 0.1, 0.5])),
        "merge_passages": draw(st.booleans()),
    }


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios())
def test_budget_mode_selects_what_select_within_budget_selects(scenario: dict) -> None:
    vectors = scenario["vectors"]
    nodes = linked_nodes([f"t{i}" for i in range(len(vectors))], vectors=vectors)
    stored = [n for i, n in enumerate(nodes) if i not in scenario["missing"]]
    incoming = [nodes[p] for p in scenario["seeds"]]
    scores = [float(-rank) for rank in range(len(incoming))]
    knobs = {
        key: scenario[key]
        for key in ("budget", "k", "window", "direction", "continuity_bonus", "lambda_")
    }
    source = CountingSource(stored)
    scar = SCARNodePostprocessor(neighbor_source=source, **knobs)
    bundle = QueryBundle("q", embedding=[float(v) for v in scenario["query"]])
    output = scar.postprocess_nodes(scored(incoming, scores), bundle)

    seed_ids = list(dict.fromkeys(node.node_id for node in incoming))
    available = {n.node_id: np.array(n.embedding, dtype=float) for n in stored + incoming}
    reference = select_within_budget(
        np.array(scenario["query"], dtype=float),
        seed_ids,
        chain_links(len(nodes)),
        available,
        BudgetSettings(
            max_chunks=max(scenario["budget"], len(seed_ids)),
            continuity_bonus=scenario["continuity_bonus"],
            lambda_=scenario["lambda_"],
            min_seeds=max(1, len(seed_ids)),
            window=scenario["window"],
            direction=scenario["direction"],
        ),
    )
    ids = [item.node.node_id for item in output]
    assert sorted(ids) == sorted(reference.chunk_ids)
    assert len(ids) == len(set(ids)) <= max(scenario["budget"], len(seed_ids))
    assert set(seed_ids) <= set(ids)  # every incoming node is kept
    first_score = {s.node_id: sc for s, sc in reversed(list(zip(incoming, scores, strict=True)))}
    for item in output:
        chunk = reference.get(item.node.node_id)
        assert chunk is not None
        assert item.node.metadata["scar_mode"] == "budget"
        assert item.node.metadata["scar_origin"] == chunk.origin
        if chunk.origin == "seed":
            assert item.score == first_score[item.node.node_id]
        else:
            assert item.score == pytest.approx(chunk.score)
            assert chunk.decision is not None
            assert item.node.metadata["scar_threshold"] == pytest.approx(chunk.decision.threshold)
    # No node is asked of the store twice, and no node it lacks is ever returned.
    asked = [node_id for node_ids, _ in source.calls for node_id in node_ids]
    assert len(asked) == len(set(asked))
    position = {node.node_id: i for i, node in enumerate(nodes)}
    assert not {position[i] for i in ids} & scenario["missing"]


# -- round trips -----------------------------------------------------------------------------------


def long_chain(length: int = 30, seed: int = 10) -> list[TextNode]:
    """The seed is the best node and only the nodes after it continue it."""
    angles = [80.0 if i < seed else 5.0 + 0.5 * (i - seed) for i in range(length)]
    return linked_nodes([f"p{i}" for i in range(length)], vectors=[unit(a) for a in angles])


def test_unlimited_growth_costs_one_fetch_per_ring() -> None:
    chain = long_chain()
    source = CountingSource(chain)
    scar = SCARNodePostprocessor(neighbor_source=source, k=1)
    output = scar.postprocess_nodes(scored([chain[10]], [0.9]), QueryBundle(QUERY, embedding=Q))
    assert [item.node.node_id for item in output] == [f"n{i}" for i in range(10, 20)]
    # Two rings prefetched, then one fetch per ring up to n20, the node beyond the last taken.
    assert len(source.calls) == 10
    assert source.calls[0] == (["n9", "n11"], [])  # the seed brought its own vector
    asked = [node_id for node_ids, _ in source.calls for node_id in node_ids]
    assert len(asked) == len(set(asked))


@pytest.mark.parametrize("window", [1, 2, 3])
def test_a_window_limits_growth_and_the_prefetch(window: int) -> None:
    chain = long_chain()
    source = CountingSource(chain)
    scar = SCARNodePostprocessor(neighbor_source=source, k=1, window=window)
    output = scar.postprocess_nodes(scored([chain[10]], [0.9]), QueryBundle(QUERY, embedding=Q))
    assert [item.node.node_id for item in output][-1] == f"n{10 + window}"
    assert len(source.calls) == window


def topic_index(model: TableEmbedding) -> tuple[VectorStoreIndex, FaissNodeStore]:
    store = FaissNodeStore(dimension=2)
    index = VectorStoreIndex.from_vector_store(store, embed_model=model)
    for d in range(4):
        texts = [f"doc {d} part {i}" for i in range(8)]
        index.insert_nodes(linked_nodes(texts, document_id=f"d{d}", prefix=f"d{d}n"))
    return index, store


def topic_model() -> TableEmbedding:
    # Each document's relevance peaks at a different part and falls off around it.
    table = {
        f"doc {d} part {i}": unit(8.0 * abs(i - 2 * d) + 3.0 * d + 0.1 * i)
        for d in range(4)
        for i in range(8)
    }
    return TableEmbedding(table, {QUERY: unit(0.0)})


async def test_a_vector_store_only_index_needs_at_most_three_fetches_and_no_embedding() -> None:
    model = topic_model()
    index, store = topic_index(model)
    model.embedded_texts.clear()
    seeds = index.as_retriever(similarity_top_k=10).retrieve(QueryBundle(QUERY))
    store.get_nodes_calls.clear()
    scar = SCARNodePostprocessor.from_index(index)
    output = scar.postprocess_nodes(seeds, QueryBundle(QUERY, embedding=unit(0.0)))
    assert len(output) == 10
    assert 1 <= len(store.get_nodes_calls) <= 3
    assert model.embedded_texts == []
    calls = len(store.get_nodes_calls)
    again = await scar.apostprocess_nodes(seeds, QueryBundle(QUERY))
    assert ids_and_scores(again) == ids_and_scores(output)
    assert len(store.get_nodes_calls) == 2 * calls


# -- async, concurrency, faults, tokens --------------------------------------------------------------


@pytest.mark.parametrize("merge_passages", [False, True])
async def test_async_path_equals_sync_path_with_only_async_fetches(merge_passages: bool) -> None:
    chain = long_chain(16, seed=6)
    sync_source, async_source = CountingSource(chain), CountingSource(chain)
    incoming = scored([chain[6], chain[2], chain[12]], [0.9, 0.5, 0.4])
    knobs = {"k": 1, "budget": 8, "merge_passages": merge_passages}
    sync_out = SCARNodePostprocessor(neighbor_source=sync_source, **knobs).postprocess_nodes(
        incoming, QueryBundle(QUERY, embedding=Q)
    )
    async_out = await SCARNodePostprocessor(
        neighbor_source=async_source, **knobs
    ).apostprocess_nodes(incoming, QueryBundle(QUERY, embedding=Q))
    assert ids_and_scores(async_out) == ids_and_scores(sync_out)
    assert [i.node.get_content() for i in async_out] == [i.node.get_content() for i in sync_out]
    assert [i.node.metadata for i in async_out] == [i.node.metadata for i in sync_out]
    assert (async_source.sync_calls, sync_source.async_calls) == (0, 0)
    assert async_source.calls == sync_source.calls


async def test_concurrent_async_calls_equal_sequential_calls_in_budget_mode() -> None:
    chain = long_chain(20, seed=5)
    texts = {node.get_content(): node.embedding for node in chain}
    model = TableEmbedding(texts, {QUERY: Q})  # type: ignore[arg-type]
    plain_nodes = linked_nodes([f"p{i}" for i in range(20)])  # no stored vectors: embedded
    scar = SCARNodePostprocessor(docstore=docstore_of(plain_nodes), embed_model=model, budget=6)
    requests = [
        scored([plain_nodes[i % 20], plain_nodes[(7 * i + 3) % 20]], [0.9, 0.1]) for i in range(120)
    ]
    sequential = [ids_and_scores(scar.postprocess_nodes(r, QueryBundle(QUERY))) for r in requests]
    fresh = SCARNodePostprocessor(docstore=docstore_of(plain_nodes), embed_model=model, budget=6)
    concurrent = await asyncio.gather(
        *(fresh.apostprocess_nodes(r, QueryBundle(QUERY)) for r in requests)
    )
    assert [ids_and_scores(c) for c in concurrent] == sequential


class BrokenSource(CountingSource):
    def fetch(self, node_ids: Sequence[str], vector_ids: Sequence[str]) -> FetchedNodes:
        raise ConnectionError("store unreachable")

    async def afetch(self, node_ids: Sequence[str], vector_ids: Sequence[str]) -> FetchedNodes:
        raise ConnectionError("store unreachable")


@pytest.mark.parametrize("use_async", [False, True])
async def test_store_failure_in_budget_mode(use_async: bool) -> None:
    chain = long_chain(12, seed=4)
    incoming = scored([chain[4], chain[8], chain[1]], [0.9, 0.5, 0.4])
    bundle = QueryBundle(QUERY, embedding=Q)
    raising = SCARNodePostprocessor(neighbor_source=BrokenSource(chain), budget=2, k=1)
    call = (
        raising.apostprocess_nodes(incoming, bundle)
        if use_async
        else asyncio.to_thread(raising.postprocess_nodes, incoming, bundle)
    )
    with pytest.raises(NeighborFetchError) as caught:
        await call
    assert isinstance(caught.value.__cause__, ConnectionError)
    lenient = SCARNodePostprocessor(
        neighbor_source=BrokenSource(chain), budget=2, k=1, on_error="return_seeds"
    )
    output = (
        await lenient.apostprocess_nodes(incoming, bundle)
        if use_async
        else lenient.postprocess_nodes(incoming, bundle)
    )
    # Every incoming node comes back, unexpanded: nothing retrieved is lost.
    assert ids_and_scores(output) == [("n4", 0.9), ("n8", 0.5), ("n1", 0.4)]
    for item in output:
        assert item.node.metadata["scar_expanded"] is False
        assert item.node.metadata["scar_mode"] == "budget"


def test_token_budget_counts_each_node_and_equals_the_core() -> None:
    texts = [f"t{i} " + "w " * (2 + i % 3) for i in range(12)]
    vectors = [unit(5.0 * (i % 4)) for i in range(12)]
    chain = linked_nodes(texts, vectors=vectors)
    words = lambda text: len(text.split())  # noqa: E731
    incoming = [chain[5], chain[1], chain[9]]
    for max_tokens in (3, 9, 17, 40):
        scar = SCARNodePostprocessor(
            docstore=docstore_of(chain),
            budget=8,
            k=1,
            max_tokens=max_tokens,
            token_counter=words,
        )
        output = scar.postprocess_nodes(
            scored(incoming, [0.9, 0.8, 0.7]), QueryBundle(QUERY, embedding=Q)
        )
        expected = select_within_budget(
            np.array(Q),
            [n.node_id for n in incoming],
            chain_links(12),
            {n.node_id: n.embedding for n in chain},
            BudgetSettings(8, min_seeds=3, max_tokens=max_tokens),  # every incoming node kept
            token_counts={n.node_id: words(n.text) for n in chain},
        )
        assert sorted(item.node.node_id for item in output) == sorted(expected.chunk_ids)
        assert {"n5", "n1", "n9"} <= {item.node.node_id for item in output}
        if max_tokens >= sum(words(chain[i].text) for i in (5, 1, 9)):
            assert sum(words(item.node.get_content()) for item in output) <= max_tokens


def test_plain_mode_max_tokens_drops_the_weakest_end_neighbours() -> None:
    chain = linked_nodes(
        [f"c{i} w w w w" for i in range(5)],
        vectors=[unit(a) for a in (30.0, 12.0, 10.0, 20.0, 35.0)],
    )
    words = lambda text: len(text.split())  # noqa: E731
    settings = {"docstore": docstore_of(chain), "budget": None, "window": 2, "gamma": 0.5}
    bundle = QueryBundle(QUERY, embedding=Q)
    full = SCARNodePostprocessor(**settings).postprocess_nodes(scored([chain[2]], [0.9]), bundle)
    assert [item.node.node_id for item in full] == ["n0", "n1", "n2", "n3", "n4"]
    trimmed = SCARNodePostprocessor(
        **settings, max_tokens=15, token_counter=words
    ).postprocess_nodes(scored([chain[2]], [0.9]), bundle)
    # 25 words; the two lowest-S ends (n4 at 35°, then n0 at 30°) go, leaving 15.
    assert [item.node.node_id for item in trimmed] == ["n1", "n2", "n3"]
    assert trimmed[1].node.metadata["scar_mode"] == "plain"


def test_a_neighbour_with_a_nan_vector_is_skipped_with_a_warning_naming_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    chain = linked_nodes(["c0", "c1", "c2"], vectors=[unit(5.0), unit(1.0), [math.nan, 1.0]])
    scar = SCARNodePostprocessor(docstore=docstore_of(chain), budget=3, k=1)
    with caplog.at_level(logging.WARNING, logger="scar_llamaindex"):
        output = scar.postprocess_nodes(scored([chain[1]], [0.9]), QueryBundle(QUERY, embedding=Q))
    assert [item.node.node_id for item in output] == ["n0", "n1"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "'n2'" in warnings[0]
    assert "NaN" in warnings[0]
