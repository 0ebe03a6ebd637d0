"""Write an evaluation's files: results.json, report.md, per_query.jsonl and pareto.png."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scar_core._errors import missing_dependency
from scar_tools.eval.runner import GROUPS, EvalResults

__all__ = ["plot_pareto", "render_markdown", "write_outputs"]

_TITLES = {"fragmented": "Fragmented queries", "atomic": "Atomic queries", "all": "All queries"}


def _number(value: float | None, digits: int = 3) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _interval(entry: Mapping[str, Any], digits: int) -> str:
    low, high = entry["ci_low"], entry["ci_high"]
    return f"{entry['mean_difference']:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}]"


def _p(entry: Mapping[str, Any]) -> str:
    value = entry["p_value"]
    return f"{value:.4f}" if value >= 1e-4 else f"{value:.1e}"


def render_markdown(payload: Mapping[str, Any]) -> str:
    """Render the content of ``results.json`` as a Markdown report: means per group, bootstrap."""
    config, bench = payload["config"], payload["benchmark"]
    lines = [
        f"# SCAR evaluation: {bench['name']}",
        "",
        f"- {bench['evaluated_queries']} queries evaluated ({len(bench['excluded_queries'])} "
        f"excluded), {bench['documents']} documents, {bench['chunks']} chunks",
        f"- embedder `{config['embedder']}`, scope `{config['scope']}`, k = {config['k']}, "
        "chunks of "
        f"{config['chunk_size']} characters with {config['chunk_overlap']} overlap",
        "- recall: share of gold chunks returned; char recall: share of evidence characters inside "
        "the returned chunks; chunks: unique chunks; efficiency: recall / chunks; tokens: "
        "cl100k_base tokens of the returned passages",
        "",
    ]
    for group in GROUPS:
        data = payload["groups"][group]
        lines += [f"## {_TITLES[group]} (n = {data['n']})", ""]
        lines += [
            "| method | recall | char recall | chunks | efficiency | tokens |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for name, s in data["methods"].items():
            lines.append(
                f"| {name} | {_number(s['recall'])} | {_number(s['char_recall'])} | "
                f"{_number(s['chunks'], 2)} | {_number(s['efficiency'])} | "
                f"{_number(s['tokens'], 0)} |"
            )
        lines.append("")
    boot = payload.get("bootstrap")
    if boot:
        reference = boot["reference"]
        lines += [
            f"## Paired bootstrap: {reference} minus each method",
            "",
            f"B = {boot['n_resamples']} resamples of queries (seed {boot['seed']}), 95% percentile "
            "intervals, two-sided p, paired Cohen's d.",
            "",
        ]
        for group, table in boot["groups"].items():
            lines += [f"### {_TITLES[group]}", ""]
            lines += [
                f"| {reference} minus | Δ recall [95% CI] | p | d | Δ chunks [95% CI] | p |",
                "|---|---:|---:|---:|---:|---:|",
            ]
            for name, m in table.items():
                recall, chunks = m["recall"], m["chunks"]
                lines.append(
                    f"| {name} | {_interval(recall, 3)} | {_p(recall)} | "
                    f"{_number(recall['cohens_d'], 2)} | {_interval(chunks, 2)} | {_p(chunks)} |"
                )
            lines.append("")
    if payload.get("sweep"):
        lines += [
            "## Recall against chunks (fragmented queries)",
            "",
            "![recall against chunks](pareto.png)",
            "",
        ]
        for label, points in payload["sweep"].items():
            fragmented = ((n, p["fragmented"]) for n, p in points.items())
            cells = (
                f"{n} {_number(p['recall'])} @ {_number(p['chunks'], 2)}" for n, p in fragmented
            )
            lines.append(f"- {label}: {', '.join(cells)}")
        lines.append("")
    if payload.get("answers"):
        from scar_tools.eval.answers import render_answers

        lines += render_answers(payload["answers"])
    if payload.get("budgets"):
        from scar_tools.eval.budgets import render_budgets

        lines += render_budgets(payload["budgets"])
    return "\n".join(lines)


def plot_pareto(payload: Mapping[str, Any], path: str | Path) -> Path:
    """Draw recall against mean chunks for every sweep curve, one panel per group, as a PNG.

    Raises:
        MissingDependencyError: If matplotlib is not installed (extra ``eval``).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise missing_dependency("matplotlib", "eval") from exc
    figure, axes = plt.subplots(1, len(GROUPS), figsize=(5.2 * len(GROUPS), 4.4), squeeze=False)
    for axis, group in zip(axes[0], GROUPS, strict=True):
        for (label, curve), marker in zip(
            (payload.get("sweep") or {}).items(), "os^D", strict=False
        ):
            points = [p[group] for p in curve.values() if p[group]["chunks"] is not None]
            xs, ys = [p["chunks"] for p in points], [p["recall"] for p in points]
            axis.plot(xs, ys, marker=marker, ms=4, label=label)
        for name, s in payload["groups"][group]["methods"].items():
            if s["chunks"] is not None and name.startswith(("topk_matched", "parent", "default")):
                axis.plot(s["chunks"], s["recall"], "kx", ms=7)
                axis.annotate(name, (s["chunks"], s["recall"]), fontsize=7)
        axis.set(title=f"{_TITLES[group]} (n = {payload['groups'][group]['n']})",
                 xlabel="mean unique chunks", ylabel="chunk recall")  # fmt: skip
        axis.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7, loc="lower right")
    figure.suptitle(f"{payload['benchmark']['name']}: recall against chunks")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return Path(path)


def write_outputs(
    results: EvalResults, out_dir: str | Path, *, plot: bool = True
) -> dict[str, Path]:
    """Write the run's files to ``out_dir`` (created if needed).

    ``results.json`` holds the settings, means per group and method, the bootstrap and the sweep;
    ``report.md`` the same as tables; ``per_query.jsonl`` one line per evaluated query (its index,
    text, group, gold chunk count and every method's scores on it); ``pareto.png`` the sweep, drawn
    when ``plot`` is true and the run has a sweep.

    Returns:
        ``kind -> path`` of every file written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    payload = results.to_dict()
    written = {
        "results": out / "results.json",
        "report": out / "report.md",
        "per_query": out / "per_query.jsonl",
    }
    written["results"].write_text(
        json.dumps(payload, indent=2, ensure_ascii=False, allow_nan=False) + "\n", encoding="utf-8"
    )
    written["report"].write_text(render_markdown(payload), encoding="utf-8")
    with written["per_query"].open("w", encoding="utf-8") as handle:
        for row in results.per_query_rows():
            handle.write(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n")
    if plot and payload.get("sweep"):
        written["plot"] = plot_pareto(payload, out / "pareto.png")
    if plot and payload.get("budgets"):
        from scar_tools.eval.budgets import plot_budgets

        written["budgets"] = plot_budgets(payload["budgets"], out / "budgets.png",
                                          payload["benchmark"]["name"])  # fmt: skip
    return written
