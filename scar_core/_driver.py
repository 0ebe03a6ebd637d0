"""One SCAR query from hits to trace, for both adapters, sync or async, with no I/O of its own.

The driver says which chunk ids to read next and, once they have arrived, what it selects; the
adapter performs the reads with its store's own sync or async API, and embeds what no store gave
a vector for with the user's own embedding model::

    driver = QueryDriver.for_adapter(query_vector, hits, settings, k, memory=memory)
    while ids := driver.wanted():
        driver.receive(read(ids))            # async: driver.receive(await aread(ids))
        if texts := driver.lacking():
            driver.embedded(embed(texts))    # async: driver.embedded(await aembed(texts))
    for chunk, trace in driver.returned():   # passage by passage
        render(chunk.item, trace)

Reads go ring by ring out from the hits (the first also brings hits' missing vectors), up to the
mode's ``window``. Where the hits' links name the chunks two steps away (``Chunk.window_ids``),
the first read asks for both rings, keeping a chunk two steps away only where the chunk between
arrived and links to it: one read beyond the search, and the selection is exactly what
:func:`scar_core._selection.select` gives on the full graph.
"""

from __future__ import annotations

import numbers
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy.typing as npt

from scar_core._chunks import Chunk, Scored, Selected, Selection, step_out, steps
from scar_core._errors import InvalidSettingsError, InvalidVectorError, warn_once
from scar_core._scoring import unit_vector
from scar_core._selection import fill_in_order, selected_by
from scar_core._settings import BudgetSettings, PaperSettings, ScarSettings, estimate_tokens

#: Prefix of the ids :func:`distinct_ids` makes for hits without an id of their own.
UNSTORED_HIT_PREFIX = "scar-hit-"


def distinct_ids(hits: Sequence[tuple[str | None, Hashable]]) -> list[str]:
    """Return one id per retrieved chunk, such that distinct chunks never share one.

    Args:
        hits: Each retrieved chunk's id (``None`` or ``""`` if it has none) and a key of its
            content (its text and metadata, say), best first.

    Returns:
        The ids, in order. Hits with the same id and the same content are one chunk and share
        the id (the driver keeps the first). A hit without an id, or whose id an earlier,
        different hit already holds, gets one of its own for this query:
        ``"scar-hit-<rank>:<random UUID>"``, which no stored chunk's id can equal, however its
        ids are chosen. So no retrieved chunk is ever merged into another and lost.
    """
    first_content: dict[str, Hashable] = {}
    ids = []
    for rank, (chunk_id, content) in enumerate(hits):
        if chunk_id and first_content.setdefault(chunk_id, content) == content:
            ids.append(chunk_id)
        else:
            ids.append(f"{UNSTORED_HIT_PREFIX}{rank}:{uuid.uuid4()}")
    return ids


class VectorMemory:
    """The vectors of texts an adapter had to embed, the latest ``size`` kept in memory only.

    Keep one per adapter (and embedding model): a text met again is not embedded again. Nothing
    is written to disk; for a persistent cache, give the adapter cache-backed embeddings.
    """

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._vectors: OrderedDict[str, npt.ArrayLike] = OrderedDict()

    def get(self, text: str) -> npt.ArrayLike | None:
        """The vector of ``text``, if kept."""
        vector = self._vectors.get(text)
        if vector is not None:
            self._vectors.move_to_end(text)
        return vector

    def put(self, text: str, vector: npt.ArrayLike) -> None:
        """Keep ``vector`` for ``text``, forgetting the least recently used beyond ``size``."""
        self._vectors[text] = vector
        self._vectors.move_to_end(text)
        while len(self._vectors) > self.size:
            self._vectors.popitem(last=False)


