"""``SCARNodePostprocessor``: ``PrevNextNodePostprocessor`` that adds a neighbour only when it helps.

LlamaIndex node parsers link each node to the one before and after it
(``NodeRelationship.PREVIOUS`` / ``NEXT``). This postprocessor follows those links from the
retrieved nodes, reads the neighbours and their stored embeddings (:mod:`scar_llamaindex.reads`),
and lets :class:`scar_core.query.ScarQuery` decide which of them continue the evidence.
"""

from __future__ import annotations

import contextlib
import operator
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from llama_index.core import Settings, VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import (
    Field,
    PrivateAttr,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)
from llama_index.core.data_structs.data_structs import IndexDict
from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle
from llama_index.core.storage.docstore import BaseDocumentStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore, MetadataFilters

from scar_core.cache import EmbeddingCache
from scar_core.errors import (
    InvalidSettingsError,
    MissingQueryError,
    NeighborFetchError,
    settings_error_in,
    unfilterable_store_error,
)
from scar_core.query import Fallback, Found, Placed, ScarQuery, linked, warn_once
from scar_core.settings import ScarSettings, take_settings
from scar_llamaindex.reads import StoreReader, links_of, reader_for

__all__ = ["SCARNodePostprocessor"]

#: How ``VectorIndexRetriever`` searches: a subclass that overrides one may search otherwise.
_SEARCH_METHODS = (
    "_retrieve", "_aretrieve", "_build_vector_store_query", "_get_nodes_with_embeddings",
    "_aget_nodes_with_embeddings",
)  # fmt: skip
#: What users bring from retrievers and LangChain, and what SCAR takes instead.
_HINTS = {
    "k": "SCARNodePostprocessor's count is top_n=... (LlamaIndex's name)",
    "similarity_top_k": "that is the retriever's; SCARNodePostprocessor's count is top_n=...",
    "top_k": "SCARNodePostprocessor's count is top_n=...",
}
#: Query embeddings kept per postprocessor, for repeated ``query_str=`` calls.
_QUERY_VECTORS = 64


