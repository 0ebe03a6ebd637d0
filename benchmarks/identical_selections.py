"""Check that a change leaves SCAR's selections identical, through the core and both adapters.

On the dev sets (PrivacyQA, ContractNLI, paper4_dev; 500-character chunks, all-MiniLM-L6-v2 from
the vector cache, whole-corpus scope), every query is answered by ``budgetB`` at each budget B
three ways: ``scar eval``'s path (:mod:`scar_tools.eval.methods`), ``SCARRetriever`` over an
``InMemoryVectorStore`` and ``SCARNodePostprocessor`` over a ``VectorStoreIndex``. The chunk ids
each returns, in order, are saved as JSON; ``--compare`` checks them against a saved run::

    git archive HEAD | tar -x -C /tmp/scar_head
    PYTHONPATH=/tmp/scar_head python benchmarks/identical_selections.py --save /tmp/before.json
    python benchmarks/identical_selections.py --compare /tmp/before.json

Chunk and query vectors come from the vector caches (``--cache-dir``, first match), embedded
into the first one only where none holds them; the adapters' embedding models look them up.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

BUDGETS = (3, 5, 10, 15)
SETS = {
    "privacy_qa": ("legalbench-rag/benchmarks/privacy_qa.json", "legalbench-rag/corpus"),
    "contractnli": ("legalbench-rag/benchmarks/contractnli.json", "legalbench-rag/corpus"),
    "paper4": ("paper4/paper4_dev.json", "paper4/corpus"),
}


class _Cached:
    """The dev embedder's name, for the cache's key; it refuses to embed anything."""

    model_name = "sentence-transformers/all-MiniLM-L6-v2"

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        raise RuntimeError(f"{len(texts)} texts are not in the vector cache; run scar eval first.")

    def embed_query(self, text: str) -> list[float]:
        raise RuntimeError(f"the query {text[:40]!r} is not in the vector cache.")


def _prepared(bench: Path, name: str, cache_dirs: list[Path]) -> Any:
    """The set chunked and ranked, from the first of ``cache_dirs`` that holds its vectors."""
    from scar_tools.cache import EmbeddingCache
    from scar_tools.eval import load_benchmark, prepare_benchmark

    questions, corpus = SETS[name]
    benchmark = load_benchmark(bench / questions, bench / corpus)
    for number, directory in enumerate(cache_dirs, 1):
        try:
            return prepare_benchmark(
                benchmark, _Cached(), scope="corpus", cache=EmbeddingCache(directory),
                show_progress=False,
            )  # type: ignore[arg-type]  # fmt: skip
        except RuntimeError:
            if number == len(cache_dirs):
                break
    from scar_tools.eval import embedder_for  # not cached: embed once, into the first cache

    return prepare_benchmark(
        benchmark, embedder_for(None), scope="corpus", cache=EmbeddingCache(cache_dirs[0]),
        show_progress=False,
    )  # fmt: skip


def _core(prepared: Any, queries: range) -> dict[str, list[list[str]]]:
    from scar_tools.eval.methods import REGISTRY

    out: dict[str, list[list[str]]] = {}
    for budget in BUDGETS:
        method = REGISTRY.create(f"budget{budget}", budget)
        out[str(budget)] = [method(prepared.context(q, budget)).chunk_ids for q in queries]
    return out


def _vectors(prepared: Any) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    texts = {
        c.text: prepared.nodes[r].vector.tolist() for r, c in enumerate(prepared.corpus.chunks)
    }
    queries = {q.text: prepared.query_units[p].tolist() for p, q in enumerate(prepared.queries)}
    return texts, queries


def _langchain(prepared: Any, queries: range) -> dict[str, list[list[str]]]:
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings
    from langchain_core.vectorstores import InMemoryVectorStore

    from scar_langchain import SCARRetriever
    from scar_langchain import _links as lk

    texts, asked = _vectors(prepared)

    class Lookup(Embeddings):
        def embed_documents(self, batch: list[str]) -> list[list[float]]:
            return [texts[t] for t in batch]

        def embed_query(self, text: str) -> list[float]:
            return asked[text]

    store = InMemoryVectorStore(Lookup())
    chunks = prepared.corpus.chunks
    documents = [
        Document(
            c.text,
            id=c.chunk_id,
            metadata={
                lk.CHUNK_ID_KEY: c.chunk_id,
                lk.DOCUMENT_ID_KEY: c.document_id,
                lk.PREVIOUS_ID_KEY: c.previous_id,
                lk.NEXT_ID_KEY: c.next_id,
            },
        )
        for c in chunks
    ]
    store.add_documents(documents, ids=[c.chunk_id for c in chunks])
    out: dict[str, list[list[str]]] = {}
    for budget in BUDGETS:
        retriever = SCARRetriever(vectorstore=store, k=budget)
        out[str(budget)] = [
            [d.id or "" for d in retriever.invoke(prepared.queries[q].text)] for q in queries
        ]
    return out


def _llamaindex(prepared: Any, queries: range) -> dict[str, list[list[str]]]:
    from llama_index.core import VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.schema import NodeRelationship, NodeWithScore, QueryBundle, TextNode
    from llama_index.core.schema import RelatedNodeInfo as Info

    from scar_llamaindex import SCARNodePostprocessor

    nodes = []
    for row, c in enumerate(prepared.corpus.chunks):
        links = {NodeRelationship.SOURCE: Info(node_id=c.document_id)}
        if c.previous_id:
            links[NodeRelationship.PREVIOUS] = Info(node_id=c.previous_id)
        if c.next_id:
            links[NodeRelationship.NEXT] = Info(node_id=c.next_id)
        vector = prepared.nodes[row].vector.tolist()
        nodes.append(TextNode(id_=c.chunk_id, text=c.text, embedding=vector, relationships=links))
    dimension = len(nodes[0].embedding)
    index = VectorStoreIndex(nodes, embed_model=MockEmbedding(embed_dim=dimension))
    by_row = nodes
    out: dict[str, list[list[str]]] = {}
    for budget in BUDGETS:
        scar = SCARNodePostprocessor.from_index(index, filters=None, top_n=budget)
        answers = []
        for q in queries:
            rows = prepared.ranked[q][:budget].tolist()
            vector = prepared.query_units[q]
            hits = [
                NodeWithScore(node=by_row[r], score=float(np.dot(by_row[r].embedding, vector)))
                for r in rows
            ]
            bundle = QueryBundle(prepared.queries[q].text, embedding=vector.tolist())
            answers.append([n.node.node_id for n in scar.postprocess_nodes(hits, bundle)])
        out[str(budget)] = answers
    return out


def main(argv: list[str] | None = None) -> int:
    """Save or compare the selections; return 1 if any differs from the saved run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--bench", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "bench"
    )
    parser.add_argument(
        "--cache-dir", type=Path, action="append", help="vector caches to look in, in order"
    )
    parser.add_argument("--limit", type=int, default=None, help="queries per set (default all)")
    parser.add_argument("--save", type=Path)
    parser.add_argument("--compare", type=Path)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    results: dict[str, Any] = {}
    for name in SETS:
        start = time.perf_counter()
        prepared = _prepared(args.bench, name, args.cache_dir or [Path.home() / ".cache/scar"])
        queries = range(min(len(prepared.queries), args.limit or len(prepared.queries)))
        results[name] = {
            "core": _core(prepared, queries),
            "langchain": _langchain(prepared, queries),
            "llamaindex": _llamaindex(prepared, queries),
        }
        print(f"{name}: {len(queries)} queries, {time.perf_counter() - start:.0f} s", flush=True)
    if args.save:
        args.save.write_text(json.dumps(results))
    if not args.compare:
        return 0
    before = json.loads(args.compare.read_text())
    differs = 0
    for name, paths in results.items():
        for path, budgets in paths.items():
            for budget, selections in budgets.items():
                old = before[name][path][budget]
                changed = sum(a != b for a, b in zip(old, selections, strict=True))
                differs += changed
                print(f"{name:12} {path:10} B={budget:>2}: {len(selections)} queries, "
                      f"{changed} differ")  # fmt: skip
    print("identical" if not differs else f"{differs} selections differ")
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
