"""A real VectorStoreIndex: SentenceSplitter chunks, the bundled MiniLM, real query engines.

The expected output is computed independently from the index's own stored vectors with
``scar_core.expand`` and a naive passage ordering over the splitter's chunk positions.
"""

from __future__ import annotations

import numpy as np
import pytest
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.llms import MockLLM
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import NodeWithScore, QueryBundle

from scar_core import expand
from scar_core.embedders.sentence_transformers import SentenceTransformerEmbedder
from scar_llamaindex import ScarEmbedding, SCARNodePostprocessor

pytestmark = pytest.mark.model

TCP_TEXT = (
    "Closing a TCP connection takes four segments. The side that wants to stop sending data "
    "sends a FIN segment and enters the FIN-WAIT-1 state. The peer acknowledges the FIN at once, "
    "so the closing side moves to FIN-WAIT-2 and waits. The peer may keep sending data for as "
    "long as it needs; a half-closed connection still carries traffic in one direction. When "
    "the peer has nothing left to send, it sends its own FIN and enters LAST-ACK. The first side "
    "acknowledges that FIN and enters TIME-WAIT. It stays in TIME-WAIT for twice the maximum "
    "segment lifetime, so that a lost final acknowledgement can be retransmitted and so that "
    "stray segments of the old connection expire before the same port pair is reused. Only then "
    "is the connection record deleted. Retransmission works differently. Each sent segment "
    "starts a retransmission timer. If no acknowledgement arrives before the timer expires, the "
    "segment is sent again and the timeout is doubled, which is called exponential backoff. The "
    "timeout itself is derived from smoothed round-trip time measurements and their variance. "
    "Fast retransmit shortcuts the timer: three duplicate acknowledgements make the sender "
    "resend the missing segment immediately."
)
BREAD_TEXT = (
    "A sourdough loaf needs flour, water, salt and an active starter. Feed the starter the "
    "evening before baking so that it peaks in the morning. Mix the flour and most of the water "
    "and let the dough rest for an hour; this rest is called the autolyse. Then add the starter "
    "and the salt with the remaining water. During bulk fermentation, fold the dough every half "
    "hour for the first two hours. The dough is ready to shape when it has grown by about half "
    "and shows bubbles at the sides. Shape it into a tight ball, place it in a floured basket "
    "and proof it in the fridge overnight. Bake in a preheated covered pot at a high temperature "
    "for twenty minutes, then uncover it and bake until the crust is deeply browned."
)
QUERIES = [
    "What happens after the peer sends its own FIN, and how long does TIME-WAIT last?",
    "How is the retransmission timeout computed and what does fast retransmit do?",
    "What should I do with the dough after bulk fermentation?",
]


@pytest.fixture(scope="module")
def embed_model(minilm_embedder: SentenceTransformerEmbedder) -> ScarEmbedding:
    return ScarEmbedding(minilm_embedder)


@pytest.fixture(scope="module")
def index(embed_model: ScarEmbedding) -> VectorStoreIndex:
    splitter = SentenceSplitter(chunk_size=40, chunk_overlap=8, tokenizer=str.split)
    documents = [Document(text=TCP_TEXT, id_="tcp"), Document(text=BREAD_TEXT, id_="bread")]
    return VectorStoreIndex.from_documents(
        documents, embed_model=embed_model, transformations=[splitter]
    )


def expected_ids(index: VectorStoreIndex, query: str, seeds: list[NodeWithScore]) -> list[str]:
    """scar_core on the index's stored vectors, then a naive passage order by chunk position."""
    embed_model = index._embed_model
    nodes = index.docstore.docs
    links = {
        node_id: (
            node.prev_node.node_id if node.prev_node else None,
            node.next_node.node_id if node.next_node else None,
        )
        for node_id, node in nodes.items()
    }
    vectors = {i: np.array(v) for i, v in index.vector_store.data.embedding_dict.items()}
    query_vector = np.array(embed_model.get_query_embedding(query))
    seed_ids = [s.node.node_id for s in seeds]
    result = expand(query_vector, seed_ids, links, vectors, lambda_=0.1, gamma=0.8, window=1)
    # Position of each chunk: (document, offset). Contiguous selected chunks form a passage.
    position = {i: (n.ref_doc_id, n.start_char_idx) for i, n in nodes.items()}
    ordered = sorted(result.chunk_ids, key=lambda i: position[i])
    passages: list[list[str]] = []
    for chunk_id in ordered:
        previous = links[chunk_id][0]
        if passages and previous == passages[-1][-1]:
            passages[-1].append(chunk_id)
        else:
            passages.append([chunk_id])
    rank = {chunk_id: seed_ids.index(result.get(chunk_id).seed_id) for chunk_id in ordered}
    passages.sort(key=lambda passage: min(rank[c] for c in passage))
    return [chunk_id for passage in passages for chunk_id in passage]


def test_index_is_chunked_into_linked_nodes(index: VectorStoreIndex) -> None:
    assert len(index.docstore.docs) >= 8


