"""link_store on real embedded stores (InMemory, FAISS, Chroma, Qdrant): the links it writes, and
what it writes: only SCAR's link keys, only in chunks whose links changed, through batch calls.

No store is mocked: each is the real store; the tests wrap its write methods to record the calls,
and read what it holds through its own public API. PGVectorStore runs the same checks in
``tests/postgres/test_pg_link_store.py``.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore
from langchain_text_splitters import RecursiveCharacterTextSplitter

from lc_stores import STORES, Corpus, CountingEmbeddings, expected_links, make_corpus, store_ids
from scar_core._errors import DataFormatError, InvalidSettingsError, MissingDependencyError
from scar_langchain import SCARRetriever, link_chunks, link_store, replace_documents
from scar_langchain._links import LINK_KEYS, NEXT_ID_KEY, PREVIOUS_ID_KEY

KINDS = ["memory", "faiss", "chroma", "qdrant"]


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return make_corpus()


def qdrant_store(embeddings: Any, documents: list[Document], ids: list[Any]) -> Any:
    """A QdrantVectorStore on a real in-memory client that records its write calls."""
    from langchain_qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient, models

    class RecordingQdrantClient(QdrantClient):
        """The real local client; write calls and scrolls with vectors are recorded."""

        calls: list[tuple[str, Any]]

        def batch_update_points(
            self, collection_name: str, update_operations: Any, **kw: Any
        ) -> Any:
            self.calls.append(("batch_update_points", list(update_operations)))
            return super().batch_update_points(collection_name, update_operations, **kw)

        def set_payload(self, *args: Any, **kwargs: Any) -> Any:
            self.calls.append(("set_payload", kwargs))
            return super().set_payload(*args, **kwargs)

        def overwrite_payload(self, *args: Any, **kwargs: Any) -> Any:
            self.calls.append(("overwrite_payload", kwargs))
            return super().overwrite_payload(*args, **kwargs)

        def scroll(self, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("with_vectors"):
                self.calls.append(("scroll with vectors", kwargs))
            return super().scroll(*args, **kwargs)

    client = RecordingQdrantClient(":memory:")
    name = f"scar-{uuid.uuid4().hex[:12]}"
    size = len(embeddings.embed_query(documents[0].page_content))
    vectors = models.VectorParams(size=size, distance=models.Distance.COSINE)
    client.create_collection(name, vectors_config=vectors)
    store = QdrantVectorStore(client=client, collection_name=name, embedding=embeddings)
    store.add_documents(documents, ids=ids)
    client.calls = []
    return store


BUILDERS: dict[str, Callable[..., VectorStore]] = {**STORES, "qdrant": qdrant_store}


class Watch:
    """Records the chunk ids each write call of a store names (the memory store: by identity)."""

    def __init__(self, kind: str, store: Any) -> None:
        self.kind, self.store, self.calls = kind, store, list[list[str]]()
        if kind == "memory":
            self.before = {i: row["metadata"] for i, row in store.store.items()}
        elif kind == "faiss":
            from langchain_community.docstore.in_memory import InMemoryDocstore

            calls = self.calls

            class RecordingDocstore(InMemoryDocstore):
                def add(self, texts: dict[str, Document]) -> None:
                    calls.append(list(texts))
                    super().add(texts)

            store.docstore = RecordingDocstore(store.docstore._dict)
        elif kind == "chroma":
            collection, update = store._collection, store._collection.update

            def recorded(*args: Any, **kwargs: Any) -> Any:
                self.calls.append(list(kwargs["ids"]))
                return update(*args, **kwargs)

            collection.update = recorded
        else:
            store.client.calls.clear()

    def written(self) -> list[list[str]]:
        """The ids of each write call since the last ``written()``."""
        if self.kind == "memory":
            rows = self.store.store
            calls = [[i for i, row in rows.items() if row["metadata"] is not self.before[i]]]
            self.before = {i: row["metadata"] for i, row in rows.items()}
            return [c for c in calls if c]
        if self.kind == "qdrant":
            client_calls = self.store.client.calls
            assert all(name == "batch_update_points" for name, _ in client_calls), client_calls
            calls = [sorted({_point(op) for op in ops}) for _, ops in client_calls]
            client_calls.clear()
            return calls
        calls = list(self.calls)
        self.calls.clear()
        return calls


def _point(operation: Any) -> str:
    selector = operation.set_payload if hasattr(operation, "set_payload") else None
    selector = selector or operation.delete_payload
    (point,) = selector.points
    return str(point)


def held(kind: str, store: Any) -> dict[str, tuple[Any, dict[str, Any]]]:
    """``{id: (text, vector and other payload; metadata)}``, read through the store's own API."""
    if kind == "memory":
        return {
            i: ((r["text"], list(r["vector"])), dict(r["metadata"])) for i, r in store.store.items()
        }
    if kind == "faiss":
        vectors = store.index.reconstruct_n(0, store.index.ntotal)
        return {
            i: ((d.page_content, d.id, vectors[row].tolist()), dict(d.metadata))
            for row, i in store.index_to_docstore_id.items()
            if (d := store.docstore.search(i))
        }
    if kind == "chroma":
        got = store._collection.get(include=["documents", "metadatas", "embeddings"])
        rows = zip(got["ids"], got["documents"], got["embeddings"], got["metadatas"], strict=True)
        return {i: ((t, np.asarray(v).tolist()), dict(m or {})) for i, t, v, m in rows}
    from qdrant_client import QdrantClient

    points, _ = QdrantClient.scroll(  # not recorded: this is the test reading
        store.client, store.collection_name, limit=100_000, with_payload=True, with_vectors=True
    )
    return {
        str(p.id): (
            ({k: v for k, v in p.payload.items() if k != "metadata"}, p.vector),
            dict(p.payload.get("metadata") or {}),
        )
        for p in points
    }


