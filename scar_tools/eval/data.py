r"""Benchmark readers: queries whose gold evidence is given as character spans into documents.

Two formats are read; keys a reader does not know are ignored in both.

**LegalBench-RAG** (``--format legalbench``): a JSON file and a corpus folder::

    {"tests": [{"query": "...",
                "snippets": [{"file_path": "contractnli/NDA.txt", "span": [120, 480],
                              "answer": "text[120:480]"}]}]}

``file_path`` is relative to the corpus folder and used exactly as written (spaces, ``&``, ``:`` and
non-ASCII characters are fine), but it must stay inside that folder: a path that resolves outside it
(``../secret.txt``, an absolute path, a symlink pointing out) is refused. A document is the file
read as UTF-8 with universal newlines. ``span`` is a half-open range ``[start, end)`` of characters
(not bytes). ``answer`` is optional; when present it must equal ``text[start:end]``.

**JSONL** (``--format jsonl``): ``queries.jsonl`` and ``corpus.jsonl`` (or a folder holding it), one
JSON object per line, blank lines skipped::

    corpus.jsonl:   {"id": "policy-1", "text": "..."}
    queries.jsonl:  {"query": "...", "snippets": [{"doc_id": "policy-1", "span": [0, 42]}]}

A benchmark holds only the documents its queries name. Every error is a
:class:`~scar_core._errors.DataFormatError` naming the file, the query and the value at fault.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from scar_core._errors import DataFormatError

__all__ = [
    "Benchmark",
    "EvalQuery",
    "EvidenceSpan",
    "load_benchmark",
    "read_jsonl_benchmark",
    "read_legalbench",
]

BenchmarkFormat = Literal["legalbench", "jsonl"]


@dataclass(frozen=True)
class EvidenceSpan:
    """A half-open range ``[start, end)`` of characters of one document that holds evidence."""

    document_id: str
    start: int
    end: int


@dataclass(frozen=True)
class EvalQuery:
    """One benchmark question and its gold evidence.

    Attributes:
        index: Zero-based position of the query in its benchmark file.
        text: The question.
        spans: The gold evidence, in file order.
    """

    index: int
    text: str
    spans: tuple[EvidenceSpan, ...]

    @property
    def document_ids(self) -> tuple[str, ...]:
        """The documents the evidence lies in, in order of first mention."""
        return tuple(dict.fromkeys(span.document_id for span in self.spans))


@dataclass(frozen=True)
class Benchmark:
    """Queries with gold spans, and the text of every document they name.

    Attributes:
        name: A short label for reports (the benchmark file's stem by default).
        documents: ``document id -> text``, in order of first mention by the queries.
        queries: The queries, in file order.
    """

    name: str
    documents: Mapping[str, str]
    queries: tuple[EvalQuery, ...]


def _check(ok: object, message: str) -> None:
    if not ok:
        raise DataFormatError(message)


def _require_file(path: Path, what: str) -> None:
    _check(path.is_file(), f"{what} {str(path)!r} does not exist or is not a file.")


def _parse_query(
    raw: object, index: int, source: str, text_of: Callable[[str, str], str], keys: tuple[str, ...]
) -> EvalQuery:
    """Validate one query object; ``text_of(doc_id, where)`` returns a document's text."""
    _check(isinstance(raw, dict), f'{source}: query {index} is not an object {{"query": ...}}.')
    assert isinstance(raw, dict)
    text, snippets = raw.get("query"), raw.get("snippets")
    _check(
        isinstance(text, str) and text.strip(),
        f"{source}: query {index}: 'query' must be a non-empty string, not {text!r}.",
    )
    name = f"{source}: query {index} ({str(text)[:60]!r})"
    _check(
        isinstance(snippets, list) and snippets,
        f"{name} has no evidence; 'snippets' must be a non-empty list.",
    )
    spans: list[EvidenceSpan] = []
    for number, snippet in enumerate(snippets or []):
        where = f"{name}, snippet {number}"
        _check(isinstance(snippet, dict), f"{where} is not an object.")
        document_id = next((snippet[key] for key in keys if key in snippet), None)
        _check(
            isinstance(document_id, str) and document_id,
            f"{where} names no document; give {' or '.join(keys)}.",
        )
        where = f"{where}, file {document_id!r}"
        span = snippet.get("span")
        _check(
            isinstance(span, list) and len(span) == 2 and all(type(v) is int for v in span),
            f"{where}: span {span!r} must be [start, end] with two integers.",
        )
        start, end = span
        document_id = str(document_id)
        document = text_of(document_id, where)
        _check(
            0 <= start < end <= len(document),
            f"{where}: span [{start}, {end}] is out of range; it must satisfy 0 <= start < end <= "
            f"{len(document)} (the document's length in characters).",
        )
        answer = snippet.get("answer")
        _check(
            answer is None or answer == document[start:end],
            f"{where}: the answer starts {str(answer)[:40]!r} but the text at span "
            f"[{start}, {end}] starts {document[start : start + 40]!r}. Spans count characters "
            "(not bytes) of the text read with universal newlines.",
        )
        spans.append(EvidenceSpan(document_id, start, end))
    return EvalQuery(index=index, text=str(text), spans=tuple(spans))


def read_legalbench(
    benchmark_path: str | Path, corpus_dir: str | Path, *, name: str | None = None
) -> Benchmark:
    """Read a LegalBench-RAG benchmark JSON and the corpus files its queries name.

    Args:
        benchmark_path: The ``{"tests": [...]}`` file.
        corpus_dir: The folder that ``file_path`` values are relative to.
        name: Label for reports; the benchmark file's stem by default.

    Raises:
        DataFormatError: If a file is missing or malformed, a ``file_path`` leads outside
            ``corpus_dir``, a span is out of range or an answer does not match its span.
    """
    benchmark_path, corpus_dir = Path(benchmark_path), Path(corpus_dir)
    _require_file(benchmark_path, "the benchmark file")
    _check(
        corpus_dir.is_dir(),
        f"the corpus folder {str(corpus_dir)!r} does not exist or is not a folder; give the folder "
        "that file_path values are relative to (or --format jsonl with corpus.jsonl).",
    )
    root, source = corpus_dir.resolve(), str(benchmark_path)
    try:
        payload = json.loads(benchmark_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataFormatError(f"{source} is not valid UTF-8 JSON: {exc}") from exc
    except RecursionError as exc:
        raise DataFormatError(f"{source} nests JSON too deeply to be a benchmark.") from exc
    tests = payload.get("tests") if isinstance(payload, dict) else None
    _check(isinstance(tests, list) and tests, f'{source} has no non-empty "tests" list.')
    documents: dict[str, str] = {}

    def text_of(document_id: str, where: str) -> str:
        if document_id not in documents:
            _check(
                "\x00" not in document_id, f"{where}: file_path {document_id!r} holds a NUL byte."
            )
            try:
                path = (corpus_dir / document_id).resolve()  # follows symlinks, folds ".."
            except RuntimeError as exc:  # a symlink loop
                raise DataFormatError(f"{where}: file_path {document_id!r}: {exc}.") from exc
            _check(
                path.is_relative_to(root),
                f"{where}: file_path {document_id!r} resolves to {str(path)!r}, outside the corpus "
                f"folder {str(root)!r}; file_path must name a file inside the corpus folder.",
            )
            _check(path.is_file(), f"{where}: no such file in the corpus folder: {str(path)!r}.")
            try:
                documents[document_id] = path.read_text(encoding="utf-8")
            except UnicodeDecodeError as exc:
                raise DataFormatError(f"{where}: the file is not UTF-8 text ({exc}).") from exc
        return documents[document_id]

    queries = tuple(
        _parse_query(raw, i, source, text_of, ("file_path",)) for i, raw in enumerate(tests or [])
    )
    return Benchmark(name=name or benchmark_path.stem, documents=documents, queries=queries)


def _jsonl_rows(path: Path) -> list[tuple[int, object]]:
    rows: list[tuple[int, object]] = []
    try:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if line.strip():
                rows.append((number, json.loads(line)))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise DataFormatError(
            f"{str(path)!r}, line {len(rows) + 1} or so: not UTF-8 JSON of a usable depth ({exc})."
        ) from exc
    return rows


def read_jsonl_benchmark(
    queries_path: str | Path, corpus_path: str | Path, *, name: str | None = None
) -> Benchmark:
    """Read the JSONL format: ``queries.jsonl`` and ``corpus.jsonl`` (see the module docstring).

    Args:
        queries_path: The queries file.
        corpus_path: The corpus file, or a folder holding ``corpus.jsonl``.
        name: Label for reports; the queries file's stem by default.

    Raises:
        DataFormatError: If a file is missing or malformed, a document id repeats or is unknown,
            a span is out of range or an answer does not match its span.
    """
    queries_path, corpus_path = Path(queries_path), Path(corpus_path)
    if corpus_path.is_dir():
        corpus_path = corpus_path / "corpus.jsonl"
    _require_file(queries_path, "the queries file")
    _require_file(corpus_path, "the corpus file")
    corpus: dict[str, str] = {}
    for number, row in _jsonl_rows(corpus_path):
        where = f"{str(corpus_path)!r}, line {number}"
        document_id, text = (
            row.get("id") if isinstance(row, dict) else None,
            row.get("text") if isinstance(row, dict) else None,
        )
        _check(
            isinstance(document_id, str) and document_id and isinstance(text, str),
            f'{where}: expected {{"id": non-empty string, "text": string}}, got {str(row)[:80]}.',
        )
        _check(document_id not in corpus, f"{where}: document id {document_id!r} appears twice.")
        corpus[str(document_id)] = str(text)
    documents: dict[str, str] = {}

    def text_of(document_id: str, where: str) -> str:
        _check(document_id in corpus, f"{where}: no document with this id in {str(corpus_path)!r}.")
        documents[document_id] = corpus[document_id]
        return corpus[document_id]

    source, rows = str(queries_path), _jsonl_rows(queries_path)
    _check(rows, f"{source} holds no queries.")
    keys = ("doc_id", "file_path")
    queries = tuple(_parse_query(raw, i, source, text_of, keys) for i, (_, raw) in enumerate(rows))
    return Benchmark(name=name or queries_path.stem, documents=documents, queries=queries)


def load_benchmark(
    benchmark_path: str | Path,
    corpus_path: str | Path,
    *,
    data_format: BenchmarkFormat | None = None,
    name: str | None = None,
) -> Benchmark:
    """Read a benchmark in either format.

    Args:
        benchmark_path: The LegalBench-RAG JSON or the ``queries.jsonl`` file.
        corpus_path: The corpus folder, or ``corpus.jsonl``.
        data_format: ``"legalbench"`` or ``"jsonl"``; when omitted, ``"jsonl"`` if either path
            ends in ``.jsonl`` or the corpus folder holds ``corpus.jsonl``, else ``"legalbench"``.
        name: Label for reports.

    Raises:
        DataFormatError: If the format is unknown or the data is malformed.
    """
    benchmark_path, corpus_path = Path(benchmark_path), Path(corpus_path)
    if data_format is None:
        jsonl = (
            ".jsonl" in (benchmark_path.suffix.lower(), corpus_path.suffix.lower())
            or (corpus_path / "corpus.jsonl").is_file()
        )
        data_format = "jsonl" if jsonl else "legalbench"
    if data_format == "jsonl":
        return read_jsonl_benchmark(benchmark_path, corpus_path, name=name)
    if data_format == "legalbench":
        return read_legalbench(benchmark_path, corpus_path, name=name)
    raise DataFormatError(f"format {data_format!r} is not known; use 'legalbench' or 'jsonl'.")
