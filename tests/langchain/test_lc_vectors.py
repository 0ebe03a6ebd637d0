"""Where vectors come from: the store's own, an embeddings cache, or (last) re-embedding."""

import warnings
from types import SimpleNamespace

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.stores import InMemoryByteStore, InMemoryStore
from langchain_core.vectorstores import InMemoryVectorStore
from lc_fakes import HashingEmbeddings, chain_documents

from scar_langchain import (
    EmbeddingVectors,
    FaissStoreVectors,
    FallbackVectors,
    InMemoryStoreVectors,
    SCARRetriever,
    default_vector_source,
    link_chunks,
)

QUERIES = ["topic1 word2", "topic3 word0 word1", "topic0", "word4 topic2"]


def _chunks() -> list[Document]:
    docs = []
    for d in range(4):
        docs += chain_documents(
            f"doc{d}", [f"document {d} topic{d} part {i} word{i} word{i + 1}" for i in range(5)]
        )
    return link_chunks(docs)


def _summary(docs: list[Document]) -> list[tuple[str, list[str]]]:
    return [(d.page_content, d.metadata["scar_chunk_ids"]) for d in docs]


def test_in_memory_store_vectors_mean_no_document_embedding_at_query_time() -> None:
    embeddings = HashingEmbeddings()
    chunks = _chunks()
    store = InMemoryVectorStore(embeddings)
    store.add_documents(chunks, ids=[c.id for c in chunks])
    assert embeddings.documents_embedded == len(chunks)
    embeddings.document_calls.clear()

    retriever = SCARRetriever(vectorstore=store, budget=None, k=3, gamma=0.5, window=2)
    outputs = [retriever.invoke(query) for query in QUERIES * 2]
    assert embeddings.document_calls == []
    assert embeddings.query_calls == QUERIES * 2
    assert any(len(d.metadata["scar_chunk_ids"]) > 1 for out in outputs for d in out)


def test_in_memory_store_vectors_are_the_stored_ones() -> None:
    embeddings = HashingEmbeddings()
    chunks = _chunks()
    store = InMemoryVectorStore(embeddings)
    store.add_documents(chunks, ids=[c.id for c in chunks])
    found = InMemoryStoreVectors(store).vectors_for({c.id: c for c in chunks[:3]})
    for chunk in chunks[:3]:
        assert np.array_equal(found[chunk.id], embeddings.vector(chunk.page_content))
    assert InMemoryStoreVectors(store).vectors_for({"absent": Document("x")}) == {}


def test_cache_backed_embeddings_embed_each_chunk_once() -> None:
    from langchain_classic.embeddings import CacheBackedEmbeddings

    chunks = _chunks()
    search_embeddings = HashingEmbeddings()
    search_store = InMemoryVectorStore(search_embeddings)
    search_store.add_documents(chunks, ids=[c.id for c in chunks])
    docstore = InMemoryStore()
    docstore.mset([(c.id, c) for c in chunks])

    model = HashingEmbeddings()
    cached = CacheBackedEmbeddings.from_bytes_store(
        model, InMemoryByteStore(), namespace="hashing-64", key_encoder="sha256"
    )
    retriever = SCARRetriever(
        base_retriever=search_store.as_retriever(),
        docstore=docstore,
        embeddings=cached,
        budget=None,
        k=3,
        gamma=0.5,
        window=2,
    )
    assert retriever._get_ls_params()["ls_embedding_provider"] == "HashingEmbeddings"
    first = [retriever.invoke(query) for query in QUERIES]
    embedded_once = [text for batch in model.document_calls for text in batch]
    assert embedded_once  # the first round had to embed seeds and neighbours
    assert len(embedded_once) == len(set(embedded_once))
    second = [retriever.invoke(query) for query in QUERIES]
    assert [text for batch in model.document_calls for text in batch] == embedded_once
    assert [_summary(out) for out in second] == [_summary(out) for out in first]

    # Same decisions as reading the vectors from the store itself.
    direct = SCARRetriever(vectorstore=search_store, budget=None, k=3, gamma=0.5, window=2)
    assert [_summary(direct.invoke(query)) for query in QUERIES] == [_summary(out) for out in first]


