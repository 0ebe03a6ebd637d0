"""Budget mode, the default: decisions equal scar_core.budget's, fetched in few round trips."""

import asyncio
import itertools
import json
import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore
from lc_fakes import HashingEmbeddings, TableEmbeddings, chain_documents

from scar_core import expand
from scar_core.budget import DEFAULT_CONTINUITY_BONUS, BudgetSettings, select_within_budget
from scar_core.errors import InvalidSettingsError, NeighborFetchError
from scar_langchain import EmbeddingVectors, SCARRetriever, link_chunks


class CountingStore(InMemoryVectorStore):
    """Records every search size and every get_by_ids batch, sync and async alike."""

    def __init__(self, embedding: Any) -> None:
        super().__init__(embedding)
        self.search_sizes: list[int] = []
        self.lookups: list[list[str]] = []
        self.sync_calls = 0

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        self.sync_calls += 1
        self.lookups.append(list(ids))
        return super().get_by_ids(ids)

    async def aget_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        self.lookups.append(list(ids))
        return super().get_by_ids(ids)

    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, **kwargs: Any
    ) -> list[Document]:
        self.sync_calls += 1
        self.search_sizes.append(k)
        return super().similarity_search_by_vector(embedding, k, **kwargs)

    async def asimilarity_search_by_vector(
        self, embedding: list[float], k: int = 4, **kwargs: Any
    ) -> list[Document]:
        self.search_sizes.append(k)
        return super().similarity_search_by_vector(embedding, k, **kwargs)


def _linked_store(
    table: dict[str, list[float]],
    documents: dict[str, list[str]],
    store_class: type = CountingStore,
) -> tuple[Any, list[Document]]:
    chunks = link_chunks(
        [doc for name, texts in documents.items() for doc in chain_documents(name, texts)]
    )
    store = store_class(TableEmbeddings(table))
    store.add_documents(chunks, ids=[c.id for c in chunks])
    return store, chunks


def _links(chunks: Sequence[Document]) -> dict[str, tuple[str | None, str | None]]:
    return {c.id: (c.metadata.get("scar_prev_id"), c.metadata.get("scar_next_id")) for c in chunks}


def _unit(degrees: float) -> list[float]:
    return [math.cos(math.radians(degrees)), math.sin(math.radians(degrees))]


# --------------------------------------------------------------------------------------------
# Defaults and settings


def test_the_defaults_are_budget_mode_and_budget_none_is_the_papers_rule() -> None:
    store = InMemoryVectorStore(HashingEmbeddings())
    retriever = SCARRetriever(vectorstore=store)
    assert (retriever.budget, retriever.k, retriever.window) == (10, 3, None)
    assert (retriever.continuity_bonus, retriever.lambda_) == (DEFAULT_CONTINUITY_BONUS, 0.1)
    assert DEFAULT_CONTINUITY_BONUS == 0.2
    paper = SCARRetriever(vectorstore=store, budget=None)
    assert (paper.budget, paper.lambda_, paper.gamma, paper.window) == (None, 0.1, 0.8, None)


# Hand-built: q is the x axis. Document "a" holds the best hit a1 and its continuation a2;
# document "b" holds two lesser hits. The continuity bonus decides whether a2 beats b0.
HAND = {
    "q": [1.0, 0.0],
    "a0": _unit(89.0),
    "a1": _unit(10.0),
    "a2": _unit(40.0),
    "b0": _unit(35.0),
    "b1": _unit(37.0),
}


def _hand_store() -> tuple[CountingStore, dict[str, str]]:
    store, chunks = _linked_store(HAND, {"a": ["a0", "a1", "a2"], "b": ["b0", "b1"]})
    return store, {c.page_content: c.id for c in chunks}


