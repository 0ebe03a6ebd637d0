"""One SCAR query from hits to trace, written once for both adapters, with no I/O of its own.

An adapter searches, wraps each hit and each chunk it reads as a :class:`Found`, and::

    query = ScarQuery(query_vector, hits, settings, k, fallback=fallback)
    while ids := query.wanted():
        query.receive(read(ids))       # async: await query.areceive(await aread(ids))
    for placed in query.placed():      # passage by passage
        render(placed.found.item, placed.trace)

:class:`ScarQuery` owns what is not about a framework: distinct identities for distinct hits, the
ring walk (:class:`~scar_core.driver.QueryDriver`), ``neighbor_filter``, the embedding of chunks
no store gave a vector for (:class:`Fallback`, one cache for the adapter's life), the counters
and the trace each returned chunk carries in its metadata.
"""

from __future__ import annotations

import asyncio
import numbers
import warnings
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from scar_core.cache import Compute, EmbeddingCache
from scar_core.driver import QueryDriver, distinct_ids
from scar_core.errors import InvalidSettingsError, InvalidVectorError
from scar_core.selection import Chunk, Selected, Selection, fill_in_order
from scar_core.settings import ScarSettings, estimate_tokens

__all__ = ["Fallback", "Found", "Placed", "ScarQuery", "linked", "warn_once"]

#: The decision fields a neighbour's trace carries.
DECISION_FIELDS = ("relevance", "boundary_penalty", "score", "threshold")
_warned: dict[tuple[str, int], weakref.ref[Any] | None] = {}


def warn_once(reason: str, owner: object, message: str, stacklevel: int = 3) -> None:
    """Warn ``message`` the first time ``reason`` comes up for ``owner`` (a store, an adapter)."""
    key = (reason, id(owner))
    known = _warned.get(key)
    if known is not None and known() is owner:
        return
    try:
        _warned[key] = weakref.ref(owner, lambda _: _warned.pop(key, None))
    except TypeError:  # an object without weak references: warned once per id
        if key in _warned:
            return
        _warned[key] = None
    warnings.warn(message, stacklevel=stacklevel)


@dataclass(frozen=True)
class Found:
    """A chunk as an adapter has it: a hit of the search, or a chunk a read returned.

    Attributes:
        id: Its id in the store (``None`` if the search gave none).
        item: The adapter's own object (a ``Document``, a node), handed back in :class:`Placed`.
        vector: Its stored embedding, if the store gave one.
        previous_id: The id of the chunk before it, if linked.
        next_id: The id of the chunk after it, if linked.
        linked: Whether it went through linking, even without neighbours (a one-chunk document).
        metadata: Its metadata, for ``neighbor_filter`` and to tell equal ids apart.
        text: Its text, embedded if no store gives its vector.
    """

    id: str | None
    item: Any
    vector: npt.ArrayLike | None = None
    previous_id: str | None = None
    next_id: str | None = None
    linked: bool = False
    metadata: Mapping[str, Any] = field(default_factory=dict)
    text: str = ""


@dataclass(frozen=True)
class Placed:
    """One returned chunk: what the adapter gave, and the trace for its metadata."""

    found: Found
    chunk_id: str
    trace: dict[str, Any]
    selected: Selected | None


class Fallback:
    """Embeds the texts of chunks that no store gave a vector for, once each, through a cache.

    Keep one for an adapter's life: its cache reads its files once.

    Args:
        model_key: Names the embedding model (the cache's key); a callable is asked only when
            a text is embedded (so a default model is looked up only if needed).
        embed: Texts in, vectors out (the framework's sync embedding call).
        cache: The cache; ``None``: an :class:`~scar_core.cache.EmbeddingCache` in its default
            folder, made on first use.
        warning: Warned once per owner, the first time a text is embedded (or a callable
            giving it).
        owner: What the warning is about (the store).
    """

    def __init__(
        self,
        model_key: str | Callable[[], str],
        embed: Compute,
        cache: EmbeddingCache | None = None,
        warning: str | Callable[[], str] = "",
        owner: object = None,
    ) -> None:
        self.model_key, self.compute, self._cache = model_key, embed, cache
        self.warning, self.owner = warning, owner

    @property
    def cache(self) -> EmbeddingCache:
        """The cache, made on first use."""
        if self._cache is None:
            self._cache = EmbeddingCache()
        return self._cache

    def embed(self, texts: list[str]) -> tuple[npt.NDArray[np.float32], int]:
        """Return the texts' vectors and how many were computed (not found in the cache)."""
        warning = self.warning() if callable(self.warning) else self.warning
        if warning:
            warn_once("embedded", self.owner if self.owner is not None else self, warning, 5)
        key = self.model_key() if callable(self.model_key) else self.model_key
        return self.cache.embed(key, texts, self.compute)


