"""Concurrent load: 1,000 concurrent queries per adapter equal the same queries run one by one.

Both adapters run over one shared store and one shared vector cache; every query's neighbour
vectors come through the cache, so concurrent queries read and fill it at once. Throughput is
recorded and printed in the session summary. A threaded test hammers the in-memory caches
(``InMemoryVectors``, ``CachedEmbedder``, the LlamaIndex adapter's ``MemoryTextVectorCache``) and
both adapters' sync paths from a thread pool.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore
from llama_index.core.schema import (
    NodeRelationship,
    NodeWithScore,
    QueryBundle,
    RelatedNodeInfo,
    TextNode,
)
from llama_index.core.storage.docstore import SimpleDocumentStore
from rel_support import THROUGHPUT, HashEmbedder, hashed_vector

from scar_core import InMemoryVectors
from scar_core.cache import CachedEmbedder
from scar_langchain import EmbeddingVectors, ScarEmbeddings, SCARRetriever, link_chunks
from scar_llamaindex import MemoryTextVectorCache, ScarEmbedding, SCARNodePostprocessor

pytestmark = pytest.mark.slow

#: Stands for "the shipped defaults" (budget mode, budget 10, k 3) in the setup helpers.
DEFAULT = object()
CONCURRENT_QUERIES = 1000
DISTINCT_QUERIES = 100
WORDS = [
    "timer",
    "segment",
    "window",
    "ack",
    "retransmit",
    "backoff",
    "handshake",
    "reset",
    "urgent",
    "pointer",
    "congestion",
    "slow",
    "start",
    "threshold",
    "sender",
    "receiver",
    "buffer",
    "checksum",
    "port",
    "socket",
    "stream",
]


def corpus(documents: int = 40, chunks: int = 8) -> list[list[str]]:
    rng = random.Random(7)
    return [
        [" ".join(rng.choices(WORDS, k=12)) + f" (document {d}, part {c})" for c in range(chunks)]
        for d in range(documents)
    ]


def queries() -> list[str]:
    rng = random.Random(11)
    distinct = [" ".join(rng.choices(WORDS, k=4)) for _ in range(DISTINCT_QUERIES)]
    return [distinct[i % DISTINCT_QUERIES] for i in range(CONCURRENT_QUERIES)]


def record(name: str, count: int, seconds: float) -> None:
    THROUGHPUT[name] = (count, seconds)


# --------------------------------------------------------------------------------------------
# LangChain


def shared_retriever(budget: int | object | None) -> tuple[SCARRetriever, CachedEmbedder]:
    """The retriever over a shared store and cache; ``DEFAULT`` keeps the shipped settings."""
    cached = CachedEmbedder(HashEmbedder(32))
    embeddings = ScarEmbeddings(cached)
    chunks = link_chunks(
        [
            Document(text, metadata={"source": f"doc-{d}"})
            for d, texts in enumerate(corpus())
            for text in texts
        ]
    )
    store = InMemoryVectorStore(embeddings)
    store.add_documents(chunks, ids=[c.id for c in chunks])
    mode = {} if budget is DEFAULT else {"budget": budget, "k": 3, "gamma": 0.6}
    retriever = SCARRetriever(vectorstore=store, vector_source=EmbeddingVectors(embeddings), **mode)
    return retriever, cached


def lc_rows(documents: Sequence[Document]) -> list[tuple[Any, ...]]:
    return [(d.id, d.page_content, repr(sorted(d.metadata.items()))) for d in documents]


async def test_a_thousand_concurrent_ainvokes_equal_sequential_ones() -> None:
    # The 1,000 calls ask 100 distinct questions ten times each. The sequential reference runs
    # each question once on a cold cache; the burst then runs on the same retriever, store and
    # now warm cache, which every concurrent call reads.
    retriever, cached = shared_retriever(DEFAULT)
    asked = queries()
    distinct = list(dict.fromkeys(asked))
    started = time.perf_counter()
    sequential = {q: lc_rows(await retriever.ainvoke(q)) for q in distinct}
    sequential_seconds = time.perf_counter() - started
    embedded = cached.embedded_texts
    started = time.perf_counter()
    burst = await asyncio.gather(*(retriever.ainvoke(q) for q in asked))
    concurrent_seconds = time.perf_counter() - started
    assert all(sequential[q] for q in distinct)
    assert [lc_rows(documents) for documents in burst] == [sequential[q] for q in asked]
    assert cached.embedded_texts == embedded  # the warm cache answered every vector
    record("langchain ainvoke, defaults: sequential, cold cache", len(distinct), sequential_seconds)
    record("langchain ainvoke, defaults: 1,000 concurrent", len(asked), concurrent_seconds)


# --------------------------------------------------------------------------------------------
# LlamaIndex


def li_setup(
    budget: int | object | None,
) -> tuple[SCARNodePostprocessor, list[TextNode], CachedEmbedder]:
    """The postprocessor over a shared docstore and caches; ``DEFAULT`` keeps the shipped settings."""
    nodes: list[TextNode] = []
    for d, texts in enumerate(corpus()):
        chain = [TextNode(id_=f"d{d}n{c}", text=text) for c, text in enumerate(texts)]
        for c, node in enumerate(chain):
            node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=f"doc-{d}")
            if c:
                node.relationships[NodeRelationship.PREVIOUS] = RelatedNodeInfo(
                    node_id=chain[c - 1].node_id
                )
            if c + 1 < len(chain):
                node.relationships[NodeRelationship.NEXT] = RelatedNodeInfo(
                    node_id=chain[c + 1].node_id
                )
        nodes.extend(chain)
    docstore = SimpleDocumentStore()
    docstore.add_documents(nodes)
    cached = CachedEmbedder(HashEmbedder(32))
    mode = {} if budget is DEFAULT else {"budget": budget, "k": 3, "gamma": 0.6}
    scar = SCARNodePostprocessor(
        docstore=docstore,
        embed_model=ScarEmbedding(cached),
        vector_cache=MemoryTextVectorCache(),
        **mode,
    )
    return scar, nodes, cached


def retrieve(nodes: Sequence[TextNode], query: str, top_k: int = 6) -> list[NodeWithScore]:
    """A plain top-k by cosine over the hashed vectors, as a vector index would answer."""
    query_vector = hashed_vector(query, 32)
    scores = [float(hashed_vector(n.text, 32) @ query_vector) for n in nodes]
    best = np.argsort(scores)[::-1][:top_k]
    return [NodeWithScore(node=nodes[i], score=scores[i]) for i in best]


def li_rows(output: Sequence[NodeWithScore]) -> list[tuple[Any, ...]]:
    return [(n.node.node_id, n.score, repr(sorted(n.node.metadata.items()))) for n in output]


async def test_a_thousand_concurrent_apostprocess_calls_equal_sequential_ones() -> None:
    # As for LangChain: 100 distinct questions, ten times each, over one docstore and warm
    # caches (the postprocessor's node vectors, the embedder's query vectors).
    scar, nodes, cached = li_setup(DEFAULT)
    asked = queries()
    distinct = list(dict.fromkeys(asked))
    retrieved = {q: retrieve(nodes, q) for q in distinct}
    started = time.perf_counter()
    sequential = {
        q: li_rows(await scar.apostprocess_nodes(retrieved[q], QueryBundle(q))) for q in distinct
    }
    sequential_seconds = time.perf_counter() - started
    embedded = cached.embedded_texts
    started = time.perf_counter()
    burst = await asyncio.gather(
        *(scar.apostprocess_nodes(retrieved[q], QueryBundle(q)) for q in asked)
    )
    concurrent_seconds = time.perf_counter() - started
    assert [li_rows(output) for output in burst] == [sequential[q] for q in asked]
    assert cached.embedded_texts == embedded
    record(
        "llamaindex apostprocess_nodes, defaults: sequential, cold cache",
        len(distinct),
        sequential_seconds,
    )
    record(
        "llamaindex apostprocess_nodes, defaults: 1,000 concurrent", len(asked), concurrent_seconds
    )


# --------------------------------------------------------------------------------------------
# Threads


def hammer(work: Callable[[int], Any], jobs: int, workers: int = 8) -> list[Any]:
    """Run ``work(0..jobs-1)`` on a thread pool, all threads released together."""
    barrier = threading.Barrier(workers)

    def start(index: int) -> Any:
        if index < workers:
            barrier.wait()
        return work(index)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(start, range(jobs)))


def test_in_memory_vectors_stay_consistent_under_threads() -> None:
    table = InMemoryVectors()
    keys = [f"k{i}" for i in range(50)]

    def value(key: str, version: int) -> np.ndarray:
        # Every entry of one write is the same number, so a torn row would be visible.
        return np.full(64, float(hash((key, version)) % 1000), dtype=np.float32)

    def work(index: int) -> list[bool]:
        rng = random.Random(index)
        chosen = rng.sample(keys, 10)
        table.update((key, value(key, index % 4)) for key in chosen)
        found = table.get_vectors(rng.sample(keys, 20))
        return [
            bool(np.all(v == v[0])) and any(np.array_equal(v, value(k, n)) for n in range(4))
            for k, v in found.items()
        ]

    results = hammer(work, 400)
    assert all(all(checks) for checks in results)
    assert len(table) == len(keys)


def test_cached_embedder_counts_and_vectors_are_right_under_threads() -> None:
    inner = HashEmbedder(16)
    cached = CachedEmbedder(inner)
    texts = [f"text number {i}" for i in range(120)]

    def work(index: int) -> bool:
        rng = random.Random(index)
        batch = rng.sample(texts, 15)
        vectors = cached.embed_documents(batch)
        query = cached.embed_query(rng.choice(texts))
        expected = np.stack([hashed_vector(t, 16) for t in batch]).astype(np.float32)
        return bool(np.array_equal(vectors, expected)) and query.shape == (16,)

    assert all(hammer(work, 300))
    # Every text sent to the inner embedder is counted once, whatever the interleaving.
    assert cached.embedded_texts == inner.document_texts + inner.query_texts
    # Racing misses may embed a text twice, never more often than there were threads.
    assert inner.document_texts <= len(texts) * 8


def test_the_llamaindex_text_cache_stays_consistent_under_threads() -> None:
    cache = MemoryTextVectorCache()
    texts = [f"node text {i}" for i in range(80)]

    def work(index: int) -> bool:
        rng = random.Random(index)
        batch = rng.sample(texts, 10)
        cache.put_many("model", batch, np.stack([hashed_vector(t, 8) for t in batch]))
        wanted = rng.sample(texts, 20)
        found = cache.get_many("model", wanted)
        return all(
            v is None or np.allclose(v, hashed_vector(t, 8), rtol=1e-6)
            for t, v in zip(wanted, found, strict=True)
        )

    assert all(hammer(work, 300))
    found = cache.get_many("model", texts)
    for text, vector in zip(texts, found, strict=True):
        if vector is not None:
            np.testing.assert_allclose(vector, hashed_vector(text, 8), rtol=1e-6)


@pytest.mark.parametrize("budget", [None, 10], ids=["plain", "budget"])
def test_both_adapters_answer_alike_from_many_threads(budget: int | None) -> None:
    asked = queries()[:100]
    retriever, _ = shared_retriever(budget)
    expected_lc = {q: lc_rows(retriever.invoke(q)) for q in set(asked)}
    scar, nodes, _ = li_setup(budget)
    retrieved = {q: retrieve(nodes, q) for q in set(asked)}
    expected_li = {
        q: li_rows(scar.postprocess_nodes(retrieved[q], QueryBundle(q))) for q in set(asked)
    }

    fresh_retriever, _ = shared_retriever(budget)
    fresh_scar, _, _ = li_setup(budget)

    def work(index: int) -> bool:
        query = asked[index]
        lc = lc_rows(fresh_retriever.invoke(query))
        li = li_rows(fresh_scar.postprocess_nodes(retrieved[query], QueryBundle(query)))
        return lc == expected_lc[query] and li == expected_li[query]

    started = time.perf_counter()
    assert all(hammer(work, len(asked)))
    mode = "plain" if budget is None else "budget"
    record(
        f"both adapters, {mode}: 8 threads (one query each)",
        len(asked),
        time.perf_counter() - started,
    )
