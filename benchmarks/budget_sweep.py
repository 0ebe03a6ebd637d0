"""Recall against the budget B on the dev sets, and issue 36's goals for each model and scope.

For every dev set and B, runs ``topB``, ``budgetB`` (the shipped default, ``SCARRetriever(k=B)``),
``prevnextB`` (LlamaIndex's ``PrevNextNodePostprocessor(num_nodes=1, mode="both")`` over the
``ceil(B/3)`` best, cut to B) and dsRAG's RSE (``balanced`` preset) over the B hits budget mode
sees. With the bundled MiniLM in document scope it also runs RSE's other presets, a grid of
``irrelevant_chunk_penalty`` x ``decay_rate`` and, for reference, RSE over dsRAG's own search depth
of 200; with another model, budget mode at the fixed bonuses ``--alphas`` and at the one
``suggest_continuity_bonus`` gives each corpus. Then it prints the tables and, for each model and
scope (and over both scopes when both are loaded), the goals with their gaps:

* never worse: all-query recall of ``budgetB`` minus the better of ``topB`` and ``prevnextB``, the
  worst over sets and B (goal >= -0.5 points);
* fragmented gain: for B >= 5, the mean over sets of fragmented recall minus the best of the
  means of ``topB``, ``prevnextB`` and ``rseB`` (goal >= +2 points);
* monotone: the smallest step of mean recall as B grows (goal >= 0).

::

    python benchmarks/budget_sweep.py --cache-dir /root/.cache/scar-dev \
        --out benchmarks/results/budget_sweep_minilm.json
    python benchmarks/budget_sweep.py --cache-dir /root/.cache/scar-dev --scope corpus \
        --out benchmarks/results/budget_sweep_minilm_corpus.json
    SCAR_M2V_DIR=/root/.cache/scar-dev/m2v-minilm python benchmarks/budget_sweep.py --model m2v \
        --cache-dir /root/.cache/scar-dev --out benchmarks/results/budget_sweep_m2v.json
    python benchmarks/budget_sweep.py --load benchmarks/results/budget_sweep_minilm.json \
        --load benchmarks/results/budget_sweep_minilm_corpus.json

``--model``: omitted, the bundled MiniLM; ``m2v``, the model2vec model distilled by
``benchmarks/distill_model2vec.py``; else a sentence-transformers folder or any ``scar eval
--model`` spec. Setting: 500-character chunks without overlap (the ``scar eval`` defaults).
``benchmarks/never_worse.py`` runs the same goals over every model, scope and stress condition.
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
from never_worse import GOAL_BARS, bars_text, goals

from scar_tools.cache import EmbeddingCache
from scar_tools.calibration import suggest_continuity_bonus
from scar_tools.eval import (
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


def names_for(b: int, model: str | None, alphas: list[float], scope: str) -> list[str]:
    """What runs at budget ``b``: the methods of issue 36's goals for every model and scope; the
    RSE grid with MiniLM in document scope; fixed bonuses with another model."""
    goal_methods = [f"top{b}", f"budget{b}", f"prevnext{b}", f"rse{b}_balanced"]
    if model:
        return [*goal_methods, *(f"budget{b}_a{a:g}" for a in alphas)]
    if scope == "corpus":
        return goal_methods
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
        prepared = prepare_benchmark(
            benchmark, embedder, scope=args.scope, cache=cache, show_progress=False
        )
        masks = {g: prepared.group_mask(g) for g in GROUPS}
        suggested = suggest_continuity_bonus(document_vectors(prepared))
        table.setdefault(name, {})["_n"] = {g: int(m.sum()) for g, m in masks.items()}
        model = Path(args.model).name if args.model and Path(args.model).is_dir() else args.model
        table[name]["_model"], table[name]["_scope"] = model or "minilm", args.scope
        table[name]["_suggested"] = suggested
        alphas = [float(a) for a in args.alphas.split(",") if a] + [suggested]
        for b in budgets:
            for method in names_for(b, args.model, alphas, args.scope):
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


def describe(table: dict) -> tuple[str, str]:
    """The model and scope a table was measured with (files from before they were recorded:
    document scope, MiniLM when they hold the RSE grid, else model2vec)."""
    first = table[next(iter(table))]
    model = first.get("_model") or ("minilm" if "rse3_precision" in first else "m2v")
    return model, first.get("_scope", "document")


def goal_table(tables: list[dict], budgets: list[int]) -> dict:
    """``scope -> set -> B -> method -> group -> recall``, what ``never_worse.goals`` reads."""
    out: dict = {}
    for table in tables:
        _, scope = describe(table)
        for name, entry in table.items():
            out.setdefault(scope, {})[name] = {
                str(b): {
                    short: {g: entry[f"{short}{b}{suffix}"][g]["recall"] for g in GROUPS}
                    for short, suffix in (("top", ""), ("budget", ""), ("prevnext", ""),
                                          ("rse", "_balanced"))
                    if f"{short}{b}{suffix}" in entry
                }
                for b in budgets
            }  # fmt: skip
    return out


def print_goals(tables: list[dict], budgets: list[int]) -> None:
    """Issue 36's goals for the default, with their gaps: for each scope, then over all of them."""
    model = describe(tables[0])[0]
    table = goal_table(tables, budgets)
    scopes = [[scope] for scope in table] + ([list(table)] if len(table) > 1 else [])
    print(f"\n## goals, {model} (points: {bars_text()})")
    for chosen in scopes:
        part = {scope: table[scope] for scope in chosen}
        try:
            gaps = goals(part, "budget", budgets)
        except KeyError as missing:
            print(f"{' + '.join(chosen)}: {missing} not measured; run again to measure it")
            continue
        verdicts = [
            f"{goal.replace('_', ' ')} {gaps[goal]:+.2f} ({gaps.get(f'{goal}_at', '')}) "
            + ("met" if gaps[goal] >= bar else f"MISSED by {bar - gaps[goal]:.2f}")
            for goal, bar in GOAL_BARS.items()
        ]
        print(f"{' + '.join(chosen)}: " + "; ".join(verdicts))


