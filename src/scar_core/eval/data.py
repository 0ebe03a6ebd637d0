r"""Benchmark readers: queries with gold evidence given as character spans into documents.

Two formats are read. Keys a reader does not know are ignored in both.

**LegalBench-RAG** (``--format legalbench``): a JSON file and a corpus folder::

    {"tests": [{"query": "...",
                "snippets": [{"file_path": "contractnli/NDA.txt", "span": [120, 480],
                              "answer": "text[120:480]"}]}]}

``file_path`` is relative to the corpus folder and used exactly as written (spaces, ``&``, ``:``
and non-ASCII characters are fine). A document is the file read as UTF-8 text with universal
newlines (``\r\n`` and ``\r`` read as ``\n``), which is how the published spans were computed.
``span`` is a half-open range ``[start, end)`` of characters (not bytes). ``answer`` is optional;
when present it must equal ``text[start:end]``.

**JSONL** (``--format jsonl``): a ``queries.jsonl`` file and a ``corpus.jsonl`` file (or a folder
holding one), one JSON object per line, blank lines skipped::

    corpus.jsonl:   {"id": "policy-1", "text": "..."}
    queries.jsonl:  {"query": "...", "snippets": [{"doc_id": "policy-1", "span": [0, 42],
                                                   "answer": "..."}]}

A snippet names its document with ``doc_id`` (or ``file_path``, as an alias).

The documents of a benchmark are the ones its queries name; other files in a corpus folder are not
read. A query's spans may lie in several documents. Every error is a
:class:`~scar_core.errors.DataFormatError` naming the query (its index and the start of its text)
and the file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from scar_core.errors import DataFormatError

__all__ = [
    "Benchmark",
    "BenchmarkFormat",
    "EvalQuery",
    "EvidenceSpan",
    "detect_format",
    "load_benchmark",
    "load_sample_benchmark",
    "read_jsonl_benchmark",
    "read_legalbench",
]

BenchmarkFormat = Literal["legalbench", "jsonl"]

_QUERY_PREVIEW = 60


@dataclass(frozen=True)
class EvidenceSpan:
    """A half-open range ``[start, end)`` of characters of one document that holds evidence."""

    document_id: str
    start: int
    end: int

    @property
    def length(self) -> int:
        """Number of characters in the span."""
        return self.end - self.start


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
        name: A short label used in reports (the benchmark file's stem by default).
        documents: ``document id -> text``, in order of first mention by the queries.
        queries: The queries, in file order.
    """

    name: str
    documents: Mapping[str, str]
    queries: tuple[EvalQuery, ...]


def describe_query(index: int, text: object) -> str:
    """Return ``query 12 ('Consider the Non-Disclosure Agreement…')`` for error messages."""
    preview = str(text)
    if len(preview) > _QUERY_PREVIEW:
        preview = preview[:_QUERY_PREVIEW] + "…"
    return f"query {index} ({preview!r})"


def _require_file(path: Path, what: str) -> None:
    if not path.exists():
        raise DataFormatError(f"{what} {str(path)!r} does not exist.")
    if not path.is_file():
        raise DataFormatError(f"{what} {str(path)!r} is not a file.")


def _parse_span(raw: object, where: str) -> tuple[int, int]:
    if (
        not isinstance(raw, (list, tuple))
        or len(raw) != 2
        or not all(isinstance(value, int) and not isinstance(value, bool) for value in raw)
    ):
        raise DataFormatError(
            f"{where}: span {raw!r} is not valid; it must be [start, end] with two integers."
        )
    return int(raw[0]), int(raw[1])