def links(holding: dict[str, tuple[Any, dict[str, Any]]]) -> dict[str, tuple[Any, Any]]:
    return {i: (m.get(PREVIOUS_ID_KEY), m.get(NEXT_ID_KEY)) for i, (_, m) in holding.items()}


def assert_only_links_changed(before: dict[str, Any], after: dict[str, Any]) -> None:
    """Texts, vectors, other payload and other metadata keys are exactly as they were."""
    assert sorted(before) == sorted(after)
    for chunk_id, (rest, metadata) in before.items():
        assert after[chunk_id][0] == rest, chunk_id
        others = {k: v for k, v in after[chunk_id][1].items() if k not in LINK_KEYS}
        assert others == {k: v for k, v in metadata.items() if k not in LINK_KEYS}, chunk_id


def build(
    kind: str, corpus: Corpus, documents: list[Document], ids: list[Any] | None = None
) -> tuple[Any, dict[str, str]]:
    """``documents`` in a store, in shuffled order under store ids; text -> store id."""
    order = list(range(len(documents)))
    random.Random(5).shuffle(order)
    ids = ids or store_ids(len(order))
    shuffled = [documents[n] for n in order]
    store = BUILDERS[kind](CountingEmbeddings(corpus), shuffled, [ids[n] for n in order])
    return store, {documents[n].page_content: str(ids[n]) for n in order}


@pytest.mark.parametrize("kind", KINDS)
def test_links_like_link_chunks_writes_only_links_and_a_re_run_writes_nothing(
    kind: str, corpus: Corpus
) -> None:
    store, id_of = build(kind, corpus, corpus.split)
    if kind == "qdrant":  # a payload key outside the metadata must survive too
        store.client.set_payload(
            store.collection_name, {"owner": "team-a"}, points=list(id_of.values())
        )
    watch, before = Watch(kind, store), held(kind, store)
    if kind == "faiss":
        store.index, index = None, store.index  # link_store needs no vector: no index at all
    report = link_store(store)
    if kind == "faiss":
        store.index = index
    assert (report.documents, report.linked, report.changed, report.skipped) == (6, 48, 48, {})
    after = held(kind, store)
    assert links(after) == expected_links(corpus, id_of)  # link_chunks on the split, store ids
    assert_only_links_changed(before, after)
    calls = watch.written()
    assert sorted(i for call in calls for i in call) == sorted(id_of.values())
    assert len(calls) == 1  # 48 chunks: one batch
    assert link_store(store).changed == 0
    assert watch.written() == []
    assert held(kind, store) == after
    docs = SCARRetriever(vectorstore=store, k=8, continuity_bonus=0.5).invoke("query 0")
    assert any(d.metadata["scar_origin"] == "neighbor" for d in docs)


