"""Chunk a benchmark's documents, link the chunks, and find each query's gold chunks.

Each document is split on its own, by default with LangChain's
``RecursiveCharacterTextSplitter(chunk_size=500, chunk_overlap=0, add_start_index=True)``. The chunk
gets the id :func:`scar_core._links.chunk_id_for` of its document, text and offset, and the links of
:func:`scar_core._links.link_sequence`. A query's gold chunks are every chunk holding at least one character of its evidence.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scar_core._errors import DataFormatError, InvalidSettingsError, missing_dependency
from scar_core._links import chunk_id_for, link_sequence
from scar_tools.eval.data import EvalQuery

__all__ = ["ChunkedCorpus", "EvalChunk", "Splitter", "chunk_corpus", "recursive_character_splitter"]

#: A splitter turns a document's text into ``(start offset, chunk text)`` pairs in reading order.
Splitter = Callable[[str], Sequence[tuple[int, str]]]


@dataclass(frozen=True)
class EvalChunk:
    """One chunk of one document.

    Attributes:
        chunk_id: ``chunk_id_for(document_id, text, {"start_index": start})``.
        document_id: The document it comes from.
        position: Zero-based index within the document.
        start: Offset of its first character in the document.
        text: Its text, equal to ``document[start:start + len(text)]``.
        previous_id: The chunk before it in its document, if any.
        next_id: The chunk after it, if any.
    """

    chunk_id: str
    document_id: str
    position: int
    start: int
    text: str
    previous_id: str | None
    next_id: str | None

    @property
    def end(self) -> int:
        """Offset one past its last character."""
        return self.start + len(self.text)


def recursive_character_splitter(chunk_size: int = 500, chunk_overlap: int = 0) -> Splitter:
    """Return LangChain's ``RecursiveCharacterTextSplitter`` with offsets, as a :data:`Splitter`.

    Raises:
        InvalidSettingsError: If ``chunk_size < 1`` or the overlap is not in ``[0, chunk_size)``.
        MissingDependencyError: If ``langchain-text-splitters`` is not installed (extra ``eval``).
    """
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
        raise InvalidSettingsError(
            f"chunk_size={chunk_size!r} is not valid; it must be an integer >= 1."
        )
    if not isinstance(chunk_overlap, int) or not 0 <= chunk_overlap < chunk_size:
        raise InvalidSettingsError(
            f"chunk_overlap={chunk_overlap!r} is not valid; it must be an integer in "
            f"[0, {chunk_size})."
        )
    try:
        from langchain_text_splitters import RecursiveCharacterTextSplitter
    except ImportError as exc:
        raise missing_dependency("langchain_text_splitters", "eval") from exc
    splitter = RecursiveCharacterTextSplitter(
        chunk_size=chunk_size, chunk_overlap=chunk_overlap, add_start_index=True
    )

    def split(text: str) -> list[tuple[int, str]]:
        pieces = splitter.create_documents([text])
        return [(int(p.metadata["start_index"]), p.page_content) for p in pieces]

    return split


class ChunkedCorpus:
    """Every document's chunks, in rows: row ``i`` of an embedding matrix belongs to ``chunks[i]``.

    Args:
        chunks: All chunks, documents one after another, each document's chunks in order.

    Attributes:
        chunks: The chunks by row.
        row_of: ``chunk id -> row``.
        rows_of_document: ``document id -> (first row, one past the last row)``.
        starts: Start offsets by row.
        ends: End offsets by row.
    """

    def __init__(self, chunks: Sequence[EvalChunk]) -> None:
        self.chunks: tuple[EvalChunk, ...] = tuple(chunks)
        self.row_of = {chunk.chunk_id: row for row, chunk in enumerate(self.chunks)}
        self.rows_of_document: dict[str, tuple[int, int]] = {}
        for row, chunk in enumerate(self.chunks):
            first = self.rows_of_document.get(chunk.document_id, (row, row))[0]
            self.rows_of_document[chunk.document_id] = (first, row + 1)
        self.starts: npt.NDArray[np.int64] = np.array([c.start for c in self.chunks], np.int64)
        self.ends: npt.NDArray[np.int64] = np.array([c.end for c in self.chunks], np.int64)

    def __len__(self) -> int:
        return len(self.chunks)

    def gold_rows(self, query: EvalQuery) -> list[int]:
        """Rows of the chunks holding at least one character of the query's evidence, in order.

        Chunk ``[a, b)`` holds a character of span ``[s, e)`` of its document when ``a < e`` and
        ``b > s``. Evidence wholly in whitespace a splitter dropped has no gold chunk.
        """
        hit = np.zeros(len(self), dtype=bool)
        for span in query.spans:
            first, last = self.rows_of_document.get(span.document_id, (0, 0))
            rows = slice(first, last)
            hit[rows] |= (self.starts[rows] < span.end) & (self.ends[rows] > span.start)
        return np.flatnonzero(hit).tolist()

    def nearby(self, rows: Sequence[int], window: int) -> set[int]:
        """Rows within ``window`` steps of any of ``rows``, inside their own documents."""
        found: set[int] = set()
        for row in rows:
            first, last = self.rows_of_document[self.chunks[row].document_id]
            found.update(range(max(first, row - window), min(last, row + window + 1)))
        return found


def chunk_corpus(
    documents: Mapping[str, str],
    *,
    chunk_size: int = 500,
    chunk_overlap: int = 0,
    splitter: Splitter | None = None,
) -> ChunkedCorpus:
    """Split every document and give each chunk its id, offset and links.

    Args:
        documents: ``document id -> text``.
        chunk_size: Characters per chunk (default splitter).
        chunk_overlap: Characters repeated between consecutive chunks (default splitter).
        splitter: Any :data:`Splitter`; LangChain's recursive character splitter by default.

    Raises:
        DataFormatError: If a splitter returns a chunk whose text is not at its stated offset.
    """
    split = splitter or recursive_character_splitter(chunk_size, chunk_overlap)
    chunks: list[EvalChunk] = []
    for document_id, text in documents.items():
        pieces = list(split(text))
        ids = [chunk_id_for(document_id, piece, {"start_index": start}) for start, piece in pieces]
        for (start, piece), link in zip(pieces, link_sequence(document_id, ids), strict=True):
            if start < 0 or text[start : start + len(piece)] != piece:
                raise DataFormatError(
                    f"the splitter gave chunk {link.position} of {document_id!r} the offset "
                    f"{start}, but its text is not found there in the document."
                )
            where = (link.chunk_id, document_id, link.position, start)
            chunks.append(EvalChunk(*where, piece, link.previous_id, link.next_id))
    return ChunkedCorpus(chunks)