def report(table: dict, budgets: list[int]) -> None:
    """The recall tables of one model and scope, then the README and docs tables (MiniLM grid)."""
    sets = list(table)
    grid = any(k.startswith("rse3_p") for k in table[sets[0]])
    for name in sets:
        n = table[name]["_n"]
        print(f"\n## {name} (fragmented {n['fragmented']}, all {n['all']})")
        alphas = sorted({m[1] for k in table[name] if (m := re.fullmatch(r"budget\d+_a(.+)", k))},
                        key=float)  # fmt: skip
        cols = ["top", "budget", "Δ", "prevnext", "rse_balanced", *(f"a{a}" for a in alphas)]
        if grid:
            best, deep = best_rse(table, name, budgets), best_rse(table, name, budgets, True)
            print(f"best RSE over the B hits: rseB{best}; over 200: rseB{deep}")
            cols += [f"rse{best}", "rse_precision", "rse_find_all", f"rse{deep}"]
        if alphas:
            print(f"suggest_continuity_bonus on this corpus: {table[name]['_suggested']:g}")
        for group in GROUPS:
            print(f"\n{group}: B | " + " | ".join(cols))
            for b in budgets:
                top, ours = r(table, name, f"top{b}", group), r(table, name, f"budget{b}", group)
                cells = [f"{top:.3f}", f"{ours:.3f}", f"{100 * (ours - top):+.1f}"]
                others = [f"prevnext{b}", f"rse{b}_balanced", *(f"budget{b}_a{a}" for a in alphas)]
                if grid:
                    others += [f"rse{b}{best}", f"rse{b}_precision", f"rse{b}_find_all",
                               f"rse{b}{deep}"]  # fmt: skip
                cells += [f"{r(table, name, m, group):.3f}" if m in table[name] else "-"
                          for m in others]  # fmt: skip
                print(f"  {b:>2} | " + " | ".join(cells))
    if grid:
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
    parser.add_argument("--scope", choices=("document", "corpus"), default="document",
                        help="search the query's document (default) or the whole corpus")  # fmt: skip
    parser.add_argument("--alphas", default="0.1,0.3", help="extra continuity bonuses (m2v)")
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--out", type=Path, help="write the means here (JSON)")
    parser.add_argument("--only", help="measure only these methods (regex), merged into --out")
    parser.add_argument("--load", type=Path, action="append", help="report earlier --out files")
    args = parser.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]
    tables = [json.loads(path.read_text()) for path in args.load] if args.load else [measure(args)]
    for table in tables:
        model, scope = describe(table)
        print(f"\n# {model}, {scope} scope")
        report(table, budgets)
    for model in dict.fromkeys(describe(t)[0] for t in tables):
        print_goals([t for t in tables if describe(t)[0] == model], budgets)


if __name__ == "__main__":
    main()