@pytest.mark.parametrize("kind", KINDS)
def test_a_re_run_after_a_deletion_writes_only_the_chunks_whose_links_changed(
    kind: str, corpus: Corpus
) -> None:
    store, id_of = build(kind, corpus, corpus.split)
    link_store(store)
    watch = Watch(kind, store)
    chunk = [id_of[f"document 0 chunk {p} text"] for p in range(8)]
    store.delete([chunk[3]])
    before = held(kind, store)
    report = link_store(store)
    # chunk 1 (its next but one), chunk 2 (its next and next but one), chunk 4 (its previous,
    # previous but one and position), chunk 5 (its previous but one), chunks 5-7 (positions)
    assert report.changed == 6
    assert [sorted(call) for call in watch.written()] == [sorted([*chunk[1:3], *chunk[4:]])]
    after = held(kind, store)
    assert_only_links_changed(before, after)
    assert links(after)[chunk[2]] == (chunk[1], chunk[4])
    assert links(after)[chunk[4]] == (chunk[2], chunk[5])
    assert after[chunk[1]][1]["scar_next2_id"] == chunk[4]
    assert after[chunk[5]][1]["scar_prev2_id"] == chunk[2]
    assert after[chunk[7]][1]["scar_position"] == 6


@pytest.mark.parametrize("kind", KINDS)
def test_relinks_an_index_linked_under_other_ids_and_drops_stale_links(
    kind: str, corpus: Corpus
) -> None:
    # The chunks carry link_chunks' links, but the store holds them under other ids: every link
    # names a chunk that does not exist (an index linked with an older id scheme).
    stray = Document(
        "a chunk of no document",
        metadata={"topic": 9, PREVIOUS_ID_KEY: "gone", NEXT_ID_KEY: "also gone"},
    )
    documents = [*corpus.linked, stray]
    ids = [*store_ids(len(corpus.linked)), store_ids(1, seed=11)[0]]
    store, id_of = build(kind, corpus, documents, ids)
    before = held(kind, store)
    with pytest.warns(UserWarning, match=r"left 1 of 49 chunks unlinked: they hold no metadata"):
        report = link_store(store)
    stray_id = id_of[stray.page_content]
    assert (report.documents, report.linked, report.changed) == (6, 48, 49)
    assert report.skipped == {stray_id: "no metadata['source'] names its document"}
    after = held(kind, store)
    assert_only_links_changed(before, after)
    want = expected_links(corpus, id_of)
    assert {i: ab for i, ab in links(after).items() if i != stray_id} == want
    assert links(after)[stray_id] == (None, None)
    assert after[stray_id][1] == {"topic": 9}
    with pytest.warns(UserWarning, match="unlinked"):
        assert link_store(store).changed == 0


