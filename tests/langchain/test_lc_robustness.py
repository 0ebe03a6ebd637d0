"""Unlinked chunks, missing neighbours, bad links, failing stores and bad settings."""

import logging
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.stores import InMemoryStore
from langchain_core.vectorstores import InMemoryVectorStore
from lc_fakes import HashingEmbeddings, chain_documents

from scar_core.errors import (
    EmbeddingError,
    InvalidSettingsError,
    NeighborFetchError,
)
from scar_langchain import SCARRetriever, link_chunks


class ConstantEmbeddings(HashingEmbeddings):
    """Every text has the same vector, so every neighbour with a vector would be accepted."""

    def vector(self, text: str) -> list[float]:
        return [1.0, 0.0]


def _store(documents: list[Document]) -> InMemoryVectorStore:
    store = InMemoryVectorStore(ConstantEmbeddings())
    store.add_documents(documents, ids=[d.id for d in documents] if documents[0].id else None)
    return store


def test_chunks_without_link_metadata_are_returned_unexpanded() -> None:
    documents = [Document(f"chunk {i}", id=f"c{i}", metadata={"n": i}) for i in range(5)]
    store = _store(documents)
    docs = SCARRetriever(vectorstore=store, budget=None, k=3).invoke("q")
    assert len(docs) == 3
    for doc in docs:
        assert len(doc.metadata["scar_chunk_ids"]) == 1
        assert doc.metadata["scar_rejected"] == []
        assert doc.metadata["scar_expanded"] is True


def test_missing_neighbours_are_skipped_and_the_seed_kept() -> None:
    chunks = link_chunks(chain_documents("doc", ["a", "b", "c"]))
    store = _store(chunks)
    store.delete([chunks[0].id, chunks[2].id])
    [passage] = SCARRetriever(vectorstore=store, budget=None, k=1, window=2).invoke("q")
    assert passage.metadata["scar_chunk_ids"] == [chunks[1].id]
    assert passage.page_content == "b"


def test_a_missing_middle_chunk_stops_the_walk_there() -> None:
    chunks = link_chunks(chain_documents("doc", ["a", "b", "c", "d"]))
    store = _store(chunks)
    store.delete([chunks[1].id])
    retriever = SCARRetriever(vectorstore=store, budget=None, k=1, window=3, direction="next")
    docs = retriever.invoke("q")
    for doc in docs:
        ids = doc.metadata["scar_chunk_ids"]
        assert chunks[1].id not in ids
        if ids[0] == chunks[0].id:
            assert ids == [chunks[0].id]


def _linked(text: str, chunk_id: str, **links: Any) -> Document:
    metadata = {"scar_chunk_id": chunk_id, "scar_document_id": links.pop("document", "doc")}
    metadata.update({f"scar_{key}_id": value for key, value in links.items()})
    return Document(text, id=chunk_id, metadata=metadata)


@pytest.mark.parametrize(
    "documents",
    [
        pytest.param([_linked("a", "a", prev="a", next="a")], id="self-link"),
        pytest.param([_linked("a", "a", next="ghost")], id="dangling"),
        pytest.param(
            [_linked("a", "a", next="b"), _linked("b", "b", next="a", prev="a")], id="cycle"
        ),
        pytest.param(
            [_linked("a", "a", next="b"), _linked("b", "b", prev="a", document="other")],
            id="cross-document",
        ),
        pytest.param([_linked("a", "a", next=7, prev=["x"])], id="wrong-types"),
    ],
)
def test_bad_links_never_crash_or_lose_the_seed(documents: list[Document]) -> None:
    store = _store(documents)
    docs = SCARRetriever(vectorstore=store, budget=None, k=len(documents), window=2).invoke("q")
    returned = [cid for d in docs for cid in d.metadata["scar_chunk_ids"]]
    assert len(returned) == len(set(returned))
    assert set(returned) == {d.id for d in documents}


def test_cross_document_link_is_refused() -> None:
    documents = [_linked("a", "a", next="b"), _linked("b", "b", prev="a", document="other")]
    store = _store(documents)
    [passage] = SCARRetriever(vectorstore=store, budget=None, k=1, fetch_k=1).invoke("q")
    assert len(passage.metadata["scar_chunk_ids"]) == 1


def test_empty_store_returns_nothing() -> None:
    store = InMemoryVectorStore(ConstantEmbeddings())
    assert SCARRetriever(vectorstore=store, budget=None).invoke("q") == []


class IdlessRetriever(BaseRetriever):
    """Returns chunks that carry no id at all."""

    documents: list[Document]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return self.documents


def test_seeds_without_any_id_are_returned_unexpanded() -> None:
    documents = [Document("first"), Document("second")]
    retriever = SCARRetriever(
        base_retriever=IdlessRetriever(documents=documents),
        docstore=InMemoryStore(),
        embeddings=HashingEmbeddings(),
        budget=None,
        k=2,
        return_chunks=True,
    )
    docs = retriever.invoke("q")
    assert sorted(d.page_content for d in docs) == ["first", "second"]


# --------------------------------------------------------------------------------------------
# Faults and on_error


class FailingStore(InMemoryVectorStore):
    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        raise ConnectionError("database unreachable")

    async def aget_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        raise ConnectionError("database unreachable")


