"""The bundled sample: exact spans, the fragmentation it claims, and clear errors on bad data."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from scar_core.demo import (
    DEMO_DEFAULTS,
    DemoSettings,
    fragmented_questions,
    gold_positions,
    load_sample,
    sample_benchmark_path,
    sample_corpus_dir,
    split_documents,
)
from scar_core.errors import DataFormatError, InvalidSettingsError

pytest.importorskip("langchain_text_splitters")


def raw_benchmark() -> dict:
    return json.loads(sample_benchmark_path().read_text(encoding="utf-8"))


def test_the_sample_ships_inside_the_package() -> None:
    data = resources.files("scar_core.demo").joinpath("data")
    assert data.joinpath("sample_benchmark.json").is_file()
    names = sorted(entry.name for entry in data.joinpath("corpus").iterdir())
    assert names == sorted(path.name for path in sample_corpus_dir().iterdir())
    assert len(names) == 3
    assert sample_benchmark_path().parent == sample_corpus_dir().parent


def test_documents_are_of_the_promised_size() -> None:
    for path in sample_corpus_dir().iterdir():
        assert 4_000 <= len(path.read_text(encoding="utf-8")) <= 7_000, path.name


def test_every_span_is_exact() -> None:
    tests = raw_benchmark()["tests"]
    assert 10 <= len(tests) <= 15
    for test in tests:
        assert test["query"].strip()
        files = {snippet["file_path"] for snippet in test["snippets"]}
        assert len(files) == 1, test["query"]
        for snippet in test["snippets"]:
            text = (sample_corpus_dir() / snippet["file_path"]).read_text(encoding="utf-8")
            start, end = snippet["span"]
            assert 0 <= start < end <= len(text)
            assert text[start:end] == snippet["answer"]


def test_load_sample_matches_the_raw_file() -> None:
    sample = load_sample()
    tests = raw_benchmark()["tests"]
    assert [q.query for q in sample.questions] == [t["query"] for t in tests]
    for question, test in zip(sample.questions, tests, strict=True):
        assert [(s.start, s.end) for s in question.spans] == [
            tuple(snippet["span"]) for snippet in test["snippets"]
        ]
        assert question.document == test["snippets"][0]["file_path"]
    assert set(sample.documents) == {path.name for path in sample_corpus_dir().iterdir()}


def independent_fragmented(chunk_size: int, chunk_ranges) -> list[int]:
    """Questions whose spans overlap two or more chunks, from the reference chunker."""
    fragmented = []
    for index, test in enumerate(raw_benchmark()["tests"]):
        text = (sample_corpus_dir() / test["snippets"][0]["file_path"]).read_text(encoding="utf-8")
        touched = set()
        for snippet in test["snippets"]:
            start, end = snippet["span"]
            for number, (chunk_start, chunk_end) in enumerate(chunk_ranges(text, chunk_size)):
                if chunk_start < end and start < chunk_end:
                    touched.add(number)
        if len(touched) >= 2:
            fragmented.append(index)
    return fragmented


@pytest.mark.parametrize("chunk_size", [250, 300, 400, 500])
def test_fragmented_questions_match_an_independent_count(chunk_size: int, chunk_ranges) -> None:
    expected = independent_fragmented(chunk_size, chunk_ranges)
    assert fragmented_questions(load_sample(), chunk_size) == expected


def test_the_demo_chunking_fragments_at_least_two_thirds(chunk_ranges) -> None:
    fragmented = independent_fragmented(DEMO_DEFAULTS.chunk_size, chunk_ranges)
    total = len(raw_benchmark()["tests"])
    assert 3 * len(fragmented) >= 2 * total
    # The figure DEMO_DEFAULTS' comment and the report quote.
    assert (DEMO_DEFAULTS.chunk_size, len(fragmented), total) == (300, 13, 15)


def test_split_documents_gives_exact_offsets_in_order(chunk_ranges) -> None:
    sample = load_sample()
    chunked = split_documents(sample.documents, 300)
    for document, text in sample.documents.items():
        chunks = chunked[document]
        assert [c.position for c in chunks] == list(range(len(chunks)))
        assert [(c.start, c.end) for c in chunks] == chunk_ranges(text, 300)
        for chunk in chunks:
            assert text[chunk.start : chunk.end] == chunk.text
            assert len(chunk.text) <= 300
        # Nothing but whitespace falls between chunks.
        covered = {i for c in chunks for i in range(c.start, c.end)}
        assert all(text[i].isspace() for i in range(len(text)) if i not in covered)
        assert len({c.chunk_id for c in chunks}) == len(chunks)


def test_gold_positions_are_the_chunks_touching_the_evidence() -> None:
    sample = load_sample()
    chunked = split_documents(sample.documents, 300)
    for question in sample.questions:
        chunks = chunked[question.document]
        evidence = {i for span in question.spans for i in range(span.start, span.end)}
        expected = tuple(c.position for c in chunks if evidence & set(range(c.start, c.end)))
        assert gold_positions(question, chunks) == expected
        assert expected


def write_benchmark(tmp_path: Path, tests: list, files: dict[str, str]) -> tuple[Path, Path]:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, text in files.items():
        (corpus / name).write_text(text, encoding="utf-8")
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"tests": tests}), encoding="utf-8")
    return path, corpus


def test_an_answer_that_does_not_match_its_span_names_question_and_file(tmp_path: Path) -> None:
    path, corpus = write_benchmark(
        tmp_path,
        [{"query": "q", "snippets": [{"file_path": "a.txt", "span": [0, 5], "answer": "world"}]}],
        {"a.txt": "hello world"},
    )
    with pytest.raises(DataFormatError, match=r"question 0.*'a.txt'.*does not match"):
        load_sample(path, corpus)


def test_an_out_of_range_span_is_refused(tmp_path: Path) -> None:
    path, corpus = write_benchmark(
        tmp_path,
        [{"query": "q", "snippets": [{"file_path": "a.txt", "span": [6, 99], "answer": "x"}]}],
        {"a.txt": "hello world"},
    )
    with pytest.raises(DataFormatError, match=r"out of range.*<= 11"):
        load_sample(path, corpus)


def test_evidence_in_two_files_is_refused(tmp_path: Path) -> None:
    snippets = [
        {"file_path": "a.txt", "span": [0, 5], "answer": "hello"},
        {"file_path": "b.txt", "span": [0, 3], "answer": "bye"},
    ]
    path, corpus = write_benchmark(
        tmp_path, [{"query": "q", "snippets": snippets}], {"a.txt": "hello", "b.txt": "bye"}
    )
    with pytest.raises(DataFormatError, match="several files"):
        load_sample(path, corpus)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    path, corpus = write_benchmark(
        tmp_path,
        [{"query": "q", "snippets": [{"file_path": "gone.txt", "span": [0, 1], "answer": "x"}]}],
        {},
    )
    with pytest.raises(DataFormatError, match=r"gone\.txt"):
        load_sample(path, corpus)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("chunk_size", 0, "chunk_size=0"),
        ("k", 0, "k=0"),
        ("gamma", 1.5, "gamma=1.5"),
        ("lambda_", -1.0, "lambda_=-1.0"),
        ("window", 0, "window=0"),
    ],
)
def test_bad_settings_name_the_value(field: str, value: float, message: str) -> None:
    values = DEMO_DEFAULTS.as_dict()
    arguments = {
        "chunk_size": values["chunk_size"],
        "k": values["k"],
        "lambda_": values["lambda"],
        "gamma": values["gamma"],
        "window": values["window"],
        field: value,
    }
    with pytest.raises(InvalidSettingsError, match=message):
        DemoSettings(**arguments)
