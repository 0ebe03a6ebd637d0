"""Each private attribute ``scar_langchain._compat`` reads, pinned to pyproject.toml's ranges.

Every access is checked twice: the installed library is inside the range pyproject.toml allows
(read from the installed package's metadata, so reinstall after editing the ranges),
and the attribute exists and behaves as SCAR uses it. An upgrade that breaks one fails here,
loudly, instead of changing what SCAR reads or writes. So does a behaviour SCAR mirrors without
reaching into the library (Qdrant hits' ``_id`` and ``_collection_name`` metadata).
"""

from __future__ import annotations

import uuid
import warnings
from importlib.metadata import requires, version
from typing import Any

import chromadb
import pytest
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_qdrant import QdrantVectorStore
from packaging.requirements import Requirement
from qdrant_client import QdrantClient, models

from scar_langchain import _compat
from scar_langchain._stores import access_for

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # langchain-community is sunset
    from langchain_community.vectorstores import FAISS

#: The distribution whose private attribute (or behaviour) each access relies on, and its extra.
PINNED = {
    "faiss_filter": ("langchain-community", "faiss"),
    "chroma_collection": ("langchain-chroma", "chroma"),
    "chroma_max_batch_size": ("langchain-chroma", "chroma"),
    "qdrant hit metadata": ("langchain-qdrant", "qdrant"),
}
EMBEDDINGS = DeterministicFakeEmbedding(size=8)


def allowed(distribution: str, extra: str) -> Requirement:
    """The range pyproject.toml's ``extra`` gives ``distribution`` (as installed, ``pip -e``)."""
    found = [
        requirement
        for requirement in map(Requirement, requires("scar-retrieval") or [])
        if requirement.name == distribution
        and requirement.marker is not None
        and requirement.marker.evaluate({"extra": extra})
    ]
    assert len(found) == 1, f"pyproject.toml's [{extra}] extra pins {distribution} once"
    return found[0]


def test_every_compat_function_is_pinned() -> None:
    assert set(_compat.__all__) <= set(PINNED)


@pytest.mark.parametrize("access", sorted(PINNED))
def test_the_installed_version_is_in_pyprojects_range(access: str) -> None:
    distribution, extra = PINNED[access]
    requirement = allowed(distribution, extra)
    installed = version(distribution)
    assert requirement.specifier.contains(installed, prereleases=True), (
        f"{access} relies on {distribution} {requirement.specifier}, but {installed} is "
        "installed: check the access in scar_langchain/_compat.py, then widen the range"
    )


def faiss_store() -> Any:
    documents = [
        Document("one", metadata={"tenant": "a", "rank": 1}),
        Document("two", metadata={"tenant": "b", "rank": 2}),
        Document("three", metadata={"tenant": "a", "rank": 3}),
    ]
    return FAISS.from_documents(documents, EMBEDDINGS, ids=["1", "2", "3"])


@pytest.mark.parametrize(
    ("condition", "kept"),
    [
        ({"tenant": "a"}, ["1", "3"]),
        ({"rank": {"$gte": 2}}, ["2", "3"]),
        ({"tenant": {"$in": ["b"]}}, ["2"]),
        (lambda metadata: metadata["rank"] != 2, ["1", "3"]),
    ],
)
def test_faiss_filter_is_what_faiss_searches_with(condition: Any, kept: list[str]) -> None:
    store = faiss_store()
    test = _compat.faiss_filter(store, condition)
    held = {i: store.docstore.search(i) for i in ["1", "2", "3"]}
    assert [i for i, d in held.items() if test(d.metadata)] == kept
    hits = store.similarity_search("one", k=3, filter=condition, fetch_k=3)
    assert sorted(d.id for d in hits) == kept


def chroma_store() -> Chroma:
    store = Chroma(
        collection_name=f"scar-{uuid.uuid4().hex[:12]}",
        embedding_function=EMBEDDINGS,
        client=chromadb.EphemeralClient(),
    )
    store.add_documents([Document("one", metadata={"a": 1, "b": 2})], ids=["x"])
    return store


def test_chroma_collection_updates_metadata_by_merging_and_none_removes_a_key() -> None:
    store = chroma_store()
    collection = _compat.chroma_collection(store)
    assert isinstance(collection, chromadb.Collection)
    before = store.get(ids=["x"], include=["embeddings", "documents"])
    collection.update(ids=["x"], metadatas=[{"b": None, "c": 3}])
    after = store.get(ids=["x"], include=["embeddings", "documents", "metadatas"])
    assert after["metadatas"] == [{"a": 1, "c": 3}]
    assert after["documents"] == before["documents"]
    assert (after["embeddings"] == before["embeddings"]).all()


def test_chroma_max_batch_size_is_the_clients_positive_limit() -> None:
    size = _compat.chroma_max_batch_size(chroma_store())
    assert isinstance(size, int)
    assert size > 0


def test_qdrant_hits_carry_the_metadata_scars_reads_copy() -> None:
    client = QdrantClient(":memory:")
    vectors = models.VectorParams(size=8, distance=models.Distance.COSINE)
    client.create_collection("chunks", vectors_config=vectors)
    store = QdrantVectorStore(client=client, collection_name="chunks", embedding=EMBEDDINGS)
    point = str(uuid.UUID(int=7))
    store.add_documents([Document("one", metadata={"a": 1})], ids=[point])
    (hit,) = store.similarity_search("one", k=1)
    read = access_for(store).read([point], {})
    assert hit.metadata == {"a": 1, "_id": point, "_collection_name": "chunks"}
    assert read[point][0].metadata == hit.metadata
