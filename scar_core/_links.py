"""Chunk ids that cannot collide, and previous/next links for chunks cut from one document.

Text splitters record neither a chunk's id nor its neighbours. :func:`document_chunk_ids` gives
each chunk of a document an id derived from the whole document (its key and every chunk's text,
offset and metadata; UUID-5s, valid as primary keys in stores that demand UUIDs), and
:func:`link_sequence` the ids of the chunks before and after it; the framework adapters write
them into metadata. :func:`overlap_fault` checks that two chunks can follow each other in one
text, from their offsets and the characters both of them hold.

The rest is what the LangChain adapter's ``link_chunks`` and ``link_store`` share, on plain
metadata dicts: grouping chunks by the typed values of a document key (:func:`document_of`,
:func:`typed_json`), page keys (:func:`page_key_of`), and the checks that a document's chunks tile
one text, in the order given (:func:`chunk_joins`) or by order keys (:func:`order_joins`).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, NamedTuple

from scar_core._errors import DataFormatError, InvalidSettingsError
from scar_core._settings import check_int

__all__ = [
    "CHUNK_ID_NAMESPACE",
    "MAX_GAP",
    "OFFSET_KEY",
    "PAGE_KEYS",
    "ChunkLinks",
    "ListedChunk",
    "Span",
    "canonical",
    "chunk_id_for",
    "chunk_joins",
    "document_chunk_ids",
    "document_label",
    "document_of",
    "is_number",
    "key_names",
    "link_sequence",
    "metadata_named",
    "missing",
    "order_joins",
    "overlap_fault",
    "page_key_of",
    "typed_json",
]

#: Namespace of the UUID-5 chunk ids made by :func:`chunk_id_for` and :func:`document_chunk_ids`.
CHUNK_ID_NAMESPACE = uuid.UUID("2b0a4f6e-8c1d-5e3a-9f47-6d2c8b1e0a53")
#: Characters a splitter may drop before a text's first chunk or between two chunks (the
#: whitespace and separators it strips); a longer gap means text is missing.
MAX_GAP = 64
#: Metadata key of a chunk's character offset in its text (LangChain's splitters write it when
#: created with ``add_start_index=True``).
OFFSET_KEY = "start_index"
#: Metadata keys that split a document into pages or sections (PyPDFLoader writes ``"page"``,
#: Unstructured ``"page_number"``); a chunk's offset may restart where one of them changes.
PAGE_KEYS = ("page", "page_number", "section")

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
    check_int("occurrence", occurrence, 0)
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


def typed_json(value: Any) -> str:
    """Return ``value`` as JSON that keeps its types (:func:`canonical`), to group or compare by."""
    return json.dumps(canonical(value))


def key_names(value: str | Sequence[str], argument: str, example: str) -> tuple[str, ...]:
    """Return a metadata key, or a sequence of them, as a tuple; refuse an empty or odd one.

    Raises:
        InvalidSettingsError: Naming ``argument``, the value and ``example`` (valid values).
    """
    names = (value,) if isinstance(value, str) else tuple(value)
    if not names or not all(isinstance(name, str) and name for name in names):
        raise InvalidSettingsError(
            f"{argument}={value!r} must be a metadata key or a tuple of them, such as {example}."
        )
    return names


def metadata_named(names: Sequence[str]) -> str:
    """``metadata['source']``, or ``metadata['source', 'tenant']`` for several keys."""
    return f"metadata[{names[0]!r}]" if len(names) == 1 else f"metadata{list(names)}"


def missing(value: object) -> bool:
    """Whether a metadata value is absent: ``None`` or ``""``."""
    return value is None or value == ""


def is_number(value: Any) -> bool:
    """Whether ``value`` is an int or float (not a bool, not NaN)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value


