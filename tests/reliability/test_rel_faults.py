"""Faults through both adapters: the embedding API at the HTTP boundary, failing stores, a broken cache.

The embedding provider is the real ``OpenAIEmbedder`` and the real ``openai`` client, answering
through respx from :class:`rel_support.FakeEmbeddingsAPI`, which can time out, refuse the
connection, rate-limit (429) or fail (5xx, 401) on the query's request or on the chunks'.
Transient faults must be retried with backoff and change nothing; persistent ones must either
raise the documented error with the provider's exception chained (``on_error="raise"``) or return
the retrieved chunks alone, marked unexpanded (``on_error="return_seeds"``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import respx
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle, TextNode
from llama_index.core.storage.docstore import SimpleDocumentStore
from rel_support import (
    FAKE_API_KEY,
    OPENAI_BASE_URL,
    FakeEmbeddingsAPI,
    HashEmbedder,
    openai_embedder,
    recorded_logs,
)

from scar_core.cache import CachedEmbedder, VectorCache, text_key
from scar_core.errors import EmbeddingError, NeighborFetchError
from scar_langchain import EmbeddingVectors, ScarEmbeddings, SCARRetriever, link_chunks
from scar_llamaindex import ScarEmbedding, SCARNodePostprocessor

openai = pytest.importorskip("openai")

DIMENSION = 8
QUERY = "how does the retransmission timer back off"
TEXTS = [
    "the sender starts the retransmission timer when a segment leaves",
    "when the retransmission timer expires the segment is sent again",
    "each expiry doubles the timeout so the timer backs off exponentially",
    "the backoff stops growing at a maximum timeout of sixty seconds",
    "an acknowledgement that arrives resets the timer to the measured value",
    "window scaling is negotiated once during the handshake",
    "the urgent pointer marks data the receiver should read first",
    "a reset segment aborts the connection at once",
]
SECRET_IN_CAUSE = "postgresql://scar:hunter2@db.internal/chunks"
TRANSIENT = [429, 408, 500, 503, "timeout", "connect"]


@pytest.fixture
def api() -> Iterator[FakeEmbeddingsAPI]:
    fake = FakeEmbeddingsAPI(DIMENSION, query=QUERY)
    with respx.mock(base_url=OPENAI_BASE_URL, assert_all_called=False) as router:
        router.post("/embeddings").mock(side_effect=fake)
        yield fake


def linked_chunks() -> list[Document]:
    return link_chunks([Document(text, metadata={"source": "rfc6298"}) for text in TEXTS])


def lc_retriever(mode: str, on_error: str = "raise", **extra: Any) -> SCARRetriever:
    """Search an in-memory store; embed the query and every chunk's vector through the API."""
    chunks = linked_chunks()
    store = InMemoryVectorStore(ScarEmbeddings(HashEmbedder(DIMENSION)))
    store.add_documents(chunks, ids=[c.id for c in chunks])
    embeddings = ScarEmbeddings(openai_embedder(**extra))
    return SCARRetriever(
        vectorstore=store,
        embeddings=embeddings,
        vector_source=EmbeddingVectors(embeddings),
        budget=None if mode == "plain" else 5,
        k=2,
        gamma=0.5,
        on_error=on_error,
    )


def li_nodes() -> list[TextNode]:
    from llama_index.core.schema import NodeRelationship, RelatedNodeInfo

    nodes = [TextNode(id_=f"n{i}", text=text) for i, text in enumerate(TEXTS)]
    for i, node in enumerate(nodes):
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id="rfc6298")
        if i:
            node.relationships[NodeRelationship.PREVIOUS] = RelatedNodeInfo(node_id=f"n{i - 1}")
        if i + 1 < len(nodes):
            node.relationships[NodeRelationship.NEXT] = RelatedNodeInfo(node_id=f"n{i + 1}")
    return nodes


def li_postprocessor(
    mode: str, on_error: str = "raise", docstore: SimpleDocumentStore | None = None, **extra: Any
) -> tuple[SCARNodePostprocessor, list[NodeWithScore]]:
    """Nodes without embeddings: the query and every node are embedded through the API."""
    nodes = li_nodes()
    if docstore is None:
        docstore = SimpleDocumentStore()
    docstore.add_documents(nodes)
    scar = SCARNodePostprocessor(
        docstore=docstore,
        embed_model=ScarEmbedding(openai_embedder(**extra)),
        budget=None if mode == "plain" else 5,
        k=2,
        gamma=0.5,
        on_error=on_error,
    )
    return scar, [NodeWithScore(node=nodes[2], score=0.9), NodeWithScore(node=nodes[4], score=0.7)]


