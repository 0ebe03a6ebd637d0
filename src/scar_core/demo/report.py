"""Plain-text report of a demo run: one block per question, then a summary table.

Everything fits a 100-column terminal and needs no dependency. Chunks are named by their
position in their document (0, 1, 2, ...); ``*`` marks a chunk that holds gold evidence.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from scar_core.demo.runner import (
    GROUPS,
    METHODS,
    DemoResult,
    MethodName,
    NeighborDecision,
    QuestionOutcome,
)
from scar_core.settings import DEFAULT_GAMMA

__all__ = [
    "WIDTH",
    "format_header",
    "format_question",
    "format_report",
    "format_summary",
    "method_label",
]

#: Columns the report is laid out for.
WIDTH = 100

_INDENT = "    "
_METHOD_COLUMN = 16
_GROUP_COLUMN = 17


def method_label(method: MethodName, result: DemoResult) -> str:
    """Return the display name of a method at the run's settings, e.g. ``top-3`` or ``static ±1``."""
    settings = result.settings
    if method == "topk":
        return f"top-{settings.k}"
    if method == "topk_matched":
        return "top-n, n=SCAR's"
    if method == "static":
        return f"static ±{settings.window}"
    return "SCAR"


def _document_label(document: str) -> str:
    return document.rsplit("/", 1)[-1]


def format_header(result: DemoResult, fragmented: int | None = None) -> str:
    """Return the lines that state the sample, the model and the settings."""
    settings = result.settings
    n_questions = len(result.questions)
    if fragmented is None:
        fragmented = len(result.group("fragmented"))
    total_chunks = sum(result.chunk_counts.values())
    lines = [
        f"SCAR demo: {len(result.chunk_counts)} documents, {n_questions} questions, "
        f"{total_chunks} chunks of at most {settings.chunk_size} characters (no overlap).",
        f"{fragmented} of {n_questions} questions are boundary-fragmented: their evidence falls "
        "in 2 or more chunks.",
        f"Model: {result.model_name}. Retrieval: top-{settings.k} by cosine within the "
        "question's document.",
        f"SCAR: add neighbour n of seed c when S = cos(q,n) - λ·b > γ·cos(q,c), b = 1 - cos(c,n); "
        f"λ = {settings.lambda_:g}, γ = {settings.gamma:g}, window ±{settings.window}.",
    ]
    if settings.gamma != DEFAULT_GAMMA:
        lines.append(
            f"(The paper's γ is {DEFAULT_GAMMA:g}; with a small local model like MiniLM it barely "
            f"expands. Try --gamma {DEFAULT_GAMMA:g}.)"
        )
    return "\n".join(
        wrapped for line in lines for wrapped in textwrap.wrap(line, WIDTH, subsequent_indent="  ")
    )


def _chunk_list(positions: Sequence[int], gold: Sequence[int]) -> str:
    return " ".join(f"{p}*" if p in gold else str(p) for p in positions)


def _wrap_after(prefix: str, text: str) -> list[str]:
    """Lay ``text`` out to the right of ``prefix``, wrapping under itself within :data:`WIDTH`."""
    room = max(WIDTH - len(prefix), 20)
    pieces = textwrap.wrap(text, room) or [""]
    return [prefix + pieces[0]] + [" " * len(prefix) + piece for piece in pieces[1:]]


def _decision_line(decision: NeighborDecision) -> str:
    comparison = ">" if decision.accepted else "≤"
    verdict = "accepted" if decision.accepted else "refused"
    note = "gold" if decision.gold else ""
    step = "" if decision.distance == 1 else f" ({decision.distance} steps)"
    return (
        f"{_INDENT}  {decision.seed:>3} → {decision.neighbor:<3}{'':<1}"
        f"cos(q,n) {decision.relevance:6.3f}  b {decision.boundary_penalty:5.3f}  "
        f"S {decision.score:6.3f} {comparison} {decision.threshold:6.3f}  "
        f"{verdict:<8}  {note}{step}"
    ).rstrip()


def format_question(question: QuestionOutcome, result: DemoResult) -> str:
    """Return the block of one question: its methods side by side and SCAR's decisions."""
    kind = (
        f"fragmented: evidence in chunks {', '.join(map(str, question.gold))}"
        if question.fragmented
        else f"atomic: evidence in chunk {', '.join(map(str, question.gold))}"
    )
    lines = [f"Q{question.index + 1}  {_document_label(question.document)}  ({kind})"]
    lines += textwrap.wrap(question.query, WIDTH, initial_indent=_INDENT, subsequent_indent=_INDENT)
    seeds = ", ".join(f"{p} ({cosine:.3f})" for p, cosine in question.seeds)
    lines += _wrap_after(f"{_INDENT}seeds (cos to the question): ", seeds)
    header = (
        f"{_INDENT}{'method':<{_METHOD_COLUMN}}{'chunks':>6}{'tokens':>8}{'recall':>8}"
        f"{'chars':>7}   chunks returned (* = gold)"
    )
    lines.append(header)
    for method in METHODS:
        outcome = question.methods[method]
        prefix = (
            f"{_INDENT}{method_label(method, result):<{_METHOD_COLUMN}}{outcome.chunks:>6}"
            f"{outcome.tokens:>8}{outcome.recall:>8.2f}{outcome.char_recall:>7.2f}   "
        )
        lines += _wrap_after(prefix, _chunk_list(outcome.positions, question.gold))
    if question.decisions:
        lines.append(f"{_INDENT}SCAR's decisions, seed → neighbour (S vs threshold γ·cos(q,seed)):")
        lines += [_decision_line(decision) for decision in question.decisions]
    else:
        lines.append(f"{_INDENT}SCAR had no neighbour to decide (every neighbour was a seed).")
    return "\n".join(lines)


def format_summary(result: DemoResult) -> str:
    """Return the summary table: mean recall, character recall, chunks and tokens per method."""
    lines = [
        "Summary: means per question",
        f"{'questions':<{_GROUP_COLUMN}}{'method':<{_METHOD_COLUMN}}"
        f"{'recall':>8}{'chars':>8}{'chunks':>8}{'tokens':>8}",
    ]
    for group in GROUPS:
        size = len(result.group(group))
        if size == 0:
            continue
        for row, method in enumerate(METHODS):
            means = result.means(method, group)
            title = f"{group} ({size})" if row == 0 else ""
            lines.append(
                f"{title:<{_GROUP_COLUMN}}{method_label(method, result):<{_METHOD_COLUMN}}"
                f"{means.recall:>8.3f}{means.char_recall:>8.3f}{means.chunks:>8.2f}"
                f"{means.tokens:>8.0f}"
            )
    lines += [
        "recall: share of gold chunks returned; chars: share of evidence characters inside the",
        "returned chunks (the blank lines between chunks belong to none, so all evidence can read",
        "0.999); tokens: cl100k_base tokens of the returned chunks joined into passages.",
        "top-n returns, per question, the n best chunks where n is the number SCAR returned:",
        "plain top-k at SCAR's budget.",
    ]
    return "\n".join(lines)


def format_report(result: DemoResult) -> str:
    """Return the whole report: header, one block per question, summary."""
    rule = "─" * WIDTH
    parts = [format_header(result), rule]
    for question in result.questions:
        parts += [format_question(question, result), ""]
    parts += [rule, format_summary(result)]
    return "\n".join(parts)
