"""Every use SCAR makes of LlamaIndex's private names, one function each, pinned by a test.

LlamaIndex and its store packages give no public accessor for what these functions read. Each
reads the name directly (an upgrade that renames it raises ``AttributeError``, never a silent
default), and ``tests/llamaindex/test_compat.py`` checks each against the installed versions,
which must lie in the ranges ``pyproject.toml`` allows, so that such an upgrade fails CI by name.

:func:`query_vector` works around ``VectorIndexRetriever._aretrieve``, which keeps the query
embedding it computes to itself (the sync ``_retrieve`` sets ``query_bundle.embedding``): through
LlamaIndex's public instrumentation, it keeps the query vectors the embed models SCAR uses compute.
"""

from __future__ import annotations

import inspect
import threading
import weakref
from collections import OrderedDict
from typing import Any, NamedTuple

from llama_index.core import VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding, mean_agg
from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.span_handlers import NullSpanHandler
from llama_index.core.vector_stores.types import MetadataFilters

from scar_core._errors import InvalidSettingsError

#: The methods through which ``VectorIndexRetriever`` searches: a subclass that overrides one may
#: restrict its search in ways :func:`retriever_search` cannot see.
SEARCH_METHODS = (
    "_retrieve", "_aretrieve", "_build_vector_store_query", "_get_nodes_with_embeddings",
    "_aget_nodes_with_embeddings",
)  # fmt: skip


def index_embed_model(index: VectorStoreIndex) -> BaseEmbedding:
    """The index's embed model, ``VectorStoreIndex._embed_model``."""
    model: BaseEmbedding = index._embed_model
    return model


class RetrieverSearch(NamedTuple):
    """What a ``VectorIndexRetriever`` searches: its index, with which model and restrictions."""

    vector_index: VectorStoreIndex
    embed_model: BaseEmbedding
    filters: MetadataFilters | None
    vector_store_kwargs: dict[str, Any]
    node_ids: frozenset[str] | None
    doc_ids: frozenset[str] | None


def retriever_search(retriever: Any) -> RetrieverSearch:
    """Read ``_index``, ``_embed_model``, ``_filters``, ``_kwargs``, ``_node_ids``, ``_doc_ids``.

    Empty ``node_ids`` and ``doc_ids`` are ``None``, as the retriever's search treats them.

    Raises:
        TypeError: If ``retriever`` is not a ``VectorIndexRetriever``.
        InvalidSettingsError: If its class overrides one of :data:`SEARCH_METHODS`.
    """
    if not isinstance(retriever, VectorIndexRetriever):
        raise TypeError(
            f"from_retriever takes a VectorIndexRetriever (index.as_retriever(...)), not "
            f"{type(retriever).__name__}; for another retriever, use "
            "SCARNodePostprocessor.from_index(index, filters=<the filters it searches with>)."
        )
    if changed := search_overrides(retriever):
        raise InvalidSettingsError(
            f"from_retriever reads the restrictions VectorIndexRetriever searches with, but "
            f"{type(retriever).__name__} overrides {changed}, so its search may be restricted "
            "in ways SCAR cannot see; use SCARNodePostprocessor.from_index(index, "
            "filters=<the filters it searches with>), with neighbor_filter=... for any other "
            "restriction."
        )
    node_ids, doc_ids = retriever._node_ids, retriever._doc_ids
    return RetrieverSearch(
        retriever._index, retriever._embed_model, retriever._filters, dict(retriever._kwargs),
        frozenset(node_ids) if node_ids else None, frozenset(doc_ids) if doc_ids else None,
    )  # fmt: skip


def search_overrides(retriever: VectorIndexRetriever) -> list[str]:
    """The :data:`SEARCH_METHODS` that the retriever's class defines anew."""
    # The class that defines each: a method read off a class is a new object each time.
    owner = {n: next(c for c in type(retriever).__mro__ if n in vars(c)) for n in SEARCH_METHODS}
    return [name for name, cls in owner.items() if cls is not VectorIndexRetriever]


def chroma_where(filters: MetadataFilters) -> dict[str, Any]:
    """Chroma's ``where`` for ``filters``, as ``ChromaVectorStore.query`` makes it.

    Raises:
        ValueError: For an operator or condition Chroma has no form for.
    """
    from llama_index.vector_stores.chroma.base import _to_chroma_filter

    where: dict[str, Any] = _to_chroma_filter(filters)
    return where


def qdrant_custom_sharded(store: Any) -> bool:
    """Whether a ``QdrantVectorStore`` is sharded by custom shard keys (its ``_sharding_method``).

    ``ShardingMethod`` is a str enum, so it equals its value.
    """
    return bool(store._sharding_method == "custom")


def pg_customizes_queries(store: Any) -> bool:
    """Whether a ``PGVectorStore`` was built with ``customize_query_fn`` (``_customize_query_fn``)."""
    return store._customize_query_fn is not None


# The query vectors of watched embed models, by model and query string.

#: Query vectors kept, over all watched models.
_KEPT = 64
_lock = threading.Lock()
_watched: weakref.WeakValueDictionary[int, BaseEmbedding] = weakref.WeakValueDictionary()
_vectors: OrderedDict[tuple[int, str], list[float]] = OrderedDict()
_handler: list[NullSpanHandler] = []  # added to LlamaIndex's dispatcher once per process


class _QueryVectorHandler(NullSpanHandler):
    """Keeps what ``BaseEmbedding.get_query_embedding``/``aget_query_embedding`` return."""

    @classmethod
    def class_name(cls) -> str:
        """Return the class name."""
        return "SCARQueryVectorHandler"

    def span_exit(
        self,
        id_: str,
        bound_args: inspect.BoundArguments,
        instance: Any = None,
        result: Any = None,
        **kwargs: Any,
    ) -> None:
        """Keep the query vector if a watched model computed it."""
        query = bound_args.arguments.get("query")
        watched = isinstance(instance, BaseEmbedding) and _watched.get(id(instance)) is instance
        if watched and isinstance(query, str) and result is not None:
            keep_query_vector(instance, query, list(result))


def watch(model: BaseEmbedding) -> None:
    """Keep the query vectors ``model`` computes from now on, for :func:`query_vector`."""
    with _lock:
        if not _handler:
            _handler.append(_QueryVectorHandler())
            get_dispatcher(BaseEmbedding.__module__).add_span_handler(_handler[0])
        if _watched.get(id(model)) is not model:  # drop a dead model's vectors under this id
            for key in [key for key in _vectors if key[0] == id(model)]:
                del _vectors[key]
            _watched[id(model)] = model


def keep_query_vector(model: BaseEmbedding, query: str, vector: list[float]) -> None:
    """Keep ``model``'s vector of ``query``; the oldest go past :data:`_KEPT`."""
    watch(model)
    with _lock:
        _vectors[id(model), query] = vector
        _vectors.move_to_end((id(model), query))
        while len(_vectors) > _KEPT:
            _vectors.popitem(last=False)


def query_vector(model: BaseEmbedding, queries: list[str]) -> list[float] | None:
    """``model``'s embedding of ``queries``, if it has computed each since it was watched.

    As ``get_agg_embedding_from_queries`` returns it (the mean); it watches ``model``.
    """
    watch(model)
    with _lock:
        found = [_vectors.get((id(model), query)) for query in queries]
    if not queries or any(vector is None for vector in found):
        return None
    return mean_agg([vector for vector in found if vector is not None])
