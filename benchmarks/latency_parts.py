"""Where SCAR's time goes beside the plain retriever: one query's steps, timed apart, on FAISS.

On ``latency.py``'s corpus (FAISS, exact search), each query runs the steps of
``SCARRetriever._get_relevant_documents`` one by one, with a clock between them: the call's
checks, the search, the hits' records, the driver, the one read of the window (FAISS's docstore and
``reconstruct_batch``), the driver taking it in, the selection and the Documents returned. The
plain retriever runs on the same query, in turn. The medians show which part of the extra a change
could reach; ``selection`` is the auction and its flip thresholds. From the repository root::

    python benchmarks/latency_parts.py --size 100000 --queries 300
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable

from latency import MODES, Corpus, QueryEmbeddings, faiss_store

from scar_core._driver import QueryDriver
from scar_langchain import SCARRetriever
from scar_langchain._links import render, to_chunk

STEPS = ("checks", "search", "hits", "driver", "read", "receive", "selection", "render")


def one_query(scar: SCARRetriever, store: object, query: str) -> dict[str, float]:
    """Run one SCAR query step by step; return each step's seconds."""
    clock, spent = time.perf_counter, dict.fromkeys(STEPS, 0.0)
    marks = [clock()]

    def mark(step: str) -> None:
        marks.append(clock())
        spent[step] += marks[-1] - marks[-2]

    k, search = scar._call(query, {})
    mark("checks")
    vector = scar.vectorstore.embeddings.embed_query(query)  # type: ignore[union-attr]
    hits = scar.vectorstore.similarity_search_by_vector(vector, k=k, **search)
    mark("search")
    chunks = [to_chunk(d) for d in hits]
    mark("hits")
    driver = QueryDriver.for_adapter(vector, chunks, scar.settings, k, scar._memory, store)
    mark("driver")
    while ids := driver.wanted():
        read = [to_chunk(*row) for row in scar._reader.read(ids, search).values()]
        mark("read")
        driver.receive(read)
        mark("receive")
    returned = driver.returned()
    mark("selection")
    render(returned, driver.hit_ids, scar.merge_passages)
    mark("render")
    return spent


def main() -> None:
    """Print the median of each step, per mode, beside the plain retriever's whole query."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--modes", nargs="+", default=["budget", "tokens", "paper"])
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    embeddings = QueryEmbeddings()
    corpus = Corpus(args.size)
    store = faiss_store(corpus, embeddings)
    print(f"FAISS, {args.size:,} chunks, {args.queries} queries; medians in ms\n")
    print("| mode | plain query | " + " | ".join(STEPS) + " | SCAR's steps | SCAR / plain |")
    print("|---|" + "---|" * (len(STEPS) + 3))
    for mode in args.modes:
        settings, k, _ = MODES[mode]
        scar = SCARRetriever(vectorstore=store, k=k, **settings)
        plain: Callable[[str], object] = store.as_retriever(search_kwargs={"k": k}).invoke
        queries = corpus.queries(embeddings, mode, args.queries)
        for query in queries[:20]:  # warm up
            one_query(scar, store, query), plain(query)
        parts: dict[str, list[float]] = {step: [] for step in STEPS}
        plain_times, totals = [], []
        for query in queries:
            spent = one_query(scar, store, query)
            for step, seconds in spent.items():
                parts[step].append(seconds)
            totals.append(sum(spent.values()))
            start = time.perf_counter()
            plain(query)
            plain_times.append(time.perf_counter() - start)
        medians = [statistics.median(parts[step]) * 1e3 for step in STEPS]
        whole, base = statistics.median(totals) * 1e3, statistics.median(plain_times) * 1e3
        cells = " | ".join(f"{m:.3f}" for m in medians)
        print(f"| {mode} | {base:.3f} | {cells} | {whole:.3f} | {whole / base:.3f}x |")


if __name__ == "__main__":
    main()
