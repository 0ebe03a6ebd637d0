"""How many hits budget mode should always keep: recall of top-K against budget K over keep = 1..K.

For every dev set, K and keep value s, runs ``top{K}`` and ``budget{K}_s{s}`` (with ``--alpha A``,
``budget{K}_a{A}_s{s}``; and, for the window check, ``..._w{W}``) through ``scar_tools.eval`` and
prints the tables that choose ``scar_core._settings.default_keep``::

    python benchmarks/keep_sweep.py --bench /work/shared/bench --cache-dir ~/.cache/scar-dev \
        --out benchmarks/results/keep_sweep_per_query.json
    python benchmarks/keep_sweep.py --load benchmarks/results/keep_sweep_per_query.json
    # the sweep that chose keep 2, with the former fixed bonus:
    python benchmarks/keep_sweep.py --load benchmarks/results/keep_sweep.json --alpha 0.25

Setting: bundled all-MiniLM-L6-v2, 500-character chunks without overlap, retrieval within the
query's document (the ``scar eval`` defaults).
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path

import numpy as np
import numpy.typing as npt

from scar_core._settings import default_keep
from scar_tools.cache import EmbeddingCache
from scar_tools.embedders import Embedder
from scar_tools.eval import (
    PreparedBenchmark,
    create_method,
    embedder_for,
    load_benchmark,
    prepare_benchmark,
    run_methods,
)

#: The fixed continuity bonus the keep rule was chosen with (the default before the per-query one).
FIXED_BONUS = 0.25

SETS = {
    "privacy_qa": ("legalbench-rag/benchmarks/privacy_qa.json", "legalbench-rag/corpus"),
    "contractnli": ("legalbench-rag/benchmarks/contractnli.json", "legalbench-rag/corpus"),
    "paper4_dev": ("paper4/paper4_dev.json", "paper4/corpus"),
}


def dev_embedder(model: str | None) -> Embedder:
    """The embedder of a benchmark run.

    ``None`` or ``"minilm"``: the bundled MiniLM; ``"m2v"``: the model2vec model distilled by
    ``distill_model2vec.py`` into ``$SCAR_M2V_DIR``; anything else: a ``scar eval --model`` spec.
    """
    if model == "m2v":
        from distill_model2vec import M2VEmbedder  # beside this file

        return M2VEmbedder()
    return embedder_for(None if model == "minilm" else model)


def document_vectors(prepared: PreparedBenchmark) -> list[npt.NDArray[np.float64]]:
    """Each document's chunk vectors in document order (what ``suggest_continuity_bonus`` takes)."""
    vectors = np.array([node.vector for node in prepared.nodes])
    return [vectors[a:b] for a, b in prepared.corpus.rows_of_document.values()]


#: Candidate rules for default_keep(K), compared in the last table.
CANDIDATES = {
    "shipped": default_keep,
    "min(K,2)": lambda k: min(k, 2),
    "ceil(0.3K)": lambda k: max(1, math.ceil(0.3 * k)),
    "ceil(0.4K)": lambda k: max(1, math.ceil(0.4 * k)),
    "ceil(K/2)": lambda k: max(1, math.ceil(k / 2)),
    "floor(K/2)": lambda k: max(1, k // 2),
    "round(0.6K)": lambda k: max(1, round(0.6 * k)),
    "K-2": lambda k: max(1, k - 2),
    "K-3": lambda k: max(1, k - 3),
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--bench", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "bench"
    )
    parser.add_argument("--cache-dir", default=os.environ.get("SCAR_CACHE_DIR"))
    parser.add_argument("--ks", default="2,3,4,5,7,10,12,15")
    parser.add_argument(
        "--alpha", type=float, help=f"a fixed bonus, e.g. {FIXED_BONUS}; omitted: each query's own"
    )
    parser.add_argument("--windows", default="2,9", help="windows compared at each K and keep")
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--out", type=Path, help="write the recalls here (JSON)")
    parser.add_argument("--load", type=Path, help="report the recalls of an earlier --out only")
    args = parser.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    windows = [int(w) for w in args.windows.split(",")]
    if args.load:
        report(json.loads(args.load.read_text()), ks, args.alpha, windows)
        return
    embedder, cache = embedder_for(None), EmbeddingCache(args.cache_dir)
    table: dict[str, dict[str, dict[str, float]]] = {}
    for name in args.sets.split(","):
        benchmark_file, corpus = SETS[name]
        benchmark = load_benchmark(args.bench / benchmark_file, args.bench / corpus)
        prepared = prepare_benchmark(benchmark, embedder, cache=cache)
        names = [f"top{k}" for k in ks] + [
            budget_name(k, args.alpha, s, w) for k in ks for s in range(1, k + 1) for w in windows
        ]
        runs = run_methods(
            prepared,
            {n: create_method(n, 5) for n in names},
            5,
            count_tokens=False,
            show_progress=True,
        )
        table[name] = {
            n: {
                g: float(runs[n][1].recall[prepared.group_mask(g)].mean())
                for g in ("fragmented", "all")
            }
            for n in names
        }
        table[name]["_n"] = {g: float(prepared.group_mask(g).sum()) for g in ("fragmented", "all")}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(table, indent=1) + "\n")
    report(table, ks, args.alpha, windows)


