"""Chunk ids and previous/next links in LangChain ``Document`` metadata.

LangChain's splitters record neither a chunk's id nor its neighbours. :func:`link_chunks` gives
each chunk a stable id and the ids of the chunks before and after it, in metadata, so any store
that keeps metadata keeps the links too.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

from langchain_core.documents import Document

from scar_core.errors import DataFormatError, InvalidSettingsError
from scar_core.links import (
    MAX_GAP,
    ChunkLinks,
    Span,
    canonical,
    document_chunk_ids,
    link_sequence,
    overlap_fault,
)

__all__ = [
    "CHUNK_ID_KEY",
    "DOCUMENT_ID_KEY",
    "LINK_KEYS",
    "MAX_GAP",
    "NEXT_ID_KEY",
    "OFFSET_KEY",
    "PAGE_KEYS",
    "POSITION_KEY",
    "PREVIOUS_ID_KEY",
    "link_chunks",
    "linked_metadata",
    "links_of",
]

#: Metadata keys :func:`link_chunks` writes.
CHUNK_ID_KEY = "scar_chunk_id"
DOCUMENT_ID_KEY = "scar_document_id"
POSITION_KEY = "scar_position"
PREVIOUS_ID_KEY = "scar_prev_id"
NEXT_ID_KEY = "scar_next_id"


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def links_of(metadata: dict[str, Any] | None) -> tuple[str | None, str | None]:
    """Return the ``(previous id, next id)`` a chunk's metadata names; ``None`` where absent."""
    metadata = metadata or {}
    return _text(metadata.get(PREVIOUS_ID_KEY)), _text(metadata.get(NEXT_ID_KEY))


def chunk_id_of(document: Document) -> str | None:
    """Return a chunk's id: ``Document.id``, else a store's ``_id`` or SCAR's id in metadata.

    Qdrant's search returns hits without ``Document.id``, their store id in ``metadata["_id"]``.
    """
    metadata = document.metadata or {}
    store_id = None if metadata.get("_id") is None else str(metadata["_id"])
    return _text(document.id) or _text(store_id) or _text(metadata.get(CHUNK_ID_KEY))


def linked_metadata(metadata: dict[str, Any], links: ChunkLinks) -> dict[str, Any]:
    """Return a copy of ``metadata`` with a chunk's document id, position and links (if any)."""
    kept = {k: v for k, v in metadata.items() if k not in (PREVIOUS_ID_KEY, NEXT_ID_KEY)}
    added = {DOCUMENT_ID_KEY: links.document_id, POSITION_KEY: links.position}
    added |= {PREVIOUS_ID_KEY: links.previous_id, NEXT_ID_KEY: links.next_id}
    return kept | {key: value for key, value in added.items() if value is not None}


#: The keys :func:`link_chunks` writes; they take no part in a chunk's id.
LINK_KEYS = frozenset({CHUNK_ID_KEY, DOCUMENT_ID_KEY, POSITION_KEY, PREVIOUS_ID_KEY, NEXT_ID_KEY})
#: Metadata key of a chunk's character offset in its text (LangChain's splitters write it when
#: created with ``add_start_index=True``).
OFFSET_KEY = "start_index"
#: Metadata keys that split a document into pages or sections (PyPDFLoader writes ``"page"``,
#: Unstructured ``"page_number"``); a chunk's offset may restart where one of them changes.
PAGE_KEYS = ("page", "page_number", "section")


def key_names(document_key: str | Sequence[str]) -> tuple[str, ...]:
    """Return ``document_key`` as a tuple of metadata keys, refusing an empty or odd one."""
    names = (document_key,) if isinstance(document_key, str) else tuple(document_key)
    if not names or not all(isinstance(name, str) and name for name in names):
        raise InvalidSettingsError(
            f"document_key={document_key!r} must be a metadata key or a tuple of them, such as "
            "'source' or ('source', 'tenant')."
        )
    return names


def document_label(values: Sequence[Any]) -> str:
    """The ``scar_document_id`` of a document: its key's one string value, else its values' JSON."""
    if len(values) == 1 and isinstance(values[0], str):
        return values[0]
    return json.dumps(list(values), ensure_ascii=False, default=str)


def _missing(value: object) -> bool:
    return value is None or value == ""


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value


def _named(names: tuple[str, ...]) -> str:
    return f"metadata[{names[0]!r}]" if len(names) == 1 else f"metadata{list(names)}"


