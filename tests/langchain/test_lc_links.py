import pytest
from langchain_core.documents import Document
from langchain_text_splitters import RecursiveCharacterTextSplitter
from lc_fakes import chain_documents

from scar_core.errors import DataFormatError
from scar_core.graph import chunk_id_for
from scar_langchain import DEFAULT_KEYS, ChunkMetadataKeys, link_chunks, read_links


def test_ids_are_uuid5_of_source_and_position_and_links_chain_in_order() -> None:
    chunks = link_chunks(chain_documents("a.txt", ["one", "two", "three"]))
    ids = [chunk_id_for("a.txt", position) for position in range(3)]
    assert [chunk.id for chunk in chunks] == ids
    assert [chunk.metadata["scar_chunk_id"] for chunk in chunks] == ids
    assert [chunk.metadata["scar_position"] for chunk in chunks] == [0, 1, 2]
    assert all(chunk.metadata["scar_document_id"] == "a.txt" for chunk in chunks)
    assert "scar_prev_id" not in chunks[0].metadata
    assert chunks[0].metadata["scar_next_id"] == ids[1]
    assert chunks[1].metadata["scar_prev_id"] == ids[0]
    assert chunks[1].metadata["scar_next_id"] == ids[2]
    assert chunks[2].metadata["scar_prev_id"] == ids[1]
    assert "scar_next_id" not in chunks[2].metadata


def test_relinking_gives_the_same_ids() -> None:
    first = link_chunks(chain_documents("a.txt", ["one", "two"]))
    again = link_chunks(chain_documents("a.txt", ["one", "two"]))
    assert [c.id for c in first] == [c.id for c in again]


def test_interleaved_documents_are_grouped_by_source_keeping_order() -> None:
    docs = [
        Document("a0", metadata={"source": "a"}),
        Document("b0", metadata={"source": "b"}),
        Document("a1", metadata={"source": "a"}),
        Document("b1", metadata={"source": "b"}),
    ]
    chunks = link_chunks(docs)
    assert [c.page_content for c in chunks] == ["a0", "b0", "a1", "b1"]
    assert chunks[0].metadata["scar_next_id"] == chunks[2].id
    assert chunks[2].metadata["scar_prev_id"] == chunks[0].id
    assert chunks[1].metadata["scar_next_id"] == chunks[3].id
    assert chunks[2].id == chunk_id_for("a", 1)
    assert chunks[3].id == chunk_id_for("b", 1)


def test_input_is_not_modified() -> None:
    docs = chain_documents("a.txt", ["one", "two"])
    link_chunks(docs)
    assert docs[0].id is None
    assert docs[0].metadata == {"source": "a.txt"}


def test_custom_keys_and_document_id_key() -> None:
    keys = ChunkMetadataKeys(chunk_id="id", previous_id="prev_id", next_id="next_id")
    docs = [Document("x", metadata={"doc": 7}), Document("y", metadata={"doc": 7})]
    chunks = link_chunks(docs, document_id_key="doc", keys=keys)
    assert chunks[0].metadata["next_id"] == chunks[1].id == chunk_id_for("7", 1)
    assert chunks[1].metadata["prev_id"] == chunks[0].metadata["id"]
    links = read_links(chunks[1], keys)
    assert links.previous_id == chunks[0].id
    assert links.document_id == "7"
    assert read_links(chunks[1], DEFAULT_KEYS).previous_id is None


@pytest.mark.parametrize("bad", [None, "", 1.5, True, ["a"]])
def test_missing_or_unusable_document_id_is_a_clear_error(bad: object) -> None:
    docs = [Document("x", metadata={"source": "a"}), Document("y", metadata={"source": bad})]
    with pytest.raises(DataFormatError, match=r"chunk 1 has metadata\['source'\]"):
        link_chunks(docs)


def test_splitter_offsets_are_kept_and_a_reset_breaks_the_chain() -> None:
    splitter = RecursiveCharacterTextSplitter(chunk_size=40, chunk_overlap=0, add_start_index=True)
    page_one = Document(" ".join(f"alpha{i}" for i in range(20)), metadata={"source": "f.pdf"})
    page_two = Document(" ".join(f"beta{i}" for i in range(20)), metadata={"source": "f.pdf"})
    chunks = link_chunks(splitter.split_documents([page_one, page_two]))
    offsets = [c.metadata["start_index"] for c in chunks]
    reset = next(i for i in range(1, len(offsets)) if offsets[i] <= offsets[i - 1])
    assert offsets[reset] == 0
    assert "scar_next_id" not in chunks[reset - 1].metadata
    assert "scar_prev_id" not in chunks[reset].metadata
    # Ids still run on across the reset: they stay unique within the document id.
    assert len({c.id for c in chunks}) == len(chunks)
    for i in range(1, reset):
        assert chunks[i].metadata["scar_prev_id"] == chunks[i - 1].id


def test_read_links_treats_wrong_types_as_absent() -> None:
    doc = Document(
        "x",
        metadata={
            "scar_chunk_id": 3,
            "scar_prev_id": 12,
            "scar_next_id": "",
            "scar_position": -1,
            "scar_document_id": ["a"],
            "start_index": True,
        },
    )
    links = read_links(doc)
    assert links.chunk_id is None
    assert links.previous_id is None
    assert links.next_id is None
    assert links.position is None
    assert links.document_id is None
    assert links.start_index is None


def test_read_links_prefers_document_id_over_metadata() -> None:
    doc = Document("x", id="real", metadata={"scar_chunk_id": "meta"})
    assert read_links(doc).chunk_id == "real"
    assert read_links(Document("x", metadata={"scar_chunk_id": "meta"})).chunk_id == "meta"
