"""How the default depends on its knobs, and the zero-label bonus checked out of sample.

For each dev set, budget B in {3, 5, 7, 10, 12, 15} and embedding model (the bundled MiniLM and
the model2vec model distilled from it by ``distill_model2vec.py``), runs top-B and budget mode at
a grid of continuity bonuses, at λ ± 25 %, and at the bonus :func:`suggest_continuity_bonus`
gives for a grid of factors, then prints:

* smoothness: fragmented recall at α and λ of the default ± 25 %, and every drop over 1 point;
* leave one set out: the factor fitted on the other two sets (both models), the bonus it suggests
  on the held-out set, and that set's recall against the best bonus with labels and the default.

    SCAR_M2V_DIR=/root/.cache/scar-dev/m2v-minilm python benchmarks/robustness.py \
        --cache-dir /root/.cache/scar-dev --out benchmarks/results/robustness.json
    python benchmarks/robustness.py --load benchmarks/results/robustness.json

Setting: 500-character chunks without overlap, retrieval within the query's document (the
``scar eval`` defaults). Recall is chunk recall; a gain is in points over top-B.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from keep_sweep import FIXED_BONUS, SETS, dev_embedder, document_vectors  # dev sets

from scar_core._settings import DEFAULT_LAMBDA
from scar_tools.cache import EmbeddingCache
from scar_tools.calibration import suggest_continuity_bonus
from scar_tools.eval import (
    create_method,
    load_benchmark,
    prepare_benchmark,
    run_methods,
)

BUDGETS = (3, 5, 7, 10, 12, 15)
ALPHAS = (0.05, 0.1, 0.125, 0.15, 0.175, 0.1875, 0.2, 0.225, 0.25, 0.275, 0.3, 0.3125, 0.35, 0.4)
FACTORS = (0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6)
LAMBDAS = (DEFAULT_LAMBDA * 0.75, DEFAULT_LAMBDA * 1.25)  # ± 25 % (the α grid holds α's)
MODELS = ("minilm", "m2v")


def measure(args: argparse.Namespace) -> dict:
    cache = EmbeddingCache(args.cache_dir)
    table: dict = {}
    for model in MODELS:
        chosen = dev_embedder(model)
        for name, (benchmark_file, corpus) in SETS.items():
            started = time.perf_counter()
            benchmark = load_benchmark(args.bench / benchmark_file, args.bench / corpus)
            prepared = prepare_benchmark(benchmark, chosen, cache=cache, show_progress=False)
            penalty = suggest_continuity_bonus(document_vectors(prepared), factor=1.0)
            entry = table.setdefault(model, {}).setdefault(name, {"mean_penalty": penalty})
            alphas = sorted({*ALPHAS, *(round(f * penalty, 3) for f in FACTORS)})
            for b in BUDGETS:
                names = [f"top{b}", *(f"budget{b}_a{a:g}" for a in alphas),
                         *(f"budget{b}_l{lam:g}" for lam in LAMBDAS)]  # fmt: skip
                runs = run_methods(prepared, {n: create_method(n, b) for n in names}, b,
                                   count_tokens=False)  # fmt: skip
                for method, (_, scores) in runs.items():
                    entry[method] = [float(scores.recall[prepared.fragmented].mean()),
                                     float(scores.recall.mean())]  # fmt: skip
            print(f"{model} {name}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
            if args.out:
                args.out.write_text(json.dumps(table, indent=1) + "\n")
    return table


def gain(entry: dict, method: str, b: int, group: int = 0) -> float:
    """Points over top-B (group 0: fragmented queries, 1: all)."""
    return 100 * (entry[method][group] - entry[f"top{b}"][group])


def mean_gain(entry: dict, alpha: float) -> float:
    return float(np.mean([gain(entry, f"budget{b}_a{alpha:g}", b) for b in BUDGETS]))


def report(table: dict) -> None:
    default = FIXED_BONUS
    print("## smoothness: fragmented recall, default and ± 25 % of one knob (points over top-B)")
    knobs = {f"α {a:g}": f"a{a:g}" for a in (default * 0.75, default * 1.25)}
    knobs |= {f"λ {x:g}": f"l{x:g}" for x in LAMBDAS}
    drops: list[str] = []
    for model, sets in table.items():
        for name, entry in sets.items():
            print(f"\n{model} {name}: B | default | " + " | ".join(knobs))
            for b in BUDGETS:
                base = gain(entry, f"budget{b}_a{default:g}", b)
                cells = []
                for label, suffix in knobs.items():
                    value = gain(entry, f"budget{b}_{suffix}", b)
                    cells.append(f"{value:+.1f}")
                    if base - value > 1.0:
                        drops.append(f"{model} {name} B={b} {label}: {value - base:+.1f}")
                print(f"  {b:>2} | {base:+.1f} | " + " | ".join(cells))
    print("\ndrops over 1 point:" if drops else "\nno drop over 1 point")
    for drop in drops:
        print(" ", drop)

    print("\n## leave one set out: factor fitted on the other two sets, both models")
    print("(mean fragmented gain over B, points)")
    names = list(next(iter(table.values())))
    for held in names:
        train = [n for n in names if n != held]
        factor = max(FACTORS, key=lambda f: np.mean([
            mean_gain(table[m][n], round(f * table[m][n]["mean_penalty"], 3))
            for m in table for n in train]))  # fmt: skip
        for model in table:
            entry = table[model][held]
            alpha = round(factor * entry["mean_penalty"], 3)
            best = max(ALPHAS, key=lambda a: mean_gain(entry, a))
            print(
                f"{held} {model}: factor {factor:g} -> α {alpha:g}: {mean_gain(entry, alpha):+.2f}"
                f" | best α {best:g} with labels {mean_gain(entry, best):+.2f}"
                f" | default α {default:g} {mean_gain(entry, default):+.2f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bench", type=Path, default=Path("/work/shared/bench"))
    parser.add_argument("--cache-dir", default=os.environ.get("SCAR_CACHE_DIR"))
    parser.add_argument("--out", type=Path, help="write the means here (JSON)")
    parser.add_argument("--load", type=Path, help="report an earlier --out file")
    args = parser.parse_args()
    report(json.loads(args.load.read_text()) if args.load else measure(args))


if __name__ == "__main__":
    main()
