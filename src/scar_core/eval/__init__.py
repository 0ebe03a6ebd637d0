"""Evaluation of SCAR against baselines on benchmarks with gold evidence spans.

The ``scar eval`` command runs :func:`run_evaluation` and writes its outputs with
:func:`write_outputs`. The same pieces work from Python::

    from scar_core.eval import EvalConfig, embedder_for, load_benchmark, run_evaluation
    benchmark = load_benchmark("paper4_dev.json", "corpus/")
    results = run_evaluation(benchmark, embedder_for(None, cache_path="/tmp/scar/vectors.sqlite"))
    results.summary("fragmented")["scar1"].recall

Importing this package needs numpy only; LangChain's splitter, tiktoken, tqdm and matplotlib
(extra ``eval``) and the embedding backends are imported when first used.
"""

from __future__ import annotations

from scar_core.eval.chunking import (
    Chunk,
    ChunkedCorpus,
    chunk_corpus,
    gold_chunk_ids,
    recursive_character_splitter,
)
from scar_core.eval.data import (
    Benchmark,
    EvalQuery,
    EvidenceSpan,
    load_benchmark,
    load_sample_benchmark,
    read_jsonl_benchmark,
    read_legalbench,
)
from scar_core.eval.methods import (
    DEFAULT_REGISTRY,
    EvalMethod,
    MatchedTopK,
    MethodRegistry,
    MethodUnavailableError,
    QueryContext,
    RankedCandidates,
    ScarMethod,
    StaticWindowMethod,
    TopKMethod,
    create_method,
    register_method,
    register_method_pattern,
    top_result,
)
from scar_core.eval.metrics import (
    MethodSummary,
    QueryScores,
    chunk_recall,
    evidence_character_recall,
    summarize,
)
from scar_core.eval.report import (
    plot_pareto,
    render_bootstrap,
    render_markdown,
    render_method_tables,
    write_outputs,
)
from scar_core.eval.retrieval import default_cache_path, embedder_for, rank_in_scope
from scar_core.eval.runner import (
    DEFAULT_METHODS,
    EvalConfig,
    EvalResults,
    PreparedBenchmark,
    evaluate_methods,
    prepare_benchmark,
    run_evaluation,
    score_results,
    sweep,
)
from scar_core.eval.stats import PairedComparison, paired_bootstrap, paired_bootstrap_many

__all__ = [
    "DEFAULT_METHODS",
    "DEFAULT_REGISTRY",
    "Benchmark",
    "Chunk",
    "ChunkedCorpus",
    "EvalConfig",
    "EvalMethod",
    "EvalQuery",
    "EvalResults",
    "EvidenceSpan",
    "MatchedTopK",
    "MethodRegistry",
    "MethodSummary",
    "MethodUnavailableError",
    "PairedComparison",
    "PreparedBenchmark",
    "QueryContext",
    "QueryScores",
    "RankedCandidates",
    "ScarMethod",
    "StaticWindowMethod",
    "TopKMethod",
    "chunk_corpus",
    "chunk_recall",
    "create_method",
    "default_cache_path",
    "embedder_for",
    "evaluate_methods",
    "evidence_character_recall",
    "gold_chunk_ids",
    "load_benchmark",
    "load_sample_benchmark",
    "paired_bootstrap",
    "paired_bootstrap_many",
    "plot_pareto",
    "prepare_benchmark",
    "rank_in_scope",
    "read_jsonl_benchmark",
    "read_legalbench",
    "recursive_character_splitter",
    "register_method",
    "register_method_pattern",
    "render_bootstrap",
    "render_markdown",
    "render_method_tables",
    "run_evaluation",
    "score_results",
    "summarize",
    "sweep",
    "top_result",
    "write_outputs",
]
