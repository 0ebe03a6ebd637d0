"""Write an evaluation's outputs: ``results.json``, ``report.md`` and ``pareto.png``."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from scar_core.errors import missing_dependency
from scar_core.eval.runner import GROUPS, EvalResults

__all__ = [
    "plot_pareto",
    "render_bootstrap",
    "render_markdown",
    "render_method_tables",
    "write_outputs",
]

_GROUP_TITLES = {
    "fragmented": "Fragmented queries",
    "atomic": "Atomic queries",
    "all": "All queries",
}


def _number(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:.{digits}f}"


def _p_value(value: float) -> str:
    return f"{value:.4f}" if value >= 1e-4 else f"{value:.1e}"


def _method_table(methods: Mapping[str, Mapping[str, float | None]]) -> list[str]:
    lines = [
        "| method | recall | char recall | chunks | efficiency | tokens |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, summary in methods.items():
        lines.append(
            f"| {name} | {_number(summary['recall'])} | {_number(summary['char_recall'])} | "
            f"{_number(summary['chunks'], 2)} | {_number(summary['efficiency'])} | "
            f"{_number(summary['tokens'], 0)} |"
        )
    return lines


def _interval(entry: Mapping[str, Any], digits: int) -> str:
    return (
        f"{entry['mean_difference']:+.{digits}f} "
        f"[{entry['ci_low']:+.{digits}f}, {entry['ci_high']:+.{digits}f}]"
    )


def _bootstrap_table(reference: str, comparisons: Mapping[str, Any]) -> list[str]:
    lines = [
        f"| {reference} minus | Δ chunks [95% CI] | p | d | Δ recall [95% CI] | p | d |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for baseline, metrics in comparisons.items():
        chunks, recall = metrics["chunks"], metrics["recall"]
        lines.append(
            f"| {baseline} | {_interval(chunks, 2)} | {_p_value(chunks['p_value'])} | "
            f"{_number(chunks['cohens_d'], 2)} | {_interval(recall, 3)} | "
            f"{_p_value(recall['p_value'])} | {_number(recall['cohens_d'], 2)} |"
        )
    return lines


def render_method_tables(payload: Mapping[str, Any], groups: Sequence[str] = GROUPS) -> str:
    """Render one Markdown table of every method's means per group of ``results.json`` content."""
    lines: list[str] = []
    for group in groups:
        data = payload["groups"][group]
        lines += [f"## {_GROUP_TITLES[group]} (n = {data['n']})", ""]
        lines += [*_method_table(data["methods"]), ""]
    return "\n".join(lines)


def render_bootstrap(payload: Mapping[str, Any], groups: Sequence[str] = GROUPS) -> str:
    """Render the paired-bootstrap tables of ``results.json`` content (empty when there are none)."""
    bootstrap = payload.get("bootstrap")
    if not bootstrap:
        return ""
    lines = [
        f"## Paired bootstrap ({bootstrap['reference']} against each method)",
        "",
        f"B = {bootstrap['n_resamples']} resamples of queries, seed {bootstrap['seed']}; "
        f"95% percentile intervals; p {bootstrap['p_value']}; d is {bootstrap['cohens_d']}.",
        "",
    ]
    for group in groups:
        comparisons = bootstrap["groups"].get(group)
        if comparisons:
            lines += [f"### {_GROUP_TITLES[group]}", ""]
            lines += [*_bootstrap_table(bootstrap["reference"], comparisons), ""]
    return "\n".join(lines)