def test_a_continuing_neighbour_beats_a_weaker_hit_by_the_bonus() -> None:
    store, ids = _hand_store()
    # S(a2) = cos 40° - 0.1 (1 - cos 30°) = 0.7526; with the bonus it bids 0.9526 > cos 35°.
    s_a2 = math.cos(math.radians(40)) - 0.1 * (1 - math.cos(math.radians(30)))
    docs = SCARRetriever(vectorstore=store, k=1, budget=2).invoke("q")
    assert [d.page_content for d in docs] == ["a1\na2"]
    assert docs[0].metadata["scar_chunk_ids"] == [ids["a1"], ids["a2"]]
    assert docs[0].metadata["scar_mode"] == "budget"
    seed, neighbour = docs[0].metadata["scar_chunks"]
    assert (seed["origin"], neighbour["origin"]) == ("seed", "neighbor")
    assert neighbour["score"] == pytest.approx(s_a2)
    # The bid it beat was cos 35° (b0), recorded less the bonus, so score > threshold holds.
    assert neighbour["threshold"] == pytest.approx(math.cos(math.radians(35)) - 0.2)
    assert neighbour["boundary_penalty"] == pytest.approx(1 - math.cos(math.radians(30)))
    # Without the bonus, b0 (cos 35° = 0.819) outbids a2 (0.753): plain top-2.
    plain_top = SCARRetriever(vectorstore=store, k=1, budget=2, continuity_bonus=0.0).invoke("q")
    assert [d.page_content for d in plain_top] == ["a1", "b0"]
    assert [d.metadata["scar_chunks"][0]["origin"] for d in plain_top] == ["seed", "seed"]


def test_k_seeds_are_kept_even_when_a_neighbour_bids_more() -> None:
    store, _ = _hand_store()
    docs = SCARRetriever(vectorstore=store, k=2, budget=2).invoke("q")
    assert [d.page_content for d in docs] == ["a1", "b0"]


def test_return_chunks_gives_exactly_the_budget() -> None:
    store, ids = _hand_store()
    docs = SCARRetriever(vectorstore=store, k=1, budget=4, return_chunks=True).invoke("q")
    assert len(docs) == 4
    assert all(d.metadata["scar_mode"] == "budget" for d in docs)
    assert len({d.id for d in docs}) == 4
    # Chunks come grouped by passage and in document order within one.
    assert [d.metadata["scar_passage"] for d in docs] == sorted(
        d.metadata["scar_passage"] for d in docs
    )
    assert docs[0].id == ids["a1"]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"budget": 2, "k": 3}, r"budget=2 is smaller than k=3: a budget smaller than the number"),
        ({"budget": 0}, r"budget=0 is not valid; it must be an integer >= 1"),
        ({"budget": 2.5}, r"budget=2.5 is not valid"),
        ({"budget": True}, r"budget=True is not valid"),
        ({"continuity_bonus": -0.1}, r"continuity_bonus=-0.1 is not valid; .* >= 0"),
        ({"continuity_bonus": float("inf")}, r"continuity_bonus=inf is not valid"),
        ({"continuity_bonus": "0.2"}, r"continuity_bonus='0.2' is not valid"),
        ({"window": 0}, r"window=0 is not valid"),
        ({"window": 0, "budget": None}, r"window=0 is not valid"),
        ({"gamma": 0.0}, r"gamma=0.0 is not valid"),
        ({"fetch_k": 2}, r"fetch_k=2 is smaller than k=3"),
    ],
)
def test_bad_budget_settings_are_rejected_at_construction(
    settings: dict[str, Any], message: str
) -> None:
    store = InMemoryVectorStore(HashingEmbeddings())
    with pytest.raises(InvalidSettingsError, match=message):
        SCARRetriever(vectorstore=store, **settings)


