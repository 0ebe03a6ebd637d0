"""Every restriction of the search reaches the neighbour reads, or SCAR refuses by name.

Issue 43's LlamaIndex cases: two indexes sharing one ``StorageContext`` (a neighbour is read only
if the index holds it); search arguments outside ``MetadataFilters`` (an allow-list of
``vector_store_kwargs`` per store: applied to the reads, or known not to narrow the search, or
refused); a postprocessor built without the retriever must be told the filters (``filters=None``
says the search is unfiltered); and bad input gets SCAR's own error, naming the value and the fix.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever
from llama_index.core.llms import MockLLM
from llama_index.core.response_synthesizers.no_text import NoText
from llama_index.core.schema import QueryBundle
from llama_index.core.vector_stores import VectorStoreQuery

from li_stores import (
    GUARDED_NAMES,
    GUARDED_QUERY,
    PUBLIC,
    WAYS_FORWARD,
    Built,
    check_within_index,
    chroma_built,
    guarded_nodes,
    hits,
    memory,
    names,
    qdrant_built,
    shared,
)
from li_support import WordHashEmbedding, angle, docstore_of, linked_nodes, scored
from scar_core._errors import InvalidSettingsError, MissingQueryError
from scar_llamaindex import SCARNodePostprocessor
from scar_llamaindex._reads import reader_for

BUNDLE = QueryBundle(GUARDED_QUERY)


def _chroma_store() -> Any:
    import chromadb
    from llama_index.vector_stores.chroma import ChromaVectorStore

    collection = chromadb.EphemeralClient().create_collection(f"scar-{uuid.uuid4().hex[:12]}")
    return ChromaVectorStore(chroma_collection=collection)


def _qdrant_store() -> Any:
    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient

    return QdrantVectorStore("scar-shared", client=QdrantClient(location=":memory:"))


SHARED: dict[str, Callable[[], tuple[Built, Any]]] = {
    "simple": lambda: shared("memory"),
    "chroma": lambda: shared("chroma", _chroma_store()),
    "qdrant": lambda: shared("qdrant", _qdrant_store()),
}


# 1. Two indexes sharing one StorageContext.


@pytest.mark.parametrize("kind", list(SHARED))
async def test_two_indexes_sharing_a_storage_context_keep_their_own_nodes(kind: str) -> None:
    public, internal = SHARED[kind]()
    assert names(internal.as_retriever(similarity_top_k=1).retrieve(BUNDLE)) == ["a2"]
    await check_within_index(public)


def _faiss_store() -> Any:
    import faiss
    from llama_index.vector_stores.faiss import FaissVectorStore

    return FaissVectorStore(faiss_index=faiss.IndexFlatIP(WordHashEmbedding().size))


@pytest.mark.parametrize("kind", ["memory", "faiss"])
def test_readers_of_stores_without_text_read_only_the_index_s_own_nodes(kind: str) -> None:
    # FAISS is checked at its reader only: LlamaIndex's own FAISS search of a shared store fails
    # (a KeyError) when it finds the other index's row.
    public, internal = shared(kind, _faiss_store() if kind == "faiss" else None)
    ids = [n.node_id for n in guarded_nodes()]
    own = reader_for(public.docstore, public.index.vector_store, public.index.index_struct)
    other = reader_for(internal.docstore, internal.vector_store, internal.index_struct)
    assert sorted(GUARDED_NAMES[n.node_id] for n in own.nodes(ids)) == [
        "a0", "a1", "a3", "a4", "b0", "b1", "b2"
    ]  # fmt: skip
    assert [GUARDED_NAMES[n.node_id] for n in other.nodes(ids)] == ["a2"]


def test_on_a_shared_simple_store_the_other_index_s_node_is_held_by_the_store_only() -> None:
    public, _ = shared("memory")
    secret = next(n for n in guarded_nodes() if n.metadata["access"] == "secret").node_id
    assert secret in public.index.vector_store.data.embedding_dict  # the store holds it
    assert secret not in public.index.index_struct.nodes_dict.values()  # this index does not
    for k, settings in [(3, {}), (7, {"mode": "paper", "window": 2})]:
        found = hits(public, GUARDED_QUERY, k)
        scar = SCARNodePostprocessor.from_index(public.index, filters=None, **settings)
        assert "a2" not in names(scar.postprocess_nodes(found, BUNDLE))


def test_a_query_engine_s_source_nodes_stay_in_its_index() -> None:
    public, _ = shared("memory")
    scar = SCARNodePostprocessor.from_index(public.index, filters=None)
    engine = public.index.as_query_engine(
        llm=MockLLM(),
        similarity_top_k=3,
        node_postprocessors=[scar],
        response_synthesizer=NoText(llm=MockLLM()),  # the source nodes, without an answer
    )
    response = engine.query(GUARDED_QUERY)
    assert len(response.source_nodes) == 3
    assert "a2" not in names(response.source_nodes)


# 2. Search arguments outside MetadataFilters: an allow-list per store.


@pytest.mark.parametrize(
    ("build", "kwargs", "named"),
    [
        (lambda: chroma_built(guarded_nodes), {"ids": ["x"]}, "ids"),
        (lambda: chroma_built(guarded_nodes), {"where": {"access": "public"}}, "where"),
        (lambda: chroma_built(guarded_nodes), {"where_document": {"$contains": "a"}}, "where_do"),
        (lambda: qdrant_built(nodes=guarded_nodes), {"qdrant_filters": None}, "qdrant_filters"),
        (lambda: memory(guarded_nodes), {"custom": 1}, "custom"),
    ],
    ids=["chroma-ids", "chroma-where", "chroma-where-document", "qdrant-filters", "simple"],
)
def test_vector_store_kwargs_outside_the_allow_list_are_refused_by_name(
    build: Callable[[], Built], kwargs: dict[str, Any], named: str
) -> None:
    index = build().index
    retriever = index.as_retriever(vector_store_kwargs=kwargs)
    with pytest.raises(InvalidSettingsError, match=rf"(?s)\['{named}.*{WAYS_FORWARD}"):
        SCARNodePostprocessor.from_retriever(retriever)
    with pytest.raises(InvalidSettingsError, match=rf"(?s)\['{named}.*{WAYS_FORWARD}"):
        SCARNodePostprocessor.from_index(index, filters=None, vector_store_kwargs=kwargs)
    opted = SCARNodePostprocessor.from_retriever(retriever, neighbor_filter=lambda m: True)
    assert opted.vector_store_kwargs == kwargs


def test_chroma_ids_restrict_the_search_and_are_refused() -> None:
    built = chroma_built(guarded_nodes)
    allowed = [n.node_id for n in guarded_nodes() if n.metadata["access"] == "public"]
    retriever = built.index.as_retriever(similarity_top_k=4, vector_store_kwargs={"ids": allowed})
    assert "a2" not in names(retriever.retrieve(BUNDLE))  # the search keeps within the ids
    with pytest.raises(InvalidSettingsError, match=r"\['ids'\]"):
        SCARNodePostprocessor.from_retriever(retriever)


@pytest.mark.parametrize(
    ("build", "mode", "kwargs"),
    [
        (lambda: memory(guarded_nodes), "mmr", {"mmr_threshold": 0.5}),
        (lambda: chroma_built(guarded_nodes), "mmr", {"mmr_threshold": 0.5, "mmr_prefetch_k": 8}),
        (lambda: qdrant_built(nodes=guarded_nodes), "default", {"search_params": {"exact": True}}),
    ],
    ids=["simple", "chroma", "qdrant"],
)
def test_search_arguments_that_only_rank_are_accepted(
    build: Callable[[], Built], mode: str, kwargs: dict[str, Any]
) -> None:
    index = build().index
    retriever = index.as_retriever(
        similarity_top_k=3, filters=PUBLIC, vector_store_query_mode=mode, vector_store_kwargs=kwargs
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Local mode performs exact", UserWarning)
        found = retriever.retrieve(BUNDLE)
    output = SCARNodePostprocessor.from_retriever(retriever).postprocess_nodes(found, BUNDLE)
    assert len(output) == 3
    assert "a2" not in names(output)


#: The keyword arguments of each read of the recording Qdrant store.
QDRANT_READS: list[dict[str, Any]] = []


def _recording_qdrant() -> Built:
    """Qdrant (in memory) whose ``get_nodes``/``aget_nodes`` record their keyword arguments."""
    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from qdrant_client import AsyncQdrantClient, QdrantClient

    class RecordingQdrantVectorStore(QdrantVectorStore):
        def get_nodes(self, *args: Any, **kwargs: Any) -> Any:
            QDRANT_READS.append(kwargs)
            return super().get_nodes(*args, **kwargs)

        async def aget_nodes(self, *args: Any, **kwargs: Any) -> Any:
            QDRANT_READS.append(kwargs)
            return await super().aget_nodes(*args, **kwargs)

    from li_stores import build

    store = RecordingQdrantVectorStore(
        "scar-recorded",
        client=QdrantClient(location=":memory:"),
        aclient=AsyncQdrantClient(location=":memory:"),
    )
    return build("qdrant", store, nodes=guarded_nodes)


async def test_qdrant_reads_neighbours_in_the_shard_the_search_names() -> None:
    built = _recording_qdrant()
    retriever = built.index.as_retriever(
        similarity_top_k=3, vector_store_kwargs={"shard_identifier": "t1"}
    )
    found = retriever.retrieve(BUNDLE)
    scar = SCARNodePostprocessor.from_retriever(retriever)
    QDRANT_READS.clear()
    with warnings.catch_warnings():  # two in-memory clients share no data: async falls back
        warnings.filterwarnings("ignore", ".*QdrantVectorStore.aget_nodes failed", UserWarning)
        scar.postprocess_nodes(found, BUNDLE)
        await scar.apostprocess_nodes(found, BUNDLE)
    assert QDRANT_READS
    assert all(read.get("shard_identifier") == "t1" for read in QDRANT_READS)


def test_a_custom_sharded_qdrant_store_needs_the_search_s_shard_stated() -> None:
    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient, models

    store = QdrantVectorStore(
        "scar-sharded",
        client=QdrantClient(location=":memory:"),
        sharding_method=models.ShardingMethod.CUSTOM,
        shard_keys=["t1"],
        shard_key_selector_fn=lambda key: models.ShardKeySelector(shard_keys=[key]),
    )
    with pytest.raises(InvalidSettingsError, match=r"(?s)custom shard keys.*shard_identifier"):
        SCARNodePostprocessor(vector_store=store, filters=None)
    stated = {"shard_identifier": "t1"}
    scar = SCARNodePostprocessor(vector_store=store, filters=None, vector_store_kwargs=stated)
    assert scar.vector_store_kwargs == stated
    SCARNodePostprocessor(vector_store=store, filters=None, vector_store_kwargs={})  # all shards


def test_a_retriever_that_changes_how_it_searches_is_refused() -> None:
    class OwnSearch(VectorIndexRetriever):
        def _build_vector_store_query(self, query_bundle: QueryBundle) -> VectorStoreQuery:
            return super()._build_vector_store_query(query_bundle)

    retriever = OwnSearch(memory(guarded_nodes).index)
    with pytest.raises(InvalidSettingsError, match=r"OwnSearch.*_build_vector_store_query"):
        SCARNodePostprocessor.from_retriever(retriever)


# 3. Built without the retriever, the postprocessor must be told the filters.


def test_building_without_the_retriever_requires_filters_stated() -> None:
    index = memory(guarded_nodes).index
    both_ways = r"(?s)from_index\(index, filters=<the retriever's filters, or None>\).*from_retr"
    with pytest.raises(InvalidSettingsError, match=both_ways):
        SCARNodePostprocessor.from_index(index)
    with pytest.raises(InvalidSettingsError, match=both_ways):
        SCARNodePostprocessor(docstore=index.docstore, vector_store=index.vector_store)
    scar = SCARNodePostprocessor.from_index(index, filters=None)
    assert scar.filters is None
    assert "filters" in scar.model_fields_set
    assert scar.model_dump()["filters"] is None
    assert '"filters": null' in scar.to_json() or '"filters":null' in scar.to_json()
    assert SCARNodePostprocessor.from_index(index, filters=PUBLIC).to_dict()["filters"]


# 15. Bad types get SCAR's own error, naming the value and the fix.


def test_filters_that_are_not_metadata_filters_are_refused_with_the_fix() -> None:
    index = memory(guarded_nodes).index
    with pytest.raises(InvalidSettingsError, match=r"filters=\{'tenant': 't1'\}.*MetadataFilters"):
        SCARNodePostprocessor.from_index(index, filters={"tenant": "t1"})
    with pytest.raises(InvalidSettingsError, match=r"filters='tenant'.*MetadataFilters"):
        SCARNodePostprocessor.from_index(index, filters="tenant")
    as_data = PUBLIC.model_dump()  # its own serialised form (to_dict) is read back
    assert SCARNodePostprocessor.from_index(index, filters=as_data).filters == PUBLIC


@pytest.mark.parametrize(
    ("query", "named"),
    [("", r"query_str=''.*empty"), ("   ", r"query_str='   '.*empty"), (123, r"query_str=123")],
)
async def test_a_query_that_is_not_a_question_is_refused_with_the_fix(
    query: Any, named: str
) -> None:
    nodes = linked_nodes("a", [angle(5), angle(10), angle(60)])
    scar = SCARNodePostprocessor(
        docstore=docstore_of(nodes), filters=None, embed_model=WordHashEmbedding()
    )
    given = scored(nodes[:2], [0.9, 0.8])
    with pytest.raises(MissingQueryError, match=rf"(?s){named}.*query_str=\"How"):
        scar.postprocess_nodes(given, query_str=query)
    with pytest.raises(MissingQueryError, match=rf"(?s){named}"):
        await scar.apostprocess_nodes(given, query_str=query)
