"""The nodes SCAR reads and returns: its records of them, the query's checks, the trace."""

from __future__ import annotations

from typing import Any

from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle

from scar_core._chunks import Chunk
from scar_core._errors import MissingQueryError
from scar_llamaindex._reads import links_of

__all__ = ["annotated", "checked", "found", "rendered", "required"]


def rendered(
    nodes: list[NodeWithScore], returned: list[tuple[Chunk, dict[str, Any]]]
) -> list[NodeWithScore]:
    """The nodes to return, each with its trace: a hit keeps its score, a neighbour its cosine."""
    given = {n.node.node_id: n.score for n in reversed(nodes)}  # the first of equal ids wins
    out = []
    for chunk, trace in returned:
        if chunk.id in given:  # a hit keeps its score, even None
            score = given[chunk.id]
        else:  # a neighbour's is its cosine to the query
            score = trace.get("scar_decision", {}).get("relevance")
        out.append(NodeWithScore(node=annotated(chunk.item, trace), score=score))
    return out


def found(node: BaseNode, vector: Any = None) -> Chunk:
    """The core's record of a node: id, vector, links, text and metadata."""
    previous_id, next_id = links_of(node)
    return Chunk(
        node.node_id, node.embedding if vector is None else vector, previous_id, next_id,
        node.source_node is not None, node.get_content(MetadataMode.EMBED), node.metadata, node,
    )  # fmt: skip


#: How the errors about the query say what to pass.
_ASK = 'e.g. query_str="How long is CCTV footage kept?"'


def checked(query_bundle: QueryBundle | None) -> None:
    """Refuse a query that is not text with SCAR's own error, not one deep in an embedder."""
    if query_bundle is None:
        return
    if not isinstance(query_bundle, QueryBundle):
        raise MissingQueryError(
            f"SCARNodePostprocessor got query_bundle={query_bundle!r}, which is not a "
            f"QueryBundle; pass the question as query_str=..., {_ASK}."
        )
    if not isinstance(query_bundle.query_str, str):
        raise MissingQueryError(
            f"SCARNodePostprocessor got query_str={query_bundle.query_str!r}, which is not a "
            f"question (a str); pass the question as text, {_ASK}."
        )


def required(query_bundle: QueryBundle | None) -> QueryBundle:
    """The query, which SCAR embeds unless it carries its embedding: refused if it is empty."""
    if query_bundle is None:
        raise MissingQueryError(
            "SCARNodePostprocessor needs the query: pass query_str=... or query_bundle=... to "
            "postprocess_nodes (query engines pass it themselves)."
        )
    texts = query_bundle.embedding_strs
    empty = not texts or any(not isinstance(t, str) or not t.strip() for t in texts)
    if not query_bundle.embedding and empty:
        given = (
            f"custom_embedding_strs={query_bundle.custom_embedding_strs!r}"
            if query_bundle.custom_embedding_strs is not None
            else f"query_str={query_bundle.query_str!r}"
        )
        raise MissingQueryError(
            f"SCARNodePostprocessor got {given}, which is empty, so it has no question to "
            f"embed; pass the question, {_ASK}, or a QueryBundle with its embedding."
        )
    return query_bundle


def annotated(node: BaseNode, trace: dict[str, Any]) -> BaseNode:
    """Return a copy of ``node`` with ``trace`` in its metadata, hidden from the LLM and embedder."""

    def hidden(keys: list[str]) -> list[str]:
        return [*keys, *(k for k in trace if k not in keys)]

    return node.model_copy(
        update={
            "metadata": {**node.metadata, **trace},
            "excluded_llm_metadata_keys": hidden(node.excluded_llm_metadata_keys),
            "excluded_embed_metadata_keys": hidden(node.excluded_embed_metadata_keys),
        }
    )