def test_per_call_budget_and_k_are_validated_and_do_not_stick() -> None:
    store, _ = _hand_store()
    retriever = SCARRetriever(vectorstore=store, k=1, budget=2, return_chunks=True)
    assert len(retriever.invoke("q", budget=4)) == 4
    assert len(retriever.invoke("q")) == 2
    with pytest.raises(InvalidSettingsError, match="budget=1 is smaller than k=2"):
        retriever.invoke("q", k=2, budget=1)
    with pytest.raises(InvalidSettingsError, match="budget=3 is smaller than k=4"):
        retriever.invoke("q", k=4, budget=3)
    assert retriever.budget == 2


def test_a_per_call_budget_switches_plain_mode_to_budget_mode() -> None:
    store, _ = _hand_store()
    retriever = SCARRetriever(vectorstore=store, budget=None, k=1)
    assert retriever.invoke("q")[0].metadata["scar_mode"] == "plain"
    assert retriever.invoke("q", budget=2)[0].metadata["scar_mode"] == "budget"


def test_budget_none_with_default_settings_is_the_papers_expand() -> None:
    store, chunks = _linked_store(HAND, {"a": ["a0", "a1", "a2"], "b": ["b0", "b1"]})
    docs = SCARRetriever(vectorstore=store, budget=None, k=2, return_chunks=True).invoke("q")
    assert all(d.metadata["scar_mode"] == "plain" for d in docs)
    seeds = [
        d.id
        for d in sorted(docs, key=lambda d: d.metadata["scar_seed_rank"])
        if d.metadata["scar_origin"] == "seed"
    ]
    vectors = {c.id: HAND[c.page_content] for c in chunks}
    expected = expand(np.array(HAND["q"]), seeds, _links(chunks), vectors, 0.1, 0.8, 1)
    assert sorted(d.id for d in docs) == sorted(expected.chunk_ids)


# --------------------------------------------------------------------------------------------
# Random corpora: the retriever selects exactly what select_within_budget selects


