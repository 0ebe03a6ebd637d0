"""Hypothesis over SCARRetriever with hostile chunks, in plain and budget mode, sync and async.

Two setups share one generator:

* **store**: an ``InMemoryVectorStore`` whose entries (text, metadata, vector) are written
  directly, so the test controls every vector. Only chunks marked searchable (with good vectors)
  can be search hits; the others hold NaN, infinite, zero, mis-sized or absent vectors and can
  only be reached as neighbours.
* **retriever**: a fixed base retriever that returns the generated hits as given (duplicates,
  chunks without any id, hits with bad vectors) over an ``InMemoryStore`` docstore that may lack
  some chunks.

Metadata links are missing, dangling, self-referencing, cyclic, cross-document or of the wrong
type; metadata chunk ids may be ints or claim another chunk's id.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.stores import InMemoryStore
from langchain_core.vectorstores import InMemoryVectorStore
from rel_support import (
    ANY_VECTOR_KINDS,
    chain_link,
    check_documented_failure,
    count_case,
    hashed_vector,
    link_target,
    make_topic,
    make_vector,
    pick,
    reachable,
    run_counted,
    usable_vector,
)

from scar_langchain import EmbeddingVectors, FallbackVectors, SCARRetriever

LANGCHAIN_CASES = 1000

DOCUMENT_IDS = ("doc-a", "doc-b", "doc-c")
#: Vector kinds a store may hold for a chunk that is reached only as a neighbour.
NEIGHBOUR_KINDS = tuple(kind for kind in ANY_VECTOR_KINDS if kind != "garbage")
#: Vector kinds of a hit in the retriever setup (the fallback embeds a missing one).
HIT_KINDS = ("good",) * 12 + ("nan", "inf", "zero", "wrong_dim", "missing")
QUERY = "what does the corpus say"


class QueryTable(Embeddings):
    """Embeds the query to a chosen vector and any chunk text to a hashed one of its dimension."""

    def __init__(self, query_vector: list[float]) -> None:
        self.query_vector = query_vector
        self.dimension = len(query_vector)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [hashed_vector(text, self.dimension).tolist() for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return list(self.query_vector)


class TableVectors:
    """A NeighborVectorSource answering from a table; absent entries are left out."""

    def __init__(self, vectors: Mapping[str, Any]) -> None:
        self.vectors = vectors

    def vectors_for(self, chunks: Mapping[str, Document]) -> dict[str, Any]:
        return {c: self.vectors[c] for c in chunks if self.vectors.get(c) is not None}

    async def avectors_for(self, chunks: Mapping[str, Document]) -> dict[str, Any]:
        return self.vectors_for(chunks)


class FixedRetriever(BaseRetriever):
    """Returns its documents as given, whatever the query or k."""

    documents: list[Document]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return list(self.documents)


@dataclass
class Case:
    """One generated retrieval scenario and the retriever settings to run it with."""

    setup: str
    dimension: int
    chunks: list[Document]
    kinds: dict[str, str]
    vectors: dict[str, Any]
    searchable: set[str]
    hits: list[Document]
    stored: set[str]
    query_vector: list[float]
    knobs: dict[str, Any]

    def metadata_of(self, chunk_id: str) -> dict[str, Any]:
        for chunk in self.chunks:
            if chunk.id == chunk_id:
                return dict(chunk.metadata)
        return {}


def random_case(rng: np.random.Generator, prefix: str) -> Case:
    setup = pick(rng, ["store", "store", "retriever"])
    dimension = int(rng.integers(2, 7))
    ids = [f"{prefix}{i}" for i in range(int(rng.integers(1, 11)))]
    chunks: list[Document] = []
    for index, chunk_id in enumerate(ids):
        metadata: dict[str, Any] = {"source": "generated"}
        claimed = pick(rng, ["own"] * 6 + ["absent", "int", "other"])
        if claimed == "own":
            metadata["scar_chunk_id"] = chunk_id
        elif claimed == "int":
            metadata["scar_chunk_id"] = int(rng.integers(100))
        elif claimed == "other":
            metadata["scar_chunk_id"] = pick(rng, ids)  # a duplicate claim
        document = pick(rng, [*DOCUMENT_IDS, None, 7])
        if document is not None:
            metadata["scar_document_id"] = document
        for side, key in enumerate(("scar_prev_id", "scar_next_id")):
            if rng.random() < 0.9:
                link = chain_link(rng, ids, index, side)
                if link is not None:
                    metadata[key] = link
        chunks.append(Document(f"passage {chunk_id} text", id=chunk_id, metadata=metadata))
    searchable = {c for c in ids if rng.random() < 0.6}
    topic = make_topic(rng, dimension)
    bad_hits = rng.random() < 0.2
    kinds: dict[str, str] = {}
    vectors: dict[str, Any] = {}
    for chunk_id in ids:
        if setup == "store" and chunk_id in searchable:
            kind = "good"
        elif setup == "store":
            kind = pick(rng, NEIGHBOUR_KINDS)
        else:
            kind = pick(rng, HIT_KINDS) if bad_hits else "good"
        kinds[chunk_id] = kind
        # Search hits need a vector the store's own cosine can use: ordinary scale.
        extreme = not (setup == "store" and chunk_id in searchable)
        vectors[chunk_id] = make_vector(rng, dimension, kind, extreme_scale=extreme, topic=topic)
    stored = {c for c in ids if rng.random() < 0.85}
    hits: list[Document] = []
    if setup == "retriever":
        for _ in range(int(rng.integers(0, 7))):
            if rng.random() < 0.1:
                hits.append(Document(f"a hit without any id {int(rng.integers(3))}"))
            else:
                hits.append(pick(rng, chunks))
    query_vector = make_vector(rng, dimension, "good", extreme_scale=False, topic=topic)
    budget_mode = rng.random() < 0.5
    k = int(rng.integers(1, 5))
    knobs: dict[str, Any] = {
        "k": k,
        "budget": int(rng.integers(k, k + 7)) if budget_mode else None,
        "lambda_": pick(rng, [0.0, 0.1, float(rng.uniform(0.0, 2.0))]),
        "gamma": pick(rng, [0.8, 0.5, 1.0 - float(rng.random())]),
        "window": pick(rng, [1, 2, 3] + ([None] if budget_mode else [])),
        "direction": pick(rng, ["both", "previous", "next"]),
        "continuity_bonus": pick(rng, [0.0, 0.2, float(rng.uniform(0.0, 1.0))]),
        "return_chunks": bool(rng.random() < 0.5),
        "on_error": pick(rng, ["raise", "return_seeds"]),
    }
    return Case(
        setup,
        dimension,
        chunks,
        kinds,
        vectors,
        searchable,
        hits,
        stored,
        [float(v) for v in query_vector],
        knobs,
    )


@st.composite
def cases(draw: st.DrawFn) -> Case:
    prefix = draw(st.text(max_size=3))
    return random_case(np.random.default_rng(draw(st.integers(0, 2**64 - 1))), prefix)


def build_retriever(case: Case) -> tuple[SCARRetriever, InMemoryVectorStore]:
    embeddings = QueryTable(case.query_vector)
    store = InMemoryVectorStore(embeddings)
    for chunk in case.chunks:
        if chunk.id in case.stored or chunk.id in case.searchable:
            vector = case.vectors[chunk.id]
            store.store[chunk.id] = {
                "id": chunk.id,
                "vector": None if vector is None else np.asarray(vector).tolist(),
                "text": chunk.page_content,
                "metadata": dict(chunk.metadata),
            }
    if case.setup == "store":
        searchable = frozenset(case.searchable)
        retriever = SCARRetriever(
            vectorstore=store,
            search_kwargs={"filter": lambda document: document.id in searchable},
            **case.knobs,
        )
        return retriever, store
    docstore = InMemoryStore()
    docstore.mset([(c.id, c) for c in case.chunks if c.id in case.stored])
    retriever = SCARRetriever(
        base_retriever=FixedRetriever(documents=case.hits),
        base_retriever_k_kwarg=None,
        docstore=docstore,
        embeddings=embeddings,
        vector_source=FallbackVectors(TableVectors(case.vectors), EmbeddingVectors(embeddings)),
        **case.knobs,
    )
    return retriever, store


def retrieved_ids(case: Case, store: InMemoryVectorStore) -> list[str]:
    """The hits the retriever sees, best first, as chunk ids (the base retriever's own answer)."""
    if case.setup == "store":
        found = store.similarity_search_by_vector(
            case.query_vector, k=len(case.chunks), filter=lambda d: d.id in case.searchable
        )
        return [d.id for d in found if d.id is not None]
    # A hit without an id is known by its text (the retriever gives it a stand-in id).
    ids = [hit.id if hit.id else f"<unidentified>{hit.page_content}" for hit in case.hits]
    return list(dict.fromkeys(ids))


def output_chunks(documents: list[Document]) -> list[tuple[str, str, dict[str, Any]]]:
    """Every (chunk id, origin, record) the output holds, in output order."""
    chunks: list[tuple[str, str, dict[str, Any]]] = []
    for document in documents:
        metadata = document.metadata
        if "scar_chunks" in metadata:
            chunks.extend((r["chunk_id"], r["origin"], r) for r in metadata["scar_chunks"])
        elif "scar_origin" in metadata and metadata.get("scar_expanded", True):
            record = {k[5:]: v for k, v in metadata.items() if k.startswith("scar_")}
            chunks.append((metadata["scar_chunk_id"], metadata["scar_origin"], record))
        else:
            chunks.extend((c, "seed", {}) for c in metadata["scar_chunk_ids"])
    return chunks


def comparable(documents: list[Document]) -> list[tuple[Any, ...]]:
    return [(d.id, d.page_content, repr(sorted(d.metadata.items()))) for d in documents]


def vector_is_bad(case: Case, chunk_id: str) -> bool:
    """A chunk whose stored vector SCAR cannot use (a missing one is embedded instead)."""
    value = case.vectors.get(chunk_id)
    return value is not None and not usable_vector(value, case.dimension)


@settings(
    max_examples=LANGCHAIN_CASES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=cases())
def langchain_property(case: Case) -> None:
    count_case("langchain SCARRetriever")
    retriever, store = build_retriever(case)
    ranked = retrieved_ids(case, store)
    k, budget = case.knobs["k"], case.knobs["budget"]
    kept = [c for c in ranked[:k] if not c.startswith("<unidentified>")]
    bad_kept = any(vector_is_bad(case, c) for c in kept)
    bad_later = any(vector_is_bad(case, c) for c in ranked[k:])
    try:
        output: Any = retriever.invoke(QUERY)
    except Exception as error:
        output = error
    if isinstance(output, BaseException):
        # Only a retrieved chunk with an unusable vector may fail a query, and only on "raise".
        check_documented_failure(output)
        assert case.knobs["on_error"] == "raise"
        assert bad_kept or (budget is None and bad_later), output
        return
    chunks = output_chunks(output)
    ids = [c for c, _, _ in chunks]
    # Nothing twice; every kept hit present (unidentified ones under their stand-in id).
    assert len(ids) == len(set(ids)), ids
    assert set(kept) <= set(ids)
    stand_ins = {c for c in ids if c.startswith("scar-unidentified:")}
    assert len(stand_ins) >= sum(c.startswith("<unidentified>") for c in ranked[:k])
    unexpanded = [d for d in output if d.metadata.get("scar_expanded") is False]
    if unexpanded:
        assert len(unexpanded) == len(output)
        assert case.knobs["on_error"] == "return_seeds"
        assert bad_kept or (budget is None and bad_later)
        named = [c for c in ids if not c.startswith("scar-unidentified:")]
        assert named == [c for c in ranked[: len(ids)] if not c.startswith("<unidentified>")]
    else:
        assert not bad_kept
    if budget is not None:
        assert len(ids) <= budget
    # Every added neighbour is linked to the output, within the window, on one document, and
    # has a usable vector.
    seeds = [c for c, origin, _ in chunks if origin == "seed"]
    assert set(seeds) <= {*ranked, *stand_ins}
    links = {
        chunk.id: (chunk.metadata.get("scar_prev_id"), chunk.metadata.get("scar_next_id"))
        for chunk in case.chunks
    }
    window = case.knobs["window"]
    if budget is None and window is None:
        window = 1
    allowed = reachable(seeds, links, window, case.knobs["direction"])
    for chunk_id, origin, record in chunks:
        assert chunk_id in allowed, (chunk_id, origin)
        if origin == "seed":
            continue
        assert not vector_is_bad(case, chunk_id)
        assert chunk_id in case.stored or chunk_id in case.searchable or chunk_id in ranked
        via = record["via_id"]
        side = 0 if record["direction"] == "previous" else 1
        assert link_target(links[via][side], via) == chunk_id
        via_document = case.metadata_of(via).get("scar_document_id")
        own_document = case.metadata_of(chunk_id).get("scar_document_id")
        if isinstance(via_document, str) and isinstance(own_document, str):
            assert via_document == own_document
    # Deterministic: a second run, through the async path, gives the very same documents.
    assert comparable(asyncio.run(retriever.ainvoke(QUERY))) == comparable(output)


@pytest.mark.slow
def test_retriever_survives_hostile_chunks() -> None:
    run_counted("langchain SCARRetriever", langchain_property, LANGCHAIN_CASES)