class QueryDriver:
    """Drive one SCAR query without doing any I/O.

    When no hit went through linking, nothing is read and the first ``k`` hits come back as they
    are (plain top-k), so the query vector may then be ``None``.

    Args:
        query: The query embedding (``None``: only if no hit is linked).
        hits: The search's hits, best first.
        settings: The mode's settings at this query's ``k`` (:meth:`ScarSettings.for_query`).
        neighbor_filter: Whether a neighbour read may be returned, from its metadata.
        tokenizer: Counts a chunk's tokens with ``max_tokens`` (default
            :func:`~scar_core._settings.estimate_tokens`).
        memory: Where texts embedded for chunks without a vector are kept; ``None``: such chunks
            are not embedded (:meth:`lacking` is empty) and stay unscored.
        owner: What warnings are about, once each (the store).

    Raises:
        InvalidVectorError: If a hit is linked and the query vector is missing or unusable.
    """

    def __init__(
        self,
        query: npt.ArrayLike | None,
        hits: Sequence[Chunk],
        settings: BudgetSettings | PaperSettings,
        *,
        neighbor_filter: Callable[[Mapping[str, Any]], bool] | None = None,
        tokenizer: Callable[[str], int] | None = None,
        memory: VectorMemory | None = None,
        owner: object = None,
    ) -> None:
        self.settings, self.neighbor_filter, self.tokenizer = settings, neighbor_filter, tokenizer
        self.memory, self.owner = memory, owner
        counted = Counter(h.id for h in hits)  # a content key only where an id comes twice
        ids = distinct_ids([(h.id, _content_key(h) if counted[h.id] > 1 else "") for h in hits])
        #: Every hit's id: a hit read as a neighbour is never refused by ``neighbor_filter``.
        self.all_hits = frozenset(ids)
        self._unstored = frozenset(i for i, h in zip(ids, hits, strict=True) if i != h.id)
        first: dict[str, Chunk] = {}
        for chunk_id, hit in zip(ids, hits, strict=True):
            first.setdefault(chunk_id, hit if hit.id == chunk_id else replace(hit, id=chunk_id))
        self.hit_ids = list(first)[: settings.k]
        #: Every chunk known so far, hits first: the one record of each, read or not.
        self.chunks: dict[str, Chunk] = {h: first[h] for h in self.hit_ids}
        #: Whether SCAR expands: some hit went through linking (else plain top-k).
        self.linked = linked(hits)
        if self.linked and query is None:
            raise InvalidVectorError("SCAR needs the query's embedding to expand linked hits.")
        self.query = unit_vector(query) if self.linked and query is not None else None
        self.missing: set[str] = set()
        #: Texts this query embedded (not found in ``memory``).
        self.embedded_count = 0
        #: Reads received so far.
        self.reads = 0
        self._depth = 0  # how many steps from the hits the walk has come
        self._ring = list(self.hit_ids) if self.linked else []  # the chunks to step out from
        self._asked: list[str] = []
        self._hinted: set[str] = set()  # asked on the links' hints, two steps from a hit
        self._pending: list[str] = []  # two steps from a hit, not hinted: read next
        self._filling = False  # whether the read outstanding is of ``_pending``
        self._scored: Scored | None = None
        self._lacking: list[str] = []

    @classmethod
    def for_adapter(
        cls,
        query: npt.ArrayLike | None,
        hits: Sequence[Chunk],
        settings: ScarSettings,
        k: int,
        memory: VectorMemory | None = None,
        owner: object = None,
    ) -> QueryDriver:
        """The driver of ``settings`` at budget ``k`` (0 only when no hit is linked)."""
        mode = settings.for_query(k if linked(hits) else max(k, 1))
        return cls(
            query, hits, mode, neighbor_filter=settings.neighbor_filter,
            tokenizer=settings.tokenizer, memory=memory, owner=owner,
        )  # fmt: skip

    def wanted(self) -> list[str]:
        """Return the chunk ids to read next (with their vectors; the same until :meth:`receive`)."""
        if self._asked:
            return list(self._asked)
        if self._pending:  # chunks two steps away that the links' hints did not name
            self._asked, self._pending, self._filling = self._pending, [], True
            return list(self._asked)
        if self._depth >= self.settings.window or not self._ring:
            return []
        seen = set(self.chunks) | self.missing
        ring = {
            t: None for t, _, _ in step_out(self._ring, self.chunks, self.settings.direction, seen)
        }
        if self.reads == 0:
            unread = [h for h in self.hit_ids if self.chunks[h].vector is None]
            ring = {h: None for h in unread if h not in self._unstored} | ring
        hints = self._hints(ring, seen) if self._depth == 0 and self.settings.window > 1 else {}
        self._asked, self._hinted = list(ring | hints), set(hints)
        if not self._asked:
            self._ring = []
        return list(self._asked)

    def _hints(self, ring: Mapping[str, None], seen: set[str]) -> dict[str, None]:
        hints: dict[str, None] = {}
        for hit in self._ring:
            chunk = self.chunks[hit]
            for side, step in enumerate(("previous", "next")):
                if step not in steps(self.settings.direction) or chunk.step(step) not in ring:
                    continue
                two = chunk.window_ids[side]
                if two and two not in seen and two not in ring:
                    hints[two] = None
        return hints

    def receive(self, chunks: Iterable[Chunk]) -> None:
        """Take the chunks read for the last :meth:`wanted`; ids not among them count as missing.

        So does a neighbour ``neighbor_filter`` refuses. A hit read again keeps its own record and
        links, and takes the vector read.

        Raises:
            RuntimeError: If no read is outstanding (``wanted()`` returned nothing, or was not
                called since the last ``receive()``).
        """
        if not self._asked:
            raise RuntimeError(
                "QueryDriver.receive() was called with no read outstanding; call wanted() first "
                "and receive() once with what was read for it."
            )
        allowed, asked = self.neighbor_filter, set(self._asked)
        arrived: dict[str, Chunk] = {}
        for chunk in chunks:
            if chunk.id not in asked or chunk.id in arrived:
                continue
            if allowed is None or chunk.id in self.all_hits or allowed(dict(chunk.metadata)):
                arrived[chunk.id] = chunk
        hinted = self._hinted
        for chunk_id, chunk in arrived.items():
            if chunk_id not in hinted:
                self._keep(chunk_id, chunk)
        self.missing.update(c for c in self._asked if c not in arrived and c not in hinted)
        ring = [c for c in arrived if c not in hinted and c not in self.hit_ids]
        if self._filling:
            self._ring += ring
        else:
            self._ring = ring
            self._depth += 1
        if hinted:  # the next ring, as a second read would find it
            seen = set(self.chunks) | self.missing
            following = [
                t for t, _, _ in step_out(ring, self.chunks, self.settings.direction, seen)
            ]
            for chunk_id in following:
                if chunk_id in arrived:
                    self._keep(chunk_id, arrived[chunk_id])
                elif chunk_id in hinted:
                    self.missing.add(chunk_id)
            self._ring = [c for c in following if c in arrived]
            self._pending = [c for c in following if c not in hinted]
            self._depth += 1
        self._asked, self._hinted, self._filling = [], set(), False
        self.reads += 1

    def _keep(self, chunk_id: str, chunk: Chunk) -> None:
        known = self.chunks.get(chunk_id)
        if known is not None:
            chunk = replace(known, vector=chunk.vector,
                            previous_id=known.previous_id or chunk.previous_id,
                            next_id=known.next_id or chunk.next_id)  # fmt: skip
        if chunk.vector is None and self.memory is not None:
            remembered = self.memory.get(chunk.text)
            if remembered is None:
                self._lacking.append(chunk_id)
            else:
                chunk = replace(chunk, vector=remembered)
        self.chunks[chunk_id] = chunk

    def lacking(self) -> list[str]:
        """The texts to embed: of chunks read without a vector (``[]`` without ``memory``)."""
        return list(dict.fromkeys(self.chunks[c].text for c in self._lacking))

    def embedded(self, vectors: Sequence[npt.ArrayLike]) -> None:
        """Take the vectors of :meth:`lacking`'s texts, in order, and keep them in ``memory``."""
        texts = self.lacking()
        if len(vectors) != len(texts) or self.memory is None:
            raise RuntimeError(
                f"QueryDriver.embedded() got {len(vectors)} vectors for the {len(texts)} texts "
                "lacking() returned; pass one vector per text, in order."
            )
        for text, vector in zip(texts, vectors, strict=True):
            self.memory.put(text, vector)
        for chunk_id in self._lacking:
            chunk = self.chunks[chunk_id]
            self.chunks[chunk_id] = replace(chunk, vector=self.memory.get(chunk.text))
        self.embedded_count += len(texts)
        self._lacking = []

    def result(self) -> Selection:
        """Return the selection over everything read so far (raising if the tokenizer fails)."""
        if self.query is None:
            raise RuntimeError("QueryDriver.result() needs a linked hit; see returned().")
        tokens = None
        if isinstance(self.settings, BudgetSettings) and self.settings.max_tokens is not None:
            tokens = self._tokens(self.chunks)
        self._scored = Scored(self.query, self.chunks)
        return selected_by(self._scored, self.hit_ids, self.chunks, self.settings, tokens)

    def returned(self) -> list[tuple[Chunk, dict[str, Any]]]:
        """The chunks to return, passage by passage, each with the trace for its metadata.

        When no hit is linked, with ``max_tokens``, the hits come in rank order while they fit
        (the first always does).
        """
        if self.query is None:  # nothing linked: the hits as they came
            first = self.hit_ids
            limit = getattr(self.settings, "max_tokens", None)  # budget mode only
            if limit is not None:
                counts = self._tokens(first)
                first = first[: fill_in_order([counts[i] for i in first], limit)]
            return [self._traced(i, n, None, False) for n, i in enumerate(first)]
        selection = self.result()
        expanded = self._check_vectors(selection)
        picked = {s.chunk_id: s for s in selection.selected}
        return [
            self._traced(chunk_id, number, picked[chunk_id], expanded)
            for number, passage in enumerate(selection.passages)
            for chunk_id in passage
        ]

    def _tokens(self, ids: Iterable[str]) -> dict[str, int]:
        count = self.tokenizer or estimate_tokens
        counts: dict[str, int] = {}
        for chunk_id in ids:
            try:
                n = count(self.chunks[chunk_id].text)
            except Exception as error:
                raise InvalidSettingsError(
                    f"tokenizer={count!r} raised {type(error).__name__}: {error} on the text of "
                    f"chunk {chunk_id!r}; it must take a text (str) and return its token count."
                ) from error
            if not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 0:
                raise InvalidSettingsError(
                    f"tokenizer returned {n!r} for chunk {chunk_id!r}; it must return the "
                    "text's token count, an integer >= 0."
                )
            counts[chunk_id] = int(n)
        return counts

    def _check_vectors(self, selection: Selection) -> bool:
        assert self.query is not None
        assert self._scored is not None
        usable = self._scored.units
        held = [c for c in selection.unscored if c in self.chunks] + [
            h for h in self.hit_ids if h not in usable and self.chunks[h].vector is not None
        ]
        if held:
            dimension = self.query.shape[0]
            warn_once(
                "unscored",
                self.owner if self.owner is not None else self.settings,
                f"{len(held)} chunk(s) had no usable embedding (NaN, zero, or a dimension other "
                f"than the query's {dimension}), so SCAR could not score them; check that the "
                "query is embedded with the model the index was built with.",
                stacklevel=5,
            )
        return any(h in usable for h in self.hit_ids)

    def _traced(
        self, chunk_id: str, passage: int, selected: Selected | None, expanded: bool
    ) -> tuple[Chunk, dict[str, Any]]:
        trace: dict[str, Any] = {
            "scar_passage": passage,
            "scar_origin": selected.origin if selected else "hit",
            "scar_score": selected.score if selected else None,
            "scar_seed_id": selected.seed_id if selected else chunk_id,
            "scar_expanded": expanded,
            "scar_embedded": self.embedded_count,
        }
        if selected is not None and selected.decision is not None:
            fields = ("relevance", "boundary_penalty", "score", "threshold")
            trace["scar_decision"] = {n: getattr(selected.decision, n) for n in fields}
        return self.chunks[chunk_id], trace


def linked(hits: Iterable[Chunk]) -> bool:
    """Whether some hit went through linking, so that SCAR can expand."""
    return any(h.linked or h.previous_id or h.next_id for h in hits)


def _content_key(chunk: Chunk) -> str:
    """What tells two hits with one id apart: their text and metadata."""
    return repr((chunk.text, sorted(chunk.metadata.items(), key=str)))
