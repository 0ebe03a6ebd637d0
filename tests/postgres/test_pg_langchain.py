"""SCARRetriever on a real pgvector database (langchain-postgres PGVectorStore).

The same corpus, with the same float32 vectors, lives in a PGVectorStore and in an
InMemoryVectorStore: the retriever must answer alike from both, embed no chunk at query time
and make at most two ``get`` calls per query beyond the search. SCAR uses the store's own
connections (its ``PGEngine``); it opens none.
"""

from __future__ import annotations

from typing import Any

import pytest

from lc_stores import (
    ROUND_TRIPS,
    STORES,
    Corpus,
    CountingEmbeddings,
    comparable,
    make_corpus,
    pgvector_store,
    scores,
)
from scar_langchain import SCARRetriever
from scar_langchain._stores import access_for

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return make_corpus()


def pg_store(
    engine: Any, table: str, corpus: Corpus, documents: list[Any], ids: list[Any], **options: Any
) -> Any:
    embeddings = CountingEmbeddings(corpus)
    store = pgvector_store(engine, table, embeddings, documents, ids, **options)
    embeddings.calls = embeddings.texts_embedded = 0
    return store


@pytest.fixture(scope="module")
def stores(engine: Any, corpus: Corpus) -> tuple[Any, Any]:
    """The linked corpus in PGVectorStore and in memory."""
    on_pg = pg_store(engine, "scar_lc_corpus", corpus, corpus.linked, corpus.ids)
    return on_pg, STORES["memory"](CountingEmbeddings(corpus), corpus.linked, corpus.ids)


def test_pg_holds_the_memory_stores_chunks_and_exact_vectors(
    stores: tuple[Any, Any], corpus: Corpus
) -> None:
    on_pg, in_memory = (access_for(s).read(corpus.ids, {}) for s in stores)
    assert sorted(on_pg) == sorted(in_memory) == sorted(corpus.ids)
    for chunk_id, (document, vector) in on_pg.items():
        assert comparable([document]) == comparable([in_memory[chunk_id][0]])
        assert vector.tolist() == in_memory[chunk_id][1]


async def test_pg_answers_equal_memory_with_no_chunk_embedded_and_two_reads(
    stores: tuple[Any, Any], corpus: Corpus
) -> None:
    on_pg, in_memory = stores
    neighbours = 0
    settings_list = [{"k": k} for k in range(3, 9)] + [
        {"k": k, "mode": "paper"} for k in range(3, 9)
    ]
    for settings in settings_list:
        pg_retriever = SCARRetriever(vectorstore=on_pg, **settings)
        memory_retriever = SCARRetriever(vectorstore=in_memory, **settings)
        for query in corpus.queries:
            ROUND_TRIPS.clear()
            got = pg_retriever.invoke(query)
            assert 1 <= ROUND_TRIPS["pgvector"] <= 2, (settings, query)
            ROUND_TRIPS.clear()
            assert await pg_retriever.ainvoke(query) == got, (settings, query)
            assert 1 <= ROUND_TRIPS["pgvector"] <= 2, (settings, query)
            want = memory_retriever.invoke(query)
            assert comparable(got) == comparable(want), (settings, query)
            assert scores(got) == pytest.approx(scores(want), rel=1e-12), (settings, query)
            neighbours += sum(d.metadata["scar_origin"] == "neighbor" for d in got)
    assert neighbours > 0
    assert on_pg.embeddings.calls == on_pg.embeddings.texts_embedded == 0  # cold and warm
