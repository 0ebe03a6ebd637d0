"""Benchmark 1: end-to-end latency of SCAR against the plain retriever on the same store.

For each corpus size and dimension, in memory and on pgvector, this times per query:

* LangChain: ``store.as_retriever(k=K)`` against ``SCARRetriever`` on the same store, in plain
  mode (``budget=None, k=4``: the first search asks for 3k = 12 hits, so K = 12) and in the
  default budget mode (``budget=10``: the search asks for 10 hits, so K = 10). On pgvector SCAR
  runs with its default sources (``default_store_chunks``: a sync pool of its own opened with the
  settings of the store's connections) and with ``search_source=PGVectorChunks.from_store(store)``
  on a pool of its own opened from the store's URL. Both search with the hits' vectors in binary
  form and read neighbours with their vectors in one statement per batch.
* LlamaIndex: ``index.as_retriever(similarity_top_k=10).retrieve`` alone against SCAR as the
  README sets it up: budget mode (``budget=10``) after a top-3 retrieval, so that both return
  10 nodes, and plain mode after the top-10 retrieval. The difference is the postprocessor's
  added latency. On pgvector the index lives only in the database (empty docstore), so SCAR
  reads the table through ``PGVectorNodeSource`` by default; the store's own ``get_nodes``
  (``StoreNeighborSource``, the default before session 5) is timed beside it.

Query embedding is excluded: a fake model returns stored query vectors at once, for all sides.
Every round runs each contender on the same query in turn, so machine noise is shared; the
median over rounds is reported, and the ratio of medians.

Each chunk holds 1,000 characters of text, 200 of them shared with the next chunk, as
``RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=200)`` cuts prose, and no
``start_index``, so SCAR stitches passages by finding the overlap in the text (``--text-chars 0``
gives the short labels of runs A to F).

The in-memory LangChain store holds its vectors as float32 numpy rows (an ``InMemoryVectorStore``
keeps whatever the model returns) so that 100k x 1536 fits in memory; its search is still the
store's own full scan. LlamaIndex in memory (``SimpleVectorStore``) runs at 10k only: it keeps
vectors as Python lists and converts all of them on every query.

Usage::

    python benchmarks/e2e_latency.py                      # 10k and 100k, d = 384 and 1536
    python benchmarks/e2e_latency.py --sizes 10000 --dims 384 --rounds 20
"""

from __future__ import annotations

import argparse
import logging
import statistics
from collections.abc import Callable
from typing import Any

from bench_langchain import CorpusEmbeddings, load_langchain_table
from bench_postgres import (
    copy_rows,
    create_hnsw_index,
    drop_hnsw_indexes,
    pgvector_server,
    recorded_statements,
    search_uses_index,
)
from bench_support import (
    LATENCY_COLUMNS,
    TEXT_CHARS,
    TEXT_OVERLAP,
    Corpus,
    chunk_metadata,
    interleaved_medians,
    interleaved_samples,
    latency_cells,
    machine_summary,
    make_corpus,
    make_queries,
    markdown_table,
    write_result,
)
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore
from psycopg.types.json import Json

from scar_langchain import PGVectorChunks, SCARRetriever


def documents_of(corpus: Corpus) -> list[Document]:
    return [
        Document(
            id=corpus.chunk_id(row),
            page_content=corpus.text(row),
            metadata=chunk_metadata(corpus, row),
        )
        for row in range(corpus.size)
    ]


def langchain_contenders(
    store: Any, query_texts: list[str], chunks: PGVectorChunks | None
) -> dict[str, Callable[[int], object]]:
    retrievers: dict[str, Any] = {
        "plain k=12": store.as_retriever(search_kwargs={"k": 12}),
        "SCAR plain (budget=None, k=4)": SCARRetriever(vectorstore=store, budget=None, k=4),
        "plain k=10": store.as_retriever(search_kwargs={"k": 10}),
        "SCAR budget=10": SCARRetriever(vectorstore=store),
    }
    if chunks is not None:
        # search_source=chunks: the search returns the hits' vectors, and chunks also serves
        # as neighbour and vector source.
        retrievers["SCAR plain + search_source=PGVectorChunks"] = SCARRetriever(
            vectorstore=store, budget=None, k=4, search_source=chunks
        )
        retrievers["SCAR budget=10 + search_source=PGVectorChunks"] = SCARRetriever(
            vectorstore=store, search_source=chunks
        )
    return {
        name: (lambda i, r=retriever: r.invoke(query_texts[i]))
        for name, retriever in retrievers.items()
    }


