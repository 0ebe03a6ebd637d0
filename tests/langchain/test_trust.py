"""Trust: SCAR returns only what the user's own search, with the same filter, could return, and
never overwrites chunks it did not create.

Each store is the real embedded one (InMemory, FAISS, Chroma, Qdrant); PostgreSQL runs the same
check in ``tests/postgres/test_pg_trust.py``.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore

from lc_stores import STORES
from lc_trust import FILTERS, QUERY, SETTINGS, check_no_leak, forbidden, leaks, tenant_chunks
from scar_core._errors import DataFormatError, InvalidSettingsError
from scar_langchain import SCARRetriever, link_chunks
from scar_langchain._links import CHUNK_ID_KEY


@pytest.fixture(scope="module")
def tenants() -> tuple[list[Document], Any]:
    return tenant_chunks()


@pytest.mark.parametrize("kind", ["memory", "faiss", "chroma", "qdrant"])
def test_nothing_the_filter_excludes_comes_back(
    kind: str, tenants: tuple[list[Document], Any]
) -> None:
    chunks, embeddings = tenants
    store = STORES[kind](embeddings, chunks, [c.id for c in chunks])
    assert check_no_leak(store, chunks, FILTERS[kind]()) > 0, "SCAR should still add neighbours"


def test_the_check_catches_a_read_that_ignores_the_filter(
    tenants: tuple[list[Document], Any],
) -> None:
    chunks, embeddings = tenants
    store = STORES["memory"](embeddings, chunks, [c.id for c in chunks])
    retriever = SCARRetriever(
        vectorstore=store, k=5, mode="paper", search_kwargs={"filter": FILTERS["memory"]()}
    )
    unfiltered = retriever._reader.read
    retriever._reader.read = lambda ids, search: unfiltered(ids, {})  # type: ignore[method-assign]
    got = retriever.invoke(QUERY)
    # The secret chunk, and the other tenant's chunk that a forged link names.
    assert set(leaks(got, forbidden(chunks))) == {chunks[3].id, chunks[6].id}


class UnknownStore(InMemoryVectorStore):
    """A store SCAR has no reader for: it reads chunks by id, with no filter."""


def test_a_filter_on_an_unknown_store_is_refused_with_the_ways_forward(
    tenants: tuple[list[Document], Any],
) -> None:
    chunks, embeddings = tenants
    store = UnknownStore(embeddings)
    store.add_documents(chunks, ids=[c.id for c in chunks])
    public_a = FILTERS["memory"]()
    expected = r"UnknownStore.*'filter'.*neighbor_filter=.*allow_unfiltered_neighbors=True"
    with pytest.raises(InvalidSettingsError, match=expected):
        SCARRetriever(vectorstore=store, search_kwargs={"filter": public_a})
    plain = SCARRetriever(vectorstore=store, k=5)
    with pytest.raises(InvalidSettingsError, match=expected):
        plain.invoke(QUERY, filter=public_a)
    with pytest.raises(InvalidSettingsError, match=expected):
        asyncio.run(plain.ainvoke(QUERY, filter=public_a))

    guarded = SCARRetriever(
        vectorstore=store,
        k=5,
        search_kwargs={"filter": public_a},
        neighbor_filter=lambda m: m["tenant"] == "a" and m["access"] == "public",
    )
    with pytest.warns(UserWarning, match="embedded at query time"):
        got = guarded.invoke(QUERY)
    assert not leaks(got, forbidden(chunks))
    assert len(got) == 5  # tenant a's five public chunks, a3 left out

    opted_out = SCARRetriever(
        vectorstore=store, k=5, search_kwargs={"filter": public_a}, allow_unfiltered_neighbors=True
    )
    assert chunks[3].id in leaks(opted_out.invoke(QUERY), forbidden(chunks))


def test_a_harmless_search_argument_needs_no_filter(tenants: tuple[list[Document], Any]) -> None:
    chunks, embeddings = tenants
    store = STORES["faiss"](embeddings, chunks, [c.id for c in chunks])
    filtered = {"filter": FILTERS["faiss"](), "fetch_k": 50}
    got = SCARRetriever(vectorstore=store, k=4, search_kwargs=filtered).invoke(QUERY)
    assert len(got) == 4
    assert not leaks(got, forbidden(chunks))


def test_two_uploads_with_one_name_never_share_an_id() -> None:
    first = link_chunks([Document("Q1 revenue rose.", metadata={"source": "report.pdf"})])
    second = link_chunks([Document("Q1 revenue fell.", metadata={"source": "report.pdf"})])
    other_tenant = link_chunks(
        [Document("Q1 revenue rose.", metadata={"source": "report.pdf", "tenant": "b"})]
    )
    assert len({first[0].id, second[0].id, other_tenant[0].id}) == 3
    again = link_chunks([Document("Q1 revenue rose.", metadata={"source": "report.pdf"})])
    assert again[0].id == first[0].id  # the same content: a re-run overwrites it with itself
    assert link_chunks(first)[0].id == first[0].id  # linking linked chunks changes nothing


def test_the_second_upload_does_not_overwrite_the_first_in_a_store(
    tenants: tuple[list[Document], Any],
) -> None:
    chunks, embeddings = tenants  # both tenants' documents are named "contract.txt"
    store = STORES["memory"](embeddings, chunks[:6], [c.id for c in chunks[:6]])
    store.add_documents(chunks[6:], ids=[c.id for c in chunks[6:]])
    assert len(store.store) == 12


def test_a_document_split_over_two_calls_is_refused_by_name() -> None:
    parts = [
        Document(f"part {p} of the manual", metadata={"source": "manual.md", "start_index": 30 * p})
        for p in range(6)
    ]
    first = link_chunks(parts[:3])
    with pytest.raises(DataFormatError, match=r"'manual.md' starts at start_index=90"):
        link_chunks(parts[3:])
    assert not {c.id for c in link_chunks(parts)} & {c.id for c in first}  # ids: whole documents
    whitespace = Document("Title", metadata={"source": "notes.md", "start_index": 2})
    assert link_chunks([whitespace])[0].metadata["scar_position"] == 0


def test_repeated_boilerplate_in_one_document_gets_distinct_ids() -> None:
    chunks = link_chunks(
        [Document("Page footer.", metadata={"source": "a.txt"})] * 3, trust_order=True
    )
    assert len({c.id for c in chunks}) == 3
    assert chunks[0].metadata["scar_next_id"] == chunks[1].id


class IdlessStore(InMemoryVectorStore):
    """Returns hits without ``Document.id``, all naming one ``scar_chunk_id`` in metadata."""

    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, **kwargs: Any
    ) -> list[Document]:
        hits = super().similarity_search_by_vector(embedding, k=k, **kwargs)
        return [
            Document(h.page_content, metadata=h.metadata | {CHUNK_ID_KEY: "shared"}) for h in hits
        ]

    async def asimilarity_search_by_vector(
        self, embedding: list[float], k: int = 4, **kwargs: Any
    ) -> list[Document]:
        return self.similarity_search_by_vector(embedding, k=k, **kwargs)


def test_distinct_hits_without_ids_are_never_merged(tenants: tuple[list[Document], Any]) -> None:
    chunks, embeddings = tenants
    store = IdlessStore(embeddings)
    store.add_documents(chunks, ids=[c.id for c in chunks])
    plain = store.similarity_search_by_vector(embeddings.embed_query(QUERY), k=4)
    with pytest.warns(UserWarning, match="embedded at query time"):
        got_sync = SCARRetriever(vectorstore=store, k=4).invoke(QUERY)
    got_async = asyncio.run(SCARRetriever(vectorstore=store, k=4).ainvoke(QUERY))
    for got in (got_sync, got_async):
        assert sorted(d.page_content for d in got) == sorted(d.page_content for d in plain)


def test_a_merged_passage_claims_only_the_metadata_all_its_chunks_share(
    tenants: tuple[list[Document], Any],
) -> None:
    chunks, embeddings = tenants
    store = STORES["memory"](embeddings, chunks, [c.id for c in chunks])
    own = {c.id: c.metadata for c in chunks}
    mixed = 0
    for settings in SETTINGS:
        merged = SCARRetriever(vectorstore=store, **settings | {"merge_passages": True})
        for passage in merged.invoke(QUERY):
            members = [own[i] for i in passage.metadata["scar_chunk_ids"]]
            for key, value in passage.metadata.items():
                if key in own[chunks[0].id] and key != "start_index":
                    assert all(m[key] == value for m in members), (settings, key, value)
            if len({m["access"] for m in members}) > 1:
                mixed += 1
                assert "access" not in passage.metadata
            listed = passage.metadata["scar_chunks"]
            for meta, member in zip(listed, members, strict=True):
                assert {k: meta[k] for k in member} == member  # each chunk's own metadata
    assert mixed > 0, "some passage should join the secret chunk to a public one"


#: A filter in a form the store's search does not take, for each store.
WRONG_FORMS = {
    "memory": {"tenant": "a"},  # InMemoryVectorStore takes a function of a Document
    "faiss": "tenant == 'a'",
    "chroma": lambda m: m["tenant"] == "a",
    "qdrant": {"tenant": "a"},  # QdrantVectorStore takes a models.Filter
}


@pytest.mark.parametrize("kind", ["memory", "faiss", "chroma", "qdrant"])
def test_a_filter_the_store_does_not_take_is_refused_by_name(
    kind: str, tenants: tuple[list[Document], Any]
) -> None:
    chunks, embeddings = tenants
    store = STORES[kind](embeddings, chunks, [c.id for c in chunks])
    wrong = WRONG_FORMS[kind]
    named = rf"{type(store).__name__}.*filter={re.escape(repr(wrong))}"
    with pytest.raises(InvalidSettingsError, match=named):
        SCARRetriever(vectorstore=store, search_kwargs={"filter": wrong})
    with pytest.raises(InvalidSettingsError, match=named):
        SCARRetriever(vectorstore=store).invoke(QUERY, filter=wrong)
