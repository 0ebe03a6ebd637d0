"""Benchmark 8: SCAR against the plain retriever alone, on queries no other contender has run.

Benchmark 1 times six LangChain contenders in turn on the same query, so a SCAR contender often
runs after another one that has just read much of the same neighbourhood into PostgreSQL's
buffers. Here each SCAR retriever is timed beside its plain retriever only, and every repeat
uses a fresh set of queries, so SCAR reads each query's neighbourhood cold, as it would in
service. pgvector behind HNSW, SCAR on its default sources, query embedding excluded. Each ratio
comes with a paired bootstrap 95 % interval; the pooled row joins every repeat's rounds.

Run from the repository root with the ``dev`` extra installed::

    python benchmarks/pair_latency.py --sizes 10000 100000 --rounds 250 --repeats 3
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable
from typing import Any

from bench_langchain import hnsw_store, query_set
from bench_postgres import pgvector_server
from bench_support import (
    hnsw_latency_arguments,
    interleaved_samples,
    interval_cell,
    machine_summary,
    markdown_table,
    text_corpus,
    write_result,
)

from scar_langchain import SCARRetriever

#: SCAR's two modes and the plain retriever that returns as many chunks.
PAIRS = {
    "budget mode (budget=10) / plain k=10": ({}, 10),
    "plain mode (budget=None, k=4) / plain k=12": ({"budget": None, "k": 4}, 12),
}


def ratio_cells(scar: list[float], plain: list[float]) -> tuple[float, str]:
    return statistics.median(scar) / statistics.median(plain), interval_cell(scar, plain)


def main() -> None:
    parser = hnsw_latency_arguments(__doc__.split("\n\n")[0], 250, "queries per repeat")
    parser.add_argument("--repeats", type=int, default=3, help="fresh query sets per pair")
    parser.add_argument(
        "--output", default="pair_latency.md", help="file name under benchmarks/results/"
    )
    args = parser.parse_args()
    logging.disable(logging.WARNING)

    machine = machine_summary()
    print(machine, flush=True)
    table: list[list[object]] = []
    with pgvector_server() as server:
        for size in args.sizes:
            corpus = text_corpus(size, args.dimension)
            query_sets = [
                query_set(corpus, args.rounds + 2, f"set {index}", seed=100 + index)
                for index in range(args.repeats * len(PAIRS))
            ]
            store, embeddings = hnsw_store(
                server,
                corpus,
                f"pairs_{size}_{args.dimension}",
                {text: vector for queries in query_sets for text, vector in queries.items()},
            )
            label = f"{size // 1000}k, d={args.dimension}, pgvector hnsw"
            sets = iter(query_sets)
            pooled: dict[str, tuple[list[float], list[float]]] = {pair: ([], []) for pair in PAIRS}
            ratios: dict[str, list[float]] = {pair: [] for pair in PAIRS}
            for _ in range(args.repeats):
                for pair, (settings, plain_k) in PAIRS.items():
                    queries = list(next(sets))
                    scar: Any = SCARRetriever(vectorstore=store, **settings)
                    plain: Any = store.as_retriever(search_kwargs={"k": plain_k})
                    contenders: dict[str, Callable[[int], object]] = {
                        "plain": lambda i, r=plain, q=queries: r.invoke(q[i]),
                        "scar": lambda i, r=scar, q=queries: r.invoke(q[i]),
                    }
                    samples = interleaved_samples(contenders, args.rounds)
                    ratio, interval = ratio_cells(samples["scar"], samples["plain"])
                    ratios[pair].append(ratio)
                    pooled[pair][0].extend(samples["scar"])
                    pooled[pair][1].extend(samples["plain"])
                    print(f"  {pair}: {ratio:.3f}x ({interval})", flush=True)
            for pair in PAIRS:
                scar_all, plain_all = pooled[pair]
                ratio, interval = ratio_cells(scar_all, plain_all)
                table.append(
                    [
                        label,
                        pair,
                        " / ".join(f"{r:.3f}x" for r in ratios[pair]),
                        f"{statistics.median(plain_all) * 1e3:.2f}",
                        f"{statistics.median(scar_all) * 1e3:.2f}",
                        f"{ratio:.3f}x",
                        interval,
                    ]
                )
            assert embeddings.texts_embedded == 0, "SCAR embedded chunks at query time"
    header = [
        "setup",
        "SCAR / plain",
        "each repeat",
        "plain ms (pooled median)",
        "SCAR ms (pooled median)",
        "pooled ratio",
        "95% interval",
    ]
    text = (
        "# SCAR beside the plain retriever alone, on fresh queries (benchmark 8)\n\n"
        f"{machine}\n\n"
        f"{args.repeats} repeats of {args.rounds} rounds per pair, each on its own query set; "
        "SCAR on its default sources. Target: SCAR <= 1.10x plain.\n\n"
        + markdown_table(header, table)
        + "\n"
    )
    path = write_result(args.output, text)
    print(text)
    print(f"written to {path}")


if __name__ == "__main__":
    main()
