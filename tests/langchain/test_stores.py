"""SCARRetriever on real embedded stores (FAISS, Chroma, Qdrant): the in-memory answers, no
chunk embedded at query time, at most two store round trips beyond the search; and link_store.

No store is mocked: each is the real store, a subclass at most counting its public reads.
Postgres (PGVectorStore) runs the same checks in ``tests/postgres/test_pg_langchain.py``.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore

from lc_stores import (
    ROUND_TRIPS,
    STORES,
    Corpus,
    CountingEmbeddings,
    comparable,
    expected_links,
    links_in,
    make_corpus,
    scores,
    store_ids,
)
from scar_core.errors import DataFormatError, InvalidSettingsError
from scar_langchain import SCARRetriever, link_chunks, link_store
from scar_langchain.stores import reader_for

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
    in_store = reader_for(built.store).read(ids, {})
    in_memory = reader_for(built.memory).read(ids, {})
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


# link_store: linking chunks already in a store.


def unlinked_store(
    kind: str, corpus: Corpus, ids: list[Any] | None = None
) -> tuple[VectorStore, dict[str, str]]:
    """The split (not linked) in a store, in shuffled order under store ids; text -> store id."""
    order = list(range(len(corpus.split)))
    random.Random(5).shuffle(order)
    ids = ids or store_ids(len(order))
    documents = [corpus.split[n] for n in order]
    store = STORES[kind](CountingEmbeddings(corpus), documents, [ids[n] for n in order])
    return store, {d.page_content: str(ids[n]) for n, d in zip(order, documents, strict=True)}


@pytest.mark.parametrize("kind", ["memory", *EMBEDDED])
def test_link_store_writes_link_chunks_links_over_the_store_ids(kind: str, corpus: Corpus) -> None:
    store, id_of = unlinked_store(kind, corpus)
    report = link_store(store)
    assert (report.documents, report.linked, report.changed, report.skipped) == (6, 48, 48, {})
    want = expected_links(corpus, id_of)  # link_chunks on the same split, in store ids
    assert links_in(store) == want
    assert link_store(store).changed == 0
    assert links_in(store) == want
    reader = reader_for(store)
    for document, vector in reader.read(list(want)).values():  # texts and vectors kept
        assert vector == pytest.approx(corpus.vectors[document.page_content], rel=1e-6, abs=1e-7)
    docs = SCARRetriever(vectorstore=store, k=8).invoke("query 0")
    assert all(d.metadata["scar_expanded"] for d in docs)
    assert any(d.metadata["scar_origin"] == "neighbor" for d in docs)


def test_link_store_on_qdrant_integer_ids(corpus: Corpus) -> None:
    store, _ = unlinked_store("qdrant", corpus, ids=list(range(1, len(corpus.split) + 1)))
    assert link_store(store).linked == 48
    docs = SCARRetriever(vectorstore=store, k=8).invoke("query 0")
    assert any(d.metadata["scar_origin"] == "neighbor" for d in docs)
    assert all(d.id and d.id.isdigit() for d in docs)


def test_link_store_relinks_a_changed_document_and_reports_what_it_skipped(corpus: Corpus) -> None:
    store, id_of = unlinked_store("chroma", corpus)
    link_store(store)
    first, second, third = (id_of[f"document 0 chunk {p} text"] for p in range(3))
    store._collection.update(ids=[second], metadatas=[{"start_index": 0}])  # type: ignore[attr-defined]
    store._collection.update(ids=[third], metadatas=[{"source": None}])  # type: ignore[attr-defined]
    report = link_store(store)
    assert report.skipped[third] == "no metadata['source'] names its document"
    assert (
        "shares metadata['start_index']=0 with another chunk of 'doc-0.txt'"
        in report.skipped[first]
    )
    assert second in report.skipped
    links = links_in(store)
    assert links[first] == (None, None) == links[second]  # the order between them is unknown
    assert links[id_of["document 0 chunk 3 text"]] == (None, id_of["document 0 chunk 4 text"])
    assert report.changed == 7  # first, second, and chunks 3 to 7 (one position earlier)
    assert link_store(store).changed == 0


def test_link_store_refuses_chunks_without_the_order_key(corpus: Corpus) -> None:
    store = STORES["faiss"](
        CountingEmbeddings(corpus),
        [
            *link_chunks(corpus.split[:3]),
            Document("document 1 chunk 0 text", metadata={"source": "doc-1.txt"}),
        ],
        store_ids(4),
    )
    with pytest.raises(
        DataFormatError, match=r"no numeric metadata\['start_index'\].*add_start_index=True"
    ):
        link_store(store)
    with pytest.raises(DataFormatError, match=r"metadata\['position'\]"):
        link_store(store, order_key="position")


def test_link_store_refuses_a_store_it_cannot_list(corpus: Corpus) -> None:
    class RowlessStore(InMemoryVectorStore):
        """A real store SCAR cannot list (its subclasses may keep rows elsewhere)."""

    store = RowlessStore(CountingEmbeddings(corpus))
    with pytest.raises(InvalidSettingsError, match="cannot list the chunks of a RowlessStore"):
        link_store(store)