def statements_per_query(contenders: dict[str, Callable[[int], object]]) -> dict[str, float]:
    """SQL statements each contender sends per query, over five queries.

    A measurement aid: while it runs, psycopg's sync and async cursors count what they execute,
    so statements sent through SQLAlchemy (the stores, ``PGEngine``'s pool) and on a pooled
    driver connection (SCAR's pgvector sources) are counted alike.
    """
    counts = {}
    with recorded_statements() as sent:
        for name, run in contenders.items():
            run(0)
            sent.clear()
            for query in range(1, 6):
                run(query)
            counts[name] = len(sent) / 5
    return counts


def langchain_rows(
    label: str,
    samples: dict[str, list[float]],
    embeddings: CorpusEmbeddings,
    statements: dict[str, float] | None = None,
) -> list[list[object]]:
    pairs = [
        ("SCAR plain (budget=None, k=4)", "plain k=12"),
        ("SCAR plain + search_source=PGVectorChunks", "plain k=12"),
        ("SCAR budget=10", "plain k=10"),
        ("SCAR budget=10 + search_source=PGVectorChunks", "plain k=10"),
    ]
    rows = []
    for scar, plain in pairs:
        if scar in samples:
            rows.append(
                [
                    *latency_cells(label, scar, plain, samples),
                    f"{statements[plain]:.1f} / {statements[scar]:.1f}" if statements else "-",
                ]
            )
    assert embeddings.texts_embedded == 0, "SCAR embedded chunks at query time"
    return rows


# -- LlamaIndex ------------------------------------------------------------------------------


def llamaindex_nodes(corpus: Corpus) -> list[Any]:
    from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode

    nodes = []
    for row in range(corpus.size):
        relationships = {NodeRelationship.SOURCE: RelatedNodeInfo(node_id=corpus.document_of(row))}
        if corpus.links[row, 0] >= 0:
            relationships[NodeRelationship.PREVIOUS] = RelatedNodeInfo(
                node_id=corpus.chunk_id(int(corpus.links[row, 0]))
            )
        if corpus.links[row, 1] >= 0:
            relationships[NodeRelationship.NEXT] = RelatedNodeInfo(
                node_id=corpus.chunk_id(int(corpus.links[row, 1]))
            )
        nodes.append(
            TextNode(id_=corpus.chunk_id(row), text=corpus.text(row), relationships=relationships)
        )
    return nodes


def llamaindex_embed_model() -> Any:
    from llama_index.core.base.embeddings.base import BaseEmbedding

    class NoEmbedding(BaseEmbedding):
        """Fails loudly: in these runs nodes carry their vectors and queries come embedded."""

        def _get_text_embedding(self, text: str) -> list[float]:
            raise AssertionError("a node was embedded")

        def _get_query_embedding(self, query: str) -> list[float]:
            raise AssertionError("a query was embedded")

        async def _aget_query_embedding(self, query: str) -> list[float]:
            raise AssertionError("a query was embedded")

    return NoEmbedding(model_name="none")


def llamaindex_contenders(
    index: Any, bundles: list[Any], extra_sources: dict[str, Any]
) -> dict[str, Callable[[int], object]]:
    """Plain top-10 retrieval against SCAR as the README sets it up.

    Budget mode keeps every incoming node and fills the rest of its budget with neighbours, so
    it is run as recommended: retrieve about ``k`` (3) nodes, let the budget (10) add neighbours.
    Its output is then as long as the plain top-10 retrieval it is compared with. Plain mode
    (the paper's rule) expands whatever arrives, so it runs on the top 10.
    """
    from scar_llamaindex import SCARNodePostprocessor

    top_10 = index.as_retriever(similarity_top_k=10)
    top_3 = index.as_retriever(similarity_top_k=3)
    budget = SCARNodePostprocessor.from_index(index)
    plain = SCARNodePostprocessor.from_index(index, budget=None)
    contenders: dict[str, Callable[[int], object]] = {
        "retrieve (top 10)": lambda i: top_10.retrieve(bundles[i]),
        "retrieve (top 3)": lambda i: top_3.retrieve(bundles[i]),
        "top 3 + SCAR budget=10": lambda i: budget.postprocess_nodes(
            top_3.retrieve(bundles[i]), bundles[i]
        ),
        "top 10 + SCAR plain (budget=None)": lambda i: plain.postprocess_nodes(
            top_10.retrieve(bundles[i]), bundles[i]
        ),
    }
    for name, source in extra_sources.items():
        scar = SCARNodePostprocessor(neighbor_source=source, embed_model=llamaindex_embed_model())
        contenders[name] = lambda i, s=scar: s.postprocess_nodes(
            top_3.retrieve(bundles[i]), bundles[i]
        )
    return contenders


