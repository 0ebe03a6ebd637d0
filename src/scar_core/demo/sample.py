"""The sample corpus and questions that ship inside the package.

Three documents written for SCAR (a payments API reference, a data-retention policy and a services
contract) and fifteen questions with gold evidence as exact character spans, in the LegalBench-RAG
format::

    {"tests": [{"query": str,
                "snippets": [{"file_path": str, "span": [start, end], "answer": str}]}]}

``file_path`` is relative to :func:`sample_corpus_dir`; ``span`` is a half-open range of characters
of the file read as UTF-8, and ``answer == text[start:end]``. Most questions need a rule and its
exception, or a table header and its values, that a 300- or 400-character splitter puts in
different chunks. The documents are fictional: the companies, addresses and figures are invented.

``scar demo`` runs on this sample, and so does ``scar eval`` when it is given no benchmark::

    from scar_core.demo import sample_benchmark_path, sample_corpus_dir
    benchmark_json, corpus_dir = sample_benchmark_path(), sample_corpus_dir()
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from scar_core.errors import DataFormatError

__all__ = [
    "Sample",
    "SampleQuestion",
    "SampleSpan",
    "load_sample",
    "sample_benchmark_path",
    "sample_corpus_dir",
]

_PACKAGE = "scar_core.demo"
_DATA_FOLDER = "data"
_BENCHMARK_FILE = "sample_benchmark.json"
_CORPUS_FOLDER = "corpus"


def _data_dir() -> Path:
    folder = resources.files(_PACKAGE).joinpath(_DATA_FOLDER)
    if not isinstance(folder, Path) or not folder.is_dir():
        raise DataFormatError(
            f"the bundled sample is not a folder on disk ({folder!s}); reinstall scar-retrieval "
            "from a wheel or a source checkout, not as a zipped package."
        )
    return folder


def sample_benchmark_path() -> Path:
    """Return the path of the sample's LegalBench-RAG benchmark JSON.

    Raises:
        DataFormatError: If this installation does not hold the sample as files on disk.
    """
    return _data_dir() / _BENCHMARK_FILE


def sample_corpus_dir() -> Path:
    """Return the folder that the sample benchmark's ``file_path`` values are relative to.

    Raises:
        DataFormatError: If this installation does not hold the sample as files on disk.
    """
    return _data_dir() / _CORPUS_FOLDER


@dataclass(frozen=True)
class SampleSpan:
    """One piece of gold evidence: ``text[start:end] == answer`` in document ``document``."""

    document: str
    start: int
    end: int
    answer: str


@dataclass(frozen=True)
class SampleQuestion:
    """A question and its gold evidence, which lies in one document.

    Attributes:
        index: Zero-based position in the benchmark file.
        query: The question.
        spans: The gold evidence, in file order.
    """

    index: int
    query: str
    spans: tuple[SampleSpan, ...]

    @property
    def document(self) -> str:
        """The document holding the evidence (the demo retrieves within it)."""
        return self.spans[0].document


@dataclass(frozen=True)
class Sample:
    """Documents and questions of a benchmark whose questions each concern one document.

    Attributes:
        documents: ``file path -> text``, in order of first mention by the questions.
        questions: The questions, in file order.
    """

    documents: Mapping[str, str]
    questions: tuple[SampleQuestion, ...]


def _read_document(corpus_dir: Path, file_path: str, where: str) -> str:
    path = corpus_dir / file_path
    if not path.is_file():
        raise DataFormatError(f"{where}: no such file in the corpus folder: {str(path)!r}.")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataFormatError(f"{where}: {str(path)!r} is not UTF-8 text ({exc}).") from exc


def _parse_span(snippet: object, where: str, read: dict[str, str], corpus_dir: Path) -> SampleSpan:
    if not isinstance(snippet, dict):
        raise DataFormatError(f"{where} is a {type(snippet).__name__}; expected an object.")
    file_path, span, answer = snippet.get("file_path"), snippet.get("span"), snippet.get("answer")
    if not isinstance(file_path, str) or not file_path:
        raise DataFormatError(
            f"{where}: 'file_path' must be a non-empty string, not {file_path!r}."
        )
    where = f"{where}, file {file_path!r}"
    if (
        not isinstance(span, list)
        or len(span) != 2
        or not all(isinstance(value, int) and not isinstance(value, bool) for value in span)
    ):
        raise DataFormatError(f"{where}: span {span!r} must be [start, end] with two integers.")
    if file_path not in read:
        read[file_path] = _read_document(corpus_dir, file_path, where)
    text = read[file_path]
    start, end = span
    if not 0 <= start < end <= len(text):
        raise DataFormatError(
            f"{where}: span [{start}, {end}] is out of range; it must satisfy "
            f"0 <= start < end <= {len(text)} (the file's length in characters)."
        )
    if not isinstance(answer, str) or answer != text[start:end]:
        raise DataFormatError(
            f"{where}: the answer {str(answer)[:40]!r} does not match the text at span "
            f"[{start}, {end}], which starts {text[start : start + 40]!r}."
        )
    return SampleSpan(document=file_path, start=start, end=end, answer=answer)


def load_sample(
    benchmark_path: str | Path | None = None, corpus_dir: str | Path | None = None
) -> Sample:
    """Read and check the bundled sample (or another benchmark in the same format).

    Every span is checked against its file, and every question's evidence must lie in one
    document, since the demo retrieves within the question's document.

    Args:
        benchmark_path: A LegalBench-RAG JSON; the bundled sample when omitted.
        corpus_dir: The folder its ``file_path`` values are relative to; the bundled corpus when
            omitted.

    Returns:
        The documents the questions name, and the questions.

    Raises:
        DataFormatError: If a file is missing or malformed, a span is out of range, an answer does
            not match its span, or a question's evidence spans two documents.
    """
    benchmark = Path(benchmark_path) if benchmark_path is not None else sample_benchmark_path()
    corpus = Path(corpus_dir) if corpus_dir is not None else sample_corpus_dir()
    try:
        payload = json.loads(benchmark.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataFormatError(f"could not read the benchmark {str(benchmark)!r}: {exc}") from exc
    tests = payload.get("tests") if isinstance(payload, dict) else None
    if not isinstance(tests, list) or not tests:
        raise DataFormatError(
            f"{str(benchmark)!r} has no non-empty 'tests' list; expected "
            '{"tests": [{"query": ..., "snippets": [...]}]}.'
        )
    documents: dict[str, str] = {}
    questions: list[SampleQuestion] = []
    for index, raw in enumerate(tests):
        where = f"{benchmark.name}: question {index}"
        if not isinstance(raw, dict):
            raise DataFormatError(f"{where} is a {type(raw).__name__}; expected an object.")
        query, snippets = raw.get("query"), raw.get("snippets")
        if not isinstance(query, str) or not query.strip():
            raise DataFormatError(f"{where}: 'query' must be a non-empty string, not {query!r}.")
        if not isinstance(snippets, list) or not snippets:
            raise DataFormatError(f"{where}: 'snippets' must be a non-empty list.")
        spans = tuple(
            _parse_span(snippet, f"{where}, snippet {number}", documents, corpus)
            for number, snippet in enumerate(snippets)
        )
        if len({span.document for span in spans}) > 1:
            raise DataFormatError(
                f"{where}: its evidence lies in several files "
                f"({', '.join(sorted({span.document for span in spans}))}); the demo retrieves "
                "within one document per question."
            )
        questions.append(SampleQuestion(index=index, query=query, spans=spans))
    return Sample(documents=documents, questions=tuple(questions))
