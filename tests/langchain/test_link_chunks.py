"""link_chunks on real LangChain splitters: documents are told apart by their whole key, their
chunks must tile one text, and a chunk's id depends on its whole document."""

from __future__ import annotations

from datetime import date

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.documents import Document
from langchain_text_splitters import RecursiveCharacterTextSplitter

from scar_core._errors import DataFormatError
from scar_langchain import link_chunks
from scar_langchain._links import NEXT_ID_KEY, PREVIOUS_ID_KEY

MINUTES = "Minutes of the board meeting.\n\n" + "\n\n".join(
    f"Item {n}: the board discussed budget line {n} and agreed to revisit it next quarter."
    for n in range(12)
)


def split(*documents: Document, size: int = 200, overlap: int = 40) -> list[Document]:
    splitter = RecursiveCharacterTextSplitter(
        chunk_size=size, chunk_overlap=overlap, add_start_index=True
    )
    return splitter.split_documents(list(documents))


def chains(chunks: list[Document]) -> list[list[str]]:
    """The texts of each chain the links make, walking next links from each chain's head."""
    by_id = {c.id: c for c in chunks}
    heads = [c for c in chunks if c.metadata.get(PREVIOUS_ID_KEY) is None]
    walks = []
    for head in heads:
        walk, chunk = [head.page_content], head
        while (following := chunk.metadata.get(NEXT_ID_KEY)) is not None:
            chunk = by_id[following]
            walk.append(chunk.page_content)
        walks.append(walk)
    return walks


def test_two_tenants_files_with_one_source_are_refused_by_name_and_kept_apart_by_a_key() -> None:
    tenant_a = Document(MINUTES, metadata={"source": "minutes.txt", "tenant": "a"})
    tenant_b = Document(MINUTES.replace("board", "council"), metadata={"source": "minutes.txt",
                                                                      "tenant": "b"})  # fmt: skip
    chunks = split(tenant_a, tenant_b)
    with pytest.raises(DataFormatError, match=r"'minutes.txt' do not tile one text: chunk \d+ "):
        link_chunks(chunks)
    linked = link_chunks(chunks, document_key=("source", "tenant"))
    walks = chains(linked)
    assert len(walks) == 2
    assert all(len({"board" in t for t in w} | {"council" in t for t in w}) == 2 for w in walks)


def test_documents_keep_the_types_of_their_keys() -> None:
    chunks = [
        Document(f"Part {n}.", metadata={"source": source, "start_index": 8 * n})
        for source in (1, "1")
        for n in range(2)
    ]
    with pytest.raises(DataFormatError):  # one text cannot start twice
        link_chunks([Document(c.page_content, metadata={**c.metadata, "source": 1})
                     for c in chunks])  # fmt: skip
    linked = link_chunks(chunks)
    assert linked[1].metadata.get(NEXT_ID_KEY) is None
    assert linked[2].metadata.get(PREVIOUS_ID_KEY) is None
    assert len({c.id for c in linked}) == 4


def test_chunks_without_offsets_are_linked_only_when_their_order_is_trusted() -> None:
    parts = [Document(f"Part {n} of the manual.", metadata={"source": "manual.md"})
             for n in range(4)]  # fmt: skip
    with pytest.raises(DataFormatError, match=r"'manual.md' has 4 chunks.*trust_order=True"):
        link_chunks(parts)
    assert len(chains(link_chunks(parts, trust_order=True))) == 1
    assert link_chunks(parts[:1])[0].metadata.get(NEXT_ID_KEY) is None  # one chunk: no link


@pytest.mark.parametrize("page", [None, "2"], ids=["missing", "a-string"])
def test_a_page_key_must_be_a_number_on_every_chunk(page: str | None) -> None:
    chunks = [
        Document(f"Page {p} text.", metadata={"source": "a.pdf", "page": p, "start_index": 0})
        for p in range(3)
    ]
    chunks[2].metadata["page"] = page
    with pytest.raises(
        DataFormatError, match=rf"chunk 2 of document 'a.pdf' has metadata\['page'\]={page!r}"
    ):
        link_chunks(chunks)
    chunks[2].metadata["page"] = 2
    assert len(chains(link_chunks(chunks))) == 3  # each page linked on its own