def budget_name(k: int, alpha: float | None, keep: int, window: int) -> str:
    """The ``scar eval`` method: budget mode at ``k`` keeping ``keep``, fixed or per-query bonus."""
    bonus = "" if alpha is None else f"_a{alpha:g}"
    return f"budget{k}{bonus}_s{keep}_w{window}"


def recall(
    table: dict, name: str, k: int, keep: int | None, group: str, alpha: float | None, window: int
) -> float:
    key = f"top{k}" if keep is None else budget_name(k, alpha, keep, window)
    return table[name][key][group]


def report(table: dict, ks: list[int], alpha: float | None, windows: list[int]) -> None:
    w0 = windows[0]
    for name in table:
        n = table[name]["_n"]
        print(
            f"\n## {name} (fragmented {n['fragmented']:.0f}, all {n['all']:.0f}): "
            f"budget K keep s minus top-K, window {w0}, points"
        )
        for group in ("fragmented", "all"):
            print(f"\n{group}:  K | topK | " + " ".join(f"s={s:<3}" for s in range(1, max(ks) + 1)))
            for k in ks:
                top = recall(table, name, k, None, group, alpha, w0)
                cells = " ".join(
                    f"{100 * (recall(table, name, k, s, group, alpha, w0) - top):+5.1f}"
                    for s in range(1, k + 1)
                )
                print(f"  {k:>3} | {top:.3f} | {cells}")
    print("\n## candidate rules: min over sets and K of (default - topK), points, all / fragmented")
    for label, rule in CANDIDATES.items():
        worst_all = min(
            recall(table, s, k, rule(k), "all", alpha, w0)
            - recall(table, s, k, None, "all", alpha, w0)
            for s in table
            for k in ks
        )
        worst_frag = min(
            recall(table, s, k, rule(k), "fragmented", alpha, w0)
            - recall(table, s, k, None, "fragmented", alpha, w0)
            for s in table
            for k in ks
        )
        mean_frag = sum(
            recall(table, s, k, rule(k), "fragmented", alpha, w0)
            - recall(table, s, k, None, "fragmented", alpha, w0)
            for s in table
            for k in ks
        ) / (len(table) * len(ks))
        print(
            f"  {label:<12} keeps {[rule(k) for k in ks]}  min all {100 * worst_all:+.1f}  "
            f"min frag {100 * worst_frag:+.1f}  mean frag {100 * mean_frag:+.1f}"
        )
    print(
        "\n## scar_core._settings.default_keep: top-K, default (window 2), delta in points; window 9"
    )
    for name in table:
        print(
            f"\n{name}\n  K keep | frag topK  default  delta | all topK  default  delta | "
            + " ".join(f"w{w} frag/all" for w in windows[1:])
        )
        for k in ks:
            s = default_keep(k)
            row = []
            for group in ("fragmented", "all"):
                top, ours = (
                    recall(table, name, k, None, group, alpha, w0),
                    recall(table, name, k, s, group, alpha, w0),
                )
                row.append(f"{top:.3f}    {ours:.3f}  {100 * (ours - top):+5.1f}")
            wide = " ".join(
                f"{recall(table, name, k, s, 'fragmented', alpha, w):.3f}/"
                f"{recall(table, name, k, s, 'all', alpha, w):.3f}"
                for w in windows[1:]
            )
            print(f"  {k:>2} {s:>4} | {row[0]} | {row[1]} | {wide}")


if __name__ == "__main__":
    main()
