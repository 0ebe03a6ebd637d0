"""SCAR after any first stage: hybrid search (BM25 plus the store) and a reranking compressor.

The first stages are LangChain's own: ``EnsembleRetriever``, ``BM25Retriever`` and
``ContextualCompressionRetriever``; the reranker is a real ``BaseDocumentCompressor`` that orders
documents by the words they share with the query, as a cross-encoder would by its scores.
"""

from __future__ import annotations

import asyncio
import re
import warnings
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun, Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.language_models import FakeListLLM
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import WordHashEmbeddings, documents

from lc_stores import STORES
from lc_trust import FILTERS, forbidden, leaks, tenant_chunks
from lc_trust import QUERY as TENANT_QUERY
from scar_core._errors import InvalidSettingsError
from scar_langchain import SCARRetriever, link_chunks, link_store

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # langchain-community is sunset
    from langchain_classic.retrievers import (
        ContextualCompressionRetriever,
        EnsembleRetriever,
        MultiQueryRetriever,
        TimeWeightedVectorStoreRetriever,
    )
    from langchain_community.retrievers import BM25Retriever


QUERY = "What does part 2 of the topic3 document cover? word3x2 word3x3"


class WordOverlapReranker(BaseDocumentCompressor):
    """Keeps the ``top_n`` documents sharing the most words with the query, most first."""

    top_n: int = 4

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks = None
    ) -> Sequence[Document]:
        words = set(re.findall(r"\w+", query.lower()))

        def shared(document: Document) -> int:
            return len(words & set(re.findall(r"\w+", document.page_content.lower())))

        return sorted(documents, key=shared, reverse=True)[: self.top_n]


@pytest.fixture
def linked() -> tuple[InMemoryVectorStore, list[Document]]:
    chunks = link_chunks(documents(), trust_order=True)
    store = InMemoryVectorStore(WordHashEmbeddings())
    store.add_documents(chunks, ids=[c.id for c in chunks])
    return store, chunks


def hybrid(store: InMemoryVectorStore, chunks: list[Document], k: int = 4) -> EnsembleRetriever:
    bm25 = BM25Retriever.from_documents(chunks, k=k)
    return EnsembleRetriever(retrievers=[bm25, store.as_retriever(search_kwargs={"k": k})])


def test_scar_takes_a_hybrid_first_stages_hits_in_its_order(
    linked: tuple[InMemoryVectorStore, list[Document]],
) -> None:
    store, chunks = linked
    first_stage = hybrid(store, chunks)
    hits = first_stage.invoke(QUERY)
    scar = SCARRetriever(vectorstore=store, retriever=first_stage, search_kwargs={}, k=6)
    for got in (scar.invoke(QUERY), asyncio.run(scar.ainvoke(QUERY))):
        assert len(got) == 6
        ids = [d.id for d in got]
        assert {hits[0].id, hits[1].id} <= set(ids)  # the two best of the first stage are kept
        ranks = {d.id: r for r, d in enumerate(hits)}
        seeds = [ranks[d.metadata["scar_seed_id"]] for d in got]
        assert all(seed < 6 for seed in seeds)  # every passage grows from a first-stage hit
        assert any(d.metadata["scar_origin"] == "neighbor" for d in got)


def test_scar_follows_a_rerankers_order(
    linked: tuple[InMemoryVectorStore, list[Document]],
) -> None:
    store, _ = linked
    reranked = ContextualCompressionRetriever(
        base_compressor=WordOverlapReranker(top_n=3),
        base_retriever=store.as_retriever(search_kwargs={"k": 10}),
    )
    hits = reranked.invoke(QUERY)
    scar = SCARRetriever(vectorstore=store, retriever=reranked, k=5)
    for got in (scar.invoke(QUERY), asyncio.run(scar.ainvoke(QUERY))):
        passage_of = {d.id: d.metadata["scar_passage"] for d in got}
        assert {hits[0].id, hits[1].id} <= set(passage_of)  # the reranker's best two are kept
        assert passage_of[hits[0].id] == 0  # passages follow the reranker's order
        assert len(got) == 5  # three hits, and neighbours for the other two slots


def test_a_hit_the_store_does_not_hold_is_kept_and_never_expanded(
    linked: tuple[InMemoryVectorStore, list[Document]],
) -> None:
    store, chunks = linked
    outside = Document(
        "An outside note about topic3 part 2: word3x2 word3x3.",
        id="outside",
        metadata={"scar_next_id": chunks[0].id},  # a link it must not follow
    )
    first_stage = BM25Retriever.from_documents([outside, *chunks], k=4)
    assert first_stage.invoke(QUERY)[0].id == "outside"
    scar = SCARRetriever(vectorstore=store, retriever=first_stage, search_kwargs={}, k=4)
    with pytest.warns(UserWarning, match=r"1 of 4 hits with no id that InMemoryVectorStore holds"):
        got = scar.invoke(QUERY)
    assert got[0].id == "outside"
    assert got[0].metadata["scar_origin"] == "hit"
    assert not [d for d in got if d.metadata["scar_seed_id"] == "outside" and d.id != "outside"]


