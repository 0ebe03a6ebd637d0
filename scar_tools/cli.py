"""The ``scar`` command: ``scar eval`` and ``scar demo``.

Importing this module loads argparse only; each command imports what it needs when it runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["build_parser", "main"]

_EVAL_DESCRIPTION = """\
Measure SCAR against baselines on a benchmark with gold evidence spans, and write
OUT/results.json (means per group, paired bootstrap, sweep), OUT/report.md (tables),
OUT/per_query.jsonl (every query's scores) and OUT/pareto.png (recall against chunks).

Data formats (unknown keys are ignored; spans are half-open [start, end) character ranges):
  LegalBench-RAG: BENCHMARK = {"tests": [{"query": str, "snippets": [{"file_path": str,
      "span": [start, end], "answer": str (optional)}]}]}; file_path is relative to the
      --corpus folder and must stay inside it; files are read as UTF-8 with universal newlines.
  JSONL: BENCHMARK = queries.jsonl, one {"query": str, "snippets": [{"doc_id": str,
      "span": [start, end]}]} per line; --corpus = corpus.jsonl (or a folder holding it), one
      {"id": str, "text": str} per line.
Without BENCHMARK, the sample bundled with the package is evaluated, cut into chunks of 250
characters as `scar demo` cuts it unless --chunk-size is given.

Methods (k is --k; B, W, S, N integers; G, L, A numbers):
  topk, topB         the k (or B) best chunks of the query's scope, e.g. top10
  budgetB            budget mode at B chunks: EXACTLY what SCARRetriever(vectorstore=vs, k=B)
                     returns, i.e. select(q, B best ids, chunks, BudgetSettings(k=B))
  budgetB_aA_sS_wW_lL research variants: a fixed continuity bonus A (default: each query's own),
                     S kept hits (default_keep(B)),
                     window W (2), lambda L (0.1); each part optional, e.g. budget10_a0.3
  default            the shipped default at --k: budget mode, BudgetSettings(k=k)
  staticW            the k best chunks plus every chunk up to W steps away, e.g. static1
  scarW, scarW_gG_lL the paper's rule: PaperSettings(k, window=W, gamma=G (0.8), lambda_=L (0.1)),
                     e.g. scar1, scar1_g0.5, scar1_l0
  parent, parentN    each of the k best chunks with its parent block (2000 or N characters)
  topk_matched       per query, top-k' with k' = the chunks scar1 returned
  topk_matched_NAME  the same, matched to method NAME, e.g. topk_matched_scar2
  rseB_PRESET_pP_dD_hH dsRAG's segment extraction at B chunks (extra compare) over the H best
                     (B: the hits budgetB sees), e.g. rse10_precision, rse10_p0.2_d20_h200
  prevnextB          LlamaIndex's PrevNextNodePostprocessor(mode="both") on ceil(B/3) hits, cut to B
  toptokT            the best chunks in rank order until the next one does not fit T tokens
  budgettokT_hH      budget mode at T tokens: SCARRetriever(vectorstore=vs, k=H (20), max_tokens=T);
                     both count cl100k_base tokens (else ceil(chars / 4)), e.g. budgettok2000
--budgets adds recall against B (3,5,7,10,12,15 by default) to the report and OUT/budgets.png.

--model: omitted = the bundled all-MiniLM-L6-v2 (offline); st:NAME or NAME = a
sentence-transformers model or folder; openai:NAME (needs OPENAI_API_KEY);
py:MODULE:FACTORY = FACTORY() from an importable module returns your own embedder.
"""

_DEMO_DESCRIPTION = """\
Run SCAR offline on the sample that ships with the package (a payments API reference, a
data-retention policy and a services contract; 15 questions whose evidence mostly crosses chunk
boundaries) with the bundled all-MiniLM-L6-v2. It compares the shipped default, SCARRetriever(k=K)
(budget mode), with plain top-K at the same K, a static ±1 window and the paper's rule (scar1),
one line per question, then the means. --verbose shows each question's chunks and every bid.
"""


def _at_least(minimum: int) -> Any:
    """An argparse type: an integer >= ``minimum`` (argparse names the flag in its error)."""

    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is not valid; it must be >= {minimum}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


def _add_eval(subparsers: Any) -> None:
    from scar_tools.eval.budgets import BUDGET_METHODS, BUDGETS
    from scar_tools.eval.runner import DEFAULT_METHODS

    parser = subparsers.add_parser(
        "eval", help="measure SCAR against baselines on a benchmark with gold spans",
        description=_EVAL_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    add = parser.add_argument
    add("benchmark", nargs="?", metavar="BENCHMARK", help="LegalBench-RAG JSON or queries.jsonl")
    add("--corpus", help="corpus folder, or corpus.jsonl (required with BENCHMARK)")
    add("--format", dest="data_format", choices=("legalbench", "jsonl"), help="default: guessed")
    add("--scope", choices=("document", "corpus"), default="document",
        help="retrieve within the query's documents (default) or the whole corpus")  # fmt: skip
    add(
        "--k",
        type=_at_least(1),
        default=5,
        help="k of topk, staticW, scarW and default (default 5)",
    )
    add("--chunk-size", type=_at_least(1),
        help="characters per chunk (default 500; the bundled sample: 250, as scar demo)")  # fmt: skip
    add("--chunk-overlap", type=_at_least(0), default=0, help="characters (default 0)")
    add("--methods", help=f"comma-separated names (default {','.join(DEFAULT_METHODS)})")
    add("--reference", help="method compared with all others (default: default, else the first)")
    add(
        "--bootstrap",
        type=_at_least(0),
        default=10_000,
        help="resamples; 0 skips it (default 10000)",
    )
    add("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    add("--no-sweep", action="store_true", help="skip the recall-against-chunks sweep and plot")
    add("--no-plot", action="store_true", help="do not draw pareto.png")
    add("--out", default="scar-eval", help="output folder (default ./scar-eval)")
    add("--budgets", nargs="?", const=BUDGETS, type=lambda s: tuple(map(int, s.split(","))),
        help="sweep recall against the budget at these B (default 3,5,7,10,12,15)")  # fmt: skip
    add("--budget-methods", help=f"templates for --budgets (default {','.join(BUDGET_METHODS)})")
    add("--answers", metavar="MODEL", help="also answer each query with this chat model, "
        "openai:NAME, and grade the answers (docs/answers.md)")  # fmt: skip
    add("--base-url", help="OpenAI-compatible server for --answers (vLLM, llama.cpp, Ollama)")
    add("--answers-limit", type=_at_least(1), metavar="N", help="answer only the first N queries")
    add("--answers-methods", metavar="NAMES",
        help="comma-separated (default topB with B = --k, static1, default)")  # fmt: skip
    _add_common(parser, _run_eval)


def _add_common(parser: argparse.ArgumentParser, handler: Any) -> None:
    add = parser.add_argument
    add("--model", help="embedding model (default: the bundled all-MiniLM-L6-v2)")
    add(
        "--cache-dir", help="vector cache (default: $SCAR_CACHE_DIR, else ~/.cache/scar/embeddings)"
    )
    add("--no-cache", action="store_true", help="embed everything, cache nothing")
    add("--no-progress", action="store_true", help="hide the progress bars")
    parser.set_defaults(handler=handler)


def _add_demo(subparsers: Any) -> None:
    from scar_tools.demo import DEMO_CHUNK_SIZE, DEMO_K

    parser = subparsers.add_parser(
        "demo", help="run SCAR offline on the bundled sample and show what it changes",
        description=_DEMO_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    add = parser.add_argument
    add("--k", type=_at_least(1), default=DEMO_K, help=f"K, the budget (default {DEMO_K})")
    add(
        "--chunk-size",
        type=_at_least(1),
        default=DEMO_CHUNK_SIZE,
        help=f"default {DEMO_CHUNK_SIZE}",
    )
    add("--verbose", action="store_true", help="print every question's chunks and bids")
    add("--out", help="also write results.json, report.md and per_query.jsonl to this folder")
    _add_common(parser, _run_demo)


def build_parser() -> argparse.ArgumentParser:
    """Return the parser of the ``scar`` command."""
    from scar_core import __version__

    parser = argparse.ArgumentParser(prog="scar", description="SCAR tools.")
    parser.add_argument("--version", action="version", version=f"scar {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_eval(subparsers)
    _add_demo(subparsers)
    return parser


def _cache(args: argparse.Namespace) -> Any:
    if args.no_cache or (args.command == "demo" and args.cache_dir is None):
        return None  # the demo's 70 texts are embedded in seconds; it writes nothing by default
    from scar_tools.cache import EmbeddingCache

    return EmbeddingCache(directory=args.cache_dir)


def _run_eval(args: argparse.Namespace) -> int:
    from scar_core._errors import DataFormatError
    from scar_tools.demo import DEMO_CHUNK_SIZE, load_sample
    from scar_tools.eval import DEFAULT_METHODS, EvalConfig, embedder_for, load_benchmark
    from scar_tools.eval.answers import answering_from_args
    from scar_tools.eval.budgets import (
        RIVAL_TEMPLATES,
        budget_methods,
        budget_sweep,
        installed_budget_methods,
    )
    from scar_tools.eval.methods import REGISTRY
    from scar_tools.eval.report import write_outputs
    from scar_tools.eval.runner import DEFAULT_CHUNK_SIZE, run_evaluation

    names = [m.strip() for m in (args.methods or "").split(",") if m.strip()]
    chunk_size = args.chunk_size or (
        DEMO_CHUNK_SIZE if args.benchmark is None else DEFAULT_CHUNK_SIZE
    )
    config = EvalConfig(
        scope=args.scope, k=args.k, chunk_size=chunk_size, chunk_overlap=args.chunk_overlap,
        methods=tuple(names) or DEFAULT_METHODS, reference=args.reference,
        n_resamples=args.bootstrap, seed=args.seed, sweep=not args.no_sweep,
    )  # fmt: skip
    templates = [m.strip() for m in (args.budget_methods or "").split(",") if m.strip()]
    if args.budgets and not templates:
        templates, skipped = installed_budget_methods(REGISTRY)
        for reason in skipped:
            print(f"scar eval: --budgets skips {reason}", file=sys.stderr)
    budgeted = args.budgets and budget_methods(args.budgets, templates, REGISTRY)
    if args.benchmark is None and args.corpus is not None:
        raise DataFormatError("--corpus was given without a BENCHMARK file.")
    if args.benchmark is not None and args.corpus is None:
        raise DataFormatError("--corpus is required with a BENCHMARK: a folder, or corpus.jsonl.")
    benchmark = (
        load_sample() if args.benchmark is None
        else load_benchmark(args.benchmark, args.corpus, data_format=args.data_format)
    )  # fmt: skip
    embedder, progress, cache = embedder_for(args.model), not args.no_progress, _cache(args)
    answering = answering_from_args(args, cache.directory if cache else None)
    results = run_evaluation(benchmark, embedder, config, cache=cache, show_progress=progress)
    results.config.update(benchmark_path=args.benchmark, corpus_path=args.corpus, model=args.model)
    if answering is not None:
        answering.run(results, print, show_progress=progress)
    if budgeted:
        results.budgets = budget_sweep(results.prepared, budgeted, args.bootstrap, args.seed)
    written = write_outputs(results, args.out, plot=not args.no_plot)
    for group in ("fragmented", "all"):
        print(f"\n{group} (n = {int(results.prepared.group_mask(group).sum())})")
        print(f"  {'method':<24}{'recall':>8}{'chars':>8}{'chunks':>8}{'tokens':>8}")
        for name, s in results.summary(group).items():
            print(
                f"  {name:<24}{s.recall:>8.3f}{s.char_recall:>8.3f}{s.chunks:>8.2f}{s.tokens:>8.0f}"
            )
    if results.budgets and (verdict := results.budgets.get("verdict")):
        gaps = ", ".join(f"B={b} {100 * row['gap']:+.1f} ({row['against']})"
                         for b, row in verdict.items())  # fmt: skip
        rivals = " and ".join(RIVAL_TEMPLATES)
        print(f"\nSCAR minus the better of {rivals}, all queries (points): {gaps}")
    print(f"\nwrote {', '.join(str(p) for p in written.values())}")
    return 0


def _run_demo(args: argparse.Namespace) -> int:
    from scar_tools.demo import format_demo, run_demo
    from scar_tools.eval import embedder_for, write_outputs

    results = run_demo(args.k, args.chunk_size, embedder=embedder_for(args.model),
                       cache=_cache(args), show_progress=not args.no_progress)  # fmt: skip
    print(format_demo(results, verbose=args.verbose))
    if args.out:
        print(f"wrote {', '.join(map(str, write_outputs(results, args.out, plot=False).values()))}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``scar`` command and return its exit status.

    Errors a user can fix (missing files, malformed data, bad settings, a missing extra) are
    printed on stderr without a traceback, with exit status 2.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # argparse has printed the usage and what is wrong, or the help
        return stop.code if isinstance(stop.code, int) else 2
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    if args.model is None:  # the bundled model is a folder: never let a library reach the Hub
        for variable in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_PROGRESS_BARS"):
            os.environ.setdefault(variable, "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from scar_core._errors import ScarError

    started = time.perf_counter()
    try:
        status = int(args.handler(args))
    except (ScarError, OSError) as exc:
        print(f"scar {args.command}: error: {exc}", file=sys.stderr)
        return 2
    if not getattr(args, "no_progress", False):
        print(f"done in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return status


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