def _failing_store() -> tuple[FailingStore, list[Document]]:
    chunks = link_chunks(chain_documents("doc", [f"part {i}" for i in range(10)]))
    store = FailingStore(ConstantEmbeddings())
    store.add_documents(chunks, ids=[c.id for c in chunks])
    return store, chunks


def test_store_failure_raises_with_the_cause_chained() -> None:
    store, _ = _failing_store()
    retriever = SCARRetriever(vectorstore=store, budget=None, k=1, fetch_k=1)
    with pytest.raises(NeighborFetchError, match="on_error='return_seeds'") as caught:
        retriever.invoke("q")
    assert isinstance(caught.value.__cause__, ConnectionError)


async def test_store_failure_raises_on_the_async_path_too() -> None:
    store, _ = _failing_store()
    with pytest.raises(NeighborFetchError):
        await SCARRetriever(vectorstore=store, budget=None, k=1, fetch_k=1).ainvoke("q")


@pytest.mark.parametrize("return_chunks", [False, True])
async def test_return_seeds_on_store_failure(
    return_chunks: bool, caplog: pytest.LogCaptureFixture
) -> None:
    store, chunks = _failing_store()
    retriever = SCARRetriever(
        vectorstore=store,
        budget=None,
        k=2,
        fetch_k=2,
        on_error="return_seeds",
        return_chunks=return_chunks,
    )
    with caplog.at_level(logging.WARNING, logger="scar_langchain"):
        docs = retriever.invoke("q")
    assert "NeighborFetchError" in caplog.text
    assert "unreachable" not in caplog.text
    assert len(docs) == 2
    for doc in docs:
        assert doc.metadata["scar_expanded"] is False
        assert doc.metadata["scar_error"] == "NeighborFetchError"
        assert doc.metadata["scar_chunk_ids"] == [doc.metadata["scar_seed_id"]]
        assert "scar_score" not in doc.metadata
    assert {d.page_content for d in docs} <= {c.page_content for c in chunks}
    assert [d.page_content for d in await retriever.ainvoke("q")] == [d.page_content for d in docs]


class BrokenEmbeddings(HashingEmbeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise TimeoutError("embedding service timed out")


def test_embedding_failure_for_chunk_vectors() -> None:
    chunks = link_chunks(chain_documents("doc", ["a", "b", "c"]))
    docstore = InMemoryStore()
    docstore.mset([(c.id, c) for c in chunks])
    search = InMemoryVectorStore(HashingEmbeddings())
    search.add_documents(chunks, ids=[c.id for c in chunks])
    settings: dict[str, Any] = {
        "base_retriever": search.as_retriever(),
        "docstore": docstore,
        "embeddings": BrokenEmbeddings(),
        "budget": None,
        "k": 1,
    }
    with pytest.raises(EmbeddingError) as caught:
        SCARRetriever(**settings).invoke("a")
    assert isinstance(caught.value.__cause__, TimeoutError)
    [seed] = SCARRetriever(**settings, on_error="return_seeds").invoke("a")
    assert seed.metadata["scar_error"] == "EmbeddingError"


# --------------------------------------------------------------------------------------------
# Settings


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"k": 0}, "k=0"),
        ({"k": True}, "k=True"),
        ({"k": 2.5}, "k=2.5"),
        ({"lambda_": -0.1}, "lambda_=-0.1"),
        ({"gamma": 0.0}, r"gamma=0.0 .*\(0, 1\]"),
        ({"gamma": 1.5}, "gamma=1.5"),
        ({"window": 0}, "window=0"),
        ({"window": 1.5}, "window=1.5"),
        ({"direction": "up"}, "direction='up'"),
        ({"max_tokens": 3, "k": 4}, "max_tokens=3 is smaller than k=4"),
        ({"max_tokens": 0}, "max_tokens=0"),
        ({"fetch_k": 2, "k": 3}, "fetch_k=2 is smaller than k=3"),
        ({"on_error": "ignore"}, "on_error='ignore'"),
        ({"return_chunks": "yes"}, "return_chunks='yes'"),
        ({"search_kwargs": {"k": 9}}, "search_kwargs must not hold 'k'"),
    ],
)
def test_bad_settings_are_rejected_at_construction(settings: dict[str, Any], message: str) -> None:
    store = InMemoryVectorStore(HashingEmbeddings())
    with pytest.raises(InvalidSettingsError, match=message):
        SCARRetriever(vectorstore=store, budget=None, **settings)


def test_sources_must_be_complete() -> None:
    store = InMemoryVectorStore(HashingEmbeddings())
    with pytest.raises(InvalidSettingsError, match="exactly one of"):
        SCARRetriever()
    with pytest.raises(InvalidSettingsError, match="exactly one of"):
        SCARRetriever(vectorstore=store, budget=None, base_retriever=store.as_retriever())
    with pytest.raises(InvalidSettingsError, match="docstore="):
        SCARRetriever(base_retriever=store.as_retriever(), embeddings=HashingEmbeddings())
    with pytest.raises(InvalidSettingsError, match="embeddings="):
        SCARRetriever(base_retriever=store.as_retriever(), docstore=InMemoryStore())


def test_per_call_k_must_fit_the_budget() -> None:
    store = InMemoryVectorStore(HashingEmbeddings())
    retriever = SCARRetriever(vectorstore=store, budget=None, k=1, max_tokens=2, token_counter=len)
    with pytest.raises(InvalidSettingsError, match="max_tokens=2 is smaller than k=3"):
        retriever.invoke("q", k=3)
