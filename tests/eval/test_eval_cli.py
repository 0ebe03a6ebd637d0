"""``scar eval`` end to end: errors without the model, the fixture and paper4_dev with MiniLM."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scar_core.cli import main
from scar_core.eval import EvalConfig, embedder_for, load_benchmark, run_evaluation
from scar_core.eval.retrieval import default_cache_path

RESULT_KEYS = {"recall", "char_recall", "chunks", "efficiency", "tokens"}


def test_help_documents_the_data_formats() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "scar_core.cli", "eval", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    for fragment in ('"file_path"', '"doc_id"', "corpus.jsonl", "--scope", "topk_matched"):
        assert fragment in completed.stdout


def test_missing_benchmark_file_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["eval", str(tmp_path / "nope.json"), "--corpus", str(tmp_path)])
    assert status == 2
    assert "nope.json' does not exist" in capsys.readouterr().err


def test_missing_corpus_folder_is_a_clear_error(
    fixtures_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    benchmark = fixtures_dir / "legalbench/benchmark.json"
    status = main(["eval", str(benchmark), "--corpus", str(tmp_path / "absent")])
    assert status == 2
    assert "corpus folder" in capsys.readouterr().err


def test_benchmark_without_corpus_is_refused(
    fixtures_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["eval", str(fixtures_dir / "legalbench/benchmark.json")]) == 2
    assert "--corpus is required" in capsys.readouterr().err


def test_unknown_method_is_refused_before_any_embedding(
    fixtures_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(
        [
            "eval",
            str(fixtures_dir / "legalbench/benchmark.json"),
            "--corpus",
            str(fixtures_dir / "legalbench/corpus"),
            "--methods",
            "topk,bogus",
            "--no-cache",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    assert status == 2
    assert "method 'bogus' is not known" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_default_cache_location_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SCAR_CACHE_DIR", str(tmp_path))
    assert default_cache_path() == tmp_path / "vectors.sqlite"
    monkeypatch.delenv("SCAR_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_path() == tmp_path / "xdg" / "scar" / "vectors.sqlite"


@pytest.mark.model
def test_eval_on_the_fixture_end_to_end(
    fixtures_dir: Path, tmp_path: Path, eval_cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    status = main(
        [
            "eval",
            str(fixtures_dir / "legalbench/benchmark.json"),
            "--corpus",
            str(fixtures_dir / "legalbench/corpus"),
            "--chunk-size",
            "200",
            "--k",
            "2",
            "--bootstrap",
            "200",
            "--cache-dir",
            str(eval_cache_dir),
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    assert status == 0, capsys.readouterr().err
    payload = json.loads((out / "results.json").read_text(encoding="utf-8"))
    # Gold chunk counts at 200 characters are [2, 1, 1, 2, 3, 1, 2, 3] (test_eval_data.py):
    # five fragmented queries, three atomic.
    assert {g: payload["groups"][g]["n"] for g in payload["groups"]} == {
        "atomic": 3,
        "fragmented": 5,
        "all": 8,
    }
    methods = payload["groups"]["all"]["methods"]
    assert set(methods) == {
        "topk",
        "static1",
        "static2",
        "scar1",
        "scar2",
        "scar1_lambda0",
        "parent",
        "topk_matched",
    } | ({"rerank"} if "rerank" not in payload["skipped"] else set())
    for summary in methods.values():
        assert set(summary) == RESULT_KEYS
    # Invariants that need no numbers: expansion only adds chunks, so recall never drops below
    # top-k's; top-k at k = 2 returns exactly 2 chunks; topk_matched matches scar1's chunk count.
    assert methods["topk"]["chunks"] == 2.0
    for name in ("static1", "static2", "scar1", "scar2", "scar1_lambda0"):
        assert methods[name]["recall"] >= methods["topk"]["recall"]
    assert methods["topk_matched"]["chunks"] == pytest.approx(methods["scar1"]["chunks"])
    assert payload["config"]["chunk_size"] == 200
    assert payload["bootstrap"]["n_resamples"] == 200
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "## Fragmented queries (n = 5)" in report
    assert "| scar1 minus |" in report
    assert (out / "pareto.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = [json.loads(line) for line in (out / "per_query.jsonl").read_text("utf-8").splitlines()]
    assert [row["gold_chunks"] for row in rows] == [2, 1, 1, 2, 3, 1, 2, 3]
    assert rows[4]["group"] == "fragmented"
    assert rows[1]["methods"]["topk"]["chunks"] == 2.0


@pytest.mark.model
def test_a_rerun_with_the_cache_embeds_nothing(fixtures_dir: Path, eval_cache_dir: Path) -> None:
    benchmark = load_benchmark(
        fixtures_dir / "jsonl/queries.jsonl", fixtures_dir / "jsonl/corpus.jsonl"
    )
    config = EvalConfig(chunk_size=200, methods=("topk", "scar1"), sweep=False, n_resamples=50)
    cache = eval_cache_dir / "vectors.sqlite"
    first = embedder_for(None, cache_path=cache)
    run_evaluation(benchmark, first, config, show_progress=False)
    second = embedder_for(None, cache_path=cache)
    results = run_evaluation(benchmark, second, config, show_progress=False)
    assert second.embedded_texts == 0  # type: ignore[attr-defined]
    assert results.group_sizes()["all"] == 8


@pytest.mark.model
def test_eval_without_a_benchmark_runs_the_bundled_sample(
    tmp_path: Path, eval_cache_dir: Path
) -> None:
    out = tmp_path / "sample"
    args = ["eval", "--no-sweep", "--bootstrap", "100", "--no-progress"]
    status = main([*args, "--cache-dir", str(eval_cache_dir), "--out", str(out)])
    assert status == 0
    payload = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert payload["benchmark"]["name"] == "sample"
    assert payload["sweep"] is None
    assert not (out / "pareto.png").exists()


@pytest.mark.bench
@pytest.mark.model
@pytest.mark.slow
def test_eval_on_paper4_dev(
    bench_dir: Path, tmp_path: Path, eval_cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "paper4"
    started = time.perf_counter()
    status = main(
        [
            "eval",
            str(bench_dir / "paper4/paper4_dev.json"),
            "--corpus",
            str(bench_dir / "paper4/corpus"),
            "--cache-dir",
            str(eval_cache_dir),
            "--out",
            str(out),
            "--no-progress",
        ]
    )
    elapsed = time.perf_counter() - started
    assert status == 0, capsys.readouterr().err
    payload = json.loads((out / "results.json").read_text(encoding="utf-8"))
    groups = payload["groups"]
    assert groups["all"]["n"] == 160
    assert groups["atomic"]["n"] + groups["fragmented"]["n"] == 160
    for group in groups.values():
        methods = group["methods"]
        assert methods["topk"]["chunks"] == 5.0
        assert methods["static1"]["recall"] >= methods["topk"]["recall"]
        assert methods["scar1"]["recall"] >= methods["topk"]["recall"]
        assert methods["topk_matched"]["chunks"] == pytest.approx(methods["scar1"]["chunks"])
        assert methods["static1"]["chunks"] >= methods["scar1"]["chunks"]
    assert (out / "report.md").is_file()
    assert (out / "pareto.png").is_file()
    print(f"paper4_dev eval took {elapsed:.1f} s with the vector cache in {eval_cache_dir}")


def test_malformed_curve_is_refused(
    fixtures_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["eval", str(fixtures_dir / "legalbench/benchmark.json")]
    rest = ["--corpus", str(fixtures_dir / "legalbench/corpus"), "--no-cache"]
    assert main([*base, *rest, "--curve", "no-equals-sign", "--out", str(tmp_path)]) == 2
    assert "write LABEL=NAME,NAME" in capsys.readouterr().err
