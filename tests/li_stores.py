"""One parsed corpus in real LlamaIndex vector stores, with stores and clients that count reads.

Shared by ``tests/llamaindex/test_li_stores.py``, ``tests/postgres/test_pg_llamaindex.py`` and
``benchmarks/store_matrix.py``. The nodes come from ``SentenceSplitter`` (which links each node
to the one before and after it with PREVIOUS/NEXT relationships). Their vectors are unit float32
values held as Python floats, so every store keeps the numbers ``SimpleVectorStore`` keeps
(Qdrant normalises vectors for cosine, FAISS, Chroma and pgvector keep float32), and each store's
answers can be compared with the in-memory path's. No store is mocked: at most a thin subclass of
the real store or client counts the calls of its public read.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import uuid
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.schema import (
    BaseNode,
    NodeRelationship,
    NodeWithScore,
    QueryBundle,
    RelatedNodeInfo,
    TextNode,
)
from llama_index.core.vector_stores import MetadataFilter, MetadataFilters

from li_support import QUERY, CountingDocstore, WordHashEmbedding, angle, documents, splitter
from scar_llamaindex import SCARNodePostprocessor
from scar_llamaindex._reads import links_of, reader_for

QUERIES = [QUERY, "topic1 part 4 word1x4", "word0x0 and word5x6", "Document 2 is about topic2"]
#: Budget mode (the default, window 2) and the paper's rule (window 1, then 2), as ``(k, settings)``.
SETTINGS: list[tuple[int, dict[str, Any]]] = [
    (3, {}), (5, {}), (4, {"top_n": 6}), (4, {"mode": "paper"}),
    (3, {"mode": "paper", "window": 2}),
]  # fmt: skip
#: Store round trips SCAR made (calls of the store's or client's public read), by store kind, and
#: by ``"kind.method"`` too.
ROUND_TRIPS: dict[str, int] = {}


def count(kind: str, method: str) -> None:
    """Count one round trip of ``kind``'s ``method``."""
    for key in (kind, f"{kind}.{method}"):
        ROUND_TRIPS[key] = ROUND_TRIPS.get(key, 0) + 1


class UnitHashEmbedding(WordHashEmbedding):
    """``WordHashEmbedding``'s vectors scaled to unit length and rounded to float32."""

    def vector(self, text: str) -> list[float]:
        vector = np.asarray(super().vector(text))
        return [float(x) for x in (vector / np.linalg.norm(vector)).astype(np.float32)]


@functools.cache
def parsed_nodes() -> list[TextNode]:
    """Six documents of six parts, one node per part, linked by ``SentenceSplitter``.

    Parsed once: node ids are random, and every store must hold the same nodes.
    """
    return [n for n in splitter().get_nodes_from_documents(documents()) if isinstance(n, TextNode)]


# The guarded corpus: a secret node between public ones, and a link into another tenant.

#: Name, tenant, access and angle to the query (degrees) of each guarded node. Document "a" is
#: tenant t1's and its node a2, the closest to the query, is secret; a4's NEXT names b0, the first
#: node of tenant t2's document "b".
GUARDED = [
    ("a0", "t1", "public", 40), ("a1", "t1", "public", 20), ("a2", "t1", "secret", 5),
    ("a3", "t1", "public", 15), ("a4", "t1", "public", 25),
    ("b0", "t2", "public", 10), ("b1", "t2", "public", 50), ("b2", "t2", "public", 60),
]  # fmt: skip
GUARDED_NEXT = {"a0": "a1", "a1": "a2", "a2": "a3", "a3": "a4", "a4": "b0", "b0": "b1", "b1": "b2"}
GUARDED_QUERY = "What do the guarded nodes say?"
PUBLIC = MetadataFilters(filters=[MetadataFilter(key="access", value="public")])
TENANT_1 = MetadataFilters(filters=[MetadataFilter(key="tenant", value="t1")])
#: Each search filter and the guarded nodes it excludes.
GUARDS: list[tuple[MetadataFilters, set[str]]] = [(PUBLIC, {"a2"}), (TENANT_1, {"b0", "b1", "b2"})]
#: What a refusal must say: the two ways forward.
WAYS_FORWARD = r"pass neighbor_filter=.*or pass allow_unfiltered_neighbors=True"
#: Budget mode, and paper mode with window 2, as ``(k, settings)``.
GUARD_SETTINGS: list[tuple[int, dict[str, Any]]] = [
    (4, {}), (4, {"mode": "paper", "window": 2}), (3, {"mode": "paper", "window": 2}),
]  # fmt: skip


