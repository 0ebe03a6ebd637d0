"""The query driver: which chunks to read next, and what to select once they have arrived.

The driver performs no I/O. An adapter feeds it the retrieved chunks, asks :meth:`QueryDriver.wanted`
for the ids to read, reads them from its store (sync or async, as it likes), hands them back with
:meth:`QueryDriver.receive`, and repeats until nothing more is wanted::

    driver = QueryDriver(query_vector, hits, settings)
    while ids := driver.wanted():
        driver.receive(read_chunks(ids))   # the adapter's only job
    selection = driver.result()

Reads go ring by ring: the first read brings every chunk one step from a retrieved chunk (and the
vectors of retrieved chunks the search returned without one), the next read the chunks two steps
away, up to the mode's ``window``. So a query costs exactly ``window`` reads beyond the search, and
the selection is exactly what :func:`scar_core.selection.select` gives on the full graph.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence

import numpy.typing as npt

from scar_core.scoring import unit_vector
from scar_core.selection import Chunk, Selection, select, step_out
from scar_core.settings import BudgetSettings, PaperSettings

__all__ = ["UNSTORED_HIT_PREFIX", "QueryDriver", "distinct_ids"]

#: Prefix of the ids :func:`distinct_ids` makes for hits without an id of their own.
UNSTORED_HIT_PREFIX = "scar-hit-"


def distinct_ids(hits: Sequence[tuple[str | None, Hashable]]) -> list[str]:
    """Return one id per retrieved chunk, such that distinct chunks never share one.

    Args:
        hits: Each retrieved chunk's id (``None`` if it has none) and a key of its content (its
            text and metadata, say), best first.

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


class QueryDriver:
    """Drive one SCAR query without doing any I/O.

    Args:
        query: The query embedding.
        hits: The retrieved chunks, best first, with whatever vectors and links the search gave.
            Only the first ``settings.k`` are used: no further hit can win a slot.
        settings: The mode and its settings.
        unstored: Ids of hits that no store holds (those :func:`distinct_ids` made up): they
            are never asked for.

    Raises:
        InvalidVectorError: If the query vector is unusable.
    """

    def __init__(
        self,
        query: npt.ArrayLike,
        hits: Sequence[Chunk],
        settings: BudgetSettings | PaperSettings,
        unstored: Collection[str] = (),
    ) -> None:
        self.query = unit_vector(query)
        self.unstored = frozenset(unstored)
        self.settings = settings
        unique: dict[str, Chunk] = {}
        for hit in hits:
            unique.setdefault(hit.id, hit)
        self.hit_ids = list(unique)[: settings.k]
        self.chunks: dict[str, Chunk] = {h: unique[h] for h in self.hit_ids}
        self.missing: set[str] = set()
        #: Reads received so far; also how far from the hits the walk has come.
        self.reads = 0
        self._ring = list(self.hit_ids)
        self._asked: list[str] = []

    def wanted(self) -> list[str]:
        """Return the chunk ids to read next (with their vectors), or ``[]`` when done.

        Asking again before :meth:`receive` returns the same ids.
        """
        if self._asked:
            return list(self._asked)
        if self.reads >= self.settings.window or not self._ring:
            return []
        seen = set(self.chunks) | self.missing
        ring = {
            t: None for t, _, _ in step_out(self._ring, self.chunks, self.settings.direction, seen)
        }
        if self.reads == 0:
            unread = [h for h in self.hit_ids if self.chunks[h].vector is None]
            ring = {h: None for h in unread if h not in self.unstored} | ring
        self._asked = list(ring)
        if not self._asked:
            self._ring = []
        return list(self._asked)

    def receive(self, chunks: Iterable[Chunk]) -> None:
        """Take the chunks read for the last :meth:`wanted`; ids not among them count as missing.

        A retrieved chunk read again keeps the links the search gave it and takes the new vector.

        Raises:
            RuntimeError: If no read is outstanding (``wanted()`` returned nothing, or was not
                called since the last ``receive()``).
        """
        if not self._asked:
            raise RuntimeError(
                "QueryDriver.receive() was called with no read outstanding; call wanted() first "
                "and receive() once with what was read for it."
            )
        arrived = {chunk.id: chunk for chunk in chunks if chunk.id in self._asked}
        for chunk_id, chunk in arrived.items():
            known = self.chunks.get(chunk_id)
            if known is not None:
                chunk = Chunk(chunk_id, chunk.vector, known.previous_id or chunk.previous_id,
                              known.next_id or chunk.next_id)  # fmt: skip
            self.chunks[chunk_id] = chunk
        self.missing.update(c for c in self._asked if c not in arrived)
        new = [c for c in arrived if c not in self.hit_ids]
        self._ring = new
        self._asked = []
        self.reads += 1

    def result(self, tokens: Mapping[str, int] | None = None) -> Selection:
        """Return the selection over everything read so far.

        Args:
            tokens: Each chunk's tokens, needed with ``max_tokens`` (see
                :func:`scar_core.selection.budget_select`).
        """
        return select(self.query, self.hit_ids, self.chunks, self.settings, tokens)
