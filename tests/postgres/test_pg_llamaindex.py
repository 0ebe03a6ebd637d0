"""SCARNodePostprocessor over a real pgvector database (llama-index-vector-stores-postgres).

The index lives only in the database (its docstore is empty), yet expansion works, embeds no
node, and gives the same nodes, scores and decisions as the same vectors in memory.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import (
    NodeRelationship,
    NodeWithScore,
    QueryBundle,
    RelatedNodeInfo,
    TextNode,
)
from pg_support import Corpus, counting_engine, make_corpus

from scar_core.errors import InvalidSettingsError
from scar_langchain import read_links
from scar_llamaindex import (
    PGVectorNodeSource,
    SCARNodePostprocessor,
    StoreNeighborSource,
    create_node_id_index,
)

pytestmark = pytest.mark.postgres

postgres_store = pytest.importorskip("llama_index.vector_stores.postgres")
sqlalchemy = pytest.importorskip("sqlalchemy")


class CountingEmbedding(BaseEmbedding):
    """Looks vectors up by text and counts the texts embedded (queries come with vectors)."""

    _table: dict[str, list[float]] = PrivateAttr()
    _lock: threading.Lock = PrivateAttr()
    _texts_embedded: int = PrivateAttr(default=0)

    def __init__(self, table: dict[str, list[float]]) -> None:
        super().__init__(model_name="counting")
        self._table = table
        self._lock = threading.Lock()

    @property
    def texts_embedded(self) -> int:
        return self._texts_embedded

    def reset(self) -> None:
        self._texts_embedded = 0

    def _get_text_embedding(self, text: str) -> list[float]:
        with self._lock:
            self._texts_embedded += 1
        return list(self._table[text])

    def _get_query_embedding(self, query: str) -> list[float]:
        raise AssertionError("queries carry their embeddings in these tests")

    async def _aget_query_embedding(self, query: str) -> list[float]:
        raise AssertionError("queries carry their embeddings in these tests")

    async def _aget_text_embedding(self, text: str) -> list[float]:
        return self._get_text_embedding(text)


def nodes_of(corpus: Corpus) -> list[TextNode]:
    """The corpus as LlamaIndex nodes linked by PREVIOUS / NEXT / SOURCE, with embeddings."""
    nodes = []
    for document in corpus.documents:
        links = read_links(document)
        assert links.chunk_id is not None
        assert links.document_id is not None
        relationships = {NodeRelationship.SOURCE: RelatedNodeInfo(node_id=links.document_id)}
        if links.previous_id is not None:
            relationships[NodeRelationship.PREVIOUS] = RelatedNodeInfo(node_id=links.previous_id)
        if links.next_id is not None:
            relationships[NodeRelationship.NEXT] = RelatedNodeInfo(node_id=links.next_id)
        nodes.append(
            TextNode(
                id_=links.chunk_id,
                text=document.page_content,
                metadata={"topic": document.metadata["topic"]},
                embedding=list(corpus.vectors[links.chunk_id]),
                relationships=relationships,
            )
        )
    return nodes


class Setup:
    def __init__(self, corpus: Corpus, uri: str, table: str) -> None:
        self.corpus = corpus
        self.embed_model = CountingEmbedding(
            {node.text: node.embedding for node in nodes_of(corpus) if node.embedding}
        )
        self.vector_store = postgres_store.PGVectorStore(
            connection_string=uri,
            async_connection_string=uri,
            table_name=table,
            embed_dim=corpus.dimension,
        )
        self.pg_index = VectorStoreIndex(
            nodes_of(corpus),
            storage_context=StorageContext.from_defaults(vector_store=self.vector_store),
            embed_model=self.embed_model,
        )
        self.memory_index = VectorStoreIndex(nodes_of(corpus), embed_model=self.embed_model)
        self.statements: list[str] = []
        self.sql = counting_engine(uri, self.statements)

    def bundle(self, query: str) -> QueryBundle:
        return QueryBundle(query_str=query, embedding=list(self.corpus.queries[query]))

    def retrieve(self, index: VectorStoreIndex, query: str) -> list[NodeWithScore]:
        return index.as_retriever(similarity_top_k=3).retrieve(self.bundle(query))

    def close(self) -> None:
        self.sql.dispose()
        asyncio.run(self.vector_store.close())


@pytest.fixture(scope="module")
def setup(postgres: Any) -> Iterator[Setup]:
    built = Setup(make_corpus(seed=11), postgres.uri("psycopg"), "scar_li_corpus")
    yield built
    built.close()


@pytest.fixture(autouse=True)
def _fresh_counters(setup: Setup) -> None:
    setup.embed_model.reset()
    setup.statements.clear()


def settled(source: PGVectorNodeSource) -> PGVectorNodeSource:
    """The source after its first window fetch, which also checks the table for its index."""
    source.fetch_window(["no-such-node"], [], 1)
    return source


def traced(output: Sequence[NodeWithScore]) -> list[tuple[str, dict[str, Any]]]:
    """Each node's id and SCAR trace (the retriever's own score compared separately)."""
    return [
        (
            item.node.node_id,
            {k: v for k, v in item.node.metadata.items() if k.startswith("scar_")},
        )
        for item in output
    ]


def assert_same(from_pg: Sequence[NodeWithScore], from_memory: Sequence[NodeWithScore]) -> None:
    assert traced(from_pg) == traced(from_memory)
    pg_scores = [item.score for item in from_pg]
    memory_scores = [item.score for item in from_memory]
    # Seeds keep the store's score: pgvector's 1 - cosine distance against numpy's cosine.
    assert pg_scores == pytest.approx(memory_scores, rel=1e-6, abs=1e-6)
    for item in from_pg:
        assert item.node.get_content()


def test_pg_the_index_lives_only_in_the_database(setup: Setup) -> None:
    assert len(setup.pg_index.docstore.docs) == 0
    assert len(setup.memory_index.docstore.docs) == len(setup.corpus.documents)


#: Budget mode (the default) and the paper's plain mode.
MODES: dict[str, dict[str, Any]] = {"budget": {}, "plain": {"budget": None, "gamma": 0.7}}


@pytest.mark.parametrize("source", ["default", "get_nodes"])
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize(("window", "direction"), [(1, "both"), (2, "both"), (2, "previous")])
def test_pg_default_source_matches_memory_without_embedding_nodes(
    setup: Setup, window: int, direction: Any, mode: str, source: str
) -> None:
    """By default the table is read directly; through the store's get_nodes it is the same."""
    settings = {"window": window, "direction": direction, **MODES[mode]}
    if source == "default":
        on_pg = SCARNodePostprocessor.from_index(setup.pg_index, **settings)
        assert isinstance(on_pg.neighbor_source, PGVectorNodeSource)
    else:
        through_store = StoreNeighborSource(
            docstore=setup.pg_index.docstore, vector_store=setup.vector_store
        )
        on_pg = SCARNodePostprocessor(
            neighbor_source=through_store, embed_model=setup.embed_model, **settings
        )
    in_memory = SCARNodePostprocessor.from_index(setup.memory_index, **settings)
    added = 0
    for query in setup.corpus.queries:
        bundle = setup.bundle(query)
        from_pg = on_pg.postprocess_nodes(setup.retrieve(setup.pg_index, query), bundle)
        from_memory = in_memory.postprocess_nodes(setup.retrieve(setup.memory_index, query), bundle)
        assert_same(from_pg, from_memory)
        added += sum(item.node.metadata["scar_origin"] == "neighbor" for item in from_pg)
    assert setup.embed_model.texts_embedded == 0
    assert added > 0, "the corpus should make SCAR add some neighbours"


