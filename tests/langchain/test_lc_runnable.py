"""Framework fit: native async, batch, callbacks, LangSmith params, and LCEL chains."""

import asyncio
from collections.abc import Sequence
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import BaseMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnablePassthrough
from langchain_core.stores import InMemoryStore
from langchain_core.vectorstores import InMemoryVectorStore
from lc_fakes import HashingEmbeddings, chain_documents

from scar_langchain import SCARRetriever, link_chunks

QUERIES = ["topic1 word2", "topic3 word0", "topic0 word4 word5", "topic2"]


def _chunks() -> list[Document]:
    docs = []
    for d in range(4):
        docs += chain_documents(
            f"doc{d}", [f"document {d} topic{d} part {i} word{i} word{i + 1}" for i in range(5)]
        )
    return link_chunks(docs)


class AsyncOnlyEmbeddings(HashingEmbeddings):
    """Once frozen, only the async methods work."""

    frozen = False

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        assert not self.frozen, "sync embed_documents called on the async path"
        return super().embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        assert not self.frozen, "sync embed_query called on the async path"
        return super().embed_query(text)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.vector(text) for text in texts]

    async def aembed_query(self, text: str) -> list[float]:
        return self.vector(text)


class AsyncOnlyStore(InMemoryVectorStore):
    """Once frozen, only the async search and lookup work."""

    frozen = False

    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, **kwargs: Any
    ) -> list[Document]:
        assert not self.frozen, "sync search called on the async path"
        return super().similarity_search_by_vector(embedding, k, **kwargs)

    async def asimilarity_search_by_vector(
        self, embedding: list[float], k: int = 4, **kwargs: Any
    ) -> list[Document]:
        return super().similarity_search_by_vector(embedding, k, **kwargs)

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        assert not self.frozen, "sync get_by_ids called on the async path"
        return super().get_by_ids(ids)

    async def aget_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        return super().get_by_ids(ids)


class AsyncOnlyDocstore(InMemoryStore):
    frozen = False

    def mget(self, keys: Sequence[str]) -> list[Any]:
        assert not self.frozen, "sync mget called on the async path"
        return super().mget(keys)

    async def amget(self, keys: Sequence[str]) -> list[Any]:
        return super().mget(keys)


def _summary(docs: list[Document]) -> list[tuple[str, list[str]]]:
    return [(d.page_content, d.metadata["scar_chunk_ids"]) for d in docs]


def _retriever(**settings: Any) -> SCARRetriever:
    embeddings = HashingEmbeddings()
    store = InMemoryVectorStore(embeddings)
    chunks = _chunks()
    store.add_documents(chunks, ids=[c.id for c in chunks])
    return SCARRetriever(vectorstore=store, budget=None, gamma=0.5, window=2, **settings)


def test_the_async_method_is_native() -> None:
    assert SCARRetriever._aget_relevant_documents is not BaseRetriever._aget_relevant_documents


async def test_async_path_uses_only_async_store_and_embedding_calls() -> None:
    embeddings = AsyncOnlyEmbeddings()
    store = AsyncOnlyStore(embeddings)
    chunks = _chunks()
    store.add_documents(chunks, ids=[c.id for c in chunks])
    retriever = SCARRetriever(vectorstore=store, budget=None, k=3, gamma=0.5, window=2)
    expected = [_summary(retriever.invoke(query)) for query in QUERIES]
    embeddings.frozen = store.frozen = True
    got = [_summary(await retriever.ainvoke(query)) for query in QUERIES]
    assert got == expected
    with pytest.raises(AssertionError, match="sync"):
        retriever.invoke(QUERIES[0])


async def test_async_path_with_base_retriever_and_docstore() -> None:
    chunks = _chunks()
    search = AsyncOnlyStore(HashingEmbeddings())
    search.add_documents(chunks, ids=[c.id for c in chunks])
    docstore = AsyncOnlyDocstore()
    docstore.mset([(c.id, c) for c in chunks])
    embeddings = AsyncOnlyEmbeddings()
    retriever = SCARRetriever(
        base_retriever=search.as_retriever(),
        docstore=docstore,
        embeddings=embeddings,
        budget=None,
        k=3,
        gamma=0.5,
        window=2,
    )
    expected = [_summary(retriever.invoke(query)) for query in QUERIES]
    embeddings.frozen = search.frozen = docstore.frozen = True
    assert [_summary(await retriever.ainvoke(query)) for query in QUERIES] == expected