def llamaindex_rows(
    label: str, medians: dict[str, float], statements: dict[str, float] | None = None
) -> list[list[object]]:
    base = medians["retrieve (top 10)"]
    return [
        [
            label,
            name,
            f"{base * 1e3:.2f}",
            f"{value * 1e3:.2f}",
            f"{(value - base) * 1e3:+.2f}",
            f"{value / base:.3f}x",
            f"{statements['retrieve (top 10)']:.1f} / {statements[name]:.1f}"
            if statements
            else "-",
        ]
        for name, value in medians.items()
        if name != "retrieve (top 10)"
    ]


def load_llamaindex_table(server: Any, corpus: Corpus, table: str) -> Any:
    from llama_index.core.vector_stores.utils import node_to_metadata_dict
    from llama_index.vector_stores.postgres import PGVectorStore

    uri = server.get_uri(driver="psycopg")
    store = PGVectorStore(
        connection_string=uri,
        async_connection_string=uri,
        table_name=table,
        embed_dim=corpus.dimension,
    )
    nodes = llamaindex_nodes(corpus)
    first = nodes[0].model_copy()
    first.embedding = corpus.vectors[0].tolist()
    store.add([first])  # creates the table the LlamaIndex way
    rows = (
        (
            node.get_content(),
            Json(node_to_metadata_dict(node, remove_text=True, flat_metadata=False)),
            node.node_id,
            corpus.vectors[index],
        )
        for index, node in enumerate(nodes)
        if index > 0
    )
    seconds = copy_rows(
        server.get_uri(),
        f"data_{table}",
        ["text", "metadata_", "node_id", "embedding"],
        ["varchar", "json", "varchar", "vector"],
        rows,
    )
    print(f"  loaded {corpus.size:,} LlamaIndex rows in {seconds:.1f}s", flush=True)
    return store