def render_markdown(payload: Mapping[str, Any]) -> str:
    """Render ``results.json`` content as a Markdown report (tables and the bootstrap)."""
    config = payload["config"]
    benchmark = payload["benchmark"]
    lines = [
        f"# SCAR evaluation: {benchmark['name']}",
        "",
        f"- {benchmark['evaluated_queries']} queries evaluated "
        f"({len(benchmark['excluded_queries'])} excluded), {benchmark['documents']} documents, "
        f"{benchmark['chunks']} chunks",
        f"- embedder `{config['embedder']}`, scope `{config['scope']}`, k = {config['k']}, "
        f"chunks of {config['chunk_size']} characters with {config['chunk_overlap']} overlap",
        "- recall: share of gold chunks retrieved (mean over queries); char recall: share of "
        "evidence characters covered; chunks: mean unique chunks; efficiency: recall / chunks; "
        f"tokens: {config['token_counting']}",
        "",
    ]
    lines.append(render_method_tables(payload))
    if payload.get("skipped"):
        lines += ["## Skipped", ""]
        lines += [f"- `{name}`: {why}" for name, why in payload["skipped"].items()]
        lines.append("")
    if payload.get("bootstrap"):
        lines.append(render_bootstrap(payload))
    if payload.get("sweep"):
        lines += [
            "## Recall against chunks",
            "",
            "![recall against chunks](pareto.png)",
            "",
            "Fragmented queries, one row per point (recall @ chunks):",
            "",
        ]
        for curve in payload["sweep"]:
            points = ", ".join(
                f"{curve['parameter']}={point['value']:g}: "
                f"{_number(point['groups']['fragmented']['recall'])} @ "
                f"{_number(point['groups']['fragmented']['chunks'], 2)}"
                for point in curve["points"]
            )
            lines.append(f"- {curve['label']}: {points}")
        lines.append("")
    return "\n".join(lines)


def plot_pareto(payload: Mapping[str, Any], path: str | Path) -> Path:
    """Draw recall against mean chunks for every sweep curve, one panel per group, to a PNG.

    Raises:
        MissingDependencyError: If matplotlib is not installed (extra ``eval``).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise missing_dependency("matplotlib", "eval") from exc
    path = Path(path)
    figure, axes = plt.subplots(1, len(GROUPS), figsize=(5.2 * len(GROUPS), 4.4), squeeze=False)
    markers = {"top-k": "o", "static": "s", "scar": "^", "custom": "D"}
    for axis, group in zip(axes[0], GROUPS, strict=True):
        for curve in payload.get("sweep") or []:
            xs = [p["groups"][group]["chunks"] for p in curve["points"]]
            ys = [p["groups"][group]["recall"] for p in curve["points"]]
            if any(x is None for x in xs):
                continue
            axis.plot(xs, ys, marker=markers.get(curve["family"], "."), ms=4, label=curve["label"])
        for name, summary in payload["groups"][group]["methods"].items():
            if summary["chunks"] is not None and name.startswith(
                ("topk_matched", "parent", "rerank")
            ):
                axis.plot(summary["chunks"], summary["recall"], "kx", ms=7)
                axis.annotate(name, (summary["chunks"], summary["recall"]), fontsize=7)
        n = payload["groups"][group]["n"]
        axis.set_title(f"{_GROUP_TITLES[group]} (n = {n})")
        axis.set_xlabel("mean unique chunks")
        axis.set_ylabel("chunk recall")
        axis.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7, loc="lower right")
    figure.suptitle(f"{payload['benchmark']['name']}: recall against chunks")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def write_outputs(
    results: EvalResults, out_dir: str | Path, *, plot: bool = True
) -> dict[str, Path]:
    """Write ``results.json``, ``report.md``, ``per_query.jsonl`` and ``pareto.png`` to ``out_dir``.

    ``per_query.jsonl`` has one line per evaluated query: its index in the benchmark, its text,
    its group, its gold chunk count and, per method, its recall, character recall, chunks and
    tokens. ``pareto.png`` is drawn when ``plot`` is true and the run has a sweep.

    Returns:
        ``kind -> path`` of every file written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    payload = results.to_dict()
    written = {"results": out / "results.json", "report": out / "report.md"}
    written["results"].write_text(
        json.dumps(payload, indent=2, ensure_ascii=False, allow_nan=False) + "\n", encoding="utf-8"
    )
    written["report"].write_text(render_markdown(payload), encoding="utf-8")
    written["per_query"] = out / "per_query.jsonl"
    with written["per_query"].open("w", encoding="utf-8") as handle:
        for row in results.per_query_rows():
            handle.write(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n")
    if plot and payload.get("sweep"):
        written["plot"] = plot_pareto(payload, out / "pareto.png")
    return written