@st.composite
def corpora(draw: st.DrawFn) -> tuple[dict[str, list[float]], dict[str, list[str]]]:
    dimension = draw(st.integers(2, 4))
    lengths = draw(st.lists(st.integers(1, 8), min_size=1, max_size=4))
    unit = st.floats(-1, 1, allow_nan=False, allow_infinity=False, width=32)
    table: dict[str, list[float]] = {}
    documents: dict[str, list[str]] = {}
    for d, length in enumerate(lengths):
        texts = []
        for position in range(length):
            vector = draw(st.lists(unit, min_size=dimension, max_size=dimension))
            if not any(abs(x) > 1e-3 for x in vector):
                vector[0] = 1.0
            table[f"d{d}p{position}"] = vector
            texts.append(f"d{d}p{position}")
        documents[f"s{d}"] = texts
    query = draw(st.lists(unit, min_size=dimension, max_size=dimension))
    if not any(abs(x) > 1e-3 for x in query):
        query[0] = 1.0
    table["query"] = query
    return table, documents


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    corpus=corpora(),
    k=st.integers(1, 3),
    extra_slots=st.integers(0, 6),
    extra_hits=st.one_of(st.none(), st.integers(0, 4)),
    window=st.sampled_from([None, None, 1, 2, 3]),
    bonus=st.floats(0.0, 0.6),
    lambda_=st.floats(0.0, 0.5),
    direction=st.sampled_from(["both", "both", "previous", "next"]),
    max_tokens=st.one_of(st.none(), st.integers(1, 12)),
)
def test_budget_decisions_match_select_within_budget(
    corpus: tuple[dict[str, list[float]], dict[str, list[str]]],
    k: int,
    extra_slots: int,
    extra_hits: int | None,
    window: int | None,
    bonus: float,
    lambda_: float,
    direction: str,
    max_tokens: int | None,
) -> None:
    table, documents = corpus
    store, chunks = _linked_store(table, documents)
    budget = k + extra_slots
    fetch_k = None if extra_hits is None else k + extra_hits
    max_tokens = None if max_tokens is None else max(max_tokens, k)
    words = lambda text: len(text.split())  # noqa: E731
    retriever = SCARRetriever(
        vectorstore=store,
        k=k,
        budget=budget,
        fetch_k=fetch_k,
        window=window,
        continuity_bonus=bonus,
        lambda_=lambda_,
        direction=direction,
        max_tokens=max_tokens,
        token_counter=words,
        return_chunks=True,
    )
    out = retriever.invoke("query")

    # The input the retriever saw: the store's own ranking of the hits it asked for.
    hits = store.similarity_search_by_vector(table["query"], k=fetch_k or budget)
    vectors = {c.id: table[c.page_content] for c in chunks}
    expected = select_within_budget(
        np.array(table["query"]),
        [d.id for d in hits],
        _links(chunks),
        vectors,
        BudgetSettings(
            max_chunks=budget,
            continuity_bonus=bonus,
            lambda_=lambda_,
            min_seeds=k,
            window=window,
            direction=direction,  # type: ignore[arg-type]
            max_tokens=max_tokens,
        ),
        token_counts={c.id: 1 for c in chunks},
    )
    assert sorted(d.id for d in out) == sorted(expected.chunk_ids)
    assert len(out) == len({d.id for d in out}) <= budget
    for doc in out:
        chosen = expected.get(doc.id)
        assert chosen is not None
        assert doc.metadata["scar_mode"] == "budget"
        assert doc.metadata["scar_origin"] == chosen.origin
        assert doc.metadata["scar_seed_id"] == chosen.seed_id
        assert doc.metadata["scar_score"] == pytest.approx(chosen.score)
        if chosen.decision is not None:
            assert doc.metadata["scar_threshold"] == pytest.approx(chosen.decision.threshold)
            assert doc.metadata["scar_boundary_penalty"] == pytest.approx(
                chosen.decision.boundary_penalty
            )
            assert doc.metadata["scar_distance"] == chosen.decision.distance
    # The k best hits are always there; chunks of one passage are contiguous, in order.
    assert {d.id for d in hits[:k]} <= {d.id for d in out}
    links = _links(chunks)
    for _, members in itertools.groupby(out, key=lambda d: d.metadata["scar_passage"]):
        for before, after in itertools.pairwise(list(members)):
            assert links[before.id][1] == after.id
    # No chunk is ever asked of the store twice.
    requested = [cid for batch in store.lookups for cid in batch]
    assert len(requested) == len(set(requested))


# --------------------------------------------------------------------------------------------
# Round trips


def _long_document(length: int = 30, seed: int = 10) -> tuple[dict[str, list[float]], list[str]]:
    """One document where the seed is the best hit and only its later chunks continue it."""
    texts = [f"p{i}" for i in range(length)]
    table = {"q": [1.0, 0.0]}
    for i, text in enumerate(texts):
        if i < seed:
            table[text] = _unit(80.0)  # barely relevant: loses every bid
        else:
            table[text] = _unit(5.0 + 0.5 * (i - seed))  # each continues its predecessor
    return table, texts


def _renamed(chunks: Sequence[Document], start: int = 0) -> list[Document]:
    """The same chain under ids that do not follow link_chunks' naming (nothing predictable),
    from the chunk at ``start`` on; the links of every chunk follow the new ids."""
    names = {c.id: f"custom-{index}" for index, c in enumerate(chunks) if index >= start}
    renamed = []
    for chunk in chunks:
        metadata = dict(chunk.metadata)
        for key in ("scar_chunk_id", "scar_prev_id", "scar_next_id"):
            if key in metadata:
                metadata[key] = names.get(metadata[key], metadata[key])
        chunk_id = names.get(chunk.id, chunk.id)
        renamed.append(Document(id=chunk_id, page_content=chunk.page_content, metadata=metadata))
    return renamed


