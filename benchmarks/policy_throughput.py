"""Benchmark 2: the SCAR policy alone, batched, against the memory-bandwidth floor.

10,000 queries x k = 10 seeds x window 2 (both sides) over a 100,000-chunk float32 matrix, at
d = 384 and 3072, through ``scar_core.policy_arrays.expand_batch_arrays``.

The floor is the time to copy, once, every vector the batch must read (each query's seeds and the
chunks on their walks) at the machine's single-thread copy rate, measured in the same run. The
batch gathers those vectors from random places, so a bare gather of the same rows (no maths) is
printed as well: the floor a random-access reader can actually reach on this machine. The floor
counts every position of every walk; the policy reads the seeds and the first steps, and then only
the later steps a walk can reach (after a step accepted or passed through), so with window 2 it
reads fewer vectors than the floor counts.

Times are reported as wall and as process CPU time: on a shared machine the CPU time is what this
process itself spent, and the bandwidth is measured both ways too.

Usage::

    python benchmarks/policy_throughput.py            # the issue's sizes (about 1-2 minutes)
    python benchmarks/policy_throughput.py --queries 2000 --dims 384
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time

import numpy as np
from bench_support import (
    copy_bandwidth,
    machine_summary,
    make_corpus,
    markdown_table,
    seeded_queries,
    write_result,
)

from scar_core import ScarSettings, expand_batch
from scar_core.graph import NeighborGraph
from scar_core.policy_arrays import Outcome, expand_batch_arrays


def gather_only(vectors: np.ndarray, rows: np.ndarray, per_block: int) -> float:
    """CPU seconds to gather ``rows`` (queries x slots) block by block into a reused buffer."""
    buffer = np.empty((per_block, rows.shape[1], vectors.shape[1]), dtype=vectors.dtype)
    start = time.process_time()
    for first in range(0, rows.shape[0], per_block):
        block = rows[first : first + per_block]
        np.take(vectors, block, axis=0, out=buffer[: block.shape[0]], mode="clip")
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--window", type=int, default=2)
    parser.add_argument("--dims", type=int, nargs="+", default=[384, 3072])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--object-path-queries", type=int, default=500)
    args = parser.parse_args()
    logging.disable(logging.WARNING)

    machine = machine_summary()  # the load average at the start, not at the end
    print(machine)
    settings = ScarSettings(window=args.window)
    rows = []
    for dimension in args.dims:
        corpus = make_corpus(args.chunks, dimension)
        queries, seeds = seeded_queries(corpus, args.queries, args.k)
        expand_batch_arrays(queries[:100], corpus.vectors, seeds[:100], corpus.links, settings)
        bandwidth_before = copy_bandwidth()
        walls, cpus = [], []
        for _ in range(args.repeats):
            wall, cpu = time.perf_counter(), time.process_time()
            batch = expand_batch_arrays(queries, corpus.vectors, seeds, corpus.links, settings)
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
        bandwidth_after = copy_bandwidth()
        wall_bw = max(bandwidth_before.wall, bandwidth_after.wall)
        cpu_bw = max(bandwidth_before.cpu, bandwidth_after.cpu)
        slots = np.concatenate([batch.seeds, batch.path.reshape(len(queries), -1)], axis=1)
        read_rows = int(np.count_nonzero(slots >= 0))
        read_bytes = read_rows * dimension * corpus.vectors.itemsize
        # The rows a walk actually reaches (seeds, and every position decided or passed): a
        # stricter floor, for a reader that skips what no walk can reach, as the policy does.
        reached_rows = int(np.count_nonzero(batch.seeds >= 0)) + int(
            np.count_nonzero(batch.outcome != Outcome.NOT_REACHED)
        )
        reached_bytes = reached_rows * dimension * corpus.vectors.itemsize
        gather = statistics.median(
            gather_only(
                corpus.vectors,
                np.maximum(slots, 0),
                max(1, (1 << 20) // (slots.shape[1] * dimension * 4)),
            )
            for _ in range(args.repeats)
        )
        wall_s, cpu_s = statistics.median(walls), statistics.median(cpus)
        decisions = batch.decision_count

        # The id-based object path (what the adapters call per query), on a subset.
        ids = corpus.chunk_ids()
        subset_slots = slots[: args.object_path_queries]
        touched = np.unique(subset_slots[subset_slots >= 0])
        graph = NeighborGraph(
            {
                ids[row]: (
                    ids[corpus.links[row, 0]] if corpus.links[row, 0] >= 0 else None,
                    ids[corpus.links[row, 1]] if corpus.links[row, 1] >= 0 else None,
                )
                for row in touched
            }
        )
        subset = slice(0, args.object_path_queries)
        vectors_by_id = {ids[row]: corpus.vectors[row] for row in touched}
        seed_ids = [[ids[row] for row in query] for query in seeds[subset]]
        start = time.process_time()
        objects = expand_batch(queries[subset], seed_ids, graph, vectors_by_id, settings)
        object_cpu = time.process_time() - start
        object_decisions = sum(len(result.decisions) for result in objects)

        rows.append(
            [
                dimension,
                f"{args.queries:,}",
                f"{decisions:,}",
                f"{wall_s:.3f}",
                f"{cpu_s:.3f}",
                f"{decisions / cpu_s:,.0f}",
                f"{read_bytes / 2**30:.2f}",
                f"{cpu_bw / 1e9:.1f}",
                f"{read_bytes / cpu_bw:.3f}",
                f"**{cpu_s / (read_bytes / cpu_bw):.2f}x**",
                f"{wall_s / (read_bytes / wall_bw):.2f}x",
                f"{reached_rows / args.queries:.1f}",
                f"{cpu_s / (reached_bytes / cpu_bw):.2f}x",
                f"{gather:.3f}",
                f"{cpu_s / gather:.2f}x",
                f"{object_decisions / object_cpu:,.0f}",
            ]
        )
        print(f"d={dimension} done: {rows[-1]}", flush=True)
        del corpus, queries, seeds, batch

    header = [
        "d",
        "queries",
        "decisions",
        "wall s",
        "CPU s",
        "decisions/s (CPU)",
        "GiB read",
        "copy GB/s (CPU)",
        "floor s",
        "CPU / floor",
        "wall / floor (wall bw)",
        "rows reached / query",
        "CPU / floor of rows reached",
        "bare gather CPU s",
        "CPU / bare gather",
        "object path decisions/s",
    ]
    table = markdown_table(header, rows)
    text = (
        f"# Policy throughput (benchmark 2)\n\n{machine}\n\n"
        f"{args.queries:,} queries x k={args.k} x window {args.window} (both sides), "
        f"{args.chunks:,}-chunk float32 matrix, median of {args.repeats} runs.\n\n"
        "The floor counts every vector on every walk (seeds and all walk positions), "
        f"{args.k * (1 + 2 * args.window)} rows per query; the policy reads the seeds and first "
        "steps, then only the later steps a walk can reach. The stricter floor counts only the "
        f"rows some walk reaches.\n\n{table}\n"
    )
    print(text)
    write_result("policy_throughput.md", text)


if __name__ == "__main__":
    main()