def _parse_query(
    raw: object,
    index: int,
    source: str,
    document_text: Callable[[str, str], str],
    document_keys: tuple[str, ...],
) -> EvalQuery:
    """Validate one raw query object; ``document_text(doc_id, where)`` returns a document's text."""
    if not isinstance(raw, dict):
        raise DataFormatError(
            f"{source}: query {index} is a {type(raw).__name__}; expected an object "
            '{"query": ..., "snippets": [...]}.'
        )
    text = raw.get("query")
    if not isinstance(text, str) or not text.strip():
        raise DataFormatError(
            f"{source}: query {index} has no question text; 'query' must be a non-empty string, "
            f"not {text!r}."
        )
    name = describe_query(index, text)
    snippets = raw.get("snippets")
    if not isinstance(snippets, list) or not snippets:
        raise DataFormatError(
            f"{source}: {name} has no evidence; 'snippets' must be a non-empty list of "
            '{"' + document_keys[0] + '": ..., "span": [start, end]}.'
        )
    spans: list[EvidenceSpan] = []
    for number, snippet in enumerate(snippets):
        where = f"{source}: {name}, snippet {number}"
        if not isinstance(snippet, dict):
            raise DataFormatError(f"{where} is a {type(snippet).__name__}; expected an object.")
        document_id = next((snippet[key] for key in document_keys if key in snippet), None)
        if not isinstance(document_id, str) or not document_id:
            raise DataFormatError(
                f"{where} names no document; give {' or '.join(map(repr, document_keys))} "
                "as a non-empty string."
            )
        where = f"{where}, file {document_id!r}"
        start, end = _parse_span(snippet.get("span"), where)
        document = document_text(document_id, where)
        if not 0 <= start < end <= len(document):
            raise DataFormatError(
                f"{where}: span [{start}, {end}] is out of range; it must satisfy "
                f"0 <= start < end <= {len(document)} (the document's length in characters)."
            )
        answer = snippet.get("answer")
        if answer is not None and answer != document[start:end]:
            found = document[start:end]
            raise DataFormatError(
                f"{where}: the answer does not match the text at span [{start}, {end}]: the "
                f"answer starts {answer[:40]!r} but the text there starts {found[:40]!r}. "
                "Spans count characters (not bytes) of the text read with universal newlines."
            )
        spans.append(EvidenceSpan(document_id, start, end))
    return EvalQuery(index=index, text=text, spans=tuple(spans))


