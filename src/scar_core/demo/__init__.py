"""``scar demo``: SCAR on a small sample that ships with the package, offline.

The sample (three documents and fifteen questions with gold character spans) is also what
``scar eval`` runs on when it is given no benchmark. From Python::

    from scar_core.demo import DEMO_DEFAULTS, format_report, run_demo
    result = run_demo(DEMO_DEFAULTS)           # bundled all-MiniLM-L6-v2, no network
    print(format_report(result))
    result.means("scar", "fragmented").recall

Running needs the ``sentence-transformers`` and ``eval`` extras; importing this package needs
only numpy.
"""

from __future__ import annotations

from scar_core.demo.report import format_report, format_summary
from scar_core.demo.runner import (
    DEMO_DEFAULTS,
    METHODS,
    DemoChunk,
    DemoResult,
    DemoSettings,
    MethodMeans,
    MethodOutcome,
    NeighborDecision,
    QuestionOutcome,
    fragmented_questions,
    gold_positions,
    run_demo,
    split_documents,
)
from scar_core.demo.sample import (
    Sample,
    SampleQuestion,
    SampleSpan,
    load_sample,
    sample_benchmark_path,
    sample_corpus_dir,
)

__all__ = [
    "DEMO_DEFAULTS",
    "METHODS",
    "DemoChunk",
    "DemoResult",
    "DemoSettings",
    "MethodMeans",
    "MethodOutcome",
    "NeighborDecision",
    "QuestionOutcome",
    "Sample",
    "SampleQuestion",
    "SampleSpan",
    "format_report",
    "format_summary",
    "fragmented_questions",
    "gold_positions",
    "load_sample",
    "run_demo",
    "sample_benchmark_path",
    "sample_corpus_dir",
    "split_documents",
]
