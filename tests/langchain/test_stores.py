"""SCARRetriever on real embedded stores (FAISS, Chroma, Qdrant): the in-memory answers, no
chunk embedded at query time, at most two store round trips beyond the search.

No store is mocked: each is the real store, a subclass at most counting its public reads.
Postgres (PGVectorStore) runs the same checks in ``tests/postgres/test_pg_langchain.py``;
link_store is tested in ``test_link_store.py``.
"""

from __future__ import annotations

import pytest

from lc_stores import (
    ROUND_TRIPS,
    STORES,
    Corpus,
    CountingEmbeddings,
    comparable,
    make_corpus,
    scores,
)
from scar_langchain import SCARRetriever
from scar_langchain._stores import access_for

EMBEDDED = ["faiss", "chroma", "qdrant"]
#: Budget mode (the default) and the paper's rule, each at every k from 3 to 8.
SETTINGS = [{"k": k} for k in range(3, 9)] + [{"k": k, "mode": "paper"} for k in range(3, 9)]


class Built:
    """One store filled with the linked corpus, and its in-memory twin."""

    def __init__(self, kind: str, corpus: Corpus) -> None:
        self.kind = kind
        self.corpus = corpus
        self.embeddings = CountingEmbeddings(corpus)
        self.store = STORES[kind](self.embeddings, corpus.linked, corpus.ids)
        self.memory = STORES["memory"](CountingEmbeddings(corpus), corpus.linked, corpus.ids)

    def reset(self) -> None:
        self.embeddings.calls = self.embeddings.texts_embedded = 0
        ROUND_TRIPS.clear()


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return make_corpus()


@pytest.fixture(scope="module", params=EMBEDDED)
def built(request: pytest.FixtureRequest, corpus: Corpus) -> Built:
    return Built(request.param, corpus)


@pytest.fixture(autouse=True)
def _fresh_counts(request: pytest.FixtureRequest) -> None:
    if "built" in request.fixturenames:
        request.getfixturevalue("built").reset()


def test_the_store_holds_the_memory_stores_chunks_and_vectors(built: Built) -> None:
    ids = built.corpus.ids
    in_store = access_for(built.store).read(ids, {})
    in_memory = access_for(built.memory).read(ids, {})
    assert sorted(in_store) == sorted(in_memory) == sorted(ids)
    for chunk_id in ids:
        (document, vector), (expected, expected_vector) = in_store[chunk_id], in_memory[chunk_id]
        assert comparable([document]) == comparable([expected])
        assert vector == pytest.approx(expected_vector, rel=1e-6, abs=1e-7)


def test_answers_equal_the_in_memory_path_for_k_3_to_8_and_both_modes(built: Built) -> None:
    neighbours = 0
    for settings in SETTINGS:
        on_store = SCARRetriever(vectorstore=built.store, **settings)
        in_memory = SCARRetriever(vectorstore=built.memory, **settings)
        for query in built.corpus.queries:
            got, want = on_store.invoke(query), in_memory.invoke(query)
            assert comparable(got) == comparable(want), (settings, query)
            assert scores(got) == pytest.approx(scores(want), rel=1e-5), (settings, query)
            neighbours += sum(d.metadata["scar_origin"] == "neighbor" for d in got)
    assert neighbours > 0, "the corpus should make SCAR add neighbours"
    assert built.embeddings.calls == 0


def test_no_chunk_is_embedded_at_query_time_cold_or_warm(built: Built) -> None:
    for settings in ({"k": 6}, {"k": 4, "mode": "paper", "window": 2}):
        retriever = SCARRetriever(vectorstore=built.store, **settings)  # cold: a new retriever
        for query in [*built.corpus.queries, *built.corpus.queries]:  # then warm
            docs = retriever.invoke(query)
            assert all(d.metadata["scar_embedded"] == 0 for d in docs)
    assert built.embeddings.calls == built.embeddings.texts_embedded == 0


async def test_async_equals_sync(built: Built) -> None:
    for settings in (
        {"k": 6},
        {"k": 3, "mode": "paper", "window": 2},
        {"k": 5, "merge_passages": True},
    ):
        retriever = SCARRetriever(vectorstore=built.store, **settings)
        for query in built.corpus.queries:
            assert await retriever.ainvoke(query) == retriever.invoke(query), (settings, query)
    assert built.embeddings.calls == 0


async def test_at_most_two_round_trips_per_query_beyond_the_search(built: Built) -> None:
    # FAISS reads are in-process lookups: no call leaves the process, nothing is counted.
    fewest, most = (0, 0) if built.kind == "faiss" else (1, 2)
    for k in (3, 8):
        retriever = SCARRetriever(vectorstore=built.store, k=k)
        for query in built.corpus.queries:
            ROUND_TRIPS.clear()
            retriever.invoke(query)
            assert fewest <= ROUND_TRIPS.get(built.kind, 0) <= most, (k, query)
            ROUND_TRIPS.clear()
            await retriever.ainvoke(query)
            assert fewest <= ROUND_TRIPS.get(built.kind, 0) <= most, (k, query)
