"""Recall of a hybrid first stage (BM25 plus dense, fused as LangChain's EnsembleRetriever does)
with and without SCAR at the same number of chunks B, on the dev sets, in both scopes::

    python benchmarks/hybrid_first_stage.py --bench /work/shared/bench \
        --cache-dir ~/.cache/scar-dev --out benchmarks/results/hybrid_first_stage.json
    python benchmarks/hybrid_first_stage.py --load benchmarks/results/hybrid_first_stage.json

Methods at each B: ``denseB`` (plain top-B by cosine), ``hybridB`` (BM25 over the query's scope
and the dense ranking, each B deep, fused by weighted reciprocal rank with EnsembleRetriever's
defaults, c = 60 and equal weights, cut to B) and ``hybrid+scarB`` (SCAR's default budget mode,
``SCARRetriever(retriever=hybrid, k=B)``, on the hybrid hits). Setting: bundled all-MiniLM-L6-v2,
500-character chunks without overlap.
"""

from __future__ import annotations

import argparse
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from keep_sweep import SETS  # beside this file
from rank_bm25 import BM25Okapi

from scar_core._selection import Selected, Selection
from scar_core._settings import BudgetSettings
from scar_tools.cache import EmbeddingCache
from scar_tools.eval import embedder_for, load_benchmark, prepare_benchmark, run_methods
from scar_tools.eval.methods import QueryContext
from scar_tools.eval.metrics import summarize

BUDGETS = (3, 5, 7, 10, 12, 15)
SCOPES = ("document", "corpus")
GROUPS = ("fragmented", "all")
RRF_C = 60  # EnsembleRetriever's default constant


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def hybrid_methods(prepared: Any, budget: int) -> dict[str, Any]:
    """``denseB``, ``hybridB`` and ``hybrid+scarB`` over one prepared benchmark."""
    texts = [chunk.text for chunk in prepared.corpus.chunks]

    @cache
    def bm25(rows: tuple[int, ...]) -> BM25Okapi:
        return BM25Okapi([words(texts[r]) for r in rows])

    def fused(context: QueryContext, query_text: str) -> list[str]:
        scope = tuple(sorted(context.ranked.tolist()))
        scores = bm25(scope).get_scores(words(query_text))
        lexical = [scope[i] for i in np.argsort(-scores, kind="stable")[:budget]]
        dense = context.ranked[:budget].tolist()
        fused_score: dict[int, float] = {}
        for ranking in (lexical, dense):
            for rank, row in enumerate(ranking, start=1):
                fused_score[row] = fused_score.get(row, 0.0) + 0.5 / (RRF_C + rank)
        best = sorted(fused_score, key=lambda r: -fused_score[r])[:budget]
        return [context.nodes[r].id for r in best]

    # A method sees the query's vector, not its text: BM25 needs the text.
    text_of = {prepared.query_units[i].tobytes(): q.text for i, q in enumerate(prepared.queries)}

    def query_text(context: QueryContext) -> str:
        return text_of[context.vector.tobytes()]

    def dense(context: QueryContext) -> Selection:
        return as_is(context.head(budget))

    def hybrid(context: QueryContext) -> Selection:
        return as_is(fused(context, query_text(context)))

    def hybrid_scar(context: QueryContext) -> Selection:
        return context.select(fused(context, query_text(context)), BudgetSettings(k=budget))

    return {f"dense{budget}": dense, f"hybrid{budget}": hybrid, f"hybrid+scar{budget}": hybrid_scar}


def as_is(hits: list[str]) -> Selection:
    """The hits as the first stage returned them, each its own passage."""
    chosen = tuple(Selected(h, "hit", h, rank, 0.0) for rank, h in enumerate(hits))
    return Selection(chosen, tuple((h,) for h in hits))


def measure(bench: Path, cache_dir: str | None) -> dict[str, Any]:
    embedder = embedder_for(None)
    vector_cache = EmbeddingCache(cache_dir)
    results: dict[str, Any] = {}
    for name, (queries, corpus) in SETS.items():
        benchmark = load_benchmark(bench / queries, bench / corpus)
        for scope in SCOPES:
            prepared = prepare_benchmark(benchmark, embedder, scope=scope, cache=vector_cache)
            methods = {n: m for b in BUDGETS for n, m in hybrid_methods(prepared, b).items()}
            runs = run_methods(prepared, methods, max(BUDGETS), count_tokens=False)
            results[f"{name}/{scope}"] = {
                method: {
                    group: summarize(runs[method][1].subset(prepared.group_mask(group))).as_dict()
                    for group in GROUPS
                }
                for method in methods
            }
            print(f"measured {name} ({scope})", flush=True)
    return results


def render(results: dict[str, Any]) -> str:
    lines = []
    for group in GROUPS:
        lines += [f"\n{group} queries (recall)\n",
                  "| set | scope | B | dense top-B | hybrid top-B | hybrid + SCAR | Δ |",
                  "|---|---|---:|---:|---:|---:|---:|"]  # fmt: skip
        for key, table in results.items():
            name, scope = key.split("/")
            for b in BUDGETS:
                dense, hybrid, scar = (
                    table[f"{m}{b}"][group]["recall"] for m in ("dense", "hybrid", "hybrid+scar")
                )
                lines.append(f"| {name} | {scope} | {b} | {dense:.3f} | {hybrid:.3f} | "
                             f"{scar:.3f} | {100 * (scar - hybrid):+.1f} |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bench", type=Path, help="the benchmark folder (LegalBench-RAG, paper4)")
    parser.add_argument("--cache-dir", help="embedding cache")
    parser.add_argument("--out", type=Path, help="write the results as JSON")
    parser.add_argument("--load", type=Path, help="print saved results")
    args = parser.parse_args()
    if args.load:
        results = json.loads(args.load.read_text())
    else:
        if args.bench is None:
            parser.error("--bench is required unless --load is given")
        results = measure(args.bench, args.cache_dir)
        if args.out:
            args.out.write_text(json.dumps(results, indent=1))
    print(render(results))


if __name__ == "__main__":
    main()
