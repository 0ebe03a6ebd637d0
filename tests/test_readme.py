"""Every code block in the README runs, so the README cannot rot.

Python blocks are executed. Shell blocks are run command by command, except two that this very
test run stands for: the install line (``.ci/run`` installs the same extras before the tests) and
the test command (``.ci/run`` runs exactly that line); for those two the test checks that
``.ci/run`` really does run them.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
CI_SCRIPT = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
BLOCK = re.compile(r"```(python|bash)\n(.*?)```", re.DOTALL)
BLOCKS = [(language, body) for language, body in BLOCK.findall(README)]
PYTHON_BLOCKS = [body for language, body in BLOCKS if language == "python"]
SHELL_COMMANDS = [
    line.strip()
    for language, body in BLOCKS
    if language == "bash"
    for line in body.replace("\\\n", " ").splitlines()
    if line.strip() and not line.strip().startswith("#")
]
#: Python blocks that write the example data the shell examples read.
DATA_BLOCKS = [body for body in PYTHON_BLOCKS if "corpus.jsonl" in body]
BENCH = ROOT.parent / "shared" / "bench"


def test_the_readme_has_the_two_commands_and_ci_runs_the_test_command() -> None:
    assert "scar demo" in SHELL_COMMANDS
    assert "python -m pytest" in SHELL_COMMANDS
    assert "\npython -m pytest\n" in CI_SCRIPT


def test_ci_installs_what_the_readme_installs() -> None:
    installs = [c for c in SHELL_COMMANDS if c.startswith("pip install")]
    assert installs, "the README has no install command"
    for command in installs:
        extras = re.search(r"\.\[([a-z,-]+)\]", command)
        assert extras is not None
        assert f".[{extras.group(1)}," in CI_SCRIPT or f".[{extras.group(1)}]" in CI_SCRIPT
    assert "torch==2.13.0" in CI_SCRIPT


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)))
def test_python_block_runs(index: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"readme_block_{index}"}
    exec(compile(PYTHON_BLOCKS[index], f"README.md python block {index}", "exec"), namespace)


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [c for c in SHELL_COMMANDS if not c.startswith(("pip install", "python -m pytest"))],
)
def test_shell_command_runs(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scar_cache_dir: Path
) -> None:
    cwd = tmp_path
    if "../shared/bench" in command:
        if not BENCH.is_dir():
            pytest.skip("../shared/bench is absent")
        cwd = ROOT
        command += f" --out {tmp_path / 'out'}"
    if "corpus.jsonl" in command:
        monkeypatch.chdir(tmp_path)
        for block in DATA_BLOCKS:
            exec(compile(block, "README.md data block", "exec"), {"__name__": "readme_data"})
    environment = dict(os.environ, HF_HUB_OFFLINE="1", SCAR_CACHE_DIR=str(scar_cache_dir))
    bin_dir = str(Path(sys.executable).parent)
    environment["PATH"] = bin_dir + os.pathsep + environment.get("PATH", "")
    completed = subprocess.run(
        shlex.split(command),
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