@pytest.mark.parametrize("mode", list(MODES))
def test_pg_one_postprocessor_serves_threads_at_once(setup: Setup, mode: str) -> None:
    """A query engine shared by a web server's threads: one cold postprocessor, many queries."""
    queries = list(setup.corpus.queries) * 3
    retrieved = {query: setup.retrieve(setup.pg_index, query) for query in setup.corpus.queries}

    def answer(postprocessor: SCARNodePostprocessor, query: str) -> list[Any]:
        nodes = [item.model_copy() for item in retrieved[query]]
        return traced(postprocessor.postprocess_nodes(nodes, setup.bundle(query)))

    one_at_a_time = SCARNodePostprocessor.from_index(setup.pg_index, **MODES[mode])
    expected = [answer(one_at_a_time, query) for query in queries]
    shared = SCARNodePostprocessor.from_index(setup.pg_index, **MODES[mode])
    with ThreadPoolExecutor(max_workers=6) as pool:
        answers = list(pool.map(lambda query: answer(shared, query), queries))
    assert answers == expected
    assert setup.embed_model.texts_embedded == 0


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("window", [1, 2])
def test_pg_node_source_matches_memory_one_statement_per_hop(
    setup: Setup, window: int, mode: str
) -> None:
    create_node_id_index(setup.vector_store, engine=setup.sql)
    source = PGVectorNodeSource(setup.vector_store, engine=setup.sql)
    settings = {"window": window, **MODES[mode]}
    on_pg = SCARNodePostprocessor(neighbor_source=source, embed_model=setup.embed_model, **settings)
    in_memory = SCARNodePostprocessor.from_index(setup.memory_index, **settings)
    first = next(iter(setup.corpus.queries))  # the first window also checks for the index
    on_pg.postprocess_nodes(setup.retrieve(setup.pg_index, first), setup.bundle(first))
    for query in setup.corpus.queries:
        bundle = setup.bundle(query)
        seeds = setup.retrieve(setup.pg_index, query)
        setup.statements.clear()
        from_pg = on_pg.postprocess_nodes(seeds, bundle)
        assert 1 <= len(setup.statements) <= window
        from_memory = in_memory.postprocess_nodes(setup.retrieve(setup.memory_index, query), bundle)
        assert_same(from_pg, from_memory)
    assert setup.embed_model.texts_embedded == 0


