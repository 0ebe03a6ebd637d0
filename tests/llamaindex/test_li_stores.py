"""SCARNodePostprocessor on real embedded LlamaIndex stores: SimpleVectorStore, FAISS, Chroma and
Qdrant (a sync client, and an async one).

Each store holds the same nodes, parsed once by ``SentenceSplitter`` (which sets the PREVIOUS/NEXT
relationships SCAR follows), with the same vectors. For the same hits, the postprocessor must
answer as it does on the in-memory index (SimpleDocumentStore + SimpleVectorStore), embed no node
at query time, answer alike sync and async, and read the store at most twice per query beyond the
search. A store whose vectors SCAR cannot read (FaissMapVectorStore keeps its id map private) is
warned about once; its nodes' texts are then embedded once, through the disk cache.

No store is mocked: each is the real store, a subclass of it or of its client at most counting
its public reads. PGVectorStore runs the same checks in ``tests/postgres/test_pg_llamaindex.py``.
"""

from __future__ import annotations

import asyncio
import itertools
import warnings
from pathlib import Path

import pytest
from llama_index.core.schema import NodeRelationship, QueryBundle

from li_stores import (
    QUERIES,
    ROUND_TRIPS,
    SETTINGS,
    STORES,
    Built,
    ahits,
    answer,
    check_answers,
    check_async_equals_sync,
    check_cold_and_warm,
    check_round_trips,
    check_vectors,
    faiss_built,
    hits,
    memory,
    parsed_nodes,
    qdrant_built,
    scar,
)
from scar_core._errors import NeighborFetchError
from scar_llamaindex import SCARNodePostprocessor
from scar_llamaindex._reads import links_of

QUERY_0 = QUERIES[0]
QDRANT_ASYNC = "(?s)QdrantVectorStore.aget_nodes failed.*Async client is not initialized"


@pytest.fixture(scope="module")
def reference() -> Built:
    return memory()


@pytest.fixture(scope="module", params=list(STORES))
def built(request: pytest.FixtureRequest) -> Built:
    store = STORES[request.param]()
    if store.kind == "qdrant":  # its one warning is checked in its own test, on a store of its own
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", QDRANT_ASYNC, UserWarning)
            asyncio.run(
                scar(store).apostprocess_nodes(hits(store, QUERY_0, 3), QueryBundle(QUERY_0))
            )
    return store


@pytest.fixture(scope="module")
def async_only() -> Built:
    return qdrant_built(use_async=True)


def texts_embedded(built: Built) -> int:
    return built.embed_model.texts_embedded


def test_sentence_splitter_links_each_node_to_the_one_before_and_after() -> None:
    by_document = itertools.groupby(parsed_nodes(), key=lambda n: n.ref_doc_id)
    for _, group in by_document:
        nodes = list(group)
        assert len(nodes) == 6
        links = [links_of(n) for n in nodes]
        ids = [n.node_id for n in nodes]
        assert links == list(zip([None, *ids[:-1]], [*ids[1:], None], strict=True))
        assert NodeRelationship.SOURCE in nodes[0].relationships


def test_the_store_gives_back_the_nodes_links_and_vectors_of_memory(
    built: Built, reference: Built
) -> None:
    check_vectors(built, reference)


def test_answers_equal_the_in_memory_path_and_embed_nothing(built: Built, reference: Built) -> None:
    check_answers(built, reference)


def test_no_node_is_embedded_at_query_time_cold_or_warm(built: Built, tmp_path: Path) -> None:
    check_cold_and_warm(built, tmp_path)


async def test_async_equals_sync(built: Built) -> None:
    await check_async_equals_sync(built)


async def test_at_most_two_round_trips_per_query_beyond_the_search(built: Built) -> None:
    await check_round_trips(built)


def test_a_sync_only_qdrant_client_serves_the_async_path_with_one_warning(
    reference: Built,
) -> None:
    store = qdrant_built()
    found = hits(store, QUERY_0, 5)
    expected = scar(store).postprocess_nodes(found, QueryBundle(QUERY_0))
    ROUND_TRIPS.clear()
    with pytest.warns(UserWarning, match=QDRANT_ASYNC) as caught:
        output = asyncio.run(scar(store).apostprocess_nodes(found, QueryBundle(QUERY_0)))
    assert len(caught) == 1
    assert answer(output) == answer(expected)
    assert 1 <= ROUND_TRIPS["qdrant.scroll"] <= 2  # get_nodes in a worker thread
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = asyncio.run(scar(store).apostprocess_nodes(found, QueryBundle(QUERY_0)))
    assert answer(again) == answer(expected)


async def test_an_async_only_qdrant_client_answers_as_memory_with_its_async_reads(
    async_only: Built, reference: Built
) -> None:
    texts = texts_embedded(async_only)
    for (k, settings), query in itertools.product(SETTINGS, QUERIES):
        found = await ahits(async_only, query, k)
        ROUND_TRIPS.clear()
        output = await scar(async_only, **settings).apostprocess_nodes(found, QueryBundle(query))
        assert 1 <= ROUND_TRIPS["qdrant-async.ascroll"] <= 2
        want = scar(reference, **settings).postprocess_nodes(found, QueryBundle(query))
        assert answer(output) == answer(want), (settings, query)
    assert texts_embedded(async_only) == texts
    with pytest.raises(NeighborFetchError, match="QdrantVectorStore failed"):  # no sync client
        scar(async_only).postprocess_nodes(found, QueryBundle(query))


def test_an_async_only_qdrant_store_holds_the_memory_vectors(
    async_only: Built, reference: Built
) -> None:
    check_vectors(async_only, reference)


def test_a_store_without_readable_vectors_warns_once_then_embeds_nothing(
    reference: Built, tmp_path: Path
) -> None:
    store = faiss_built(mapped=True)
    texts = texts_embedded(store)
    postprocessor = scar(store)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for query in QUERIES:
            found = hits(store, query, 4)
            got = postprocessor.postprocess_nodes(found, QueryBundle(query))
            want = scar(reference).postprocess_nodes(found, QueryBundle(query))
            assert [a[:4] for a in answer(got)] == [a[:4] for a in answer(want)]  # not embedded
    assert [(w.category, str(w.message)[:47]) for w in caught] == [
        (UserWarning, "FaissMapVectorStore gave no stored embeddings f")
    ]
    assert "use a store SCAR reads vectors from" in str(caught[0].message)
    assert "from_index" not in str(caught[0].message)  # it was built with from_index
    embedded = texts_embedded(store) - texts
    assert embedded > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for query in QUERIES:  # the same postprocessor keeps what it embedded, in memory
            found = hits(store, query, 4)
            output = postprocessor.postprocess_nodes(found, QueryBundle(query))
            assert {n.node.metadata["scar_embedded"] for n in output} == {0}
    assert texts_embedded(store) - texts == embedded


def test_faiss_without_the_index_map_says_to_build_from_the_index(tmp_path: Path) -> None:
    store = faiss_built()
    index = store.index
    postprocessor = SCARNodePostprocessor(
        docstore=index.docstore,
        filters=None,
        vector_store=index.vector_store,
        embed_model=store.embed_model,
    )
    with pytest.warns(
        UserWarning, match=r"FaissVectorStore gave no.*from_index\(index, filters=...\)"
    ):
        output = postprocessor.postprocess_nodes(hits(store, QUERY_0, 4), QueryBundle(QUERY_0))
    assert output[0].node.metadata["scar_embedded"] > 0
