"""Chunk ids and the neighbour graph."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scar_core import NeighborGraph, chunk_id_for, link_sequence
from scar_core.errors import LinkError
from scar_core.graph import CHUNK_ID_NAMESPACE


def test_chunk_ids_are_stable_uuids_that_differ_by_document_and_position() -> None:
    first = chunk_id_for("rfc9293.txt", 3)
    assert first == chunk_id_for("rfc9293.txt", 3)
    assert uuid.UUID(first).version == 5
    assert len({first, chunk_id_for("rfc9293.txt", 4), chunk_id_for("gdpr.txt", 3)}) == 3


@given(st.text(min_size=1), st.integers(min_value=0, max_value=10**12))
def test_chunk_ids_are_the_uuid5_of_document_and_position(document: str, position: int) -> None:
    # Ids already stored must keep resolving: the id is uuid5(namespace, "document\x1fposition").
    expected = uuid.uuid5(CHUNK_ID_NAMESPACE, f"{document}\x1f{position}")
    assert chunk_id_for(document, position) == str(expected)


@pytest.mark.parametrize(("document", "position"), [("", 0), ("doc", -1), ("doc", True)])
def test_chunk_id_arguments_are_validated(document: str, position: int) -> None:
    with pytest.raises(LinkError):
        chunk_id_for(document, position)


def test_link_sequence_links_each_chunk_to_its_neighbours() -> None:
    chunks = link_sequence("doc", 3)
    assert [c.position for c in chunks] == [0, 1, 2]
    assert chunks[0].previous_id is None
    assert chunks[0].next_id == chunks[1].chunk_id
    assert chunks[2].previous_id == chunks[1].chunk_id
    assert chunks[2].next_id is None
    assert link_sequence("doc", 0) == []
    graph = NeighborGraph.from_linked_chunks([*chunks, *link_sequence("other", 2)])
    assert graph.walk(chunks[0].chunk_id, "next", 5) == [chunks[1].chunk_id, chunks[2].chunk_id]
    assert graph.document_of(chunks[1].chunk_id) == "doc"


def test_from_sequences_refuses_a_chunk_id_used_twice() -> None:
    with pytest.raises(LinkError, match="'x' appears twice"):
        NeighborGraph.from_sequences({"a": ["x", "y"], "b": ["x"]})


def test_malformed_link_pairs_are_refused_with_the_chunk_named() -> None:
    with pytest.raises(LinkError, match="chunk 'a'"):
        NeighborGraph({"a": ("b",)})  # type: ignore[dict-item]


def test_bad_targets_are_dropped_not_followed() -> None:
    graph = NeighborGraph({"a": ("a", ""), "b": (None, 7)})  # type: ignore[dict-item]
    assert graph.step("a", "previous") is None
    assert graph.step("a", "next") is None
    assert graph.step("b", "next") is None
    assert graph.step("unknown", "next") is None


links_pairs = st.dictionaries(
    st.sampled_from("abcdef"),
    st.tuples(
        st.sampled_from([None, "", "a", "b", "c", "d", "e", "f"]),
        st.sampled_from([None, "", "a", "b", "c", "d", "e", "f"]),
        st.sampled_from([None, "doc1", "doc2"]),
    ),
)


@given(links_pairs, links_pairs)
def test_a_graph_grown_chunk_by_chunk_equals_one_built_at_once(
    first: dict[str, tuple[str | None, str | None, str | None]],
    second: dict[str, tuple[str | None, str | None, str | None]],
) -> None:
    """add() cleans as the constructor does, and a later add replaces a chunk's links."""
    grown = NeighborGraph({})
    for batch in (first, second):
        for chunk_id, (previous, following, document) in batch.items():
            grown.add(chunk_id, previous, following, document)
    final = {**first, **second}
    built = NeighborGraph(
        {chunk_id: (previous, following) for chunk_id, (previous, following, _) in final.items()},
        {chunk_id: document for chunk_id, (_, _, document) in final.items() if document},
    )
    for chunk_id in "abcdefg":
        assert (chunk_id in grown) == (chunk_id in built)
        assert grown.document_of(chunk_id) == built.document_of(chunk_id)
        for direction in ("previous", "next"):
            assert grown.step(chunk_id, direction) == built.step(chunk_id, direction)
