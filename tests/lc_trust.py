"""A two-tenant corpus with a secret chunk, and the filter each LangChain store's search takes.

Shared by ``tests/langchain/test_trust.py`` and ``tests/postgres/test_pg_trust.py``. Tenant
``a`` has one document of six chunks whose middle chunk (``a3``) is ``access="secret"``; tenant
``b`` has one document whose first chunk a forged link reaches from ``a5``. Every vector is close
to the query, so SCAR would take every neighbour it may read: a chunk that comes back although
the filter excludes it is a leak, not a tie.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from scar_langchain import SCARRetriever, link_chunks
from scar_langchain._links import NEXT_ID_KEY

QUERY = "what does tenant a's contract say?"
#: The settings every store is checked under: budget mode at several k, the paper's rule with
#: windows 1 and 2, each also with merged passages.
SETTINGS: list[dict[str, Any]] = [
    {"k": 2}, {"k": 3}, {"k": 5}, {"mode": "paper", "k": 2},
    {"mode": "paper", "k": 3, "window": 2},
]  # fmt: skip
SETTINGS += [s | {"merge_passages": True} for s in SETTINGS]


class TableEmbeddings(Embeddings):
    """Every text's vector from a table; the query is close to all of them."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.table.get(text, self.table[QUERY])  # Qdrant probes with "dummy_text"


def tenant_chunks(dimension: int = 16, seed: int = 11) -> tuple[list[Document], Embeddings]:
    """The linked chunks of both tenants (a5 forged to link to b0), and their embeddings."""
    rng = np.random.default_rng(seed)
    base = rng.normal(size=dimension)
    table: dict[str, list[float]] = {QUERY: _unit(base)}
    split = []
    for tenant in ("a", "b"):
        for position in range(6):
            text = f"tenant {tenant} contract, part {position}"
            table[text] = _unit(base + rng.normal(scale=0.15, size=dimension))
            secret = tenant == "a" and position == 3
            metadata = {
                "source": "contract.txt",  # the same name for both tenants
                "tenant": tenant,
                "access": "secret" if secret else "public",
                "start_index": 40 * position,
            }
            split.append(Document(text, metadata=metadata))
    chunks = link_chunks(split, document_key=("source", "tenant"))
    chunks[5].metadata[NEXT_ID_KEY] = chunks[6].id  # a link into the other tenant
    return chunks, TableEmbeddings(table)


def _unit(vector: np.ndarray) -> list[float]:
    return [float(x) for x in (vector / np.linalg.norm(vector)).astype(np.float32)]


def forbidden(chunks: list[Document]) -> dict[str, str]:
    """``{id: text}`` of the chunks tenant a's public search may not return."""
    return {
        c.id or "": c.page_content
        for c in chunks
        if c.metadata["tenant"] != "a" or c.metadata["access"] != "public"
    }


#: The filter "tenant a, public" in the form each store's search takes.
FILTERS: dict[str, Callable[[], Any]] = {
    "memory": lambda: lambda d: d.metadata["tenant"] == "a" and d.metadata["access"] == "public",
    "faiss": lambda: {"tenant": "a", "access": "public"},
    "chroma": lambda: {"$and": [{"tenant": "a"}, {"access": "public"}]},
    "pgvector": lambda: {"$and": [{"tenant": {"$eq": "a"}}, {"access": {"$eq": "public"}}]},
}


def qdrant_filter() -> Any:
    from qdrant_client import models

    return models.Filter(
        must=[
            models.FieldCondition(key=f"metadata.{key}", match=models.MatchValue(value=value))
            for key, value in (("tenant", "a"), ("access", "public"))
        ]
    )


FILTERS["qdrant"] = qdrant_filter


def leaks(documents: list[Document], secret: dict[str, str]) -> list[str]:
    """What of ``secret`` came back: as a Document, in a merged passage's ids, or in its text."""
    found = []
    for document in documents:
        ids = document.metadata.get("scar_chunk_ids", [document.id])
        found += [i for i in ids if i in secret]
        found += [i for i, text in secret.items() if text in document.page_content]
    return found


def check_no_leak(store: VectorStore, chunks: list[Document], search_filter: Any) -> int:
    """Query every setting, sync and async, filter at init and per call; return neighbours seen.

    Raises:
        AssertionError: If any chunk the filter excludes comes back.
    """
    secret = forbidden(chunks)
    neighbours = 0
    for settings in SETTINGS:
        at_init = SCARRetriever(
            vectorstore=store, search_kwargs={"filter": search_filter}, **settings
        )
        per_call = SCARRetriever(vectorstore=store, **settings)
        for name, got in [
            ("init", at_init.invoke(QUERY)),
            ("async", asyncio.run(at_init.ainvoke(QUERY))),
            ("per call", per_call.invoke(QUERY, filter=search_filter)),
            ("per call, async", asyncio.run(per_call.ainvoke(QUERY, filter=search_filter))),
        ]:
            assert not leaks(got, secret), (settings, name, leaks(got, secret))
            neighbours += sum(
                len(d.metadata.get("scar_chunk_ids", [])) > 1
                or d.metadata.get("scar_origin") == "neighbor"
                for d in got
            )
    return neighbours
