"""``scar eval`` end to end on a tiny fixture corpus with the hashing embedder, and its errors."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from eval_support import QUERIES, write_jsonl, write_legalbench

from scar_tools.cli import main

FAKE = ["--model", "py:eval_support:HashEmbedder", "--no-progress"]


def test_help_documents_formats_methods_and_the_budget_promise() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "scar_tools.cli", "eval", "--help"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    text = " ".join(completed.stdout.split())
    for fragment in ('"file_path"', '"doc_id"', "corpus.jsonl", "--cache-dir", "topk_matched_NAME",
                     "EXACTLY what SCARRetriever(vectorstore=vs, k=B) returns",
                     "scarW_gG_lL"):  # fmt: skip
        assert fragment in text


def test_importing_the_cli_stays_light() -> None:
    code = (
        "import sys; from scar_tools.cli import build_parser; build_parser(); "
        "heavy = {'torch', 'sentence_transformers', 'tiktoken', 'langchain_text_splitters', "
        "'matplotlib', 'tqdm'}; print(sorted(heavy & set(sys.modules)))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert loaded.stdout.strip() == "[]"


def test_eval_end_to_end_writes_every_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    benchmark, corpus = write_legalbench(tmp_path / "data")
    out = tmp_path / "out"
    arguments = ["eval", str(benchmark), "--corpus", str(corpus), "--chunk-size", "60", "--k", "2",
                 "--methods", "topk,default,budget3,static1,scar1,parent,topk_matched_scar1",
                 "--bootstrap", "200", "--cache-dir", str(tmp_path / "cache"),
                 "--out", str(out)]  # fmt: skip
    assert main([*arguments, *FAKE]) == 0
    printed = capsys.readouterr().out
    assert "fragmented (n = " in printed
    assert "budget3" in printed
    payload = json.loads((out / "results.json").read_text())
    assert payload["benchmark"]["evaluated_queries"] == len(QUERIES)
    assert payload["config"]["embedder"] == "test-hash-embedder"
    all_queries = payload["groups"]["all"]
    assert all_queries["n"] == len(QUERIES)
    assert all_queries["methods"]["default"]["chunks"] == 2.0
    assert all_queries["methods"]["budget3"]["chunks"] == 3.0
    assert set(payload["bootstrap"]["groups"]["all"]) == {
        "topk", "budget3", "static1", "scar1", "parent", "topk_matched_scar1"
    }  # fmt: skip
    assert payload["bootstrap"]["reference"] == "default"
    assert {"top-B", "budget B"} <= set(payload["sweep"])
    rows = [json.loads(line) for line in (out / "per_query.jsonl").read_text().splitlines()]
    assert [row["query"] for row in rows] == [q for q, _, _ in QUERIES]
    assert "## Paired bootstrap: default minus each method" in (out / "report.md").read_text()
    assert (out / "pareto.png").read_bytes()[:4] == b"\x89PNG"
    assert list((tmp_path / "cache").iterdir())  # the vectors were cached
    again = tmp_path / "again"
    assert main([*arguments[:-1], str(again), "--no-sweep", "--bootstrap", "0", *FAKE]) == 0
    assert json.loads((again / "results.json").read_text())["groups"] == payload["groups"]


def test_eval_reads_jsonl(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    queries, corpus = write_jsonl(tmp_path)
    out = tmp_path / "out"
    status = main(["eval", str(queries), "--corpus", str(corpus), "--chunk-size", "80",
                   "--methods", "top3,budget3", "--reference", "top3", "--bootstrap", "0",
                   "--no-sweep", "--no-cache", "--out", str(out), *FAKE])  # fmt: skip
    assert status == 0
    payload = json.loads((out / "results.json").read_text())
    assert payload["bootstrap"] is None
    assert payload["sweep"] is None
    assert not (out / "pareto.png").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--methods", "topk,bogus"], "method 'bogus' is not known"),
        (["--methods", "budget3_s5"], "keep=5 is larger than k=3"),
        (["--methods", "topk", "--reference", "scar1"], "reference='scar1' is not among"),
        (["--model", "py:no_such_module:X"], "cannot be loaded"),
    ],
)
def test_bad_settings_fail_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    benchmark, corpus = write_legalbench(tmp_path)
    out = tmp_path / "out"
    arguments = ["eval", str(benchmark), "--corpus", str(corpus), "--out", str(out), *FAKE, *extra]
    assert main(arguments) == 2
    error = capsys.readouterr().err
    assert error.startswith("scar eval: error:")
    assert message in error
    assert not out.exists()


def test_data_errors_exit_2_with_the_path_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    benchmark, corpus = write_legalbench(tmp_path)
    assert main(["eval", str(benchmark), *FAKE]) == 2
    assert "--corpus is required" in capsys.readouterr().err
    assert main(["eval", str(tmp_path / "nope.json"), "--corpus", str(corpus), *FAKE]) == 2
    assert "nope.json' does not exist" in capsys.readouterr().err
    tests = json.loads(benchmark.read_text())
    tests["tests"][0]["snippets"][0]["file_path"] = "../secret.txt"
    (tmp_path / "secret.txt").write_text("secret")
    benchmark.write_text(json.dumps(tests))
    assert main(["eval", str(benchmark), "--corpus", str(corpus), *FAKE]) == 2
    assert "file_path '../secret.txt' resolves to" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda tests, corpus: '{"tests": ' + "[" * 100_000 + "]" * 100_000 + "}",
         "nests JSON too deeply"),
        (lambda tests, corpus: (corpus / "loop").symlink_to("loop") or _with_path(tests, "loop"),
         "Symlink loop"),
        (lambda tests, corpus: _with_path(tests, "a\x00.txt"), "holds a NUL byte"),
    ],
    ids=["deep JSON", "symlink loop", "NUL byte"],
)  # fmt: skip
def test_hostile_inputs_exit_2_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: Any, message: str
) -> None:
    benchmark, corpus = write_legalbench(tmp_path)
    benchmark.write_text(make(json.loads(benchmark.read_text()), corpus))
    assert main(["eval", str(benchmark), "--corpus", str(corpus), *FAKE]) == 2
    assert message in capsys.readouterr().err


def _with_path(tests: dict[str, Any], file_path: str) -> str:
    tests["tests"][0]["snippets"][0]["file_path"] = file_path
    return json.dumps(tests)


@pytest.mark.parametrize("flag", ["--bootstrap", "--k", "--chunk-size", "--answers-limit"])
# --k 0 too: argparse refuses it, naming the flag, before anything is read or written.
def test_a_negative_count_names_its_flag(capsys: pytest.CaptureFixture[str], flag: str) -> None:
    assert main(["eval", flag, "-3"]) == 2
    assert f"argument {flag}: -3 is not valid; it must be >= " in capsys.readouterr().err


def test_budgets_skip_a_method_whose_extra_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real_import = importlib.import_module

    def without_dsrag(name: str, *args: Any) -> Any:
        if name.startswith("dsrag"):
            raise ImportError(name)
        return real_import(name, *args)

    monkeypatch.setattr(importlib, "import_module", without_dsrag)
    benchmark, corpus = write_legalbench(tmp_path)
    arguments = ["eval", str(benchmark), "--corpus", str(corpus), "--chunk-size", "60",
                 "--methods", "topk", "--bootstrap", "0", "--no-sweep", "--no-plot",
                 "--budgets", "2,3", "--out", str(tmp_path / "out"), *FAKE]  # fmt: skip
    assert main(arguments) == 0
    error = capsys.readouterr().err
    assert "--budgets skips rseB: 'dsrag' is not installed" in error
    assert "pip install 'scar-retrieval[compare]'" in error
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| B | topB | budgetB | prevnextB |" in report


def test_the_bundled_sample_is_chunked_as_the_demo_chunks_it_and_your_data_at_500(
    tmp_path: Path,
) -> None:
    from scar_tools.demo import DEMO_CHUNK_SIZE
    from scar_tools.eval.runner import DEFAULT_CHUNK_SIZE

    quick = ["--methods", "topk", "--bootstrap", "0", "--no-sweep", "--no-plot", "--no-cache"]
    assert main(["eval", *quick, "--out", str(tmp_path / "sample"), *FAKE]) == 0
    sample = json.loads((tmp_path / "sample" / "results.json").read_text())
    assert sample["config"]["chunk_size"] == DEMO_CHUNK_SIZE
    assert main(["eval", *quick, "--chunk-size", "300", "--out", str(tmp_path / "set"), *FAKE]) == 0
    assert (
        json.loads((tmp_path / "set" / "results.json").read_text())["config"]["chunk_size"] == 300
    )
    benchmark, corpus = write_legalbench(tmp_path / "data")
    mine = [
        "eval",
        str(benchmark),
        "--corpus",
        str(corpus),
        *quick,
        "--out",
        str(tmp_path / "mine"),
    ]
    assert main([*mine, *FAKE]) == 0
    payload = json.loads((tmp_path / "mine" / "results.json").read_text())
    assert payload["config"]["chunk_size"] == DEFAULT_CHUNK_SIZE
