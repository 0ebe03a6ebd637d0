"""One corpus in real LangChain vector stores, with embeddings and stores that count their calls.

Shared by ``tests/langchain/test_stores.py``, ``tests/postgres/test_pg_langchain.py`` and
``benchmarks/store_matrix.py``. Vectors are unit float32 values (held as Python floats), so
every store keeps exactly the numbers the in-memory store keeps, L2 and cosine rank alike, and
each store's answers can be compared with the in-memory path's. Each document is a random walk:
neighbours are similar but not equal, so SCAR adds some and rejects others.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore

from scar_langchain import link_chunks
from scar_langchain._links import NEXT_ID_KEY, PREVIOUS_ID_KEY


@dataclass(frozen=True)
class Corpus:
    """Chunks as a splitter returns them (``split``), the same chunks linked, vectors, queries."""

    split: list[Document]
    linked: list[Document]
    vectors: dict[str, list[float]]  # by text
    queries: dict[str, list[float]]  # by query text
    dimension: int

    @property
    def ids(self) -> list[str]:
        return [d.id or "" for d in self.linked]


def unit_float32(vector: np.ndarray) -> list[float]:
    return [float(x) for x in (vector / np.linalg.norm(vector)).astype(np.float32)]


def make_corpus(documents: int = 6, chunks: int = 8, dimension: int = 16, seed: int = 7) -> Corpus:
    rng = np.random.default_rng(seed)
    split: list[Document] = []
    walks: list[list[float]] = []
    for doc in range(documents):
        current = rng.normal(size=dimension)
        for position in range(chunks):
            current = current + (rng.normal(scale=0.9, size=dimension) if position else 0)
            walks.append(unit_float32(current))
            metadata = {"source": f"doc-{doc}.txt", "start_index": 25 * position, "topic": doc % 3}
            split.append(Document(f"document {doc} chunk {position} text", metadata=metadata))
    targets = rng.choice(len(walks), size=8, replace=False)
    queries = {
        f"query {n}": unit_float32(np.asarray(walks[t]) + rng.normal(scale=0.35, size=dimension))
        for n, t in enumerate(targets)
    }
    vectors = {d.page_content: w for d, w in zip(split, walks, strict=True)}
    return Corpus(split, link_chunks(split), vectors, queries, dimension)


class CountingEmbeddings(Embeddings):
    """Looks vectors up by text; counts the calls and texts of ``embed_documents``."""

    def __init__(self, corpus: Corpus) -> None:
        self.table = corpus.vectors | corpus.queries
        self.dimension = corpus.dimension
        self.calls = 0
        self.texts_embedded = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        self.texts_embedded += len(texts)
        return [self.embed_query(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        # Texts outside the corpus (QdrantVectorStore embeds "dummy_text" to check the size).
        return list(self.table.get(text, [1.0] + [0.0] * (self.dimension - 1)))

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_documents(texts)

    async def aembed_query(self, text: str) -> list[float]:
        return self.embed_query(text)


#: Store round trips SCAR made (``get``/``aget``/``scroll`` calls), by store kind, and by
#: ``"kind.method"`` too.
ROUND_TRIPS: dict[str, int] = {}


def counted(kind: str, method: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a store method so that each call counts one round trip for ``kind``."""

    def call(*args: Any, **kwargs: Any) -> Any:
        for key in (kind, f"{kind}.{method.__name__}"):
            ROUND_TRIPS[key] = ROUND_TRIPS.get(key, 0) + 1
        return method(*args, **kwargs)

    return call


def memory_store(embeddings: Embeddings, documents: list[Document], ids: list[Any]) -> Any:
    store = InMemoryVectorStore(embeddings)
    store.add_documents(documents, ids=ids)
    return store


