"""The evaluation pipeline: chunk, embed, rank, run the methods, score, compare, sweep.

Protocol (defaults of :class:`EvalConfig`):

1. Each document is chunked on its own (500 characters, no overlap, LangChain's recursive
   splitter); chunks get the ids and previous/next links of :mod:`scar_core._links`.
2. A query's gold chunks hold at least one character of its evidence. A query is *fragmented* when
   it has two or more, else *atomic*. A query whose evidence lies wholly in whitespace the splitter
   dropped has no gold chunk; it is excluded and counted.
3. Chunks and queries are embedded (through the vector cache) and every chunk of the query's scope
   (its evidence's documents, or the whole corpus) is ranked by cosine, ties by chunk order.
4. Every method (:mod:`scar_tools.eval.methods`) selects chunks per query through
   :func:`scar_core._selection.select`; chunk recall, evidence-character recall, unique chunks and
   tokens are recorded per query and averaged per group (``fragmented``, ``atomic``, ``all``).
   **Tokens** are cl100k_base tokens of the context an LLM would read: each passage of the
   selection stitched with :func:`scar_core._passages.stitch`, tokens summed over passages.
5. The reference method is compared with every other by a paired bootstrap
   (:mod:`scar_tools.eval.stats`) on each metric and group.
6. A sweep traces recall against chunks for top-B over B, the static window over W, the paper's
   rule over γ and budget mode over B.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from scar_core._errors import InvalidSettingsError
from scar_core._selection import Chunk, Selection
from scar_tools.embedders import Embedder
from scar_tools.eval.chunking import ChunkedCorpus, Splitter, chunk_corpus
from scar_tools.eval.data import Benchmark, EvalQuery
from scar_tools.eval.embedding import embed_texts, progress
from scar_tools.eval.methods import REGISTRY, Method, MethodRegistry, QueryContext
from scar_tools.eval.metrics import (
    Interval,
    MethodSummary,
    PassageTokens,
    QueryScores,
    chunk_recall,
    evidence_character_recall,
    merge_intervals,
    summarize,
)
from scar_tools.eval.stats import DEFAULT_RESAMPLES, paired_bootstrap_many

if TYPE_CHECKING:
    from scar_tools.cache import EmbeddingCache

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_METHODS",
    "GROUPS",
    "EvalConfig",
    "EvalResults",
    "PreparedBenchmark",
    "prepare_benchmark",
    "run_evaluation",
    "run_methods",
]

Scope = Literal["document", "corpus"]
#: The methods ``scar eval`` runs when ``--methods`` is not given.
DEFAULT_METHODS = ("topk", "default", "static1", "static2", "scar1", "scar2", "parent",
                   "topk_matched")  # fmt: skip
#: Characters per chunk of ``scar eval`` when ``--chunk-size`` is not given (a user's data).
DEFAULT_CHUNK_SIZE = 500
#: Query groups, in report order.
GROUPS = ("fragmented", "atomic", "all")


@dataclass(frozen=True)
class EvalConfig:
    """Settings of one evaluation run.

    Attributes:
        scope: ``"document"`` (the paper's setting: the query's documents) or ``"corpus"``.
        k: ``--k``: seeds of ``topk``/``staticW``/``scarW``, budget of ``default``.
        chunk_size: Characters per chunk.
        chunk_overlap: Characters shared by consecutive chunks.
        methods: Method names (see :mod:`scar_tools.eval.methods`).
        reference: The method every other is compared with in the bootstrap; ``None`` means
            ``default`` when it is run, else the first method.
        n_resamples: Bootstrap resamples; 0 skips the bootstrap.
        seed: Seed of the bootstrap.
        sweep: Whether to trace recall against chunks for the plot.
    """

    scope: Scope = "document"
    k: int = 5
    chunk_size: int = DEFAULT_CHUNK_SIZE
    chunk_overlap: int = 0
    methods: tuple[str, ...] = DEFAULT_METHODS
    reference: str | None = None
    n_resamples: int = DEFAULT_RESAMPLES
    seed: int = 0
    sweep: bool = True

    @property
    def compared_with(self) -> str:
        """The reference method actually used."""
        if self.reference is not None:
            return self.reference
        return "default" if "default" in self.methods else self.methods[0]

    def __post_init__(self) -> None:
        if self.scope not in ("document", "corpus"):
            raise InvalidSettingsError(
                f"scope={self.scope!r} is not valid; use 'document' or 'corpus'."
            )
        if not isinstance(self.k, int) or isinstance(self.k, bool) or self.k < 1:
            raise InvalidSettingsError(f"k={self.k!r} is not valid; it must be an integer >= 1.")
        if not self.methods or len(set(self.methods)) != len(self.methods):
            raise InvalidSettingsError(f"methods={self.methods!r} must name each method once.")
        if self.reference is not None and self.reference not in self.methods:
            raise InvalidSettingsError(
                f"reference={self.reference!r} is not among the methods {list(self.methods)}; "
                "add it to the methods."
            )


@dataclass
class PreparedBenchmark:
    """A benchmark chunked, embedded and ranked: everything methods and metrics need.

    Attributes:
        benchmark: The source benchmark.
        corpus: Its chunks.
        queries: The evaluated queries (those with a gold chunk).
        excluded: ``query index -> reason`` for the queries left out.
        gold: Per query, its gold chunk ids.
        evidence: Per query, its spans as merged ``(document, start, end)`` ranges.
        fragmented: Per query, whether it has two or more gold chunks.
        query_units: Unit query vectors, one row per query.
        nodes: The :class:`~scar_core._selection.Chunk` of every corpus row.
        ranked: Per query, the rows of its scope, best cosine first.
        model_name: The embedder's name.
    """

    benchmark: Benchmark
    corpus: ChunkedCorpus
    queries: list[EvalQuery]
    excluded: dict[int, str]
    gold: list[frozenset[str]]
    evidence: list[list[Interval]]
    fragmented: npt.NDArray[np.bool_]
    query_units: npt.NDArray[np.float64]
    nodes: list[Chunk]
    ranked: list[npt.NDArray[np.int64]]
    model_name: str

    def context(self, position: int, k: int) -> QueryContext:
        """What a method sees of the query at ``position`` in a run at ``--k`` = ``k``."""
        return QueryContext(
            self.query_units[position], self.ranked[position], k, self.corpus, self.nodes
        )

    def group_mask(self, group: str) -> npt.NDArray[np.bool_]:
        """The queries of ``group``: ``"fragmented"``, ``"atomic"`` or ``"all"``."""
        every = np.ones_like(self.fragmented)
        masks = {"fragmented": self.fragmented, "atomic": ~self.fragmented, "all": every}
        if group not in masks:
            raise InvalidSettingsError(f"group {group!r} is not known; use one of {GROUPS}.")
        return masks[group]


def prepare_benchmark(
    benchmark: Benchmark,
    embedder: Embedder,
    *,
    scope: Scope = "document",
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = 0,
    splitter: Splitter | None = None,
    cache: EmbeddingCache | None = None,
    show_progress: bool = True,
) -> PreparedBenchmark:
    """Chunk, embed and rank a benchmark (steps 1 to 3 of the protocol).

    Raises:
        InvalidSettingsError: If no query has a gold chunk under this chunking.
        EmbeddingError: If a vector is unusable.
    """
    corpus = chunk_corpus(
        benchmark.documents, chunk_size=chunk_size, chunk_overlap=chunk_overlap, splitter=splitter
    )
    queries, gold, excluded = [], [], {}
    for query in benchmark.queries:
        golden = corpus.gold_rows(query)
        if golden:
            queries.append(query)
            gold.append(frozenset(corpus.chunks[r].chunk_id for r in golden))
        else:
            excluded[query.index] = "its evidence lies wholly outside every chunk (whitespace)"
    if not queries:
        raise InvalidSettingsError(
            "no query has a gold chunk under this chunking; nothing can be scored."
        )
    chunk_units = embed_texts(
        embedder, [c.text for c in corpus.chunks], cache=cache, show_progress=show_progress
    )
    query_units = embed_texts(
        embedder, [q.text for q in queries], queries=True, cache=cache, show_progress=show_progress
    )
    ranked: list[npt.NDArray[np.int64]] = []
    for position, query in enumerate(queries):
        if scope == "corpus":
            rows = np.arange(len(corpus), dtype=np.int64)
        else:
            spans = [corpus.rows_of_document.get(d, (0, 0)) for d in query.document_ids]
            rows = np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in spans])
        cosines = chunk_units[rows] @ query_units[position]
        ranked.append(rows[np.argsort(-cosines, kind="stable")])
    nodes = [
        Chunk(c.chunk_id, chunk_units[r], c.previous_id, c.next_id)
        for r, c in enumerate(corpus.chunks)
    ]
    evidence = [merge_intervals((s.document_id, s.start, s.end) for s in q.spans) for q in queries]
    return PreparedBenchmark(
        benchmark, corpus, queries, excluded, gold, evidence,
        np.array([len(g) >= 2 for g in gold], dtype=bool), query_units, nodes, ranked,
        embedder.model_name,
    )  # fmt: skip


#: One method's run: a selection per evaluated query, and its per-query scores.
Run = tuple[list[Selection], QueryScores]


def run_methods(
    prepared: PreparedBenchmark,
    methods: dict[str, Method],
    k: int,
    *,
    count_tokens: bool = True,
    show_progress: bool = False,
) -> dict[str, Run]:
    """Run every method on every evaluated query at ``--k`` = ``k``, and score it (step 4).

    Returns:
        ``name -> (one selection per query, per-query scores)``.
    """
    tokens = PassageTokens(prepared.corpus) if count_tokens else None
    contexts = [prepared.context(p, k) for p in range(len(prepared.queries))]
    corpus, n = prepared.corpus, len(contexts)
    runs: dict[str, Run] = {}
    for name, method in progress(
        methods.items(), total=len(methods), description="methods", enabled=show_progress
    ):
        selections = [method(context) for context in contexts]
        scores = QueryScores(np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n) if tokens else None)
        for i, selection in enumerate(selections):
            ids = selection.chunk_ids
            cover = [
                (c.document_id, c.start, c.end)
                for c in (corpus.chunks[corpus.row_of[x]] for x in ids)
            ]
            scores.recall[i] = chunk_recall(ids, prepared.gold[i])
            scores.char_recall[i] = evidence_character_recall(prepared.evidence[i], cover)
            scores.chunks[i] = len(set(ids))
            if scores.tokens is not None and tokens is not None:
                scores.tokens[i] = tokens(selection)
        runs[name] = (selections, scores)
    return runs


#: The curves of the sweep: label and method names (``{k}`` is ``--k``).
SWEEP = {
    "top-B": [f"top{b}" for b in (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 15, 20)],
    "static ±W, k={k}": ["topk", "static1", "static2", "static3"],
    "paper SCAR ±1 over γ, k={k}": [
        f"scar1_g{g}" for g in (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
    ],
    "budget B": [f"budget{b}" for b in (3, 4, 5, 7, 10, 12, 15)],
}


@dataclass
class EvalResults:
    """Everything one run measured.

    Attributes:
        config: The run's settings, JSON-ready.
        prepared: The prepared benchmark.
        runs: ``method -> (selections, per-query scores)``.
        bootstrap: The paired comparisons with the reference, or ``None``.
        sweep: ``label -> method -> group -> means`` of the sweep's curves, or ``None``.
        timings: Seconds per stage.
        answers: The answers section (:mod:`scar_tools.eval.answers`), or ``None``.
        answer_rows: ``query index -> method -> answer record`` of the answered queries.
        budgets: Recall against the budget (:func:`scar_tools.eval.budgets.budget_sweep`), or ``None``.
    """

    config: dict[str, Any]
    prepared: PreparedBenchmark
    runs: dict[str, Run]
    bootstrap: dict[str, Any] | None = None
    sweep: dict[str, dict[str, dict[str, dict[str, float | None]]]] | None = None
    timings: dict[str, float] = field(default_factory=dict)
    answers: dict[str, Any] | None = None
    answer_rows: dict[int, dict[str, Any]] = field(default_factory=dict)
    budgets: dict[str, Any] | None = None

    def summary(self, group: str) -> dict[str, MethodSummary]:
        """``method -> means`` over the queries of ``group``."""
        mask = self.prepared.group_mask(group)
        return {name: summarize(scores.subset(mask)) for name, (_, scores) in self.runs.items()}

    def per_query_rows(self) -> list[dict[str, Any]]:
        """One JSON-ready row per evaluated query, with every method's scores on it."""
        prepared, rows = self.prepared, list[dict[str, Any]]()
        for i, query in enumerate(prepared.queries):
            methods = {
                name: {"recall": float(s.recall[i]), "char_recall": float(s.char_recall[i]),
                       "chunks": int(s.chunks[i]),
                       "tokens": None if s.tokens is None else int(s.tokens[i])}
                for name, (_, s) in self.runs.items()
            }  # fmt: skip
            group = "fragmented" if prepared.fragmented[i] else "atomic"
            rows.append({"index": query.index, "query": query.text, "group": group,
                         "gold_chunks": len(prepared.gold[i]), "methods": methods})  # fmt: skip
            if query.index in self.answer_rows:
                rows[-1]["answers"] = self.answer_rows[query.index]
        return rows

    def to_dict(self) -> dict[str, Any]:
        """The results as the JSON document ``scar eval`` writes (NaN means become ``null``)."""
        prepared = self.prepared
        groups = {
            g: {"n": int(prepared.group_mask(g).sum()),
                "methods": {n: s.as_dict() for n, s in self.summary(g).items()}}
            for g in GROUPS
        }  # fmt: skip
        benchmark = {
            "name": prepared.benchmark.name,
            "documents": len(prepared.benchmark.documents),
            "chunks": len(prepared.corpus),
            "queries": len(prepared.benchmark.queries),
            "evaluated_queries": len(prepared.queries),
            "excluded_queries": {str(i): why for i, why in prepared.excluded.items()},
        }
        return {"config": self.config, "benchmark": benchmark, "groups": groups,
                "bootstrap": self.bootstrap, "sweep": self.sweep,
                "timings_seconds": self.timings} | (
                    {"answers": self.answers} if self.answers else {}) | (
                    {"budgets": self.budgets} if self.budgets else {})  # fmt: skip