def page_key_of(document: str, chunks: Sequence[tuple[str, dict[str, Any]]]) -> str | None:
    """The page key (:data:`PAGE_KEYS`) a document's chunks carry; each must hold a number.

    Args:
        document: The document's label, for the message.
        chunks: ``(chunk name, metadata)`` of each of its chunks.

    Raises:
        DataFormatError: If one chunk carries the key and another lacks it, or holds no number.
    """
    key = next((k for k in PAGE_KEYS if any(not _missing(m.get(k)) for _, m in chunks)), None)
    if key is None:
        return None
    for name, metadata in chunks:
        if not _number(metadata.get(key)):
            raise DataFormatError(
                f"chunk {name} of document {document!r} has metadata[{key!r}]="
                f"{metadata.get(key)!r}, while other chunks of it carry page numbers there, so "
                f"its pages cannot be told apart; give every chunk of {document!r} a numeric "
                f"metadata[{key!r}] (or none), or pass document_key=... naming a finer document."
            )
    return key


def _tiling_error(document: str, what: str, fix: str) -> DataFormatError:
    return DataFormatError(
        f"the chunks of document {document!r} do not tile one text: {what}. {fix}"
    )


def link_chunks(
    documents: Iterable[Document],
    *,
    document_key: str | Sequence[str] = "source",
    max_gap: int = MAX_GAP,
    trust_order: bool = False,
    document_id_key: str | None = None,
) -> list[Document]:
    """Give split chunks ids that cannot collide and previous/next links, ready for a store.

    Chunks are grouped into documents by the values of ``document_key`` (with their types:
    ``1`` and ``"1"`` name two documents) and keep, inside a document, the order in which they
    arrive (the order a splitter emits them). Each chunk gets, in a copy of its metadata, its
    id, its document id, its position and the ids of its previous and next chunks;
    ``Document.id`` is set to the chunk id.

    A document's chunks must tile one text, which their ``start_index`` (split with
    ``add_start_index=True``) shows: the first starts at most ``max_gap`` characters in (the
    whitespace a splitter strips), and each next one starts after the one before starts, ends
    after it ends, holds the same characters where the two overlap, and starts at most
    ``max_gap`` characters after it ends. ``start_index`` may restart only where a page key
    (:data:`PAGE_KEYS`) changes, and the chain is cut there. Anything else (two files, or two
    tenants' files, sharing a ``source``; chunks of a document left out of the call) is
    refused, naming the document.

    A chunk's id is derived from its whole document (:func:`scar_core.links.document_chunk_ids`:
    the document key, and every chunk's text and metadata): re-ingesting the same chunks gives
    the same ids, so a re-run overwrites each chunk with itself, while two uploads that differ
    anywhere, or the same file under another tenant (another key or metadata), share no id.
    To replace an older version of a document, store the new chunks with
    :func:`scar_langchain.replace_documents`, which deletes the old version's chunks.

    Args:
        documents: Chunks in reading order, as a splitter returns them: every chunk of each
            document, in one call.
        document_key: Metadata key, or tuple of keys, naming each chunk's document (LangChain's
            loaders write ``"source"``; ``("source", "tenant")`` keeps tenants apart).
        max_gap: Characters a splitter may drop before a text's first chunk or between two
            chunks; raise it for texts with longer runs of whitespace.
        trust_order: Link documents of several chunks that carry no ``start_index``, in the
            order given. SCAR then cannot check that a group is one whole document: two files
            sharing a key would be chained as one.
        document_id_key: Deprecated name of ``document_key``.

    Returns:
        New documents in the input order; the input is not modified. Store them with
        ``vectorstore.add_documents(chunks, ids=[c.id for c in chunks])``.

    Raises:
        DataFormatError: If a chunk has no ``metadata[document_key]``, or a document's chunks
            do not tile one text, or carry no ``start_index`` without ``trust_order=True``
            (the message names the document and the fix).
        InvalidSettingsError: If ``document_key`` or ``max_gap`` is not valid.

    Example:
        >>> chunks = link_chunks([
        ...     Document("One.", metadata={"source": "a", "start_index": 0}),
        ...     Document("Two.", metadata={"source": "a", "start_index": 5}),
        ... ])
        >>> chunks[0].metadata["scar_next_id"] == chunks[1].id
        True
    """
    if document_id_key is not None:
        warnings.warn(
            "link_chunks(document_id_key=...) is deprecated; pass document_key=... instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        document_key = document_id_key
    names = key_names(document_key)
    if not isinstance(max_gap, int) or isinstance(max_gap, bool) or max_gap < 0:
        raise InvalidSettingsError(f"max_gap={max_gap!r} must be an integer >= 0, such as 64.")
    inputs = list(documents)
    groups: dict[str, tuple[tuple[Any, ...], list[int]]] = {}
    for index, document in enumerate(inputs):
        metadata = document.metadata or {}
        values = tuple(metadata.get(name) for name in names)
        if any(_missing(value) for value in values):
            raise DataFormatError(
                f"chunk {index} has no {_named(names)} (it holds {values!r}); set it to the "
                "chunk's document (loaders write 'source'), or pass document_key=... naming "
                "the key, or keys, that identify documents."
            )
        key = json.dumps(canonical(list(values)))
        groups.setdefault(key, (values, []))[1].append(index)
    linked: dict[int, Document] = {}
    for values, indices in groups.values():
        label = document_label(values)
        own = [{k: v for k, v in (inputs[i].metadata or {}).items() if k not in LINK_KEYS}
               for i in indices]  # fmt: skip
        texts = [inputs[i].page_content for i in indices]
        joins = _joins(label, texts, own, max_gap, trust_order)
        ids = document_chunk_ids(values, texts, own)
        for index, metadata, links in zip(
            indices, own, link_sequence(label, ids, joins), strict=True
        ):
            metadata = linked_metadata(metadata | {CHUNK_ID_KEY: links.chunk_id}, links)
            linked[index] = Document(
                inputs[index].page_content, id=links.chunk_id, metadata=metadata
            )
    return [linked[index] for index in range(len(inputs))]


def _offset(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return value if ok else None


def _joins(
    label: str, texts: list[str], metadatas: list[dict[str, Any]], max_gap: int, trust: bool
) -> list[bool]:
    """Whether each chunk after the first continues the one before; refuses what does not tile."""
    if len(texts) < 2:
        return []
    starts = [_offset(metadata.get(OFFSET_KEY)) for metadata in metadatas]
    offsets = [start for start in starts if start is not None]
    if len(offsets) < len(starts):
        if trust:
            return [True] * (len(texts) - 1)
        bad = metadatas[starts.index(None)].get(OFFSET_KEY)
        raise DataFormatError(
            f"document {label!r} has {len(texts)} chunks, and one holds {OFFSET_KEY}={bad!r}, "
            "so SCAR cannot check that they are one whole text in reading order (two files "
            "sharing a key would be chained as one). Split with add_start_index=True, or pass "
            "trust_order=True if each document's chunks are all here, in reading order."
        )
    key = page_key_of(label, [(f"{p}", m) for p, m in enumerate(metadatas)])
    pages: list[Any] = [m[key] if key else None for m in metadatas]
    spans = [Span(start, len(t), t, t) for start, t in zip(offsets, texts, strict=True)]
    fix = (
        f"Pass every chunk of {label!r} to one link_chunks call, in the order the splitter "
        "gave them; two files that share a key need document_key=('source', ...) naming a "
        "key that tells them apart."
    )
    joins = []
    for p, span in enumerate(spans):
        if p and key is not None and pages[p] < pages[p - 1]:
            what = f"chunk {p} is on {key} {pages[p]!r}, after {key} {pages[p - 1]!r}"
            raise _tiling_error(label, what, fix)
        first = p == 0 or (
            pages[p] != pages[p - 1] and (span.start <= max_gap or span.start <= spans[p - 1].start)
        )
        if first and span.start > max_gap:
            where = "" if p == 0 else f" {key} {pages[p]!r}"
            raise DataFormatError(
                f"document {label!r}{where} starts at {OFFSET_KEY}={span.start} in this call, "
                f"more than max_gap={max_gap} characters in: the text before it is missing "
                f"from this call. {fix} If the text starts with more whitespace, raise max_gap."
            )
        if not first:
            previous = spans[p - 1]
            fault = overlap_fault(previous, span)
            if fault is None and span.start - previous.end > max_gap:
                fault = (
                    f"starts at {span.start}, {span.start - previous.end} characters after the "
                    f"chunk before it ends ({previous.end}), more than max_gap={max_gap}: the "
                    "text between them is missing from this call"
                )
            if fault is not None:
                raise _tiling_error(label, f"chunk {p} {fault}", fix)
        if p:
            joins.append(not first)
    return joins
