"""The retriever decides exactly as scar_core.expand does, on vectors the test controls."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore
from lc_fakes import TableEmbeddings, chain_documents

from scar_core import expand
from scar_langchain import SCARRetriever, link_chunks


def _cos(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


# q is the x axis; the seed c1 has cos 0.9 to it. c2 continues it, c0 does not, and c3 (two
# steps away) continues c2. A second document "far" is barely relevant.
TABLE = {
    "q": [1.0, 0.0, 0.0],
    "c0": [0.6, 0.8, 0.0],
    "c1": [0.9, math.sqrt(1 - 0.81), 0.0],
    "c2": [0.8, 0.0, 0.6],
    "c3": [0.75, 0.0, math.sqrt(1 - 0.75**2)],
    "f0": [0.1, 0.0, math.sqrt(1 - 0.01)],
    "f1": [0.05, math.sqrt(1 - 0.0025), 0.0],
}


def _store(table: dict[str, list[float]] = TABLE) -> tuple[InMemoryVectorStore, list[Document]]:
    embeddings = TableEmbeddings(table)
    chunks = link_chunks(
        chain_documents("doc", ["c0", "c1", "c2", "c3"]) + chain_documents("far", ["f0", "f1"])
    )
    store = InMemoryVectorStore(embeddings)
    store.add_documents(chunks, ids=[c.id for c in chunks])
    return store, chunks


def _naive_decision(seed: str, via: str, neighbor: str, lambda_: float, gamma: float) -> dict:
    q = TABLE["q"]
    b = 1 - _cos(TABLE[via], TABLE[neighbor])
    s = _cos(q, TABLE[neighbor]) - lambda_ * b
    threshold = gamma * _cos(q, TABLE[seed])
    return {"b": b, "S": s, "threshold": threshold, "accepted": s > threshold}


def test_hand_built_vectors_window_one() -> None:
    store, chunks = _store()
    ids = {c.page_content: c.id for c in chunks}
    [passage] = SCARRetriever(vectorstore=store, budget=None, k=1).invoke("q")

    assert passage.metadata["scar_chunk_ids"] == [ids["c1"], ids["c2"]]
    assert passage.page_content == "c1\nc2"
    assert passage.metadata["scar_seed_id"] == ids["c1"]
    assert passage.metadata["scar_score"] == pytest.approx(0.9)

    seed_record, neighbor_record = passage.metadata["scar_chunks"]
    assert seed_record["origin"] == "seed"
    expected = _naive_decision("c1", "c1", "c2", 0.1, 0.8)
    assert expected["accepted"]
    assert neighbor_record["origin"] == "neighbor"
    assert neighbor_record["score"] == pytest.approx(expected["S"])
    assert neighbor_record["threshold"] == pytest.approx(expected["threshold"])
    assert neighbor_record["boundary_penalty"] == pytest.approx(expected["b"])

    [rejected] = passage.metadata["scar_rejected"]
    expected_c0 = _naive_decision("c1", "c1", "c0", 0.1, 0.8)
    assert not expected_c0["accepted"]
    assert rejected["neighbor_id"] == ids["c0"]
    assert rejected["score"] == pytest.approx(expected_c0["S"])
    assert rejected["threshold"] == pytest.approx(expected_c0["threshold"])
    assert rejected["boundary_penalty"] == pytest.approx(expected_c0["b"])


def test_hand_built_vectors_window_two_measures_the_penalty_across_the_new_boundary() -> None:
    store, chunks = _store()
    ids = {c.page_content: c.id for c in chunks}
    [passage] = SCARRetriever(vectorstore=store, budget=None, k=1, window=2).invoke("q")
    assert passage.metadata["scar_chunk_ids"] == [ids["c1"], ids["c2"], ids["c3"]]
    c3 = passage.metadata["scar_chunks"][2]
    expected = _naive_decision("c1", "c2", "c3", 0.1, 0.8)
    assert expected["accepted"]
    assert c3["via_id"] == ids["c2"]
    assert c3["distance"] == 2
    assert c3["score"] == pytest.approx(expected["S"])
    assert c3["boundary_penalty"] == pytest.approx(expected["b"])


def test_gamma_one_accepts_nothing_here() -> None:
    store, chunks = _store()
    [passage] = SCARRetriever(vectorstore=store, budget=None, k=1, gamma=1.0).invoke("q")
    assert passage.metadata["scar_chunk_ids"] == [chunks[1].id]
    assert passage.page_content == "c1"


@pytest.mark.parametrize("direction", ["previous", "next"])
def test_direction_limits_the_walk(direction: str) -> None:
    store, chunks = _store()
    [passage] = SCARRetriever(
        vectorstore=store, budget=None, k=1, gamma=0.1, direction=direction
    ).invoke("q")
    expected = (
        [chunks[0].id, chunks[1].id] if direction == "previous" else [chunks[1].id, chunks[2].id]
    )
    assert passage.metadata["scar_chunk_ids"] == expected


# --------------------------------------------------------------------------------------------
# Random vectors: the retriever's decisions equal scar_core.expand's on the seeds it used.


@st.composite
def corpora(draw: st.DrawFn) -> tuple[dict[str, list[float]], list[list[str]]]:
    dimension = draw(st.integers(2, 5))
    lengths = draw(st.lists(st.integers(1, 5), min_size=1, max_size=4))
    unit = st.floats(-1, 1, allow_nan=False, allow_infinity=False, width=32)
    table: dict[str, list[float]] = {}
    documents: list[list[str]] = []
    for d, length in enumerate(lengths):
        texts = []
        for position in range(length):
            text = f"d{d}p{position}"
            vector = draw(st.lists(unit, min_size=dimension, max_size=dimension))
            if not any(abs(x) > 1e-3 for x in vector):
                vector[0] = 1.0
            table[text] = vector
            texts.append(text)
        documents.append(texts)
    query = draw(st.lists(unit, min_size=dimension, max_size=dimension))
    if not any(abs(x) > 1e-3 for x in query):
        query[0] = 1.0
    table["query"] = query
    return table, documents


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    corpus=corpora(),
    k=st.integers(1, 5),
    window=st.integers(1, 2),
    gamma=st.floats(0.05, 1.0),
    lambda_=st.floats(0.0, 0.5),
    extra_seeds=st.one_of(st.none(), st.integers(0, 2)),
)
def test_decisions_match_scar_core(
    corpus: tuple[dict[str, list[float]], list[list[str]]],
    k: int,
    window: int,
    gamma: float,
    lambda_: float,
    extra_seeds: int | None,
) -> None:
    table, documents = corpus
    embeddings = TableEmbeddings(table)
    docs = [doc for d, texts in enumerate(documents) for doc in chain_documents(f"s{d}", texts)]
    chunks = link_chunks(docs)
    store = InMemoryVectorStore(embeddings)
    store.add_documents(chunks, ids=[c.id for c in chunks])
    retriever = SCARRetriever(
        vectorstore=store,
        budget=None,
        k=k,
        fetch_k=None if extra_seeds is None else k + extra_seeds,
        window=window,
        gamma=gamma,
        lambda_=lambda_,
        return_chunks=True,
    )
    out = retriever.invoke("query")

    text_of = {c.id: c.page_content for c in chunks}
    vectors = {c.id: table[c.page_content] for c in chunks}
    links = {c.id: (c.metadata.get("scar_prev_id"), c.metadata.get("scar_next_id")) for c in chunks}
    by_relevance = sorted(vectors, key=lambda cid: -_cos(table["query"], vectors[cid]))

    seeds = sorted(
        (d.metadata["scar_seed_rank"], d.id) for d in out if d.metadata["scar_origin"] == "seed"
    )
    seed_ids = [cid for _, cid in seeds]
    # The seeds used are the best-ranked chunks (ties aside), in rank order.
    relevance = [_cos(table["query"], vectors[cid]) for cid in seed_ids]
    assert relevance == sorted(relevance, reverse=True)
    best = [_cos(table["query"], vectors[cid]) for cid in by_relevance[: len(seed_ids)]]
    assert np.allclose(relevance, best)

    expected = expand(np.array(table["query"]), seed_ids, links, vectors, lambda_, gamma, window)
    assert sorted(d.id for d in out) == sorted(expected.chunk_ids)
    for doc in out:
        chosen = expected.get(doc.id)
        assert chosen is not None
        assert doc.metadata["scar_origin"] == chosen.origin
        assert doc.metadata["scar_score"] == pytest.approx(chosen.score)
        assert doc.page_content == text_of[doc.id]
        if chosen.decision is not None:
            assert doc.metadata["scar_threshold"] == pytest.approx(chosen.decision.threshold)
            assert doc.metadata["scar_boundary_penalty"] == pytest.approx(
                chosen.decision.boundary_penalty
            )

    passages = sorted({d.metadata["scar_passage"] for d in out})
    assert passages == list(range(len(passages)))
    # k passages whenever the corpus allows it, from the fewest seeds that give k.
    assert len(passages) <= k
    if len(passages) < k:
        assert len(seed_ids) == len(chunks)
    elif len(seed_ids) > k:
        fewer = expand(
            np.array(table["query"]), seed_ids[:-1], links, vectors, lambda_, gamma, window
        )
        assert _run_count(fewer.chunk_ids, links) < k
    # Within a passage, chunks follow document order.
    for passage in passages:
        members = [d for d in out if d.metadata["scar_passage"] == passage]
        for before, after in itertools.pairwise(members):
            assert links[before.id][1] == after.id


def _run_count(chunk_ids: list[str], links: dict[str, tuple[str | None, str | None]]) -> int:
    selected = set(chunk_ids)
    return sum(1 for cid in chunk_ids if links[cid][0] not in selected)
