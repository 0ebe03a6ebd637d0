"""``scar demo``: the shipped default against plain top-K on a sample that ships with the package.

The sample (``scar_core/demo_data``) is three fictional documents (a payments API reference, a
data-retention policy, a services contract) and fifteen questions whose gold evidence is given as
character spans in the LegalBench-RAG format; most need a rule and its exception, or a table header
and its values, that a small splitter puts in different chunks.

The demo is an evaluation run (:func:`scar_core.eval.run_evaluation`) on that sample with four
methods at the same ``K``: ``topk`` (plain top-K), ``default`` (``SCARRetriever(k=K)``: budget
mode), ``static1`` and ``scar1`` (the paper's rule), followed by a compact printout of every
question. From Python::

    from scar_core.demo import format_demo, run_demo
    print(format_demo(run_demo()))
"""

from __future__ import annotations

import textwrap
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from scar_core.errors import DataFormatError
from scar_core.eval.data import Benchmark, read_legalbench
from scar_core.eval.runner import EvalConfig, EvalResults, run_evaluation
from scar_core.selection import Selection
from scar_core.settings import DEFAULT_CONTINUITY_BONUS, BudgetSettings

if TYPE_CHECKING:
    from scar_core.cache import EmbeddingCache
    from scar_core.embedders import Embedder

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
DEMO_CHUNK_SIZE = 300
#: The budget K shown by default; chosen where budget mode and top-K differ on the sample.
DEMO_K = 4
#: The methods compared, with their labels (``K`` is replaced by the run's K).
DEMO_METHODS = {"topk": "top-K", "default": "default", "static1": "static ±1", "scar1": "scar1"}


def _data_dir() -> Path:
    folder = resources.files("scar_core").joinpath("demo_data")
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
    """Read the bundled sample as a :class:`~scar_core.eval.data.Benchmark` named ``sample``."""
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
        from scar_core.embedders import default_embedder

        embedder = default_embedder()
    return run_evaluation(load_sample(), embedder, config, cache=cache, show_progress=show_progress)


def _labels(k: int) -> dict[str, str]:
    return {name: label.replace("K", str(k)) for name, label in DEMO_METHODS.items()}


def _cell(recall: float, chunks: int, k: int) -> str:
    return f"{recall:.2f}" + ("" if chunks == k else f" [{chunks}]")


def _positions(results: EvalResults, selection: Selection, gold: frozenset[str]) -> str:
    corpus = results.prepared.corpus
    rows = sorted(corpus.row_of[c] for c in selection.chunk_ids)
    return " ".join(
        f"{corpus.chunks[r].position}{'*' if corpus.chunks[r].chunk_id in gold else ''}"
        for r in rows
    )


def _details(results: EvalResults, i: int, labels: dict[str, str]) -> list[str]:
    prepared, corpus = results.prepared, results.prepared.corpus
    gold = prepared.gold[i]
    query = prepared.queries[i]
    lines = textwrap.wrap(f"Q{query.index + 1}. {query.text}", 100, subsequent_indent="    ")
    for name, label in labels.items():
        lines.append(f"    {label:<10} {_positions(results, results.runs[name][0][i], gold)}")
    position = {c.chunk_id: c.position for c in corpus.chunks}
    for d in results.runs["default"][0][i].decisions:
        verdict = "taken  " if d.accepted else "refused"
        lines.append(
            f"      bid {position[d.neighbor_id]:>2} next to {position[d.via_id]:>2}: cos(q,n) {d.relevance:.3f}"
            f"  b {d.boundary_penalty:.3f}  S {d.score:.3f} {'>' if d.accepted else '≤'} {d.threshold:.3f}  {verdict}"
            f"{'  gold' if d.neighbor_id in gold else ''}"
        )
    return lines


def format_demo(results: EvalResults, *, verbose: bool = False) -> str:
    """Return the demo's printout: setting, one line per question, means, and the tally.

    Args:
        results: What :func:`run_demo` returned.
        verbose: Also print each question's chunks (``*`` marks gold) and every bid the default
            weighed: ``S`` against the bar ``competing bid - α``.
    """
    prepared = results.prepared
    k = int(results.config["k"])
    labels = _labels(k)
    kept = BudgetSettings(k=k).kept
    fragmented = int(prepared.fragmented.sum())
    lines = textwrap.wrap(
        f"SCAR demo: the bundled sample, {len(prepared.benchmark.documents)} documents cut into "
        f"{len(prepared.corpus)} chunks of at most {results.config['chunk_size']} characters, "
        f"{len(prepared.queries)} questions ({fragmented} fragmented: evidence in 2+ chunks). "
        f"Model {prepared.model_name}; retrieval by cosine within the question's document.",
        100,
    )
    lines += [""] + textwrap.wrap(
        f"default = SCARRetriever(k={k}), the shipped budget mode: {k} chunks; the {kept} best hits "
        f"are kept, then each slot goes to the highest bid: a further hit bids cos(q, x), a neighbour "
        f"of a chunk already taken bids S + {DEFAULT_CONTINUITY_BONUS:g} (S = cos(q, n) - 0.1 b). "
        f"static ±1 and scar1 (the paper's rule, γ 0.8) start from the same {k} hits and add chunks.",
        100,
    )
    lines += ["", f"Recall of gold chunks per question ([n] = chunks returned, when not {k}):"]
    header = f" {'Q':>2}  {'document':<28}{'gold':>5}" + "".join(
        f"{label:>12}" for label in labels.values()
    )
    lines.append(header)
    for i, query in enumerate(prepared.queries):
        cells = "".join(
            f"{_cell(float(results.runs[n][1].recall[i]), int(results.runs[n][1].chunks[i]), k):>12}"
            for n in labels
        )
        document = Path(query.document_ids[0]).stem[:27]
        lines.append(f" {query.index + 1:>2}  {document:<28}{len(prepared.gold[i]):>5}{cells}")
    lines += ["", f"{'means':<18}{'recall':>8}{'chars':>8}{'chunks':>8}{'tokens':>8}"]
    for group in ("fragmented", "all"):
        summaries = results.summary(group)
        lines.append(f"{group} ({int(prepared.group_mask(group).sum())})")
        for name, label in labels.items():
            s = summaries[name]
            lines.append(
                f"  {label:<16}{s.recall:>8.3f}{s.char_recall:>8.3f}{s.chunks:>8.2f}{s.tokens or 0:>8.0f}"
            )
    delta = results.runs["default"][1].recall - results.runs["topk"][1].recall
    lines += [
        "",
        f"default against {labels['topk']} (both {k} chunks): higher recall on {int((delta > 1e-12).sum())} "
        f"questions, lower on {int((delta < -1e-12).sum())}, equal on {int((np.abs(delta) <= 1e-12).sum())}.",
    ]
    if verbose:
        lines += [
            "",
            "Chunks returned (position in the document, * = gold) and the default's bids:",
        ]
        for i in range(len(prepared.queries)):
            lines += _details(results, i, labels)
    else:
        lines.append("Run with --verbose for every question's chunks and the default's bids.")
    return "\n".join(lines)
