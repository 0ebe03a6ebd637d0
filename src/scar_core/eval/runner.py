"""The evaluation pipeline: chunk, embed, retrieve, run the methods, score, compare, sweep.

Protocol (defaults of :class:`EvalConfig`):

1. Each document is chunked on its own (500 characters, no overlap, LangChain's recursive
   splitter) and every chunk gets ``chunk_id_for(document, position)``.
2. A query's gold chunks are the chunks holding at least one character of its evidence. A query
   is *fragmented* when it has two or more gold chunks, else *atomic*. A query whose evidence lies
   wholly in whitespace the splitter dropped has no gold chunk; it is excluded and counted.
3. Chunks and queries are embedded (unit length), and every chunk of the query's scope is ranked by
   cosine. Methods start from the ``k = 5`` best.
4. Every method selects chunks per query; chunk recall, evidence-character recall, unique chunks
   and tokens are recorded per query and averaged per group (``atomic``, ``fragmented``, ``all``).
   **Tokens** are the cl100k_base tokens of the context an LLM would get: the selected chunks are
   grouped into contiguous passages (:func:`scar_core.assembly.assemble_passages`, overlap kept
   once) and the tokens of the passages' texts are summed.
5. The reference method (``scar1``) is compared with every other method by a paired bootstrap
   (:mod:`scar_core.eval.stats`) on each metric and group.
6. A sweep draws recall against chunks for top-k over ``k``, the static window over ``w`` and
   SCAR over ``γ`` (at several ``λ``, and window 2).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from scar_core.assembly import assemble_passages
from scar_core.embedders.base import Embedder
from scar_core.errors import InvalidSettingsError
from scar_core.eval.chunking import ChunkedCorpus, Splitter, chunk_corpus, gold_chunk_ids
from scar_core.eval.data import Benchmark, EvalQuery
from scar_core.eval.methods import (
    DEFAULT_REGISTRY,
    EvalMethod,
    MethodRegistry,
    MethodUnavailableError,
    QueryContext,
    RankedCandidates,
    ScarMethod,
    StaticWindowMethod,
    TopKMethod,
)
from scar_core.eval.metrics import (
    Interval,
    MethodSummary,
    QueryScores,
    chunk_recall,
    covered_characters,
    merge_intervals,
    summarize,
)
from scar_core.eval.retrieval import (
    Scope,
    embed_chunks,
    embed_queries,
    progress,
    rank_in_scope,
)
from scar_core.eval.stats import DEFAULT_RESAMPLES, paired_bootstrap_many
from scar_core.policy import ExpansionResult
from scar_core.settings import ScarSettings, validate_k
from scar_core.tokens import TokenCounter, tiktoken_counter

__all__ = [
    "CONTEXT_SIZE_RULE",
    "DEFAULT_METHODS",
    "GROUPS",
    "EvalConfig",
    "EvalResults",
    "PreparedBenchmark",
    "evaluate_methods",
    "prepare_benchmark",
    "run_evaluation",
    "score_results",
    "sweep",
]

#: The methods ``scar eval`` runs when ``--methods`` is not given.
DEFAULT_METHODS: tuple[str, ...] = (
    "topk",
    "static1",
    "static2",
    "scar1",
    "scar2",
    "scar1_lambda0",
    "parent",
    "rerank",
    "topk_matched",
)

#: Query groups, in report order.
GROUPS: tuple[str, ...] = ("fragmented", "atomic", "all")

#: How tokens are counted, as written into ``results.json``.
CONTEXT_SIZE_RULE = (
    "cl100k_base tokens of the assembled context: selected chunks grouped into contiguous "
    "passages in document order (overlap kept once), tokens of each passage's text summed"
)

_METRICS = ("recall", "char_recall", "chunks", "tokens")


@dataclass(frozen=True)
class EvalConfig:
    """Settings of one evaluation run.

    Attributes:
        scope: ``"document"`` (the paper's setting) or ``"corpus"``.
        k: Chunks retrieved before any expansion.
        chunk_size: Characters per chunk.
        chunk_overlap: Characters shared by consecutive chunks.
        methods: Method names (see :mod:`scar_core.eval.methods`).
        reference: The method every other is compared with in the bootstrap.
        n_resamples: Bootstrap resamples ``B``.
        seed: Seed of the bootstrap.
        sweep: Whether to run the recall-versus-chunks sweep.
        sweep_depths: ``k`` values of the top-k curve.
        sweep_windows: ``w`` values of the static-window curve (``k`` seeds each).
        sweep_gammas: ``γ`` values of the SCAR curves.
        sweep_lambdas: ``λ`` values; one SCAR ±1 curve over ``γ`` per value.
        sweep_curves: Extra curves, each ``(label, method names)``, e.g.
            ``("budget", ("budget5", "budget10"))``; a point's value is the number that ends the
            method's name (its position when there is none).
    """

    scope: Scope = "document"
    k: int = 5
    chunk_size: int = 500
    chunk_overlap: int = 0
    methods: tuple[str, ...] = DEFAULT_METHODS
    reference: str = "scar1"
    n_resamples: int = DEFAULT_RESAMPLES
    seed: int = 0
    sweep: bool = True
    sweep_depths: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 15, 20)
    sweep_windows: tuple[int, ...] = (1, 2, 3)
    sweep_gammas: tuple[float, ...] = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
    sweep_lambdas: tuple[float, ...] = (0.0, 0.1, 0.3)
    sweep_curves: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def __post_init__(self) -> None:
        if self.scope not in ("document", "corpus"):
            raise InvalidSettingsError(
                f"scope={self.scope!r} is not valid; use 'document' or 'corpus'."
            )
        validate_k(self.k)
        if not self.methods:
            raise InvalidSettingsError("methods is empty; name at least one method, e.g. 'topk'.")
        duplicates = sorted({m for m in self.methods if self.methods.count(m) > 1})
        if duplicates:
            raise InvalidSettingsError(f"methods {duplicates} are listed more than once.")
        for depth in self.sweep_depths:
            validate_k(depth, "sweep depth")
        for window in self.sweep_windows:
            ScarSettings(window=window)
        for gamma in self.sweep_gammas:
            ScarSettings(gamma=gamma)
        for lambda_ in self.sweep_lambdas:
            ScarSettings(lambda_=lambda_)
        for curve in self.sweep_curves:
            if len(curve) != 2 or not isinstance(curve[0], str) or not curve[1]:
                raise InvalidSettingsError(
                    f"sweep curve {curve!r} is not valid; give (label, (method name, ...))."
                )


@dataclass
class PreparedBenchmark:
    """A benchmark chunked, embedded and ranked: everything methods and metrics need.

    Attributes:
        benchmark: The source benchmark.
        corpus: Its chunks.
        queries: The scorable queries (those with at least one gold chunk).
        excluded: ``query index -> reason`` for the queries left out.
        gold: Per query, its gold chunk ids.
        evidence: Per query, the union of its spans as merged ``(document, start, end)`` ranges.
        fragmented: Per query, whether it has two or more gold chunks.
        contexts: Per query, what methods see.
    """

    benchmark: Benchmark
    corpus: ChunkedCorpus
    queries: list[EvalQuery]
    excluded: dict[int, str]
    gold: list[frozenset[str]]
    evidence: list[list[Interval]]
    fragmented: npt.NDArray[np.bool_]
    contexts: list[QueryContext]

    def group_mask(self, group: str) -> npt.NDArray[np.bool_]:
        """The queries of ``group`` (``"atomic"``, ``"fragmented"`` or ``"all"``)."""
        if group == "fragmented":
            return self.fragmented
        if group == "atomic":
            return ~self.fragmented
        if group == "all":
            return np.ones_like(self.fragmented)
        raise InvalidSettingsError(f"group {group!r} is not known; use one of {GROUPS}.")


def prepare_benchmark(
    benchmark: Benchmark,
    embedder: Embedder,
    *,
    scope: Scope = "document",
    k: int = 5,
    chunk_size: int = 500,
    chunk_overlap: int = 0,
    splitter: Splitter | None = None,
    count_tokens: TokenCounter | None = None,
    show_progress: bool = True,
) -> PreparedBenchmark:
    """Chunk, embed and rank a benchmark.

    Args:
        benchmark: Queries and documents.
        embedder: Any scar_core embedder (wrap it in :class:`~scar_core.cache.CachedEmbedder`
            to embed each text once across runs).
        scope: ``"document"`` or ``"corpus"``.
        k: Retrieval depth handed to methods.
        chunk_size: Characters per chunk (default splitter).
        chunk_overlap: Characters of overlap (default splitter).
        splitter: Another splitter; see :func:`scar_core.eval.chunking.chunk_corpus`.
        count_tokens: Token counter handed to methods; tiktoken cl100k_base by default.
        show_progress: Show progress bars while embedding.

    Returns:
        The prepared benchmark.
    """
    validate_k(k)
    corpus = chunk_corpus(
        benchmark.documents, chunk_size=chunk_size, chunk_overlap=chunk_overlap, splitter=splitter
    )
    queries: list[EvalQuery] = []
    excluded: dict[int, str] = {}
    gold: list[frozenset[str]] = []
    for query in benchmark.queries:
        ids = gold_chunk_ids(query, corpus)
        if not ids:
            excluded[query.index] = "its evidence lies wholly outside every chunk (whitespace)"
            continue
        queries.append(query)
        gold.append(frozenset(ids))
    if not queries:
        raise InvalidSettingsError(
            "no query has a gold chunk under this chunking, so nothing can be scored."
        )
    chunk_units = embed_chunks(embedder, corpus.texts, show_progress=show_progress)
    query_units = embed_queries(embedder, queries, show_progress=show_progress)
    ranked = rank_in_scope(queries, query_units, chunk_units, corpus, scope)
    ids = corpus.ids
    vectors = dict(zip(ids, chunk_units, strict=True))
    counter = count_tokens or tiktoken_counter()
    contexts = [
        QueryContext(
            query=query,
            vector=query_units[index],
            candidates=RankedCandidates(ids, order, scores),
            k=k,
            graph=corpus.graph,
            vectors=vectors,
            texts=corpus.text_of,
            records=corpus.records,
            count_tokens=counter,
        )
        for index, (query, (order, scores)) in enumerate(zip(queries, ranked, strict=True))
    ]
    return PreparedBenchmark(
        benchmark=benchmark,
        corpus=corpus,
        queries=queries,
        excluded=excluded,
        gold=gold,
        evidence=[
            merge_intervals((s.document_id, s.start, s.end) for s in query.spans)
            for query in queries
        ],
        fragmented=np.array([len(g) >= 2 for g in gold], dtype=bool),
        contexts=contexts,
    )


class _PassageTokens:
    """Token counts of assembled contexts, each distinct passage counted once."""

    def __init__(self, prepared: PreparedBenchmark, count_tokens: TokenCounter) -> None:
        self._prepared = prepared
        self._count = count_tokens
        self._memo: dict[tuple[str, ...], int] = {}

    def __call__(self, result: ExpansionResult) -> int:
        total = 0
        corpus = self._prepared.corpus
        for passage in assemble_passages(result, corpus.records, corpus.graph):
            key = tuple(passage.chunk_ids)
            if key not in self._memo:
                self._memo[key] = self._count(passage.text)
            total += self._memo[key]
        return total


def score_results(
    prepared: PreparedBenchmark,
    results: Sequence[ExpansionResult],
    count_tokens: TokenCounter | None = None,
) -> QueryScores:
    """Score one method's selections, one per prepared query.

    Args:
        prepared: The prepared benchmark.
        results: The method's selection for each query, in order.
        count_tokens: Counts the tokens of the assembled context; ``None`` skips tokens.

    Returns:
        Per-query recall, character recall, chunks (and tokens).

    Raises:
        InvalidSettingsError: If the number of results is wrong or a result names an unknown chunk.
    """
    if len(results) != len(prepared.queries):
        raise InvalidSettingsError(
            f"got {len(results)} results for {len(prepared.queries)} queries."
        )
    corpus = prepared.corpus
    recall = np.zeros(len(results))
    char_recall = np.zeros(len(results))
    chunks = np.zeros(len(results))
    tokens = np.zeros(len(results)) if count_tokens is not None else None
    counter = _PassageTokens(prepared, count_tokens) if count_tokens is not None else None
    for index, result in enumerate(results):
        selected = list(dict.fromkeys(result.chunk_ids))
        unknown = [c for c in selected if c not in corpus.row_of]
        if unknown:
            raise InvalidSettingsError(
                f"the selection for query {prepared.queries[index].index} names chunk "
                f"{unknown[0]!r}, which is not a chunk of this benchmark."
            )
        rows = [corpus.row_of[c] for c in selected]
        cover = merge_intervals(
            (corpus.chunks[row].document_id, corpus.chunks[row].start, corpus.chunks[row].end)
            for row in rows
        )
        evidence = prepared.evidence[index]
        evidence_size = sum(end - start for _, start, end in evidence)
        recall[index] = chunk_recall(selected, prepared.gold[index])
        char_recall[index] = covered_characters(evidence, cover) / evidence_size
        chunks[index] = len(selected)
        if tokens is not None and counter is not None:
            tokens[index] = counter(result)
    return QueryScores(recall, char_recall, chunks, tokens)


def evaluate_methods(
    prepared: PreparedBenchmark,
    methods: Mapping[str, EvalMethod],
    *,
    count_tokens: TokenCounter | None = None,
    show_progress: bool = True,
    skipped: dict[str, str] | None = None,
) -> dict[str, QueryScores]:
    """Run and score every method on every prepared query.

    Args:
        prepared: The prepared benchmark.
        methods: ``name -> method``.
        count_tokens: Token counter for the assembled contexts; ``None`` skips tokens.
        show_progress: Show a progress bar over the methods.
        skipped: Where to record ``name -> reason`` for a method that raised
            :class:`~scar_core.eval.methods.MethodUnavailableError` while running; without it,
            the error propagates.

    Returns:
        ``name -> per-query scores`` of the methods that ran.
    """
    scores: dict[str, QueryScores] = {}
    for name, method in progress(
        methods.items(), total=len(methods), description="evaluating methods", enabled=show_progress
    ):
        try:
            results = method.select_batch(prepared.contexts)
        except MethodUnavailableError as exc:
            if skipped is None:
                raise
            skipped[name] = str(exc)
            continue
        scores[name] = score_results(prepared, results, count_tokens)
    return scores


def _summaries(prepared: PreparedBenchmark, scores: QueryScores) -> dict[str, MethodSummary]:
    return {group: summarize(scores.subset(prepared.group_mask(group))) for group in GROUPS}


def _curve_value(name: str, position: int) -> float:
    digits = re.search(r"(\d+(?:\.\d+)?)$", name)
    return float(digits[1]) if digits else float(position)


def sweep(
    prepared: PreparedBenchmark,
    config: EvalConfig,
    *,
    registry: MethodRegistry | None = None,
    show_progress: bool = True,
) -> list[dict[str, Any]]:
    """Trace recall against chunks for each family of methods.

    Args:
        prepared: The prepared benchmark.
        config: The sweep's settings (``sweep_*`` fields).
        registry: Where the names of ``config.sweep_curves`` are looked up.
        show_progress: Show a progress bar over the points.

    Returns:
        One curve per family: ``{"family", "label", "parameter", "points": [{"value", "groups":
        {group: {"recall", "char_recall", "chunks"}}}]}``.
    """
    curves: list[tuple[str, str, str, list[tuple[float, EvalMethod]]]] = [
        ("top-k", "top-k", "k", [(float(d), TopKMethod(d)) for d in config.sweep_depths]),
        (
            "static",
            f"static ±w (k={config.k})",
            "w",
            [(0.0, TopKMethod())]
            + [(float(w), StaticWindowMethod(w)) for w in config.sweep_windows],
        ),
    ]
    for lambda_ in config.sweep_lambdas:
        curves.append(
            (
                "scar",
                f"SCAR ±1, λ={lambda_:g}",
                "gamma",
                [
                    (g, ScarMethod(ScarSettings(lambda_=lambda_, gamma=g, window=1)))
                    for g in config.sweep_gammas
                ],
            )
        )
    curves.append(
        (
            "scar",
            "SCAR ±2, λ=0.1",
            "gamma",
            [(g, ScarMethod(ScarSettings(gamma=g, window=2))) for g in config.sweep_gammas],
        )
    )
    for label, names in config.sweep_curves:
        registry = registry or DEFAULT_REGISTRY
        curves.append(
            (
                "custom",
                label,
                "value",
                [(_curve_value(n, i), registry.create(n)) for i, n in enumerate(names)],
            )
        )
    total = sum(len(points) for *_, points in curves)
    steps = progress(
        ((curve, value, method) for curve in curves for value, method in curve[3]),
        total=total,
        description="sweep",
        enabled=show_progress,
    )
    collected: dict[str, list[dict[str, Any]]] = {curve[1]: [] for curve in curves}
    for curve, value, method in steps:
        scores = score_results(prepared, method.select_batch(prepared.contexts))
        collected[curve[1]].append(
            {
                "value": value,
                "groups": {
                    group: {
                        "recall": summary.recall,
                        "char_recall": summary.char_recall,
                        "chunks": summary.chunks,
                    }
                    for group, summary in _summaries(prepared, scores).items()
                },
            }
        )
    return [
        {"family": family, "label": label, "parameter": parameter, "points": collected[label]}
        for family, label, parameter, _ in curves
    ]


def _bootstrap(
    prepared: PreparedBenchmark, scores: Mapping[str, QueryScores], config: EvalConfig
) -> dict[str, Any]:
    reference = scores[config.reference]
    baselines = [name for name in scores if name != config.reference]
    groups: dict[str, Any] = {}
    for group in GROUPS:
        mask = prepared.group_mask(group)
        if not mask.any() or not baselines:
            continue
        per_metric: dict[str, dict[str, Any]] = {}
        for metric in _METRICS:
            reference_values = getattr(reference, metric)
            if reference_values is None:
                continue
            compared = paired_bootstrap_many(
                reference_values[mask],
                {name: getattr(scores[name], metric)[mask] for name in baselines},
                n_resamples=config.n_resamples,
                seed=config.seed,
            )
            per_metric[metric] = {name: c.as_dict() for name, c in compared.items()}
        groups[group] = {
            name: {metric: per_metric[metric][name] for metric in per_metric} for name in baselines
        }
    return {
        "reference": config.reference,
        "n_resamples": config.n_resamples,
        "seed": config.seed,
        "p_value": "two-sided, bootstrap shifted to the null: (1 + #|m*-m| >= |m|) / (B + 1)",
        "cohens_d": "paired d_z = mean(differences) / sd(differences, ddof=1)",
        "groups": groups,
    }


@dataclass
class EvalResults:
    """Everything one run measured.

    Attributes:
        config: The run's settings, JSON-ready.
        prepared: The prepared benchmark (chunks, gold, contexts).
        scores: ``method -> per-query scores``.
        skipped: ``method -> why it did not run``.
        bootstrap: The paired comparisons (see :func:`run_evaluation`), or ``None``.
        sweep: The sweep curves, or ``None``.
        timings: Seconds spent per stage.
    """

    config: dict[str, Any]
    prepared: PreparedBenchmark
    scores: dict[str, QueryScores]
    skipped: dict[str, str] = field(default_factory=dict)
    bootstrap: dict[str, Any] | None = None
    sweep: list[dict[str, Any]] | None = None
    timings: dict[str, float] = field(default_factory=dict)

    def summary(self, group: str) -> dict[str, MethodSummary]:
        """``method -> means`` over the queries of ``group``."""
        mask = self.prepared.group_mask(group)
        return {name: summarize(s.subset(mask)) for name, s in self.scores.items()}

    def group_sizes(self) -> dict[str, int]:
        """Number of queries per group."""
        return {g: int(self.prepared.group_mask(g).sum()) for g in GROUPS}

    def per_query_rows(self) -> list[dict[str, Any]]:
        """One JSON-ready row per evaluated query with every method's scores on it."""
        prepared = self.prepared
        rows: list[dict[str, Any]] = []
        for position, query in enumerate(prepared.queries):
            methods: dict[str, dict[str, float | None]] = {}
            for name, scores in self.scores.items():
                methods[name] = {
                    "recall": float(scores.recall[position]),
                    "char_recall": float(scores.char_recall[position]),
                    "chunks": float(scores.chunks[position]),
                    "tokens": None if scores.tokens is None else float(scores.tokens[position]),
                }
            rows.append(
                {
                    "index": query.index,
                    "query": query.text,
                    "group": "fragmented" if prepared.fragmented[position] else "atomic",
                    "gold_chunks": len(prepared.gold[position]),
                    "methods": methods,
                }
            )
        return rows

    def to_dict(self) -> dict[str, Any]:
        """The results as the JSON document ``scar eval`` writes (NaN becomes ``null``)."""
        prepared = self.prepared
        payload = {
            "config": self.config,
            "benchmark": {
                "name": prepared.benchmark.name,
                "documents": len(prepared.benchmark.documents),
                "chunks": len(prepared.corpus),
                "queries": len(prepared.benchmark.queries),
                "evaluated_queries": len(prepared.queries),
                "excluded_queries": {str(i): why for i, why in prepared.excluded.items()},
            },
            "groups": {
                group: {
                    "n": size,
                    "methods": {
                        name: summary.as_dict() for name, summary in self.summary(group).items()
                    },
                }
                for group, size in self.group_sizes().items()
            },
            "skipped": self.skipped,
            "bootstrap": self.bootstrap,
            "sweep": self.sweep,
            "timings_seconds": self.timings,
        }
        ready: dict[str, Any] = _json_ready(payload)
        return ready


def _json_ready(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(v) for v in value]
    if isinstance(value, np.generic):
        return _json_ready(value.item())
    return value


def _create_methods(
    names: Sequence[str], registry: MethodRegistry
) -> tuple[dict[str, EvalMethod], dict[str, str]]:
    methods: dict[str, EvalMethod] = {}
    skipped: dict[str, str] = {}
    for name in names:
        try:
            methods[name] = registry.create(name)
        except MethodUnavailableError as exc:
            skipped[name] = str(exc)
    return methods, skipped


def run_evaluation(
    benchmark: Benchmark,
    embedder: Embedder,
    config: EvalConfig | None = None,
    *,
    registry: MethodRegistry | None = None,
    count_tokens: TokenCounter | None = None,
    splitter: Splitter | None = None,
    show_progress: bool = True,
) -> EvalResults:
    """Run the whole protocol (see the module docstring) on one benchmark.

    Args:
        benchmark: Queries and documents (see :mod:`scar_core.eval.data`).
        embedder: Any scar_core embedder.
        config: The run's settings; :class:`EvalConfig` defaults when omitted.
        registry: Where method names are looked up; :data:`DEFAULT_REGISTRY` by default.
        count_tokens: Token counter; tiktoken cl100k_base by default.
        splitter: Another splitter than LangChain's recursive character splitter.
        show_progress: Show progress bars on stderr.

    Returns:
        The results. A method that cannot run here (no cross-encoder offline, say) is listed in
        :attr:`EvalResults.skipped` with the reason.

    Raises:
        InvalidSettingsError: If a method name is unknown or a setting is out of range.
    """
    config = config or EvalConfig()
    registry = registry or DEFAULT_REGISTRY
    counter = count_tokens or tiktoken_counter()
    methods, skipped = _create_methods(config.methods, registry)
    for _, names in config.sweep_curves if config.sweep else ():
        for name in names:
            registry.create(name)  # fail on an unknown name before any embedding
    timings: dict[str, float] = {}

    started = time.perf_counter()
    prepared = prepare_benchmark(
        benchmark,
        embedder,
        scope=config.scope,
        k=config.k,
        chunk_size=config.chunk_size,
        chunk_overlap=config.chunk_overlap,
        splitter=splitter,
        count_tokens=counter,
        show_progress=show_progress,
    )
    timings["prepare"] = time.perf_counter() - started

    started = time.perf_counter()
    scores = evaluate_methods(
        prepared, methods, count_tokens=counter, show_progress=show_progress, skipped=skipped
    )
    timings["methods"] = time.perf_counter() - started

    bootstrap = None
    if config.reference in scores:
        started = time.perf_counter()
        bootstrap = _bootstrap(prepared, scores, config)
        timings["bootstrap"] = time.perf_counter() - started
    else:
        skipped.setdefault(
            "bootstrap", f"the reference method {config.reference!r} was not among the methods run"
        )

    curves = None
    if config.sweep:
        started = time.perf_counter()
        curves = sweep(prepared, config, registry=registry, show_progress=show_progress)
        timings["sweep"] = time.perf_counter() - started

    settings = asdict(config)
    settings.update(
        {
            "methods": list(config.methods),
            "embedder": embedder.model_name,
            "token_counting": CONTEXT_SIZE_RULE,
            "gold_chunks": "every chunk holding at least one character of an evidence span",
            "fragmented": "two or more gold chunks",
        }
    )
    return EvalResults(
        config=settings,
        prepared=prepared,
        scores=scores,
        skipped=skipped,
        bootstrap=bootstrap,
        sweep=curves,
        timings=timings,
    )
