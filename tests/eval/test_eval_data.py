"""Benchmark readers: both formats, every refusal, and file paths that try to leave the corpus."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from eval_support import BENCH, DOCUMENTS, QUERIES, write_jsonl, write_legalbench

from scar_core._errors import DataFormatError
from scar_tools.eval import load_benchmark
from scar_tools.eval.data import read_jsonl_benchmark, read_legalbench

DOC = "retention policy.txt"


def test_legalbench_reads_queries_spans_and_only_named_documents(tmp_path: Path) -> None:
    benchmark_path, corpus = write_legalbench(tmp_path)
    (corpus / "unused.txt").write_text("never read")
    benchmark = load_benchmark(benchmark_path, corpus)
    assert benchmark.name == "benchmark"
    assert set(benchmark.documents) == set(DOCUMENTS)
    assert [q.text for q in benchmark.queries] == [q for q, _, _ in QUERIES]
    first = benchmark.queries[0]
    span = first.spans[0]
    assert DOCUMENTS[span.document_id][span.start : span.end] == QUERIES[0][2][0]
    assert first.document_ids == ("retention policy.txt",)


def test_jsonl_reads_the_same_benchmark(tmp_path: Path) -> None:
    legal = load_benchmark(*write_legalbench(tmp_path / "a"))
    queries, corpus = write_jsonl(tmp_path / "b")
    jsonl = load_benchmark(queries, corpus)  # detected from the .jsonl suffix
    assert jsonl.queries == legal.queries
    assert dict(jsonl.documents) == dict(legal.documents)
    assert load_benchmark(queries, corpus.parent, data_format="jsonl").queries == legal.queries


def test_universal_newlines_and_character_offsets(tmp_path: Path) -> None:
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "naïve doc.txt").write_bytes("é line one\r\nsecond\r\n".encode())
    text = "é line one\nsecond\n"
    start = text.index("second")
    snippet = {"file_path": "naïve doc.txt", "span": [start, start + 6], "answer": "second"}
    tests = [{"query": "q", "snippets": [snippet]}]
    (tmp_path / "b.json").write_text(json.dumps({"tests": tests}))
    assert read_legalbench(tmp_path / "b.json", tmp_path / "c").queries[0].spans[0].start == 11


def _one_query(tmp_path: Path, snippet: dict[str, object], query: object = "q") -> Path:
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"tests": [{"query": query, "snippets": [snippet]}]}))
    return path


@pytest.mark.parametrize(
    ("snippet", "query", "message"),
    [
        ({"file_path": DOC, "span": [5, 2]}, "q", "span [5, 2] is out of range"),
        ({"file_path": DOC, "span": [0, 99999]}, "q", f"<= {len(DOCUMENTS[DOC])} "),
        ({"file_path": DOC, "span": [0, "3"]}, "q", "two integers"),
        ({"file_path": DOC, "span": [0, 3], "answer": "xyz"}, "q", "the answer starts 'xyz'"),
        ({"file_path": "missing.txt", "span": [0, 3]}, "q", "no such file"),
        ({"span": [0, 3]}, "q", "names no document"),
        ({"file_path": DOC, "span": [0, 3]}, "  ", "'query' must be a non-empty string"),
    ],
)
def test_malformed_queries_are_refused_with_the_value_named(
    tmp_path: Path, snippet: dict[str, object], query: object, message: str
) -> None:
    _, corpus = write_legalbench(tmp_path)
    with pytest.raises(DataFormatError, match="query 0") as error:
        read_legalbench(_one_query(tmp_path, snippet, query), corpus)
    assert message in str(error.value)


def test_missing_files_and_bad_json_are_refused(tmp_path: Path) -> None:
    benchmark, corpus = write_legalbench(tmp_path)
    with pytest.raises(DataFormatError, match="does not exist"):
        read_legalbench(tmp_path / "nope.json", corpus)
    with pytest.raises(DataFormatError, match="corpus folder"):
        read_legalbench(benchmark, tmp_path / "absent")
    benchmark.write_text("{not json")
    with pytest.raises(DataFormatError, match="not valid UTF-8 JSON"):
        read_legalbench(benchmark, corpus)
    benchmark.write_text(json.dumps({"tests": []}))
    with pytest.raises(DataFormatError, match='no non-empty "tests" list'):
        read_legalbench(benchmark, corpus)


def test_jsonl_errors_name_the_line_and_the_id(tmp_path: Path) -> None:
    queries, corpus = write_jsonl(tmp_path)
    rows = corpus.read_text().splitlines()
    corpus.write_text("\n".join([rows[0], rows[0]]))
    with pytest.raises(
        DataFormatError, match=r"line 2: document id 'retention policy\.txt' appears twice"
    ):
        read_jsonl_benchmark(queries, corpus)
    corpus.write_text(rows[0] + "\n")
    with pytest.raises(DataFormatError, match="no document with this id"):
        read_jsonl_benchmark(queries, corpus)
    corpus.write_text('{"id": "x"}\n')
    with pytest.raises(DataFormatError, match="line 1: expected"):
        read_jsonl_benchmark(queries, corpus)


@pytest.mark.parametrize("escape", ["../secret.txt", "sub/../../secret.txt", "ABSOLUTE"])
def test_a_file_path_outside_the_corpus_is_refused(tmp_path: Path, escape: str) -> None:
    _, corpus = write_legalbench(tmp_path / "data")
    secret = tmp_path / "data" / "secret.txt"
    secret.write_text("top secret text")
    file_path = str(secret) if escape == "ABSOLUTE" else escape
    benchmark = _one_query(tmp_path, {"file_path": file_path, "span": [0, 3]})
    with pytest.raises(DataFormatError, match="outside the corpus folder") as error:
        read_legalbench(benchmark, corpus)
    assert repr(file_path) in str(error.value)


def test_a_symlink_inside_the_corpus_pointing_outside_is_refused(tmp_path: Path) -> None:
    _, corpus = write_legalbench(tmp_path / "data")
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret text")
    os.symlink(secret, corpus / "innocent.txt")
    benchmark = _one_query(tmp_path, {"file_path": "innocent.txt", "span": [0, 3]})
    with pytest.raises(
        DataFormatError, match=r"'innocent\.txt' resolves to .*secret\.txt.*outside"
    ):
        read_legalbench(benchmark, corpus)


def test_a_symlink_that_stays_inside_the_corpus_is_read(tmp_path: Path) -> None:
    _, corpus = write_legalbench(tmp_path)
    os.symlink(corpus / "api reference.txt", corpus / "alias.txt")
    benchmark = _one_query(
        tmp_path, {"file_path": "alias.txt", "span": [0, 7], "answer": "Refunds"}
    )
    assert read_legalbench(benchmark, corpus).queries[0].spans[0].document_id == "alias.txt"


@pytest.mark.bench
@pytest.mark.parametrize(
    ("benchmark_file", "corpus", "count"),
    [
        ("legalbench-rag/benchmarks/privacy_qa.json", "legalbench-rag/corpus", 194),
        ("legalbench-rag/benchmarks/contractnli.json", "legalbench-rag/corpus", 977),
        ("paper4/paper4_dev.json", "paper4/corpus", 160),
    ],
)
def test_the_dev_sets_read_and_every_span_checks(
    benchmark_file: str, corpus: str, count: int
) -> None:
    if not BENCH.is_dir():
        pytest.skip(f"{BENCH} is absent")
    assert len(load_benchmark(BENCH / benchmark_file, BENCH / corpus).queries) == count
