"""Chunk ids and previous/next links in LangChain ``Document`` metadata.

LangChain's splitters record neither a chunk's id nor its neighbours. :func:`link_chunks` gives
each chunk a stable id and the ids of the chunks before and after it, in metadata, so any store
that keeps metadata keeps the links too.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Iterable
from typing import Any

from langchain_core.documents import Document

from scar_core.errors import DataFormatError
from scar_core.links import ChunkLinks, chunk_id_for, link_sequence

__all__ = [
    "CHUNK_ID_KEY",
    "DOCUMENT_ID_KEY",
    "LINK_KEYS",
    "MAX_LEADING_OFFSET",
    "NEXT_ID_KEY",
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
#: A document's first chunk in a call may start this far in (leading whitespace the splitter
#: stripped); further in, the chunks before it were left out of the call.
MAX_LEADING_OFFSET = 16


def link_chunks(
    documents: Iterable[Document], *, document_id_key: str = "source"
) -> list[Document]:
    """Give split chunks ids that cannot collide and previous/next links, ready for a store.

    Chunks are grouped by ``metadata[document_id_key]`` and keep, inside a document, the order in
    which they arrive (the order a splitter emits them). Each chunk gets, in a copy of its
    metadata, its id, its document id, its position and the ids of its previous and next chunks;
    ``Document.id`` is set to the chunk id. Where the splitter recorded ``start_index`` and it
    goes backwards inside one document id (the next page of a PDF, say), the chain is cut there.

    The id is a UUID-5 of the document id, the chunk's text and its metadata
    (:func:`scar_core.links.chunk_id_for`): re-ingesting the same chunks gives the same ids, so a
    re-run overwrites each chunk with itself, while another file with the same name, the same
    file uploaded by another tenant (other metadata) or another batch never overwrites a chunk.

    Args:
        documents: Chunks in reading order, as a splitter returns them. Pass all the chunks of a
            document in one call: a document whose first chunk here starts further in than
            :data:`MAX_LEADING_OFFSET` characters (``start_index``) is refused, as the chunks
            before it, in another call, could not be linked to it.
        document_id_key: Metadata key naming each chunk's document (LangChain's loaders write
            ``"source"``).

    Returns:
        New documents in the input order; the input is not modified. Store them with
        ``vectorstore.add_documents(chunks, ids=[c.id for c in chunks])``.

    Raises:
        DataFormatError: If a chunk has no usable ``metadata[document_id_key]``, or a document's
            chunks do not start at its beginning.

    Example:
        >>> chunks = link_chunks([Document("One.", metadata={"source": "a"}),
        ...                       Document("Two.", metadata={"source": "a"})])
        >>> chunks[0].metadata["scar_next_id"] == chunks[1].id
        True
    """
    inputs = list(documents)
    members: dict[str, list[int]] = {}
    for index, document in enumerate(inputs):
        value = (document.metadata or {}).get(document_id_key)
        if value is None or (isinstance(value, str) and not value):
            raise DataFormatError(
                f"chunk {index} has no metadata[{document_id_key!r}]; set it to the chunk's "
                "document (loaders write 'source'), or pass document_id_key=... naming the key "
                "that identifies documents."
            )
        members.setdefault(str(value), []).append(index)
    linked: dict[int, Document] = {}
    for document_id, indices in members.items():
        own = [{k: v for k, v in (inputs[i].metadata or {}).items() if k not in LINK_KEYS}
               for i in indices]  # fmt: skip
        starts = [metadata.get("start_index") for metadata in own]
        if isinstance(starts[0], int) and starts[0] > MAX_LEADING_OFFSET:
            raise DataFormatError(
                f"document {document_id!r} starts at start_index={starts[0]} in this call: its "
                "earlier chunks were not passed, so they cannot be linked to these. Pass all "
                f"the chunks of {document_id!r} to one link_chunks call (link_store links a "
                "store's chunks in place), or give each batch its own document id."
            )
        joins = [
            not (isinstance(a, int) and isinstance(b, int) and b <= a)
            for a, b in itertools.pairwise(starts)
        ]
        seen: Counter[str] = Counter()
        ids = []
        for index, metadata in zip(indices, own, strict=True):
            content = json.dumps(
                [inputs[index].page_content, metadata], sort_keys=True, default=str
            )
            ids.append(
                chunk_id_for(document_id, inputs[index].page_content, metadata, seen[content])
            )
            seen[content] += 1
        for index, metadata, links in zip(
            indices, own, link_sequence(document_id, ids, joins), strict=True
        ):
            metadata = linked_metadata(metadata | {CHUNK_ID_KEY: links.chunk_id}, links)
            linked[index] = Document(
                inputs[index].page_content, id=links.chunk_id, metadata=metadata
            )
    return [linked[index] for index in range(len(inputs))]
