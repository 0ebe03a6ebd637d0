"""Chunk identity and previous/next links, stored in LangChain ``Document`` metadata.

LangChain's text splitters record neither a chunk id nor its neighbours (``split_documents`` even
drops ``Document.id``). :func:`link_chunks` is the bridge: it gives every chunk a stable id and
the ids of the chunks before and after it, under metadata keys named by
:class:`ChunkMetadataKeys`, so any store that keeps metadata keeps the links too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from langchain_core.documents import Document

from scar_core.errors import DataFormatError
from scar_core.graph import chunk_id_for

__all__ = [
    "DEFAULT_KEYS",
    "ChunkLinks",
    "ChunkMetadataKeys",
    "link_chunks",
    "links_in_metadata",
    "read_links",
]


@dataclass(frozen=True)
class ChunkMetadataKeys:
    """The metadata keys under which a chunk's identity and links are stored.

    Change them to read an existing layout, for example
    ``ChunkMetadataKeys(previous_id="prev_id", next_id="next_id")``.

    Attributes:
        chunk_id: The chunk's own id (also set as ``Document.id``).
        document_id: The id of the document the chunk was cut from.
        position: The chunk's zero-based index in its document.
        previous_id: The id of the chunk before it, absent at the start of a document.
        next_id: The id of the chunk after it, absent at the end of a document.
        start_index: The chunk's character offset in its document; LangChain splitters write it
            under ``"start_index"`` when created with ``add_start_index=True``.
    """

    chunk_id: str = "scar_chunk_id"
    document_id: str = "scar_document_id"
    position: str = "scar_position"
    previous_id: str = "scar_prev_id"
    next_id: str = "scar_next_id"
    start_index: str = "start_index"


#: The keys :func:`link_chunks` writes by default.
DEFAULT_KEYS = ChunkMetadataKeys()


@dataclass(frozen=True)
class ChunkLinks:
    """What a chunk's metadata says about its identity and neighbours.

    Every field is ``None`` when the metadata lacks it or holds a value of the wrong type, so a
    chunk without link metadata simply has no neighbours.

    Attributes:
        chunk_id: ``Document.id``, or else the metadata chunk id.
        document_id: The document id from metadata.
        position: The position from metadata.
        previous_id: The previous chunk's id from metadata.
        next_id: The next chunk's id from metadata.
        start_index: The character offset from metadata.
    """

    chunk_id: str | None
    document_id: str | None
    position: int | None
    previous_id: str | None
    next_id: str | None
    start_index: int | None


def _text_or_none(value: object) -> str | None:
    return value if value and isinstance(value, str) else None


def _int_or_none(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def read_links(document: Document, keys: ChunkMetadataKeys = DEFAULT_KEYS) -> ChunkLinks:
    """Read a chunk's id, document, position, offset and links from ``document``.

    Values of the wrong type (an int where an id string belongs, a negative position) are read as
    absent rather than trusted.

    Args:
        document: A chunk, as returned by a store or retriever.
        keys: Where the values live in ``document.metadata``.

    Returns:
        The chunk's links; fields the metadata does not supply are ``None``.
    """
    return links_in_metadata(document.id, document.metadata or {}, keys)


def links_in_metadata(
    document_id: object, metadata: Mapping[str, Any], keys: ChunkMetadataKeys = DEFAULT_KEYS
) -> ChunkLinks:
    """:func:`read_links` for a chunk not made into a ``Document``: its id and metadata.

    Args:
        document_id: What would be ``Document.id`` (read first for the chunk id).
        metadata: What would be ``Document.metadata``.
        keys: Where the values live in ``metadata``.

    Returns:
        The chunk's links; fields the metadata does not supply are ``None``.
    """
    return ChunkLinks(
        _text_or_none(document_id) or _text_or_none(metadata.get(keys.chunk_id)),
        _text_or_none(metadata.get(keys.document_id)),
        _int_or_none(metadata.get(keys.position)),
        _text_or_none(metadata.get(keys.previous_id)),
        _text_or_none(metadata.get(keys.next_id)),
        _int_or_none(metadata.get(keys.start_index)),
    )


def _document_id_of(document: Document, index: int, document_id_key: str) -> str:
    value = (document.metadata or {}).get(document_id_key)
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        raise DataFormatError(
            f"chunk {index} has metadata[{document_id_key!r}] = {value!r}; link_chunks needs a "
            f"non-empty string (or int) identifying each chunk's document. Pass "
            f"document_id_key='<key>' naming the metadata entry that identifies the document."
        )
    return str(value)


def link_chunks(
    documents: Iterable[Document],
    *,
    document_id_key: str = "source",
    keys: ChunkMetadataKeys = DEFAULT_KEYS,
) -> list[Document]:
    """Give split chunks stable ids and previous/next links, ready for a vector store.

    Chunks are grouped by ``metadata[document_id_key]``; within a document they keep the order
    in which they arrive (the order ``split_documents`` emits them). Each chunk gets, in a copy of
    its metadata: its id (a UUID-5 of the document id and position, so re-ingesting gives the
    same ids), its document id, its position, and the ids of its previous and next chunks.
    ``Document.id`` is set to the chunk id, so
    ``store.add_documents(chunks, ids=[c.id for c in chunks])`` stores each chunk under its id.

    When the splitter recorded start offsets (``add_start_index=True``) and an offset goes
    backwards inside one document id, the chunks after it come from another text that shares the
    id (the next page of a PDF, say). The chain is not linked across that point, because the
    offsets no longer tell how the two texts join.

    Call it once on all the chunks of a document: positions restart at zero on every call.

    Args:
        documents: Chunks in reading order, as returned by a splitter.
        document_id_key: Metadata key identifying each chunk's document (``"source"`` is what
            LangChain's loaders write).
        keys: Metadata keys to write the identity and links under.

    Returns:
        New ``Document`` objects (the input is not modified), in the input order.

    Raises:
        DataFormatError: If a chunk lacks a usable ``metadata[document_id_key]``.

    Example:
        >>> from langchain_core.documents import Document
        >>> chunks = link_chunks([
        ...     Document("Part one.", metadata={"source": "a.txt"}),
        ...     Document("Part two.", metadata={"source": "a.txt"}),
        ... ])
        >>> chunks[0].metadata["scar_next_id"] == chunks[1].id
        True
    """
    inputs = list(documents)
    document_ids = [
        _document_id_of(document, index, document_id_key) for index, document in enumerate(inputs)
    ]
    members: dict[str, list[int]] = {}
    for index, document_id in enumerate(document_ids):
        members.setdefault(document_id, []).append(index)

    linked: list[Document | None] = [None] * len(inputs)
    for document_id, indices in members.items():
        ids = [chunk_id_for(document_id, position) for position in range(len(indices))]
        offsets = [_int_or_none((inputs[i].metadata or {}).get(keys.start_index)) for i in indices]
        for position, index in enumerate(indices):
            joins_previous = position > 0 and _continues(offsets[position - 1], offsets[position])
            joins_next = position + 1 < len(indices) and _continues(
                offsets[position], offsets[position + 1]
            )
            metadata = dict(inputs[index].metadata or {})
            metadata[keys.chunk_id] = ids[position]
            metadata[keys.document_id] = document_id
            metadata[keys.position] = position
            metadata.pop(keys.previous_id, None)
            metadata.pop(keys.next_id, None)
            if joins_previous:
                metadata[keys.previous_id] = ids[position - 1]
            if joins_next:
                metadata[keys.next_id] = ids[position + 1]
            linked[index] = Document(
                id=ids[position], page_content=inputs[index].page_content, metadata=metadata
            )
    return [document for document in linked if document is not None]


def _continues(previous_offset: int | None, offset: int | None) -> bool:
    """Whether a chunk at ``offset`` can follow one at ``previous_offset`` in the same text."""
    if previous_offset is None or offset is None:
        return True
    return offset > previous_offset
