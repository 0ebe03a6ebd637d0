"""SCAR for LangChain: a retriever that adds a chunk's neighbours only when they continue it.

Example:
    .. code-block:: python

        from scar_langchain import SCARRetriever, link_chunks

        chunks = link_chunks(splitter.split_documents(docs))
        vectorstore.add_documents(chunks, ids=[chunk.id for chunk in chunks])
        retriever = SCARRetriever(vectorstore=vectorstore)  # budget mode: 10 chunks, 3 kept
        retriever.invoke("question")

        paper = SCARRetriever(vectorstore=vectorstore, budget=None, k=4)  # the paper's rule
"""

from __future__ import annotations

from scar_langchain._embeddings import ScarEmbeddings
from scar_langchain._links import (
    DEFAULT_KEYS,
    ChunkLinks,
    ChunkMetadataKeys,
    link_chunks,
    read_links,
)
from scar_langchain._neighbors import (
    DocstoreNeighbors,
    FetchedChunks,
    NeighborSource,
    SearchHits,
    VectorSearchSource,
    VectorStoreNeighbors,
)
from scar_langchain._retriever import SCARRetriever
from scar_langchain._vectors import (
    EmbeddingVectors,
    FaissStoreVectors,
    FallbackVectors,
    InMemoryStoreVectors,
    NeighborVectorSource,
    default_vector_source,
)
from scar_langchain.pgvector import PGVectorChunks, PGVectorStoreVectors, PGVectorTable

__all__ = [
    "DEFAULT_KEYS",
    "ChunkLinks",
    "ChunkMetadataKeys",
    "DocstoreNeighbors",
    "EmbeddingVectors",
    "FaissStoreVectors",
    "FallbackVectors",
    "FetchedChunks",
    "InMemoryStoreVectors",
    "NeighborSource",
    "NeighborVectorSource",
    "PGVectorChunks",
    "PGVectorStoreVectors",
    "PGVectorTable",
    "SCARRetriever",
    "ScarEmbeddings",
    "SearchHits",
    "VectorSearchSource",
    "VectorStoreNeighbors",
    "default_vector_source",
    "link_chunks",
    "read_links",
]
