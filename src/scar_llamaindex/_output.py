"""Turn SCAR's decisions into the nodes a query engine receives.

Nodes are copied before any metadata is added, so the docstore's and the retriever's objects are
never changed. Every key SCAR adds is excluded from what the LLM reads and from what is embedded.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Literal

from llama_index.core.schema import (
    BaseNode,
    MetadataMode,
    NodeRelationship,
    NodeWithScore,
    RelatedNodeInfo,
    TextNode,
)

from scar_core.assembly import ChunkRecord, Passage, assemble_passages
from scar_core.graph import NeighborGraph
from scar_core.policy import ExpansionResult, SelectedChunk
from scar_llamaindex._links import NodeLinks

#: Every metadata key the postprocessor may add (all excluded from LLM and embedding text).
TRACE_METADATA_KEYS: tuple[str, ...] = (
    "scar_mode",
    "scar_origin",
    "scar_expanded",
    "scar_error",
    "scar_seed_id",
    "scar_seed_rank",
    "scar_relevance",
    "scar_score",
    "scar_threshold",
    "scar_boundary_penalty",
    "scar_via_id",
    "scar_direction",
    "scar_distance",
    "scar_node_ids",
)

#: Namespace of the UUID-5 ids of merged passage nodes.
PASSAGE_ID_NAMESPACE = uuid.UUID("0b7e6a52-3f4c-4d1e-8a2b-5c9d7e1f3a64")

TraceValue = str | int | float | bool | list[str]
Mode = Literal["budget", "plain"]


def with_trace(node: BaseNode, trace: Mapping[str, TraceValue]) -> BaseNode:
    """Return a copy of ``node`` whose metadata also holds ``trace``, hidden from LLM and embedder."""
    return node.model_copy(
        update={
            "metadata": {**node.metadata, **trace},
            "excluded_llm_metadata_keys": _extend(node.excluded_llm_metadata_keys, trace),
            "excluded_embed_metadata_keys": _extend(node.excluded_embed_metadata_keys, trace),
        }
    )


def _extend(keys: Sequence[str], trace: Mapping[str, TraceValue]) -> list[str]:
    return list(dict.fromkeys([*keys, *trace]))


def _seed_trace(chunk: SelectedChunk, mode: Mode) -> dict[str, TraceValue]:
    return {
        "scar_mode": mode,
        "scar_origin": "seed",
        "scar_expanded": True,
        "scar_seed_id": chunk.chunk_id,
        "scar_seed_rank": chunk.seed_rank,
        "scar_relevance": chunk.score,
    }


def _neighbor_trace(chunk: SelectedChunk, mode: Mode) -> dict[str, TraceValue]:
    decision = chunk.decision
    trace: dict[str, TraceValue] = {
        "scar_mode": mode,
        "scar_origin": "neighbor",
        "scar_expanded": True,
        "scar_seed_id": chunk.seed_id,
        "scar_seed_rank": chunk.seed_rank,
        "scar_score": chunk.score,
    }
    if decision is not None:
        trace.update(
            {
                "scar_relevance": decision.relevance,
                "scar_threshold": decision.threshold,
                "scar_boundary_penalty": decision.boundary_penalty,
                "scar_via_id": decision.via_id,
                "scar_direction": decision.direction,
                "scar_distance": decision.distance,
            }
        )
    return trace


def unexpanded(seeds: Sequence[NodeWithScore], error_name: str, mode: Mode) -> list[NodeWithScore]:
    """Return the seeds alone, marked as not expanded because of ``error_name``."""
    return [
        NodeWithScore(
            node=with_trace(
                scored.node,
                {
                    "scar_mode": mode,
                    "scar_origin": "seed",
                    "scar_expanded": False,
                    "scar_error": error_name,
                    "scar_seed_id": scored.node.node_id,
                    "scar_seed_rank": rank,
                },
            ),
            score=scored.score,
        )
        for rank, scored in enumerate(seeds)
    ]


def records_of(nodes: Mapping[str, BaseNode], links: NodeLinks) -> dict[str, ChunkRecord]:
    """The text (metadata not included), document and offset of each node, for assembly."""
    return {
        node_id: ChunkRecord(
            chunk_id=node_id,
            text=node.get_content(metadata_mode=MetadataMode.NONE),
            document_id=links.document_id(node),
            start_index=node.start_char_idx if isinstance(node, TextNode) else None,
        )
        for node_id, node in nodes.items()
    }


def expanded(
    result: ExpansionResult,
    seeds: Mapping[str, NodeWithScore],
    nodes: Mapping[str, BaseNode],
    graph: NeighborGraph,
    links: NodeLinks,
    merge_passages: bool,
    mode: Mode,
) -> list[NodeWithScore]:
    """Return the selected nodes in passage order (or one node per passage when merging).

    Passages are ordered by the rank of their best seed; within a passage, nodes are in document
    order. Seeds keep the retriever's score; a neighbour's score is the ``S`` that admitted it.
    """
    selected = {chunk.chunk_id: nodes[chunk.chunk_id] for chunk in result.selected}
    passages = assemble_passages(result, records_of(selected, links), graph)
    output: list[NodeWithScore] = []
    for passage in passages:
        if merge_passages and len(passage.chunks) > 1:
            output.append(_merged(passage, seeds, selected, mode))
            continue
        for chunk in passage.chunks:
            if chunk.origin == "seed":
                seed = seeds[chunk.chunk_id]
                output.append(
                    NodeWithScore(
                        node=with_trace(seed.node, _seed_trace(chunk, mode)), score=seed.score
                    )
                )
            else:
                output.append(
                    NodeWithScore(
                        node=with_trace(selected[chunk.chunk_id], _neighbor_trace(chunk, mode)),
                        score=chunk.score,
                    )
                )
    return output


def _merged(
    passage: Passage,
    seeds: Mapping[str, NodeWithScore],
    nodes: Mapping[str, BaseNode],
    mode: Mode,
) -> NodeWithScore:
    """One text node for a contiguous passage, carrying its best seed's metadata and score."""
    seed_chunks = [chunk for chunk in passage.chunks if chunk.origin == "seed"]
    best = min(seed_chunks, key=lambda chunk: chunk.seed_rank) if seed_chunks else passage.chunks[0]
    base = nodes[best.chunk_id]
    first = nodes[passage.chunks[0].chunk_id]
    last = nodes[passage.chunks[-1].chunk_id]
    ids = passage.chunk_ids
    trace: dict[str, TraceValue] = {
        "scar_mode": mode,
        "scar_origin": "passage",
        "scar_expanded": True,
        "scar_seed_id": best.chunk_id,
        "scar_seed_rank": best.seed_rank,
        "scar_node_ids": ids,
    }
    relationships: dict[NodeRelationship, RelatedNodeInfo] = {}
    for relation, holder in (
        (NodeRelationship.SOURCE, base),
        (NodeRelationship.PREVIOUS, first),
        (NodeRelationship.NEXT, last),
    ):
        related = holder.relationships.get(relation)
        if isinstance(related, RelatedNodeInfo):
            relationships[relation] = related
    end = (
        last.end_char_idx
        if passage.start_index is not None and isinstance(last, TextNode)
        else None
    )
    merged = TextNode(
        id_=str(uuid.uuid5(PASSAGE_ID_NAMESPACE, "\x1f".join(ids))),
        text=passage.text,
        metadata={**base.metadata, **trace},
        excluded_llm_metadata_keys=_extend(base.excluded_llm_metadata_keys, trace),
        excluded_embed_metadata_keys=_extend(base.excluded_embed_metadata_keys, trace),
        relationships=relationships,
        start_char_idx=passage.start_index,
        end_char_idx=end,
    )
    if isinstance(base, TextNode):
        merged.metadata_template = base.metadata_template
        merged.metadata_separator = base.metadata_separator
        merged.text_template = base.text_template
    score = seeds[best.chunk_id].score if best.chunk_id in seeds else best.score
    return NodeWithScore(node=merged, score=score)