Row = tuple[Any, Any, dict[str, Any]]


async def run_adapter(adapter: str, mode: str, use_async: bool, **settings: Any) -> list[Row]:
    """One query through the adapter: ``(id, text or score, metadata)`` per returned item."""
    if adapter == "langchain":
        retriever = lc_retriever(mode, **settings)
        documents = await retriever.ainvoke(QUERY) if use_async else retriever.invoke(QUERY)
        return [(d.id, d.page_content, d.metadata) for d in documents]
    scar, incoming = li_postprocessor(mode, **settings)
    bundle = QueryBundle(QUERY)
    output = (
        await scar.apostprocess_nodes(incoming, bundle)
        if use_async
        else scar.postprocess_nodes(incoming, bundle)
    )
    return [(n.node.node_id, n.score, n.node.metadata) for n in output]


ADAPTERS = ["langchain", "llamaindex"]


# --------------------------------------------------------------------------------------------
# Transient faults: retried with backoff, invisible in the result


@pytest.mark.parametrize("failure", TRANSIENT)
@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_a_transient_fault_is_retried_and_changes_nothing(
    api: FakeEmbeddingsAPI, adapter: str, use_async: bool, failure: int | str
) -> None:
    # One fault on the query's request and one on the chunks': each is retried once.
    baseline = await run_adapter(adapter, "plain", use_async)
    calls = len(api.requests)
    assert any(r == [QUERY] for r in api.requests)
    assert any(r != [QUERY] for r in api.requests)
    api.requests.clear()
    api.scripted = [("query", failure), ("documents", failure)]
    with recorded_logs("scar_core") as logs:
        again = await run_adapter(adapter, "plain", use_async)
    assert again == baseline
    assert api.scripted == []
    assert len(api.requests) == calls + 2
    retries = [m for m in logs.messages if "retry" in m]
    assert [m.split("; ")[1].split(" in ")[0] for m in retries] == ["retry 1 of 3"] * 2


# --------------------------------------------------------------------------------------------
# Persistent faults: raise with the cause chained, or return the seeds alone


PERSISTENT = [
    pytest.param(503, 4, openai.InternalServerError, id="503"),
    pytest.param(429, 4, openai.RateLimitError, id="429"),
    pytest.param("timeout", 4, openai.APITimeoutError, id="timeout"),
    pytest.param(401, 1, openai.AuthenticationError, id="401-not-retried"),
]


@pytest.mark.parametrize(("failure", "attempts", "cause"), PERSISTENT)
@pytest.mark.parametrize("mode", ["plain", "budget"])
@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_a_persistent_fault_raises_with_the_cause_chained(
    api: FakeEmbeddingsAPI,
    adapter: str,
    use_async: bool,
    mode: str,
    failure: int | str,
    attempts: int,
    cause: type[Exception],
) -> None:
    api.persistent = ("documents", failure)
    with pytest.raises(EmbeddingError) as raised:
        await run_adapter(adapter, mode, use_async)
    assert isinstance(raised.value.__cause__, cause)
    assert f"after {attempts} attempt(s)" in str(raised.value)
    assert sum(r != [QUERY] for r in api.requests) == attempts
    assert FAKE_API_KEY not in str(raised.value)


@pytest.mark.parametrize(("failure", "attempts", "cause"), [PERSISTENT[0], PERSISTENT[3]])
@pytest.mark.parametrize("mode", ["plain", "budget"])
@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("adapter", ADAPTERS)
async def test_a_persistent_fault_returns_the_seeds_marked_unexpanded(
    api: FakeEmbeddingsAPI,
    adapter: str,
    use_async: bool,
    mode: str,
    failure: int | str,
    attempts: int,
    cause: type[Exception],
) -> None:
    expected_seeds = [c.id for c in _lc_hits(mode)] if adapter == "langchain" else ["n2", "n4"]
    api.persistent = ("documents", failure)
    with recorded_logs("scar_langchain", "scar_llamaindex") as logs:
        output = await run_adapter(adapter, mode, use_async, on_error="return_seeds")
    assert [row[2]["scar_seed_id"] for row in output] == expected_seeds
    for _, _, metadata in output:
        assert metadata["scar_expanded"] is False
        assert metadata["scar_error"] == "EmbeddingError"
    assert sum(r != [QUERY] for r in api.requests) == attempts
    assert any("unexpanded" in m for m in logs.messages)
    assert all(FAKE_API_KEY not in m for m in logs.messages)