def test_plain_embeddings_are_the_last_resort_and_re_embed() -> None:
    chunks = _chunks()
    docstore = InMemoryStore()
    docstore.mset([(c.id, c) for c in chunks])
    search_store = InMemoryVectorStore(HashingEmbeddings())
    search_store.add_documents(chunks, ids=[c.id for c in chunks])
    model = HashingEmbeddings()
    retriever = SCARRetriever(
        base_retriever=search_store.as_retriever(), docstore=docstore, embeddings=model, k=2
    )
    retriever.invoke(QUERIES[0])
    calls = model.documents_embedded
    assert calls > 0
    retriever.invoke(QUERIES[0])
    assert model.documents_embedded == 2 * calls
    assert isinstance(retriever._vectors, EmbeddingVectors)


def test_fallback_asks_the_second_source_only_for_what_the_first_lacks() -> None:
    embeddings = HashingEmbeddings()
    chunks = _chunks()
    store = InMemoryVectorStore(embeddings)
    store.add_documents(chunks[:5], ids=[c.id for c in chunks[:5]])
    embeddings.document_calls.clear()
    source = default_vector_source(store, embeddings)
    assert isinstance(source, FallbackVectors)
    found = source.vectors_for({c.id: c for c in chunks[3:7]})
    assert sorted(found) == sorted(c.id for c in chunks[3:7])
    assert embeddings.document_calls == [[c.page_content for c in chunks[5:7]]]


@pytest.fixture
def faiss_store_class() -> type:
    pytest.importorskip("faiss")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # langchain-community is sunset
        from langchain_community.vectorstores import FAISS
    return FAISS


def test_faiss_store_vectors_are_read_back_from_the_index(faiss_store_class: type) -> None:
    embeddings = HashingEmbeddings()
    chunks = _chunks()
    store = faiss_store_class.from_documents(chunks, embeddings, ids=[c.id for c in chunks])
    assert isinstance(default_vector_source(store, embeddings), FallbackVectors)
    found = FaissStoreVectors(store).vectors_for({c.id: c for c in chunks})
    for chunk in chunks:
        assert np.allclose(found[chunk.id], embeddings.vector(chunk.page_content), atol=1e-6)

    embeddings.document_calls.clear()
    retriever = SCARRetriever(vectorstore=store, budget=None, k=3, gamma=0.5, window=2)
    faiss_out = [_summary(retriever.invoke(query)) for query in QUERIES]
    assert embeddings.document_calls == []

    memory = InMemoryVectorStore(HashingEmbeddings())
    memory.add_documents(chunks, ids=[c.id for c in chunks])
    memory_retriever = SCARRetriever(vectorstore=memory, budget=None, k=3, gamma=0.5, window=2)
    assert faiss_out == [_summary(memory_retriever.invoke(query)) for query in QUERIES]


def test_faiss_reverse_map_follows_deletions(faiss_store_class: type) -> None:
    embeddings = HashingEmbeddings()
    chunks = _chunks()
    store = faiss_store_class.from_documents(chunks, embeddings, ids=[c.id for c in chunks])
    source = FaissStoreVectors(store)
    assert len(source.vectors_for({c.id: c for c in chunks})) == len(chunks)
    store.delete([chunks[0].id, chunks[1].id])
    found = source.vectors_for({c.id: c for c in chunks})
    assert sorted(found) == sorted(c.id for c in chunks[2:])
    for chunk in chunks[2:]:
        assert np.allclose(found[chunk.id], embeddings.vector(chunk.page_content), atol=1e-6)


def test_faiss_index_that_cannot_reconstruct_returns_nothing() -> None:
    faiss = pytest.importorskip("faiss")
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(40, 8)).astype("float32")
    quantizer = faiss.IndexFlatL2(8)
    index = faiss.IndexIVFFlat(quantizer, 8, 2)
    index.train(vectors)
    index.add(vectors)
    store = SimpleNamespace(index=index, index_to_docstore_id={i: f"id{i}" for i in range(40)})
    source = FaissStoreVectors(store)
    assert source.vectors_for({"id3": Document("x")}) == {}
    index.make_direct_map()
    assert np.allclose(source.vectors_for({"id3": Document("x")})["id3"], vectors[3])


def test_faiss_source_rejects_a_store_without_an_index() -> None:
    with pytest.raises(TypeError, match="not a FAISS store"):
        FaissStoreVectors(object())
