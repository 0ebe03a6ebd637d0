"""Hypothesis over SCARNodePostprocessor with hostile nodes, in plain and budget mode, sync and async.

Nodes live in a ``SimpleDocumentStore`` that may lack some of them. Their neighbour links come
either from PREVIOUS/NEXT relationships (missing, dangling, self-referencing, cyclic,
cross-document, or a list where one node belongs) or from metadata keys holding values of any
type; their document ids from the SOURCE relationship or a metadata key that may hold an int.
Stored embeddings are NaN, infinite, zero, mis-sized, of extreme scale or absent (then the embed
model computes them). Incoming nodes repeat, and the query may lack its embedding.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import (
    NodeRelationship,
    NodeWithScore,
    QueryBundle,
    RelatedNodeInfo,
    TextNode,
)
from llama_index.core.storage.docstore import SimpleDocumentStore
from rel_support import (
    chain_link,
    check_documented_failure,
    count_case,
    hashed_vector,
    link_target,
    make_topic,
    make_vector,
    pick,
    reachable,
    run_counted,
    usable_vector,
)

from scar_core.errors import InvalidVectorError
from scar_llamaindex import SCARNodePostprocessor

LLAMAINDEX_CASES = 1000

DOCUMENT_IDS = ("doc-a", "doc-b", "doc-c")
NODE_VECTOR_KINDS = ("good",) * 8 + ("nan", "inf", "zero", "wrong_dim", "missing")
QUERY = "what does the corpus say"


class HashedEmbedding(BaseEmbedding):
    """Embeds any text to a hashed vector of a fixed dimension (queries and nodes alike)."""

    dimension: int = 4

    @classmethod
    def class_name(cls) -> str:
        return "HashedEmbedding"

    def _get_query_embedding(self, query: str) -> list[float]:
        return hashed_vector(query, self.dimension).tolist()

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return hashed_vector(text, self.dimension).tolist()

    async def _aget_text_embedding(self, text: str) -> list[float]:
        return self._get_text_embedding(text)


@dataclass
class Case:
    dimension: int
    nodes: list[TextNode]
    raw_links: dict[str, tuple[Any, Any]]
    documents: dict[str, Any]
    embeddings: dict[str, Any]
    stored: set[str]
    incoming: list[tuple[int, float | None]]
    query_embedding: Any
    link_mode: str
    knobs: dict[str, Any]


def random_case(rng: np.random.Generator, prefix: str) -> Case:
    dimension = int(rng.integers(2, 7))
    ids = [f"{prefix}{i}" for i in range(int(rng.integers(1, 11)))]
    link_mode = pick(rng, ["relationships", "relationships", "metadata"])
    raw_links: dict[str, tuple[Any, Any]] = {}
    documents: dict[str, Any] = {}
    embeddings: dict[str, Any] = {}
    nodes: list[TextNode] = []
    topic = make_topic(rng, dimension)
    bad_rate = pick(rng, [0.0, 0.0, 0.1, 0.3])
    for index, chunk_id in enumerate(ids):
        node = TextNode(id_=chunk_id, text=f"passage {chunk_id} text")
        links = [chain_link(rng, ids, index, side) for side in range(2)]
        if link_mode == "relationships":
            # Relationships hold strings only; a list of infos is their "wrong type".
            links = [link if isinstance(link, str) or link is None else None for link in links]
            for relation, link in zip(
                (NodeRelationship.PREVIOUS, NodeRelationship.NEXT), links, strict=True
            ):
                if link is None:
                    continue
                if rng.random() < 0.05:
                    node.relationships[relation] = [RelatedNodeInfo(node_id=link)]
                    links[0 if relation == NodeRelationship.PREVIOUS else 1] = None
                else:
                    node.relationships[relation] = RelatedNodeInfo(node_id=link)
            document = pick(rng, [*DOCUMENT_IDS, None])
            if document is not None:
                node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=document)
        else:
            for key, link in zip(("prev", "next"), links, strict=True):
                if link is not None:
                    node.metadata[key] = link
            document = pick(rng, [*DOCUMENT_IDS, None, 7])
            if document is not None:
                node.metadata["doc"] = document
        raw_links[chunk_id] = (links[0], links[1])
        documents[chunk_id] = document
        kind = pick(rng, NODE_VECTOR_KINDS) if rng.random() < bad_rate else "good"
        if rng.random() < 0.1:
            kind = "missing"
        embedding = make_vector(rng, dimension, kind, topic=topic)
        if embedding is not None:
            node.embedding = [float(v) for v in embedding]
        embeddings[chunk_id] = node.embedding
        nodes.append(node)
    stored = {c for c in ids if rng.random() < 0.85}
    incoming = [
        (int(rng.integers(len(ids))), pick(rng, [None, float(rng.uniform(-1, 1))]))
        for _ in range(int(rng.integers(0, 7)))
    ]
    query_kind = pick(rng, ("good",) * 16 + ("absent", "absent", "nan", "zero"))
    query_embedding = (
        None if query_kind == "absent" else make_vector(rng, dimension, query_kind, topic=topic)
    )
    budget_mode = rng.random() < 0.5
    k = int(rng.integers(1, 5))
    knobs: dict[str, Any] = {
        "k": k,
        "budget": int(rng.integers(k, k + 7)) if budget_mode else None,
        "lambda_": pick(rng, [0.0, 0.1, float(rng.uniform(0.0, 2.0))]),
        "gamma": pick(rng, [0.8, 0.5, 1.0 - float(rng.random())]),
        "window": pick(rng, [1, 2, 3, None]),
        "direction": pick(rng, ["both", "previous", "next"]),
        "continuity_bonus": pick(rng, [0.0, 0.2, float(rng.uniform(0.0, 1.0))]),
        "merge_passages": bool(rng.random() < 0.3),
        "on_error": pick(rng, ["raise", "return_seeds"]),
    }
    if link_mode == "metadata":
        knobs.update(previous_id_key="prev", next_id_key="next", document_id_key="doc")
    return Case(
        dimension,
        nodes,
        raw_links,
        documents,
        embeddings,
        stored,
        incoming,
        query_embedding,
        link_mode,
        knobs,
    )


@st.composite
def cases(draw: st.DrawFn) -> Case:
    prefix = draw(st.text(max_size=3))
    return random_case(np.random.default_rng(draw(st.integers(0, 2**64 - 1))), prefix)


def vector_is_bad(case: Case, node_id: str) -> bool:
    """A node whose stored embedding SCAR cannot use (an absent one is embedded instead)."""
    value = case.embeddings.get(node_id)
    return value is not None and len(value) > 0 and not usable_vector(value, case.dimension)


def query_is_bad(case: Case) -> bool:
    value = case.query_embedding
    return value is not None and len(value) > 0 and not usable_vector(value, case.dimension)


def output_ids(output: list[NodeWithScore]) -> list[str]:
    ids: list[str] = []
    for item in output:
        ids.extend(item.node.metadata.get("scar_node_ids") or [item.node.node_id])
    return ids


def comparable(output: list[NodeWithScore]) -> list[tuple[Any, ...]]:
    return [
        (item.node.node_id, item.score, item.node.get_content(), repr(item.node.metadata))
        for item in output
    ]


@settings(
    max_examples=LLAMAINDEX_CASES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=cases())
def llamaindex_property(case: Case) -> None:
    count_case("llamaindex SCARNodePostprocessor")
    docstore = SimpleDocumentStore()
    docstore.add_documents([n for n in case.nodes if n.node_id in case.stored])
    scar = SCARNodePostprocessor(
        docstore=docstore, embed_model=HashedEmbedding(dimension=case.dimension), **case.knobs
    )
    incoming = [NodeWithScore(node=case.nodes[i], score=s) for i, s in case.incoming]
    bundle = QueryBundle(
        QUERY,
        embedding=None
        if case.query_embedding is None
        else [float(v) for v in case.query_embedding],
    )
    seeds = list(dict.fromkeys(item.node.node_id for item in incoming))
    budget = case.knobs["budget"]
    kept = seeds  # every incoming node is kept, in both modes
    must_fail = bool(seeds) and (query_is_bad(case) or any(vector_is_bad(case, s) for s in kept))
    try:
        output: Any = scar.postprocess_nodes(incoming, bundle)
    except Exception as error:
        output = error
    if must_fail:
        assert isinstance(output, BaseException), "a bad query or kept node vector must raise"
        check_documented_failure(output)
        assert isinstance(output, InvalidVectorError), output
        return
    if isinstance(output, BaseException):
        raise output
    ids = output_ids(output)
    assert len(ids) == len(set(ids)), ids
    assert set(kept) <= set(ids)
    if budget is not None:
        assert len(ids) <= max(budget, len(seeds))
    assert all(item.node.metadata.get("scar_expanded") is True for item in output)
    first_score = {}
    for item in incoming:
        first_score.setdefault(item.node.node_id, item.score)
    window = case.knobs["window"]
    if budget is None and window is None:
        window = 1
    allowed = reachable(seeds, case.raw_links, window, case.knobs["direction"])
    assert set(ids) <= allowed
    for item in output:
        metadata = item.node.metadata
        if metadata["scar_origin"] == "seed":
            assert item.score == first_score[item.node.node_id]
        elif metadata["scar_origin"] == "neighbor":
            node_id = item.node.node_id
            assert node_id in case.stored or node_id in seeds
            assert not vector_is_bad(case, node_id)
            via = metadata["scar_via_id"]
            side = 0 if metadata["scar_direction"] == "previous" else 1
            assert link_target(case.raw_links[via][side], via) == node_id
            own, other = case.documents[node_id], case.documents[via]
            if isinstance(own, str) and isinstance(other, str):
                assert own == other
    # Deterministic: a second run, through the async path, gives the very same nodes.
    assert comparable(asyncio.run(scar.apostprocess_nodes(incoming, bundle))) == comparable(output)


@pytest.mark.slow
def test_postprocessor_survives_hostile_nodes() -> None:
    run_counted("llamaindex SCARNodePostprocessor", llamaindex_property, LLAMAINDEX_CASES)
