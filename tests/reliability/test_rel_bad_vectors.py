"""A neighbour's unusable vector is skipped with a warning naming it; a seed's is a clear error.

Both adapters, both modes, every kind of unusable vector: NaN, infinite, zero and of another
dimension.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.stores import InMemoryStore
from langchain_core.vectorstores import InMemoryVectorStore
from llama_index.core.schema import (
    NodeRelationship,
    NodeWithScore,
    QueryBundle,
    RelatedNodeInfo,
    TextNode,
)
from llama_index.core.storage.docstore import SimpleDocumentStore
from rel_support import HashEmbedder, recorded_logs

from scar_core.errors import InvalidVectorError
from scar_langchain import InMemoryStoreVectors, ScarEmbeddings, SCARRetriever
from scar_llamaindex import SCARNodePostprocessor

GOOD = {"a": [1.0, 0.1, 0.0], "b": [1.0, 0.0, 0.0], "c": [0.9, 0.2, 0.1]}
BAD = {
    "nan": [math.nan, 1.0, 0.0],
    "inf": [math.inf, 0.0, 0.0],
    "zero": [0.0, 0.0, 0.0],
    "wrong_dim": [1.0, 0.0],
}
QUERY_VECTOR = [1.0, 0.0, 0.0]


class QueryOnly(HashEmbedder):
    """Embeds the query to ``QUERY_VECTOR``; every chunk's vector is already stored."""

    def embed_query(self, text: str) -> Any:
        import numpy as np

        return np.asarray(QUERY_VECTOR, dtype=np.float32)


def lc_run(bad: str, where: str, budget: int | None) -> list[Document]:
    vectors = dict(GOOD)
    vectors[where] = BAD[bad]
    store = InMemoryVectorStore(ScarEmbeddings(QueryOnly(3)))
    links = {"a": (None, "b"), "b": ("a", "c"), "c": ("b", None)}
    for chunk_id, vector in vectors.items():
        previous_id, next_id = links[chunk_id]
        metadata = {"scar_chunk_id": chunk_id, "scar_document_id": "doc"}
        metadata.update({"scar_prev_id": previous_id} if previous_id else {})
        metadata.update({"scar_next_id": next_id} if next_id else {})
        store.store[chunk_id] = {
            "id": chunk_id,
            "vector": vector,
            "text": f"text {chunk_id}",
            "metadata": metadata,
        }
    # The seed "b" comes from a base retriever: a store's own search over a bad vector would
    # fail first, and that is the base retriever failing, not SCAR. Chunks come from a
    # docstore, vectors from the store's table.
    docstore = InMemoryStore()
    docstore.mset([(d.id, d) for d in store.get_by_ids(list(vectors)) if d.id])
    retriever = SCARRetriever(
        base_retriever=Fixed(documents=store.get_by_ids(["b"])),
        base_retriever_k_kwarg=None,
        docstore=docstore,
        embeddings=ScarEmbeddings(QueryOnly(3)),
        vector_source=InMemoryStoreVectors(store),
        budget=budget,
        k=1,
        gamma=0.1,
        return_chunks=True,
    )
    return retriever.invoke("q")


class Fixed(BaseRetriever):
    documents: list[Document]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return list(self.documents)


def li_run(bad: str, where: str, budget: int | None) -> list[NodeWithScore]:
    vectors = dict(GOOD)
    vectors[where] = BAD[bad]
    nodes = {i: TextNode(id_=i, text=f"text {i}", embedding=v) for i, v in vectors.items()}
    nodes["a"].relationships[NodeRelationship.NEXT] = RelatedNodeInfo(node_id="b")
    nodes["b"].relationships[NodeRelationship.PREVIOUS] = RelatedNodeInfo(node_id="a")
    nodes["b"].relationships[NodeRelationship.NEXT] = RelatedNodeInfo(node_id="c")
    nodes["c"].relationships[NodeRelationship.PREVIOUS] = RelatedNodeInfo(node_id="b")
    docstore = SimpleDocumentStore()
    docstore.add_documents(list(nodes.values()))
    scar = SCARNodePostprocessor(docstore=docstore, budget=budget, k=1, gamma=0.1)
    return scar.postprocess_nodes(
        [NodeWithScore(node=nodes["b"], score=0.9)], QueryBundle("q", embedding=QUERY_VECTOR)
    )


@pytest.mark.parametrize("budget", [None, 3])
@pytest.mark.parametrize("bad", sorted(BAD))
@pytest.mark.parametrize("adapter", ["langchain", "llamaindex"])
def test_a_neighbour_with_an_unusable_vector_is_skipped_with_a_warning_naming_it(
    adapter: str, bad: str, budget: int | None
) -> None:
    with recorded_logs("scar_core", "scar_langchain", "scar_llamaindex") as logs:
        if adapter == "langchain":
            ids = [d.id for d in lc_run(bad, "c", budget)]
        else:
            ids = [n.node.node_id for n in li_run(bad, "c", budget)]
    assert ids == ["a", "b"]  # the good neighbour added, the bad one skipped, the seed kept
    warnings = [m for m in logs.messages if "'c'" in m]
    assert warnings, logs.messages
    assert all("skipped" in m for m in warnings)


@pytest.mark.parametrize("budget", [None, 3])
@pytest.mark.parametrize("bad", sorted(BAD))
@pytest.mark.parametrize("adapter", ["langchain", "llamaindex"])
def test_a_seed_with_an_unusable_vector_is_an_error_naming_it(
    adapter: str, bad: str, budget: int | None
) -> None:
    run = lc_run if adapter == "langchain" else li_run
    with pytest.raises(InvalidVectorError, match="seed 'b'"):
        run(bad, "b", budget)
