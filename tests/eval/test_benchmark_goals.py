"""The goal arithmetic of issue 36 that ``benchmarks/never_worse.py`` and ``budget_sweep.py`` print."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import budget_sweep  # benchmarks/ is a script folder, found through sys.path
import never_worse

BUDGETS = [3, 5, 7]
#: recall by method and B: fragmented, all (two sets, one scope).
FIRST = {
    "top": {3: (0.30, 0.40), 5: (0.40, 0.50), 7: (0.50, 0.60)},
    "prevnext": {3: (0.32, 0.38), 5: (0.45, 0.52), 7: (0.52, 0.58)},
    "rse": {3: (0.31, 0.39), 5: (0.41, 0.50), 7: (0.55, 0.59)},
    "budget": {3: (0.35, 0.41), 5: (0.48, 0.51), 7: (0.56, 0.60)},
}
SECOND = {
    "top": {3: (0.10, 0.20), 5: (0.20, 0.30), 7: (0.30, 0.40)},
    "prevnext": {3: (0.12, 0.18), 5: (0.22, 0.28), 7: (0.28, 0.35)},
    "rse": {3: (0.11, 0.19), 5: (0.21, 0.29), 7: (0.29, 0.39)},
    "budget": {3: (0.14, 0.22), 5: (0.19, 0.33), 7: (0.33, 0.32)},
}


def sweep_entry(recalls: dict) -> dict:
    """One set as ``budget_sweep.py`` writes it."""
    names = {
        "top": "top{}",
        "prevnext": "prevnext{}",
        "rse": "rse{}_balanced",
        "budget": "budget{}",
    }
    entry: dict = {"_n": {"fragmented": 2, "all": 3}, "_model": "minilm", "_scope": "document"}
    for method, by_budget in recalls.items():
        for b, (fragmented, every) in by_budget.items():
            entry[names[method].format(b)] = {
                "fragmented": {"recall": fragmented, "chunks": float(b)},
                "all": {"recall": every, "chunks": float(b)},
            }
    return entry


def test_goals_are_the_worst_gaps_derived_by_hand() -> None:
    table = budget_sweep.goal_table([{"a": sweep_entry(FIRST), "b": sweep_entry(SECOND)}], BUDGETS)
    gaps = never_worse.goals(table, "budget", BUDGETS)
    # never worse: budget all - max(top all, prevnext all), worst cell: set b, B = 7:
    # 0.32 - max(0.40, 0.35) = -0.08.
    assert gaps["never_worse"] == pytest.approx(-8.0)
    assert gaps["never_worse_at"] == "document b B=7"
    # fragmented gain for B >= 5: mean over sets of budget minus the best mean of the rivals.
    # B = 5: (0.48 + 0.19) / 2 - max(0.30, 0.335, 0.31) = 0.335 - 0.335 = 0.
    # B = 7: (0.56 + 0.33) / 2 - max(0.40, 0.40, 0.42) = 0.445 - 0.42 = +0.025.
    assert gaps["fragmented_gain"] == pytest.approx(0.0, abs=1e-9)
    assert gaps["fragmented_gain_at"] == "document B=5 (2 sets)"  # of the three dev sets
    # monotone: set b, all queries, 0.33 -> 0.32 is the one step down.
    assert gaps["monotone"] == pytest.approx(-1.0)
    assert gaps["monotone_at"] == "document b all"


def test_goals_over_two_scopes_take_the_worst_of_either() -> None:
    document = {"a": sweep_entry(FIRST), "b": sweep_entry(SECOND)}
    corpus = {name: entry | {"_scope": "corpus"} for name, entry in document.items()}
    corpus["a"]["budget3"] = {
        "fragmented": {"recall": 0.35, "chunks": 3.0},
        "all": {"recall": 0.20, "chunks": 3.0},
    }
    table = budget_sweep.goal_table([document, corpus], BUDGETS)
    assert list(table) == ["document", "corpus"]
    gaps = never_worse.goals(table, "budget", BUDGETS)
    # corpus a, B = 3: 0.20 - max(0.40, 0.38) = -0.20, worse than document's -0.08.
    assert gaps["never_worse"] == pytest.approx(-20.0)
    assert gaps["never_worse_at"] == "corpus a B=3"


def test_goal_report_names_a_method_that_was_not_measured(
    capsys: pytest.CaptureFixture[str],
) -> None:
    entry = sweep_entry({k: v for k, v in FIRST.items() if k != "prevnext"})
    budget_sweep.print_goals([{"a": entry}], BUDGETS)
    assert "'prevnext' not measured" in capsys.readouterr().out


def never_worse_table(extra: dict[str, dict[str, dict[int, tuple[float, float]]]]) -> dict:
    """``scope -> set -> B -> method -> group -> recall`` (never_worse.py's shape): FIRST and
    SECOND, and each ``extra`` method's recalls by set and B."""
    table: dict = {"document": {}}
    for name, recalls in (("a", FIRST), ("b", SECOND)):
        methods = recalls | {method: by_set[name] for method, by_set in extra.items()}
        table["document"][name] = {
            str(b): {m: {"fragmented": v[b][0], "all": v[b][1]} for m, v in methods.items()}
            for b in BUDGETS
        }
    return table


#: A second rule: (fragmented, all) recall by set and B.
ALT = {
    "a": {3: (0.30, 0.38), 5: (0.50, 0.53), 7: (0.50, 0.59)},
    "b": {3: (0.10, 0.19), 5: (0.21, 0.29), 7: (0.30, 0.37)},
}


def test_hindsight_takes_the_best_rule_in_every_cell() -> None:
    table = never_worse_table({"alt": ALT})
    ceiling = never_worse.hindsight(table, ["budget", "alt"], BUDGETS)
    # never worse, the better of budget and alt in each cell (points):
    # a: B=3 max(+1, -2) = +1; B=5 max(-1, +1) = +1; B=7 max(0, -1) = 0;
    # b: B=3 max(+2, -1) = +2; B=5 max(+3, -1) = +3; B=7 max(-8, -3) = -3: the worst is -3.
    assert ceiling["never_worse"] == pytest.approx(-3.0)
    # fragmented gain over the sets' means: B=5 budget 0.335 - 0.335 = 0, alt 0.355 - 0.335 = +2;
    # B=7 budget 0.445 - 0.42 = +2.5, alt 0.40 - 0.42 = -2: the worst of the better is +2.
    assert ceiling["fragmented_gain"] == pytest.approx(2.0)
    assert ceiling["both"] == []


def test_hindsight_names_a_rule_that_meets_both_goals() -> None:
    # "good" ties the better baseline on all queries everywhere and has fragmented recall 0.9.
    good = {
        name: {b: (0.9, max(base["top"][b][1], base["prevnext"][b][1])) for b in BUDGETS}
        for name, base in (("a", FIRST), ("b", SECOND))
    }
    table = never_worse_table({"alt": ALT, "good": good})
    assert never_worse.hindsight(table, ["budget", "alt", "good"], BUDGETS)["both"] == ["good"]
    assert never_worse.measured_everywhere(table) == ["alt", "budget", "good"]


def test_the_reports_print_the_goal_bars_they_check() -> None:
    assert never_worse.bars_text() == "never worse >= -0.5, fragmented gain >= +2, monotone >= 0"
