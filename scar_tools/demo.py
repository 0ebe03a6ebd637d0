"""``scar demo``: the shipped default against plain top-K on a sample that ships with the package.

The sample (``scar_tools/demo_data``) is three fictional documents (a payments API reference, a
data-retention policy, a services contract) and fifteen questions whose gold evidence is given as
character spans in the LegalBench-RAG format; most need a rule and its exception, or a table header
and its values, that a small splitter puts in different chunks.

The demo is an evaluation run (:func:`scar_tools.eval.run_evaluation`) on that sample with four
methods at the same ``K``: ``topk`` (plain top-K), ``default`` (``SCARRetriever(k=K)``: budget
mode), ``static1`` and ``scar1`` (the paper's rule), followed by a compact printout of every
question. From Python::

    from scar_tools.demo import format_demo, run_demo
    print(format_demo(run_demo()))
"""

from __future__ import annotations

import textwrap
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from scar_core._errors import DataFormatError
from scar_core._scoring import CONTINUITY_CAP, CONTINUITY_RANKS
from scar_core._settings import DEFAULT_LAMBDA, BudgetSettings
from scar_tools.eval.data import Benchmark, read_legalbench
from scar_tools.eval.runner import EvalConfig, EvalResults, run_evaluation

if TYPE_CHECKING:
    from scar_tools.cache import EmbeddingCache
    from scar_tools.embedders import Embedder

__all__ = [
    "DEMO_CHUNK_SIZE",
    "DEMO_K",
    "DEMO_METHODS",
    "format_demo",
    "load_sample",
    "run_demo",
    "sample_benchmark_path",
    "sample_corpus_dir",
]

#: Characters per chunk: small enough that most of the sample's evidence is cut in two.
DEMO_CHUNK_SIZE = 250
#: The budget K shown by default. With MiniLM and 250-character chunks, budget mode beats top-K
#: at the same K from K = 3 to 8; at K = 5 it wins on 3 questions and loses on none.
DEMO_K = 5
#: The methods compared, with their labels (``K`` is replaced by the run's K).
DEMO_METHODS = {"topk": "top-K", "default": "default", "static1": "static ±1", "scar1": "scar1"}


def _data_dir() -> Path:
    folder = resources.files("scar_tools").joinpath("demo_data")
    if not isinstance(folder, Path) or not folder.is_dir():
        raise DataFormatError(
            f"the bundled sample is not a folder on disk ({folder!s}); reinstall scar-retrieval "
            "from a wheel or a source checkout, not as a zipped package."
        )
    return folder


def sample_benchmark_path() -> Path:
    """Return the path of the sample's LegalBench-RAG benchmark JSON."""
    return _data_dir() / "sample_benchmark.json"


def sample_corpus_dir() -> Path:
    """Return the folder that the sample's ``file_path`` values are relative to."""
    return _data_dir() / "corpus"


def load_sample() -> Benchmark:
    """Read the bundled sample as a :class:`~scar_tools.eval.data.Benchmark` named ``sample``."""
    return read_legalbench(sample_benchmark_path(), sample_corpus_dir(), name="sample")


def run_demo(
    k: int = DEMO_K,
    chunk_size: int = DEMO_CHUNK_SIZE,
    *,
    embedder: Embedder | None = None,
    cache: EmbeddingCache | None = None,
    show_progress: bool = False,
) -> EvalResults:
    """Evaluate :data:`DEMO_METHODS` at ``K = k`` on the bundled sample.

    Args:
        k: The budget of ``default`` and the ``k`` of top-K, the static window and ``scar1``.
        chunk_size: Characters per chunk (no overlap).
        embedder: The embedder; the bundled all-MiniLM-L6-v2 when omitted (offline).
        cache: A vector cache, or ``None`` to embed the sample now (about 70 texts).
        show_progress: Show progress bars on stderr.

    Raises:
        InvalidSettingsError: If ``k`` or ``chunk_size`` is out of range.
        MissingDependencyError: If sentence-transformers, langchain-text-splitters or tiktoken is
            missing (extras ``sentence-transformers`` and ``eval``).
    """
    config = EvalConfig(
        k=k, chunk_size=chunk_size, methods=tuple(DEMO_METHODS), n_resamples=0, sweep=False
    )
    if embedder is None:
        from scar_tools.embedders import default_embedder

        embedder = default_embedder()
    return run_evaluation(load_sample(), embedder, config, cache=cache, show_progress=show_progress)