def read_legalbench(
    benchmark_path: str | Path, corpus_dir: str | Path, *, name: str | None = None
) -> Benchmark:
    """Read a LegalBench-RAG benchmark JSON and the corpus files its queries name.

    Args:
        benchmark_path: The ``{"tests": [...]}`` file.
        corpus_dir: The folder that ``file_path`` values are relative to.
        name: Label for reports; the benchmark file's stem by default.

    Returns:
        The benchmark.

    Raises:
        DataFormatError: If a file is missing or malformed, a span is out of range or an answer
            does not match its span.
    """
    benchmark_path = Path(benchmark_path)
    corpus_dir = Path(corpus_dir)
    _require_file(benchmark_path, "the benchmark file")
    if not corpus_dir.exists():
        raise DataFormatError(f"the corpus folder {str(corpus_dir)!r} does not exist.")
    if not corpus_dir.is_dir():
        raise DataFormatError(
            f"the corpus {str(corpus_dir)!r} is not a folder; a LegalBench-RAG benchmark needs "
            "the folder its file_path values are relative to (use --format jsonl for corpus.jsonl)."
        )
    source = str(benchmark_path)
    try:
        payload = json.loads(benchmark_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataFormatError(f"{source} is not valid UTF-8 JSON: {exc}") from exc
    tests = payload.get("tests") if isinstance(payload, dict) else None
    if not isinstance(tests, list):
        raise DataFormatError(
            f'{source} has no "tests" list; expected {{"tests": [{{"query": ..., '
            '"snippets": [...]}}]}.'
        )
    documents: dict[str, str] = {}

    def document_text(document_id: str, where: str) -> str:
        if document_id not in documents:
            path = corpus_dir / document_id
            if not path.is_file():
                raise DataFormatError(f"{where}: no such file in the corpus folder: {str(path)!r}.")
            try:
                documents[document_id] = path.read_text(encoding="utf-8")
            except UnicodeDecodeError as exc:
                raise DataFormatError(f"{where}: the file is not UTF-8 text ({exc}).") from exc
        return documents[document_id]

    queries = tuple(
        _parse_query(raw, index, source, document_text, ("file_path",))
        for index, raw in enumerate(tests)
    )
    if not queries:
        raise DataFormatError(f"{source} holds no queries.")
    return Benchmark(name=name or benchmark_path.stem, documents=documents, queries=queries)


def _read_jsonl_lines(path: Path) -> list[tuple[int, object]]:
    rows: list[tuple[int, object]] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise DataFormatError(f"{str(path)!r} is not UTF-8 text ({exc}).") from exc
    for line_number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append((line_number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise DataFormatError(
                f"{str(path)!r}, line {line_number}: not valid JSON ({exc})."
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

    Returns:
        The benchmark, with only the documents the queries name.

    Raises:
        DataFormatError: If a file is missing or malformed, an id repeats or is unknown, a span is
            out of range or an answer does not match its span.
    """
    queries_path = Path(queries_path)
    corpus_path = Path(corpus_path)
    if corpus_path.is_dir():
        corpus_path = corpus_path / "corpus.jsonl"
    _require_file(queries_path, "the queries file")
    _require_file(corpus_path, "the corpus file")
    corpus: dict[str, str] = {}
    for line_number, row in _read_jsonl_lines(corpus_path):
        where = f"{str(corpus_path)!r}, line {line_number}"
        if not isinstance(row, dict):
            raise DataFormatError(f'{where}: expected an object {{"id": ..., "text": ...}}.')
        document_id, text = row.get("id"), row.get("text")
        if not isinstance(document_id, str) or not document_id:
            raise DataFormatError(f"{where}: 'id' must be a non-empty string, not {document_id!r}.")
        if not isinstance(text, str):
            raise DataFormatError(f"{where}: 'text' of document {document_id!r} must be a string.")
        if document_id in corpus:
            raise DataFormatError(f"{where}: document id {document_id!r} appears twice.")
        corpus[document_id] = text
    documents: dict[str, str] = {}

    def document_text(document_id: str, where: str) -> str:
        if document_id not in corpus:
            raise DataFormatError(f"{where}: no document with this id in {str(corpus_path)!r}.")
        documents[document_id] = corpus[document_id]
        return corpus[document_id]

    source = str(queries_path)
    queries = tuple(
        _parse_query(raw, index, source, document_text, ("doc_id", "file_path"))
        for index, (_, raw) in enumerate(_read_jsonl_lines(queries_path))
    )
    if not queries:
        raise DataFormatError(f"{source} holds no queries.")
    return Benchmark(name=name or queries_path.stem, documents=documents, queries=queries)


def detect_format(benchmark_path: str | Path, corpus_path: str | Path) -> BenchmarkFormat:
    """Guess a benchmark's format from its paths.

    Returns:
        ``"jsonl"`` when either path is a ``.jsonl`` file or the corpus folder holds
        ``corpus.jsonl``; ``"legalbench"`` otherwise.
    """
    benchmark_path, corpus_path = Path(benchmark_path), Path(corpus_path)
    if benchmark_path.suffix.lower() == ".jsonl" or corpus_path.suffix.lower() == ".jsonl":
        return "jsonl"
    if corpus_path.is_dir() and (corpus_path / "corpus.jsonl").is_file():
        return "jsonl"
    return "legalbench"


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
        data_format: ``"legalbench"`` or ``"jsonl"``; detected by :func:`detect_format` if omitted.
        name: Label for reports.

    Returns:
        The benchmark.
    """
    chosen = data_format or detect_format(benchmark_path, corpus_path)
    if chosen == "jsonl":
        return read_jsonl_benchmark(benchmark_path, corpus_path, name=name)
    if chosen == "legalbench":
        return read_legalbench(benchmark_path, corpus_path, name=name)
    raise DataFormatError(f"format {chosen!r} is not known; use 'legalbench' or 'jsonl'.")


def load_sample_benchmark() -> Benchmark:
    """Return the small sample benchmark that ships inside the package (see :mod:`scar_core.demo`).

    This is what ``scar eval`` runs when no benchmark is given: three documents and their
    questions, in the LegalBench-RAG format, found with
    :func:`scar_core.demo.sample_benchmark_path` and :func:`scar_core.demo.sample_corpus_dir`.

    Raises:
        DataFormatError: If this installation carries no sample.
    """
    from scar_core.demo.sample import sample_benchmark_path, sample_corpus_dir

    return read_legalbench(sample_benchmark_path(), sample_corpus_dir(), name="sample")