def test_the_first_stages_filter_must_be_the_neighbours_filter() -> None:
    chunks, embeddings = tenant_chunks()
    store = STORES["faiss"](embeddings, chunks, [c.id for c in chunks])
    public_a = FILTERS["faiss"]()
    filtered = store.as_retriever(search_kwargs={"filter": public_a, "k": 3})
    with pytest.raises(InvalidSettingsError, match="first stage searches with filter="):
        SCARRetriever(vectorstore=store, retriever=EnsembleRetriever(retrievers=[filtered]))
    scar = SCARRetriever(
        vectorstore=store,
        retriever=EnsembleRetriever(retrievers=[filtered]),
        search_kwargs={"filter": public_a},
        k=5,
    )
    got = scar.invoke(TENANT_QUERY)
    assert len(got) == 5
    assert not leaks(got, forbidden(chunks))
    with pytest.raises(InvalidSettingsError, match="cannot reach the first stage"):
        scar.invoke(TENANT_QUERY, filter=public_a)


def test_standard_settings_still_apply_with_a_first_stage(
    linked: tuple[InMemoryVectorStore, list[Document]],
) -> None:
    store, chunks = linked
    settings: dict[str, Any] = {"mode": "paper", "k": 2, "gamma": 0.5}
    first_stage = hybrid(store, chunks)
    got = SCARRetriever(
        vectorstore=store, retriever=first_stage, search_kwargs={}, **settings
    ).invoke(QUERY)
    assert sum(d.metadata["scar_origin"] == "hit" for d in got) == 2


class Wrapper(BaseRetriever):
    """A user's own first stage around another retriever: SCAR cannot see what it does."""

    inner: BaseRetriever

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return self.inner.invoke(query)


def tenant_store() -> tuple[InMemoryVectorStore, list[Document]]:
    chunks, embeddings = tenant_chunks()
    store = STORES["memory"](embeddings, chunks, [c.id for c in chunks])
    return store, chunks


def opaque_first_stages(store: InMemoryVectorStore, search: dict[str, Any]) -> list[Any]:
    """Filtered first stages SCAR cannot look into, named as the refusal must name them."""
    time_weighted = TimeWeightedVectorStoreRetriever(vectorstore=store, search_kwargs=search)
    custom = Wrapper(inner=store.as_retriever(search_kwargs=search))
    other_store = InMemoryVectorStore(store.embeddings)
    return [
        ("TimeWeightedVectorStoreRetriever", time_weighted),
        ("Wrapper", custom),
        ("VectorStoreRetriever of another store", other_store.as_retriever()),
        (
            "BM25Retriever",
            EnsembleRetriever(retrievers=[BM25Retriever.from_documents([Document("x")])]),
        ),
    ]


def test_a_first_stage_scar_cannot_see_into_needs_the_neighbours_filter_stated() -> None:
    store, chunks = tenant_store()
    public_a = FILTERS["memory"]()
    for name, first_stage in opaque_first_stages(store, {"filter": public_a, "k": 3}):
        with pytest.raises(InvalidSettingsError, match=rf"{name}.*search_kwargs=\{{'filter'"):
            SCARRetriever(vectorstore=store, retriever=first_stage)
    custom = Wrapper(inner=store.as_retriever(search_kwargs={"filter": public_a, "k": 3}))
    stated = SCARRetriever(
        vectorstore=store, retriever=custom, search_kwargs={"filter": public_a}, k=5
    )
    for got in (stated.invoke(TENANT_QUERY), asyncio.run(stated.ainvoke(TENANT_QUERY))):
        assert len(got) == 5
        assert not leaks(got, forbidden(chunks))
    # search_kwargs={} states that the first stage searches without a filter.
    unfiltered = Wrapper(inner=store.as_retriever(search_kwargs={"k": 3}))
    assert SCARRetriever(vectorstore=store, retriever=unfiltered, search_kwargs={}).invoke(
        TENANT_QUERY
    )


def test_scar_sees_through_a_multi_query_retriever() -> None:
    store, chunks = tenant_store()
    public_a = FILTERS["memory"]()
    filtered = store.as_retriever(search_kwargs={"filter": public_a, "k": 3})
    multi = MultiQueryRetriever.from_llm(filtered, FakeListLLM(responses=["a\nb"] * 4))
    with pytest.raises(InvalidSettingsError, match="first stage searches with filter="):
        SCARRetriever(vectorstore=store, retriever=multi)
    scar = SCARRetriever(vectorstore=store, retriever=multi, search_kwargs={"filter": public_a})
    got = scar.invoke(TENANT_QUERY)
    assert got
    assert not leaks(got, forbidden(chunks))


def test_a_hybrid_first_stage_whose_bm25_lacks_the_stores_ids_is_warned_by_name() -> None:
    split = [  # as a splitter with add_start_index=True returns them
        Document(d.page_content, metadata=d.metadata | {"start_index": 100 * (n % 5)})
        for n, d in enumerate(documents())
    ]
    store = InMemoryVectorStore(WordHashEmbeddings())
    store.add_documents(split, ids=[f"row-{n}" for n in range(len(split))])
    link_store(store)
    vector_leaf = store.as_retriever(search_kwargs={"k": 4})
    bare = EnsembleRetriever(retrievers=[BM25Retriever.from_documents(split, k=4), vector_leaf])
    scar = SCARRetriever(vectorstore=store, retriever=bare, search_kwargs={}, k=6)
    with pytest.warns(UserWarning, match=r"EnsembleRetriever.*InMemoryVectorStore.*cannot expand"):
        scar.invoke(QUERY)
    own = store.get_by_ids([f"row-{n}" for n in range(len(split))])  # the store's documents
    good = EnsembleRetriever(retrievers=[BM25Retriever.from_documents(own, k=4), vector_leaf])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = SCARRetriever(vectorstore=store, retriever=good, search_kwargs={}, k=6).invoke(QUERY)
    assert any(d.metadata["scar_origin"] == "neighbor" for d in got)
