"""The README is what a new user follows: its commands are CI's, its code runs, its links exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.DOTALL)


def test_ci_installs_with_exactly_the_readmes_two_commands() -> None:
    commands = [b.strip() for b in _blocks("bash")]
    assert len(commands) == 2, "the README gives exactly two commands: the demo and the tests"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    for label, command in zip(("demo", "tests"), commands, strict=True):
        marker = ci.index(f"# README: {label}")
        assert ci[marker + 1].replace('"$PYTHON"', "python") == command
    before_install = "\n".join(ci[: ci.index("# README: demo")])
    assert "pip install" not in before_install, "CI must not install anything the README does not"
    assert commands[1].endswith("python -m pytest")


def test_the_readme_is_short_and_points_only_where_a_user_can_follow() -> None:
    assert len(README.splitlines()) <= 200
    for forbidden in ("../shared", "shared/bench", "benchmark 8", "targets we set"):
        assert forbidden not in README
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), target