def test_pg_node_source_returns_nodes_and_exact_vectors(setup: Setup) -> None:
    source = PGVectorNodeSource(setup.vector_store, engine=setup.sql)
    ids = setup.corpus.ids
    fetched = source.fetch(ids[2:5], ids[0:3])
    assert len(setup.statements) == 1
    assert sorted(fetched.nodes) == sorted(ids[2:5])
    assert sorted(fetched.vectors) == sorted(ids[0:5])
    for node_id in ids[0:5]:
        assert np.array_equal(fetched.vectors[node_id], setup.corpus.vectors[node_id])
    by_store = {node.node_id: node for node in setup.vector_store.get_nodes(node_ids=ids[2:5])}
    for node_id, node in fetched.nodes.items():
        assert node.get_content() == by_store[node_id].get_content()
        assert node.relationships == by_store[node_id].relationships
        assert node.metadata == by_store[node_id].metadata
    setup.statements.clear()
    assert source.fetch([], []).nodes == {}
    assert source.fetch(["missing"], []).nodes == {}
    assert len(setup.statements) == 1


async def test_pg_async_paths_match_sync(setup: Setup) -> None:
    source = PGVectorNodeSource(setup.vector_store)
    with_source = SCARNodePostprocessor(
        neighbor_source=source, embed_model=setup.embed_model, gamma=0.7, window=2
    )
    default = SCARNodePostprocessor.from_index(setup.pg_index, gamma=0.7, window=2)
    try:
        for query in list(setup.corpus.queries)[:4]:
            bundle = setup.bundle(query)
            seeds = setup.retrieve(setup.pg_index, query)
            expected = default.postprocess_nodes(seeds, bundle)
            assert_same(await with_source.apostprocess_nodes(seeds, bundle), expected)
            assert_same(await default.apostprocess_nodes(seeds, bundle), expected)
    finally:
        await source.aclose()
        assert isinstance(default.neighbor_source, PGVectorNodeSource)
        await default.neighbor_source.aclose()
        await setup.vector_store.close()
    assert setup.embed_model.texts_embedded == 0


def test_pg_node_id_index_is_created_once_and_used(setup: Setup) -> None:
    name = create_node_id_index(setup.vector_store)
    assert create_node_id_index(setup.vector_store, engine=setup.sql) == name
    with setup.sql.connect() as connection:
        indexes = connection.execute(
            sqlalchemy.text(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'data_scar_li_corpus'"
            )
        ).scalars()
        assert name in set(indexes)
        connection.execute(sqlalchemy.text("SET enable_seqscan = off"))
        plan = connection.execute(
            sqlalchemy.text(
                "EXPLAIN SELECT node_id FROM public.data_scar_li_corpus WHERE node_id IN ('a', 'b')"
            )
        ).scalars()
        assert name in "\n".join(plan)


def test_pg_indexing_a_table_that_does_not_exist_yet_is_refused(
    postgres: Any, table_name: str
) -> None:
    empty = postgres_store.PGVectorStore(
        connection_string=postgres.uri("psycopg"),
        async_connection_string=postgres.uri("psycopg"),
        table_name=table_name,
        embed_dim=4,
    )
    try:
        with pytest.raises(InvalidSettingsError, match="does not exist yet"):
            create_node_id_index(empty)
    finally:
        asyncio.run(empty.close())