def paged_split() -> list[Document]:
    """Two PDFs of three pages, three chunks a page, ``start_index`` restarting on each page."""
    return [
        Document(
            f"document {d} chunk {3 * page + n} text",
            metadata={"source": f"doc-{d}.pdf", "page": page, "start_index": 25 * n},
        )
        for d in range(2)
        for page in range(3)
        for n in range(3)
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_paged_documents_are_linked_page_by_page_never_interleaved(
    kind: str, corpus: Corpus
) -> None:
    split = paged_split()
    store, id_of = build(kind, corpus, split)
    before = held(kind, store)
    with pytest.raises(DataFormatError) as refused:
        link_store(store)
    assert str(refused.value) == (
        "the chunks of document 'doc-0.pdf' carry metadata['page'], and ordering them by "
        "metadata['start_index'] alone would interleave its pages (metadata['start_index'] "
        "restarts on each page); pass order_key=('page', 'start_index')."
    )
    assert held(kind, store) == before  # refused before writing anything
    report = link_store(store, order_key=("page", "start_index"), progress=True)
    assert (report.documents, report.linked, report.changed) == (2, 18, 18)
    after = held(kind, store)
    # link_chunks on the split in reading order cuts the chain where start_index restarts
    linked = link_chunks(split)
    store_id = {c.id: id_of[c.page_content] for c in linked}
    want = {
        store_id[c.id]: tuple(
            store_id.get(c.metadata.get(k)) for k in (PREVIOUS_ID_KEY, NEXT_ID_KEY)
        )
        for c in linked
    }
    assert links(after) == want
    chunk = [id_of[f"document 0 chunk {n} text"] for n in range(5)]
    assert links(after)[chunk[2]] == (chunk[1], None)  # page 0 ends here
    assert links(after)[chunk[3]] == (None, chunk[4])  # page 1 starts here
    assert [after[i][1]["scar_position"] for i in chunk] == [0, 1, 2, 3, 4]
    assert link_store(store, order_key=("page", "start_index")).changed == 0


def test_pages_need_no_page_key_when_start_index_runs_on_across_pages(corpus: Corpus) -> None:
    split = paged_split()
    for n, document in enumerate(split):
        document.metadata["start_index"] = 25 * (n % 9)  # offsets in the whole document
    store, id_of = build("memory", corpus, split)
    assert link_store(store).linked == 18
    assert links(held("memory", store))[id_of["document 0 chunk 2 text"]] == (
        id_of["document 0 chunk 1 text"],
        id_of["document 0 chunk 3 text"],
    )


@pytest.mark.parametrize("kind", ["memory", "qdrant"])
def test_refuses_two_chunks_of_a_document_at_one_place(kind: str, corpus: Corpus) -> None:
    split = [Document(d.page_content, metadata=dict(d.metadata)) for d in corpus.split]
    split[2].metadata["start_index"] = split[1].metadata["start_index"]
    store, id_of = build(kind, corpus, split)
    before = held(kind, store)
    first, second = sorted(id_of[f"document 0 chunk {n} text"] for n in (1, 2))
    with pytest.raises(DataFormatError) as refused:
        link_store(store)
    message = str(refused.value)
    assert "of document 'doc-0.txt' share metadata['start_index']=25" in message
    assert first in message
    assert second in message
    assert "order_key=(...)" in message
    assert "('page', 'start_index')" in message
    assert held(kind, store) == before


def test_refuses_chunks_without_the_order_key(corpus: Corpus) -> None:
    store = STORES["faiss"](
        CountingEmbeddings(corpus),
        [
            *link_chunks(corpus.split[:3]),
            Document("document 1 chunk 0 text", metadata={"source": "doc-1.txt"}),
        ],
        store_ids(4),
    )
    with pytest.raises(
        DataFormatError, match=r"no numeric metadata\['start_index'\].*add_start_index=True"
    ):
        link_store(store)
    with pytest.raises(DataFormatError, match=r"metadata\['position'\]"):
        link_store(store, order_key="position")
    with pytest.raises(InvalidSettingsError, match=r"order_key=\(\) must be a metadata key"):
        link_store(store, order_key=())


def test_refuses_a_store_it_cannot_list(corpus: Corpus) -> None:
    class RowlessStore(InMemoryVectorStore):
        """A real store SCAR cannot list (its subclasses may keep rows elsewhere)."""

    store = RowlessStore(CountingEmbeddings(corpus))
    with pytest.raises(InvalidSettingsError, match="cannot list the chunks of a RowlessStore"):
        link_store(store)


def test_qdrant_integer_ids(corpus: Corpus) -> None:
    store, _ = build("qdrant", corpus, corpus.split, ids=list(range(1, len(corpus.split) + 1)))
    assert link_store(store).linked == 48
    docs = SCARRetriever(vectorstore=store, k=8, continuity_bonus=0.5).invoke("query 0")
    assert any(d.metadata["scar_origin"] == "neighbor" for d in docs)
    assert all(d.id and d.id.isdigit() for d in docs)


def test_chroma_writes_more_chunks_than_its_max_batch_size_in_batches(corpus: Corpus) -> None:
    store = STORES["chroma"](CountingEmbeddings(corpus), corpus.split[:1], store_ids(1))
    most = store._client.get_max_batch_size()
    count = most + 100
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(count, corpus.dimension)).astype(np.float32)
    for start in range(0, count, most):  # the collection's own bulk insert (add_texts embeds)
        part = range(start, min(start + most, count))
        store._collection.add(
            ids=[f"c{n}" for n in part],
            embeddings=vectors[start : part.stop],
            documents=[f"chunk {n}" for n in part],
            metadatas=[{"source": f"doc-{n // 500}", "start_index": 12 * n} for n in part],
        )
    watch = Watch("chroma", store)
    report = link_store(store)
    assert report.changed == count + 1
    assert [len(call) for call in watch.written()] == [most, 101]
    got = store.get(ids=["c0", "c1", "c499", "c500"], include=["metadatas"])
    metadata = dict(zip(got["ids"], got["metadatas"], strict=True))
    assert (metadata["c0"].get(PREVIOUS_ID_KEY), metadata["c0"][NEXT_ID_KEY]) == (None, "c1")
    assert metadata["c499"].get(NEXT_ID_KEY) is None
    assert metadata["c500"]["scar_document_id"] == "doc-1"
    assert link_store(store).changed == 0
    assert watch.written() == []


