"""``scar demo`` end to end: its printed numbers, its JSON, its errors, and the shipped data."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from scar_core.cli import main
from scar_core.demo import DEMO_DEFAULTS, sample_benchmark_path, sample_corpus_dir

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_help_lists_the_demo(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "demo" in capsys.readouterr().out


def test_help_import_stays_light() -> None:
    code = (
        "import sys; from scar_core.cli import build_parser; build_parser(); "
        "heavy = {'torch', 'sentence_transformers', 'tiktoken', 'langchain_text_splitters'}; "
        "print(sorted(heavy & set(sys.modules)))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "[]"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--gamma", "1.5"], "gamma=1.5"),
        (["--chunk-size", "0"], "chunk_size=0"),
        (["--k", "0"], "k=0"),
        (["--window", "0"], "window=0"),
    ],
)
def test_bad_settings_exit_2_with_the_value_named(capsys, arguments, message) -> None:
    assert main(["demo", "--no-progress", *arguments]) == 2
    error = capsys.readouterr().err
    assert error.startswith("scar demo: error:")
    assert message in error


def independent_question(index: int, embedder, chunk_ranges, k: int = DEMO_DEFAULTS.k) -> dict:
    """Top-k and its recall for one sample question, from the raw files and the model."""
    test = json.loads(sample_benchmark_path().read_text(encoding="utf-8"))["tests"][index]
    text = (sample_corpus_dir() / test["snippets"][0]["file_path"]).read_text(encoding="utf-8")
    ranges = chunk_ranges(text, DEMO_DEFAULTS.chunk_size)
    vectors = embedder.embed_documents([text[start:end] for start, end in ranges])
    vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    query = embedder.embed_query(test["query"])
    cosines = vectors @ (query / np.linalg.norm(query))
    top = sorted(sorted(range(len(ranges)), key=lambda i: (-cosines[i], i))[:k])
    evidence = {i for s in test["snippets"] for i in range(s["span"][0], s["span"][1])}
    gold = {n for n, (start, end) in enumerate(ranges) if evidence & set(range(start, end))}
    covered = {i for n in top for i in range(*ranges[n])}
    return {
        "top": top,
        "gold": sorted(gold),
        "recall": len(gold & set(top)) / len(gold),
        "chars": len(evidence & covered) / len(evidence),
    }


def method_rows(block: str) -> dict[str, list[str]]:
    rows = {}
    for line in block.splitlines():
        for label in (f"top-{DEMO_DEFAULTS.k} ", "top-n, n=SCAR's", "static ±", "SCAR "):
            if line.strip().startswith(label) and not line.strip().startswith("SCAR's"):
                rows[label.strip()] = line.split()
    return rows


@pytest.mark.model
def test_printed_numbers_match_an_independent_computation(
    capsys, minilm_embedder, chunk_ranges
) -> None:
    assert main(["demo", "--no-progress"]) == 0
    out = capsys.readouterr().out
    blocks = [b for b in re.split(r"\n(?=Q\d+  )", out.split("─" * 100)[1]) if b.strip()]
    assert len(blocks) == 15

    # Question 1, from the files, the splitter and the model, without the demo's code.
    expected = independent_question(0, minilm_embedder, chunk_ranges)
    first = blocks[0].strip()
    assert first.startswith("Q1  ledgerline_payments_api.txt")
    assert "evidence in chunks " + ", ".join(map(str, expected["gold"])) in first
    row = method_rows(first)[f"top-{DEMO_DEFAULTS.k}"]
    chunks, _tokens, recall, chars, *listed = row[1:]
    assert int(chunks) == DEMO_DEFAULTS.k
    assert float(recall) == pytest.approx(expected["recall"], abs=0.005)
    assert float(chars) == pytest.approx(expected["chars"], abs=0.005)
    assert [int(item.rstrip("*")) for item in listed] == expected["top"]
    assert [int(item.rstrip("*")) for item in listed if item.endswith("*")] == [
        n for n in expected["top"] if n in expected["gold"]
    ]

    # The summary's SCAR recall is the mean of the per-question SCAR recalls printed above.
    scar_recalls = [float(method_rows(block)["SCAR"][3]) for block in blocks]
    summary = out.split("Summary: means per question")[1]
    summary_row = next(line for line in summary.splitlines() if line.startswith("all (15)"))
    scar_line = summary.splitlines()[summary.splitlines().index(summary_row) + 3]
    assert scar_line.split()[0] == "SCAR"
    assert float(scar_line.split()[1]) == pytest.approx(np.mean(scar_recalls), abs=0.005)


@pytest.mark.model
def test_json_output_is_complete_and_consistent(capsys, minilm_embedder, chunk_ranges) -> None:
    assert main(["demo", "--json", "--no-progress", "--gamma", "0.8", "--k", "2"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["settings"] == {
        "chunk_size": DEMO_DEFAULTS.chunk_size,
        "chunk_overlap": 0,
        "k": 2,
        "lambda": DEMO_DEFAULTS.lambda_,
        "gamma": 0.8,
        "window": DEMO_DEFAULTS.window,
    }
    questions = payload["questions"]
    assert len(questions) == 15
    for question in questions:
        gold = set(question["gold_chunks"])
        methods = question["methods"]
        cosines = [s["cosine"] for s in question["seeds"]]
        assert len(cosines) == 2
        assert cosines == sorted(cosines, reverse=True)
        assert sorted(s["chunk"] for s in question["seeds"]) == methods["topk"]["chunks"]
        accepted = {d["neighbor"] for d in question["decisions"] if d["accepted"]}
        assert set(methods["scar"]["chunks"]) == set(methods["topk"]["chunks"]) | accepted
        for decision in question["decisions"]:
            assert decision["accepted"] == (decision["score"] > decision["threshold"])
        for scores in methods.values():
            assert scores["n_chunks"] == len(scores["chunks"])
            assert scores["recall"] == pytest.approx(len(gold & set(scores["chunks"])) / len(gold))
    for group in ("all", "fragmented", "atomic"):
        members = [
            q
            for q in questions
            if group == "all" or (len(q["gold_chunks"]) >= 2) == (group == "fragmented")
        ]
        assert payload["summary"][group]["n"] == len(members)
        for method, means in payload["summary"][group]["methods"].items():
            for key in ("recall", "char_recall", "tokens"):
                expected = np.mean([q["methods"][method][key] for q in members])
                assert means[key] == pytest.approx(expected)

    # And question 1 agrees with the independent computation at these settings.
    expected_q1 = independent_question(0, minilm_embedder, chunk_ranges, k=2)
    assert payload["questions"][0]["methods"]["topk"]["chunks"] == expected_q1["top"]
    assert payload["questions"][0]["methods"]["topk"]["recall"] == pytest.approx(
        expected_q1["recall"]
    )


@pytest.mark.slow
def test_a_built_wheel_carries_the_sample(tmp_path: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        str(REPO_ROOT),
        "--no-deps",
        "-q",
        "-w",
        str(tmp_path),
    ]
    if importlib.util.find_spec("hatchling") is not None:
        command.append("--no-build-isolation")
    subprocess.run(command, check=True, capture_output=True, timeout=600)
    (wheel,) = tmp_path.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {
        f"scar_core/demo/data/corpus/{path.name}" for path in sample_corpus_dir().iterdir()
    } | {"scar_core/demo/data/sample_benchmark.json"}
    assert len(shipped) == 4
    assert shipped <= names
