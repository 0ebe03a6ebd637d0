"""The ``scar eval`` subcommand.

Importing this module loads only argparse; the evaluation (and its heavy dependencies) is imported
when the command runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["register", "run_eval_command"]

_DESCRIPTION = """\
Measure SCAR against the baselines on a benchmark with gold evidence spans, and write
OUT_DIR/results.json (means per group, bootstrap, sweep), OUT_DIR/report.md (tables),
OUT_DIR/per_query.jsonl (every query's scores) and OUT_DIR/pareto.png (recall against chunks).

Data formats (unknown keys are ignored; spans are half-open [start, end) character ranges):
  LegalBench-RAG: BENCHMARK_JSON = {"tests": [{"query": str, "snippets": [{"file_path": str,
      "span": [start, end], "answer": str (optional)}]}]}, with file_path relative to the
      --corpus folder; files are read as UTF-8 with universal newlines.
  JSONL: BENCHMARK = queries.jsonl, one {"query": str, "snippets": [{"doc_id": str,
      "span": [start, end], "answer": str (optional)}]} per line; --corpus = corpus.jsonl (or a
      folder holding it), one {"id": str, "text": str} per line.
Without BENCHMARK, the sample bundled with the package is evaluated.

Methods: topk, topB (e.g. top10), staticW (static1, static2), scarW (scar1, scar2),
scarW_gG_lL (e.g. scar1_g0.5, scar1_lambda0), parent (each seed with its 2,000-character
parent block; parentN for N characters), rerank (skipped when no cross-encoder
is available offline), topk_matched (top-k' with k' = chunks scar1 returned per query),
topk_matched_NAME, and any method registered with scar_core.eval.register_method.
"""


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``eval`` subcommand to the ``scar`` command's subparsers.

    Args:
        subparsers: What ``ArgumentParser.add_subparsers`` returned.

    Returns:
        The subcommand's parser; its ``handler`` default is :func:`run_eval_command`.
    """
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "eval",
        help="measure SCAR against baselines on a benchmark with gold spans",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "benchmark",
        nargs="?",
        metavar="BENCHMARK",
        help="LegalBench-RAG benchmark JSON or queries.jsonl (omit for the bundled sample)",
    )
    parser.add_argument("--corpus", metavar="CORPUS", help="corpus folder, or corpus.jsonl")
    parser.add_argument(
        "--format",
        dest="data_format",
        choices=("legalbench", "jsonl"),
        help="data format (default: detected from the file names)",
    )
    parser.add_argument(
        "--scope",
        choices=("document", "corpus"),
        default="document",
        help="retrieve within the query's document (default) or the whole corpus",
    )
    parser.add_argument("--k", type=int, default=5, help="chunks retrieved (default 5)")
    parser.add_argument("--chunk-size", type=int, default=500, help="characters (default 500)")
    parser.add_argument("--chunk-overlap", type=int, default=0, help="characters (default 0)")
    parser.add_argument(
        "--methods",
        help="comma-separated method names (default: topk,static1,static2,scar1,scar2,"
        "scar1_lambda0,parent,rerank,topk_matched)",
    )
    parser.add_argument(
        "--reference", default="scar1", help="method compared with all others (default scar1)"
    )
    parser.add_argument(
        "--model",
        help="embedding model: a sentence-transformers name or folder, or openai:MODEL "
        "(default: the bundled all-MiniLM-L6-v2, offline)",
    )
    parser.add_argument(
        "--cache-dir",
        help="folder of the vector cache (default: $SCAR_CACHE_DIR, else ~/.cache/scar)",
    )
    parser.add_argument(
        "--no-cache", action="store_true", help="keep vectors in memory only for this run"
    )
    parser.add_argument(
        "--bootstrap", type=int, default=10_000, help="bootstrap resamples (default 10000)"
    )
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    parser.add_argument("--no-sweep", action="store_true", help="skip the γ/λ/k/w sweep")
    parser.add_argument(
        "--curve",
        action="append",
        default=[],
        metavar="LABEL=NAME,NAME,...",
        help="add a curve of methods to the sweep and plot, e.g. 'matched=top6,top8,top10' "
        "(repeatable)",
    )
    parser.add_argument("--no-plot", action="store_true", help="do not draw pareto.png")
    parser.add_argument(
        "--no-progress", action="store_true", help="hide the progress bars (they go to stderr)"
    )
    parser.add_argument("--out", default="scar-eval", help="output folder (default ./scar-eval)")
    parser.set_defaults(handler=run_eval_command)
    return parser


