"""Benchmark readers: both formats, unknown keys, awkward file names and every error path."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from scar_core.errors import DataFormatError
from scar_core.eval import chunk_corpus, gold_chunk_ids, load_benchmark, load_sample_benchmark
from scar_core.eval.data import detect_format, read_jsonl_benchmark, read_legalbench

NDA = "Acme & Bolt NDA.txt"
ZEPHYR = "Politique de confidentialité – Zéphyr.txt"


def write_benchmark(tmp_path: Path, tests: object, files: dict[str, str]) -> tuple[Path, Path]:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, text in files.items():
        (corpus / name).parent.mkdir(parents=True, exist_ok=True)
        (corpus / name).write_text(text, encoding="utf-8", newline="")
    benchmark = tmp_path / "bench.json"
    benchmark.write_text(json.dumps({"tests": tests}), encoding="utf-8")
    return benchmark, corpus


def test_fixture_reads_in_both_formats_identically(fixtures_dir: Path) -> None:
    legal = load_benchmark(
        fixtures_dir / "legalbench/benchmark.json", fixtures_dir / "legalbench/corpus"
    )
    jsonl = load_benchmark(fixtures_dir / "jsonl/queries.jsonl", fixtures_dir / "jsonl")
    assert legal.queries == jsonl.queries
    assert dict(legal.documents) == dict(jsonl.documents)
    assert len(legal.queries) == 8
    assert set(legal.documents) == {NDA, ZEPHYR, "tiny-transfer-protocol.txt"}
    # Query 4 has two spans in the non-ASCII file; every span's text is its answer.
    raw = json.loads((fixtures_dir / "legalbench/benchmark.json").read_text(encoding="utf-8"))
    for query, test in zip(legal.queries, raw["tests"], strict=True):
        for span, snippet in zip(query.spans, test["snippets"], strict=True):
            assert legal.documents[span.document_id][span.start : span.end] == snippet["answer"]


def test_fixture_has_fragmented_and_atomic_queries_at_200_characters(fixtures_dir: Path) -> None:
    benchmark = load_benchmark(
        fixtures_dir / "legalbench/benchmark.json", fixtures_dir / "legalbench/corpus"
    )
    corpus = chunk_corpus(benchmark.documents, chunk_size=200)
    counts = [len(gold_chunk_ids(query, corpus)) for query in benchmark.queries]
    assert counts == [2, 1, 1, 2, 3, 1, 2, 3]


def test_names_with_colons_spaces_and_non_ascii_and_subfolders(tmp_path: Path) -> None:
    name = "sub dir/Terms: Ünïcode & more.txt"
    text = "Alpha beta gamma."
    benchmark, corpus = write_benchmark(
        tmp_path,
        [{"query": "beta?", "snippets": [{"file_path": name, "span": [6, 10], "answer": "beta"}]}],
        {name: text},
    )
    loaded = read_legalbench(benchmark, corpus)
    assert loaded.documents == {name: text}
    assert loaded.queries[0].spans[0].document_id == name


def test_spans_count_characters_of_text_read_with_universal_newlines(tmp_path: Path) -> None:
    # On disk "one\r\ntwo" is 8 characters; read with universal newlines it is "one\ntwo" (7), and
    # "two" is at [4, 7) -- the convention of the published LegalBench-RAG spans.
    benchmark, corpus = write_benchmark(
        tmp_path,
        [{"query": "q", "snippets": [{"file_path": "a.txt", "span": [4, 7], "answer": "two"}]}],
        {"a.txt": "one\r\ntwo"},
    )
    assert read_legalbench(benchmark, corpus).documents["a.txt"] == "one\ntwo"


def test_unknown_keys_are_ignored(tmp_path: Path) -> None:
    benchmark, corpus = write_benchmark(
        tmp_path,
        [
            {
                "query": "q",
                "kind": "atomic",
                "reference_answer": "x",
                "snippets": [{"file_path": "a.txt", "span": [0, 1], "extra": 1}],
            }
        ],
        {"a.txt": "abc"},
    )
    assert read_legalbench(benchmark, corpus).queries[0].spans[0].end == 1


@pytest.mark.parametrize(
    ("span", "message"),
    [
        ([2, 99], r"span \[2, 99\] is out of range; it must satisfy 0 <= start < end <= 3"),
        ([-1, 2], r"span \[-1, 2\] is out of range"),
        ([2, 2], r"span \[2, 2\] is out of range"),
        ([2, 1], r"span \[2, 1\] is out of range"),
        ([1], r"span \[1\] is not valid"),
        (["0", 1], r"span \['0', 1\] is not valid"),
    ],
)
def test_bad_spans_name_the_query_and_file(tmp_path: Path, span: object, message: str) -> None:
    benchmark, corpus = write_benchmark(
        tmp_path,
        [
            {"query": "fine", "snippets": [{"file_path": "a.txt", "span": [0, 1]}]},
            {
                "query": "Which clause is broken?",
                "snippets": [{"file_path": "a.txt", "span": span}],
            },
        ],
        {"a.txt": "abc"},
    )
    with pytest.raises(DataFormatError, match=message) as caught:
        read_legalbench(benchmark, corpus)
    assert "query 1 ('Which clause is broken?')" in str(caught.value)
    assert "file 'a.txt'" in str(caught.value)


def test_answer_mismatch_names_the_query_and_file(tmp_path: Path) -> None:
    benchmark, corpus = write_benchmark(
        tmp_path,
        [{"query": "q0", "snippets": [{"file_path": NDA, "span": [0, 5], "answer": "Bolt"}]}],
        {NDA: "Acme and Bolt"},
    )
    with pytest.raises(DataFormatError, match="answer does not match") as caught:
        read_legalbench(benchmark, corpus)
    assert "query 0 ('q0')" in str(caught.value)
    assert NDA in str(caught.value)
    assert "'Acme '" in str(caught.value)


def test_long_query_text_is_shortened_in_errors(tmp_path: Path) -> None:
    long_query = "Consider the Non-Disclosure Agreement between X and Y; " + "word " * 30
    benchmark, corpus = write_benchmark(
        tmp_path,
        [{"query": long_query, "snippets": [{"file_path": "a.txt", "span": [0, 9]}]}],
        {"a.txt": "abc"},
    )
    with pytest.raises(
        DataFormatError, match=r"query 0 \('Consider the Non-Disclosure Agreement"
    ) as caught:
        read_legalbench(benchmark, corpus)
    assert "…" in str(caught.value)


def test_missing_corpus_file_names_the_query_and_path(tmp_path: Path) -> None:
    benchmark, corpus = write_benchmark(
        tmp_path,
        [{"query": "q", "snippets": [{"file_path": "missing.txt", "span": [0, 1]}]}],
        {"a.txt": "abc"},
    )
    with pytest.raises(DataFormatError, match=r"query 0 \('q'\).*no such file.*missing\.txt"):
        read_legalbench(benchmark, corpus)


@pytest.mark.parametrize(
    ("tests", "message"),
    [
        ([{"snippets": [{"file_path": "a.txt", "span": [0, 1]}]}], "no question text"),
        ([{"query": "q", "snippets": []}], "has no evidence"),
        ([{"query": "q", "snippets": [{"span": [0, 1]}]}], "names no document"),
        (["just a string"], "query 0 is a str"),
        ([], "holds no queries"),
    ],
)
def test_malformed_queries(tmp_path: Path, tests: object, message: str) -> None:
    benchmark, corpus = write_benchmark(tmp_path, tests, {"a.txt": "abc"})
    with pytest.raises(DataFormatError, match=message):
        read_legalbench(benchmark, corpus)


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    (tmp_path / "corpus").mkdir()
    with pytest.raises(DataFormatError, match=r"benchmark file .* does not exist"):
        read_legalbench(tmp_path / "nope.json", tmp_path / "corpus")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(DataFormatError, match="not valid UTF-8 JSON"):
        read_legalbench(bad, tmp_path / "corpus")
    bad.write_text('{"queries": []}', encoding="utf-8")
    with pytest.raises(DataFormatError, match='no "tests" list'):
        read_legalbench(bad, tmp_path / "corpus")
    with pytest.raises(DataFormatError, match=r"corpus folder .* does not exist"):
        read_legalbench(bad, tmp_path / "no-such-dir")
    with pytest.raises(DataFormatError, match="is not a folder"):
        read_legalbench(bad, bad)


def test_jsonl_errors(tmp_path: Path, fixtures_dir: Path) -> None:
    corpus = tmp_path / "corpus.jsonl"
    queries = tmp_path / "queries.jsonl"
    corpus.write_text(
        '{"id": "a", "text": "abc"}\n\n{"id": "a", "text": "again"}\n', encoding="utf-8"
    )
    queries.write_text(
        '{"query": "q", "snippets": [{"doc_id": "a", "span": [0, 1]}]}\n', encoding="utf-8"
    )
    with pytest.raises(DataFormatError, match=r"line 3: document id 'a' appears twice"):
        read_jsonl_benchmark(queries, corpus)
    corpus.write_text('{"id": "a", "text": "abc"}\n', encoding="utf-8")
    queries.write_text(
        '{"query": "q", "snippets": [{"doc_id": "a", "span": [0, 1]}]}\n'
        '{"query": "second", "snippets": [{"doc_id": "b", "span": [0, 1]}]}\n',
        encoding="utf-8",
    )
    with pytest.raises(DataFormatError, match=r"query 1 \('second'\).*file 'b'.*no document"):
        read_jsonl_benchmark(queries, corpus)
    queries.write_text("{oops\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match="line 1: not valid JSON"):
        read_jsonl_benchmark(queries, corpus)
    with pytest.raises(DataFormatError, match=r"corpus file .* does not exist"):
        read_jsonl_benchmark(fixtures_dir / "jsonl/queries.jsonl", tmp_path / "none.jsonl")


def test_format_detection(fixtures_dir: Path) -> None:
    assert detect_format(fixtures_dir / "jsonl/queries.jsonl", fixtures_dir / "jsonl") == "jsonl"
    assert detect_format("q.json", fixtures_dir / "jsonl") == "jsonl"
    assert detect_format("b.json", fixtures_dir / "legalbench/corpus") == "legalbench"


def test_sample_benchmark_is_the_demo_sample() -> None:
    sample = load_sample_benchmark()
    assert sample.name == "sample"
    assert len(sample.queries) >= 5
    assert all(
        sample.documents[s.document_id][s.start : s.end] for q in sample.queries for s in q.spans
    )


def test_fixture_copy_in_a_path_with_spaces(tmp_path: Path, fixtures_dir: Path) -> None:
    target = tmp_path / "a folder & more"
    shutil.copytree(fixtures_dir / "legalbench", target)
    loaded = load_benchmark(target / "benchmark.json", target / "corpus")
    assert len(loaded.queries) == 8