def tenants_split() -> list[Document]:
    """Two tenants' ``contract.txt``, split for real; tenant b's text starts with 3 spaces."""
    clauses = [f"Clause {n}: the supplier delivers lot {n} within {n + 2} days." for n in range(8)]
    splitter = RecursiveCharacterTextSplitter(
        chunk_size=120, chunk_overlap=30, add_start_index=True
    )
    return splitter.split_documents(
        [
            Document("\n\n".join(clauses), metadata={"source": "contract.txt", "tenant": "a"}),
            Document(
                "   " + "\n\n".join(c.replace("supplier", "vendor") for c in clauses),
                metadata={"source": "contract.txt", "tenant": "b"},
            ),
        ]
    )


@pytest.mark.parametrize("kind", KINDS)
def test_two_tenants_sharing_a_source_do_not_tile_and_a_composite_key_links_them(
    kind: str, corpus: Corpus
) -> None:
    split = tenants_split()
    store, id_of = build(kind, corpus, split)
    before = held(kind, store)
    with pytest.raises(DataFormatError, match=r"'contract.txt' do not tile one text.*'tenant'"):
        link_store(store)
    assert held(kind, store) == before
    report = link_store(store, document_key=("source", "tenant"))
    assert (report.documents, report.linked, report.gaps) == (2, len(split), 0)
    linked = links(held(kind, store))
    for tenant in ("a", "b"):
        ids = [id_of[d.page_content] for d in split if d.metadata["tenant"] == tenant]
        assert [linked[i] for i in ids] == [
            (None if n == 0 else ids[n - 1], ids[n + 1] if n + 1 < len(ids) else None)
            for n in range(len(ids))
        ]


@pytest.mark.parametrize("kind", ["memory", "chroma"])
@pytest.mark.parametrize("page", [None, "1"], ids=["missing", "a-string"])
def test_a_page_key_missing_or_held_as_a_string_is_refused(
    kind: str, page: str | None, corpus: Corpus
) -> None:
    split = paged_split()
    for n, document in enumerate(split):
        document.metadata["start_index"] = 25 * (n % 9)  # offsets in the whole document
    if page is None:
        del split[4].metadata["page"]
    else:
        split[4].metadata["page"] = page
    store, id_of = build(kind, corpus, split)
    with pytest.raises(DataFormatError, match=rf"chunk '{id_of[split[4].page_content]}' of "
                       rf"document 'doc-0.pdf' has metadata\['page'\]={page!r}"):  # fmt: skip
        link_store(store)


