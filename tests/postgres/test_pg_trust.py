"""Trust on a real PostgreSQL with pgvector: nothing the search's filter excludes comes back.

The same check as ``tests/langchain/test_trust.py``; the filter is PGVectorStore's own, on
metadata columns, and SCAR applies it through ``get(ids, where=...)``.
"""

from __future__ import annotations

import warnings
from typing import Any

import langchain_postgres
import pytest

from lc_stores import STORES, comparable, pgvector_store
from lc_trust import FILTERS, QUERY, SETTINGS, check_no_leak, tenant_chunks
from scar_langchain import SCARRetriever
from scar_langchain._links import NEXT_ID_KEY, PREVIOUS_ID_KEY

pytestmark = pytest.mark.postgres


def test_nothing_the_filter_excludes_comes_back(engine: Any, table_name: str) -> None:
    chunks, embeddings = tenant_chunks()
    columns = [langchain_postgres.Column(name, "TEXT") for name in ("tenant", "access")]
    store = pgvector_store(
        engine, table_name, embeddings, chunks, [c.id for c in chunks], metadata_columns=columns
    )
    assert check_no_leak(store, chunks, FILTERS["pgvector"]()) > 0


#: Link ids no UUID column can hold: each must count as a missing neighbour, not fail the query.
BAD_LINKS = {0: (PREVIOUS_ID_KEY, "not-a-uuid"), 11: (NEXT_ID_KEY, "-17")}
BAD_LINKS[6] = (PREVIOUS_ID_KEY, "x" * 100_000)


@pytest.mark.parametrize("id_type", ["UUID", "TEXT"])
async def test_a_link_id_the_id_column_cannot_hold_counts_as_missing(
    engine: Any, table_name: str, id_type: str
) -> None:
    chunks, embeddings = tenant_chunks()
    for index, (key, bad) in BAD_LINKS.items():
        chunks[index].metadata[key] = bad
    ids = [c.id for c in chunks]
    column = langchain_postgres.Column("langchain_id", id_type)
    store = pgvector_store(engine, table_name, embeddings, chunks, ids, id_column=column)
    in_memory = STORES["memory"](embeddings, chunks, ids)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for settings in SETTINGS:
            got = SCARRetriever(vectorstore=store, **settings).invoke(QUERY)
            want = SCARRetriever(vectorstore=in_memory, **settings).invoke(QUERY)
            assert comparable(got) == comparable(want), settings
            again = await SCARRetriever(vectorstore=store, **settings).ainvoke(QUERY)
            assert comparable(again) == comparable(want), settings
    said = [str(w.message) for w in caught if "cannot hold" in str(w.message)]
    if id_type == "TEXT":  # any string is a TEXT id: the bad links are simply not there
        assert not said
    else:  # warned once per store, naming the store and an id it refused
        assert len(said) == 1
        assert "PGVectorStore" in said[0]
        assert "'not-a-uuid'" in said[0] or "'-17'" in said[0]
