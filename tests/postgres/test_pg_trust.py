"""Trust on a real PostgreSQL with pgvector: nothing the search's filter excludes comes back.

The same check as ``tests/langchain/test_trust.py``; the filter is PGVectorStore's own, on
metadata columns, and SCAR applies it through ``get(ids, where=...)``.
"""

from __future__ import annotations

from typing import Any

import pytest

from lc_stores import pgvector_store
from lc_trust import FILTERS, check_no_leak, tenant_chunks

pytestmark = pytest.mark.postgres

langchain_postgres = pytest.importorskip("langchain_postgres")


def test_nothing_the_filter_excludes_comes_back(engine: Any, table_name: str) -> None:
    chunks, embeddings = tenant_chunks()
    columns = [langchain_postgres.Column(name, "TEXT") for name in ("tenant", "access")]
    store = pgvector_store(
        engine, table_name, embeddings, chunks, [c.id for c in chunks], metadata_columns=columns
    )
    assert check_no_leak(store, chunks, FILTERS["pgvector"]()) > 0