# Growth from p10 to p19, which needs p20 known (it bids for the last slot), over ids that
# link_chunks named (predictable) or not. Predictable: p10 is the best retrieved chunk, so its
# prefetch is the deep one, p5..p15 (five rings) in one call; then each miss (p16, p19) comes
# with the two chunks after it: 3 calls. Not predictable: the three prefetched rings are one
# call each, then one call per ring up to p20: 3 + 7 = 10 calls.
@pytest.mark.parametrize(("predictable", "lookups"), [(True, 3), (False, 10)])
def test_unlimited_growth_fetches_rings_in_few_lookups_and_equals_full_knowledge(
    predictable: bool, lookups: int
) -> None:
    table, texts = _long_document()
    store, chunks = _linked_store(table, {"doc": texts})
    if not predictable:
        chunks = _renamed(chunks)
        store = CountingStore(TableEmbeddings(table))
        store.add_documents(chunks, ids=[c.id for c in chunks])
    docs = SCARRetriever(vectorstore=store, k=1, budget=10, fetch_k=1).invoke("q")
    [passage] = docs
    assert passage.page_content.split() == [f"p{i}" for i in range(10, 20)]
    assert store.search_sizes == [1]
    assert len(store.lookups) == lookups
    requested = [cid for batch in store.lookups for cid in batch]
    assert len(requested) == len(set(requested))
    vectors = {c.id: table[c.page_content] for c in chunks}
    expected = select_within_budget(
        np.array(table["q"]), [chunks[10].id], _links(chunks), vectors, BudgetSettings(10)
    )
    assert passage.metadata["scar_chunk_ids"] == [c.id for c in chunks[10:20]]
    assert sorted(passage.metadata["scar_chunk_ids"]) == sorted(expected.chunk_ids)


# Ids named by link_chunks up to a point, renamed after it: the predicted rings beyond that
# point name chunks the store does not hold, and the chain goes on under other ids. The
# prediction is only a hint, so the selection still follows the links to the full result.
@pytest.mark.parametrize("renamed_from", [11, 12, 14, 16, 25])
def test_links_that_disagree_with_the_predicted_names_are_still_followed(
    renamed_from: int,
) -> None:
    table, texts = _long_document()
    store, chunks = _linked_store(table, {"doc": texts})
    chunks = _renamed(chunks, start=renamed_from)
    store = CountingStore(TableEmbeddings(table))
    store.add_documents(chunks, ids=[c.id for c in chunks])
    [passage] = SCARRetriever(vectorstore=store, k=1, budget=10, fetch_k=1).invoke("q")
    vectors = {c.id: table[c.page_content] for c in chunks}
    expected = select_within_budget(
        np.array(table["q"]), [chunks[10].id], _links(chunks), vectors, BudgetSettings(10)
    )
    assert passage.metadata["scar_chunk_ids"] == [c.id for c in chunks[10:20]]
    assert sorted(passage.metadata["scar_chunk_ids"]) == sorted(expected.chunk_ids)
    requested = [cid for batch in store.lookups for cid in batch]
    assert len(requested) == len(set(requested))


# A window of w prefetches w rings: one call when the ids are predictable, w calls otherwise.
@pytest.mark.parametrize(
    ("window", "predictable", "lookups"),
    [(1, True, 1), (2, True, 1), (3, True, 1), (1, False, 1), (2, False, 2), (3, False, 3)],
)
def test_a_window_limits_growth_and_the_prefetch(
    window: int, predictable: bool, lookups: int
) -> None:
    table, texts = _long_document()
    store, chunks = _linked_store(table, {"doc": texts})
    if not predictable:
        store = CountingStore(TableEmbeddings(table))
        renamed = _renamed(chunks)
        store.add_documents(renamed, ids=[c.id for c in renamed])
    [passage] = SCARRetriever(vectorstore=store, k=1, budget=10, fetch_k=1, window=window).invoke(
        "q"
    )
    # With one hit and no competitor, slots go to neighbours while any is in reach.
    assert passage.page_content.split()[-1] == f"p{10 + window}"
    assert len(store.lookups) == lookups


