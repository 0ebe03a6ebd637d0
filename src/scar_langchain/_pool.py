"""What one query has learnt so far: retrieved chunks, fetched neighbours and their vectors.

A :class:`QueryPool` lives for one ``invoke`` call only, so concurrent queries never share state.
Both the plain and the budgeted path of :class:`~scar_langchain.SCARRetriever` fill it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from langchain_core.documents import Document

from scar_core._lazy import LazyValues
from scar_core.assembly import ChunkRecord
from scar_core.graph import NeighborGraph, Step, chunk_id_for, steps_for
from scar_core.settings import Direction
from scar_langchain._links import DEFAULT_KEYS, ChunkLinks, ChunkMetadataKeys, read_links
from scar_langchain._neighbors import FetchedChunks, SearchHits

__all__ = ["QueryPool", "seeds_for_passages", "unidentified_id"]

FloatVector = npt.NDArray[np.float64]

#: Prefix of the stand-in id given to a retrieved chunk that carries no id.
UNIDENTIFIED_PREFIX = "scar-unidentified:"


def unidentified_id(document: Document) -> str:
    """A stable stand-in id for a retrieved chunk that carries none (it gets no neighbours)."""
    digest = hashlib.sha256(document.page_content.encode("utf-8")).hexdigest()[:32]
    return f"{UNIDENTIFIED_PREFIX}{digest}"


@dataclass
class QueryPool:
    """Everything one query has learnt so far: seeds, fetched chunks and their vectors.

    Attributes:
        query_vector: The query's embedding.
        seeds: Retrieved chunk ids, best first.
        documents: Every chunk known so far (retrieved or fetched), by id.
        vectors: The vectors found for known chunks.
        requested: Ids asked of the neighbour source (found or not).
        vectors_asked: Ids whose vectors were asked of the vector source (found or not).
        exhausted: Whether the last search returned fewer chunks than asked, or nothing new.
        keys: Where chunk links live in metadata.
        chunk_links: The links of every known chunk, read once when the chunk arrived.
    """

    query_vector: FloatVector
    seeds: list[str] = field(default_factory=list)
    documents: dict[str, Document] = field(default_factory=dict)
    vectors: dict[str, FloatVector] = field(default_factory=dict)
    requested: set[str] = field(default_factory=set)
    vectors_asked: set[str] = field(default_factory=set)
    exhausted: bool = False
    keys: ChunkMetadataKeys = DEFAULT_KEYS
    chunk_links: dict[str, ChunkLinks] = field(default_factory=dict)
    _graph: NeighborGraph = field(default_factory=lambda: NeighborGraph({}), init=False, repr=False)
    _named_by_position: dict[str, bool] = field(default_factory=dict, init=False, repr=False)

    def _remember(self, chunk_id: str, document: Document, links: ChunkLinks | None = None) -> None:
        """Keep a chunk and its links (read from metadata once, not on every lookup)."""
        if chunk_id in self.documents:
            return
        self.documents[chunk_id] = document
        chunk = self.chunk_links[chunk_id] = links or read_links(document, self.keys)
        self._graph.add(chunk_id, chunk.previous_id, chunk.next_id, chunk.document_id)

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
            chunk = self.chunk_links.get(chunk_id)
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
        chunk = self.chunk_links.get(chunk_id)
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
        """Record the chunks (and any vectors) a neighbour source returned."""
        self.requested.update(requested)
        wanted = set(requested)
        for chunk_id, document in fetched.documents.items():
            if chunk_id in wanted:
                self._remember(chunk_id, document)
        for chunk_id, vector in fetched.vectors.items():
            if chunk_id in wanted:
                self.vectors.setdefault(chunk_id, np.asarray(vector, dtype=np.float64))

    def chunks_needing_vectors(self) -> dict[str, Document]:
        """The known chunks that have no vector and whose vector was never asked for."""
        return {
            chunk_id: document
            for chunk_id, document in self.documents.items()
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
        chunk = self.chunk_links[chunk_id]
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
