"""Recall against the budget B on the dev sets: top-B, the shipped default, dsRAG's RSE, LlamaIndex.

For every dev set and B, runs ``topB``, ``budgetB`` (the shipped default, ``SCARRetriever(k=B)``),
``prevnextB`` (LlamaIndex's ``PrevNextNodePostprocessor(num_nodes=1, mode="both")`` over the
``ceil(B/3)`` best, cut to B), dsRAG's RSE with its three presets and a grid of
``irrelevant_chunk_penalty`` x ``decay_rate`` (other parameters from the ``balanced`` preset, as
dsRAG fills them) over the B hits budget mode sees, and for reference RSE over dsRAG's own
search depth of 200, and prints the tables and the gaps to the goals::

    python benchmarks/budget_sweep.py --cache-dir /root/.cache/scar-dev \
        --out benchmarks/results/budget_sweep_minilm.json
    SCAR_M2V_DIR=/root/.cache/scar-dev/m2v-minilm python benchmarks/budget_sweep.py \
        --model m2v --cache-dir /root/.cache/scar-dev --out benchmarks/results/budget_sweep_m2v.json
    python benchmarks/budget_sweep.py --load benchmarks/results/budget_sweep_minilm.json

With ``--model m2v`` (the model2vec model distilled by ``benchmarks/distill_model2vec.py``) only
top-B and budget mode at several continuity bonuses run, the one ``suggest_continuity_bonus``
gives on each corpus among them. Setting: 500-character chunks without
overlap, retrieval within the query's document (the ``scar eval`` defaults).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

import numpy as np
from keep_sweep import SETS, dev_embedder, document_vectors  # the dev sets, as in --bench

from scar_core import suggest_continuity_bonus
from scar_core.cache import EmbeddingCache
from scar_core.eval import (
    create_method,
    load_benchmark,
    prepare_benchmark,
    run_methods,
)

PRESETS = ("balanced", "precision", "find_all")
PENALTIES = (0.05, 0.1, 0.18, 0.2, 0.3, 0.4)  # dsRAG's get_chunk_value docstring, and presets
DECAYS = (20, 30, 200)  # get_relevance_values' default, the presets'
DEEP = ("p0.05_d20", "p0.1_d20", "p0.2_d20")  # the grid's best at depth 200 (previous sweep)
GROUPS = ("fragmented", "all")


def rse_names(b: int, deep: bool = False) -> list[str]:
    """RSE over the B hits budget mode sees; ``deep``: over dsRAG's own 200 (presets, DEEP)."""
    if deep:
        return [f"rse{b}_{c}_h200" for c in (*PRESETS, *DEEP)]
    grid = [f"rse{b}_p{p:g}_d{d}" for p in PENALTIES for d in DECAYS]
    return [f"rse{b}_{preset}" for preset in PRESETS] + grid


def names_for(b: int, model: str | None, alphas: list[float]) -> list[str]:
    if model:
        return [f"top{b}", f"budget{b}", *(f"budget{b}_a{a:g}" for a in alphas)]
    return [f"top{b}", f"budget{b}", f"prevnext{b}", *rse_names(b), *rse_names(b, deep=True)]


