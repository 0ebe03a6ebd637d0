"""Reliability suite: report how many generated cases the hypothesis properties executed."""

from __future__ import annotations

from typing import Any

from rel_support import CASE_COUNTS


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not CASE_COUNTS:
        return
    total = sum(CASE_COUNTS.values())
    terminalreporter.section("reliability: generated cases")
    for name, count in sorted(CASE_COUNTS.items()):
        terminalreporter.write_line(f"{name:<40} {count:>7}")
    terminalreporter.write_line(f"{'total':<40} {total:>7}")