# The first lookup holds ring 1 (from the hit's links) and the predicted further rings: five
# rings around this one hit when vectors are read from the store (it is among the best three),
# two when every fetched chunk must be embedded.
@pytest.mark.parametrize(("embedded", "first_batch"), [(False, range(5, 16)), (True, range(8, 13))])
def test_the_prefetch_is_shallower_when_chunk_vectors_are_embedded(
    embedded: bool, first_batch: range
) -> None:
    table, texts = _long_document()
    store, chunks = _linked_store(table, {"doc": texts})
    options: dict[str, Any] = {}
    if embedded:
        options["vector_source"] = EmbeddingVectors(TableEmbeddings(table))
    SCARRetriever(vectorstore=store, k=1, budget=10, fetch_k=1, **options).invoke("q")
    expected = {chunks[i].id for i in first_batch} - {chunks[10].id}
    assert set(store.lookups[0]) == expected


def test_the_prefetch_is_deeper_around_better_ranked_hits() -> None:
    """Seven hits, one per document, ranked d0 > d1 > ... > d6, with a budget of 10: five rings
    around the first three, three rings around the rest of the better half of the budget (ranks
    4 and 5), none around ranks 6 and 7; all in the first lookup."""
    documents = {f"d{d}": [f"d{d}p{i}" for i in range(14)] for d in range(7)}
    table = {"q": [1.0, 0.0]}
    for d, texts in enumerate(documents.values()):
        for i, text in enumerate(texts):
            table[text] = _unit(2.0 + d) if i == 7 else _unit(60.0 + d + i)
    store, chunks = _linked_store(table, documents)
    SCARRetriever(vectorstore=store, k=7, budget=10, fetch_k=7).invoke("q")
    assert store.search_sizes == [7]
    rings = {0: 5, 1: 5, 2: 5, 3: 3, 4: 3, 5: 0, 6: 0}
    by_text = {c.page_content: c.id for c in chunks}
    expected = {
        by_text[f"d{d}p{i}"] for d in range(7) for i in range(7 - rings[d], 8 + rings[d]) if i != 7
    }
    assert set(store.lookups[0]) == expected


def _topic_store() -> CountingStore:
    docs = []
    for d in range(6):
        docs += chain_documents(
            f"doc{d}",
            [f"document {d} topic{d} part {i} word{i} word{i + 1}" for i in range(8)],
        )
    chunks = link_chunks(docs)
    store = CountingStore(HashingEmbeddings())
    store.add_documents(chunks, ids=[c.id for c in chunks])
    return store


TOPIC_QUERIES = ["topic1 word2", "topic3 word0", "topic0 word4 word5", "topic2", "word6 topic5"]


@pytest.mark.parametrize("query", TOPIC_QUERIES)
def test_typical_queries_need_one_search_and_at_most_three_lookups(query: str) -> None:
    store = _topic_store()
    docs = SCARRetriever(vectorstore=store, return_chunks=True).invoke(query)
    assert len(docs) == 10
    assert store.search_sizes == [10]
    assert 1 <= len(store.lookups) <= 3
    requested = [cid for batch in store.lookups for cid in batch]
    assert len(requested) == len(set(requested))


# --------------------------------------------------------------------------------------------
# Async, concurrency, faults, tokens


async def test_async_path_equals_sync_path_with_only_async_store_calls() -> None:
    store = _topic_store()
    retriever = SCARRetriever(vectorstore=store, budget=7, k=2)
    expected = [retriever.invoke(query) for query in TOPIC_QUERIES]
    sync_calls, lookups = store.sync_calls, len(store.lookups)
    got = [await retriever.ainvoke(query) for query in TOPIC_QUERIES]
    assert store.sync_calls == sync_calls  # the async path made no sync store call
    assert len(store.lookups) - lookups == lookups  # and as many lookups as the sync path
    assert [(d.page_content, d.metadata) for docs in got for d in docs] == [
        (d.page_content, d.metadata) for docs in expected for d in docs
    ]


