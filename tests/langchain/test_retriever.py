"""SCARRetriever's contract: k means k, settings apply or are refused, nothing is lost."""

from __future__ import annotations

import asyncio
import itertools
import re
import warnings
from typing import Any

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import WordHashEmbeddings, documents, linked_store

from scar_core import Chunk, InvalidSettingsError, MissingQueryError, PaperSettings, paper_expand
from scar_langchain import SCARRetriever, link_chunks

QUERY = "What does part 2 of the topic3 document cover? word3x2 word3x3"


@pytest.mark.parametrize("k", range(1, 11))
def test_k_chunks_come_back_for_every_k(store: InMemoryVectorStore, k: int) -> None:
    assert len(SCARRetriever(vectorstore=store, k=k).invoke(QUERY)) == k
    assert len(SCARRetriever(vectorstore=store).invoke(QUERY, k=k)) == k


def test_the_default_k_is_the_plain_retrievers(store: InMemoryVectorStore) -> None:
    plain = store.as_retriever().invoke(QUERY)
    assert len(SCARRetriever(vectorstore=store).invoke(QUERY)) == len(plain) == 4


def test_fewer_only_when_the_store_holds_fewer() -> None:
    chunks = link_chunks(documents(count=1, length=3), trust_order=True)
    store = InMemoryVectorStore(WordHashEmbeddings())
    store.add_documents(chunks, ids=[c.id for c in chunks])
    assert len(SCARRetriever(vectorstore=store, k=10).invoke(QUERY)) == 3


def test_budget_mode_keeps_the_best_hits_and_adds_continuations(store: InMemoryVectorStore) -> None:
    plain = store.as_retriever(search_kwargs={"k": 6}).invoke(QUERY)
    docs = SCARRetriever(vectorstore=store, k=6, keep=2, continuity_bonus=0.5).invoke(QUERY)
    assert {d.id for d in plain[:2]} <= {d.id for d in docs}
    for doc in docs:
        assert doc.metadata["scar_origin"] in ("hit", "neighbor")
        assert doc.metadata["scar_expanded"] is True
        if doc.metadata["scar_origin"] == "neighbor":
            decision = doc.metadata["scar_decision"]
            assert decision["score"] == pytest.approx(
                decision["relevance"] - 0.1 * decision["boundary_penalty"]
            )
    passages = [d.metadata["scar_passage"] for d in docs]
    assert passages == sorted(passages)
    for before, after in itertools.pairwise(docs):
        if before.metadata["scar_passage"] == after.metadata["scar_passage"]:
            assert before.metadata["scar_next_id"] == after.id


@pytest.mark.parametrize("k", [1, 3, 5, 8])
def test_merged_passages_hold_exactly_k_chunks(store: InMemoryVectorStore, k: int) -> None:
    chunks = SCARRetriever(vectorstore=store, k=k, continuity_bonus=0.5).invoke(QUERY)
    merged = SCARRetriever(vectorstore=store, k=k, continuity_bonus=0.5, merge_passages=True)
    passages = merged.invoke(QUERY)
    assert len(passages) <= k
    assert sum(len(p.metadata["scar_chunk_ids"]) for p in passages) == k
    assert [c for p in passages for c in p.metadata["scar_chunk_ids"]] == [d.id for d in chunks]
    for passage in passages:
        assert passage.id is None
        assert "scar_chunk_id" not in passage.metadata
        members = [d for d in chunks if d.id in passage.metadata["scar_chunk_ids"]]
        assert passage.page_content == "\n".join(d.page_content for d in members)