def _bootstrap(
    prepared: PreparedBenchmark, runs: dict[str, Run], config: EvalConfig
) -> dict[str, Any]:
    reference, others = (
        runs[config.compared_with][1],
        [n for n in runs if n != config.compared_with],
    )
    groups: dict[str, Any] = {}
    for group in GROUPS:
        mask = prepared.group_mask(group)
        if not mask.any() or not others:
            continue
        table: dict[str, dict[str, Any]] = {name: {} for name in others}
        for metric in ("recall", "char_recall", "chunks", "tokens"):
            if getattr(reference, metric) is None:
                continue
            compared = paired_bootstrap_many(
                getattr(reference, metric)[mask],
                {n: getattr(runs[n][1], metric)[mask] for n in others},
                n_resamples=config.n_resamples, seed=config.seed,
            )  # fmt: skip
            for name, comparison in compared.items():
                table[name][metric] = comparison.as_dict()
        groups[group] = table
    return {"reference": config.compared_with, "n_resamples": config.n_resamples,
            "seed": config.seed,
            "groups": groups}  # fmt: skip


def run_evaluation(
    benchmark: Benchmark,
    embedder: Embedder,
    config: EvalConfig | None = None,
    *,
    cache: EmbeddingCache | None = None,
    registry: MethodRegistry = REGISTRY,
    splitter: Splitter | None = None,
    show_progress: bool = True,
) -> EvalResults:
    """Run the whole protocol (see the module docstring) on one benchmark.

    Args:
        benchmark: Queries and documents (see :mod:`scar_tools.eval.data`).
        embedder: Any :class:`~scar_tools.embedders.Embedder`.
        config: The run's settings; :class:`EvalConfig` defaults when omitted.
        cache: The vector cache; ``None`` embeds everything now.
        registry: Where method names are looked up.
        splitter: Another splitter than LangChain's recursive character splitter.
        show_progress: Show progress bars on stderr.

    Raises:
        InvalidSettingsError: If a method name is unknown or a setting is out of range (raised
            before anything is embedded).
    """
    config = config or EvalConfig()
    methods = {name: registry.create(name, config.k) for name in config.methods}
    clock = [time.perf_counter()]
    prepared = prepare_benchmark(
        benchmark, embedder, scope=config.scope, chunk_size=config.chunk_size,
        chunk_overlap=config.chunk_overlap, splitter=splitter, cache=cache,
        show_progress=show_progress,
    )  # fmt: skip
    clock.append(time.perf_counter())
    runs = run_methods(prepared, methods, config.k, show_progress=show_progress)
    clock.append(time.perf_counter())
    bootstrap = _bootstrap(prepared, runs, config) if config.n_resamples else None
    clock.append(time.perf_counter())
    sweep = None
    if config.sweep:
        names = {n for members in SWEEP.values() for n in members}
        swept = run_methods(prepared, {n: registry.create(n, config.k) for n in names}, config.k,
                            count_tokens=False, show_progress=show_progress)  # fmt: skip
        sweep = {
            label.format(k=config.k): {
                n: {
                    g: summarize(swept[n][1].subset(prepared.group_mask(g))).as_dict()
                    for g in GROUPS
                }
                for n in members
            }
            for label, members in SWEEP.items()
        }
    clock.append(time.perf_counter())
    timings = dict(
        zip(("prepare", "methods", "bootstrap", "sweep"), np.diff(clock).tolist(), strict=True)
    )
    settings = asdict(config) | {"methods": list(config.methods), "embedder": embedder.model_name}
    return EvalResults(settings, prepared, runs, bootstrap, sweep, timings)
