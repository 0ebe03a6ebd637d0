"""Benchmark 4: how the policy's cost grows with k, the window and the dimension d.

One parameter varies at a time around k = 10, window = 2, d = 768, over a 50,000-chunk float32
corpus. Two ways of running the same rule are timed (process CPU time, per query):

* batched: ``expand_batch_arrays`` over 2,000 queries at once;
* one query at a time: ``ScarPolicy.expand`` with ids and a ``NeighborGraph`` (what the
  LangChain and LlamaIndex adapters call), over 200 queries.

The floor is the time to copy the vectors a query must read (its seeds and the chunks on their
walks) at the single-thread copy rate measured in the same run.

Writes ``benchmarks/results/scaling.md`` and ``benchmarks/results/scaling.png``.

Usage::

    python benchmarks/scaling.py
"""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import dataclass

import numpy as np
from bench_support import (
    RESULTS_DIR,
    Corpus,
    copy_bandwidth,
    machine_summary,
    make_corpus,
    markdown_table,
    seeded_queries,
    write_result,
)

from scar_core import NeighborGraph, ScarPolicy, ScarSettings
from scar_core.policy_arrays import expand_batch_arrays


@dataclass(frozen=True)
class Point:
    parameter: str
    value: int
    batched_us: float
    single_us: float
    floor_us: float
    decisions_per_query: float


def measure(
    corpus: Corpus, k: int, window: int, batch: int, single: int, bandwidth: float
) -> tuple[float, float, float, float]:
    queries, seeds = seeded_queries(corpus, batch, k)
    settings = ScarSettings(window=window)
    expand_batch_arrays(queries[:50], corpus.vectors, seeds[:50], corpus.links, settings)
    start = time.process_time()
    result = expand_batch_arrays(queries, corpus.vectors, seeds, corpus.links, settings)
    batched = (time.process_time() - start) / batch
    slots = np.concatenate([result.seeds, result.path.reshape(batch, -1)], axis=1)
    floor = np.count_nonzero(slots >= 0) * corpus.dimension * 4 / bandwidth / batch

    ids = corpus.chunk_ids()
    touched = np.unique(slots[:single][slots[:single] >= 0])
    graph = NeighborGraph(
        {
            ids[row]: (
                ids[corpus.links[row, 0]] if corpus.links[row, 0] >= 0 else None,
                ids[corpus.links[row, 1]] if corpus.links[row, 1] >= 0 else None,
            )
            for row in touched
        }
    )
    vectors = {ids[row]: corpus.vectors[row] for row in touched}
    policy = ScarPolicy(settings)
    seed_ids = [[ids[row] for row in query] for query in seeds[:single]]
    start = time.process_time()
    for query, query_seeds in zip(queries[:single], seed_ids, strict=True):
        policy.expand(query, query_seeds, graph, vectors)
    one_at_a_time = (time.process_time() - start) / single
    return batched * 1e6, one_at_a_time * 1e6, floor * 1e6, result.decision_count / batch


def plot(points: list[Point]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parameters = ["k", "window", "d"]
    figure, axes = plt.subplots(1, 3, figsize=(13, 4))
    for axis, parameter in zip(axes, parameters, strict=True):
        chosen = [p for p in points if p.parameter == parameter]
        values = [p.value for p in chosen]
        axis.plot(
            values, [p.single_us for p in chosen], "o-", label="one query at a time (adapters)"
        )
        axis.plot(
            values, [p.batched_us for p in chosen], "s-", label="batched (expand_batch_arrays)"
        )
        axis.plot(values, [p.floor_us for p in chosen], "k--", label="copy-bandwidth floor")
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel(parameter)
        axis.set_ylabel("CPU microseconds per query")
        axis.set_title(f"cost vs {parameter}")
        axis.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    figure.suptitle(
        "SCAR policy cost per query (50k-chunk float32 corpus; others fixed at k=10, window=2, d=768)"
    )
    figure.tight_layout()
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    figure.savefig(RESULTS_DIR / "scaling.png", dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--single", type=int, default=200)
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 2, 5, 10, 20, 40])
    parser.add_argument("--windows", type=int, nargs="+", default=[1, 2, 3, 4, 8])
    parser.add_argument("--dims", type=int, nargs="+", default=[128, 384, 768, 1536, 3072])
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    machine = machine_summary()  # the load average at the start, not at the end
    print(machine, flush=True)
    bandwidth = copy_bandwidth().cpu
    points: list[Point] = []

    base = make_corpus(args.chunks, 768)
    for k in args.ks:
        points.append(Point("k", k, *measure(base, k, 2, args.batch, args.single, bandwidth)))
        print(points[-1], flush=True)
    for window in args.windows:
        points.append(
            Point("window", window, *measure(base, 10, window, args.batch, args.single, bandwidth))
        )
        print(points[-1], flush=True)
    del base
    for dimension in args.dims:
        corpus = make_corpus(args.chunks, dimension)
        points.append(
            Point("d", dimension, *measure(corpus, 10, 2, args.batch, args.single, bandwidth))
        )
        print(points[-1], flush=True)
        del corpus
    bandwidth = max(bandwidth, copy_bandwidth().cpu)

    rows = [
        [
            p.parameter,
            p.value,
            f"{p.decisions_per_query:.1f}",
            f"{p.single_us:,.0f}",
            f"{p.batched_us:,.1f}",
            f"{p.floor_us:,.1f}",
            f"{p.batched_us / p.floor_us:.1f}x",
            f"{p.single_us / p.batched_us:.0f}x",
        ]
        for p in points
    ]
    table = markdown_table(
        [
            "varied",
            "value",
            "decisions / query",
            "one at a time, µs / query",
            "batched, µs / query",
            "floor, µs / query",
            "batched / floor",
            "speed-up of batching",
        ],
        rows,
    )
    text = (
        "# Scaling of the policy's cost (benchmark 4)\n\n"
        f"{machine}\n\n"
        f"{args.chunks:,}-chunk float32 corpus; one parameter varies, the others stay at k=10, "
        f"window=2, d=768. CPU time per query: batched over {args.batch:,} queries, one at a time "
        f"over {args.single}. Copy bandwidth (CPU time): {bandwidth / 1e9:.1f} GB/s.\n\n"
        f"{table}\n\n![scaling](scaling.png)\n"
    )
    plot(points)
    print(text)
    write_result("scaling.md", text)


if __name__ == "__main__":
    main()