class TableEmbeddings(Embeddings):
    """Vectors given by hand, looked up by text."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.table[t] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.table[text]


def test_paper_mode_equals_the_core_rule_on_the_top_k_seeds() -> None:
    rng = np.random.default_rng(7)
    texts = [f"chunk {i}" for i in range(12)]
    table = {t: rng.normal(size=5).tolist() for t in [*texts, "query"]}
    docs = link_chunks(
        [Document(t, metadata={"source": f"d{i // 6}"}) for i, t in enumerate(texts)],
        trust_order=True,
    )
    store = InMemoryVectorStore(TableEmbeddings(table))
    store.add_documents(docs, ids=[d.id for d in docs])
    chunks = {
        d.id: Chunk(
            d.id,
            table[d.page_content],
            d.metadata.get("scar_prev_id"),
            d.metadata.get("scar_next_id"),
        )
        for d in docs
    }
    for gamma, window in ((0.8, 1), (0.4, 2), (0.2, 3)):
        got = SCARRetriever(
            vectorstore=store, k=3, mode="paper", gamma=gamma, window=window
        ).invoke("query")
        seeds = [d.id for d in store.similarity_search_by_vector(table["query"], k=3)]
        want = paper_expand(
            table["query"], seeds, chunks, PaperSettings(k=3, gamma=gamma, window=window)
        )
        assert [d.id for d in got] == want.chunk_ids


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"gamma": 0.6}, "gamma=0.6 does not apply to mode='budget'"),
        ({"window": 2}, "window=2 does not apply to mode='budget'"),
        ({"direction": "next"}, "direction='next' does not apply"),
        ({"mode": "paper", "keep": 2}, "keep=2 does not apply to mode='paper'"),
        ({"mode": "paper", "continuity_bonus": 0.3}, "continuity_bonus=0.3 does not apply"),
        ({"search_kwargs": {"k": 9}}, "search_kwargs must not hold 'k'"),
        ({"k": 3, "keep": 4}, "keep=4 is larger than k=3"),
    ],
)
def test_a_setting_that_does_not_apply_is_refused(
    store: InMemoryVectorStore, settings: dict[str, Any], named: str
) -> None:
    # pydantic reports it as a ValidationError (a ValueError) that carries SCAR's message.
    with pytest.raises(ValueError, match=named):
        SCARRetriever(vectorstore=store, **settings)


@pytest.mark.parametrize(
    "settings", [{"k": 0}, {"gamma": 1.5, "mode": "paper"}, {"continuity_bonus": -1}]
)
def test_out_of_range_values_are_refused(
    store: InMemoryVectorStore, settings: dict[str, Any]
) -> None:
    with pytest.raises(ValueError, match=next(iter(settings))):
        SCARRetriever(vectorstore=store, **settings)


def test_an_unknown_call_setting_is_refused(store: InMemoryVectorStore) -> None:
    with pytest.raises(InvalidSettingsError, match=r"only k=\.\.\. may change per call"):
        SCARRetriever(vectorstore=store).invoke(QUERY, gamma=0.5)


def test_unlinked_chunks_warn_once_and_say_they_were_not_expanded() -> None:
    store = InMemoryVectorStore(WordHashEmbeddings())
    plain_docs = documents()
    store.add_documents(plain_docs, ids=[f"c{i}" for i in range(len(plain_docs))])
    retriever = SCARRetriever(vectorstore=store, k=5)
    with pytest.warns(UserWarning, match=r"link_chunks"):
        first = retriever.invoke(QUERY)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        retriever.invoke(QUERY)
    assert [d.id for d in first] == [
        d.id for d in store.as_retriever(search_kwargs={"k": 5}).invoke(QUERY)
    ]
    assert all(d.metadata["scar_expanded"] is False for d in first)


async def test_async_equals_sync(store: InMemoryVectorStore) -> None:
    for settings in ({"k": 6}, {"k": 3, "mode": "paper", "gamma": 0.5, "window": 2}):
        retriever = SCARRetriever(vectorstore=store, **settings)
        assert await retriever.ainvoke(QUERY) == retriever.invoke(QUERY)


class CountingStore(InMemoryVectorStore):
    """A real in-memory store read only through its public ``get_by_ids``, which it counts."""

    reads = 0

    def get_by_ids(self, ids: Any) -> list[Document]:
        type(self).reads += 1
        return super().get_by_ids(ids)


def test_a_store_that_returns_no_vectors_is_embedded_once_with_a_warning() -> None:
    embeddings = WordHashEmbeddings()
    store = CountingStore(embeddings)
    chunks = link_chunks(documents(), trust_order=True)
    store.add_documents(chunks, ids=[c.id for c in chunks])
    retriever = SCARRetriever(vectorstore=store, k=6)
    reference = SCARRetriever(vectorstore=linked_store(), k=6).invoke(QUERY)
    before = embeddings.texts_embedded
    CountingStore.reads = 0
    with pytest.warns(UserWarning, match="CountingStore gave SCAR no stored vectors"):
        first = retriever.invoke(QUERY)
    assert CountingStore.reads <= 2
    assert first[0].metadata["scar_embedded"] > 0
    assert embeddings.texts_embedded - before == first[0].metadata["scar_embedded"]
    second = retriever.invoke(QUERY)
    assert second[0].metadata["scar_embedded"] == 0  # every text was kept in memory
    assert embeddings.texts_embedded - before == first[0].metadata["scar_embedded"]
    assert [d.id for d in first] == [d.id for d in second] == [d.id for d in reference]


def test_in_memory_vectors_are_read_not_embedded(store: InMemoryVectorStore) -> None:
    embeddings = store.embedding
    assert isinstance(embeddings, WordHashEmbeddings)
    before = embeddings.texts_embedded
    docs = SCARRetriever(vectorstore=store, k=8).invoke(QUERY)
    assert embeddings.texts_embedded == before
    assert all(d.metadata["scar_embedded"] == 0 for d in docs)


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"kk": 3}, r"kk=3.*did you mean k\?"),
        ({"filtre": lambda d: True}, r"filtre=.*did you mean filter\?"),
        ({"tenant": "a"}, r"tenant='a'.*it takes k, filter"),
    ],
)
def test_a_misspelled_or_unknown_call_argument_is_refused_by_name(
    store: InMemoryVectorStore, arguments: dict[str, Any], named: str
) -> None:
    for opted_out in (False, True):
        retriever = SCARRetriever(vectorstore=store, allow_unfiltered_neighbors=opted_out)
        with pytest.raises(InvalidSettingsError, match=named):
            retriever.invoke(QUERY, **arguments)
        with pytest.raises(InvalidSettingsError, match=named):
            asyncio.run(retriever.ainvoke(QUERY, **arguments))


def test_a_misspelled_search_argument_is_refused_when_the_retriever_is_made(
    store: InMemoryVectorStore,
) -> None:
    with pytest.raises(InvalidSettingsError, match=r"filtre=.*did you mean filter\?"):
        SCARRetriever(
            vectorstore=store,
            search_kwargs={"filtre": lambda d: True},
            allow_unfiltered_neighbors=True,
        )


@pytest.mark.parametrize("query", [123, ["a", "b"], "", "   ", None])
def test_a_query_that_is_not_a_question_is_refused_by_name(
    store: InMemoryVectorStore, query: Any
) -> None:
    retriever = SCARRetriever(vectorstore=store)
    named = rf"got {re.escape(repr(query))}.*non-empty string"
    with pytest.raises(MissingQueryError, match=named):
        retriever.invoke(query)
    with pytest.raises(MissingQueryError, match=named):
        asyncio.run(retriever.ainvoke(query))


def test_cache_backed_embeddings_keep_embedded_texts_on_disk_when_the_user_asks(
    tmp_path: Any,
) -> None:
    from langchain_classic.embeddings import CacheBackedEmbeddings
    from langchain_classic.storage import LocalFileStore

    inner = WordHashEmbeddings()
    cached = CacheBackedEmbeddings.from_bytes_store(
        inner, LocalFileStore(tmp_path), namespace="word-hash", key_encoder="sha256"
    )
    store = CountingStore(cached)
    chunks = link_chunks(documents(), trust_order=True)
    store.add_documents(chunks, ids=[c.id for c in chunks])
    with pytest.warns(UserWarning, match="CacheBackedEmbeddings to keep the vectors on disk"):
        first = SCARRetriever(vectorstore=store, k=6).invoke(QUERY)
    before = inner.texts_embedded
    second = SCARRetriever(vectorstore=store, k=6).invoke(QUERY)  # a new retriever: no memory
    assert inner.texts_embedded == before  # read back from the user's cache on disk
    assert [d.id for d in first] == [d.id for d in second]