async def test_concurrent_ainvoke_equals_sequential_invoke_in_budget_mode() -> None:
    retriever = SCARRetriever(vectorstore=_topic_store())
    queries = TOPIC_QUERIES * 20
    expected = [[d.metadata["scar_chunk_ids"] for d in retriever.invoke(q)] for q in queries]
    got = await asyncio.gather(*(retriever.ainvoke(q) for q in queries))
    assert [[d.metadata["scar_chunk_ids"] for d in docs] for docs in got] == expected


class FailingStore(InMemoryVectorStore):
    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        raise ConnectionError("database unreachable")

    async def aget_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        raise ConnectionError("database unreachable")


@pytest.mark.parametrize("use_async", [False, True])
async def test_store_failure_in_budget_mode(
    use_async: bool, caplog: pytest.LogCaptureFixture
) -> None:
    chunks = link_chunks(chain_documents("doc", [f"part {i}" for i in range(12)]))
    store = FailingStore(HashingEmbeddings())
    store.add_documents(chunks, ids=[c.id for c in chunks])
    raising = SCARRetriever(vectorstore=store, budget=4, k=2)
    with pytest.raises(NeighborFetchError) as caught:
        await raising.ainvoke("part 3") if use_async else raising.invoke("part 3")
    assert isinstance(caught.value.__cause__, ConnectionError)

    lenient = SCARRetriever(vectorstore=store, budget=4, k=2, on_error="return_seeds")
    with caplog.at_level(logging.WARNING, logger="scar_langchain"):
        docs = await lenient.ainvoke("part 3") if use_async else lenient.invoke("part 3")
    hits = store.similarity_search("part 3", k=4)
    # The hits up to the budget, unexpanded: what plain top-B would have returned.
    assert [d.page_content for d in docs] == [d.page_content for d in hits]
    for doc in docs:
        assert doc.metadata["scar_expanded"] is False
        assert doc.metadata["scar_mode"] == "budget"
        assert doc.metadata["scar_error"] == "NeighborFetchError"
    assert "unreachable" not in caplog.text


def test_token_budget_in_budget_mode_counts_each_chunk() -> None:
    texts = [f"t{i} " + "w " * (2 + i % 3) for i in range(12)]
    table = {text: _unit(5.0 * (i % 4)) for i, text in enumerate(texts)}
    table["q"] = [1.0, 0.0]
    store, chunks = _linked_store(table, {"doc": texts})
    words = lambda text: len(text.split())  # noqa: E731
    for max_tokens in (3, 9, 17, 40):
        docs = SCARRetriever(
            vectorstore=store, k=1, budget=8, max_tokens=max_tokens, token_counter=words
        ).invoke("q")
        hits = store.similarity_search_by_vector(table["q"], k=8)
        expected = select_within_budget(
            np.array(table["q"]),
            [d.id for d in hits],
            _links(chunks),
            {c.id: table[c.page_content] for c in chunks},
            BudgetSettings(8, min_seeds=1, max_tokens=max_tokens),
            token_counts={c.id: words(c.page_content) for c in chunks},
        )
        returned = [cid for d in docs for cid in d.metadata["scar_chunk_ids"]]
        assert sorted(returned) == sorted(expected.chunk_ids)
        assert hits[0].id in returned
        if max_tokens >= words(hits[0].page_content):
            assert sum(words(d.page_content) for d in docs) <= max_tokens


def test_metadata_is_plain_json_and_marks_the_seeds() -> None:
    store = _topic_store()
    for return_chunks in (False, True):
        docs = SCARRetriever(vectorstore=store, return_chunks=return_chunks).invoke("topic1")
        json.dumps([d.metadata for d in docs])
        assert all(d.metadata["scar_mode"] == "budget" for d in docs)
    passages = SCARRetriever(vectorstore=store).invoke("topic1 word2")
    origins = [c["origin"] for d in passages for c in d.metadata["scar_chunks"]]
    assert origins.count("seed") >= 3
    assert sum(len(d.metadata["scar_chunk_ids"]) for d in passages) == 10


