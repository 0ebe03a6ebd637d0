"""What a small read costs through SQLAlchemy, through SCAR's SQLReads, and on a bare connection.

SCAR's pgvector sources send one search and one or two reads by id per query. At HNSW speeds the
database answers those in about a millisecond, so the Python around each statement matters. This
times, side by side on the same server and the same ids:

* ``sqlalchemy``: ``engine.connect()`` + ``connection.execute(text(...)).all()`` with
  ``isolation_level="AUTOCOMMIT"`` (how the sources read before ``SQLReads``);
* ``SQLReads``: ``scar_core._sql_reads.SQLReads.rows``, on the pool's driver connection;
* ``psycopg``: one open autocommit psycopg connection and a cursor (no pool at all): the floor;
* ``PGVectorChunks.fetch``: the LangChain source's whole read (``SQLReads`` plus decoding the
  rows into documents and vectors);
* ``store pool``: ``SQLReads.arows`` on a langchain-postgres ``PGEngine``'s own pool, handed to
  its event-loop thread, as ``SCARRetriever`` reads a ``PGVectorStore`` given no sources
  asynchronously (and synchronously before session 12); and
  the hand-over alone (a coroutine that sends no statement).

for a read of 35 chunks with their vectors by id (the size of one budget-mode prefetch) on a 10k
x 384 LangChain table, and for ``SELECT 1``. It prints the medians and the ratios to the floor.

Usage::

    python benchmarks/sql_overhead.py [--rounds 500]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from bench_langchain import load_langchain_table
from bench_postgres import pgvector_server
from bench_support import (
    interleaved_medians,
    machine_summary,
    make_corpus,
    markdown_table,
    write_result,
)

from scar_core._sql_reads import SQLReads
from scar_langchain import PGVectorChunks, PGVectorTable

SIZE = 10_000
DIMENSION = 384
IDS_PER_READ = 35


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=500)
    args = parser.parse_args()

    import psycopg
    import sqlalchemy

    machine = machine_summary()  # the load average at the start, not at the end
    print(machine, flush=True)
    corpus = make_corpus(SIZE, DIMENSION)
    with pgvector_server() as server:
        table = "sql_overhead"
        store_engine, _ = load_langchain_table(server, corpus, table)
        engine = sqlalchemy.create_engine(server.get_uri(driver="psycopg"))
        chunks = PGVectorChunks(engine, PGVectorTable(table))
        chunks.fetch([corpus.chunk_id(0)])  # reads the table's layout
        by_id = chunks._select(with_documents=True)
        driver_sql = str(by_id.compile(dialect=engine.dialect))
        reads = SQLReads(engine)
        autocommit = engine.execution_options(isolation_level="AUTOCOMMIT")
        bare = psycopg.connect(server.get_uri(), autocommit=True)
        id_sets = [
            [corpus.chunk_id((round_ * 7919 + i * 263) % SIZE) for i in range(IDS_PER_READ)]
            for round_ in range(args.rounds + 2)
        ]
        select_one = sqlalchemy.text("SELECT 1")
        # The store's pool, as SCARRetriever reads a PGVectorStore asynchronously by default.
        store_pool = store_engine._pool
        store_reads = SQLReads(store_pool.sync_engine)

        def on_store_pool(statement: sqlalchemy.TextClause, ids: bool) -> Callable[[int], object]:
            def run(i: int) -> object:
                read = store_reads.arows(store_pool, statement, {"ids": id_sets[i]} if ids else {})
                return store_engine._run_as_sync(read)

            return run

        async def nothing() -> None:
            return None

        def through_sqlalchemy(
            statement: sqlalchemy.TextClause, ids: bool
        ) -> Callable[[int], object]:
            def run(i: int) -> object:
                with autocommit.connect() as connection:
                    return connection.execute(statement, {"ids": id_sets[i]} if ids else {}).all()

            return run

        def on_bare(sql: str, ids: bool) -> Callable[[int], object]:
            def run(i: int) -> object:
                with bare.cursor() as cursor:
                    cursor.execute(sql, {"ids": id_sets[i]} if ids else None)
                    return cursor.fetchall()

            return run

        contenders: dict[str, dict[str, Callable[[int], object]]] = {
            f"{IDS_PER_READ} chunks by id, with vectors": {
                "sqlalchemy": through_sqlalchemy(by_id, ids=True),
                "SQLReads": lambda i: reads.rows(by_id, {"ids": id_sets[i]}),
                "psycopg": on_bare(driver_sql, ids=True),
                "PGVectorChunks.fetch": lambda i: chunks.fetch(id_sets[i]),
                "store pool": on_store_pool(by_id, ids=True),
            },
            "SELECT 1": {
                "sqlalchemy": through_sqlalchemy(select_one, ids=False),
                "SQLReads": lambda i: reads.rows(select_one, {}),
                "psycopg": on_bare("SELECT 1", ids=False),
                "store pool": on_store_pool(select_one, ids=False),
                "store pool: the hand-over alone": lambda i: store_engine._run_as_sync(nothing()),
            },
        }
        table_rows = []
        for read, runs in contenders.items():
            raw_rows = [
                sorted(tuple(row) for row in runs[name](0))
                for name in ("sqlalchemy", "SQLReads", "psycopg")
            ]  # type: ignore[attr-defined]
            assert raw_rows[0] == raw_rows[1] == raw_rows[2], "the three paths read different rows"
            medians = interleaved_medians(runs, args.rounds)
            floor = medians["psycopg"]
            for name, seconds in medians.items():
                table_rows.append(
                    [
                        read,
                        name,
                        f"{seconds * 1e3:.3f}",
                        f"{(seconds - floor) * 1e3:+.3f}",
                        f"**{seconds / floor:.2f}x**",
                    ]
                )
            print(read, {k: round(v * 1e3, 3) for k, v in medians.items()}, flush=True)
        bare.close()
        chunks.close()
        engine.dispose()
        store_engine._run_as_sync(store_pool.dispose())

    text = "\n".join(
        [
            "# Per-statement overhead of a small read",
            "",
            machine,
            "",
            f"Median wall time per read over {args.rounds} interleaved rounds, PostgreSQL on the "
            "same machine (Unix socket). The floor is a bare psycopg connection.",
            "",
            markdown_table(
                ["read", "through", "median ms", "over the floor", "ratio to the floor"],
                table_rows,
            ),
            "",
        ]
    )
    path = write_result("sql_overhead.md", text)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
