"""link_store on a real pgvector database (langchain-postgres PGVectorStore).

PGVectorStore's only public write is ``add_embeddings``, an upsert of whole rows: link_store reads
the rows of the changed chunks alone (with their vectors), and writes them back with the new
links. These tests check that it reads and writes no other row, that texts, vectors and other
metadata come back exactly as they were, and that a re-run writes nothing. The store uses its own
connections (its ``PGEngine``); SCAR opens none.
"""

from __future__ import annotations

import random
from typing import Any

import langchain_postgres
import pytest
from langchain_core.documents import Document

from lc_stores import Corpus, CountingEmbeddings, expected_links, make_corpus, store_ids
from scar_core._errors import DataFormatError, InvalidSettingsError
from scar_langchain import SCARRetriever, link_store
from scar_langchain._links import LINK_KEYS, NEXT_ID_KEY, PREVIOUS_ID_KEY

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return make_corpus()


class RecordingPGVectorStore(langchain_postgres.PGVectorStore):
    """The real PGVectorStore; records the ids it upserts and the ids it reads vectors of."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.upserts: list[list[str]] = []
        self.vector_reads: list[list[str]] = []

    def add_embeddings(
        self, texts: Any, embeddings: Any, metadatas: Any = None, ids: Any = None, **kwargs: Any
    ) -> Any:
        self.upserts.append(list(ids))
        return super().add_embeddings(texts, embeddings, metadatas, ids, **kwargs)

    def get(self, *args: Any, **kwargs: Any) -> Any:
        if "embeddings" in (kwargs.get("include") or []):
            self.vector_reads.append(list(kwargs["ids"]))
        return super().get(*args, **kwargs)


def pg_store(
    engine: Any, table: str, corpus: Corpus, documents: list[Document], columns: bool = False
) -> tuple[Any, dict[str, str]]:
    """``documents`` in a new table, in shuffled order under store ids; text -> store id."""
    order = list(range(len(documents)))
    random.Random(5).shuffle(order)
    ids = store_ids(len(order))
    options: dict[str, Any] = {}
    if columns:
        Column = langchain_postgres.Column
        options["metadata_columns"] = [Column("source", "TEXT"), Column("start_index", "INTEGER")]
    engine.init_vectorstore_table(table, corpus.dimension, **options)
    store = RecordingPGVectorStore.create_sync(
        engine,
        CountingEmbeddings(corpus),
        table,
        metadata_columns=[c.name for c in options.get("metadata_columns", [])],
    )
    store.add_documents([documents[n] for n in order], ids=[ids[n] for n in order])
    store.upserts.clear()
    store.embeddings.calls = 0
    return store, {documents[n].page_content: ids[n] for n in order}


def held(store: Any) -> dict[str, tuple[Any, dict[str, Any]]]:
    """``{id: ((text, vector as PostgreSQL prints it), metadata)}``, through the store's ``get``."""
    got = langchain_postgres.PGVectorStore.get(
        store, include=["documents", "metadatas", "embeddings"]
    )
    rows = zip(got["ids"], got["documents"], got["embeddings"], got["metadatas"], strict=True)
    return {i: ((text, vector), dict(meta)) for i, text, vector, meta in rows}


def links(holding: dict[str, tuple[Any, dict[str, Any]]]) -> dict[str, tuple[Any, Any]]:
    return {i: (m.get(PREVIOUS_ID_KEY), m.get(NEXT_ID_KEY)) for i, (_, m) in holding.items()}


def assert_only_links_changed(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert sorted(before) == sorted(after)
    for chunk_id, (rest, metadata) in before.items():
        assert after[chunk_id][0] == rest, chunk_id  # the same text, the same vector text
        others = {k: v for k, v in after[chunk_id][1].items() if k not in LINK_KEYS}
        assert others == {k: v for k, v in metadata.items() if k not in LINK_KEYS}, chunk_id


@pytest.mark.parametrize("columns", [False, True], ids=["json-metadata", "metadata-columns"])
def test_pg_links_rewriting_only_changed_rows_and_a_re_run_writes_nothing(
    engine: Any, corpus: Corpus, table_name: str, columns: bool
) -> None:
    store, id_of = pg_store(engine, table_name, corpus, corpus.split, columns)
    before = held(store)
    report = link_store(store)
    assert (report.documents, report.linked, report.changed, report.skipped) == (6, 48, 48, {})
    after = held(store)
    assert links(after) == expected_links(corpus, id_of)
    assert_only_links_changed(before, after)
    assert sorted(i for call in store.upserts for i in call) == sorted(id_of.values())
    # vectors are read for the rows it rewrites alone
    assert sorted(map(sorted, store.vector_reads)) == sorted(map(sorted, store.upserts))
    assert store.embeddings.calls == 0
    store.upserts.clear()
    store.vector_reads.clear()
    assert link_store(store).changed == 0
    assert store.upserts == store.vector_reads == []
    assert held(store) == after
    chunk = [id_of[f"document 0 chunk {p} text"] for p in range(8)]
    store.delete([chunk[3]])
    assert link_store(store).changed == 6  # chunk 1's next but one, 2, and 4-7 (see LangChain's)
    assert sorted(i for call in store.upserts for i in call) == sorted([*chunk[1:3], *chunk[4:]])
    assert links(held(store))[chunk[4]] == (chunk[2], chunk[5])
    docs = SCARRetriever(vectorstore=store, k=8, continuity_bonus=0.5).invoke("query 0")
    assert any(d.metadata["scar_origin"] == "neighbor" for d in docs)


def test_pg_relinks_an_index_linked_under_other_ids(
    engine: Any, corpus: Corpus, table_name: str
) -> None:
    store, id_of = pg_store(engine, table_name, corpus, corpus.linked)  # links name other ids
    before = held(store)
    assert link_store(store).changed == 48
    after = held(store)
    assert links(after) == expected_links(corpus, id_of)
    assert_only_links_changed(before, after)
    assert link_store(store).changed == 0


def test_pg_two_tenants_sharing_a_source_are_refused_and_a_composite_key_links_them(
    engine: Any, corpus: Corpus, table_name: str
) -> None:
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    clauses = [f"Clause {n}: the supplier delivers lot {n} within {n + 2} days." for n in range(8)]
    split = RecursiveCharacterTextSplitter(
        chunk_size=120, chunk_overlap=30, add_start_index=True
    ).split_documents(
        [
            Document("\n\n".join(clauses), metadata={"source": "contract.txt", "tenant": "a"}),
            Document(
                "   " + "\n\n".join(c.replace("supplier", "vendor") for c in clauses),
                metadata={"source": "contract.txt", "tenant": "b"},
            ),
        ]
    )
    store, _ = pg_store(engine, table_name, corpus, split)
    with pytest.raises(DataFormatError, match=r"'contract.txt' do not tile one text"):
        link_store(store)
    assert store.upserts == []
    with pytest.raises(InvalidSettingsError, match=r"document_key='sorce' names no chunk's"):
        link_store(store, document_key="sorce")
    report = link_store(store, document_key=("source", "tenant"))
    assert (report.documents, report.linked, report.gaps) == (2, len(split), 0)