class SCARNodePostprocessor(BaseNodePostprocessor):
    """Semantic Continuity-Aware Retrieval: spend the retrieved budget on continuing evidence.

    Like ``PrevNextNodePostprocessor`` it follows the PREVIOUS/NEXT relationships LlamaIndex node
    parsers set; unlike it, a neighbour is added only when it scores as a continuation of the
    evidence (its cosine to the query, less a penalty for crossing a topic boundary).

    By default (``mode="budget"``) it returns exactly as many nodes as it receives, or ``top_n``:
    the best hits are kept and the other slots go to further nodes or to neighbours that continue
    a chosen node, whichever set bids higher in total (see ``scar_core.selection``).
    ``mode="paper"`` applies the paper's rule to the incoming nodes (or the first ``top_n``) as
    seeds, and the count varies. Input nodes with the same id are one node: it comes back once.

    Nodes come back passage by passage (passages by their best hit's rank, nodes in document
    order), as copies whose metadata (hidden from the LLM and the embedder) carries the same trace
    as ``SCARRetriever``'s Documents: ``scar_passage``, ``scar_origin`` (``"hit"``/``"neighbor"``),
    ``scar_score``, ``scar_seed_id``, ``scar_decision`` (a neighbour's relevance,
    boundary_penalty, score and threshold), ``scar_expanded`` and ``scar_embedded``. A hit keeps
    its score; a neighbour's score is its cosine to the query.

    Filters: SCAR never returns a node the search itself could not return. A postprocessor never
    sees the retriever, so it must be told how the search is restricted: ``from_retriever
    (retriever)`` takes the retriever's ``filters``, ``node_ids``, ``doc_ids`` and
    ``vector_store_kwargs``; ``from_index(index, filters=...)`` and the constructor take
    ``filters`` as given, and require them (``filters=None`` says the search is unfiltered).
    Every neighbour is read with them, as the store's own search applies them (SimpleVectorStore,
    Chroma, Qdrant, PGVector; see :mod:`scar_llamaindex.reads`), and a neighbour the index does not
    hold (another index's node in a shared vector store, or one deleted with
    ``index.delete_nodes``) is not read either: either way the passage ends before it. Where SCAR
    cannot apply a restriction (filters on FAISS or another store, a filter form the store's
    conversion refuses, a ``vector_store_kwargs`` name outside the store's allow-list, a store
    option such as PGVector's ``customize_query_fn``), it refuses to be built, unless
    ``neighbor_filter`` or ``allow_unfiltered_neighbors=True`` says what to do instead.

    Args:
        docstore: Where nodes are read when the vector store keeps no text (the index's docstore).
        vector_store: The index's vector store, which gives the stored embeddings, and the nodes
            if it keeps text.
        index_struct: The index's map of vector store ids to node ids (``index.index_struct``).
        embed_model: Embeds the query when the ``QueryBundle`` has no embedding, and nodes whose
            embedding no store gives. Default: ``Settings.embed_model``, looked up only if needed.
        top_n: Nodes returned (budget) or seeds (paper); default: as many as received.
        filters: The retriever's ``MetadataFilters``, applied to every neighbour read; required
            (``None``: the search is unfiltered).
        vector_store_kwargs: The retriever's ``vector_store_kwargs``: applied to the reads where
            the store takes them (Qdrant's ``shard_identifier``), accepted where they only rank
            the search, refused otherwise. Required for a Qdrant store with custom sharding.
        embedding_cache: Cache of the embeddings computed for nodes without stored vectors.
        **settings: The rest of :class:`scar_core.ScarSettings` (``mode``, ``lambda_``, ``keep``,
            ``continuity_bonus``, ``gamma``, ``window``, ``direction``, ``neighbor_filter``,
            ``allow_unfiltered_neighbors``); kept in ``settings``. An unknown name is refused.

    Raises:
        InvalidSettingsError: If a setting is unknown, out of range or of the other mode, if
            ``filters`` is not given or is not ``MetadataFilters``, or if SCAR cannot apply the
            search's restrictions and neither ``neighbor_filter`` nor
            ``allow_unfiltered_neighbors`` is given.

    Examples:
        ```python
        from llama_index.core import VectorStoreIndex
        from scar_llamaindex import SCARNodePostprocessor

        index = VectorStoreIndex.from_documents(documents)  # node parsers link the nodes
        scar = SCARNodePostprocessor.from_index(index, filters=None)  # an unfiltered search
        query_engine = index.as_query_engine(similarity_top_k=5, node_postprocessors=[scar])
        response = query_engine.query("How long is CCTV footage kept?")

        # A filtered search: SCAR reads neighbours with the same filters.
        from llama_index.core.query_engine import RetrieverQueryEngine
        from llama_index.core.vector_stores import MetadataFilter, MetadataFilters

        tenant = MetadataFilters(filters=[MetadataFilter(key="tenant", value="t1")])
        retriever = index.as_retriever(similarity_top_k=5, filters=tenant)
        scar = SCARNodePostprocessor.from_retriever(retriever)
        query_engine = RetrieverQueryEngine.from_args(retriever, node_postprocessors=[scar])
        ```
    """

    docstore: BaseDocumentStore | None = Field(
        default=None, exclude=True, description="Where nodes are read from (the index's docstore)."
    )
    vector_store: BasePydanticVectorStore | None = Field(
        default=None,
        exclude=True,
        description="The index's vector store: stored embeddings, or nodes if it keeps text.",
    )
    index_struct: IndexDict | None = Field(
        default=None, exclude=True, description="The index's map of vector store ids to node ids."
    )
    embed_model: BaseEmbedding | None = Field(
        default=None,
        exclude=True,
        description="Embeds queries without embeddings and nodes without stored vectors "
        "(default: Settings.embed_model, only if needed).",
    )
    top_n: int | None = Field(
        default=None, description="Nodes returned (budget) or seeds (paper); default: all."
    )
    filters: MetadataFilters | None = Field(
        default=None,
        description="The retriever's metadata filters, applied to every neighbour read; they "
        "must be the ones the retriever searches with, and must be given (None: unfiltered).",
    )
    vector_store_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        exclude=True,
        description="The retriever's vector_store_kwargs: applied to neighbour reads, or known "
        "not to narrow the search, or refused.",
    )
    settings: ScarSettings = Field(
        default_factory=ScarSettings,
        description="SCAR's settings (scar_core.ScarSettings), given as keyword arguments.",
    )
    embedding_cache: EmbeddingCache | None = Field(
        default=None,
        exclude=True,
        description="Where embeddings of nodes without stored vectors are kept (default on disk).",
    )

    _reader: StoreReader | None = PrivateAttr(default=None)
    _fallback: Fallback | None = PrivateAttr(default=None)
    _query_vectors: OrderedDict[tuple[Any, ...], list[float]] = PrivateAttr(
        default_factory=OrderedDict
    )
    #: The retriever's node_ids and doc_ids (set by from_retriever): no neighbour outside them.
    _node_ids: frozenset[str] | None = PrivateAttr(default=None)
    _doc_ids: frozenset[str] | None = PrivateAttr(default=None)

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as error:  # raise SCAR's own error, as documented
            raise settings_error_in(error) or error from None

    @classmethod
    def class_name(cls) -> str:
        """Return the class name."""
        return "SCARNodePostprocessor"

    @classmethod
    def from_index(cls, index: VectorStoreIndex, **kwargs: Any) -> SCARNodePostprocessor:
        """Build the postprocessor on an index's docstore, vector store and embed model.

        A neighbour is read only if the index holds it (see :mod:`scar_llamaindex.reads`).

        Args:
            index: The index whose retriever gives the nodes.
            **kwargs: ``filters=``, required: the ``MetadataFilters`` the retriever searches
                with, or ``None`` if its search is unfiltered; and any other setting, e.g.
                ``mode="paper"``, ``top_n=5`` or ``vector_store_kwargs=...``.

        Raises:
            TypeError: If ``index`` is not a ``VectorStoreIndex``.
            InvalidSettingsError: See the class.
        """
        if not isinstance(index, VectorStoreIndex):
            raise TypeError(
                f"from_index takes a VectorStoreIndex, not {type(index).__name__}; for a "
                "retriever, use SCARNodePostprocessor.from_retriever(retriever)."
            )
        stores = {
            "docstore": index.docstore,
            "vector_store": index.vector_store,
            "index_struct": index.index_struct,
            "embed_model": index._embed_model,  # no public accessor in llama-index-core 0.14
        }
        return cls(**(stores | kwargs))

    @classmethod
    def from_retriever(cls, retriever: BaseRetriever, **kwargs: Any) -> SCARNodePostprocessor:
        """Build the postprocessor on a retriever's index, embed model and search restrictions.

        Neighbours are then read with the retriever's ``filters`` and ``vector_store_kwargs``
        (an allow-list per store, see :mod:`scar_llamaindex.reads`), and kept only within its
        ``node_ids`` (``index.as_retriever`` passes the index's nodes) and ``doc_ids``, if set.
        Its query mode, ``alpha``, ``sparse_top_k`` and ``hybrid_top_k`` rank the search and do
        not narrow it. ``VectorIndexRetriever`` has no public accessor for these in
        llama-index-core 0.14, so they are read from its ``_index``, ``_embed_model``,
        ``_filters``, ``_kwargs``, ``_node_ids`` and ``_doc_ids``.

        Args:
            retriever: The ``VectorIndexRetriever`` whose nodes the postprocessor receives
                (``index.as_retriever(filters=...)``, typed as a ``BaseRetriever``).
            **kwargs: Any other setting, e.g. ``mode="paper"`` or ``top_n=5``.

        Raises:
            TypeError: If ``retriever`` is not a ``VectorIndexRetriever``.
            InvalidSettingsError: If ``filters`` or ``vector_store_kwargs`` is passed (the
                retriever's are taken), if the retriever overrides how it searches, or if its
                restrictions cannot be applied (see the class) and neither ``neighbor_filter``
                nor ``allow_unfiltered_neighbors`` is given.
        """
        if not isinstance(retriever, VectorIndexRetriever):
            raise TypeError(
                f"from_retriever takes a VectorIndexRetriever (index.as_retriever(...)), not "
                f"{type(retriever).__name__}; for another retriever, use "
                "SCARNodePostprocessor.from_index(index, filters=<the filters it searches with>)."
            )
        for name in ("filters", "vector_store_kwargs"):
            if name in kwargs:
                raise InvalidSettingsError(
                    f"from_retriever takes the retriever's own {name}, so {name}=... cannot be "
                    f"passed too; give them to the retriever (index.as_retriever({name}=...)) or "
                    f"use SCARNodePostprocessor.from_index(index, {name}=...)."
                )
        changed = [  # the class that defines each (a method read off a class is a new object)
            name
            for name in _SEARCH_METHODS
            if next(c for c in type(retriever).__mro__ if name in vars(c))
            is not VectorIndexRetriever
        ]
        if changed:
            raise InvalidSettingsError(
                f"from_retriever reads the restrictions VectorIndexRetriever searches with, but "
                f"{type(retriever).__name__} overrides {changed}, so its search may be restricted "
                "in ways SCAR cannot see; use SCARNodePostprocessor.from_index(index, "
                "filters=<the filters it searches with>), with neighbor_filter=... for any other "
                "restriction."
            )
        built = {
            "embed_model": retriever._embed_model,
            "filters": retriever._filters,
            "vector_store_kwargs": dict(retriever._kwargs),
        }
        scar = cls.from_index(retriever._index, **(built | kwargs))
        scar._node_ids = frozenset(retriever._node_ids) if retriever._node_ids else None
        scar._doc_ids = frozenset(retriever._doc_ids) if retriever._doc_ids else None
        return scar

    @model_validator(mode="before")
    @classmethod
    def _take_settings(cls, data: Any) -> Any:
        if isinstance(data, dict) and "settings" not in data:
            data = dict(data)
            own = [
                name for name in cls.model_fields if name not in ("settings", "callback_manager")
            ]
            for name in ("k", *_HINTS):
                if name in data:
                    raise InvalidSettingsError(
                        f"SCARNodePostprocessor got {name}={data[name]!r}: {_HINTS[name]}."
                    )
            data["settings"] = take_settings(
                data, "SCARNodePostprocessor", [*own, "callback_manager"]
            )
        return data

    @field_validator("filters", mode="before")
    @classmethod
    def _metadata_filters(cls, value: Any) -> Any:
        if value is None or isinstance(value, MetadataFilters):
            return value
        if isinstance(value, Mapping):
            with contextlib.suppress(ValidationError):
                return MetadataFilters.model_validate(value)  # its own data, as to_dict gives
        raise InvalidSettingsError(
            f"SCARNodePostprocessor got filters={value!r}, which is not MetadataFilters; pass "
            "the filters the retriever searches with, e.g. MetadataFilters(filters=["
            "MetadataFilter(key='tenant', value='t1')]) (from llama_index.core.vector_stores), "
            "or filters=None if its search is unfiltered."
        )

    @field_validator("vector_store_kwargs", mode="before")
    @classmethod
    def _kwargs_mapping(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            return dict(value)
        raise InvalidSettingsError(
            f"SCARNodePostprocessor got vector_store_kwargs={value!r}, which is not a dict; pass "
            "the retriever's vector_store_kwargs, e.g. {'shard_identifier': 't1'}, or {}."
        )

    @model_validator(mode="after")
    def _check_stores(self) -> SCARNodePostprocessor:
        if self.top_n is not None:
            self.settings.for_query(self.top_n, strict=True, name="top_n")  # keep <= top_n
        if "filters" not in self.model_fields_set:
            raise InvalidSettingsError(
                "SCARNodePostprocessor must be told the filters the search uses: a postprocessor "
                "never sees the retriever, and a neighbour read without them could be a node the "
                "search may not return. State them, SCARNodePostprocessor.from_index(index, "
                "filters=<the retriever's filters, or None>) (None: the search is unfiltered; "
                "the constructor takes filters=... alike), or build it with "
                "SCARNodePostprocessor.from_retriever(retriever), which takes the retriever's own."
            )
        reader = self._reader_now()
        if reader.store is None:
            held = "no vector store" if self.vector_store is None else "a vector store that "
            held += "" if self.vector_store is None else "keeps no text (stores_text=False)"
            raise InvalidSettingsError(
                f"SCARNodePostprocessor has no docstore and {held}, so it cannot read neighbour "
                "nodes; pass docstore=index.docstore and vector_store=index.vector_store, or "
                "build it with SCARNodePostprocessor.from_index(index, filters=...)."
            )
        needed = reader.kwargs_needed()
        given = self.settings.neighbor_filter or self.settings.allow_unfiltered_neighbors
        if needed and "vector_store_kwargs" not in self.model_fields_set and not given:
            raise unfilterable_store_error(
                reader.name,
                f"{needed}; state the search's vector_store_kwargs (vector_store_kwargs={{}} for "
                "a search of every shard), or build it with from_retriever(retriever)",
            )
        return self

    @field_serializer("settings")
    def _settings_as_dict(self, settings: ScarSettings) -> dict[str, Any]:
        """The settings as data; a ``neighbor_filter`` function is not data and is left out."""
        return {n: getattr(settings, n) for n in settings.names() if n != "neighbor_filter"}

    def _reader_now(self) -> StoreReader:
        """The reader of the current stores and filters, refused if it cannot filter."""
        stores = (
            self.docstore, self.vector_store, self.index_struct, self.filters,
            self.vector_store_kwargs,
        )  # fmt: skip
        if self._reader is None or any(map(operator.is_not, self._reader.stores, stores)):
            reader = reader_for(*stores)  # built again if a store or the filters were replaced
            why = reader.unfilterable()
            given = self.settings.neighbor_filter or self.settings.allow_unfiltered_neighbors
            if why is not None and not given:
                raise unfilterable_store_error(reader.name, why)
            self._reader = reader
        return self._reader

    # The sync and async shells: read what the query asks for, render.

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        """Return the selected nodes, reading neighbours with the stores' sync APIs."""
        _checked(query_bundle)
        vector = None
        if linked(hits := [_found(n.node) for n in nodes]):
            bundle = _required(query_bundle)
            vector = bundle.embedding or self._remembered(bundle)
            if vector is None:
                vector = self._embedder().get_agg_embedding_from_queries(bundle.embedding_strs)
                self._remember(bundle, vector)
        scar, reader = self._query(nodes, hits, vector), self._reader_now()
        while ids := scar.wanted():
            try:
                read = reader.nodes(ids)
            except Exception as error:
                raise self._fetch_error(ids, error) from error
            scar.receive(self._within_retriever(read, reader))
        return self._render(nodes, scar.placed())

    async def _apostprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        """Return the selected nodes, reading neighbours with the stores' async APIs."""
        _checked(query_bundle)
        vector = None
        if linked(hits := [_found(n.node) for n in nodes]):
            bundle = _required(query_bundle)
            vector = bundle.embedding or self._remembered(bundle)
            if vector is None:
                embedder = self._embedder()
                vector = await embedder.aget_agg_embedding_from_queries(bundle.embedding_strs)
                self._remember(bundle, vector)
        scar, reader = self._query(nodes, hits, vector), self._reader_now()
        while ids := scar.wanted():
            try:
                read = await reader.anodes(ids)
            except Exception as error:
                raise self._fetch_error(ids, error) from error
            await scar.areceive(self._within_retriever(read, reader))
        self._warn_async(reader)
        return self._render(nodes, scar.placed())

    # The steps both shells share.

    def _embedder(self) -> BaseEmbedding:
        return self.embed_model if self.embed_model is not None else Settings.embed_model

    def _remembered(self, bundle: QueryBundle) -> list[float] | None:
        return self._query_vectors.get((id(self._embedder()), *bundle.embedding_strs))

    def _remember(self, bundle: QueryBundle, vector: list[float]) -> None:
        self._query_vectors[(id(self._embedder()), *bundle.embedding_strs)] = vector
        while len(self._query_vectors) > _QUERY_VECTORS:
            self._query_vectors.popitem(last=False)

    def _query(
        self, nodes: list[NodeWithScore], hits: list[Found], vector: list[float] | None
    ) -> ScarQuery:
        reader = self._reader_now()
        if nodes and vector is None:
            warn_once(
                "unlinked",
                self,
                "None of the nodes SCARNodePostprocessor received has PREVIOUS/NEXT "
                "relationships, so it returns them as they came (plain top-k). Parse documents "
                "with a LlamaIndex node parser (e.g. SentenceSplitter, the VectorStoreIndex "
                "default), which sets them.",
                stacklevel=6,
            )
        k = self.top_n or len(nodes)
        return ScarQuery(vector, hits, self.settings, k, self._fallback_for(reader), reader.store)

    def _fallback_for(self, reader: StoreReader) -> Fallback:
        """The fallback embedding, made once per store: its cache reads its files once.

        The embed model is looked up only when a node has to be embedded.
        """
        if self._fallback is None or self._fallback.owner is not reader.store:
            self._fallback = Fallback(
                lambda: _model_key(self._embedder()),
                lambda texts: self._embedder().get_text_embedding_batch(texts),
                self.embedding_cache,
                lambda: self._fallback_warning(reader),
                reader.store,
            )
        return self._fallback

    def _fallback_warning(self, reader: StoreReader) -> str:
        if self.vector_store is None:
            fix = "pass vector_store=index.vector_store, or build it with from_index(index, filters=...)"
        elif self.index_struct is None:
            fix = "build it with from_index(index, filters=...), which also passes the index's index_struct"
        else:
            fix = (
                "use a store SCAR reads vectors from (Simple, FAISS, Chroma, Qdrant, PGVector, "
                "or one whose get_nodes returns embeddings)"
            )
        return (
            f"{reader.name} gave no stored embeddings for some nodes, so SCAR embedded their text "
            f"with {self._embedder().model_name!r} (each text once, then cached; counted in "
            f"metadata['scar_embedded']). To read stored vectors instead, {fix}."
        )

    def _within_retriever(self, nodes: list[BaseNode], reader: StoreReader) -> list[Found]:
        """The nodes read, less those outside the retriever's node_ids and doc_ids."""
        vectors = reader.vectors(nodes)
        return [
            _found(n, vectors.get(n.node_id))
            for n in nodes
            if (self._node_ids is None or n.node_id in self._node_ids)
            and (self._doc_ids is None or n.ref_doc_id in self._doc_ids)
        ]

    def _fetch_error(self, ids: list[str], error: Exception) -> NeighborFetchError:
        reader = self._reader_now()
        return NeighborFetchError(
            f"{reader.name} failed while SCAR read {len(ids)} node(s) by id "
            f"({type(error).__name__}: {error}); check that the store is reachable and holds "
            "the index's nodes."
        )

    def _warn_async(self, reader: StoreReader) -> None:
        if reader.async_error is not None:
            error = reader.async_error
            warn_once(
                "async",
                reader.store,
                f"{type(reader.store).__name__}.aget_nodes failed ({type(error).__name__}: "
                f"{error}), so SCAR read it with get_nodes in a worker thread. Give the store a "
                "working async client to use its async path.",
                stacklevel=4,
            )

    def _render(self, nodes: list[NodeWithScore], placed: list[Placed]) -> list[NodeWithScore]:
        given = {n.node.node_id: n.score for n in reversed(nodes)}  # the first of equal ids wins
        out = []
        for p in placed:
            if p.chunk_id in given:  # a hit keeps its score, even None
                score = given[p.chunk_id]
            else:  # a neighbour's is its cosine to the query
                decision = p.selected.decision if p.selected is not None else None
                score = decision.relevance if decision is not None else None
            out.append(NodeWithScore(node=_annotated(p.found.item, p.trace), score=score))
        return out


def _found(node: BaseNode, vector: Any = None) -> Found:
    """The core's view of a node: id, vector, links and what tells it apart."""
    previous_id, next_id = links_of(node)
    return Found(
        node.node_id, node, node.embedding if vector is None else vector, previous_id, next_id,
        node.source_node is not None, node.metadata, node.get_content(MetadataMode.EMBED),
    )  # fmt: skip


def _model_key(model: BaseEmbedding) -> str:
    """The cache key: the class keeps apart models that share a name (the default: "unknown")."""
    return f"{type(model).__module__}.{type(model).__qualname__}/{model.model_name}"


#: How the errors about the query say what to pass.
_ASK = 'e.g. query_str="How long is CCTV footage kept?"'


def _checked(query_bundle: QueryBundle | None) -> None:
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


def _required(query_bundle: QueryBundle | None) -> QueryBundle:
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


def _annotated(node: BaseNode, trace: dict[str, Any]) -> BaseNode:
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
