"""Reliability suite: report the generated cases executed and the throughput measured."""

from __future__ import annotations

from typing import Any

from rel_support import CASE_COUNTS, THROUGHPUT


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if THROUGHPUT:
        terminalreporter.section("reliability: throughput")
        for name, (queries, seconds) in THROUGHPUT.items():
            rate = queries / seconds if seconds > 0 else float("inf")
            terminalreporter.write_line(
                f"{name:<58} {queries:>5} queries in {seconds:6.2f} s = {rate:7.1f} queries/s"
            )
    if not CASE_COUNTS:
        return
    total = sum(CASE_COUNTS.values())
    terminalreporter.section("reliability: generated cases")
    for name, count in sorted(CASE_COUNTS.items()):
        terminalreporter.write_line(f"{name:<40} {count:>7}")
    terminalreporter.write_line(f"{'total':<40} {total:>7}")