def _start(value: Any) -> int | None:
    """A chunk's offset in its text, ``None`` unless an integer >= 0."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return value if ok else None


def document_of(metadata: Mapping[str, Any], names: Sequence[str]) -> tuple[Any, ...] | None:
    """Return the values of the document key a chunk holds, ``None`` if one is absent or empty."""
    values = tuple(metadata.get(name) for name in names)
    return None if any(missing(value) for value in values) else values


def document_label(values: Sequence[Any]) -> str:
    """The ``scar_document_id`` of a document: its key's one string value, else its values' JSON."""
    if len(values) == 1 and isinstance(values[0], str):
        return values[0]
    return json.dumps(list(values), ensure_ascii=False, default=str)


def page_key_of(document: str, chunks: Sequence[tuple[str, Mapping[str, Any]]]) -> str | None:
    """Return the page key (:data:`PAGE_KEYS`) a document's chunks carry; each must hold a number.

    Args:
        document: The document's label, for the message.
        chunks: ``(chunk name, metadata)`` of each of its chunks.

    Raises:
        DataFormatError: If one chunk carries the key and another lacks it, or holds no number.
    """
    key = next((k for k in PAGE_KEYS if any(not missing(m.get(k)) for _, m in chunks)), None)
    if key is None:
        return None
    for name, metadata in chunks:
        if not is_number(metadata.get(key)):
            raise DataFormatError(
                f"chunk {name} of document {document!r} has metadata[{key!r}]="
                f"{metadata.get(key)!r}, while other chunks of it carry page numbers there, so "
                f"its pages cannot be told apart; give every chunk of {document!r} a numeric "
                f"metadata[{key!r}] (or none), or pass document_key=... naming a finer document."
            )
    return key


def chunk_joins(
    document: str,
    texts: Sequence[str],
    metadatas: Sequence[Mapping[str, Any]],
    max_gap: int,
    trust_order: bool,
) -> list[bool]:
    """Whether each chunk after the first continues the one before, in the order given.

    Refuses, naming ``document`` and the fix, chunks that do not tile one text: the first one,
    and the first of each page, starts at most ``max_gap`` characters in, and each next one
    passes :func:`overlap_fault` and starts at most ``max_gap`` characters after the one before
    ends. Chunks without offsets (:data:`OFFSET_KEY`) are joined only with ``trust_order``.
    """
    if len(texts) < 2:
        return []
    starts = [_start(metadata.get(OFFSET_KEY)) for metadata in metadatas]
    if None in starts:
        if trust_order:
            return [True] * (len(texts) - 1)
        bad = metadatas[starts.index(None)].get(OFFSET_KEY)
        raise DataFormatError(
            f"document {document!r} has {len(texts)} chunks, and one holds {OFFSET_KEY}={bad!r}, "
            "so SCAR cannot check that they are one whole text in reading order (two files "
            "sharing a key would be chained as one). Split with add_start_index=True, or pass "
            "trust_order=True if each document's chunks are all here, in reading order."
        )
    key = page_key_of(document, [(f"{p}", m) for p, m in enumerate(metadatas)])
    pages: list[Any] = [m[key] if key else None for m in metadatas]
    spans = [Span(start or 0, len(t), t, t) for start, t in zip(starts, texts, strict=True)]
    fault: str | None
    fix = (
        f"Pass every chunk of {document!r} to one link_chunks call, in the order the splitter "
        "gave them; two files that share a key need document_key=('source', ...) naming a "
        "key that tells them apart."
    )
    joins = []
    for p, span in enumerate(spans):
        before = spans[p - 1]
        if p and key is not None and pages[p] < pages[p - 1]:
            fault = f"is on {key} {pages[p]!r}, after {key} {pages[p - 1]!r}"
        elif p == 0 or (pages[p] != pages[p - 1] and span.start <= max(max_gap, before.start)):
            if span.start > max_gap:  # the first chunk of the text, or of a page
                where = "" if p == 0 else f" {key} {pages[p]!r}"
                raise DataFormatError(
                    f"document {document!r}{where} starts at {OFFSET_KEY}={span.start} in this "
                    f"call, more than max_gap={max_gap} characters in: the text before it is "
                    f"missing from this call. {fix} If the text starts with more whitespace, "
                    "raise max_gap."
                )
            joins += [False] if p else []
            continue
        elif (fault := overlap_fault(before, span)) is None and span.start - before.end > max_gap:
            fault = (
                f"starts at {span.start}, {span.start - before.end} characters after the chunk "
                f"before it ends ({before.end}), more than max_gap={max_gap}: the text between "
                "them is missing from this call"
            )
        if fault is not None:
            raise DataFormatError(
                f"the chunks of document {document!r} do not tile one text: chunk {p} {fault}. "
                f"{fix}"
            )
        joins.append(True)
    return joins


class ListedChunk(NamedTuple):
    """What ``link_store`` keeps about one chunk a store holds, to order and check it."""

    order: tuple[float, ...]
    chunk_id: str
    links: tuple[Any, ...]  # the links it holds now, to tell whether they change
    pages: dict[str, Any]  # the page keys that the order keys do not name, as it holds them
    span: Span | None  # where it lies in its text, when the last order key is OFFSET_KEY


def order_joins(
    document: str, chunks: Sequence[ListedChunk], keys: tuple[str, ...], max_gap: int
) -> tuple[list[bool], int]:
    """Whether each chunk after the first, sorted by order values, continues the one before.

    The chain is cut where the last order key does not increase (a new page), and where more
    than ``max_gap`` characters lie between two chunks (text is missing: counted, and returned).

    Raises:
        DataFormatError: If two chunks share an order value, ordering by ``keys`` would
            interleave pages, or the chunks do not tile one text.
    """
    named = metadata_named(keys)
    page = page_key_of(document, [(repr(c.chunk_id), c.pages) for c in chunks])
    if page is not None:  # page by page, is the order of keys kept?
        paged = sorted((c.pages[page], c.order) for c in chunks)
        for (_, before), (_, after) in pairwise(paged):
            if after < before:
                raise DataFormatError(
                    f"the chunks of document {document!r} carry metadata[{page!r}], and "
                    f"ordering them by {named} alone would interleave its pages ({named} "
                    f"restarts on each page); pass order_key=({page!r}, "
                    f"{', '.join(map(repr, keys))})."
                )
    joins, gaps = [], 0
    for first, second in pairwise(chunks):
        if first.order == second.order:
            value = first.order[0] if len(keys) == 1 else first.order
            raise DataFormatError(
                f"chunks {first.chunk_id!r} and {second.chunk_id!r} of document "
                f"{document!r} share {named}={value!r}, so their order is unknown; pass "
                "order_key=(...) with a key that tells them apart, such as ('page', "
                "'start_index'), or document_key=... naming a finer document."
            )
        joined = first.order[-1] < second.order[-1]
        a, b = first.span, second.span
        if joined and a is not None and b is not None:
            if first.order[:-1] != second.order[:-1] and b.start <= max_gap:
                joined = False  # a new page whose offsets start again
            elif (fault := overlap_fault(a, b)) is not None:
                raise DataFormatError(
                    f"the chunks of document {document!r} do not tile one text: chunk "
                    f"{second.chunk_id!r} {fault} ({first.chunk_id!r}), so they are not one "
                    "document's chunks (two files, or two tenants' files, sharing "
                    f"{document!r}?); pass document_key=(...) naming the keys that tell "
                    "documents apart, such as ('source', 'tenant')."
                )
            elif b.start - a.end > max_gap:
                joined, gaps = False, gaps + 1
        joins.append(joined)
    return joins, gaps
