"""Recall against the budget: each method template (``topB``, ``budgetB``...) at every budget B."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from scar_core._errors import InvalidSettingsError, MissingDependencyError, missing_dependency
from scar_tools.eval.methods import Method, MethodRegistry
from scar_tools.eval.metrics import summarize
from scar_tools.eval.stats import paired_bootstrap

if TYPE_CHECKING:
    from scar_tools.eval.runner import PreparedBenchmark

__all__ = ["BUDGETS", "BUDGET_METHODS", "against_what_you_have", "budget_methods", "budget_sweep",
           "installed_budget_methods", "plot_budgets", "render_budgets", "render_verdict"]  # fmt: skip

#: Budgets of ``scar eval --budgets`` given without a list.
BUDGETS = (3, 5, 7, 10, 12, 15)
#: Method templates of the budget sweep: the first ``B`` of each becomes the budget.
BUDGET_METHODS = ("topB", "budgetB", "rseB", "prevnextB")
#: SCAR's default in the sweep, and what a user has without it at the same B.
SCAR_TEMPLATE, RIVAL_TEMPLATES = "budgetB", ("topB", "prevnextB")
#: A verdict's gap below this (half a recall point) is flagged as behind.
BEHIND = -0.005
_GROUPS = ("fragmented", "all")


def budget_methods(
    budgets: Sequence[int], templates: Sequence[str], registry: MethodRegistry
) -> dict[str, dict[int, tuple[str, Method]]]:
    """Build ``template -> budget -> (name, method)``, the first ``B`` of a template made the budget.

    Raises:
        InvalidSettingsError: If a budget is below 1, a template has no ``B`` or a name is unknown.
    """
    if min(budgets, default=0) < 1 or not all("B" in t for t in templates):
        raise InvalidSettingsError(f"budgets {list(budgets)} must be integers >= 1 and method "
                                   f"templates {list(templates)} must hold B, e.g. topB.")  # fmt: skip
    names = {t: {b: t.replace("B", str(b), 1) for b in budgets} for t in templates}
    return {t: {b: (n, registry.create(n, b)) for b, n in row.items()} for t, row in names.items()}


def installed_budget_methods(registry: MethodRegistry) -> tuple[list[str], list[str]]:
    """Return the default templates whose dependencies are installed, and why others are not.

    ``rseB`` needs dsRAG (extra ``compare``), which ``[all]`` leaves out.
    """
    usable, skipped = [], []
    for template in BUDGET_METHODS:
        try:
            registry.create(template.replace("B", "3", 1), 3)
        except MissingDependencyError as exc:
            skipped.append(f"{template}: {exc}")
        else:
            usable.append(template)
    return usable, skipped


def budget_sweep(
    prepared: PreparedBenchmark,
    methods: Mapping[str, Mapping[int, tuple[str, Method]]],
    n_resamples: int = 0,
    seed: int = 0,
) -> dict[str, Any]:
    """Run :func:`budget_methods`' methods: ``curves: template -> B -> group -> means``.

    With ``budgetB`` and ``topB`` or ``prevnextB`` among them, ``verdict`` holds
    :func:`against_what_you_have`, with a paired bootstrap interval of ``n_resamples`` (none at 0).
    """
    from scar_tools.eval.runner import run_methods

    flat = {name: method for row in methods.values() for name, method in row.values()}
    runs = run_methods(prepared, flat, 1)
    curves = {t: {str(b): {g: summarize(runs[n][1].subset(prepared.group_mask(g))).as_dict()
                           for g in _GROUPS} for b, (n, _) in row.items()}
              for t, row in methods.items()}  # fmt: skip
    recalls = {t: {b: runs[n][1].recall for b, (n, _) in row.items()} for t, row in methods.items()}
    section: dict[str, Any] = {
        "budgets": sorted({b for row in methods.values() for b in row}),
        "curves": curves,
    }
    if verdict := against_what_you_have(recalls, n_resamples, seed):
        section["verdict"] = verdict
    return section


def against_what_you_have(
    recalls: Mapping[str, Mapping[int, npt.NDArray[np.float64]]],
    n_resamples: int = 0,
    seed: int = 0,
) -> dict[str, dict[str, Any]]:
    """``budgetB`` against the better of ``topB`` and ``prevnextB`` at each B, on all queries.

    Args:
        recalls: ``template -> B -> per-query chunk recall``.
        n_resamples: Resamples of the paired bootstrap interval of the gap; 0 for none.
        seed: Seed of the resampling.

    Returns:
        ``B -> {"against", "gap", "won", "lost", "n"}`` (and ``"ci"``, the 95% interval of the
        gap, with resamples): the rival template with the higher mean recall, SCAR's mean minus
        its mean, and the queries on which SCAR's recall is above and below its; empty without
        ``budgetB`` or without either rival.
    """
    ours = recalls.get(SCAR_TEMPLATE)
    rivals = [t for t in RIVAL_TEMPLATES if t in recalls]
    if ours is None or not rivals:
        return {}
    verdict: dict[str, dict[str, Any]] = {}
    for b, mine in sorted(ours.items()):
        present = [t for t in rivals if b in recalls[t]]
        if not present:
            continue
        best = max(present, key=lambda t: float(np.mean(recalls[t][b])))
        theirs = recalls[best][b]
        verdict[str(b)] = {
            "against": best,
            "gap": float(np.mean(mine) - np.mean(theirs)),
            "won": int(np.sum(mine > theirs)),
            "lost": int(np.sum(mine < theirs)),
            "n": len(mine),
        }
        if n_resamples:
            compared = paired_bootstrap(mine, theirs, n_resamples=n_resamples, seed=seed)
            verdict[str(b)]["ci"] = [compared.ci_low, compared.ci_high]
    return verdict


def render_budgets(section: Mapping[str, Any]) -> list[str]:
    """Markdown tables of the sweep, per B and method: chunk recall, character recall and tokens.

    A cell reads ``recall / char recall / tokens``, with the mean chunks in brackets when they are
    not ``B``; tokens are left out when they were not counted.
    """
    curves = list(section["curves"])
    lines = ["## Recall against the budget B", "", "![recall against B](budgets.png)", "",
             "Each cell: chunk recall / evidence-character recall / mean tokens of the context "
             "(mean chunks in brackets when not B)."]  # fmt: skip

    def cell(c: Mapping[str, Any], b: int) -> str:
        text = f"{c['recall']:.3f} / {c['char_recall']:.3f}"
        if c.get("tokens") is not None:
            text += f" / {c['tokens']:.0f}"
        return text + ("" if c["chunks"] == b else f" ({c['chunks']:.2f})")

    for group in _GROUPS:
        lines += ["", f"{group} queries:", "", f"| B | {' | '.join(curves)} |",
                  "|---:|" + "---:|" * len(curves)]  # fmt: skip
        for b in section["budgets"]:
            cells = (cell(section["curves"][t][str(b)][group], b) for t in curves)
            lines.append(f"| {b} | " + " | ".join(cells) + " |")
    return [*lines, "", *render_verdict(section.get("verdict", {}))]


def render_verdict(verdict: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The verdict of :func:`against_what_you_have` as a Markdown table (none when empty)."""
    if not verdict:
        return []
    lines = ["### SCAR against what you have, on these queries", "",
             f"All queries: `{SCAR_TEMPLATE}` minus the better of "
             f"{' and '.join(f'`{t}`' for t in RIVAL_TEMPLATES)} at the same B (recall points, "
             "with its 95% paired bootstrap interval when resampled), and the queries on which "
             "SCAR's recall is above or below it.", "",
             "| B | against | SCAR minus it | queries won | queries lost |",
             "|---:|---|---:|---:|---:|"]  # fmt: skip
    behind = [b for b, row in verdict.items() if row["gap"] < BEHIND]
    for b, row in verdict.items():
        flag = " **behind**" if b in behind else ""
        if "ci" in row:
            flag = f" [{100 * row['ci'][0]:+.1f}, {100 * row['ci'][1]:+.1f}]{flag}"
        lines.append(f"| {b} | {row['against']} | {100 * row['gap']:+.1f}{flag} | "
                     f"{row['won']} | {row['lost']} |")  # fmt: skip
    if behind:
        lines += ["", f"SCAR is behind at B = {', '.join(behind)} on these queries. Where the "
                  "interval includes 0 the gap may be chance; where it does not, keep more hits "
                  "(`keep=`) or use plain top-B at that budget."]  # fmt: skip
    return [*lines, ""]


def plot_budgets(section: Mapping[str, Any], path: str | Path, title: str = "") -> Path:
    """Draw recall against B, one line per template, one panel per group (extra ``eval``)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise missing_dependency("matplotlib", "eval") from exc
    figure, axes = plt.subplots(1, len(_GROUPS), figsize=(10.4, 4.4), squeeze=False)
    for axis, group in zip(axes[0], _GROUPS, strict=True):
        for template, curve in section["curves"].items():
            axis.plot(section["budgets"], [curve[str(b)][group]["recall"]
                      for b in section["budgets"]], marker="o", ms=4, label=template)  # fmt: skip
        axis.set(title=f"{title} {group} queries", xlabel="budget B (chunks)", ylabel="recall")
        axis.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8, loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return Path(path)
