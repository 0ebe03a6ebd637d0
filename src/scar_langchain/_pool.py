"""What one query has learnt so far: retrieved chunks, fetched neighbours and their vectors.

A :class:`QueryPool` lives for one ``invoke`` call only, so concurrent queries never share state.
Both the plain and the budgeted path of :class:`~scar_langchain.SCARRetriever` fill it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import numpy.typing as npt
from langchain_core.documents import Document

from scar_core._lazy import LazyValues
from scar_core.assembly import ChunkRecord
from scar_core.graph import NeighborGraph, Step, chunk_id_for, steps_for
from scar_core.settings import Direction
from scar_langchain._links import DEFAULT_KEYS, ChunkLinks, ChunkMetadataKeys, read_links
from scar_langchain._neighbors import FetchedChunks, SearchHits

__all__ = ["KnownChunks", "QueryPool", "seeds_for_passages", "unidentified_id"]

FloatVector = npt.NDArray[np.float64]

#: Prefix of the stand-in id given to a retrieved chunk that carries no id.
UNIDENTIFIED_PREFIX = "scar-unidentified:"


def unidentified_id(document: Document) -> str:
    """A stable stand-in id for a retrieved chunk that carries none (it gets no neighbours)."""
    digest = hashlib.sha256(document.page_content.encode("utf-8")).hexdigest()[:32]
    return f"{UNIDENTIFIED_PREFIX}{digest}"


class _Unmade:
    """A known chunk whose ``Document`` its neighbour source has not made yet."""

    __slots__ = ("source",)

    def __init__(self, source: Mapping[str, Document]) -> None:
        self.source = source


class KnownChunks(Mapping[str, Document]):
    """Every chunk a query knows, by id, in the order they became known.

    A fetched chunk is kept as a reference to the mapping its neighbour source returned, and its
    ``Document`` is looked up there the first time someone asks for it. A source whose mapping
    makes each ``Document`` on lookup (the pgvector source makes it from the row) so makes only
    the chunks a query uses: budgeted selection looks at about a third of the neighbours it
    prefetches, since the deeper rings around the best chunks are fetched in case a passage
    grows that far.
    """

    def __init__(self) -> None:
        self._entries: dict[str, Document | _Unmade] = {}

    def add(self, chunk_id: str, document: Document) -> None:
        """Keep ``document`` as the chunk ``chunk_id`` (unless that chunk is known already)."""
        self._entries.setdefault(chunk_id, document)

    def add_from(self, chunk_id: str, source: Mapping[str, Document]) -> None:
        """Know ``chunk_id``, whose ``Document`` is ``source[chunk_id]``, made when first asked."""
        self._entries.setdefault(chunk_id, _Unmade(source))

    def __getitem__(self, chunk_id: str) -> Document:
        entry = self._entries[chunk_id]
        if isinstance(entry, _Unmade):
            entry = self._entries[chunk_id] = entry.source[chunk_id]
        return entry

    def links_of(self, chunk_id: str, keys: ChunkMetadataKeys) -> ChunkLinks:
        """The links of a known chunk, read without making its ``Document`` where the source can.

        A source mapping with a ``chunk_links(chunk_id, keys)`` method (the pgvector source's
        rows) answers from the chunk's metadata alone: budgeted selection reads the links of
        about twice as many fetched chunks as it selects.
        """
        entry = self._entries[chunk_id]
        if isinstance(entry, _Unmade):
            chunk_links = getattr(entry.source, "chunk_links", None)
            if chunk_links is not None:
                return cast(ChunkLinks, chunk_links(chunk_id, keys))
            entry = self[chunk_id]
        return read_links(entry, keys)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


class _LinksOnDemand(NeighborGraph):
    """A query pool's neighbour graph: a known chunk's links are read when first needed.

    Before a step the chunk stepped from is read, and so is the chunk the step lands on, whose
    document the step compares (a link across documents is refused): the answers are those of a
    graph that read every known chunk up front.

    Args:
        documents: The pool's known chunks.
        keys: Where chunk links live in metadata.
    """

    def __init__(self, documents: KnownChunks, keys: ChunkMetadataKeys) -> None:
        super().__init__({})
        self._known = documents
        self._keys = keys
        self._read: dict[str, ChunkLinks] = {}

    def keep(self, chunk_id: str, links: ChunkLinks) -> None:
        """Record the links of a chunk, read already."""
        self._read[chunk_id] = links
        self.add(chunk_id, links.previous_id, links.next_id, links.document_id)

    def links_of(self, chunk_id: str) -> ChunkLinks | None:
        """The links of a known chunk, read from its metadata on first use; ``None`` if unknown."""
        links = self._read.get(chunk_id)
        if links is None and chunk_id in self._known:
            links = self._known.links_of(chunk_id, self._keys)
            self.keep(chunk_id, links)
        return links

    def step(self, chunk_id: str, direction: Step) -> str | None:
        """Return the chunk one step from ``chunk_id``, reading the links this needs first."""
        pair = self._links.get(chunk_id)
        if pair is None:
            if self.links_of(chunk_id) is None:
                return None  # not a known chunk
            pair = self._links[chunk_id]
        target = pair[0] if direction == "previous" else pair[1]
        if target is None:
            return None
        if target not in self._read:
            self.links_of(target)
        return self._followed(chunk_id, target, direction)

    def document_of(self, chunk_id: str) -> str | None:
        """Return the document id of a chunk, or ``None`` when it is unknown."""
        self.links_of(chunk_id)
        return super().document_of(chunk_id)

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self._known

    def __len__(self) -> int:
        return len(self._known)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._known))


@dataclass
class QueryPool:
    """Everything one query has learnt so far: seeds, fetched chunks and their vectors.

    Attributes:
        query_vector: The query's embedding.
        seeds: Retrieved chunk ids, best first.
        documents: Every chunk known so far (retrieved or fetched), by id; a fetched chunk's
            ``Document`` is made when first looked up.
        vectors: The vectors found for known chunks.
        requested: Ids asked of the neighbour source (found or not).
        vectors_asked: Ids whose vectors were asked of the vector source (found or not).
        exhausted: Whether the last search returned fewer chunks than asked, or nothing new.
        keys: Where chunk links live in metadata.
    """

    query_vector: FloatVector
    seeds: list[str] = field(default_factory=list)
    documents: KnownChunks = field(default_factory=KnownChunks)
    vectors: dict[str, FloatVector] = field(default_factory=dict)
    requested: set[str] = field(default_factory=set)
    vectors_asked: set[str] = field(default_factory=set)
    exhausted: bool = False
    keys: ChunkMetadataKeys = DEFAULT_KEYS
    _graph: _LinksOnDemand = field(init=False, repr=False)
    _named_by_position: dict[str, bool] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self._graph = _LinksOnDemand(self.documents, self.keys)

    def _remember(self, chunk_id: str, document: Document, links: ChunkLinks) -> None:
        """Keep a chunk whose links are read already."""
        if chunk_id in self.documents:
            return
        self.documents.add(chunk_id, document)
        self._graph.keep(chunk_id, links)

    def links_of(self, chunk_id: str) -> ChunkLinks | None:
        """The links of a known chunk, read from its metadata on first use; ``None`` if unknown."""
        return self._graph.links_of(chunk_id)

    def add_seeds(self, found: Sequence[Document], size: int) -> None:
        """Record a search's results, best first; the pool is exhausted when it ran short."""
        previous = set(self.seeds)
        seeds: dict[str, None] = {}
        for document in found:
            links = read_links(document, self.keys)
            chunk_id = links.chunk_id or unidentified_id(document)
            if chunk_id in seeds:
                continue
            seeds[chunk_id] = None
            self._remember(chunk_id, document, links)
        self.seeds = list(seeds)
        self.exhausted = len(found) < size or not (set(self.seeds) - previous)

    def add_hits(self, hits: SearchHits, size: int) -> None:
        """Record a search that came with its hits' vectors."""
        self.add_seeds(hits.documents, size)
        for chunk_id in self.seeds:
            vector = hits.vectors.get(chunk_id)
            if vector is not None:
                self.vectors.setdefault(chunk_id, np.asarray(vector, dtype=np.float64))

    def links(self) -> NeighborGraph:
        """The neighbour graph of every chunk known so far; it grows as chunks arrive."""
        return self._graph

    def unfetched_neighbors(self, direction: Direction, steps: int | Sequence[int]) -> list[str]:
        """Ids up to ``steps`` away from a seed that are neither known nor already asked for.

        ``steps`` is one depth for every seed, or one per seed (by rank). The walk passes only
        through known chunks, so each call, after fetching what the previous call returned,
        discovers one more ring along every chain that is still short of its depth.
        """
        graph = self.links()
        depths = [steps] * len(self.seeds) if isinstance(steps, int) else steps
        wanted: dict[str, None] = {}
        for seed, depth in zip(self.seeds, depths, strict=True):
            for step in steps_for(direction):
                for chunk_id in graph.walk(seed, step, depth):
                    if chunk_id not in self.documents and chunk_id not in self.requested:
                        wanted[chunk_id] = None
        return list(wanted)

    def named_by_position(self, chunk_id: str) -> bool:
        """Whether a known chunk's id is ``chunk_id_for(its document, its position)``."""
        named = self._named_by_position.get(chunk_id)
        if named is None:
            chunk = self.links_of(chunk_id)
            named = (
                chunk is not None
                and chunk.document_id is not None
                and chunk.position is not None
                and chunk_id_for(chunk.document_id, chunk.position) == chunk_id
            )
            if chunk is not None:
                self._named_by_position[chunk_id] = named
        return named

    def predicted_ids(self, chunk_id: str, step: Step, first: int, last: int) -> list[str]:
        """Ids of the chunks ``first``..``last`` steps from a known chunk, if they can be named.

        :func:`~scar_langchain.link_chunks` names every chunk ``chunk_id_for(document,
        position)``, so the ids further along a chain follow from the document and position of
        any chunk named that way, without reading the chunks in between. For a chunk named any
        other way nothing is predicted. A prediction is only a prefetch hint: the walk still
        follows the links the chunks carry, so a predicted chunk it never reaches is unused.
        """
        chunk = self.links_of(chunk_id)
        if (
            chunk is None
            or chunk.document_id is None
            or chunk.position is None
            or not self.named_by_position(chunk_id)
        ):
            return []
        sign = -1 if step == "previous" else 1
        positions = (chunk.position + sign * distance for distance in range(first, last + 1))
        return [chunk_id_for(chunk.document_id, p) for p in positions if p >= 0]

    def unrequested(self, chunk_ids: Iterable[str]) -> list[str]:
        """The ids in ``chunk_ids`` that are neither known nor already asked for, in order."""
        return [
            chunk_id
            for chunk_id in dict.fromkeys(chunk_ids)
            if chunk_id not in self.documents and chunk_id not in self.requested
        ]

    def add_fetched(self, requested: list[str], fetched: FetchedChunks) -> None:
        """Record the chunks (and any vectors) a neighbour source returned.

        Neither the ``Document`` nor the links of a fetched chunk are looked at here: each is
        read when the selection first needs it.
        """
        self.requested.update(requested)
        wanted = set(requested)
        for chunk_id in fetched.documents:
            if chunk_id in wanted:
                self.documents.add_from(chunk_id, fetched.documents)
        for chunk_id, vector in fetched.vectors.items():
            if chunk_id in wanted:
                self.vectors.setdefault(chunk_id, np.asarray(vector, dtype=np.float64))

    def chunks_needing_vectors(self) -> dict[str, Document]:
        """The known chunks that have no vector and whose vector was never asked for."""
        return {
            chunk_id: self.documents[chunk_id]
            for chunk_id in self.documents
            if chunk_id not in self.vectors and chunk_id not in self.vectors_asked
        }

    def add_vectors(
        self, asked: Mapping[str, Document], vectors: Mapping[str, FloatVector]
    ) -> None:
        """Record the vectors a vector source returned for the chunks in ``asked``."""
        self.vectors_asked.update(asked)
        for chunk_id, vector in vectors.items():
            if chunk_id in self.documents:
                self.vectors.setdefault(chunk_id, np.asarray(vector, dtype=np.float64))

    def records(self) -> LazyValues[ChunkRecord]:
        """Text and position of every known chunk, for passage assembly.

        Each record is made when first looked up: assembly looks up the selected chunks only, a
        fraction of what the pool holds.
        """
        return LazyValues(self.documents, self._record)

    def _record(self, chunk_id: str) -> ChunkRecord:
        document = self.documents[chunk_id]
        chunk = self.links_of(chunk_id)
        assert chunk is not None  # a known chunk
        return ChunkRecord(
            chunk_id=chunk_id,
            text=document.page_content,
            document_id=chunk.document_id,
            position=chunk.position,
            start_index=chunk.start_index,
        )


def seeds_for_passages(pool: QueryPool, passages: int, at_least: int = 0) -> int:
    """How many of the best seeds plain mode needs, at least, for ``passages`` passages.

    The fewest best seeds (no fewer than ``at_least``) whose runs of adjacent seeds number
    ``passages``, or all the seeds when they never do. Seeds linked to each other end up in one
    passage, so plain mode needs at least this many seeds for ``passages`` passages; expansion
    can join runs further, which a later try meets. Only the seeds' own links are read: nothing
    is fetched.
    """
    graph = pool.links()
    taken: set[str] = set()
    runs = 0
    for count, seed in enumerate(pool.seeds, start=1):
        neighbors = (graph.step(seed, step) for step in steps_for("both"))
        runs += 1 - sum(1 for neighbor in neighbors if neighbor is not None and neighbor in taken)
        taken.add(seed)
        if count >= at_least and runs >= passages:
            return count
    return len(pool.seeds)