@pytest.mark.parametrize("query", QUERIES)
def test_as_query_engine_returns_what_scar_core_selects(
    index: VectorStoreIndex, query: str
) -> None:
    scar = SCARNodePostprocessor.from_index(index, budget=None)
    engine = index.as_query_engine(similarity_top_k=3, node_postprocessors=[scar], llm=MockLLM())
    response = engine.query(query)
    seeds = index.as_retriever(similarity_top_k=3).retrieve(query)
    returned = [item.node.node_id for item in response.source_nodes]
    assert returned == expected_ids(index, query, seeds)
    scores = {item.node.node_id: item.score for item in response.source_nodes}
    for seed in seeds:
        assert scores[seed.node.node_id] == pytest.approx(seed.score)


def test_scar_adds_neighbours_on_a_question_spanning_chunks(index: VectorStoreIndex) -> None:
    scar = SCARNodePostprocessor.from_index(index, budget=None)
    engine = index.as_query_engine(similarity_top_k=2, node_postprocessors=[scar], llm=MockLLM())
    response = engine.query(QUERIES[0])
    origins = [item.node.metadata["scar_origin"] for item in response.source_nodes]
    assert origins.count("seed") == 2
    assert "neighbor" in origins
    for item in response.source_nodes:
        if item.node.metadata["scar_origin"] == "neighbor":
            assert item.score == pytest.approx(item.node.metadata["scar_score"])
            assert item.score > item.node.metadata["scar_threshold"]


def test_the_documented_constructor_agrees_with_from_index(
    index: VectorStoreIndex, embed_model: ScarEmbedding
) -> None:
    documented = SCARNodePostprocessor(
        budget=None,
        docstore=index.docstore,
        lambda_=0.1,
        gamma=0.8,
        window=1,
        embed_model=embed_model,
    )
    seeds = index.as_retriever(similarity_top_k=3).retrieve(QUERIES[1])
    bundle = QueryBundle(QUERIES[1], embedding=embed_model.get_query_embedding(QUERIES[1]))
    by_docstore = documented.postprocess_nodes(seeds, bundle)
    by_index = SCARNodePostprocessor.from_index(index, budget=None).postprocess_nodes(seeds, bundle)
    assert [i.node.node_id for i in by_docstore] == [i.node.node_id for i in by_index]
    for mine, theirs in zip(by_docstore, by_index, strict=True):
        # Re-embedded (float32 through the cache) versus stored vectors: equal to rounding.
        assert mine.score == pytest.approx(theirs.score, abs=1e-5)


async def test_retriever_query_engine_sync_and_async_agree(index: VectorStoreIndex) -> None:
    scar = SCARNodePostprocessor.from_index(index, budget=None, window=2)
    engine = RetrieverQueryEngine.from_args(
        index.as_retriever(similarity_top_k=3), node_postprocessors=[scar], llm=MockLLM()
    )
    for query in QUERIES:
        sync_response = engine.query(query)
        async_response = await engine.aquery(query)
        sync_ids = [item.node.node_id for item in sync_response.source_nodes]
        async_ids = [item.node.node_id for item in async_response.source_nodes]
        assert async_ids == sync_ids
        for mine, theirs in zip(
            async_response.source_nodes, sync_response.source_nodes, strict=True
        ):
            assert mine.score == pytest.approx(theirs.score, abs=1e-6)


async def test_as_query_engine_async_embeds_the_query_itself(index: VectorStoreIndex) -> None:
    scar = SCARNodePostprocessor.from_index(index, budget=None, merge_passages=True)
    engine = index.as_query_engine(similarity_top_k=2, node_postprocessors=[scar], llm=MockLLM())
    response = await engine.aquery(QUERIES[0])
    sync_response = engine.query(QUERIES[0])
    assert [item.node.get_content() for item in response.source_nodes] == [
        item.node.get_content() for item in sync_response.source_nodes
    ]
    # Merged passages are contiguous document text with the overlap kept once (the splitter
    # drops the whitespace between chunks; assembly puts a line break there).
    document_words = " ".join(TCP_TEXT.split())
    assert any(item.node.metadata["scar_origin"] == "passage" for item in response.source_nodes)
    for item in response.source_nodes:
        assert " ".join(item.node.get_content().split()) in document_words


@pytest.mark.parametrize("query", QUERIES)
async def test_the_default_budget_mode_selects_what_select_within_budget_selects(
    index: VectorStoreIndex, query: str
) -> None:
    from scar_core.budget import default_budget_settings, select_within_budget

    scar = SCARNodePostprocessor.from_index(index)
    engine = index.as_query_engine(similarity_top_k=3, node_postprocessors=[scar], llm=MockLLM())
    response = engine.query(query)
    seeds = index.as_retriever(similarity_top_k=3).retrieve(query)
    nodes = index.docstore.docs
    links = {
        node_id: (
            node.prev_node.node_id if node.prev_node else None,
            node.next_node.node_id if node.next_node else None,
        )
        for node_id, node in nodes.items()
    }
    vectors = {i: np.array(v) for i, v in index.vector_store.data.embedding_dict.items()}
    query_vector = np.array(index._embed_model.get_query_embedding(query))
    expected = select_within_budget(
        query_vector, [s.node.node_id for s in seeds], links, vectors, default_budget_settings()
    )
    returned = [item.node.node_id for item in response.source_nodes]
    assert sorted(returned) == sorted(expected.chunk_ids)
    assert len(returned) == len(set(returned)) <= 10
    assert all(item.node.metadata["scar_mode"] == "budget" for item in response.source_nodes)
    async_response = await engine.aquery(query)
    assert [item.node.node_id for item in async_response.source_nodes] == returned