class ScarQuery:
    """One query: which chunks to read, and what to return with which trace.

    When no hit went through linking, nothing is read and the hits come back as they are
    (plain top-k), so the query vector may then be ``None``.

    Args:
        query: The query embedding (``None``: only if no hit is linked).
        hits: The search's hits, best first; hits with one id and one content are one chunk.
        settings: The adapter's settings.
        k: The budget (budget mode) or the seeds (paper mode) of this query.
        fallback: Embeds chunks no store gave a vector for; ``None`` leaves them unscored.
        owner: What warnings are about, once each (the store).
    """

    def __init__(
        self,
        query: npt.ArrayLike | None,
        hits: Sequence[Found],
        settings: ScarSettings,
        k: int,
        fallback: Fallback | None = None,
        owner: object = None,
    ) -> None:
        self.settings, self.fallback, self.owner = settings, fallback, owner
        ids = distinct_ids([(h.id, _content_key(h)) for h in hits])
        self.items: dict[str, Found] = {}
        for chunk_id, hit in zip(ids, hits, strict=True):
            self.items.setdefault(chunk_id, hit)
        self.hit_ids = list(self.items)
        #: Whether SCAR expands: some hit went through linking (else plain top-k).
        self.linked = linked(hits)
        #: Texts this query embedded (computed, not read from the cache).
        self.embedded = 0
        self.k = k
        self.driver: QueryDriver | None = None
        if self.linked:
            if query is None:
                raise InvalidVectorError("SCAR needs the query's embedding to expand linked hits.")
            chunks = [_chunk(i, self.items[i]) for i in self.hit_ids]
            unstored = [i for i, hit in zip(ids, hits, strict=True) if i != hit.id]
            self.driver = QueryDriver(query, chunks, settings.for_query(k), unstored)

    def wanted(self) -> list[str]:
        """The ids to read next (``[]`` when done, or when no hit is linked)."""
        return self.driver.wanted() if self.driver is not None else []

    def receive(self, found: Iterable[Found]) -> None:
        """Take what the read of :meth:`wanted` returned; ids it left out count as missing."""
        admitted = self._admitted(found)
        self._take(admitted, self._embed(self._lacking(admitted)))

    async def areceive(self, found: Iterable[Found]) -> None:
        """Async :meth:`receive`: embedding and the disk cache run in a worker thread."""
        admitted = self._admitted(found)
        lacking = self._lacking(admitted)
        self._take(admitted, await asyncio.to_thread(self._embed, lacking) if lacking else {})

    def _admitted(self, found: Iterable[Found]) -> list[Found]:
        """The chunks read, less neighbours ``neighbor_filter`` refuses (hits always stay)."""
        allowed = self.settings.neighbor_filter
        return [
            f
            for f in found
            if f.id is not None
            and (allowed is None or f.id in self.hit_ids or allowed(dict(f.metadata)))
        ]

    def _lacking(self, found: list[Found]) -> list[Found]:
        return [f for f in found if f.vector is None] if self.fallback is not None else []

    def _embed(self, lacking: list[Found]) -> dict[str, Any]:
        if not lacking or self.fallback is None:
            return {}
        matrix, computed = self.fallback.embed([f.text for f in lacking])
        self.embedded += computed
        return {f.id or "": vector for f, vector in zip(lacking, matrix, strict=True)}

    def _take(self, found: list[Found], vectors: dict[str, Any]) -> None:
        if self.driver is None:
            raise RuntimeError("ScarQuery.receive() was called, but no read was asked for.")
        for f in found:
            if f.id not in self.hit_ids:
                self.items.setdefault(f.id or "", f)
        self.driver.receive(_chunk(f.id or "", f, vectors.get(f.id or "", f.vector)) for f in found)

    def placed(self) -> list[Placed]:
        """The chunks to return, passage by passage, each with its trace.

        With ``max_tokens``, each chunk's tokens are counted from its text (once) with the
        settings' tokenizer; when no hit is linked, the hits come in rank order until the next
        one does not fit (the first always does).
        """
        if self.driver is None:  # nothing linked: the hits as they came, the first k
            first = self.hit_ids[: self.k]
            if self.settings.max_tokens is not None:
                counts = self._tokens(first)
                first = first[: fill_in_order([counts[i] for i in first], self.settings.max_tokens)]
            return [self._place(i, n, None, False) for n, i in enumerate(first)]
        tokens = None if self.settings.max_tokens is None else self._tokens(self.driver.chunks)
        selection = self.driver.result(tokens)
        expanded = self._check_vectors(self.driver, selection)
        picked = {s.chunk_id: s for s in selection.selected}
        return [
            self._place(chunk_id, number, picked[chunk_id], expanded)
            for number, passage in enumerate(selection.passages)
            for chunk_id in passage
        ]

    def _tokens(self, ids: Iterable[str]) -> dict[str, int]:
        """Each chunk's tokens, by the settings' tokenizer (default :func:`estimate_tokens`).

        Raises:
            InvalidSettingsError: If the tokenizer raises, or returns anything but an integer
                >= 0.
        """
        count = self.settings.tokenizer or estimate_tokens
        counts: dict[str, int] = {}
        for chunk_id in ids:
            try:
                n = count(self.items[chunk_id].text)
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

    def _check_vectors(self, driver: QueryDriver, selection: Selection) -> bool:
        """Whether some hit could be scored; warns once about chunks without a usable vector."""
        dimension = driver.query.shape[0]
        chunks = driver.chunks
        unusable = [c for c in chunks if not _usable(chunks[c].vector, dimension)]
        held = [c for c in selection.unscored if c in self.items] + [
            h for h in unusable if h in self.hit_ids and chunks[h].vector is not None
        ]
        if held:
            warn_once(
                "unscored",
                self.owner if self.owner is not None else self.settings,
                f"{len(held)} chunk(s) had no usable embedding (NaN, zero, or a dimension other "
                f"than the query's {dimension}), so SCAR could not score them; check that the "
                "query is embedded with the model the index was built with.",
                stacklevel=5,
            )
        return any(h not in unusable for h in self.hit_ids)

    def _place(
        self, chunk_id: str, passage: int, selected: Selected | None, expanded: bool
    ) -> Placed:
        trace: dict[str, Any] = {
            "scar_passage": passage,
            "scar_origin": selected.origin if selected else "hit",
            "scar_score": selected.score if selected else None,
            "scar_seed_id": selected.seed_id if selected else chunk_id,
            "scar_expanded": expanded,
            "scar_embedded": self.embedded,
        }
        if selected is not None and selected.decision is not None:
            trace["scar_decision"] = {n: getattr(selected.decision, n) for n in DECISION_FIELDS}
        return Placed(self.items[chunk_id], chunk_id, trace, selected)


def _chunk(chunk_id: str, found: Found, vector: Any = None) -> Chunk:
    return Chunk(
        chunk_id, found.vector if vector is None else vector, found.previous_id, found.next_id
    )


def linked(hits: Iterable[Found]) -> bool:
    """Whether some hit went through linking, so that SCAR can expand."""
    return any(h.linked or h.previous_id or h.next_id for h in hits)


def _usable(vector: Any, dimension: int) -> bool:
    """Whether a vector can be scored against a query of ``dimension``."""
    if vector is None:
        return False
    try:
        array = np.asarray(vector, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return bool(array.shape == (dimension,) and np.isfinite(array).all() and array.any())


def _content_key(found: Found) -> str:
    """What tells two hits with one id apart: their text and metadata."""
    return repr((found.text, sorted(found.metadata.items(), key=str)))
