"""Benchmark 7: async end-to-end latency on pgvector, SCAR against the plain retriever.

The async counterpart of benchmark 1's pgvector rows behind HNSW: ``await retriever.ainvoke``
for ``store.as_retriever(k=K)`` and for ``SCARRetriever`` on the same ``PGVectorStore``, on one
event loop, every round running each contender on the same query in turn (the order rotates).
The plain retriever's async search runs on the store's event-loop thread; SCAR's default sources
run their sync reads in the loop's default executor, and ``search_source=PGVectorChunks`` reads
on an async pool of its own on the running loop. Query embedding is excluded (a fake model).
Each ratio comes with a paired bootstrap 95 % interval.

Run from the repository root with the ``dev`` extra installed::

    python benchmarks/async_latency.py --sizes 10000 100000 --rounds 300
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from typing import Any

from bench_langchain import hnsw_store, query_set
from bench_postgres import pgvector_server
from bench_support import (
    LATENCY_COLUMNS,
    hnsw_latency_arguments,
    latency_cells,
    machine_summary,
    markdown_table,
    text_corpus,
    write_result,
)

from scar_langchain import PGVectorChunks, SCARRetriever

#: (SCAR contender, the plain retriever it is compared with): each pair returns as many chunks.
PAIRS = [
    ("SCAR plain (budget=None, k=4)", "plain k=12"),
    ("SCAR budget=10", "plain k=10"),
    ("SCAR budget=10 + search_source=PGVectorChunks", "plain k=10"),
]


async def interleaved_async_samples(
    retrievers: dict[str, Any], queries: list[str], rounds: int, warmup: int = 2
) -> dict[str, list[float]]:
    """Seconds of each ``await retriever.ainvoke(query)``, by round, the order rotating."""
    names = list(retrievers)
    for index in range(warmup):
        for name in names:
            await retrievers[name].ainvoke(queries[index])
    samples: dict[str, list[float]] = {name: [] for name in names}
    for index in range(rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            await retrievers[name].ainvoke(queries[warmup + index])
            samples[name].append(time.perf_counter() - start)
    return samples


async def time_store(store: Any, queries: list[str], rounds: int) -> dict[str, list[float]]:
    chunks = PGVectorChunks.from_store(store)
    retrievers = {
        "plain k=12": store.as_retriever(search_kwargs={"k": 12}),
        "SCAR plain (budget=None, k=4)": SCARRetriever(vectorstore=store, budget=None, k=4),
        "plain k=10": store.as_retriever(search_kwargs={"k": 10}),
        "SCAR budget=10": SCARRetriever(vectorstore=store),
        "SCAR budget=10 + search_source=PGVectorChunks": SCARRetriever(
            vectorstore=store, search_source=chunks
        ),
    }
    try:
        return await interleaved_async_samples(retrievers, queries, rounds)
    finally:
        await chunks.aclose()
        chunks.close()


def rows_for(label: str, samples: dict[str, list[float]]) -> list[list[object]]:
    return [latency_cells(label, scar, plain, samples) for scar, plain in PAIRS]


def main() -> None:
    parser = hnsw_latency_arguments(__doc__.split("\n\n")[0], 300, "queries per contender")
    args = parser.parse_args()
    logging.disable(logging.WARNING)

    machine = machine_summary()
    print(machine, flush=True)
    table: list[list[object]] = []
    with pgvector_server() as server:
        for size in args.sizes:
            corpus = text_corpus(size, args.dimension)
            queries = query_set(corpus, args.rounds + 2, "query")
            name = f"async_{size}_{args.dimension}"
            store, embeddings = hnsw_store(server, corpus, name, queries)
            samples = asyncio.run(time_store(store, list(queries), args.rounds))
            label = f"{size // 1000}k, d={args.dimension}, pgvector hnsw"
            table += rows_for(label, samples)
            print({k: round(statistics.median(v) * 1e3, 2) for k, v in samples.items()})
            assert embeddings.texts_embedded == 0, "SCAR embedded chunks at query time"
    text = (
        "# Async end-to-end latency (benchmark 7)\n\n"
        f"{machine}\n\n"
        "Median wall time of `await retriever.ainvoke(query)`, query embedding excluded, "
        f"{args.rounds} rounds.\n\n" + markdown_table(LATENCY_COLUMNS, table) + "\n"
    )
    path = write_result("async_latency.md", text)
    print(text)
    print(f"written to {path}")


if __name__ == "__main__":
    main()
