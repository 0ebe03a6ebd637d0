"""Benchmark 3: chunk embeddings per query for each way SCAR gets vectors.

Every setup runs the same queries twice. The first pass is cold; the second repeats them, so a
cache is warm. A counting embedding model reports how many chunk texts were embedded per query
(the query itself is embedded once per query by the LangChain retriever on every setup, and given
pre-embedded to LlamaIndex). Target: 0 for the store and cache sources after warm-up.

Usage::

    python benchmarks/embedding_calls.py
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from bench_langchain import CorpusEmbeddings, load_langchain_table
from bench_postgres import pgvector_server
from bench_support import (
    Corpus,
    chunk_metadata,
    machine_summary,
    make_corpus,
    make_queries,
    markdown_table,
    write_result,
)
from langchain_classic.embeddings import CacheBackedEmbeddings
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.stores import InMemoryByteStore, InMemoryStore
from langchain_core.vectorstores import InMemoryVectorStore

from scar_langchain import EmbeddingVectors, PGVectorChunks, PGVectorTable, SCARRetriever

QUERIES = 20


def per_query(
    model: Any, run: Callable[[str], object], queries: Sequence[str]
) -> tuple[float, float]:
    """Chunk texts embedded per query: (cold pass, warm pass over the same queries)."""
    passes = []
    for _ in range(2):
        before = model.texts_embedded
        for query in queries:
            run(query)
        passes.append((model.texts_embedded - before) / len(queries))
    return passes[0], passes[1]


def documents_of(corpus: Corpus) -> list[Document]:
    return [
        Document(
            id=corpus.chunk_id(row),
            page_content=corpus.text(row),
            metadata=chunk_metadata(corpus, row),
        )
        for row in range(corpus.size)
    ]


def langchain_rows(corpus: Corpus, server: Any) -> list[list[object]]:
    query_vectors = make_queries(corpus, QUERIES)
    queries = {f"query {i}": vector.tolist() for i, vector in enumerate(query_vectors)}
    texts = list(queries)
    documents = documents_of(corpus)
    rows: list[list[object]] = []

    def add(
        source: str, build: Callable[[CorpusEmbeddings, dict[str, Any]], SCARRetriever]
    ) -> None:
        for mode, options in (("budget=10", {}), ("plain", {"budget": None, "k": 4})):
            model = CorpusEmbeddings(corpus, queries)
            retriever = build(model, options)
            model.texts_embedded = 0
            cold, warm = per_query(model, retriever.invoke, texts)
            rows.append(["LangChain", source, mode, f"{cold:.1f}", f"{warm:.1f}"])

    def memory_store(model: CorpusEmbeddings) -> InMemoryVectorStore:
        store = InMemoryVectorStore(model)
        store.add_documents(documents, ids=corpus.chunk_ids())
        return store

    add(
        "store: InMemoryVectorStore (default)",
        lambda m, o: SCARRetriever(vectorstore=memory_store(m), **o),
    )

    from langchain_community.vectorstores import FAISS

    def faiss_store(model: CorpusEmbeddings) -> Any:
        return FAISS.from_documents(documents, model, ids=corpus.chunk_ids())

    add("store: FAISS (default)", lambda m, o: SCARRetriever(vectorstore=faiss_store(m), **o))

    from langchain_postgres import PGVectorStore

    table = "calls_lc"
    engine, _ = load_langchain_table(server, corpus, table)
    chunks = PGVectorChunks(server.get_uri(driver="psycopg"), PGVectorTable(table))
    add(
        "store: PGVectorStore (default: its table, read with the store's connection settings)",
        lambda m, o: SCARRetriever(vectorstore=PGVectorStore.create_sync(engine, m, table), **o),
    )
    add(
        "store: PGVectorStore + PGVectorChunks",
        lambda m, o: SCARRetriever(
            vectorstore=PGVectorStore.create_sync(engine, m, table),
            neighbor_source=chunks,
            vector_source=chunks,
            **o,
        ),
    )
    add(
        "store: PGVectorStore + search_source=PGVectorChunks",
        lambda m, o: SCARRetriever(
            vectorstore=PGVectorStore.create_sync(engine, m, table), search_source=chunks, **o
        ),
    )

    def docstore_setup(
        model: CorpusEmbeddings, vectors: Embeddings, options: dict[str, Any]
    ) -> SCARRetriever:
        """Seeds from a retriever that exposes no vectors; chunks from a docstore."""
        docstore = InMemoryStore()
        docstore.mset(
            [(document.id, document) for document in documents if document.id is not None]
        )
        base = memory_store(model).as_retriever()
        return SCARRetriever(
            base_retriever=base,
            docstore=docstore,
            embeddings=model,
            vector_source=EmbeddingVectors(vectors),
            **options,
        )

    add(
        "cache: EmbeddingVectors(CacheBackedEmbeddings)",
        lambda m, o: docstore_setup(
            m, CacheBackedEmbeddings.from_bytes_store(m, InMemoryByteStore(), namespace="bench"), o
        ),
    )
    add("re-embed: EmbeddingVectors(model)", lambda m, o: docstore_setup(m, m, o))
    chunks.close()
    return rows


def llamaindex_rows(corpus: Corpus, server: Any) -> list[list[object]]:
    from e2e_latency import llamaindex_embed_model, llamaindex_nodes, load_llamaindex_table
    from llama_index.core import VectorStoreIndex
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.bridge.pydantic import PrivateAttr
    from llama_index.core.schema import QueryBundle
    from llama_index.core.storage.docstore import SimpleDocumentStore

    from scar_llamaindex import PGVectorNodeSource, SCARNodePostprocessor, create_node_id_index

    class CountingEmbedding(BaseEmbedding):
        _rows: dict[str, int] = PrivateAttr()
        _vectors: Any = PrivateAttr()
        texts_embedded: int = 0

        def __init__(self) -> None:
            super().__init__(model_name="counting")
            self._rows = {corpus.text(row): row for row in range(corpus.size)}
            self._vectors = corpus.vectors

        def _get_text_embedding(self, text: str) -> list[float]:
            self.texts_embedded += 1
            return self._vectors[self._rows[text]].tolist()

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            return [self._get_text_embedding(text) for text in texts]

        def _get_query_embedding(self, query: str) -> list[float]:
            raise AssertionError("queries come embedded")

        async def _aget_query_embedding(self, query: str) -> list[float]:
            raise AssertionError("queries come embedded")

    class NoCache:
        """A vector cache that never hits: the postprocessor re-embeds every time."""

        def get_many(self, model: str, texts: Sequence[str]) -> list[None]:
            return [None] * len(texts)

        def put_many(self, model: str, texts: Sequence[str], vectors: Any) -> None:
            return None

    query_vectors = make_queries(corpus, QUERIES)
    bundles = {
        f"query {i}": QueryBundle(query_str=f"query {i}", embedding=v.tolist())
        for i, v in enumerate(query_vectors)
    }
    nodes = llamaindex_nodes(corpus)
    embedded = [node.model_copy() for node in nodes]
    for row, node in enumerate(embedded):
        node.embedding = corpus.vectors[row].tolist()
    memory_index = VectorStoreIndex(embedded, embed_model=llamaindex_embed_model())
    pg_store = load_llamaindex_table(server, corpus, "calls_li")
    pg_index = VectorStoreIndex.from_vector_store(pg_store, embed_model=llamaindex_embed_model())
    create_node_id_index(pg_store)
    docstore = SimpleDocumentStore()
    docstore.add_documents(nodes)  # nodes without embeddings: nothing to read vectors from
    rows: list[list[object]] = []

    def add(
        source: str,
        index: Any,
        build: Callable[[CountingEmbedding, dict[str, Any]], SCARNodePostprocessor],
    ) -> None:
        # As the README sets it up: budget mode after a top-3 retrieval (it keeps every incoming
        # node and fills the rest of its budget with neighbours), plain mode after a top-10 one.
        for mode, top_k, options in (
            ("budget=10", 3, {}),
            ("plain", 10, {"budget": None}),
        ):
            retriever = index.as_retriever(similarity_top_k=top_k)
            retrieved = {name: retriever.retrieve(bundle) for name, bundle in bundles.items()}
            model = CountingEmbedding()
            postprocessor = build(model, options)
            cold, warm = per_query(
                model,
                lambda name, p=postprocessor, r=retrieved: p.postprocess_nodes(
                    r[name], bundles[name]
                ),
                list(bundles),
            )
            rows.append(["LlamaIndex", source, mode, f"{cold:.1f}", f"{warm:.1f}"])

    add(
        "store: SimpleVectorStore (from_index)",
        memory_index,
        lambda m, o: SCARNodePostprocessor(
            docstore=memory_index.docstore,
            vector_store=memory_index.vector_store,
            embed_model=m,
            **o,
        ),
    )
    add(
        "store: PGVectorStore, empty docstore (from_index)",
        pg_index,
        lambda m, o: SCARNodePostprocessor(
            docstore=pg_index.docstore, vector_store=pg_store, embed_model=m, **o
        ),
    )
    add(
        "store: PGVectorNodeSource",
        pg_index,
        lambda m, o: SCARNodePostprocessor(
            neighbor_source=PGVectorNodeSource(pg_store), embed_model=m, **o
        ),
    )
    add(
        "cache: docstore without vectors, in-memory vector cache",
        memory_index,
        lambda m, o: SCARNodePostprocessor(docstore=docstore, embed_model=m, **o),
    )
    add(
        "re-embed: docstore without vectors, no cache",
        memory_index,
        lambda m, o: SCARNodePostprocessor(
            docstore=docstore, embed_model=m, vector_cache=NoCache(), **o
        ),
    )
    return rows


def main() -> None:
    logging.disable(logging.WARNING)
    machine = machine_summary()  # the load average at the start, not at the end
    print(machine, flush=True)
    corpus = make_corpus(2000, 64)
    with pgvector_server() as server:
        rows = langchain_rows(corpus, server) + llamaindex_rows(corpus, server)
    table = markdown_table(
        ["framework", "vector source", "mode", "chunk embeddings / query (cold)", "after warm-up"],
        rows,
    )
    text = (
        "# Embedding calls per query (benchmark 3)\n\n"
        f"{machine}\n\n"
        f"2,000 chunks, {QUERIES} queries, each run twice (cold, then warm). Chunk texts embedded "
        "per query; the query itself is not counted. Target: 0 for store and cache after warm-up.\n\n"
        f"{table}\n"
    )
    print(text)
    write_result("embedding_calls.md", text)


if __name__ == "__main__":
    main()
