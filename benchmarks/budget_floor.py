"""How much of budget mode's latency behind HNSW is SQL, and how much is Python.

Benchmark 1 finds ``SCARRetriever`` in budget mode, with ``search_source``, above the 1.10x
target behind an HNSW index at 100k. This splits that cost. For each query it records the
statements both retrievers send (psycopg's cursors are watched while they run), then times, side
by side in one run, the two retrievers (their order rotated every round) and, after both, the
two replays:

* ``plain k=10``: the store's ``as_retriever(search_kwargs={"k": 10})``;
* ``SCAR budget=10``: ``SCARRetriever(vectorstore=store, search_source=PGVectorChunks...)``;
* ``plain SQL``: the plain retriever's statement for that query, replayed on one bare psycopg
  connection (no pool, no SQLAlchemy, no framework);
* ``SCAR SQL``: SCAR's statements for that query (the search, then one or more reads of the
  neighbourhood by id), replayed the same way, with rows in the form SCAR asked for (binary
  when the table's columns allow it).

The SQL replays are what the database and the driver cost with no Python around them, with the
query's pages already read into the buffers by the retrievers: so they are the SQL's least cost,
and a retriever's median minus its replay's is an upper bound on its Python (it also holds the
reading of pages the retriever was first to need). The replays run last so that they never warm
a retriever's pages (run first, SCAR's replay read SCAR's neighbourhood for it). The ratio
``SCAR SQL / plain k=10`` is the least budget mode could cost against the plain retriever if all
of SCAR's own Python (decoding, selection, assembly, the LangChain call) were free.

Usage::

    python benchmarks/budget_floor.py [--sizes 10000 100000] [--rounds 300]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from bench_langchain import CorpusEmbeddings, load_langchain_table
from bench_postgres import (
    Statement,
    create_hnsw_index,
    pgvector_server,
    recorded_statements,
    search_uses_index,
)
from bench_support import (
    TEXT_CHARS,
    interleaved_medians,
    machine_summary,
    make_queries,
    markdown_table,
    text_corpus,
    write_result,
)

from scar_core._sql_reads import _with_binary_vectors
from scar_langchain import PGVectorChunks, SCARRetriever

DIMENSION = 384


def statements_of(run: Callable[[], object]) -> list[Statement]:
    """The statements one call of ``run`` sends, in order."""
    with recorded_statements() as sent:
        run()
    return list(sent)


def replay(connection: Any, statements: list[Statement]) -> None:
    """Execute ``statements`` on ``connection`` and fetch every row, as the retrievers do.

    Each statement's rows come in the form the retriever asked for (SCAR's reads ask for binary
    rows; the store's search gets text rows).
    """
    for query, params, binary in statements:
        with connection.cursor(binary=binary) as cursor:
            cursor.execute(query, params)
            cursor.fetchall()


def run_size(server: Any, size: int, rounds: int) -> list[list[object]]:
    import psycopg
    from langchain_postgres import PGVectorStore

    corpus = text_corpus(size, DIMENSION)
    query_vectors = make_queries(corpus, rounds + 2)
    query_texts = [f"query {i}" for i in range(len(query_vectors))]
    embeddings = CorpusEmbeddings(
        corpus,
        {text: vector.tolist() for text, vector in zip(query_texts, query_vectors, strict=True)},
        rows_as_lists=False,
    )
    table = f"floor_{size}"
    engine, _ = load_langchain_table(server, corpus, table)
    create_hnsw_index(server.get_uri(), table)
    # On small tables of long rows the planner may prefer a scan to the index (results README).
    index = "HNSW" if search_uses_index(server.get_uri(), table, DIMENSION) else "scan, HNSW unused"
    store = PGVectorStore.create_sync(engine, embeddings, table)
    chunks = PGVectorChunks.from_store(store)
    plain = store.as_retriever(search_kwargs={"k": 10})
    scar = SCARRetriever(vectorstore=store, search_source=chunks)

    scar.invoke(query_texts[0])  # the source reads the table's layout once, on its first call
    plain_sql = [statements_of(lambda t=text: plain.invoke(t)) for text in query_texts]
    scar_sql = [statements_of(lambda t=text: scar.invoke(t)) for text in query_texts]
    assert all(len(sent) == 1 for sent in plain_sql), "the plain retriever sent more than one"
    scar_statements = sum(len(sent) for sent in scar_sql[2:]) / rounds

    with psycopg.connect(server.get_uri(), autocommit=True) as connection:
        # SCAR's query vector and neighbour ids travel as SQLReads sends them.
        _with_binary_vectors(connection)
        # The replays run after both retrievers: run before one, a replay would read that
        # query's pages into the buffers for it (SCAR's neighbourhood above all).
        medians = interleaved_medians(
            {
                "plain k=10": lambda i: plain.invoke(query_texts[i + 2]),
                "SCAR budget=10": lambda i: scar.invoke(query_texts[i + 2]),
            },
            rounds,
            then={
                "plain SQL": lambda i: replay(connection, plain_sql[i + 2]),
                "SCAR SQL": lambda i: replay(connection, scar_sql[i + 2]),
            },
        )
    chunks.close()
    print(f"  {size:,}: " + str({k: round(v * 1e3, 3) for k, v in medians.items()}), flush=True)

    plain_ms = medians["plain k=10"] * 1e3
    scar_ms = medians["SCAR budget=10"] * 1e3
    plain_sql_ms = medians["plain SQL"] * 1e3
    scar_sql_ms = medians["SCAR SQL"] * 1e3
    return [
        [
            f"{size // 1000}k, d={DIMENSION}, {index}",
            f"{plain_ms:.2f}",
            f"{scar_ms:.2f}",
            f"**{scar_ms / plain_ms:.3f}x**",
            f"{plain_sql_ms:.2f}",
            f"{scar_sql_ms:.2f} ({scar_statements:.2f})",
            f"{plain_ms - plain_sql_ms:.2f}",
            f"{scar_ms - scar_sql_ms:.2f}",
            f"**{scar_sql_ms / plain_ms:.3f}x**",
        ]
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()

    machine = machine_summary()  # the load average at the start, not at the end
    print(machine, flush=True)
    rows: list[list[object]] = []
    with pgvector_server() as server:
        for size in args.sizes:
            rows += run_size(server, size, args.rounds)

    header = [
        "setup",
        "plain k=10 ms",
        "SCAR budget=10 ms",
        "SCAR / plain",
        "plain SQL ms",
        "SCAR SQL ms (statements)",
        "plain Python ms",
        "SCAR Python ms",
        "SCAR SQL / plain k=10",
    ]
    text = (
        "# Budget mode behind HNSW: SQL and Python (benchmark 1, split)\n\n"
        f"{machine}\n\n"
        f"Median wall time per query over {args.rounds} rounds; the two retrievers' order "
        "rotated every round. *SQL* columns: the statements each retriever sent for that query, "
        "replayed on one bare psycopg connection after both retrievers had run it (so with its "
        "pages in the buffers), with rows in the form each asked for (binary for SCAR's reads). "
        "*Python* = the retriever's median minus its SQL median (an upper bound: it includes "
        "reading pages the retriever was first to need). The last column is the least budget "
        "mode could cost if SCAR's Python were free. Chunks of "
        f"{TEXT_CHARS:,} characters; SCAR is `SCARRetriever(vectorstore=store, "
        "search_source=PGVectorChunks.from_store(store))`, budget 10.\n\n"
        + markdown_table(header, rows)
        + "\n"
    )
    print(text)
    print(f"wrote {write_result('budget_floor.md', text)}")


if __name__ == "__main__":
    main()
