"""SCAR returns no node the user's own search, with the same filter, could not return.

On real stores (SimpleVectorStore, Chroma, Qdrant with a sync and with an async client; PGVector in
``tests/postgres/test_pg_llamaindex.py``), a document's secret middle node and a link into another
tenant's document stay out whatever the mode, sync and async; a node deleted from the index stays
out; duplicate input nodes come back once while the count is still filled with distinct nodes; and
where SCAR cannot filter (FAISS, another store, a filter form the store refuses) it refuses, unless
``neighbor_filter`` or ``allow_unfiltered_neighbors`` says what to do instead.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.core.vector_stores import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from li_stores import (
    GUARDED_NAMES,
    GUARDED_QUERY,
    PUBLIC,
    TENANT_1,
    WAYS_FORWARD,
    Built,
    check_guarded,
    check_passages_are_linked,
    chroma_built,
    faiss_built,
    guarded_id,
    guarded_nodes,
    hits,
    memory,
    names,
    qdrant_built,
)
from li_support import angle, docstore_of, ids_and_scores, linked_nodes, scored
from scar_core._errors import InvalidSettingsError
from scar_llamaindex import SCARNodePostprocessor

BUNDLE = QueryBundle(GUARDED_QUERY)
GUARDED_STORES: dict[str, Callable[[], Built]] = {
    "simple": lambda: memory(guarded_nodes),
    "chroma": lambda: chroma_built(guarded_nodes),
    "qdrant": lambda: qdrant_built(nodes=guarded_nodes),
}
#: Filters of two conditions. OR: Qdrant's get_nodes would OR its id condition with them if SCAR
#: passed them as they are.
EITHER = MetadataFilters(
    filters=[
        MetadataFilter(key="access", value="public"),
        MetadataFilter(key="access", operator=FilterOperator.IN, value=["internal"]),
    ],
    condition=FilterCondition.OR,
)
BOTH = MetadataFilters(filters=[*PUBLIC.filters, *TENANT_1.filters])


@pytest.fixture(scope="module", params=list(GUARDED_STORES))
def guarded(request: pytest.FixtureRequest) -> Built:
    return GUARDED_STORES[request.param]()


@pytest.fixture(scope="module")
def guarded_faiss() -> Built:
    return faiss_built(nodes=guarded_nodes)


async def test_nothing_the_search_filter_excludes_comes_back(guarded: Built) -> None:
    await check_guarded(guarded)


async def test_nor_on_qdrant_with_an_async_client_only() -> None:
    await check_guarded(qdrant_built(use_async=True, nodes=guarded_nodes), sync=False)


@pytest.mark.parametrize(
    ("filters", "excluded"),
    [(EITHER, {"a2"}), (BOTH, {"a2", "b0", "b1", "b2"})],
    ids=["or", "and"],
)
async def test_filters_of_several_conditions_are_applied_whole(
    guarded: Built, filters: MetadataFilters, excluded: set[str]
) -> None:
    retriever = guarded.index.as_retriever(similarity_top_k=2, filters=filters)
    found = retriever.retrieve(BUNDLE)
    assert not set(names(found)) & excluded
    scar = SCARNodePostprocessor.from_retriever(retriever, mode="paper", window=2)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "QdrantVectorStore.aget_nodes failed", UserWarning)
        outputs = [
            scar.postprocess_nodes(found, BUNDLE),
            await scar.apostprocess_nodes(found, BUNDLE),
        ]
    for output in outputs:
        assert not set(names(output)) & excluded
        assert len(output) > len(found)  # neighbours the filter admits do come


def test_the_retrievers_node_ids_and_doc_ids_bound_the_neighbours() -> None:
    simple = memory(guarded_nodes).index
    others = [guarded_id(n) for n in GUARDED_NAMES.values() if n != "a2"]
    by_id = VectorIndexRetriever(simple, similarity_top_k=4, node_ids=others)
    qdrant = qdrant_built(nodes=guarded_nodes).index  # Qdrant searches within doc_ids
    by_document = VectorIndexRetriever(qdrant, similarity_top_k=4, doc_ids=["doc-a"])
    for retriever, index, excluded in [
        (by_id, simple, {"a2"}),
        (by_document, qdrant, {"b0", "b1", "b2"}),
    ]:
        found = retriever.retrieve(BUNDLE)
        assert not set(names(found)) & excluded  # the search keeps within them
        unbounded = SCARNodePostprocessor.from_index(index, filters=None, mode="paper", window=2)
        assert set(names(unbounded.postprocess_nodes(found, BUNDLE))) & excluded
        scar = SCARNodePostprocessor.from_retriever(retriever, mode="paper", window=2)
        assert not set(names(scar.postprocess_nodes(found, BUNDLE))) & excluded


@pytest.mark.parametrize("retriever_first", [True, False])
async def test_a_node_deleted_from_a_simple_index_never_comes_back(retriever_first: bool) -> None:
    built = memory(guarded_nodes)
    index, secret = built.index, guarded_id("a2")
    early = index.as_retriever(similarity_top_k=4)  # its node_ids still name the node
    found = early.retrieve(BUNDLE)
    assert "a2" in names(
        SCARNodePostprocessor.from_index(index, filters=None).postprocess_nodes(found, BUNDLE)
    )
    index.delete_nodes([secret])  # from the vector store; the docstore keeps it
    assert index.docstore.get_node(secret).node_id == secret
    retriever = early if retriever_first else index.as_retriever(similarity_top_k=4)
    found = retriever.retrieve(BUNDLE)
    assert "a2" not in names(found)
    for scar in (
        SCARNodePostprocessor.from_retriever(retriever),
        SCARNodePostprocessor.from_index(index, filters=None, mode="paper", window=2),
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # nothing embedded: the node is not read at all
            outputs = [
                scar.postprocess_nodes(found, BUNDLE),
                await scar.apostprocess_nodes(found, BUNDLE),
            ]
        for output in outputs:
            assert "a2" not in names(output)
            check_passages_are_linked(output)


def test_duplicate_input_nodes_come_back_once_and_distinct_nodes_fill_the_count() -> None:
    built = memory()
    query = "topic1 part 4 word1x4"
    found = hits(built, query, 4)
    for given, settings in [
        ([found[0], found[0], found[1], found[2]], {}),
        ([found[1], found[0], found[1], found[0]], {}),
        ([found[0]] * 3 + found[1:3], {"top_n": 4}),
    ]:
        output = SCARNodePostprocessor.from_index(
            built.index, filters=None, **settings
        ).postprocess_nodes(given, QueryBundle(query))
        ids = [n.node.node_id for n in output]
        assert len(ids) == len(set(ids)) == 4
        assert given[0].node.node_id in ids  # the best hit is kept


def test_duplicates_under_a_filter_fill_the_count_with_nodes_it_admits() -> None:
    built = memory(guarded_nodes)
    retriever = built.index.as_retriever(similarity_top_k=4, filters=PUBLIC)
    found = retriever.retrieve(BUNDLE)
    given = [found[0], found[1], found[0], found[1]]
    output = SCARNodePostprocessor.from_retriever(retriever).postprocess_nodes(given, BUNDLE)
    assert len(set(names(output))) == len(output) == 4
    assert "a2" not in names(output)


def test_distinct_nodes_with_the_same_text_and_vector_are_not_merged() -> None:
    twins = linked_nodes("a", [angle(10), angle(10), angle(30)])
    twins[1].text = twins[0].text
    output = SCARNodePostprocessor(filters=None, docstore=docstore_of(twins)).postprocess_nodes(
        scored(twins[:2], [0.9, 0.9]), QueryBundle("q", embedding=angle(0))
    )
    assert [n.node.node_id for n in output] == ["a0", "a1"]


def test_unlinked_duplicates_come_back_once() -> None:
    nodes = [TextNode(id_=f"u{i}", text=f"unlinked {i}", embedding=angle(i)) for i in range(2)]
    given = scored([nodes[0], nodes[0], nodes[1]], [0.9, 0.9, 0.8])
    with pytest.warns(UserWarning, match="PREVIOUS/NEXT"):
        output = SCARNodePostprocessor(filters=None, docstore=docstore_of(nodes)).postprocess_nodes(
            given
        )
    assert ids_and_scores(output) == [("u0", 0.9), ("u1", 0.8)]


# Where SCAR cannot filter: it refuses, naming the store and the two ways forward.


def test_faiss_with_filters_is_refused(guarded_faiss: Built) -> None:
    with pytest.raises(InvalidSettingsError, match=rf"(?s)FaissVectorStore: .*{WAYS_FORWARD}"):
        SCARNodePostprocessor.from_index(guarded_faiss.index, filters=PUBLIC)


def test_an_unknown_store_with_filters_is_refused() -> None:
    store = faiss_built(mapped=True, nodes=guarded_nodes)  # a store SCAR has no reader for
    with pytest.raises(
        InvalidSettingsError,
        match=rf"(?s)FaissMapVectorStore: SCAR applies MetadataFilters .* only.*{WAYS_FORWARD}",
    ):
        SCARNodePostprocessor.from_index(store.index, filters=PUBLIC)
    with pytest.raises(InvalidSettingsError, match=rf"(?s)no vector store.*{WAYS_FORWARD}"):
        SCARNodePostprocessor(docstore=store.index.docstore, filters=PUBLIC)


@pytest.mark.parametrize(
    ("build", "filters", "why"),
    [
        (
            lambda: chroma_built(guarded_nodes),
            [MetadataFilter(key="access", value="x", operator=FilterOperator.TEXT_MATCH)],
            r"ChromaVectorStore: its filter conversion refuses .*TEXT_MATCH",
        ),
        (
            lambda: memory(guarded_nodes),
            [MetadataFilters(filters=PUBLIC.filters)],
            "SimpleVectorStore: .*nested MetadataFilters",
        ),
    ],
)
def test_a_filter_form_the_store_cannot_take_is_refused(
    build: Callable[[], Built], filters: list[Any], why: str
) -> None:
    refused = MetadataFilters(filters=filters)
    with pytest.raises(InvalidSettingsError, match=rf"(?s){why}.*{WAYS_FORWARD}"):
        SCARNodePostprocessor.from_index(build().index, filters=refused)


def test_a_store_specific_filter_of_the_retriever_is_refused() -> None:
    index = chroma_built(guarded_nodes).index
    retriever = index.as_retriever(vector_store_kwargs={"where": {"access": "public"}})
    with pytest.raises(InvalidSettingsError, match=rf"(?s)\['where'\].*{WAYS_FORWARD}"):
        SCARNodePostprocessor.from_retriever(retriever)
    scar = SCARNodePostprocessor.from_retriever(retriever, neighbor_filter=lambda m: True)
    assert scar.settings.neighbor_filter is not None


def test_filters_set_after_construction_are_refused_at_the_first_query(
    guarded_faiss: Built,
) -> None:
    scar = SCARNodePostprocessor.from_index(guarded_faiss.index, filters=None)
    found = hits(guarded_faiss, GUARDED_QUERY, 4)
    scar.filters = PUBLIC
    with pytest.raises(InvalidSettingsError, match="FaissVectorStore"):
        scar.postprocess_nodes(found, BUNDLE)


def test_from_retriever_takes_only_an_index_retriever_and_its_own_filters() -> None:
    built = memory(guarded_nodes)
    retriever = built.index.as_retriever(filters=PUBLIC)
    scar = SCARNodePostprocessor.from_retriever(retriever, mode="paper")
    assert scar.filters is PUBLIC
    assert (scar.vector_store, scar.embed_model) == (built.index.vector_store, built.embed_model)
    with pytest.raises(InvalidSettingsError, match=r"retriever's own filters.*from_index"):
        SCARNodePostprocessor.from_retriever(retriever, filters=TENANT_1)
    with pytest.raises(TypeError, match=r"VectorIndexRetriever.*not str.*from_index\(index, filt"):
        SCARNodePostprocessor.from_retriever("retriever")  # type: ignore[arg-type]


# The two ways forward, and neighbor_filter beside native filters.


def faiss_public_hits(built: Built) -> list[NodeWithScore]:
    """FAISS cannot filter its search: the public hits, filtered after it."""
    return [n for n in hits(built, GUARDED_QUERY, 6) if n.node.metadata["access"] == "public"][:4]


async def test_neighbor_filter_guards_a_store_scar_cannot_filter(guarded_faiss: Built) -> None:
    found = faiss_public_hits(guarded_faiss)
    scar = SCARNodePostprocessor.from_index(
        guarded_faiss.index, filters=PUBLIC, neighbor_filter=lambda m: m["access"] == "public"
    )
    for output in (
        scar.postprocess_nodes(found, BUNDLE),
        await scar.apostprocess_nodes(found, BUNDLE),
    ):
        assert "a2" not in names(output)
        assert len(output) == 4


def test_allow_unfiltered_neighbors_reads_without_the_filter_only_where_scar_cannot(
    guarded_faiss: Built,
) -> None:
    found = faiss_public_hits(guarded_faiss)
    opted = SCARNodePostprocessor.from_index(
        guarded_faiss.index, filters=PUBLIC, allow_unfiltered_neighbors=True
    )
    assert "a2" in names(opted.postprocess_nodes(found, BUNDLE))  # as documented: unfiltered
    built = memory(guarded_nodes)  # where SCAR can filter, it still does
    retriever = built.index.as_retriever(similarity_top_k=4, filters=PUBLIC)
    scar = SCARNodePostprocessor.from_retriever(retriever, allow_unfiltered_neighbors=True)
    assert "a2" not in names(scar.postprocess_nodes(retriever.retrieve(BUNDLE), BUNDLE))


def test_neighbor_filter_applies_besides_the_native_filters(guarded: Built) -> None:
    retriever = guarded.index.as_retriever(similarity_top_k=2, filters=PUBLIC)
    found = retriever.retrieve(BUNDLE)
    seen: list[dict[str, Any]] = []

    def tenant_2(metadata: dict[str, Any]) -> bool:
        seen.append(metadata)
        return bool(metadata["tenant"] == "t2")

    plain = SCARNodePostprocessor.from_retriever(retriever, mode="paper", window=2)
    assert "a4" in names(plain.postprocess_nodes(found, BUNDLE))
    scar = SCARNodePostprocessor.from_retriever(
        retriever, mode="paper", window=2, neighbor_filter=tenant_2
    )
    output = scar.postprocess_nodes(found, BUNDLE)
    assert names(found) == ["b0", "a3"]
    assert not {"a2", "a4"} & set(names(output))  # a3, a t1 hit, stays: hits are not re-filtered
    assert seen
    assert all(m["access"] == "public" for m in seen)  # what the native filter let through


def test_filters_serialise_and_the_predicate_does_not(tmp_path: Path) -> None:
    scar = SCARNodePostprocessor.from_index(
        memory(guarded_nodes).index,
        filters=PUBLIC,
        neighbor_filter=bool,
    )
    data = scar.to_dict()
    assert data["filters"]["filters"][0]["key"] == "access"
    assert data["settings"]["allow_unfiltered_neighbors"] is False
    assert "neighbor_filter" not in data["settings"]
