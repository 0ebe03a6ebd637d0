"""Fetched chunks are made into documents only when a query uses them.

A neighbour source may return its chunks as a mapping that makes each ``Document`` on lookup
(``PGVectorChunks`` makes it from the row). The pool must then look up only the chunks the
selection reaches, and the answer must be the one a plain dict of the same documents gives.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore
from lc_fakes import TableEmbeddings, chain_documents

from scar_langchain import FetchedChunks, SCARRetriever, VectorStoreNeighbors, link_chunks
from scar_langchain._pool import KnownChunks


class RecordingMapping(Mapping[str, Document]):
    """A fetch's documents; records each id looked up."""

    def __init__(self, documents: Mapping[str, Document], looked_up: list[str]) -> None:
        self._documents = dict(documents)
        self._looked_up = looked_up

    def __getitem__(self, chunk_id: str) -> Document:
        self._looked_up.append(chunk_id)
        return self._documents[chunk_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._documents)

    def __len__(self) -> int:
        return len(self._documents)


class NeighborsWithVectors:
    """Fetches from a store and returns each chunk's vector in the same call, as pgvector does.

    It is also the vector source, for the search hits (the store's search returns no vectors).

    Args:
        store: The store holding the chunks.
        table: Text to vector, for the vectors returned with the chunks.
        lazy: Return the documents as a :class:`RecordingMapping` (else a plain dict).
    """

    def __init__(
        self, store: InMemoryVectorStore, table: Mapping[str, Sequence[float]], lazy: bool
    ) -> None:
        self._inner = VectorStoreNeighbors(store)
        self._table = table
        self._lazy = lazy
        self.fetched: list[str] = []
        self.looked_up: list[str] = []

    def _found(self, found: FetchedChunks) -> FetchedChunks:
        self.fetched.extend(found.documents)
        vectors = {
            chunk_id: [float(x) for x in self._table[document.page_content]]
            for chunk_id, document in found.documents.items()
        }
        if not self._lazy:
            return FetchedChunks(dict(found.documents), vectors)  # type: ignore[arg-type]
        return FetchedChunks(RecordingMapping(found.documents, self.looked_up), vectors)  # type: ignore[arg-type]

    def fetch(self, chunk_ids: Sequence[str]) -> FetchedChunks:
        return self._found(self._inner.fetch(chunk_ids))

    def vectors_for(self, chunks: Mapping[str, Document]) -> dict[str, list[float]]:
        """The search hits' vectors (the store's search returns none)."""
        return {chunk_id: self._table[d.page_content] for chunk_id, d in chunks.items()}

    async def avectors_for(self, chunks: Mapping[str, Document]) -> dict[str, list[float]]:
        return self.vectors_for(chunks)

    async def afetch(self, chunk_ids: Sequence[str]) -> FetchedChunks:
        return self._found(await self._inner.afetch(chunk_ids))


def _unit(degrees: float) -> list[float]:
    return [math.cos(math.radians(degrees)), math.sin(math.radians(degrees))]


def _corpus(
    angles: Sequence[Sequence[float]],
) -> tuple[InMemoryVectorStore, dict[str, list[float]]]:
    table = {"query": _unit(0.0)}
    documents: list[Document] = []
    for number, chain in enumerate(angles):
        texts = [f"doc {number} chunk {position}" for position in range(len(chain))]
        table.update((text, _unit(angle)) for text, angle in zip(texts, chain, strict=True))
        documents.extend(chain_documents(f"doc {number}", texts))
    chunks = link_chunks(documents)
    store = InMemoryVectorStore(TableEmbeddings(table))
    store.add_documents(chunks, ids=[c.id for c in chunks])
    return store, table


def _retriever(store: InMemoryVectorStore, source: NeighborsWithVectors) -> SCARRetriever:
    return SCARRetriever(vectorstore=store, neighbor_source=source, vector_source=source)  # type: ignore[arg-type]


def _answer(documents: Sequence[Document]) -> list[tuple[str, dict[str, object]]]:
    return [(d.page_content, d.metadata) for d in documents]


def test_prefetched_rings_the_selection_never_reaches_are_never_made() -> None:
    """Twelve documents whose third chunk matches the query, every other chunk at right angles.

    Every further retrieved chunk (cosine near 1) outbids every neighbour (cosine 0, so a bid of
    at most 0 - 0.1 * 1 + 0.2 = 0.1), so the budget fills with search hits. Only the hits'
    first rings bid; the rings beyond them, prefetched around the best hits, are never reached.
    """
    chains = [[90.0, 90.0, 90.0, 1.0 + number / 2, 90.0, 90.0, 90.0, 90.0] for number in range(12)]
    store, table = _corpus(chains)
    lazy = NeighborsWithVectors(store, table, lazy=True)
    documents = _retriever(store, lazy).invoke("query")

    assert all(d.metadata["scar_chunk_ids"] == [d.metadata["scar_seed_id"]] for d in documents)
    hits = {d.metadata["scar_seed_id"] for d in documents}
    first_rings = {
        neighbor
        for hit in hits
        for neighbor in (
            store.get_by_ids([hit])[0].metadata.get(key) for key in ("scar_prev_id", "scar_next_id")
        )
        if neighbor is not None
    }
    assert set(lazy.fetched) - first_rings, "the prefetch reached no second ring"
    assert set(lazy.looked_up) <= first_rings


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    chains=st.lists(
        st.lists(st.floats(0.0, 180.0), min_size=1, max_size=9), min_size=1, max_size=6
    ),
    budget=st.integers(3, 8),
)
def test_lazy_documents_give_the_answer_of_a_plain_dict(
    chains: list[list[float]], budget: int
) -> None:
    store, table = _corpus(chains)
    lazy = NeighborsWithVectors(store, table, lazy=True)
    eager = NeighborsWithVectors(store, table, lazy=False)
    expected = _answer(_retriever(store, eager).invoke("query", budget=budget))
    assert _answer(_retriever(store, lazy).invoke("query", budget=budget)) == expected
    assert set(lazy.looked_up) <= set(lazy.fetched)


def test_known_chunks_make_each_document_once_in_the_order_known() -> None:
    looked_up: list[str] = []
    fetched = RecordingMapping({"b": Document("B"), "c": Document("C")}, looked_up)
    known = KnownChunks()
    known.add("a", Document("A"))
    known.add_from("b", fetched)
    known.add_from("c", fetched)
    known.add_from("a", fetched)  # known already: kept as it was
    assert (list(known), len(known), "c" in known, "z" in known) == (
        ["a", "b", "c"],
        3,
        True,
        False,
    )
    assert looked_up == []
    assert (known["c"].page_content, known["c"].page_content, known["a"].page_content) == (
        "C",
        "C",
        "A",
    )
    assert looked_up == ["c"]
    with pytest.raises(KeyError):
        known["z"]
