"""Neighbour links between the chunks of a document.

A :class:`NeighborGraph` answers one question: which chunk comes before or after this one in the
same document? It is built from explicit links (``id -> (previous, next)``) or from ordered chunk
sequences, and it never loses a chunk over a bad link: a missing, self-referencing, cyclic or
cross-document link is simply not followed.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from scar_core.errors import LinkError
from scar_core.settings import Direction

__all__ = [
    "CHUNK_ID_NAMESPACE",
    "LinkLookup",
    "LinkedChunk",
    "NeighborGraph",
    "Step",
    "chunk_id_for",
    "link_sequence",
    "steps_for",
]

logger = logging.getLogger(__name__)

Step = Literal["previous", "next"]


def steps_for(direction: Direction) -> tuple[Step, ...]:
    """The walk directions a ``direction`` setting allows: ``"both"`` walks previous, then next."""
    if direction == "previous":
        return ("previous",)
    if direction == "next":
        return ("next",)
    return ("previous", "next")


#: Namespace of the UUID-5 chunk ids made by :func:`chunk_id_for`.
CHUNK_ID_NAMESPACE = uuid.UUID("6f1c4c1e-5d0a-4d8e-9a57-2f0b1c7e9a11")
_NAMESPACE_SHA1 = hashlib.sha1(CHUNK_ID_NAMESPACE.bytes)  # noqa: S324 - UUID-5 is SHA-1 naming
#: The first hex digit of a UUID's eighth byte with the RFC 4122 variant bits (10) set.
_RFC4122_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}


@runtime_checkable
class LinkLookup(Protocol):
    """Anything that answers "which chunk is one step from this one?".

    :class:`NeighborGraph` is the in-memory implementation. An adapter may implement it lazily,
    fetching links from a store on demand, for budgeted selection (:mod:`scar_core.budget`).
    """

    def step(self, chunk_id: str, direction: Step) -> str | None:
        """Return the chunk one step from ``chunk_id`` in ``direction``, or ``None``."""
        ...


def chunk_id_for(document_id: str, position: int) -> str:
    """Return the stable id of the chunk at ``position`` in ``document_id``.

    The id is a UUID-5 of the document id and the position, so re-ingesting the same document
    with the same chunking gives the same ids, and the ids are valid primary keys in stores that
    demand UUIDs (pgvector, Qdrant).

    Args:
        document_id: Identifier of the source document (a path, URL or any string).
        position: Zero-based index of the chunk within the document.

    Returns:
        The chunk id as a canonical UUID string.
    """
    if not isinstance(document_id, str) or not document_id:
        raise LinkError(f"document_id={document_id!r} is not valid; it must be a non-empty string.")
    if not isinstance(position, int) or isinstance(position, bool) or position < 0:
        raise LinkError(f"position={position!r} is not valid; it must be an integer >= 0.")
    # uuid.uuid5, spelled out: the same text, without building a UUID object (this runs for
    # every predicted neighbour of every query). SHA-1 of the namespace, then of the name; the
    # version nibble becomes 5 and the variant bits 10.
    digest = _NAMESPACE_SHA1.copy()
    digest.update(f"{document_id}\x1f{position}".encode())
    text = digest.hexdigest()
    return (
        f"{text[:8]}-{text[8:12]}-5{text[13:16]}-{_RFC4122_VARIANT[text[16]]}{text[17:20]}-"
        f"{text[20:32]}"
    )


@dataclass(frozen=True)
class LinkedChunk:
    """The identity and links of one chunk in an ordered document.

    Attributes:
        chunk_id: Stable id of the chunk.
        document_id: Id of the document the chunk belongs to.
        position: Zero-based index of the chunk in its document.
        previous_id: Id of the chunk before, or ``None`` at the start of the document.
        next_id: Id of the chunk after, or ``None`` at the end of the document.
    """

    chunk_id: str
    document_id: str
    position: int
    previous_id: str | None
    next_id: str | None


def link_sequence(document_id: str, count: int) -> list[LinkedChunk]:
    """Give the ``count`` chunks of one document, in order, stable ids and previous/next links.

    Args:
        document_id: Identifier of the document.
        count: Number of chunks in the document, in reading order.

    Returns:
        One :class:`LinkedChunk` per position, in order.
    """
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise LinkError(f"count={count!r} is not valid; it must be an integer >= 0.")
    ids = [chunk_id_for(document_id, position) for position in range(count)]
    return [
        LinkedChunk(
            chunk_id=chunk_id,
            document_id=document_id,
            position=position,
            previous_id=ids[position - 1] if position > 0 else None,
            next_id=ids[position + 1] if position + 1 < count else None,
        )
        for position, chunk_id in enumerate(ids)
    ]


class NeighborGraph:
    """Previous/next links between chunks, with bad links ignored rather than followed.

    Args:
        links: ``chunk id -> (previous id or None, next id or None)``. Chunks absent from the
            mapping simply have no neighbours.
        documents: Optional ``chunk id -> document id``. When both ends of a link have a known
            document and the documents differ, the link is refused.

    Example:
        >>> graph = NeighborGraph({"a": (None, "b"), "b": ("a", None)})
        >>> graph.step("a", "next")
        'b'
    """

    def __init__(
        self,
        links: Mapping[str, tuple[str | None, str | None]],
        documents: Mapping[str, str] | None = None,
    ) -> None:
        self._links: dict[str, tuple[str | None, str | None]] = {}
        for chunk_id, pair in links.items():
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise LinkError(
                    f"the links of chunk {chunk_id!r} are {pair!r}; expected a pair "
                    "(previous id or None, next id or None)."
                )
            self._links[chunk_id] = (_clean_link(chunk_id, pair[0]), _clean_link(chunk_id, pair[1]))
        self._documents: dict[str, str] = dict(documents or {})

    @classmethod
    def from_linked_chunks(cls, chunks: Iterable[LinkedChunk]) -> NeighborGraph:
        """Build a graph from :func:`link_sequence` output (of one or many documents)."""
        links: dict[str, tuple[str | None, str | None]] = {}
        documents: dict[str, str] = {}
        for chunk in chunks:
            links[chunk.chunk_id] = (chunk.previous_id, chunk.next_id)
            documents[chunk.chunk_id] = chunk.document_id
        return cls(links, documents)

    @classmethod
    def from_sequences(cls, sequences: Mapping[str, Sequence[str]]) -> NeighborGraph:
        """Build a graph from ``document id -> chunk ids in reading order``.

        Raises:
            LinkError: If a chunk id appears twice, which would make its neighbours ambiguous.
        """
        links: dict[str, tuple[str | None, str | None]] = {}
        documents: dict[str, str] = {}
        for document_id, ids in sequences.items():
            for position, chunk_id in enumerate(ids):
                if chunk_id in links:
                    raise LinkError(
                        f"chunk id {chunk_id!r} appears twice (again in document {document_id!r}); "
                        "chunk ids must be unique across the corpus."
                    )
                links[chunk_id] = (
                    ids[position - 1] if position > 0 else None,
                    ids[position + 1] if position + 1 < len(ids) else None,
                )
                documents[chunk_id] = document_id
        return cls(links, documents)

    def add(
        self,
        chunk_id: str,
        previous_id: str | None,
        next_id: str | None,
        document_id: str | None = None,
    ) -> None:
        """Add one chunk's links (replacing any it had), cleaned as the constructor cleans them.

        For a graph that grows as chunks arrive (an adapter's per-query pool), this costs one
        chunk rather than a rebuild of the whole graph.

        Args:
            chunk_id: The chunk.
            previous_id: The chunk before it, or ``None``.
            next_id: The chunk after it, or ``None``.
            document_id: Its document, when known (links across documents are refused).
        """
        self._links[chunk_id] = (
            _clean_link(chunk_id, previous_id),
            _clean_link(chunk_id, next_id),
        )
        if document_id is not None:
            self._documents[chunk_id] = document_id
        else:
            self._documents.pop(chunk_id, None)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self._links

    def __len__(self) -> int:
        return len(self._links)

    def document_of(self, chunk_id: str) -> str | None:
        """Return the document id of a chunk, or ``None`` when it is unknown."""
        return self._documents.get(chunk_id)

    def step(self, chunk_id: str, direction: Step) -> str | None:
        """Return the chunk one step from ``chunk_id`` in ``direction``, or ``None``.

        A link to a chunk of another known document is refused (logged, not followed).
        """
        pair = self._links.get(chunk_id)
        if pair is None:
            return None
        target = pair[0] if direction == "previous" else pair[1]
        if target is None:
            return None
        return self._followed(chunk_id, target, direction)

    def _followed(self, chunk_id: str, target: str, direction: Step) -> str | None:
        """``target``, the chunk ``chunk_id`` links to, unless the link crosses documents."""
        source_document = self._documents.get(chunk_id)
        target_document = self._documents.get(target)
        if (
            source_document is not None
            and target_document is not None
            and source_document != target_document
        ):
            logger.warning(
                "refused the %s link %r -> %r: it crosses from document %r to %r",
                direction,
                chunk_id,
                target,
                source_document,
                target_document,
            )
            return None
        return target

    def walk(self, chunk_id: str, direction: Step, steps: int) -> list[str]:
        """Return up to ``steps`` chunk ids walking from ``chunk_id`` in ``direction``.

        The walk stops at the document edge, at a refused link and before revisiting a chunk
        (so a cyclic chain of links never loops).
        """
        path: list[str] = []
        seen = {chunk_id}
        current = chunk_id
        for _ in range(steps):
            following = self.step(current, direction)
            if following is None or following in seen:
                if following is not None:
                    logger.warning(
                        "ignored a cyclic %s link from %r back to %r", direction, current, following
                    )
                break
            path.append(following)
            seen.add(following)
            current = following
        return path

    def __iter__(self) -> Iterator[str]:
        return iter(self._links)


def _clean_link(chunk_id: str, target: object) -> str | None:
    """Normalise one link target: ``None`` and empty strings mean no link; self-links are dropped."""
    if target is None or target == "":
        return None
    if not isinstance(target, str):
        logger.warning(
            "ignored the link from chunk %r to %r: link targets must be chunk id strings or None, "
            "not %s",
            chunk_id,
            target,
            type(target).__name__,
        )
        return None
    if target == chunk_id:
        logger.warning("ignored a self-link on chunk %r", chunk_id)
        return None
    return target