def _details(results: EvalResults, i: int, labels: dict[str, str]) -> list[str]:
    """One question's chunks per method (positions, ``*`` = gold) and the default's bids."""
    prepared, gold = results.prepared, results.prepared.gold[i]
    position = {c.chunk_id: c.position for c in prepared.corpus.chunks}
    query = prepared.queries[i]
    lines = textwrap.wrap(f"Q{query.index + 1}. {query.text}", 100, subsequent_indent="    ")
    for name, label in labels.items():
        ids = sorted(results.runs[name][0][i].chunk_ids, key=position.__getitem__)
        lines.append(
            f"    {label:<10} " + " ".join(f"{position[c]}{'*' * (c in gold)}" for c in ids)
        )
    chosen = results.runs["default"][0][i]
    if chosen.continuity_bonus is not None and chosen.decisions:
        lines.append(f"      α {chosen.continuity_bonus:.3f} (this question's continuity bonus)")
    for d in chosen.decisions:
        verdict = "taken" if d.accepted else "refused"
        lines.append(
            f"      bid {position[d.neighbor_id]:>2} next to {position[d.via_id]:>2}: "
            f"cos(q,n) {d.relevance:.3f}  b {d.boundary_penalty:.3f}  S {d.score:.3f} "
            f"(bar {d.threshold:.3f})  {verdict}{'  (gold)' * (d.neighbor_id in gold)}"
        )
    return lines


def format_demo(results: EvalResults, *, verbose: bool = False) -> str:
    """Return the demo's printout: setting, one line per question, means, and the tally.

    Args:
        results: What :func:`run_demo` returned.
        verbose: Also print each question's chunks (``*`` marks gold) and every bid the default
            weighed: ``S`` against its bar, the score at which the auction's verdict flips.
    """
    prepared, k = results.prepared, int(results.config["k"])
    labels = {name: label.replace("K", str(k)) for name, label in DEMO_METHODS.items()}
    runs = {name: results.runs[name][1] for name in labels}
    intro = (
        f"SCAR demo: the bundled sample, {len(prepared.benchmark.documents)} documents cut into "
        f"{len(prepared.corpus)} chunks of at most {results.config['chunk_size']} characters, "
        f"{len(prepared.queries)} questions ({int(prepared.fragmented.sum())} fragmented: evidence "
        f"in 2+ chunks). Model {prepared.model_name}; retrieval within the question's document.\n"
        f"default = SCARRetriever(k={k}), the shipped budget mode: {k} chunks; the "
        f"{BudgetSettings(k=k).kept} best hits are kept, and the {k} chunks with the highest total "
        f"bid win: a hit bids cos(q, x), a neighbour joined to a chosen chunk bids S + α, "
        f"S = cos(q, n) - {DEFAULT_LAMBDA:g} b, a run of neighbours as a whole; α is the "
        f"question's own: {CONTINUITY_RANKS:g} places down its hit list, at most "
        f"{CONTINUITY_CAP:g} × its mean boundary penalty. static ±1 and scar1 (the paper's rule, "
        f"γ 0.8) add chunks to the same {k} hits."
    )
    lines = [wrapped for part in intro.split("\n") for wrapped in [*textwrap.wrap(part, 100), ""]]
    lines.append(f"Recall of gold chunks per question ([n] = chunks returned, when not {k}):")
    lines.append(
        f" {'Q':>2}  {'document':<28}{'gold':>5}" + "".join(f"{x:>12}" for x in labels.values())
    )
    for i, query in enumerate(prepared.queries):
        cells = [
            f"{s.recall[i]:.2f}" + (f" [{s.chunks[i]:.0f}]" if s.chunks[i] != k else "")
            for s in runs.values()
        ]
        document = Path(query.document_ids[0]).stem[:27]
        lines.append(
            f" {query.index + 1:>2}  {document:<28}{len(prepared.gold[i]):>5}"
            + "".join(f"{c:>12}" for c in cells)
        )
    lines += ["", f"{'means':<18}{'recall':>8}{'chars':>8}{'chunks':>8}{'tokens':>8}"]
    for group in ("fragmented", "all"):
        lines.append(f"{group} ({int(prepared.group_mask(group).sum())})")
        for name, s in results.summary(group).items():
            lines.append(
                f"  {labels[name]:<16}{s.recall:>8.3f}{s.char_recall:>8.3f}{s.chunks:>8.2f}"
                f"{s.tokens or 0:>8.0f}"
            )
    delta = runs["default"].recall - runs["topk"].recall
    higher, lower = int((delta > 1e-9).sum()), int((delta < -1e-9).sum())
    lines += [
        "",
        f"default against {labels['topk']} (both {k} chunks): higher recall on {higher} questions, "
        f"lower on {lower}, equal on {len(delta) - higher - lower}.",
    ]
    if not verbose:
        return "\n".join(
            [*lines, "Run with --verbose for each question's chunks and the default's bids."]
        )
    lines += ["", "Chunks returned (position in the document, * = gold) and the default's bids:"]
    for i in range(len(prepared.queries)):
        lines += _details(results, i, labels)
    return "\n".join(lines)