def _lc_hits(mode: str) -> list[Document]:
    """The store's own answer: the seeds a failed expansion returns (k, or the budget)."""
    retriever = lc_retriever(mode)
    store = retriever.vectorstore
    assert store is not None
    vector = HashEmbedder(DIMENSION).embed_query(QUERY).tolist()
    return store.similarity_search_by_vector(vector, k=2 if mode == "plain" else 5)


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.parametrize("on_error", ["raise", "return_seeds"])
async def test_a_failing_query_embedding_in_llamaindex_follows_on_error(
    api: FakeEmbeddingsAPI, use_async: bool, on_error: str
) -> None:
    # LlamaIndex hands SCAR the query unembedded on its async path, so SCAR embeds it and
    # on_error covers that request too. (LangChain embeds the query before searching: with no
    # query vector there are no seeds to return, so that failure always raises.)
    api.persistent = ("query", 503)
    if on_error == "raise":
        with pytest.raises(EmbeddingError) as raised:
            await run_adapter("llamaindex", "plain", use_async, on_error=on_error)
        assert isinstance(raised.value.__cause__, openai.InternalServerError)
        return
    output = await run_adapter("llamaindex", "plain", use_async, on_error=on_error)
    assert [row[0] for row in output] == ["n2", "n4"]


@pytest.mark.parametrize("use_async", [False, True])
async def test_a_failing_query_embedding_in_langchain_raises(
    api: FakeEmbeddingsAPI, use_async: bool
) -> None:
    api.persistent = ("query", 500)
    with pytest.raises(EmbeddingError) as raised:
        await run_adapter("langchain", "plain", use_async, on_error="return_seeds")
    assert isinstance(raised.value.__cause__, openai.InternalServerError)


# --------------------------------------------------------------------------------------------
# Store faults while fetching neighbours, on a later hop


class FlakyStore(InMemoryVectorStore):
    """Answers the first ``healthy`` neighbour fetches, then fails like a lost database."""

    healthy: int = 1
    fetches: int = 0

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        self.fetches += 1
        if self.fetches > self.healthy:
            raise ConnectionError(f"lost the connection to {SECRET_IN_CAUSE}")
        return super().get_by_ids(ids)

    async def aget_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        return self.get_by_ids(ids)


class FlakyDocstore(SimpleDocumentStore):
    """Answers the first ``healthy`` reads, then fails like a lost database."""

    healthy: int = 1
    reads: int = 0

    def get_nodes(self, node_ids: list[str], raise_error: bool = True) -> list[BaseNode]:
        self.reads += 1
        if self.reads > self.healthy:
            raise ConnectionError(f"lost the connection to {SECRET_IN_CAUSE}")
        return super().get_nodes(node_ids, raise_error=raise_error)

    async def aget_nodes(self, node_ids: list[str], raise_error: bool = True) -> list[BaseNode]:
        return self.get_nodes(node_ids, raise_error=raise_error)


def flaky_lc_retriever(mode: str, on_error: str) -> tuple[SCARRetriever, FlakyStore]:
    chunks = linked_chunks()
    store = FlakyStore(ScarEmbeddings(HashEmbedder(DIMENSION)))
    store.add_documents(chunks, ids=[c.id for c in chunks])
    retriever = SCARRetriever(
        vectorstore=store,
        budget=None if mode == "plain" else 6,
        k=2,
        fetch_k=2,
        window=2,
        gamma=0.3,
        on_error=on_error,
    )
    return retriever, store


#: Neighbour fetches that succeed before the store fails: plain mode reads window 2 ring by ring,
#: so it fails on its second hop; budget mode reads both rings of link_chunks' (predictable) ids
#: in one batch, so it fails on that one.
HEALTHY_FETCHES = {"plain": 1, "budget": 0}