def test_pg_rows_written_outside_llamaindex_become_text_nodes(setup: Setup) -> None:
    with setup.sql.begin() as connection:
        connection.execute(
            sqlalchemy.text(
                "INSERT INTO public.data_scar_li_corpus (text, metadata_, node_id, embedding) "
                "VALUES ('raw row', CAST(:meta AS json), 'raw-1', '[1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,2]')"
            ),
            {"meta": '{"origin": "sql"}'},
        )
    try:
        fetched = PGVectorNodeSource(setup.vector_store, engine=setup.sql).fetch(["raw-1"], [])
        node = fetched.nodes["raw-1"]
        assert isinstance(node, TextNode)
        assert node.get_content() == "raw row"
        assert node.metadata == {"origin": "sql"}
        assert fetched.vectors["raw-1"][-1] == 2.0
    finally:
        with setup.sql.begin() as connection:
            connection.execute(
                sqlalchemy.text("DELETE FROM public.data_scar_li_corpus WHERE node_id = 'raw-1'")
            )


def test_pg_node_source_needs_a_pgvector_store(setup: Setup) -> None:
    with pytest.raises(InvalidSettingsError, match="PGVectorStore"):
        PGVectorNodeSource(setup.memory_index.vector_store)


class LazyOnly:
    """The same source without ``fetch_window``: the postprocessor fetches ring by ring."""

    def __init__(self, source: PGVectorNodeSource) -> None:
        self.source = source

    def fetch(self, node_ids: Sequence[str], vector_ids: Sequence[str]) -> Any:
        return self.source.fetch(node_ids, vector_ids)

    async def afetch(self, node_ids: Sequence[str], vector_ids: Sequence[str]) -> Any:
        return await self.source.afetch(node_ids, vector_ids)


#: Budget settings that make the selection reach different depths (and plain mode, window 2).
WINDOW_CASES: list[dict[str, Any]] = [
    {},
    {"budget": 6, "k": 1},
    {"budget": 12, "k": 2, "direction": "next"},
    {"budget": 8, "window": 2},
    {"budget": None, "gamma": 0.7, "window": 2},
]


@pytest.mark.parametrize("top_k", [1, 3])
@pytest.mark.parametrize("settings", WINDOW_CASES)
def test_pg_window_matches_lazy_and_memory_in_one_statement(
    setup: Setup, settings: dict[str, Any], top_k: int
) -> None:
    source = settled(PGVectorNodeSource(setup.vector_store, engine=setup.sql))
    windowed = SCARNodePostprocessor(
        neighbor_source=source, embed_model=setup.embed_model, **settings
    )
    lazy = SCARNodePostprocessor(
        neighbor_source=LazyOnly(source), embed_model=setup.embed_model, **settings
    )
    in_memory = SCARNodePostprocessor.from_index(setup.memory_index, **settings)
    for query in setup.corpus.queries:
        bundle = setup.bundle(query)
        seeds = setup.pg_index.as_retriever(similarity_top_k=top_k).retrieve(bundle)
        setup.statements.clear()
        from_window = windowed.postprocess_nodes(seeds, bundle)
        assert len(setup.statements) == 1
        assert "WITH RECURSIVE" in setup.statements[0]
        from_lazy = lazy.postprocess_nodes(seeds, bundle)
        memory_seeds = setup.memory_index.as_retriever(similarity_top_k=top_k).retrieve(bundle)
        from_memory = in_memory.postprocess_nodes(memory_seeds, bundle)
        assert_same(from_window, from_lazy)
        assert_same(from_window, from_memory)
    assert setup.embed_model.texts_embedded == 0


async def test_pg_window_async_matches_sync(setup: Setup) -> None:
    source = PGVectorNodeSource(setup.vector_store, engine=setup.sql)
    postprocessor = SCARNodePostprocessor(
        neighbor_source=source, embed_model=setup.embed_model, budget=6, k=1
    )
    try:
        for query in list(setup.corpus.queries)[:4]:
            bundle = setup.bundle(query)
            seeds = setup.pg_index.as_retriever(similarity_top_k=2).retrieve(bundle)
            expected = postprocessor.postprocess_nodes(seeds, bundle)
            assert_same(await postprocessor.apostprocess_nodes(seeds, bundle), expected)
    finally:
        await source.aclose()
    assert setup.embed_model.texts_embedded == 0


