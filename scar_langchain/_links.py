"""Chunk ids and previous/next links in LangChain ``Document`` metadata.

LangChain's splitters record neither a chunk's id nor its neighbours. :func:`link_chunks` gives
each chunk a stable id and the ids of the chunks before and after it, in metadata, so any store
that keeps metadata keeps the links too.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.documents import Document

from scar_core._chunks import Chunk
from scar_core._errors import DataFormatError
from scar_core._links import (
    MAX_GAP,
    ChunkLinks,
    chunk_joins,
    document_chunk_ids,
    document_label,
    document_of,
    key_names,
    link_sequence,
    metadata_named,
    typed_json,
)
from scar_core._passages import stitch
from scar_core._settings import check_int

#: Metadata keys :func:`link_chunks` writes.
CHUNK_ID_KEY = "scar_chunk_id"
DOCUMENT_ID_KEY = "scar_document_id"
POSITION_KEY = "scar_position"
PREVIOUS_ID_KEY = "scar_prev_id"
NEXT_ID_KEY = "scar_next_id"
#: The ids two steps before and after a chunk in its document: the query driver reads them with
#: the chunks one step away, so that a query costs one read beyond the search instead of two.
PREVIOUS2_ID_KEY = "scar_prev2_id"
NEXT2_ID_KEY = "scar_next2_id"
#: The link keys, in the order of a chunk's ``(document id, position, previous id, next id,
#: previous-but-one id, next-but-one id)``: what ``link_store`` writes.
LINK_KEYS = (DOCUMENT_ID_KEY, POSITION_KEY, PREVIOUS_ID_KEY, NEXT_ID_KEY, PREVIOUS2_ID_KEY,
             NEXT2_ID_KEY)  # fmt: skip
#: Every key :func:`link_chunks` writes; they take no part in a chunk's id.
WRITTEN_KEYS = frozenset({CHUNK_ID_KEY, *LINK_KEYS})
#: Per-chunk keys that do not describe a stitched passage (Qdrant adds "_id", "_collection_name").
_CHUNK_KEYS = {CHUNK_ID_KEY, POSITION_KEY, *LINK_KEYS[2:], "_id", "_collection_name"}


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def window_ids(links: Sequence[ChunkLinks]) -> list[tuple[str | None, str | None]]:
    """The ids two steps before and after each chunk, where both links between are there."""
    return [
        (
            links[p - 1].previous_id if link.previous_id is not None else None,
            links[p + 1].next_id if link.next_id is not None else None,
        )
        for p, link in enumerate(links)
    ]


def chunk_id_of(document: Document) -> str | None:
    """A chunk's id: ``Document.id``, else a store's ``_id`` (Qdrant's hits) or SCAR's id."""
    metadata = document.metadata or {}
    store_id = None if metadata.get("_id") is None else str(metadata["_id"])
    return _text(document.id) or _text(store_id) or _text(metadata.get(CHUNK_ID_KEY))


def document_names(document_key: str | Sequence[str]) -> tuple[str, ...]:
    """Return ``document_key`` as a tuple of metadata keys, refusing an empty or odd one."""
    return key_names(document_key, "document_key", "'source' or ('source', 'tenant')")


def _group_documents(
    metadatas: Sequence[Mapping[str, Any]], names: tuple[str, ...]
) -> list[tuple[tuple[Any, ...], list[int]]]:
    """Group chunks by the typed values of their document key: each key's values and indices."""
    groups: dict[str, tuple[tuple[Any, ...], list[int]]] = {}
    for index, metadata in enumerate(metadatas):
        values = document_of(metadata, names)
        if values is None:
            held = tuple(metadata.get(name) for name in names)
            raise DataFormatError(
                f"chunk {index} has no {metadata_named(names)} (it holds {held!r}); set it to the "
                "chunk's document (loaders write 'source'), or pass document_key=... naming "
                "the key, or keys, that identify documents."
            )
        groups.setdefault(typed_json(list(values)), (values, []))[1].append(index)
    return list(groups.values())


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
    id, its document id, its position, the ids of its previous and next chunks, and of the
    chunks two steps away (so that a query reads a passage's whole window at once);
    ``Document.id`` is set to the chunk id.

    A document's chunks must tile one text, which their ``start_index`` (split with
    ``add_start_index=True``) shows: the first starts at most ``max_gap`` characters in (the
    whitespace a splitter strips), and each next one starts after the one before starts, ends
    after it ends, holds the same characters where the two overlap, and starts at most
    ``max_gap`` characters after it ends. ``start_index`` may restart only where a page key
    (:data:`PAGE_KEYS`) changes, and the chain is cut there. Anything else (two files, or two
    tenants' files, sharing a ``source``; chunks of a document left out of the call) is
    refused, naming the document.

    A chunk's id is derived from its whole document (:func:`scar_core._links.document_chunk_ids`:
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
    names = document_names(document_key)
    check_int("max_gap", max_gap, 0)
    inputs = list(documents)
    linked: dict[int, Document] = {}
    for values, indices in _group_documents([d.metadata or {} for d in inputs], names):
        label = document_label(values)
        own = [{k: v for k, v in (inputs[i].metadata or {}).items() if k not in WRITTEN_KEYS}
               for i in indices]  # fmt: skip
        texts = [inputs[i].page_content for i in indices]
        joins = chunk_joins(label, texts, own, max_gap, trust_order)
        ids = document_chunk_ids(values, texts, own)
        sequence = link_sequence(label, ids, joins)
        for index, metadata, links, window in zip(
            indices, own, sequence, window_ids(sequence), strict=True
        ):
            metadata |= {CHUNK_ID_KEY: links.chunk_id, DOCUMENT_ID_KEY: links.document_id}
            added = (links.position, links.previous_id, links.next_id, *window)
            metadata |= {k: v for k, v in zip(LINK_KEYS[1:], added, strict=True) if v is not None}
            linked[index] = Document(
                inputs[index].page_content, id=links.chunk_id, metadata=metadata
            )
    return [linked[index] for index in range(len(inputs))]


def to_chunk(document: Document, vector: Any = None) -> Chunk:
    """The core's record of a Document: id, vector, links, text and metadata."""
    metadata = document.metadata or {}
    previous_id, next_id, *window = (_text(metadata.get(key)) for key in LINK_KEYS[2:])
    linked = bool(previous_id or next_id or metadata.get(DOCUMENT_ID_KEY))
    return Chunk(
        chunk_id_of(document) or "", vector, previous_id, next_id, linked,
        document.page_content, metadata, document, (window[0], window[1]),
    )  # fmt: skip


def render(
    returned: list[tuple[Chunk, dict[str, Any]]], hit_ids: Sequence[str], merge: bool
) -> list[Document]:
    """The Documents a query returns: one per chunk, or (``merge``) one stitched per passage."""
    if not merge:
        return [
            Document(c.text, id=chunk_id_of(c.item), metadata=dict(c.metadata) | trace)
            for c, trace in returned
        ]
    passages: dict[int, list[tuple[Chunk, dict[str, Any]]]] = {}
    for c, trace in returned:
        passages.setdefault(trace["scar_passage"], []).append((c, trace))
    rank = {h: r for r, h in enumerate(hit_ids)}
    out = []
    for number, members in passages.items():
        best = min(members, key=lambda m: rank.get(m[1]["scar_seed_id"], 0))[1]
        seed = next((t for c, t in members if c.id == best["scar_seed_id"]), best)
        starts = [c.metadata.get("start_index") for c, _ in members]
        usable = [s if isinstance(s, int) else None for s in starts]
        first, others = members[0][0].metadata, [c.metadata for c, _ in members[1:]]
        metadata = {  # the metadata on which every chunk agrees, less each chunk's own
            key: value
            for key, value in first.items()
            if key not in _CHUNK_KEYS and all(key in m and _same(m[key], value) for m in others)
        }
        metadata |= {"start_index": starts[0]} if usable[0] is not None else {}
        metadata |= {k: best[k] for k in ("scar_expanded", "scar_embedded")}
        metadata |= {"scar_passage": number, "scar_score": seed["scar_score"]}
        metadata |= {"scar_chunk_ids": [c.id for c, _ in members]}
        metadata |= {"scar_chunks": [dict(c.metadata) | t for c, t in members]}
        out.append(Document(stitch([c.text for c, _ in members], usable), metadata=metadata))
    return out


def _same(a: Any, b: Any) -> bool:
    """Whether two metadata values are equal (values whose ``==`` is not a bool: if identical)."""
    try:
        return a is b or (type(a) is type(b) and bool(a == b))
    except (TypeError, ValueError):  # an array's == is elementwise
        return False


def merged_links(metadata: dict[str, Any], links: tuple[Any, ...]) -> dict[str, Any]:
    """``metadata`` with ``links`` written: ``None`` removes a link, or leaves document/position."""
    gone = {key for key, value in zip(LINK_KEYS[2:], links[2:], strict=True) if value is None}
    kept = {key: value for key, value in metadata.items() if key not in gone}
    return kept | {k: v for k, v in zip(LINK_KEYS, links, strict=True) if v is not None}


def link_changes(old: tuple[Any, ...], new: tuple[Any, ...]) -> tuple[dict[str, Any], list[str]]:
    """The link keys to set, and the link keys to remove (links that went away)."""
    values = {key: value for key, value in zip(LINK_KEYS, new, strict=True) if value is not None}
    pairs = zip(LINK_KEYS[2:], old[2:], new[2:], strict=True)
    return values, [key for key, was, value in pairs if was is not None and value is None]