async def test_concurrent_ainvoke_equals_sequential_invoke() -> None:
    retriever = _retriever(k=3)
    queries = QUERIES * 25
    expected = [_summary(retriever.invoke(query)) for query in queries]
    got = await asyncio.gather(*(retriever.ainvoke(query) for query in queries))
    assert [_summary(docs) for docs in got] == expected


def test_batch_equals_invoke() -> None:
    retriever = _retriever(k=2)
    expected = [_summary(retriever.invoke(query)) for query in QUERIES]
    assert [_summary(docs) for docs in retriever.batch(QUERIES)] == expected
    one_each = [_summary(retriever.invoke(query, k=1)) for query in QUERIES]
    assert [_summary(docs) for docs in retriever.batch(QUERIES, k=1)] == one_each
    assert all(len(docs) == 1 for docs in one_each)


async def test_abatch_equals_invoke() -> None:
    retriever = _retriever(k=2)
    expected = [_summary(retriever.invoke(query)) for query in QUERIES]
    assert [_summary(docs) for docs in await retriever.abatch(QUERIES)] == expected


class Recorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.events: list[tuple[str, UUID, UUID | None]] = []
        self.metadata: list[dict[str, Any]] = []
        self.prompts: list[str] = []

    def on_retriever_start(
        self,
        serialized: dict[str, Any],
        query: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.events.append(("start", run_id, parent_run_id))
        self.metadata.append(metadata or {})

    def on_retriever_end(
        self, documents: Sequence[Document], *, run_id: UUID, **kwargs: Any
    ) -> None:
        self.events.append(("end", run_id, None))

    def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[BaseMessage]], **kwargs: Any
    ) -> None:
        self.prompts.extend(str(m.content) for batch in messages for m in batch)


def test_callbacks_fire_with_langsmith_params() -> None:
    recorder = Recorder()
    retriever = _retriever(k=2)
    docs = retriever.invoke(QUERIES[0], config={"callbacks": [recorder]})
    assert [e[0] for e in recorder.events] == ["start", "end"]
    assert docs
    params = recorder.metadata[0]
    assert params["ls_retriever_name"] == "scar"
    assert params["ls_vector_store_provider"] == "InMemoryVectorStore"
    assert params["ls_embedding_provider"] == "HashingEmbeddings"


def test_the_base_retriever_runs_as_a_child() -> None:
    chunks = _chunks()
    search = InMemoryVectorStore(HashingEmbeddings())
    search.add_documents(chunks, ids=[c.id for c in chunks])
    docstore = InMemoryStore()
    docstore.mset([(c.id, c) for c in chunks])
    retriever = SCARRetriever(
        base_retriever=search.as_retriever(), docstore=docstore, embeddings=HashingEmbeddings()
    )
    recorder = Recorder()
    retriever.invoke(QUERIES[1], config={"callbacks": [recorder]})
    starts = [e for e in recorder.events if e[0] == "start"]
    assert len(starts) == 2
    outer, inner = starts
    assert outer[2] is None
    assert inner[2] == outer[1]


def _format_docs(docs: list[Document]) -> str:
    return "\n\n".join(doc.page_content for doc in docs)


def test_works_in_an_lcel_chain_with_a_fake_chat_model() -> None:
    retriever = _retriever(k=2)
    prompt = ChatPromptTemplate.from_template("Context:\n{context}\n\nQuestion: {question}")
    llm = FakeListChatModel(responses=["the answer"])
    chain = (
        {"context": retriever | _format_docs, "question": RunnablePassthrough()}
        | prompt
        | llm
        | StrOutputParser()
    )
    recorder = Recorder()
    assert chain.invoke(QUERIES[0], config={"callbacks": [recorder]}) == "the answer"
    [sent] = recorder.prompts
    for doc in retriever.invoke(QUERIES[0]):
        assert doc.page_content in sent
    assert f"Question: {QUERIES[0]}" in sent
    assert chain.batch(QUERIES[:2]) == ["the answer", "the answer"]
