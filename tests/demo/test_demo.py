"""``scar demo``: built on the eval harness, every question reported, short by default, ships."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import scar_tools
from scar_tools.cli import main
from scar_tools.demo import (
    DEMO_K,
    format_demo,
    load_sample,
    run_demo,
    sample_benchmark_path,
    sample_corpus_dir,
)

HASH_MODEL = ["--model", "py:eval_support:HashEmbedder", "--no-progress"]


@pytest.fixture(autouse=True)
def _eval_support_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "eval"))


def test_the_sample_is_inside_the_package_and_not_ignored() -> None:
    package = Path(scar_tools.__file__).resolve().parent
    files = [sample_benchmark_path(), *sorted(sample_corpus_dir().iterdir())]
    assert len(files) == 4
    assert all(package in path.resolve().parents for path in files)
    benchmark = load_sample()
    assert len(benchmark.queries) == 15
    assert len(benchmark.documents) == 3
    if shutil.which("git"):  # hatch leaves git-ignored files out of the wheel
        ignored = subprocess.run(
            ["git", "check-ignore", *map(str, files)], capture_output=True, text=True
        )
        assert ignored.stdout == ""


def test_the_printout_reports_every_question_and_stays_short(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo", *HASH_MODEL]) == 0
    output = capsys.readouterr().out.splitlines()
    assert len(output) < 80
    rows = [line for line in output if line[:4].strip().isdigit()]
    assert [int(line.split()[0]) for line in rows] == list(range(1, 16))
    assert any(f"default against top-{DEMO_K} (both {DEMO_K} chunks)" in line for line in output)
    assert main(["demo", "--verbose", *HASH_MODEL]) == 0
    verbose = capsys.readouterr().out
    assert len(verbose.splitlines()) > len(output)
    assert "bid" in verbose
    assert "Q15." in verbose


def test_the_demo_is_an_eval_run_with_the_four_methods(tmp_path: Path) -> None:
    from eval_support import HashEmbedder

    results = run_demo(k=3, chunk_size=250, embedder=HashEmbedder())
    assert list(results.runs) == ["topk", "default", "static1", "scar1"]
    assert results.config["k"] == 3
    assert (results.runs["default"][1].chunks == 3).all()
    assert "top-3" in format_demo(results)
    assert main(["demo", "--k", "0", *HASH_MODEL]) == 2


@pytest.mark.model
def test_with_minilm_the_default_gains_on_top_k_at_the_same_k(
    capsys: pytest.CaptureFixture[str],
) -> None:
    cache = os.environ["SCAR_CACHE_DIR"]  # set by tests/conftest.py: vectors kept between runs
    assert main(["demo", "--no-progress", "--cache-dir", cache]) == 0
    output = capsys.readouterr().out.splitlines()
    assert len(output) < 80
    tally = next(line for line in output if line.startswith("default against"))
    higher, lower = (int(tally.split(word)[0].split()[-1]) for word in (" questions,", ", equal"))
    assert higher >= 2, tally
    assert lower == 0, tally