def _print_summary(payload: dict[str, Any]) -> None:
    for group in ("fragmented", "all"):
        data = payload["groups"][group]
        print(f"\n{group} (n = {data['n']})")
        print(f"  {'method':<22}{'recall':>8}{'chars':>8}{'chunks':>8}{'tokens':>9}")
        for name, summary in data["methods"].items():
            if summary["recall"] is None:
                continue
            tokens = summary["tokens"]
            print(
                f"  {name:<22}{summary['recall']:>8.3f}{summary['char_recall']:>8.3f}"
                f"{summary['chunks']:>8.2f}{tokens if tokens is None else round(tokens):>9}"
            )
    for name, why in payload["skipped"].items():
        print(f"\nskipped {name}: {why}")


def run_eval_command(args: argparse.Namespace) -> int:
    """Run ``scar eval`` with parsed arguments; returns the exit status.

    Errors the user can fix (missing files, malformed data, bad settings) are printed on stderr
    without a traceback, with exit status 2.
    """
    from scar_core.errors import ScarError

    started = time.perf_counter()
    try:
        payload, written = _run(args)
    except (ScarError, OSError) as exc:
        print(f"scar eval: error: {exc}", file=sys.stderr)
        return 2
    _print_summary(payload)
    print(f"\nwrote {', '.join(str(path) for path in written.values())}")
    print(f"done in {time.perf_counter() - started:.1f} s")
    return 0


def _parse_curve(text: str) -> tuple[str, tuple[str, ...]]:
    from scar_core.errors import InvalidSettingsError

    label, _, names = text.partition("=")
    methods = tuple(name.strip() for name in names.split(",") if name.strip())
    if not label.strip() or not methods:
        raise InvalidSettingsError(
            f"--curve {text!r} is not valid; write LABEL=NAME,NAME,... e.g. 'top=top6,top8'."
        )
    return label.strip(), methods


def _run(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Path]]:
    from scar_core.errors import DataFormatError
    from scar_core.eval.data import load_benchmark, load_sample_benchmark
    from scar_core.eval.report import write_outputs
    from scar_core.eval.retrieval import default_cache_path, embedder_for
    from scar_core.eval.runner import DEFAULT_METHODS, EvalConfig, run_evaluation

    if args.benchmark is None:
        if args.corpus is not None:
            raise DataFormatError("--corpus was given without a BENCHMARK file.")
        benchmark = load_sample_benchmark()
    else:
        if args.corpus is None:
            raise DataFormatError(
                "--corpus is required with a BENCHMARK: the folder its file_path values are "
                "relative to, or corpus.jsonl."
            )
        benchmark = load_benchmark(args.benchmark, args.corpus, data_format=args.data_format)
    methods = (
        tuple(m.strip() for m in args.methods.split(",") if m.strip())
        if args.methods
        else DEFAULT_METHODS
    )
    config = EvalConfig(
        scope=args.scope,
        k=args.k,
        chunk_size=args.chunk_size,
        chunk_overlap=args.chunk_overlap,
        methods=methods,
        reference=args.reference,
        n_resamples=args.bootstrap,
        seed=args.seed,
        sweep=not args.no_sweep,
        sweep_curves=tuple(_parse_curve(text) for text in args.curve),
    )
    cache_path = None
    if not args.no_cache:
        cache_path = (
            Path(args.cache_dir) / "vectors.sqlite" if args.cache_dir else default_cache_path()
        )
    embedder = embedder_for(args.model, cache_path=cache_path)
    results = run_evaluation(benchmark, embedder, config, show_progress=not args.no_progress)
    results.config.update(
        {
            "benchmark_path": args.benchmark,
            "corpus_path": args.corpus,
            "format": args.data_format,
            "model": args.model,
            "cache": None if cache_path is None else str(cache_path),
        }
    )
    written = write_outputs(results, args.out, plot=not args.no_plot)
    return results.to_dict(), written