def measure(args: argparse.Namespace) -> dict:
    import dsrag.rse

    counted: list[int] = []
    original = dsrag.rse.get_best_segments

    def counting(*a, **k):  # the segments' length before the fill
        segments, scores = original(*a, **k)
        counted.append(sum(e - s for s, e in segments))
        return segments, scores

    dsrag.rse.get_best_segments = counting
    embedder = dev_embedder(args.model)
    cache = EmbeddingCache(args.cache_dir)
    budgets = [int(b) for b in args.budgets.split(",")]
    table: dict = json.loads(args.out.read_text()) if args.only and args.out.exists() else {}
    for name in args.sets.split(","):
        started = time.perf_counter()
        benchmark_file, corpus = SETS[name]
        benchmark = load_benchmark(args.bench / benchmark_file, args.bench / corpus)
        prepared = prepare_benchmark(benchmark, embedder, cache=cache, show_progress=False)
        masks = {g: prepared.group_mask(g) for g in GROUPS}
        suggested = suggest_continuity_bonus(document_vectors(prepared))
        table.setdefault(name, {})["_n"] = {g: int(m.sum()) for g, m in masks.items()}
        table[name]["_suggested"] = suggested
        alphas = [float(a) for a in args.alphas.split(",")] + [suggested]
        for b in budgets:
            for method in names_for(b, args.model, alphas):
                if args.only and not re.fullmatch(args.only, method):
                    continue
                counted.clear()
                scores = run_methods(prepared, {method: create_method(method, b)}, b,
                                     count_tokens=False)[method][1]  # fmt: skip
                table[name][method] = {
                    g: {"recall": float(scores.recall[m].mean()),
                        "chunks": float(scores.chunks[m].mean())}
                    for g, m in masks.items()
                }  # fmt: skip
                if counted:
                    table[name][method]["segment_chunks"] = float(np.mean(counted))
        print(f"{name}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(table, indent=1) + "\n")
    return table


def r(table: dict, name: str, method: str, group: str) -> float:
    return table[name][method][group]["recall"]


def best_rse(table: dict, name: str, budgets: list[int], deep: bool = False) -> str:
    """The RSE configuration with the best mean fragmented recall over the budgets (a suffix)."""
    suffixes = [n[len("rse3") :] for n in rse_names(3, deep)]
    return max(
        suffixes,
        key=lambda s: np.mean([r(table, name, f"rse{b}{s}", "fragmented") for b in budgets]),
    )


def report(table: dict, budgets: list[int]) -> None:
    sets = list(table)
    minilm = any(k.startswith("rse") for k in table[sets[0]])
    gaps: list[str] = []
    for name in sets:
        n = table[name]["_n"]
        print(f"\n## {name} (fragmented {n['fragmented']}, all {n['all']})")
        if minilm:
            best, deep = best_rse(table, name, budgets), best_rse(table, name, budgets, True)
            print(f"best RSE over the B hits: rseB{best}; over 200: rseB{deep}")
            cols = ["top", "budget", "Δ", f"rse{best}", *(f"rse_{p}" for p in PRESETS),
                    f"rse{deep}", "prevnext"]  # fmt: skip
        else:
            alphas = sorted({k.split("_a")[1] for k in table[name] if "_a" in k}, key=float)
            print(f"suggest_continuity_bonus on this corpus: {table[name]['_suggested']:g}")
            cols = ["top", "budget", "Δ", *(f"a{a}" for a in alphas)]
        for group in GROUPS:
            print(f"\n{group}: B | " + " | ".join(cols))
            for b in budgets:
                top, ours = r(table, name, f"top{b}", group), r(table, name, f"budget{b}", group)
                cells = [f"{top:.3f}", f"{ours:.3f}", f"{100 * (ours - top):+.1f}"]
                if minilm:
                    for method in [f"rse{b}{best}", *(f"rse{b}_{p}" for p in PRESETS),
                                   f"rse{b}{deep}"]:  # fmt: skip
                        entry = table[name][method]
                        cells.append(
                            f"{entry[group]['recall']:.3f} [{entry['segment_chunks']:.1f}]"
                        )
                    entry = table[name][f"prevnext{b}"][group]
                    cells.append(f"{entry['recall']:.3f} ({entry['chunks']:.2f})")
                else:
                    cells += [f"{r(table, name, f'budget{b}_a{a}', group):.3f}" for a in alphas]
                print(f"  {b:>2} | " + " | ".join(cells))
    if minilm:
        print("\n[x.x] = mean chunks RSE's segments held before the fill; "
              "(x.xx) = mean chunks returned")  # fmt: skip

    def ours(s: str, b: int) -> str:  # the default; with another model, the suggested bonus
        return f"budget{b}" if minilm else f"budget{b}_a{table[s]['_suggested']:g}"

    print("\n## goals (points; a gap is how far a goal is missed)")
    if not minilm:
        print(
            "(this model: budget mode at the bonus suggest_continuity_bonus gives on each corpus)"
        )
    for b in budgets:
        mean = np.mean([r(table, s, ours(s, b), "fragmented") - r(table, s, f"top{b}", "fragmented")
                        for s in sets])  # fmt: skip
        line = f"B={b:>2}: fragmented mean over sets {'default' if minilm else 'suggested'} - top {100 * mean:+.1f}"
        if mean < 0.05:
            gaps.append(
                f"B={b}: mean fragmented gain {100 * mean:+.1f} < +5 (gap {100 * (0.05 - mean):.1f})"
            )
        for s in sets:
            frag = r(table, s, ours(s, b), "fragmented") - r(table, s, f"top{b}", "fragmented")
            every = r(table, s, ours(s, b), "all") - r(table, s, f"top{b}", "all")
            line += f" | {s} frag {100 * frag:+.1f} all {100 * every:+.1f}"
            if b >= 5 and frag < 0.02:
                gaps.append(
                    f"B={b} {s}: fragmented gain {100 * frag:+.1f} < +2 (gap {100 * (0.02 - frag):.1f})"
                )
            if every < 0:
                gaps.append(f"B={b} {s}: all queries {100 * every:+.1f} below top-B")
            if minilm:
                anchors = [
                    f"rse{b}{best_rse(table, s, budgets)}",
                    *(f"rse{b}_{p}" for p in PRESETS),
                ]
                for method in anchors:
                    d = r(table, s, f"budget{b}", "fragmented") - r(table, s, method, "fragmented")
                    if d < 0:
                        gaps.append(f"B={b} {s}: default below {method} by {-100 * d:.1f}")
                deep = f"rse{b}{best_rse(table, s, budgets, True)}"
                d = r(table, s, f"budget{b}", "fragmented") - r(table, s, deep, "fragmented")
                if d < 0:
                    gaps.append(
                        f"B={b} {s}: (reference, not a goal) below {deep} by {-100 * d:.1f}"
                    )
        print(line)
    print("\nmissed:" if gaps else "\nevery goal met")
    for gap in gaps:
        print(" ", gap)
    if minilm:
        readme_table(table)
        docs_table(table, budgets)


#: The README's names of the sets, and the budgets its table shows.
README_SETS = {"privacy_qa": "PrivacyQA", "contractnli": "ContractNLI", "paper4_dev": "paper4"}
README_BUDGETS = (5, 10)


def readme_table(table: dict) -> None:
    """Print the README's results table."""
    print("\n## README table\n")
    print("| set | B | fragmented: top-B | SCAR | all queries: top-B | SCAR |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, label in README_SETS.items():
        if name not in table:
            continue
        for i, b in enumerate(README_BUDGETS):
            first = f"{label} ({table[name]['_n']['all']})" if i == 0 else ""
            cells = [
                f"{r(table, name, f'{m}{b}', g):.3f}" for g in GROUPS for m in ("top", "budget")
            ]
            print(f"| {first} | {b} | " + " | ".join(cells) + " |")


def docs_table(table: dict, budgets: list[int]) -> None:
    """Print docs/results.md's comparison: each method's recall, both groups, every B."""
    for group in GROUPS:
        print(f"\n## docs table, {group} queries\n")
        print("| set | B | top-B | SCAR | Δ | RSE, B hits | RSE, 200 hits | prev/next |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for name, label in README_SETS.items():
            if name not in table:
                continue
            best, deep = best_rse(table, name, budgets), best_rse(table, name, budgets, True)
            for i, b in enumerate(budgets):
                top, ours = r(table, name, f"top{b}", group), r(table, name, f"budget{b}", group)
                others = [r(table, name, m, group)
                          for m in (f"rse{b}{best}", f"rse{b}{deep}", f"prevnext{b}")]  # fmt: skip
                cells = [f"{top:.3f}", f"{ours:.3f}", f"{100 * (ours - top):+.1f}",
                         *(f"{v:.3f}" for v in others)]  # fmt: skip
                print(f"| {label if i == 0 else ''} | {b} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bench", type=Path, default=Path("/work/shared/bench"))
    parser.add_argument("--cache-dir", default=os.environ.get("SCAR_CACHE_DIR"))
    parser.add_argument("--model", help="omitted: bundled MiniLM; m2v: $SCAR_M2V_DIR; else --model")
    parser.add_argument("--budgets", default="3,5,7,10,12,15")
    parser.add_argument("--alphas", default="0.1,0.3", help="extra continuity bonuses (m2v)")
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--out", type=Path, help="write the means here (JSON)")
    parser.add_argument("--only", help="measure only these methods (regex), merged into --out")
    parser.add_argument("--load", type=Path, action="append", help="report earlier --out files")
    args = parser.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]
    if args.load:
        table = {}
        for path in args.load:
            table |= json.loads(path.read_text())
    else:
        table = measure(args)
    report(table, budgets)


if __name__ == "__main__":
    main()