def test_empty_store_returns_nothing_in_budget_mode() -> None:
    assert SCARRetriever(vectorstore=InMemoryVectorStore(HashingEmbeddings())).invoke("q") == []


# --------------------------------------------------------------------------------------------
# Plain mode: a token trim that splits a passage keeps both parts (no seed is dropped)

# cos to q: a1 .95, a3 .94, b0 .92, a0 .90, a4 .90, a2 .85. The hits a1 and a3 merge through a2,
# which enters with the lowest S (0.814, from a1 across 50 degrees); b0 is the second passage.
SPLIT = {
    "q": [1.0, 0.0],
    "a0 w w w w w w w w w": _unit(25.84),
    "a1 w w w w w w w w w": _unit(18.19),
    "a2 w w w w w w w w w": _unit(-31.79),
    "a3 w w w w w w w w w": _unit(-19.95),
    "a4 w w w w w w w w w": _unit(-25.84),
    "b0 w w w w w w w w w": _unit(23.07),
}


def test_a_plain_mode_trim_that_splits_a_passage_keeps_every_seed() -> None:
    texts = [t for t in SPLIT if t != "q"]
    store, chunks = _linked_store(SPLIT, {"a": texts[:5], "b": texts[5:]})
    words = lambda text: len(text.split())  # noqa: E731
    settings: dict[str, Any] = {"vectorstore": store, "budget": None, "k": 2, "fetch_k": 2}
    full = SCARRetriever(**settings).invoke("q")
    assert [len(d.metadata["scar_chunk_ids"]) for d in full] == [5, 1]
    # 60 words; dropping a2 (the weakest neighbour) leaves 50 and splits the first passage.
    docs = SCARRetriever(**settings, max_tokens=55, token_counter=words).invoke("q")
    assert [d.metadata["scar_chunk_ids"] for d in docs] == [
        [chunks[0].id, chunks[1].id],
        [chunks[3].id, chunks[4].id],
        [chunks[5].id],
    ]
    assert sum(words(d.page_content) for d in docs) == 50


# InMemoryVectorStore's own search warns about the NaN vector it holds.
@pytest.mark.filterwarnings("ignore:NaN found in input arrays:RuntimeWarning")
def test_a_neighbour_with_a_nan_vector_is_skipped_with_a_warning_naming_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    table = {"q": [1.0, 0.0], "c0": _unit(5.0), "c1": _unit(1.0), "c2": [math.nan, 1.0]}
    store, chunks = _linked_store(table, {"doc": ["c0", "c1", "c2"]})
    with caplog.at_level(logging.WARNING, logger="scar_langchain"):
        [passage] = SCARRetriever(vectorstore=store, k=1, budget=3, fetch_k=1).invoke("q")
    assert passage.metadata["scar_chunk_ids"] == [chunks[0].id, chunks[1].id]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert repr(chunks[2].id) in warnings[0]
    assert "NaN" in warnings[0]


def test_lazy_values_are_made_once_per_known_chunk() -> None:
    """Records and token counts share LazyValues: one make per chunk looked up, keys = the pool."""
    from scar_core._lazy import LazyValues
    from scar_langchain._pool import QueryPool

    pool = QueryPool(np.array([1.0, 0.0]))
    pool.add_seeds([Document(id="a", page_content="x y"), Document(id="b", page_content="z")], 2)
    made: list[str] = []

    def make(chunk_id: str) -> int:
        made.append(chunk_id)
        return len(pool.documents[chunk_id].page_content.split())

    values = LazyValues(pool.documents, make)
    assert (values["a"], values["a"], values.get("b")) == (2, 2, 1)
    assert made == ["a", "b"]
    assert values.get("unknown") is None
    assert (list(values), len(values)) == (["a", "b"], 2)
    assert pool.records()["b"].text == "z"