def faiss_store(embeddings: Embeddings, documents: list[Document], ids: list[Any]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # langchain-community is sunset
        from langchain_community.vectorstores import FAISS
    return FAISS.from_documents(documents, embeddings, ids=ids)


def chroma_store(embeddings: Embeddings, documents: list[Document], ids: list[Any]) -> Any:
    import chromadb
    from langchain_chroma import Chroma

    class CountingChroma(Chroma):
        """The real Chroma store; ``get`` (SCAR's only read) counts its calls."""

        def get(self, *args: Any, **kwargs: Any) -> Any:
            return counted("chroma", super().get)(*args, **kwargs)

    store = CountingChroma(
        collection_name=f"scar-{uuid.uuid4().hex[:12]}",
        embedding_function=embeddings,
        client=chromadb.EphemeralClient(),
    )
    store.add_documents(documents, ids=ids)
    return store


def qdrant_store(embeddings: Embeddings, documents: list[Document], ids: list[Any]) -> Any:
    from langchain_qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient, models

    class CountingQdrantClient(QdrantClient):
        """The real (local) Qdrant client; ``scroll`` (SCAR's only read) counts its calls."""

        def scroll(self, *args: Any, **kwargs: Any) -> Any:
            return counted("qdrant", super().scroll)(*args, **kwargs)

    client = CountingQdrantClient(":memory:")
    name = f"scar-{uuid.uuid4().hex[:12]}"
    dimension = len(embeddings.embed_query(documents[0].page_content))
    vectors = models.VectorParams(size=dimension, distance=models.Distance.COSINE)
    client.create_collection(name, vectors_config=vectors)
    store = QdrantVectorStore(client=client, collection_name=name, embedding=embeddings)
    store.add_documents(documents, ids=ids)
    return store


def pgvector_store(
    engine: Any,
    table: str,
    embeddings: Embeddings,
    documents: list[Document],
    ids: list[Any],
    **table_options: Any,
) -> Any:
    """A new table on ``engine`` (a ``PGEngine``) holding ``documents``, in a counting store."""
    from langchain_postgres import PGVectorStore

    class CountingPGVectorStore(PGVectorStore):
        """The real PGVectorStore; ``get``/``aget`` (SCAR's only reads) count their calls."""

        def get(self, *args: Any, **kwargs: Any) -> Any:
            return counted("pgvector", super().get)(*args, **kwargs)

        async def aget(self, *args: Any, **kwargs: Any) -> Any:
            return await counted("pgvector", super().aget)(*args, **kwargs)

    dimension = len(embeddings.embed_query(documents[0].page_content))
    engine.init_vectorstore_table(table, dimension, **table_options)
    columns = [c.name for c in table_options.get("metadata_columns", [])]
    store = CountingPGVectorStore.create_sync(engine, embeddings, table, metadata_columns=columns)
    store.add_documents(documents, ids=ids)
    return store


#: The embedded stores, each built the way its users build it (``add_documents``).
STORES: dict[str, Callable[[Embeddings, list[Document], list[Any]], VectorStore]] = {
    "memory": memory_store,
    "faiss": faiss_store,
    "chroma": chroma_store,
    "qdrant": qdrant_store,
}


def store_ids(count: int, seed: int = 3) -> list[str]:
    """Store ids unrelated to ``link_chunks``' (UUIDs, as Qdrant and PGVectorStore demand)."""
    rng = np.random.default_rng(seed)
    return [str(uuid.UUID(int=int(rng.integers(2**62)) << 64 | n)) for n in range(count)]


def comparable(documents: list[Document]) -> list[tuple[Any, ...]]:
    """What must match across stores: ids, texts, and metadata less scores and store extras."""
    loose = {"_id", "_collection_name", "scar_score", "scar_decision"}
    return [
        (d.id, d.page_content, {k: v for k, v in d.metadata.items() if k not in loose})
        for d in documents
    ]


def scores(documents: list[Document]) -> list[float]:
    return [float(d.metadata["scar_score"]) for d in documents]


def expected_links(corpus: Corpus, id_of: dict[str, str]) -> dict[str, tuple[Any, Any]]:
    """The links link_chunks writes for the corpus's split, its ids translated to store ids."""
    store_id = {c.id: id_of[c.page_content] for c in corpus.linked}
    return {
        store_id[c.id]: tuple(
            store_id.get(c.metadata.get(key)) for key in (PREVIOUS_ID_KEY, NEXT_ID_KEY)
        )
        for c in link_chunks(corpus.split)
    }