def guarded_id(name: str) -> str:
    """A guarded node's id: a UUID (Qdrant's point ids are UUIDs or integers)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"scar-guarded/{name}"))


def _pinned(degrees: float) -> list[float]:
    """A vector of the embedding's size at ``degrees`` from the guarded query's direction."""
    vector = [0.0] * WordHashEmbedding().size
    vector[:2] = angle(degrees)
    return vector


GUARDED_NAMES = {guarded_id(name): name for name, *_ in GUARDED}
GUARDED_TABLE = {GUARDED_QUERY: _pinned(0)} | {
    f"Guarded node {n}.": _pinned(d) for n, *_, d in GUARDED
}


def guarded_nodes() -> list[TextNode]:
    """The guarded nodes, new at each call (an index embeds the nodes it is given)."""
    previous = {after: before for before, after in GUARDED_NEXT.items() if after != "b0"}
    nodes = []
    for name, tenant, access, _ in GUARDED:
        links = {NodeRelationship.SOURCE: RelatedNodeInfo(node_id=f"doc-{name[0]}")}
        for relationship, other in (
            (NodeRelationship.PREVIOUS, previous.get(name)),
            (NodeRelationship.NEXT, GUARDED_NEXT.get(name)),
        ):
            if other is not None:
                links[relationship] = RelatedNodeInfo(node_id=guarded_id(other))
        hidden = ["tenant", "access"]  # embedded as the bare text, which the table pins
        nodes.append(
            TextNode(
                id_=guarded_id(name),
                text=f"Guarded node {name}.",
                metadata={"tenant": tenant, "access": access},
                excluded_embed_metadata_keys=hidden,
                excluded_llm_metadata_keys=hidden,
                relationships=links,
            )
        )
    return nodes


def names(nodes: Sequence[NodeWithScore]) -> list[str]:
    """The guarded names of ``nodes``, in order."""
    return [GUARDED_NAMES[n.node.node_id] for n in nodes]


Nodes = Callable[[], list[TextNode]] | None


@dataclass
class Built:
    """An index on one store, its embed model (counting texts embedded), and the kind of store."""

    kind: str
    index: VectorStoreIndex
    embed_model: UnitHashEmbedding
    in_process: bool = False  # reads never leave the process: no round trip to count

    @property
    def docstore(self) -> Any:
        return self.index.docstore


def build(
    kind: str,
    vector_store: Any = None,
    *,
    use_async: bool = False,
    nodes: Nodes = None,
) -> Built:
    """Index ``nodes()`` (default: the parsed nodes) on ``vector_store`` (``None``: Simple).

    The guarded corpus (``nodes=guarded_nodes``) is embedded with the vectors its table pins.
    """
    guarded = nodes is guarded_nodes
    embed_model = UnitHashEmbedding(table=GUARDED_TABLE if guarded else None)
    storage = StorageContext.from_defaults(vector_store=vector_store, docstore=CountingDocstore())
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Payload indexes have no effect", UserWarning)
        index = VectorStoreIndex(
            (nodes or parsed_nodes)(),
            storage_context=storage,
            embed_model=embed_model,
            use_async=use_async,
        )
    in_process = vector_store is None or kind.startswith("faiss")
    return Built(kind, index, embed_model, in_process)


def shared(kind: str, vector_store: Any = None) -> tuple[Built, VectorStoreIndex]:
    """The guarded nodes parsed once, in two indexes on one ``StorageContext``.

    Node a2 (the secret one) goes into the second index, the others into the first: the
    PREVIOUS/NEXT links of a1 and a3 cross into the other index. Returns the public index's
    ``Built`` and the internal index.
    """
    embed_model = UnitHashEmbedding(table=GUARDED_TABLE)
    storage = StorageContext.from_defaults(vector_store=vector_store, docstore=CountingDocstore())
    nodes = guarded_nodes()
    internal = [n for n in nodes if n.metadata["access"] == "secret"]
    public = [n for n in nodes if n.metadata["access"] != "secret"]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Payload indexes have no effect", UserWarning)
        indexes = [
            VectorStoreIndex(part, storage_context=storage, embed_model=embed_model)
            for part in (public, internal)
        ]
    in_process = vector_store is None or kind.startswith("faiss")
    return Built(kind, indexes[0], embed_model, in_process), indexes[1]


def memory(nodes: Nodes = None) -> Built:
    return build("memory", nodes=nodes)


def faiss_built(*, mapped: bool = False, nodes: Nodes = None) -> Built:
    """FaissVectorStore (vectors read); ``mapped``: FaissMapVectorStore (its id map is private)."""
    import faiss
    from llama_index.vector_stores.faiss import FaissMapVectorStore, FaissVectorStore

    flat = faiss.IndexFlatIP(WordHashEmbedding().size)  # inner product of unit vectors: cosine
    if mapped:
        store = FaissMapVectorStore(faiss_index=faiss.IndexIDMap2(flat))
        return build("faiss-map", store, nodes=nodes)
    return build("faiss", FaissVectorStore(faiss_index=flat), nodes=nodes)


def chroma_built(nodes: Nodes = None) -> Built:
    import chromadb
    from chromadb.api.models.Collection import Collection
    from llama_index.vector_stores.chroma import ChromaVectorStore

    class CountingCollection(Collection):
        """The real Chroma collection; ``get`` (SCAR's only read) counts its calls."""

        def get(self, *args: Any, **kwargs: Any) -> Any:
            count("chroma", "get")
            return super().get(*args, **kwargs)

    made = chromadb.EphemeralClient().create_collection(f"scar-{uuid.uuid4().hex[:12]}")
    collection = CountingCollection(made._client, made.get_model(), embedding_function=None)
    return build("chroma", ChromaVectorStore(chroma_collection=collection), nodes=nodes)


def qdrant_built(*, use_async: bool = False, nodes: Nodes = None) -> Built:
    """QdrantVectorStore on an in-memory client: sync only, or (``use_async``) async only.

    Two in-memory clients do not share data, so the async client has a store of its own.
    """
    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from qdrant_client import AsyncQdrantClient, QdrantClient

    class CountingQdrantClient(QdrantClient):
        """The real (local) client; ``scroll`` and ``retrieve`` count their calls."""

        def scroll(self, *args: Any, **kwargs: Any) -> Any:
            count("qdrant", "scroll")
            return super().scroll(*args, **kwargs)

        def retrieve(self, *args: Any, **kwargs: Any) -> Any:
            count("qdrant", "retrieve")
            return super().retrieve(*args, **kwargs)

    class CountingAsyncQdrantClient(AsyncQdrantClient):
        """The real (local) async client; ``scroll`` and ``retrieve`` count their calls."""

        async def scroll(self, *args: Any, **kwargs: Any) -> Any:
            count("qdrant-async", "ascroll")
            return await super().scroll(*args, **kwargs)

        async def retrieve(self, *args: Any, **kwargs: Any) -> Any:
            count("qdrant-async", "aretrieve")
            return await super().retrieve(*args, **kwargs)

    name = f"scar-{uuid.uuid4().hex[:12]}"
    if use_async:
        store = QdrantVectorStore(name, aclient=CountingAsyncQdrantClient(location=":memory:"))
        return build("qdrant-async", store, use_async=True, nodes=nodes)
    store = QdrantVectorStore(name, client=CountingQdrantClient(location=":memory:"))
    return build("qdrant", store, nodes=nodes)


def pgvector_built(uri: str, table: str, nodes: Nodes = None) -> Built:
    """PGVectorStore on a new ``table`` at ``uri`` (a SQLAlchemy URL, sync and async drivers)."""
    return build("pgvector", pgvector_store(uri, table), nodes=nodes)


def pgvector_store(uri: str, table: str, **options: Any) -> Any:
    """A PGVectorStore (``options``: more of its settings) that counts SCAR's reads."""
    from llama_index.vector_stores.postgres import PGVectorStore

    class CountingPGVectorStore(PGVectorStore):  # type: ignore[misc]
        """The real PGVectorStore; ``get_nodes``/``aget_nodes`` (SCAR's reads) count calls."""

        def get_nodes(self, *args: Any, **kwargs: Any) -> Any:
            count("pgvector", "get_nodes")
            return super().get_nodes(*args, **kwargs)

        async def aget_nodes(self, *args: Any, **kwargs: Any) -> Any:
            count("pgvector", "aget_nodes")
            return await super().aget_nodes(*args, **kwargs)

    return CountingPGVectorStore.from_params(
        connection_string=uri,
        async_connection_string=uri,
        table_name=table,
        embed_dim=WordHashEmbedding().size,
        **options,
    )


#: The embedded stores SCAR reads vectors from, by kind.
STORES: dict[str, Callable[[], Built]] = {
    "simple": memory,
    "faiss": faiss_built,
    "chroma": chroma_built,
    "qdrant": qdrant_built,
}


# What the tests and the benchmark do with a store.


def hits(built: Built, query: str, k: int) -> list[NodeWithScore]:
    """The store's own top-k for ``query``."""
    return built.index.as_retriever(similarity_top_k=k).retrieve(QueryBundle(query))


async def ahits(built: Built, query: str, k: int) -> list[NodeWithScore]:
    """The store's own top-k for ``query``, searched with the store's async API."""
    return await built.index.as_retriever(similarity_top_k=k).aretrieve(QueryBundle(query))


def scar(built: Built, **settings: Any) -> SCARNodePostprocessor:
    """The postprocessor on the index, whose searches are unfiltered."""
    return SCARNodePostprocessor.from_index(built.index, filters=None, **settings)


def stored(built: Built, nodes: Sequence[BaseNode]) -> tuple[dict[str, BaseNode], dict[str, Any]]:
    """Read ``nodes`` back as SCAR does: ``({id: node}, {id: stored vector})``."""
    index = built.index
    reader = reader_for(index.docstore, index.vector_store, index.index_struct)
    ids = [n.node_id for n in nodes]
    read = asyncio.run(reader.anodes(ids)) if built.kind == "qdrant-async" else reader.nodes(ids)
    return {n.node_id: n for n in read}, reader.vectors(read)


def answer(output: Sequence[NodeWithScore]) -> list[tuple[Any, ...]]:
    """What must match across stores: ids, scores, origins, passages, texts embedded."""
    return [
        (n.node.node_id, approx(n.score), n.node.metadata["scar_origin"],
         n.node.metadata["scar_passage"], n.node.metadata["scar_embedded"])
        for n in output
    ]  # fmt: skip


def approx(value: float | None) -> Any:
    return value if value is None else pytest.approx(value, rel=1e-5, abs=1e-6)


# Checks every store passes (here and in tests/postgres/test_pg_llamaindex.py).


def check_vectors(built: Built, reference: Built) -> None:
    """The store gives back every node, its links, text and the reference's vector."""
    parsed = parsed_nodes()
    (nodes, vectors), (_, expected) = stored(built, parsed), stored(reference, parsed)
    assert sorted(nodes) == sorted(vectors) == sorted(expected) == sorted(n.node_id for n in parsed)
    for node in parsed:
        assert links_of(nodes[node.node_id]) == links_of(node)
        assert nodes[node.node_id].get_content() == node.get_content()
        assert list(vectors[node.node_id]) == pytest.approx(expected[node.node_id], abs=1e-7)


def check_answers(built: Built, reference: Built) -> None:
    """For the store's hits, SCAR answers as on the reference, embedding no node."""
    texts, neighbours = built.embed_model.texts_embedded, 0
    for (k, settings), query in itertools.product(SETTINGS, QUERIES):
        found = hits(built, query, k)
        got = scar(built, **settings).postprocess_nodes(found, QueryBundle(query))
        want = scar(reference, **settings).postprocess_nodes(found, QueryBundle(query))
        assert answer(got) == answer(want), (settings, query)
        neighbours += sum(n.node.metadata["scar_origin"] == "neighbor" for n in got)
    assert neighbours > 0, "the corpus should make SCAR add neighbours"
    assert built.embed_model.texts_embedded == texts


def check_cold_and_warm(built: Built, cache: Path) -> None:
    """No node embedded by a new postprocessor (with an empty cache), nor on repeated queries."""
    texts = built.embed_model.texts_embedded
    for k, settings in SETTINGS[::2]:
        cold = scar(built, **settings)
        for query in [*QUERIES, *QUERIES]:  # then warm
            output = cold.postprocess_nodes(hits(built, query, k), QueryBundle(query))
            assert {n.node.metadata["scar_embedded"] for n in output} == {0}
    assert built.embed_model.texts_embedded == texts


async def check_async_equals_sync(built: Built) -> None:
    """``apostprocess_nodes`` returns what ``postprocess_nodes`` returns, metadata included."""
    for (k, settings), query in itertools.product(SETTINGS, QUERIES):
        found = hits(built, query, k)
        postprocessor = scar(built, **settings)
        expected = postprocessor.postprocess_nodes(found, QueryBundle(query))
        output = await postprocessor.apostprocess_nodes(found, QueryBundle(query))
        assert answer(output) == answer(expected), (settings, query)
        assert [n.node.metadata for n in output] == [n.node.metadata for n in expected]


async def check_round_trips(built: Built) -> None:
    """At most two store reads per query beyond the search, sync and async, in the default mode.

    SimpleVectorStore and FAISS reads are in-process lookups: none leaves the process. The
    docstore's batched reads (where it holds the nodes) are at most two as well.
    """
    fewest, most = (0, 0) if built.in_process else (1, 2)
    for k, query in itertools.product((3, 8), QUERIES):
        found = hits(built, query, k)
        for sync in (True, False):
            ROUND_TRIPS.clear()
            built.docstore.reads = 0
            if sync:
                scar(built).postprocess_nodes(found, QueryBundle(query))
            else:
                await scar(built).apostprocess_nodes(found, QueryBundle(query))
            assert fewest <= ROUND_TRIPS.get(built.kind, 0) <= most, (k, query, sync)
            assert built.docstore.reads <= 2


async def check_guarded(built: Built, *, sync: bool = True) -> None:
    """No node a search's filter excludes comes back, sync or async, in budget or paper mode.

    For the same hits, SCAR without the filter does return an excluded node, so the check can
    fail; and no passage runs over a node left out. ``sync=False``: a store with only an async
    client, searched and read asynchronously.
    """
    bundle = QueryBundle(GUARDED_QUERY)
    for (filters, excluded), (k, settings) in itertools.product(GUARDS, GUARD_SETTINGS):
        retriever = built.index.as_retriever(similarity_top_k=k, filters=filters)
        found = retriever.retrieve(bundle) if sync else await retriever.aretrieve(bundle)
        assert len(found) == k
        assert not set(names(found)) & excluded  # the search obeys its filter
        guarded = SCARNodePostprocessor.from_retriever(retriever, **settings)
        with warnings.catch_warnings():  # Qdrant with a sync client: its async read falls back
            warnings.filterwarnings("ignore", "QdrantVectorStore.aget_nodes failed", UserWarning)
            output = await guarded.apostprocess_nodes(found, bundle)
            unguarded = SCARNodePostprocessor.from_index(built.index, filters=None, **settings)
            leaked = await unguarded.apostprocess_nodes(found, bundle)
        if sync:
            assert names(guarded.postprocess_nodes(found, bundle)) == names(output)
        assert not set(names(output)) & excluded, (filters, settings, names(output))
        assert set(names(leaked)) & excluded, "without the filter SCAR should return one"
        assert len(set(names(output))) == len(output)
        assert len(output) == k or settings.get("mode") == "paper"
        check_passages_are_linked(output)


async def check_within_index(built: Built) -> None:
    """SCAR returns only nodes the index's own search could return, sync and async.

    ``built`` shares its store with another index (see ``shared``). What the index's search can
    return is what it returns with a top-k as large as the corpus; SCAR is built both from the
    index (``filters=None``: the search is unfiltered) and from the retriever.
    """
    bundle = QueryBundle(GUARDED_QUERY)
    everything = built.index.as_retriever(similarity_top_k=len(GUARDED))
    could = set(names(everything.retrieve(bundle)))
    for k, settings in GUARD_SETTINGS:
        retriever = built.index.as_retriever(similarity_top_k=k)
        found = retriever.retrieve(bundle)
        for postprocessor in (
            SCARNodePostprocessor.from_index(built.index, filters=None, **settings),
            SCARNodePostprocessor.from_retriever(retriever, **settings),
        ):
            with warnings.catch_warnings():  # Qdrant with a sync client: its async read falls back
                warnings.filterwarnings("ignore", "QdrantVectorStore.aget_nodes", UserWarning)
                outputs = [
                    postprocessor.postprocess_nodes(found, bundle),
                    await postprocessor.apostprocess_nodes(found, bundle),
                ]
            for output in outputs:
                assert set(names(output)) <= could, (settings, names(output), could)
                check_passages_are_linked(output)


def check_passages_are_linked(output: Sequence[NodeWithScore]) -> None:
    """Each node of a passage follows the one before it: no passage jumps over a node."""
    for before, after in itertools.pairwise(output):
        if before.node.metadata["scar_passage"] == after.node.metadata["scar_passage"]:
            assert links_of(before.node)[1] == after.node.node_id