@pytest.fixture(scope="module")
def unindexed_store(setup: Setup, postgres: Any) -> Iterator[Any]:
    """The corpus again, in a table that never gets an index on node_id."""
    store = postgres_store.PGVectorStore(
        connection_string=postgres.uri("psycopg"),
        async_connection_string=postgres.uri("psycopg"),
        table_name="scar_li_unindexed",
        embed_dim=setup.corpus.dimension,
    )
    VectorStoreIndex(
        nodes_of(setup.corpus),
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=setup.embed_model,
    )
    yield store
    asyncio.run(store.close())


@pytest.fixture(params=["indexed", "unindexed"])
def window_source(
    request: pytest.FixtureRequest, setup: Setup, unindexed_store: Any
) -> tuple[PGVectorNodeSource, bool]:
    """A settled source, and whether its table has the node_id index (one-statement windows)."""
    if request.param == "indexed":
        create_node_id_index(setup.vector_store, engine=setup.sql)
        source = settled(PGVectorNodeSource(setup.vector_store, engine=setup.sql))
    else:
        source = settled(PGVectorNodeSource(unindexed_store, engine=setup.sql))
    setup.statements.clear()
    return source, request.param == "indexed"


def test_pg_window_walks_both_ways_and_reports_absent_ids(
    setup: Setup, window_source: tuple[PGVectorNodeSource, bool]
) -> None:
    source, indexed = window_source
    ids = setup.corpus.ids  # 6 documents of 8 chunks, in order
    window = source.fetch_window([ids[3]], [ids[3], "missing"], 2, "both")
    # Without the index: the start rows and the asked vectors, then one statement per ring.
    assert len(setup.statements) == (1 if indexed else 3)
    assert sorted(window.nodes) == sorted([ids[1], ids[2], ids[4], ids[5]])
    assert sorted(window.vectors) == sorted([ids[1], ids[2], ids[3], ids[4], ids[5]])
    assert window.absent == {"missing"}
    for node_id in window.vectors:
        assert np.array_equal(window.vectors[node_id], setup.corpus.vectors[node_id])
    by_fetch = source.fetch(list(window.nodes), []).nodes
    for node_id, node in window.nodes.items():
        assert node.get_content() == by_fetch[node_id].get_content()
        assert node.relationships == by_fetch[node_id].relationships
        assert node.metadata == by_fetch[node_id].metadata
    # The walk stops at the document's first chunk; only "next" links are followed here.
    assert sorted(source.fetch_window([ids[0]], [], 3, "previous").nodes) == []
    assert sorted(source.fetch_window([ids[0]], [], 3, "next").nodes) == sorted(ids[1:4])
    setup.statements.clear()
    assert source.fetch_window([], [], 2, "both").nodes == {}
    assert setup.statements == []


def comparable_window(window: Any) -> tuple[Any, ...]:
    nodes = {
        node_id: (node.get_content(), node.metadata, sorted(node.relationships))
        for node_id, node in window.nodes.items()
    }
    vectors = {node_id: np.asarray(v).tolist() for node_id, v in window.vectors.items()}
    return nodes, vectors, window.absent


def test_pg_ring_by_ring_windows_equal_the_one_statement_walk(
    setup: Setup, unindexed_store: Any
) -> None:
    """Without the node_id index the window is read ring by ring, with the same result."""
    create_node_id_index(setup.vector_store, engine=setup.sql)
    one_statement = settled(PGVectorNodeSource(setup.vector_store, engine=setup.sql))
    ring_by_ring = settled(PGVectorNodeSource(unindexed_store, engine=setup.sql))
    rng = np.random.default_rng(5)
    ids = [*setup.corpus.ids, "missing-a", "missing-b"]
    with_nodes = with_absent = 0
    for _ in range(60):
        start = list(rng.choice(ids, size=int(rng.integers(0, 5))))
        asked = list(rng.choice(ids, size=int(rng.integers(0, 4))))
        radius = int(rng.integers(1, 5))
        direction = str(rng.choice(["both", "previous", "next"]))
        setup.statements.clear()
        expected = one_statement.fetch_window(start, asked, radius, direction)  # type: ignore[arg-type]
        assert len(setup.statements) <= 1
        found = ring_by_ring.fetch_window(start, asked, radius, direction)  # type: ignore[arg-type]
        assert comparable_window(found) == comparable_window(expected), (start, asked, radius)
        with_nodes += bool(expected.nodes)
        with_absent += bool(expected.absent)
    assert with_nodes > 20
    assert with_absent >= 3  # asked ids the table lacks (the seed is fixed)


