"""Links that disagree with each other never lose a seed (found by the hypothesis suite).

Chunk ``S``'s previous link names ``n``, but ``n``'s next link names ``Y``, which ``V`` also
claims as its next chunk. SCAR walks from ``S`` to ``n`` and accepts it. Assembly used to follow
next links only, so ``n`` became a passage of its own, ranked with ``S``; the LangChain retriever
then cut the passages to ``k`` and dropped the seed ``W``.
"""

from __future__ import annotations

import numpy as np
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore

from scar_core import NeighborGraph, expand
from scar_core.assembly import ChunkRecord, assemble_passages
from scar_langchain import SCARRetriever

QUERY_VECTOR = [1.0, 0.0, 0.0]
VECTORS = {
    "S": [1.0, 0.01, 0.0],
    "V": [1.0, 0.05, 0.0],
    "W": [1.0, 0.3, 0.3],
    "n": [1.0, 0.02, 0.02],
    "Y": [1.0, 0.05, 0.05],
}
LINKS: dict[str, tuple[str | None, str | None]] = {
    "S": ("n", None),
    "n": (None, "Y"),
    "V": (None, "Y"),
    "Y": ("V", None),
    "W": (None, None),
}


def test_a_neighbour_stays_in_the_passage_of_the_chunk_it_was_reached_from() -> None:
    graph = NeighborGraph(LINKS)
    result = expand(QUERY_VECTOR, ["S", "V", "W"], graph, VECTORS, 0.1, 0.5)
    assert set(result.chunk_ids) == {"S", "V", "W", "n", "Y"}
    records = {c: ChunkRecord(chunk_id=c, text=f"text {c}") for c in VECTORS}
    passages = assemble_passages(result, records, graph)
    assert [p.chunk_ids for p in passages] == [["n", "S"], ["V", "Y"], ["W"]]
    assert all(any(c.origin == "seed" for c in p.chunks) for p in passages)


class FixedQuery(Embeddings):
    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise AssertionError("every vector is in the store")

    def embed_query(self, text: str) -> list[float]:
        return list(QUERY_VECTOR)


def test_the_retriever_returns_every_one_of_its_k_seeds() -> None:
    store = InMemoryVectorStore(FixedQuery())
    for chunk_id, vector in VECTORS.items():
        previous_id, next_id = LINKS[chunk_id]
        metadata = {"scar_chunk_id": chunk_id, "scar_prev_id": previous_id, "scar_next_id": next_id}
        store.store[chunk_id] = {
            "id": chunk_id,
            "vector": vector,
            "text": f"text {chunk_id}",
            "metadata": {key: value for key, value in metadata.items() if value is not None},
        }
    hits = {"S", "V", "W"}
    retriever = SCARRetriever(
        vectorstore=store,
        budget=None,
        k=3,
        gamma=0.5,
        search_kwargs={"filter": lambda document: document.id in hits},
    )
    ranked = store.similarity_search_by_vector(QUERY_VECTOR, k=3, filter=lambda d: d.id in hits)
    assert [d.id for d in ranked] == ["S", "V", "W"]
    passages = retriever.invoke("q")
    assert [p.metadata["scar_chunk_ids"] for p in passages] == [["n", "S"], ["V", "Y"], ["W"]]
    cosine = float(np.dot(VECTORS["W"], QUERY_VECTOR) / np.linalg.norm(VECTORS["W"]))
    assert passages[2].metadata["scar_score"] == cosine
