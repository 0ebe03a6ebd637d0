"""Evaluation of SCAR against baselines on benchmarks with gold evidence spans.

``scar eval`` runs :func:`run_evaluation` and writes its outputs with :func:`write_outputs`. The
same pieces work from Python::

    from scar_tools.cache import EmbeddingCache
    from scar_tools.eval import EvalConfig, embedder_for, load_benchmark, run_evaluation
    benchmark = load_benchmark("paper4_dev.json", "corpus/")
    results = run_evaluation(benchmark, embedder_for(None), EvalConfig(k=5), cache=EmbeddingCache())
    results.summary("fragmented")["default"].recall

Importing this package needs numpy only; LangChain's splitter, tiktoken, tqdm, matplotlib (extra
``eval``) and the embedding backends are imported when first used.
"""

from __future__ import annotations

from scar_tools.eval.chunking import ChunkedCorpus, chunk_corpus
from scar_tools.eval.data import Benchmark, EvalQuery, EvidenceSpan, load_benchmark
from scar_tools.eval.embedding import embedder_for
from scar_tools.eval.methods import REGISTRY, QueryContext, create_method, register_method
from scar_tools.eval.report import write_outputs
from scar_tools.eval.runner import (
    DEFAULT_METHODS,
    EvalConfig,
    EvalResults,
    PreparedBenchmark,
    prepare_benchmark,
    run_evaluation,
    run_methods,
)
from scar_tools.eval.stats import paired_bootstrap

__all__ = [
    "DEFAULT_METHODS", "REGISTRY", "Benchmark", "ChunkedCorpus", "EvalConfig", "EvalQuery",
    "EvalResults", "EvidenceSpan", "PreparedBenchmark", "QueryContext", "chunk_corpus",
    "create_method", "embedder_for", "load_benchmark", "paired_bootstrap", "prepare_benchmark",
    "register_method", "run_evaluation", "run_methods", "write_outputs",
]  # fmt: skip