async def test_pg_ring_by_ring_async_equals_sync(setup: Setup, unindexed_store: Any) -> None:
    source = PGVectorNodeSource(unindexed_store, engine=setup.sql)
    try:
        ids = setup.corpus.ids
        for radius, direction in [(1, "both"), (3, "previous"), (4, "next")]:
            expected = source.fetch_window([ids[2], ids[20]], [ids[0]], radius, direction)  # type: ignore[arg-type]
            found = await source.afetch_window([ids[2], ids[20]], [ids[0]], radius, direction)  # type: ignore[arg-type]
            assert comparable_window(found) == comparable_window(expected)
    finally:
        await source.aclose()


def test_pg_a_table_without_the_node_id_index_is_named_once(
    setup: Setup, unindexed_store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    source = PGVectorNodeSource(unindexed_store, engine=setup.sql)
    with caplog.at_level("WARNING", logger="scar_llamaindex.pgvector"):
        source.fetch_window(setup.corpus.ids[:2], [], 2)
        source.fetch_window(setup.corpus.ids[2:4], [], 2)
    warnings = [r for r in caplog.records if "create_node_id_index" in r.getMessage()]
    assert len(warnings) == 1
    assert "data_scar_li_unindexed" in warnings[0].getMessage()


def test_pg_window_records_a_missing_neighbour_as_absent(setup: Setup) -> None:
    """A link to a row that is gone is looked up once, in the window, and never again."""
    ids = setup.corpus.ids
    with setup.sql.begin() as connection:
        row = connection.execute(
            sqlalchemy.text(
                "DELETE FROM public.data_scar_li_corpus WHERE node_id = :id "
                "RETURNING text, metadata_::text, node_id, embedding::text"
            ),
            {"id": ids[10]},
        ).one()
    try:
        source = PGVectorNodeSource(setup.vector_store, engine=setup.sql)
        window = source.fetch_window([ids[9]], [], 3, "both")
        assert window.absent == {ids[10]}
        assert ids[10] not in window.nodes
        postprocessor = SCARNodePostprocessor(
            neighbor_source=source, embed_model=setup.embed_model, budget=8, k=1
        )
        lazy = SCARNodePostprocessor(
            neighbor_source=LazyOnly(source), embed_model=setup.embed_model, budget=8, k=1
        )
        seed = setup.pg_index.vector_store.get_nodes(node_ids=[ids[9]])[0]
        seeds = [NodeWithScore(node=seed, score=0.9)]
        bundle = QueryBundle(query_str="q", embedding=list(setup.corpus.vectors[ids[11]]))
        setup.statements.clear()
        output = postprocessor.postprocess_nodes(seeds, bundle)
        assert len(setup.statements) == 1
        assert ids[10] not in [item.node.node_id for item in output]
        assert_same(output, lazy.postprocess_nodes(seeds, bundle))
    finally:
        with setup.sql.begin() as connection:
            connection.execute(
                sqlalchemy.text(
                    "INSERT INTO public.data_scar_li_corpus (text, metadata_, node_id, embedding) "
                    "VALUES (:text, CAST(:meta AS json), :node_id, CAST(:embedding AS vector))"
                ),
                {"text": row[0], "meta": row[1], "node_id": row[2], "embedding": row[3]},
            )


async def test_pg_a_row_with_invalid_node_content_ends_the_walk_instead_of_failing(
    setup: Setup, caplog: pytest.LogCaptureFixture
) -> None:
    """The one-statement window casts each row's _node_content to jsonb; a row whose
    _node_content is not JSON makes that cast fail, so the window is read ring by ring, where
    the row becomes a TextNode without links."""
    ids = setup.corpus.ids
    create_node_id_index(setup.vector_store, engine=setup.sql)
    set_metadata = sqlalchemy.text(
        "UPDATE public.data_scar_li_corpus SET metadata_ = CAST(:meta AS json) WHERE node_id = :id"
    )
    with setup.sql.begin() as connection:
        original = connection.execute(
            sqlalchemy.text(
                "SELECT metadata_::text FROM public.data_scar_li_corpus WHERE node_id = :id"
            ),
            {"id": ids[10]},
        ).scalar_one()
        connection.execute(
            set_metadata,
            {"id": ids[10], "meta": '{"_node_content": "{not json", "_node_type": "TextNode"}'},
        )
    source = PGVectorNodeSource(setup.vector_store, engine=setup.sql)
    try:
        with caplog.at_level("WARNING", logger="scar_llamaindex.pgvector"):
            window = source.fetch_window([ids[9]], [ids[9]], 3, "next")
            awindow = await source.afetch_window([ids[9]], [ids[9]], 3, "next")
            # A window that does not reach the row is still one statement.
            setup.statements.clear()
            assert sorted(source.fetch_window([ids[2]], [], 2, "next").nodes) == ids[3:5]
            assert len(setup.statements) == 1
        assert sorted(window.nodes) == [ids[10]]
        assert isinstance(window.nodes[ids[10]], TextNode)
        assert window.nodes[ids[10]].relationships == {}
        assert np.array_equal(window.vectors[ids[10]], setup.corpus.vectors[ids[10]])
        assert comparable_window(awindow) == comparable_window(window)
        warnings = [r for r in caplog.records if "not valid JSON" in r.getMessage()]
        assert len(warnings) == 1
        # The postprocessor over the same source keeps its seed and the reachable neighbour.
        postprocessor = SCARNodePostprocessor(
            neighbor_source=source, embed_model=setup.embed_model, budget=4, k=1
        )
        seed = setup.pg_index.vector_store.get_nodes(node_ids=[ids[9]])[0]
        bundle = QueryBundle(query_str="q", embedding=list(setup.corpus.vectors[ids[10]]))
        output = postprocessor.postprocess_nodes([NodeWithScore(node=seed, score=0.9)], bundle)
        assert ids[9] in [item.node.node_id for item in output]
    finally:
        await source.aclose()
        with setup.sql.begin() as connection:
            connection.execute(set_metadata, {"id": ids[10], "meta": original})


def test_pg_window_rejects_bad_settings(setup: Setup) -> None:
    source = PGVectorNodeSource(setup.vector_store, engine=setup.sql)
    with pytest.raises(InvalidSettingsError, match="radius=0"):
        source.fetch_window(["a"], [], 0, "both")
    with pytest.raises(InvalidSettingsError, match="direction='up'"):
        source.fetch_window(["a"], [], 2, "up")  # type: ignore[arg-type]


def test_pg_a_docstore_holding_nodes_keeps_the_store_source(setup: Setup) -> None:
    """Nodes in the docstore come first, as before: the table is read directly only without."""
    filled = SCARNodePostprocessor(
        docstore=setup.memory_index.docstore,
        vector_store=setup.vector_store,
        embed_model=setup.embed_model,
    )
    assert isinstance(filled.neighbor_source, StoreNeighborSource)
    empty = SCARNodePostprocessor(vector_store=setup.vector_store, embed_model=setup.embed_model)
    assert isinstance(empty.neighbor_source, PGVectorNodeSource)


def test_pg_a_store_built_from_engines_is_read_once_it_has_connected(
    postgres: Any, setup: Setup
) -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = sqlalchemy.create_engine(postgres.uri("psycopg"))
    async_engine = create_async_engine(postgres.uri("psycopg"))
    store = postgres_store.PGVectorStore(
        engine=engine,
        async_engine=async_engine,
        table_name="scar_li_corpus",
        embed_dim=setup.corpus.dimension,
    )
    try:
        source = PGVectorNodeSource(store)  # the store has not connected yet: no error here
        assert store.client is None
        with pytest.raises(InvalidSettingsError, match="has not connected yet"):
            source.fetch(setup.corpus.ids[:1], [])
        ids = setup.corpus.ids[:3]
        assert sorted(node.node_id for node in store.get_nodes(node_ids=ids)) == sorted(ids)
        fetched = source.fetch(ids, [])
        assert sorted(fetched.nodes) == sorted(ids)
        assert source._engine is engine, "the store's own engine, not a new pool"
        source.close()
        assert store.get_nodes(node_ids=ids[:1]), "close() left the store's engine open"
    finally:
        engine.dispose()
        asyncio.run(async_engine.dispose())