def test_a_text_that_starts_with_whitespace_links_with_the_readme_recipe() -> None:
    text = (
        " " * 20
        + "GNU GENERAL PUBLIC LICENSE\n"
        + " " * 23
        + "Version 3\n\n"
        + "\n\n".join(
            f"{n}. Definitions and terms of section {n}, which apply to every covered work." * 3
            for n in range(20)
        )
    )
    chunks = RecursiveCharacterTextSplitter(chunk_size=400, add_start_index=True).split_documents(
        [Document(text, metadata={"source": "GPL-3"})]
    )
    assert chunks[0].metadata["start_index"] == 20
    assert len(chains(link_chunks(chunks))) == 1


def test_chunks_left_out_of_a_call_are_refused_with_a_true_message() -> None:
    chunks = split(Document(MINUTES, metadata={"source": "minutes.txt"}))
    with pytest.raises(DataFormatError, match=r"starts at start_index=\d+ in this call.*missing"):
        link_chunks(chunks[2:])
    with pytest.raises(DataFormatError, match=r"chunk 2 starts at \d+, \d+ characters after"):
        link_chunks(chunks[:2] + chunks[3:])


def test_two_uploads_with_one_header_share_no_id() -> None:
    first = split(Document(MINUTES, metadata={"source": "minutes.txt"}))
    second = split(Document(MINUTES.replace("Item 11", "Item 12"),
                            metadata={"source": "minutes.txt"}))  # fmt: skip
    assert first[0].page_content == second[0].page_content  # the same header chunk
    one, two = link_chunks(first), link_chunks(second)
    assert not {c.id for c in one} & {c.id for c in two}
    assert one[0].metadata[NEXT_ID_KEY] == one[1].id
    assert [c.id for c in link_chunks(first)] == [c.id for c in one]  # re-ingesting: idempotent
    assert [c.id for c in link_chunks(one)] == [c.id for c in one]  # linked chunks: unchanged


def test_metadata_values_count_with_their_types() -> None:
    def first_id(value: object) -> str | None:
        return link_chunks([Document("Text.", metadata={"source": "a", "day": value})])[0].id

    assert len({first_id(date(2024, 1, 1)), first_id("2024-01-01"), first_id(1),
                first_id(1.0), first_id(True), first_id("1")}) == 6  # fmt: skip


TEXTS = st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=4)


def documents(texts: list[str], source: str, extra: dict[str, object]) -> list[Document]:
    starts = [sum(len(t) + 1 for t in texts[:n]) for n in range(len(texts))]
    return [
        Document(t, metadata={"source": source, "start_index": s, **extra})
        for t, s in zip(texts, starts, strict=True)
    ]


@settings(max_examples=150, deadline=None)
@given(TEXTS, TEXTS, st.sampled_from(["a.txt", "b.txt"]), st.sampled_from([{}, {"tenant": 2}]))
def test_ids_never_collide_across_documents_and_repeat_for_the_same_input(
    first: list[str], second: list[str], source: str, extra: dict[str, object]
) -> None:
    one = link_chunks(documents(first, "a.txt", {}))
    two = link_chunks(documents(second, source, extra))
    assert [c.id for c in link_chunks(documents(first, "a.txt", {}))] == [c.id for c in one]
    same = first == second and source == "a.txt" and not extra
    assert same or not {c.id for c in one} & {c.id for c in two}
    assert len({c.id for c in one}) == len(one)


@pytest.mark.parametrize("bad", [-1, 2.5, True, "64"])
def test_a_max_gap_that_is_not_an_integer_of_zero_or_more_is_refused_by_name(bad: object) -> None:
    from langchain_core.vectorstores import InMemoryVectorStore

    from scar_core._errors import InvalidSettingsError
    from scar_langchain import link_store

    chunks = split(Document(MINUTES, metadata={"source": "minutes.txt"}))
    with pytest.raises(InvalidSettingsError, match=rf"max_gap={bad!r} .*integer >= 0"):
        link_chunks(chunks, max_gap=bad)  # type: ignore[arg-type]
    store = InMemoryVectorStore(embedding=None)  # type: ignore[arg-type]
    with pytest.raises(InvalidSettingsError, match=rf"max_gap={bad!r} .*integer >= 0"):
        link_store(store, max_gap=bad)  # type: ignore[arg-type]
