"""``SCARNodePostprocessor``: ``PrevNextNodePostprocessor`` that adds a neighbour only when it helps."""

from __future__ import annotations

import operator
from typing import Annotated, Any

from llama_index.core import Settings, VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import (
    BeforeValidator,
    Field,
    PrivateAttr,
    ValidationError,
    model_validator,
)
from llama_index.core.data_structs.data_structs import IndexDict
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.storage.docstore import BaseDocumentStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore, MetadataFilters

from scar_core._chunks import Chunk
from scar_core._driver import QueryDriver, VectorMemory
from scar_core._errors import InvalidSettingsError, settings_error_in, warn_once
from scar_core._settings import ScarSettings
from scar_llamaindex import _compat, _nodes
from scar_llamaindex._reads import StoreReader, checked_reader

__all__ = ["SCARNodePostprocessor"]


class SCARNodePostprocessor(BaseNodePostprocessor):
    """Semantic Continuity-Aware Retrieval: spend the retrieved budget on continuing evidence.

    Like ``PrevNextNodePostprocessor`` it follows the PREVIOUS/NEXT relationships LlamaIndex node
    parsers set; unlike it, a neighbour is added only when it scores as a continuation of the
    evidence (its cosine to the query, less a penalty for crossing a topic boundary).

    By default (``mode="budget"``) it returns exactly as many nodes as it receives, or ``top_n``:
    the best hits are kept and the other slots go to further nodes or to neighbours that continue
    a chosen node, whichever set bids higher in total (see ``scar_core._selection``).
    ``mode="paper"`` applies the paper's rule to the incoming nodes (or the first ``top_n``) as
    seeds, and the count varies. Input nodes with the same id are one node: it comes back once.

    Nodes come back passage by passage (passages by their best hit's rank, nodes in document
    order), as copies whose metadata (hidden from the LLM and the embedder) carries the same trace
    as ``SCARRetriever``'s Documents: ``scar_passage``, ``scar_origin`` (``"hit"``/``"neighbor"``),
    ``scar_score``, ``scar_seed_id``, ``scar_decision`` (a neighbour's relevance,
    boundary_penalty, score and threshold), ``scar_expanded`` and ``scar_embedded``. A hit keeps
    its score; a neighbour's score is its cosine to the query.

    Filters: SCAR never returns a node the search itself could not return, so it must be told
    how the search is restricted: ``from_retriever(retriever)`` takes the retriever's own
    restrictions; ``from_index(index, filters=...)`` and the constructor require ``filters``
    (``None``: the search is unfiltered). Neighbours are read with them, and only if the index
    holds them (:mod:`scar_llamaindex._reads` says how, per store); a restriction SCAR cannot
    apply makes it refuse to be built, unless ``neighbor_filter`` or
    ``allow_unfiltered_neighbors=True`` says what to do instead.

    The query is embedded once: a ``QueryBundle``'s embedding is used as is, and so is a vector
    the embed model has computed for the query since SCAR was built (the retriever's, when
    ``aretrieve`` keeps it to itself).

    Args:
        docstore: Where nodes are read when the vector store keeps no text (the index's docstore).
        vector_store: The index's vector store: stored embeddings, and nodes if it keeps text.
        index_struct: The index's map of vector store ids to node ids (``index.index_struct``).
        embed_model: Embeds the query without an embedding, and nodes no store gives a vector
            for. Default: ``Settings.embed_model``, looked up only if needed.
        top_n: Nodes returned (budget) or seeds (paper); default: as many as received.
        filters: The retriever's ``MetadataFilters``; required (``None``: unfiltered).
        vector_store_kwargs: The retriever's ``vector_store_kwargs``: applied to the reads, or
            known only to rank the search, or refused (see :mod:`scar_llamaindex._reads`).
            Required for a Qdrant store with custom sharding.
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
    filters: Annotated[MetadataFilters | None, BeforeValidator(_nodes.metadata_filters)] = Field(
        default=None,
        description="The retriever's metadata filters, applied to every neighbour read; they "
        "must be the ones the retriever searches with, and must be given (None: unfiltered).",
    )
    vector_store_kwargs: Annotated[dict[str, Any], BeforeValidator(_nodes.kwargs_mapping)] = Field(
        default_factory=dict,
        exclude=True,
        description="The retriever's vector_store_kwargs: applied to neighbour reads, or known "
        "not to narrow the search, or refused.",
    )
    settings: ScarSettings = Field(
        default_factory=ScarSettings,
        description="SCAR's settings (scar_core.ScarSettings), given as keyword arguments.",
    )

    _reader: StoreReader | None = PrivateAttr(default=None)
    #: Texts embedded for nodes without a stored vector, per store and embed model (in memory).
    _fallback: tuple[Any, Any, VectorMemory] | None = PrivateAttr(default=None)
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

        A neighbour is read only if the index holds it (see :mod:`scar_llamaindex._reads`).

        Args:
            index: The index whose retriever gives the nodes.
            **kwargs: ``filters=``, required: the ``MetadataFilters`` the retriever searches
                with, or ``None`` if its search is unfiltered; and any other setting, e.g.
                ``mode="paper"``, ``top_n=5`` or ``vector_store_kwargs=...``.

        Raises:
            TypeError: If ``index`` is not a ``VectorStoreIndex``.
            InvalidSettingsError: See the class.
        """
        return cls(**_nodes.index_settings(index, kwargs))

    @classmethod
    def from_retriever(cls, retriever: BaseRetriever, **kwargs: Any) -> SCARNodePostprocessor:
        """Build the postprocessor on a retriever's index, embed model and search restrictions.

        Neighbours are then read with the retriever's ``filters`` and ``vector_store_kwargs``
        (an allow-list per store, see :mod:`scar_llamaindex._reads`), and kept only within its
        ``node_ids`` (``index.as_retriever`` passes the index's nodes) and ``doc_ids``, if set.
        Its query mode, ``alpha``, ``sparse_top_k`` and ``hybrid_top_k`` rank the search and do
        not narrow it.

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
        search = _compat.retriever_search(retriever)
        scar = cls.from_index(search.vector_index, **_nodes.retriever_settings(search, kwargs))
        scar._node_ids, scar._doc_ids = search.node_ids, search.doc_ids  # read by _reader_now
        return scar

    @model_validator(mode="before")
    @classmethod
    def _take_settings(cls, data: Any) -> Any:
        if isinstance(data, dict) and "settings" not in data:
            data = dict(data)
            data["settings"] = _nodes.settings_from(data, cls.model_fields)
        return data

    @model_validator(mode="after")
    def _check_stores(self) -> SCARNodePostprocessor:
        if self.top_n is not None:
            self.settings.for_query(self.top_n, strict=True, name="top_n")  # keep <= top_n
        if "filters" not in self.model_fields_set:
            raise InvalidSettingsError(_nodes.NO_FILTERS)
        self._reader_now()
        if self.embed_model is not None:  # its query vectors, for one embedding per query
            _compat.watch(self.embed_model)
        return self

    def _reader_now(self) -> StoreReader:
        """The reader of the current stores and restrictions, built again if one changed."""
        stores = (
            self.docstore, self.vector_store, self.index_struct, self.filters,
            self.vector_store_kwargs, self._node_ids, self._doc_ids,
        )  # fmt: skip
        if self._reader is None or any(map(operator.is_not, self._reader.stores, stores)):
            stated = "vector_store_kwargs" in self.model_fields_set
            self._reader = checked_reader(*stores, kwargs_stated=stated, settings=self.settings)
        return self._reader

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        """Return the selected nodes, reading neighbours with the stores' sync APIs."""
        hits, bundle, vector = _nodes.started(nodes, query_bundle, self._embedder)
        if bundle is not None and vector is None:
            embedder = self._embedder()
            vector = embedder.get_agg_embedding_from_queries(bundle.embedding_strs)
            _nodes.remembered(embedder, bundle, vector)
        scar, reader = self._query(nodes, hits, vector)
        while ids := scar.wanted():
            try:
                read = reader.nodes(ids)
            except Exception as error:
                raise reader.fetch_error(ids, error) from error
            if texts := _nodes.received(scar, reader, read):
                scar.embedded(self._embedding(reader).get_text_embedding_batch(texts))
        return _nodes.rendered(nodes, scar.returned())

    async def _apostprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        """Return the selected nodes, reading neighbours with the stores' async APIs."""
        hits, bundle, vector = _nodes.started(nodes, query_bundle, self._embedder)
        if bundle is not None and vector is None:
            embedder = self._embedder()
            vector = await embedder.aget_agg_embedding_from_queries(bundle.embedding_strs)
            _nodes.remembered(embedder, bundle, vector)
        scar, reader = self._query(nodes, hits, vector)
        while ids := scar.wanted():
            try:
                read = await reader.anodes(ids)
            except Exception as error:
                raise reader.fetch_error(ids, error) from error
            if texts := _nodes.received(scar, reader, read):
                scar.embedded(await self._embedding(reader).aget_text_embedding_batch(texts))
        reader.warn_async()
        return _nodes.rendered(nodes, scar.returned())

    def _embedder(self) -> BaseEmbedding:
        return self.embed_model if self.embed_model is not None else Settings.embed_model

    def _query(
        self, nodes: list[NodeWithScore], hits: list[Chunk], vector: list[float] | None
    ) -> tuple[QueryDriver, StoreReader]:
        reader = self._reader_now()
        if nodes and vector is None:
            warn_once("unlinked", self, _nodes.UNLINKED, stacklevel=6)
        known = self._fallback
        if known is None or known[0] is not reader.store or known[1] is not self.embed_model:
            self._fallback = known = (reader.store, self.embed_model, VectorMemory())
        k = self.top_n or len(nodes)
        driver = QueryDriver.for_adapter(vector, hits, self.settings, k, known[2], reader.store)
        return driver, reader

    def _embedding(self, reader: StoreReader) -> BaseEmbedding:
        """The embed model, to embed nodes ``reader``'s store gave no vector for (warned once)."""
        owner = reader.store if reader.store is not None else self
        warning = reader.no_vectors_warning(self._embedder().model_name)
        warn_once("embedded", owner, warning, stacklevel=4)
        return self._embedder()
