"""Chunk ids that cannot collide, and previous/next links for chunks cut from one document.

Text splitters record neither a chunk's id nor its neighbours. :func:`chunk_id_for` gives each
chunk an id derived from its document, its text and its metadata (a UUID-5, valid as a primary
key in stores that demand UUIDs), and :func:`link_sequence` the ids of the chunks before and after
it; the framework adapters write them into metadata.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["CHUNK_ID_NAMESPACE", "ChunkLinks", "chunk_id_for", "link_sequence"]

#: Namespace of the UUID-5 chunk ids made by :func:`chunk_id_for`.
CHUNK_ID_NAMESPACE = uuid.UUID("2b0a4f6e-8c1d-5e3a-9f47-6d2c8b1e0a53")


def chunk_id_for(
    document_id: str, text: str, metadata: Mapping[str, Any] | None = None, occurrence: int = 0
) -> str:
    """Return the id of a chunk: the same for the same content, different for any other.

    The id is a UUID-5 of the document id, the chunk's text, its metadata (keys sorted) and
    ``occurrence``. So re-ingesting the same chunks gives the same ids (a re-run overwrites each
    chunk with itself), while two documents that share a name but differ in text or metadata
    (another upload, another tenant, another batch) never share an id.

    Args:
        document_id: The chunk's document (a path, URL or any string).
        text: The chunk's text.
        metadata: The chunk's metadata, without links; values that are not JSON are taken as
            their ``str``.
        occurrence: How many chunks with the same document id, text and metadata came before it
            (repeated boilerplate in a document without offsets).

    Raises:
        ValueError: If ``document_id`` is empty or ``occurrence`` is negative.
    """
    if not isinstance(document_id, str) or not document_id:
        raise ValueError(f"document_id={document_id!r} must be a non-empty string.")
    if not isinstance(occurrence, int) or isinstance(occurrence, bool) or occurrence < 0:
        raise ValueError(f"occurrence={occurrence!r} must be an integer >= 0.")
    content = [document_id, text, dict(metadata or {}), occurrence]
    name = json.dumps(content, sort_keys=True, ensure_ascii=False, default=str)
    return str(uuid.uuid5(CHUNK_ID_NAMESPACE, name))


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
