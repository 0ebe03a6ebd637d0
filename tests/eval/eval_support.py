"""Support for the evaluation tests: a deterministic hashing embedder and fixture benchmarks."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

DIMENSION = 64
#: The read-only dev sets beside the checkout; tests marked ``bench`` skip when it is absent.
BENCH = Path(__file__).resolve().parents[2].parent / "shared" / "bench"


class HashEmbedder:
    """Bag of hashed words: texts sharing words get close vectors; equal texts, equal vectors."""

    model_name = "test-hash-embedder"

    def __init__(self) -> None:
        self.calls = 0

    def _vector(self, text: str) -> np.ndarray:
        vector = np.zeros(DIMENSION)
        vector[0] = 0.25  # never a zero vector
        for word in re.findall(r"[a-z0-9]+", text.lower()):
            digest = hashlib.sha256(word.encode()).digest()
            vector[1 + digest[0] % (DIMENSION - 1)] += 1.0 if digest[1] % 2 else -1.0
        return vector

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        return np.array([self._vector(t) for t in texts], dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        self.calls += 1
        return self._vector(text).astype(np.float32)


DOCUMENTS = {
    "retention policy.txt": (
        "Backups are kept for thirty five days. After that backups are deleted for good. "
        "A legal hold stops deletion of held data. Only the general counsel lifts a legal hold. "
        "Held data is deleted within thirty days after the hold is lifted. "
        "CCTV footage is kept for thirty one days. Footage for an open investigation is kept "
        "until the investigation closes. Visitor logs are kept for one year."
    ),
    "api reference.txt": (
        "Refunds return the charge amount to the card. The processing fee is not returned when "
        "a charge is refunded. Disputes cost a fee of fifteen dollars. A won dispute returns that "
        "fee. API keys expire after one year. A rolled key keeps working for twenty four hours. "
        "List endpoints return at most one hundred items per page."
    ),
}

QUERIES = [
    ("How long are backups kept and what happens after?", "retention policy.txt",
     ["Backups are kept for thirty five days.", "After that backups are deleted for good."]),
    ("Who lifts a legal hold and when is held data deleted?", "retention policy.txt",
     ["Only the general counsel lifts a legal hold.", "Held data is deleted within thirty days"]),
    ("How long is CCTV footage kept?", "retention policy.txt",
     ["CCTV footage is kept for thirty one days.", "Footage for an open investigation is kept"]),
    ("Is the processing fee returned on refunds?", "api reference.txt",
     ["The processing fee is not returned when a charge is refunded."]),
    ("How long does a rolled API key keep working?", "api reference.txt",
     ["A rolled key keeps working for twenty four hours."]),
]  # fmt: skip


def snippets(document: str, answers: list[str]) -> list[dict[str, object]]:
    text = DOCUMENTS[document]
    return [
        {"file_path": document, "span": [text.index(a), text.index(a) + len(a)], "answer": a}
        for a in answers
    ]


def write_legalbench(root: Path) -> tuple[Path, Path]:
    """Write the fixture as a LegalBench-RAG JSON and corpus folder; return both paths."""
    corpus = root / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    for name, text in DOCUMENTS.items():
        (corpus / name).write_text(text, encoding="utf-8")
    tests = [{"query": q, "snippets": snippets(d, a), "kind": "extra key"} for q, d, a in QUERIES]
    benchmark = root / "benchmark.json"
    benchmark.write_text(json.dumps({"tests": tests}), encoding="utf-8")
    return benchmark, corpus


def write_jsonl(root: Path) -> tuple[Path, Path]:
    """Write the fixture as queries.jsonl and corpus.jsonl; return both paths."""
    root.mkdir(parents=True, exist_ok=True)
    corpus = root / "corpus.jsonl"
    corpus.write_text(
        "\n".join(json.dumps({"id": d, "text": t}) for d, t in DOCUMENTS.items()) + "\n\n"
    )
    rows = []
    for query, document, answers in QUERIES:
        spans = [{"doc_id": s["file_path"], "span": s["span"]} for s in snippets(document, answers)]
        rows.append(json.dumps({"query": query, "snippets": spans}))
    queries = root / "queries.jsonl"
    queries.write_text("\n".join(rows) + "\n")
    return queries, corpus
