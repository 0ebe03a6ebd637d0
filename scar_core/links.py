"""Chunk ids that cannot collide, and previous/next links for chunks cut from one document.

Text splitters record neither a chunk's id nor its neighbours. :func:`document_chunk_ids` gives
each chunk of a document an id derived from the whole document (its key and every chunk's text,
offset and metadata; UUID-5s, valid as primary keys in stores that demand UUIDs), and
:func:`link_sequence` the ids of the chunks before and after it; the framework adapters write
them into metadata. :func:`overlap_fault` checks that two chunks can follow each other in one
text, from their offsets and the characters both of them hold.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CHUNK_ID_NAMESPACE",
    "MAX_GAP",
    "ChunkLinks",
    "Span",
    "canonical",
    "chunk_id_for",
    "document_chunk_ids",
    "link_sequence",
    "overlap_fault",
]

#: Namespace of the UUID-5 chunk ids made by :func:`chunk_id_for` and :func:`document_chunk_ids`.
CHUNK_ID_NAMESPACE = uuid.UUID("2b0a4f6e-8c1d-5e3a-9f47-6d2c8b1e0a53")
#: Characters a splitter may drop before a text's first chunk or between two chunks (the
#: whitespace and separators it strips); a longer gap means text is missing.
MAX_GAP = 64

_PLAIN = (str, int, float, bool, type(None))


def canonical(value: Any) -> Any:
    """Return ``value`` as JSON that keeps its type: ``1``, ``"1"`` and ``1.0`` stay apart.

    Each value becomes ``[type name, payload]``: JSON scalars carry themselves, lists, tuples
    and dicts their members (a dict's items sorted), and any other value, such as a ``date``,
    its ``str`` under its qualified type name, so ``date(2024, 1, 1)`` and ``"2024-01-01"``
    differ.
    """
    kind = type(value)
    if kind in _PLAIN:
        return [kind.__name__, value]
    if kind in (list, tuple):
        return [kind.__name__, [canonical(item) for item in value]]
    if kind is dict:
        items = [[canonical(k), canonical(v)] for k, v in value.items()]
        return ["dict", sorted(items, key=_dumps)]
    return [f"{kind.__module__}.{kind.__qualname__}", str(value)]


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def chunk_id_for(
    document_id: str, text: str, metadata: Mapping[str, Any] | None = None, occurrence: int = 0
) -> str:
    """Return the id of one chunk from its own content (:func:`document_chunk_ids` is stronger).

    The id is a UUID-5 of the document id, the chunk's text, its metadata (with the values'
    types, see :func:`canonical`) and ``occurrence``. Two documents that share a name share
    the id of a chunk they hold alike; :func:`document_chunk_ids` derives ids from the whole
    document instead, so they cannot.

    Args:
        document_id: The chunk's document (a path, URL or any string).
        text: The chunk's text.
        metadata: The chunk's metadata, without links.
        occurrence: How many chunks with the same document id, text and metadata came before it.

    Raises:
        ValueError: If ``document_id`` is empty or ``occurrence`` is negative.
    """
    if not isinstance(document_id, str) or not document_id:
        raise ValueError(f"document_id={document_id!r} must be a non-empty string.")
    if not isinstance(occurrence, int) or isinstance(occurrence, bool) or occurrence < 0:
        raise ValueError(f"occurrence={occurrence!r} must be an integer >= 0.")
    name = _dumps([document_id, text, canonical(dict(metadata or {})), occurrence])
    return str(uuid.uuid5(CHUNK_ID_NAMESPACE, name))


def document_chunk_ids(
    key: Sequence[Any], texts: Sequence[str], metadatas: Sequence[Mapping[str, Any]]
) -> list[str]:
    """Return the ids of a document's chunks: each depends on the whole document.

    A SHA-256 digest of the document's key and of every chunk's text and metadata (offsets
    included), in reading order, names the document; chunk ``p``'s id is the UUID-5 of that
    digest and ``p``. So the same chunks give the same ids (re-ingesting is idempotent), while
    two documents that differ anywhere, or share their text but not their key, share no id,
    even for a header they hold alike.

    Args:
        key: The values of the metadata keys naming the document (its ``source``, tenant, ...).
        texts: The chunks' texts, in reading order.
        metadatas: The chunks' metadata, without links.

    Raises:
        ValueError: If ``texts`` and ``metadatas`` differ in length.
    """
    if len(texts) != len(metadatas):
        raise ValueError(f"{len(texts)} texts but {len(metadatas)} metadatas; give one each.")
    chunks = [[t, canonical(dict(m))] for t, m in zip(texts, metadatas, strict=True)]
    content = [canonical(list(key)), chunks]
    digest = hashlib.sha256(_dumps(content).encode()).hexdigest()
    return [str(uuid.uuid5(CHUNK_ID_NAMESPACE, f"{digest}:{p}")) for p in range(len(texts))]


@dataclass(frozen=True)
class Span:
    """Where a chunk lies in its text, and the characters of it that are known.

    Attributes:
        start: Its offset in the text (a splitter's ``start_index``).
        length: Its length in characters.
        head: Its first characters (its whole text, where it is at hand).
        tail: Its last characters (its whole text, where it is at hand).
    """

    start: int
    length: int
    head: str
    tail: str

    @property
    def end(self) -> int:
        """The offset just past its last character."""
        return self.start + self.length

    def known(self) -> list[tuple[int, str]]:
        """``(offset, characters)`` of each stretch of its text that it holds."""
        return [(self.start, self.head), (self.end - len(self.tail), self.tail)]


def overlap_fault(first: Span, second: Span) -> str | None:
    """Say why ``second`` cannot be the chunk after ``first`` in one text; ``None`` if it can.

    The next chunk of a text starts after the previous one starts and ends after it ends, and
    where the two overlap (a splitter's ``chunk_overlap``) they hold the same characters. The
    gap between them is not judged here (compare ``second.start - first.end`` with
    :data:`MAX_GAP`).
    """
    if second.start <= first.start:
        return f"starts at {second.start}, not after the chunk before it ({first.start})"
    if second.end <= first.end:
        return (
            f"lies inside the chunk before it ({second.start}-{second.end} in "
            f"{first.start}-{first.end})"
        )
    low, high = second.start, first.end  # the stretch both chunks cover
    for a_start, a_text in first.known():
        for b_start, b_text in second.known():
            lo = max(low, a_start, b_start)
            hi = min(high, a_start + len(a_text), b_start + len(b_text))
            if (
                lo < hi
                and a_text[lo - a_start : hi - a_start] != b_text[lo - b_start : hi - b_start]
            ):
                return (
                    f"overlaps the chunk before it at {lo}-{hi} with other characters "
                    f"({b_text[lo - b_start : hi - b_start][:30]!r} where it holds "
                    f"{a_text[lo - a_start : hi - a_start][:30]!r})"
                )
    return None


@dataclass(frozen=True)
class ChunkLinks:
    """A chunk's id and the ids of its neighbours in its document."""

    chunk_id: str
    document_id: str
    position: int
    previous_id: str | None
    next_id: str | None


def link_sequence(
    document_id: str, chunk_ids: Sequence[str], joins: Sequence[bool] | None = None
) -> list[ChunkLinks]:
    """Return the links of consecutive chunks of one document.

    Args:
        document_id: The document's id.
        chunk_ids: The ids of its chunks, in reading order.
        joins: For each chunk after the first, whether it continues the one before (``False``
            where two texts that share a document id meet, say two pages). All ``True`` if omitted.
    """
    count = len(chunk_ids)
    joined = [False, *(joins if joins is not None else [True] * max(count - 1, 0)), False]
    return [
        ChunkLinks(
            chunk_ids[p],
            document_id,
            p,
            chunk_ids[p - 1] if joined[p] else None,
            chunk_ids[p + 1] if joined[p + 1] else None,
        )
        for p in range(count)
    ]
