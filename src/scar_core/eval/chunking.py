"""Chunk a benchmark's documents and find each query's gold chunks.

Each document is split on its own (by default with LangChain's
``RecursiveCharacterTextSplitter(chunk_size=500, chunk_overlap=0, add_start_index=True)``); the
chunk at position ``p`` of document ``d`` gets the id :func:`scar_core.graph.chunk_id_for` ``(d, p)``
and the character offset where its text starts. A query's gold chunks are every chunk holding at
least one character of one of its evidence spans.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from scar_core.assembly import ChunkRecord
from scar_core.errors import DataFormatError, InvalidSettingsError, missing_dependency
from scar_core.eval.data import EvalQuery
from scar_core.graph import NeighborGraph, chunk_id_for

__all__ = [
    "Chunk",
    "ChunkedCorpus",
    "Splitter",
    "chunk_corpus",
    "gold_chunk_ids",
    "recursive_character_splitter",
]

#: A splitter turns a document's text into ``(start offset, chunk text)`` pairs in reading order.
Splitter = Callable[[str], Sequence[tuple[int, str]]]


@dataclass(frozen=True)
class Chunk:
    """One chunk of one document.

    Attributes:
        chunk_id: ``chunk_id_for(document_id, position)``.
        document_id: The document it comes from.
        position: Zero-based index within the document.
        start: Offset of its first character in the document.
        text: Its text, equal to ``document[start:start + len(text)]``.
    """

    chunk_id: str
    document_id: str
    position: int
    start: int
    text: str

    @property
    def end(self) -> int:
        """Offset one past its last character."""
        return self.start + len(self.text)


def recursive_character_splitter(chunk_size: int = 500, chunk_overlap: int = 0) -> Splitter:
    """Return LangChain's ``RecursiveCharacterTextSplitter`` with start offsets, as a :data:`Splitter`.

    Raises:
        InvalidSettingsError: If ``chunk_size < 1`` or the overlap is not in ``[0, chunk_size)``.
        MissingDependencyError: If ``langchain-text-splitters`` is not installed (extra ``eval``).
    """
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
        raise InvalidSettingsError(
            f"chunk_size={chunk_size!r} is not valid; it must be an integer >= 1 (characters)."
        )
    if (
        not isinstance(chunk_overlap, int)
        or isinstance(chunk_overlap, bool)
        or not 0 <= chunk_overlap < chunk_size
    ):
        raise InvalidSettingsError(
            f"chunk_overlap={chunk_overlap!r} is not valid; it must be an integer in "
            f"[0, chunk_size) = [0, {chunk_size})."
        )
    try:
        from langchain_text_splitters import RecursiveCharacterTextSplitter
    except ImportError as exc:
        raise missing_dependency("langchain_text_splitters", "eval") from exc
    splitter = RecursiveCharacterTextSplitter(
        chunk_size=chunk_size, chunk_overlap=chunk_overlap, add_start_index=True
    )

    def split(text: str) -> list[tuple[int, str]]:
        return [
            (int(piece.metadata["start_index"]), piece.page_content)
            for piece in splitter.create_documents([text])
        ]

    return split


class ChunkedCorpus:
    """The chunks of every document, their links and their positions.

    Args:
        chunks: All chunks, documents one after another, each document's chunks in order.

    Attributes:
        chunks: The chunks; row ``i`` of an embedding matrix belongs to ``chunks[i]``.
        rows_of_document: ``document id -> (first row, one past last row)``.
        row_of: ``chunk id -> row``.
    """

    def __init__(self, chunks: Sequence[Chunk]) -> None:
        self.chunks: tuple[Chunk, ...] = tuple(chunks)
        self.row_of: dict[str, int] = {}
        self.rows_of_document: dict[str, tuple[int, int]] = {}
        for row, chunk in enumerate(self.chunks):
            if chunk.chunk_id in self.row_of:
                raise DataFormatError(f"chunk id {chunk.chunk_id!r} appears twice.")
            self.row_of[chunk.chunk_id] = row
            first, _ = self.rows_of_document.get(chunk.document_id, (row, row))
            if first != row and self.chunks[row - 1].document_id != chunk.document_id:
                raise DataFormatError(
                    f"the chunks of document {chunk.document_id!r} are not consecutive."
                )
            self.rows_of_document[chunk.document_id] = (first, row + 1)
        self.starts: npt.NDArray[np.int64] = np.array([c.start for c in self.chunks], np.int64)
        self.ends: npt.NDArray[np.int64] = np.array([c.end for c in self.chunks], np.int64)

    def __len__(self) -> int:
        return len(self.chunks)

    @property
    def ids(self) -> list[str]:
        """Chunk ids by row."""
        return [chunk.chunk_id for chunk in self.chunks]

    @property
    def texts(self) -> list[str]:
        """Chunk texts by row."""
        return [chunk.text for chunk in self.chunks]

    @cached_property
    def text_of(self) -> dict[str, str]:
        """``chunk id -> text``."""
        return {chunk.chunk_id: chunk.text for chunk in self.chunks}

    @cached_property
    def records(self) -> dict[str, ChunkRecord]:
        """``chunk id -> ChunkRecord`` for :func:`scar_core.assembly.assemble_passages`."""
        return {
            chunk.chunk_id: ChunkRecord(
                chunk_id=chunk.chunk_id,
                text=chunk.text,
                document_id=chunk.document_id,
                position=chunk.position,
                start_index=chunk.start,
            )
            for chunk in self.chunks
        }

    @cached_property
    def graph(self) -> NeighborGraph:
        """Previous/next links within each document."""
        return NeighborGraph.from_sequences(
            {
                document_id: [self.chunks[row].chunk_id for row in range(first, last)]
                for document_id, (first, last) in self.rows_of_document.items()
            }
        )


def chunk_corpus(
    documents: Mapping[str, str],
    *,
    chunk_size: int = 500,
    chunk_overlap: int = 0,
    splitter: Splitter | None = None,
) -> ChunkedCorpus:
    """Split every document and give each chunk its id and offset.

    Args:
        documents: ``document id -> text``.
        chunk_size: Characters per chunk (for the default splitter).
        chunk_overlap: Characters repeated between consecutive chunks (for the default splitter).
        splitter: Any :data:`Splitter`; LangChain's recursive character splitter by default.

    Returns:
        The chunked corpus.

    Raises:
        DataFormatError: If a splitter returns a chunk whose text is not at its stated offset.
    """
    split = splitter or recursive_character_splitter(chunk_size, chunk_overlap)
    chunks: list[Chunk] = []
    for document_id, text in documents.items():
        for position, (start, piece) in enumerate(split(text)):
            if start < 0 or text[start : start + len(piece)] != piece:
                raise DataFormatError(
                    f"the splitter gave chunk {position} of {document_id!r} the offset {start}, "
                    "but its text is not found there in the document."
                )
            chunks.append(
                Chunk(chunk_id_for(document_id, position), document_id, position, start, piece)
            )
    return ChunkedCorpus(chunks)


def gold_chunk_ids(query: EvalQuery, corpus: ChunkedCorpus) -> list[str]:
    """Return the chunks holding at least one character of the query's evidence, in row order.

    A chunk ``[a, b)`` holds a character of span ``[s, e)`` of its document when ``a < e`` and
    ``b > s``. Evidence that lies wholly in whitespace a splitter dropped has no gold chunk.
    """
    hit = np.zeros(len(corpus), dtype=bool)
    for span in query.spans:
        first, last = corpus.rows_of_document.get(span.document_id, (0, 0))
        rows = slice(first, last)
        hit[rows] |= (corpus.starts[rows] < span.end) & (corpus.ends[rows] > span.start)
    return [corpus.chunks[row].chunk_id for row in np.flatnonzero(hit).tolist()]