@pytest.mark.parametrize("on_error", ["raise", "return_seeds"])
@pytest.mark.parametrize("mode", ["plain", "budget"])
@pytest.mark.parametrize("use_async", [False, True])
async def test_a_store_failing_mid_expansion_in_langchain(
    use_async: bool, mode: str, on_error: str
) -> None:
    retriever, store = flaky_lc_retriever(mode, on_error)
    store.healthy = HEALTHY_FETCHES[mode]
    call = retriever.ainvoke(QUERY) if use_async else _awaitable(retriever.invoke, QUERY)
    if on_error == "raise":
        with pytest.raises(NeighborFetchError) as raised:
            await call
        assert isinstance(raised.value.__cause__, ConnectionError)
        assert "hunter2" not in str(raised.value)
        assert store.fetches == store.healthy + 1
        return
    with recorded_logs("scar_langchain") as logs:
        documents = await call
    assert store.fetches == store.healthy + 1
    assert documents
    assert all(d.metadata["scar_expanded"] is False for d in documents)
    assert all(d.metadata["scar_error"] == "NeighborFetchError" for d in documents)
    assert len(documents) == 2
    assert all("hunter2" not in m for m in logs.messages)


@pytest.mark.parametrize("on_error", ["raise", "return_seeds"])
@pytest.mark.parametrize("mode", ["plain", "budget"])
@pytest.mark.parametrize("use_async", [False, True])
async def test_a_store_failing_on_the_second_hop_in_llamaindex(
    use_async: bool, mode: str, on_error: str
) -> None:
    docstore = FlakyDocstore()
    nodes = li_nodes()
    for node in nodes:
        node.embedding = HashEmbedder(DIMENSION).embed_documents([node.text])[0].tolist()
    docstore.add_documents(nodes)
    scar = SCARNodePostprocessor(
        docstore=docstore,
        budget=None if mode == "plain" else 6,
        k=2,
        window=2,
        gamma=0.3,
        on_error=on_error,
        embed_model=ScarEmbedding(HashEmbedder(DIMENSION)),
    )
    incoming = [NodeWithScore(node=nodes[2], score=0.9), NodeWithScore(node=nodes[5], score=0.7)]
    bundle = QueryBundle(QUERY, embedding=HashEmbedder(DIMENSION).embed_query(QUERY).tolist())
    call = (
        scar.apostprocess_nodes(incoming, bundle)
        if use_async
        else _awaitable(scar.postprocess_nodes, incoming, bundle)
    )
    if on_error == "raise":
        with pytest.raises(NeighborFetchError) as raised:
            await call
        assert isinstance(raised.value.__cause__, ConnectionError)
        assert "hunter2" not in str(raised.value)
        assert docstore.reads == 2
        return
    with recorded_logs("scar_llamaindex") as logs:
        output = await call
    assert docstore.reads == 2
    assert [(n.node.node_id, n.score) for n in output] == [("n2", 0.9), ("n5", 0.7)]
    assert all(n.node.metadata["scar_expanded"] is False for n in output)
    assert all(n.node.metadata["scar_error"] == "NeighborFetchError" for n in output)
    assert all("hunter2" not in m for m in logs.messages)


async def _awaitable(function: Any, *args: Any) -> Any:
    return function(*args)


# --------------------------------------------------------------------------------------------
# A corrupted or truncated on-disk cache behind an adapter


def corrupt(path: Path, how: str, texts: Sequence[str]) -> None:
    """Truncate the file, overwrite it with garbage, or flip a byte in the rows of ``texts``."""
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 3])
    elif how == "garbage":
        path.write_bytes(b"\x00garbage, not a database\x00" * 64)
    else:  # rows' bytes flipped: caught by their checksums
        with sqlite3.connect(path) as raw:
            for key in map(text_key, texts):
                row = raw.execute("SELECT data FROM vectors WHERE text_sha256 = ?", (key,))
                found = row.fetchone()
                if found is None:
                    continue  # never cached
                blob = found[0]
                raw.execute(
                    "UPDATE vectors SET data = ? WHERE text_sha256 = ?",
                    (bytes([blob[0] ^ 0xFF]) + blob[1:], key),
                )
        raw.close()