def test_a_document_key_no_chunk_holds_is_refused_and_the_report_reads_short(
    corpus: Corpus,
) -> None:
    store, _ = build("memory", corpus, corpus.split)
    with pytest.raises(InvalidSettingsError, match=r"document_key='sorce' names no chunk's "
                       r"document: none of the 48 chunks holds metadata\['sorce'\]"):  # fmt: skip
        link_store(store, document_key="sorce")
    store.add_documents([Document(f"stray {n}", metadata={"start_index": 0}) for n in range(9)])
    with pytest.warns(UserWarning, match=r"left 9 of 57 chunks unlinked"):
        report = link_store(store)
    text = str(report)
    assert text.startswith("link_store: 6 documents, 48 chunks linked, 48 written, 9 skipped")
    assert "... and 6 more" in text
    assert len(text.splitlines()) == 5
    assert len(repr(report)) < 120


@pytest.mark.parametrize("kind", KINDS)
def test_replace_documents_deletes_only_the_old_version_scar_linked(
    kind: str, corpus: Corpus
) -> None:
    old = link_chunks(corpus.split[:16])  # doc-0.txt and doc-1.txt
    edited = [
        Document(d.page_content.replace("text", "txt!"), metadata=dict(d.metadata))
        for d in corpus.split[:8]
    ]
    foreign = Document("document 0 kept", metadata={"source": "doc-0.txt", "start_index": 0})
    store = BUILDERS[kind](
        CountingEmbeddings(corpus), [*old, foreign], [*(c.id for c in old), store_ids(1)[0]]
    )
    new = link_chunks(edited)
    deleted = replace_documents(store, new)
    assert sorted(deleted) == sorted(str(c.id) for c in old[:8])
    kept = held(kind, store)
    assert sorted(kept) == sorted([*(str(c.id) for c in [*new, *old[8:]]), store_ids(1)[0]])
    assert replace_documents(store, new) == []  # re-ingesting the same version deletes nothing


@pytest.mark.parametrize("kind", KINDS)
def test_replace_documents_keeps_another_tenants_upload_of_the_same_name(
    kind: str, corpus: Corpus
) -> None:
    def upload(tenant: str, word: str) -> list[Document]:
        return link_chunks(
            Document(d.page_content.replace("text", word), metadata=d.metadata | {"tenant": tenant})
            for d in corpus.split[:8]  # doc-0.txt, for both tenants
        )

    theirs, mine = upload("b", "teXt"), upload("a", "TEXT")
    store = BUILDERS[kind](
        CountingEmbeddings(corpus), [*theirs, *mine], [c.id for c in [*theirs, *mine]]
    )
    with pytest.warns(UserWarning, match=r"kept 8 chunk\(s\) of the same \['source'\]"):
        deleted = replace_documents(store, upload("a", "tExt"))  # same length: tiles
    assert sorted(deleted) == sorted(str(c.id) for c in mine)
    assert {str(c.id) for c in theirs} <= set(held(kind, store))


def test_progress_without_tqdm_names_the_extra_and_writes_nothing(
    store: InMemoryVectorStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = (PREVIOUS_ID_KEY, NEXT_ID_KEY)
    for row in store.store.values():  # unlink, so that a run would write
        row["metadata"] = {k: v for k, v in row["metadata"].items() if k not in gone}
    before = {i: dict(row["metadata"]) for i, row in store.store.items()}
    monkeypatch.setitem(__import__("sys").modules, "tqdm.auto", None)  # as if not installed
    with pytest.raises(MissingDependencyError, match=r"scar-retrieval\[eval\]"):
        link_store(store, order_key="scar_position", progress=True)
    assert {i: row["metadata"] for i, row in store.store.items()} == before
    report = link_store(store, order_key="scar_position")  # without progress, no tqdm needed
    assert report.changed == len(before)
