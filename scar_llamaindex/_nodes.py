"""What SCARNodePostprocessor is given and returns: its checks, the core's records, the trace."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from llama_index.core import VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import ValidationError
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import MetadataFilters

from scar_core._chunks import Chunk
from scar_core._driver import QueryDriver, linked
from scar_core._errors import InvalidSettingsError, MissingQueryError
from scar_core._settings import ScarSettings, take_settings
from scar_llamaindex import _compat
from scar_llamaindex._reads import StoreReader, links_of

__all__ = [
    "NO_FILTERS", "UNLINKED", "annotated", "checked", "found", "index_settings", "kwargs_mapping",
    "metadata_filters", "received", "remembered", "rendered", "required", "retriever_settings",
    "settings_from", "started",
]  # fmt: skip

#: What users bring from retrievers and LangChain, and what SCAR takes instead.
_HINTS = {
    "k": "SCARNodePostprocessor's count is top_n=... (LlamaIndex's name)",
    "similarity_top_k": "that is the retriever's; SCARNodePostprocessor's count is top_n=...",
    "top_k": "SCARNodePostprocessor's count is top_n=...",
}
#: The error for a postprocessor built without ``filters``.
NO_FILTERS = (
    "SCARNodePostprocessor must be told the filters the search uses: a postprocessor "
    "never sees the retriever, and a neighbour read without them could be a node the "
    "search may not return. State them, SCARNodePostprocessor.from_index(index, "
    "filters=<the retriever's filters, or None>) (None: the search is unfiltered; "
    "the constructor takes filters=... alike), or build it with "
    "SCARNodePostprocessor.from_retriever(retriever), which takes the retriever's own."
)
#: The warning for nodes without PREVIOUS/NEXT relationships.
UNLINKED = (
    "None of the nodes SCARNodePostprocessor received has PREVIOUS/NEXT relationships, so it "
    "returns them as they came (plain top-k). Parse documents with a LlamaIndex node parser "
    "(e.g. SentenceSplitter, the VectorStoreIndex default), which sets them."
)


def settings_from(data: dict[str, Any], fields: Iterable[str]) -> ScarSettings:
    """Pop SCAR's settings from the keyword arguments ``data``; refuse a foreign count by name."""
    for name in _HINTS:
        if name in data:
            raise InvalidSettingsError(
                f"SCARNodePostprocessor got {name}={data[name]!r}: {_HINTS[name]}."
            )
    return take_settings(data, "SCARNodePostprocessor", [n for n in fields if n != "settings"])


def index_settings(index: VectorStoreIndex, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` and the index's docstore, vector store, index_struct and embed model."""
    if not isinstance(index, VectorStoreIndex):
        raise TypeError(
            f"from_index takes a VectorStoreIndex, not {type(index).__name__}; for a "
            "retriever, use SCARNodePostprocessor.from_retriever(retriever)."
        )
    stores = {
        "docstore": index.docstore,
        "vector_store": index.vector_store,
        "index_struct": index.index_struct,
        "embed_model": _compat.index_embed_model(index),
    }
    return stores | kwargs


def retriever_settings(search: _compat.RetrieverSearch, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` and the retriever's embed model, filters and vector_store_kwargs (not in them)."""
    for name in ("filters", "vector_store_kwargs"):
        if name in kwargs:
            raise InvalidSettingsError(
                f"from_retriever takes the retriever's own {name}, so {name}=... cannot be "
                f"passed too; give them to the retriever (index.as_retriever({name}=...)) or "
                f"use SCARNodePostprocessor.from_index(index, {name}=...)."
            )
    built = {
        "embed_model": search.embed_model,
        "filters": search.filters,
        "vector_store_kwargs": search.vector_store_kwargs,
    }
    return built | kwargs


def metadata_filters(value: Any) -> Any:
    """``filters``: ``MetadataFilters``, its own data (as ``to_dict`` gives), or ``None``."""
    if value is None or isinstance(value, MetadataFilters):
        return value
    if isinstance(value, Mapping):
        with contextlib.suppress(ValidationError):
            return MetadataFilters.model_validate(value)
    raise InvalidSettingsError(
        f"SCARNodePostprocessor got filters={value!r}, which is not MetadataFilters; pass "
        "the filters the retriever searches with, e.g. MetadataFilters(filters=["
        "MetadataFilter(key='tenant', value='t1')]) (from llama_index.core.vector_stores), "
        "or filters=None if its search is unfiltered."
    )


def kwargs_mapping(value: Any) -> Any:
    """``vector_store_kwargs``: a mapping, copied."""
    if isinstance(value, Mapping):
        return dict(value)
    raise InvalidSettingsError(
        f"SCARNodePostprocessor got vector_store_kwargs={value!r}, which is not a dict; pass "
        "the retriever's vector_store_kwargs, e.g. {'shard_identifier': 't1'}, or {}."
    )


def started(
    nodes: list[NodeWithScore],
    query_bundle: QueryBundle | None,
    embedder: Callable[[], BaseEmbedding],
) -> tuple[list[Chunk], QueryBundle | None, list[float] | None]:
    """The hits; if one is linked, the query and its vector, if given or computed (by the retriever)."""
    checked(query_bundle)
    if not linked(hits := [found(n.node) for n in nodes]):
        return hits, None, None
    bundle = required(query_bundle)
    return hits, bundle, bundle.embedding or _compat.query_vector(embedder(), bundle.embedding_strs)


def remembered(model: BaseEmbedding, bundle: QueryBundle, vector: list[float]) -> None:
    """Keep the query's vector, should the embed model's computations go unseen."""
    if len(bundle.embedding_strs) == 1:
        _compat.keep_query_vector(model, bundle.embedding_strs[0], vector)


def received(scar: QueryDriver, reader: StoreReader, nodes: list[BaseNode]) -> list[str]:
    """Give the driver the nodes read, with their stored vectors; return the texts to embed."""
    vectors = reader.vectors(nodes)
    scar.receive([found(n, vectors.get(n.node_id)) for n in nodes])
    return scar.lacking()


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
