"""What SCARNodePostprocessor does when the input or the stores lack something: it says so."""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path

import pytest
from llama_index.core.schema import QueryBundle, TextNode

from li_support import (
    QUERY,
    BrokenDocstore,
    WordHashEmbedding,
    angle,
    docstore_of,
    hash_index,
    ids_and_scores,
    linked_nodes,
    scored,
)
from scar_core._errors import NeighborFetchError
from scar_llamaindex import SCARNodePostprocessor

BUNDLE = QueryBundle("q", embedding=angle(0.0))


def unlinked(count: int) -> list[TextNode]:
    return [
        TextNode(id_=f"u{i}", text=f"unlinked {i}", embedding=angle(10 * i)) for i in range(count)
    ]


def test_unlinked_input_comes_back_as_it_came_with_one_warning() -> None:
    nodes = unlinked(4)
    scar = SCARNodePostprocessor(filters=None, docstore=docstore_of(nodes))
    with pytest.warns(UserWarning, match="PREVIOUS/NEXT.*node parser") as caught:
        first = scar.postprocess_nodes(scored(nodes, [0.9, 0.8, 0.7, 0.6]), BUNDLE)
    assert len(caught) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = scar.postprocess_nodes(scored(nodes, [0.9, 0.8, 0.7, 0.6]), BUNDLE)
    assert ids_and_scores(first) == ids_and_scores(second) == [
        ("u0", 0.9), ("u1", 0.8), ("u2", 0.7), ("u3", 0.6),
    ]  # fmt: skip
    assert all(n.node.metadata["scar_expanded"] is False for n in first)
    assert [n.node.metadata["scar_origin"] for n in first] == ["hit"] * 4


def test_unlinked_input_honours_top_n_and_needs_no_query() -> None:
    nodes = unlinked(4)
    scar = SCARNodePostprocessor(filters=None, docstore=docstore_of(nodes), top_n=2, mode="paper")
    with pytest.warns(UserWarning, match="PREVIOUS/NEXT"):
        output = scar.postprocess_nodes(scored(nodes, [0.9, 0.8, 0.7, 0.6]))
    assert ids_and_scores(output) == [("u0", 0.9), ("u1", 0.8)]


def test_linked_input_is_marked_expanded() -> None:
    nodes = linked_nodes("a", [angle(d) for d in (10, 20, 80)])
    output = SCARNodePostprocessor(filters=None, docstore=docstore_of(nodes)).postprocess_nodes(
        scored(nodes[:1], [0.9]), BUNDLE
    )
    assert [n.node.metadata["scar_expanded"] for n in output] == [True]


def test_nodes_without_stored_vectors_are_embedded_once_with_one_warning(tmp_path: Path) -> None:
    index = hash_index()
    embed_model = WordHashEmbedding()
    hits = index.as_retriever(similarity_top_k=4).retrieve(QUERY)
    scar = SCARNodePostprocessor(
        docstore=index.docstore,
        filters=None,
        embed_model=embed_model,
    )
    with pytest.warns(UserWarning, match=r"SimpleDocumentStore.*vector_store=index\.vector_store"):
        first = scar.postprocess_nodes(hits, QueryBundle(QUERY))
    embedded = first[0].node.metadata["scar_embedded"]
    assert embedded == embed_model.texts_embedded > 4  # the hits and the neighbours read
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = scar.postprocess_nodes(hits, QueryBundle(QUERY))
        other = SCARNodePostprocessor(  # another postprocessor on the same store: warned already
            docstore=index.docstore,
            filters=None,
            embed_model=embed_model,
        )
        other.postprocess_nodes(hits, QueryBundle(QUERY))
    assert {n.node.metadata["scar_embedded"] for n in second} == {0}  # cached
    reference = SCARNodePostprocessor.from_index(index, filters=None).postprocess_nodes(
        hits, QueryBundle(QUERY)
    )
    assert [n.node.node_id for n in first] == [n.node.node_id for n in reference]


async def test_the_async_path_embeds_and_warns_alike(tmp_path: Path) -> None:
    index = hash_index()
    hits = await index.as_retriever(similarity_top_k=3).aretrieve(QUERY)
    scar = SCARNodePostprocessor(
        docstore=index.docstore,
        filters=None,
        embed_model=WordHashEmbedding(),
    )
    with pytest.warns(UserWarning, match="SCAR embedded their text") as caught:
        output = await scar.apostprocess_nodes(hits, QueryBundle(QUERY))
    assert len(caught) == 1
    assert output[0].node.metadata["scar_embedded"] > 3


def test_a_failing_store_raises_neighbor_fetch_error_naming_it() -> None:
    nodes = linked_nodes("a", [angle(d) for d in (30, 10, 20)])
    scar = SCARNodePostprocessor(filters=None, docstore=docstore_of(nodes, BrokenDocstore()))
    with pytest.raises(NeighborFetchError, match=r"BrokenDocstore.*2 node\(s\)") as raised:
        scar.postprocess_nodes(scored(nodes[1:2], [0.9]), BUNDLE)
    assert isinstance(raised.value.__cause__, ConnectionError)
    with pytest.raises(NeighborFetchError, match="BrokenDocstore") as raised:
        asyncio.run(scar.apostprocess_nodes(scored(nodes[1:2], [0.9]), BUNDLE))
    assert isinstance(raised.value.__cause__, ConnectionError)


def test_a_neighbour_missing_from_the_store_ends_the_passage() -> None:
    nodes = linked_nodes("a", [angle(d) for d in (15, 10, 20)])
    scar = SCARNodePostprocessor(filters=None, docstore=docstore_of(nodes[1:]), mode="paper")
    output = scar.postprocess_nodes(scored(nodes[1:2], [0.9]), BUNDLE)
    assert [n.node.node_id for n in output] == ["a1", "a2"]


def test_vectors_of_another_dimension_are_reported() -> None:
    nodes = linked_nodes("a", [angle(10), [1.0, 0.0, 0.0]])
    scar = SCARNodePostprocessor(filters=None, docstore=docstore_of(nodes))
    with pytest.warns(UserWarning, match="no usable embedding.*the model the index was built"):
        output = scar.postprocess_nodes(scored(nodes[:1], [0.9]), BUNDLE)
    assert ids_and_scores(output) == [("a0", 0.9)]
    assert output[0].node.metadata["scar_expanded"] is True  # a0 itself was scored


def test_a_linked_query_needs_the_query() -> None:
    nodes = linked_nodes("a", [angle(d) for d in (10, 20)])
    scar = SCARNodePostprocessor(filters=None, docstore=docstore_of(nodes))
    with pytest.raises(ValueError, match="needs the query"):
        scar.postprocess_nodes(scored(nodes[:1], [0.9]))