def scan_note(server: Any, table: str, dimension: int, what: str) -> list[str]:
    """A note for the results when the planner searches ``table`` without its HNSW index."""
    if search_uses_index(server.get_uri(), table, dimension):
        return []
    return [
        f"{what}: the planner chose a sequential scan over the HNSW index (vectors stored out "
        "of line, which it does not cost), so both sides scanned exactly"
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--dims", type=int, nargs="+", default=[384, 1536])
    parser.add_argument("--backends", nargs="+", default=["memory", "pgvector"])
    parser.add_argument("--rounds", type=int, default=30, help="queries per contender at 10k")
    parser.add_argument(
        "--rounds-large", type=int, default=12, help="queries per contender at 100k+"
    )
    parser.add_argument(
        "--hnsw",
        nargs="*",
        default=["10000:384", "10000:1536", "100000:384"],
        help="size:dim pairs also timed with an HNSW index",
    )
    parser.add_argument(
        "--no-exact",
        action="store_true",
        help="time pgvector behind HNSW only (no exact scans), for many rounds at 100k",
    )
    parser.add_argument(
        "--text-chars",
        type=int,
        default=TEXT_CHARS,
        help="characters of text per chunk (0: short labels such as 'doc-3 chunk 7')",
    )
    parser.add_argument(
        "--text-overlap",
        type=int,
        default=TEXT_OVERLAP,
        help="characters each chunk shares with the next",
    )
    frameworks = parser.add_mutually_exclusive_group()
    frameworks.add_argument("--no-llamaindex", action="store_true", help="time LangChain only")
    frameworks.add_argument(
        "--only-llamaindex", action="store_true", help="time LlamaIndex only (no LangChain)"
    )
    parser.add_argument(
        "--output",
        default=None,
        help=(
            "file name under benchmarks/results/ (default: e2e_latency.md, or "
            "e2e_latency_llamaindex.md with --only-llamaindex so the full table is kept)"
        ),
    )
    args = parser.parse_args()
    output = args.output or (
        "e2e_latency_llamaindex.md" if args.only_llamaindex else "e2e_latency.md"
    )
    logging.disable(logging.WARNING)

    machine = machine_summary()  # the load average at the start, not at the end
    print(machine, flush=True)
    langchain_table: list[list[object]] = []
    llamaindex_table: list[list[object]] = []
    notes: list[str] = []
    server_context = pgvector_server() if "pgvector" in args.backends else None
    server = server_context.__enter__() if server_context is not None else None
    try:
        for size in args.sizes:
            rounds = args.rounds if size <= 10_000 else args.rounds_large
            for dimension in args.dims:
                corpus = make_corpus(
                    size, dimension, text_chars=args.text_chars, text_overlap=args.text_overlap
                )
                query_vectors = make_queries(corpus, rounds + 2)
                query_texts = [f"query {i}" for i in range(len(query_vectors))]
                queries = {
                    text: vector.tolist()
                    for text, vector in zip(query_texts, query_vectors, strict=True)
                }
                embeddings = CorpusEmbeddings(corpus, queries, rows_as_lists=False)
                label = f"{size // 1000}k, d={dimension}"
                hnsw = ["hnsw"] if f"{size}:{dimension}" in args.hnsw else []
                indexes = hnsw if args.no_exact else ["exact", *hnsw]
                print(f"{label}: {rounds} rounds", flush=True)

                if "memory" in args.backends and not args.only_llamaindex:
                    store = InMemoryVectorStore(embeddings)
                    store.add_documents(documents_of(corpus), ids=corpus.chunk_ids())
                    embeddings.texts_embedded = 0
                    samples = interleaved_samples(
                        langchain_contenders(store, query_texts, None), rounds
                    )
                    medians = {k: statistics.median(v) for k, v in samples.items()}
                    langchain_table += langchain_rows(f"{label}, memory", samples, embeddings)
                    print(
                        "  langchain memory",
                        {k: round(v * 1e3, 2) for k, v in medians.items()},
                        flush=True,
                    )
                    del store
                if "memory" in args.backends and not args.no_llamaindex and size <= 10_000:
                    from llama_index.core import VectorStoreIndex
                    from llama_index.core.schema import QueryBundle

                    nodes = llamaindex_nodes(corpus)
                    for row, node in enumerate(nodes):
                        node.embedding = corpus.vectors[row].tolist()
                    index = VectorStoreIndex(nodes, embed_model=llamaindex_embed_model())
                    bundles = [QueryBundle(query_str=t, embedding=queries[t]) for t in query_texts]
                    medians = interleaved_medians(llamaindex_contenders(index, bundles, {}), rounds)
                    llamaindex_table += llamaindex_rows(f"{label}, memory", medians)
                    print(
                        "  llamaindex memory",
                        {k: round(v * 1e3, 2) for k, v in medians.items()},
                        flush=True,
                    )
                    del index, nodes

                if server is not None and not args.only_llamaindex:
                    from langchain_postgres import PGVectorStore

                    table = f"lc_{size}_{dimension}"
                    engine, seconds = load_langchain_table(server, corpus, table)
                    print(f"  loaded {size:,} LangChain rows in {seconds:.1f}s", flush=True)
                    store = PGVectorStore.create_sync(engine, embeddings, table)
                    chunks = PGVectorChunks.from_store(store)
                    for index_kind in indexes:
                        if index_kind == "hnsw":
                            built = create_hnsw_index(server.get_uri(), table)
                            notes.append(f"HNSW build, LangChain table {label}: {built:.0f}s")
                            print(f"  hnsw built in {built:.1f}s", flush=True)
                            notes += scan_note(server, table, dimension, f"LangChain table {label}")
                        contenders = langchain_contenders(store, query_texts, chunks)
                        statements = statements_per_query(contenders)
                        samples = interleaved_samples(contenders, rounds)
                        medians = {k: statistics.median(v) for k, v in samples.items()}
                        langchain_table += langchain_rows(
                            f"{label}, pgvector {index_kind}", samples, embeddings, statements
                        )
                        print(
                            f"  langchain pgvector {index_kind}",
                            {k: round(v * 1e3, 2) for k, v in medians.items()},
                            flush=True,
                        )
                    chunks.close()
                    drop_hnsw_indexes(server.get_uri(), table)

                if server is not None and not args.no_llamaindex:
                    from llama_index.core import VectorStoreIndex
                    from llama_index.core.schema import QueryBundle

                    from scar_llamaindex import StoreNeighborSource, create_node_id_index

                    li_table = f"li_{size}_{dimension}"
                    li_store = load_llamaindex_table(server, corpus, li_table)
                    index = VectorStoreIndex.from_vector_store(
                        li_store, embed_model=llamaindex_embed_model()
                    )
                    assert len(index.docstore.docs) == 0
                    bundles = [QueryBundle(query_str=t, embedding=queries[t]) for t in query_texts]
                    for index_kind in indexes:
                        if index_kind == "hnsw":
                            create_hnsw_index(server.get_uri(), f"data_{li_table}")
                            notes += scan_note(
                                server, f"data_{li_table}", dimension, f"LlamaIndex table {label}"
                            )
                        contenders = llamaindex_contenders(index, bundles, {})
                        statements = statements_per_query(contenders)
                        medians = interleaved_medians(contenders, rounds)
                        llamaindex_table += llamaindex_rows(
                            f"{label}, pgvector {index_kind}, no node_id index",
                            medians,
                            statements,
                        )
                        create_node_id_index(li_store)
                        # The default reads the table (PGVectorNodeSource); before session 5 it
                        # went through the store's get_nodes, ring by ring.
                        through_store = StoreNeighborSource(
                            docstore=index.docstore, vector_store=li_store
                        )
                        contenders = llamaindex_contenders(
                            index,
                            bundles,
                            {
                                "top 3 + SCAR budget=10, get_nodes (StoreNeighborSource)": through_store
                            },
                        )
                        statements = statements_per_query(contenders)
                        medians = interleaved_medians(contenders, rounds)
                        llamaindex_table += llamaindex_rows(
                            f"{label}, pgvector {index_kind}, node_id index",
                            medians,
                            statements,
                        )
                        print(
                            f"  llamaindex pgvector {index_kind}",
                            {k: round(v * 1e3, 2) for k, v in medians.items()},
                            flush=True,
                        )
                        with __import__("psycopg").connect(server.get_uri(), autocommit=True) as c:
                            c.execute(f'DROP INDEX IF EXISTS "data_{li_table}_node_id_idx"')
                    drop_hnsw_indexes(server.get_uri(), f"data_{li_table}")
                del corpus
    finally:
        if server_context is not None:
            server_context.__exit__(None, None, None)

    header = [*LATENCY_COLUMNS, "SQL statements plain / SCAR"]
    text = (
        "# End-to-end latency (benchmark 1)\n\n"
        f"{machine}\n\n"
        "Median wall time per query, query embedding excluded. Target: SCAR <= 1.10x plain "
        "(in bold where met; LlamaIndex is reported without a target).\n\n"
        + (
            f"Chunk text: {args.text_chars:,} characters, {args.text_overlap} shared with the "
            "next chunk, no start_index (passages are stitched by finding the overlap).\n\n"
            if args.text_chars
            else "Chunk text: short labels ('doc-3 chunk 7').\n\n"
        )
        + "## LangChain: SCARRetriever vs `as_retriever()` on the same store\n\n"
        + markdown_table(header, langchain_table)
        + "\n\n## LlamaIndex: retrieve, then SCARNodePostprocessor, against a plain top-10 "
        "retrieval\n\n"
        + markdown_table(
            [
                "setup",
                "pipeline",
                "retrieve top 10 ms",
                "pipeline ms",
                "added ms",
                "pipeline / top 10",
                "SQL statements top 10 / pipeline",
            ],
            llamaindex_table,
        )
        + ("\n\n" + "\n".join(f"- {note}" for note in notes) if notes else "")
        + "\n"
    )
    print(text)
    write_result(output, text)


if __name__ == "__main__":
    main()