@pytest.mark.parametrize("how", ["truncated", "garbage", "flipped-rows"])
def test_a_broken_cache_behind_the_langchain_retriever_is_rebuilt_and_reported(
    tmp_path: Path, how: str
) -> None:
    path = tmp_path / "vectors.sqlite"
    chunks = linked_chunks()
    # Enough rows that the file spans many pages, so truncating it really cuts the table.
    padding = [f"padding text number {i}" for i in range(1500)]

    def run() -> tuple[list[Any], HashEmbedder, VectorCache]:
        inner = HashEmbedder(DIMENSION)
        cache = VectorCache(path)
        embeddings = ScarEmbeddings(CachedEmbedder(inner, cache))
        embeddings.embed_documents(padding)
        store = InMemoryVectorStore(embeddings)
        store.add_documents(chunks, ids=[c.id for c in chunks])
        retriever = SCARRetriever(
            vectorstore=store, vector_source=EmbeddingVectors(embeddings), budget=None, k=2
        )
        documents = retriever.invoke(QUERY)
        return [(d.page_content, d.metadata) for d in documents], inner, cache

    first, inner, cache = run()
    cache.close()
    assert inner.document_texts == len(padding) + len(chunks)
    corrupt(path, how, TEXTS)
    with recorded_logs("scar_core.cache") as logs:
        again, inner, cache = run()
    cache.close()
    assert again == first
    if how == "flipped-rows":
        assert cache.rebuilds == 0
        assert cache.dropped_rows == len(TEXTS)
        assert inner.document_texts == len(TEXTS)
        assert any(f"dropped {len(TEXTS)} damaged row(s)" in m for m in logs.messages)
    else:
        assert cache.rebuilds == 1
        assert inner.document_texts == len(padding) + len(chunks)
        assert any("unreadable" in m and str(path) in m for m in logs.messages)
        assert [p for p in tmp_path.iterdir() if ".corrupt-" in p.name]


@pytest.mark.parametrize("how", ["truncated", "garbage", "flipped-rows"])
async def test_a_broken_cache_behind_the_llamaindex_postprocessor_is_rebuilt_and_reported(
    tmp_path: Path, how: str
) -> None:
    path = tmp_path / "vectors.sqlite"
    inner = HashEmbedder(DIMENSION)
    padding = [f"padding text number {i}" for i in range(1500)]

    def build() -> tuple[SCARNodePostprocessor, list[NodeWithScore], VectorCache]:
        nodes = li_nodes()
        docstore = SimpleDocumentStore()
        docstore.add_documents(nodes)
        cache = VectorCache(path)
        model = ScarEmbedding(inner)
        cache.put_many(model.embedder.model_name, padding, inner.embed_documents(padding))
        scar = SCARNodePostprocessor(
            docstore=docstore, embed_model=model, vector_cache=cache, budget=None, gamma=0.5
        )
        incoming = [NodeWithScore(node=nodes[2], score=0.9)]
        return scar, incoming, cache

    scar, incoming, cache = build()
    bundle = QueryBundle(QUERY, embedding=inner.embed_query(QUERY).tolist())
    first = [(n.node.node_id, n.score) for n in await scar.apostprocess_nodes(incoming, bundle)]
    cache.close()
    embedded = inner.document_texts
    corrupt(path, how, [embed_text(node) for node in li_nodes()])
    with recorded_logs("scar_core.cache") as logs:
        scar, incoming, cache = build()
        again = [(n.node.node_id, n.score) for n in await scar.apostprocess_nodes(incoming, bundle)]
    cache.close()
    assert again == first
    # The seed n2 and its neighbours n1 and n3 need vectors; the others are never read.
    reembedded = inner.document_texts - embedded - len(padding)
    assert reembedded == 3
    if how == "flipped-rows":
        assert (cache.rebuilds, cache.dropped_rows) == (0, 3)
        assert any("dropped 3 damaged row(s)" in m for m in logs.messages)
    else:
        assert cache.rebuilds == 1
        assert any("unreadable" in m for m in logs.messages)


def embed_text(node: TextNode) -> str:
    """What LlamaIndex embeds for a node (and what the cache is keyed by)."""
    return node.get_content(metadata_mode=MetadataMode.EMBED)
