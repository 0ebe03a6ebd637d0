"""Stable chunk ids and previous/next links for chunks cut from one document.

Text splitters record neither a chunk's id nor its neighbours. These helpers give each chunk a
deterministic id (a UUID-5, valid as a primary key in stores that demand UUIDs) and the ids of the
chunks before and after it; the framework adapters write them into metadata.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["CHUNK_ID_NAMESPACE", "ChunkLinks", "chunk_id_for", "link_sequence"]

#: Namespace of the UUID-5 chunk ids made by :func:`chunk_id_for`.
CHUNK_ID_NAMESPACE = uuid.UUID("6f1c4c1e-5d0a-4d8e-9a57-2f0b1c7e9a11")


def chunk_id_for(document_id: str, position: int) -> str:
    """Return the stable id of the chunk at ``position`` in ``document_id``.

    Re-ingesting the same document with the same chunking gives the same ids.

    Raises:
        ValueError: If ``document_id`` is empty or ``position`` is negative.
    """
    if not isinstance(document_id, str) or not document_id:
        raise ValueError(f"document_id={document_id!r} must be a non-empty string.")
    if not isinstance(position, int) or isinstance(position, bool) or position < 0:
        raise ValueError(f"position={position!r} must be an integer >= 0.")
    return str(uuid.uuid5(CHUNK_ID_NAMESPACE, f"{document_id}\x1f{position}"))


@dataclass(frozen=True)
class ChunkLinks:
    """A chunk's id and the ids of its neighbours in its document."""

    chunk_id: str
    document_id: str
    position: int
    previous_id: str | None
    next_id: str | None


def link_sequence(
    document_id: str, count: int, joins: Sequence[bool] | None = None
) -> list[ChunkLinks]:
    """Return the ids and links of ``count`` consecutive chunks of one document.

    Args:
        document_id: The document's id (a path, URL or any string).
        count: How many chunks it was cut into.
        joins: For each chunk after the first, whether it continues the one before (``False``
            where two texts that share a document id meet, say two pages). All ``True`` if omitted.
    """
    ids = [chunk_id_for(document_id, position) for position in range(count)]
    joined = [False, *(joins if joins is not None else [True] * max(count - 1, 0)), False]
    return [
        ChunkLinks(
            ids[p],
            document_id,
            p,
            ids[p - 1] if joined[p] else None,
            ids[p + 1] if joined[p + 1] else None,
        )
        for p in range(count)
    ]
