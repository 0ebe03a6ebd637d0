"""``SCARNodePostprocessor``: ``PrevNextNodePostprocessor`` that adds a neighbour only when it helps.

LlamaIndex node parsers link each node to the one before and after it
(``NodeRelationship.PREVIOUS`` / ``NEXT``). This postprocessor follows those links from the
retrieved nodes, reads the neighbours and their stored embeddings, and lets
:class:`scar_core.QueryDriver` decide which of them continue the evidence.
"""

from __future__ import annotations

import operator
import warnings
import weakref
from collections.abc import Callable
from typing import Any, Literal

from llama_index.core import Settings, VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr, ValidationError, model_validator
from llama_index.core.data_structs.data_structs import IndexDict
from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle
from llama_index.core.storage.docstore import BaseDocumentStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore, MetadataFilters

from scar_core.cache import EmbeddingCache
from scar_core.driver import QueryDriver
from scar_core.errors import InvalidSettingsError, unfilterable_store_error
from scar_core.settings import DEFAULT_LAMBDA, BudgetSettings, Direction, PaperSettings
from scar_llamaindex.reads import NodeReads, StoreReader, links_of, reader_for

__all__ = ["SCARNodePostprocessor"]

_BUDGET_ONLY = ("keep", "continuity_bonus")
_PAPER_ONLY = ("gamma", "window", "direction")
#: (reason, id(store)) -> the store, so each store instance is warned about once per reason.
_warned_stores: dict[tuple[str, int], weakref.ref[Any]] = {}
_UNEXPANDED = {"scar_origin": "hit", "scar_expanded": False, "scar_embedded": 0}
#: Store-specific filters a retriever may pass in ``vector_store_kwargs`` (Chroma, Qdrant).
_STORE_FILTERS = {"where", "where_document", "qdrant_filters"}


class SCARNodePostprocessor(BaseNodePostprocessor):
    """Semantic Continuity-Aware Retrieval: spend the retrieved budget on continuing evidence.

    Like ``PrevNextNodePostprocessor`` it follows the PREVIOUS/NEXT relationships LlamaIndex node
    parsers set; unlike it, a neighbour is added only when it scores as a continuation of the
    evidence (its cosine to the query, less a penalty for crossing a topic boundary).

    By default (``mode="budget"``) it returns exactly as many nodes as it receives, or ``top_n``:
    the best hits are kept and the other slots go to further nodes or to neighbours that continue
    a chosen node, whichever set bids higher in total (see ``scar_core.selection``). ``mode="paper"`` applies the paper's rule to the incoming nodes
    (or the first ``top_n``) as seeds, and the count varies.

    Nodes come back passage by passage (passages by their best hit's rank, nodes in document
    order), as copies whose metadata (hidden from the LLM and the embedder) adds ``scar_origin``
    (``"hit"``/``"neighbor"``), ``scar_passage``, ``scar_seed_id``, ``scar_score``,
    ``scar_decision`` (a neighbour's relevance, boundary_penalty, score and threshold),
    ``scar_expanded`` and ``scar_embedded`` (texts this query embedded because no store gave their
    vectors). A hit keeps its score; a neighbour's score is its cosine to the query. Input nodes
    with the same id are one node: it comes back once, and budget mode fills the count (``top_n``
    or the number of nodes received) with other distinct nodes where it can.

    Filters: SCAR never returns a node the search itself could not return. ``filters`` must be
    the ``MetadataFilters`` the retriever searches with: ``from_retriever(retriever)`` takes them
    from the retriever, ``from_index(index, filters=...)`` takes them as given. Every neighbour is
    read with them, as the store's own search applies them (SimpleVectorStore, Chroma, Qdrant,
    PGVector; see :mod:`scar_llamaindex.reads`), and a neighbour the index no longer holds (e.g.
    after ``index.delete_nodes``) is not read either: either way the passage ends before it.
    Where SCAR cannot apply the filters (FAISS, another store, a filter form the store's
    conversion refuses), it refuses to be built, unless ``neighbor_filter`` or
    ``allow_unfiltered_neighbors=True`` says what to do instead.

    Args:
        docstore: Where nodes are read when the vector store keeps no text (the index's docstore).
        vector_store: The index's vector store, which gives the stored embeddings (see
            :mod:`scar_llamaindex.reads` for how each store is read), and the nodes if it keeps text.
        index_struct: The index's map of vector store ids to node ids (``index.index_struct``);
            ``FaissVectorStore``'s vectors are found through it.
        embed_model: Embeds the query when the ``QueryBundle`` has no embedding, and nodes whose
            embedding no store gives. Default: ``Settings.embed_model``, looked up only if needed.
        mode: ``"budget"`` (default) or ``"paper"``.
        top_n: Nodes returned (budget) or seeds (paper); default: as many as received.
        lambda_: Weight of the boundary penalty (both modes).
        keep, continuity_bonus: Budget mode only.
        gamma, window, direction: Paper mode only.
        embedding_cache: Cache of the embeddings computed for nodes without stored vectors.
        filters: The retriever's ``MetadataFilters``, applied to every neighbour read.
        neighbor_filter: A predicate on a node's metadata, true for nodes this query may see;
            SCAR applies it to every neighbour, besides ``filters``. The way to use ``filters``
            on a store SCAR cannot filter.
        allow_unfiltered_neighbors: Where SCAR cannot apply ``filters``, read neighbours without
            them instead of refusing: only for stores where no filter guards access (where SCAR
            can apply them, it still does).

    Raises:
        InvalidSettingsError: If a setting is out of range or does not apply to the mode, or if
            SCAR cannot apply ``filters`` and neither of the two settings above is given.

    Examples:
        ```python
        from llama_index.core import VectorStoreIndex
        from scar_llamaindex import SCARNodePostprocessor

        index = VectorStoreIndex.from_documents(documents)  # node parsers link the nodes
        scar = SCARNodePostprocessor.from_index(index)
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
    mode: Literal["budget", "paper"] = Field(
        default="budget",
        description="'budget': as many nodes as received (or top_n), better spent. 'paper': the "
        "paper's rule on the received nodes as seeds; the count varies.",
    )
    top_n: int | None = Field(
        default=None, ge=1, description="Nodes returned (budget) or seeds (paper); default: all."
    )
    lambda_: float = Field(
        default=DEFAULT_LAMBDA, ge=0.0, allow_inf_nan=False, description="Boundary-penalty weight."
    )
    keep: int | None = Field(
        default=None,
        ge=1,
        description="Budget mode: best hits always kept (default 2, or 1 when the count is 1).",
    )
    continuity_bonus: float | None = Field(
        default=None,
        ge=0.0,
        allow_inf_nan=False,
        description="Budget mode: bonus of a continuing neighbour over the next hit (0.25).",
    )
    gamma: float | None = Field(
        default=None, gt=0.0, le=1.0, description="Paper mode: relative threshold (0.8)."
    )
    window: int | None = Field(
        default=None, ge=1, description="Paper mode: steps a passage may grow from a seed (1)."
    )
    direction: Direction | None = Field(
        default=None, description="Paper mode: 'both' (default), 'previous' or 'next'."
    )
    embedding_cache: EmbeddingCache | None = Field(
        default=None,
        exclude=True,
        description="Where embeddings of nodes without stored vectors are kept (default on disk).",
    )

    filters: MetadataFilters | None = Field(
        default=None,
        description="The retriever's metadata filters, applied to every neighbour read; they "
        "must be the ones the retriever searches with.",
    )
    neighbor_filter: Callable[[dict[str, Any]], bool] | None = Field(
        default=None,
        exclude=True,
        description="A predicate on a node's metadata, true for nodes the query may see; applied "
        "to every neighbour, besides filters.",
    )
    allow_unfiltered_neighbors: bool = Field(
        default=False,
        description="Where SCAR cannot apply filters, read neighbours without them instead of "
        "refusing (only where no filter guards access).",
    )

    _default_cache: EmbeddingCache | None = PrivateAttr(default=None)
    _warned_unlinked: bool = PrivateAttr(default=False)
    _warned_unscored: bool = PrivateAttr(default=False)
    _reader: StoreReader | None = PrivateAttr(default=None)
    #: The retriever's node_ids and doc_ids (set by from_retriever): no neighbour outside them.
    _node_ids: frozenset[str] | None = PrivateAttr(default=None)
    _doc_ids: frozenset[str] | None = PrivateAttr(default=None)

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as error:
            # Pydantic wraps the validator's InvalidSettingsError; raise it as documented.
            ours = [e["ctx"]["error"] for e in error.errors() if "error" in e.get("ctx", {})]
            settings_errors = [e for e in ours if isinstance(e, InvalidSettingsError)]
            if settings_errors:
                raise settings_errors[0] from None
            raise

    @classmethod
    def class_name(cls) -> str:
        """Return the class name."""
        return "SCARNodePostprocessor"

    @classmethod
    def from_index(cls, index: VectorStoreIndex, **kwargs: Any) -> SCARNodePostprocessor:
        """Build the postprocessor on an index's docstore, vector store and embed model.

        Args:
            index: The index whose retriever gives the nodes.
            **kwargs: Any other setting, e.g. ``mode="paper"`` or ``top_n=5``.
        """
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

        Neighbours are then read with the retriever's ``filters``, and kept only within its
        ``node_ids`` (``index.as_retriever`` passes the index's nodes) and ``doc_ids``, if set.
        ``VectorIndexRetriever`` has no public accessor for these in llama-index-core 0.14, so
        they are read from its ``_index``, ``_embed_model``, ``_filters``, ``_node_ids`` and
        ``_doc_ids``.

        Args:
            retriever: The ``VectorIndexRetriever`` whose nodes the postprocessor receives
                (``index.as_retriever(filters=...)``, typed as a ``BaseRetriever``).
            **kwargs: Any other setting, e.g. ``mode="paper"`` or ``top_n=5``.

        Raises:
            TypeError: If ``retriever`` is not a ``VectorIndexRetriever``.
            InvalidSettingsError: If ``filters`` is passed (the retriever's are taken), or if the
                retriever filters with a store-specific filter in ``vector_store_kwargs``, or its
                filters cannot be applied (see the class), and neither ``neighbor_filter`` nor
                ``allow_unfiltered_neighbors`` is given.
        """
        if not isinstance(retriever, VectorIndexRetriever):
            raise TypeError(
                f"from_retriever takes a VectorIndexRetriever (index.as_retriever(...)), not "
                f"{type(retriever).__name__}; for another retriever, use "
                "SCARNodePostprocessor.from_index(index, filters=<the filters it searches with>)."
            )
        if "filters" in kwargs:
            raise InvalidSettingsError(
                "from_retriever takes the retriever's own filters, so filters=... cannot be "
                "passed too; give them to the retriever (index.as_retriever(filters=...)) or use "
                "SCARNodePostprocessor.from_index(index, filters=...)."
            )
        built = {"embed_model": retriever._embed_model, "filters": retriever._filters}
        scar = cls.from_index(retriever._index, **(built | kwargs))
        scar._node_ids = frozenset(retriever._node_ids) if retriever._node_ids else None
        scar._doc_ids = frozenset(retriever._doc_ids) if retriever._doc_ids else None
        native = sorted(_STORE_FILTERS & set(retriever._kwargs))
        if native and scar.neighbor_filter is None and not scar.allow_unfiltered_neighbors:
            raise unfilterable_store_error(
                type(retriever._vector_store).__name__,
                f"the retriever filters with vector_store_kwargs {native}, a store-specific "
                "filter SCAR does not apply (pass the filter as MetadataFilters instead)",
            )
        return scar

    @model_validator(mode="after")
    def _settings_fit_the_mode(self) -> SCARNodePostprocessor:
        wrong, other = (_PAPER_ONLY, "paper") if self.mode == "budget" else (_BUDGET_ONLY, "budget")
        for name in wrong:
            if getattr(self, name) is not None:
                raise InvalidSettingsError(
                    f"{name}={getattr(self, name)!r} was given, but {name} applies only to "
                    f"mode={other!r} and this postprocessor has mode={self.mode!r}; pass "
                    f"mode={other!r} or drop {name}."
                )
        if self.keep is not None and self.top_n is not None and self.keep > self.top_n:
            raise InvalidSettingsError(
                f"keep={self.keep} is larger than top_n={self.top_n}; at most top_n nodes are "
                "returned, so lower keep or raise top_n."
            )
        reader = reader_for(self.docstore, self.vector_store, self.index_struct, self.filters)
        if reader.store is None:
            held = "no vector store" if self.vector_store is None else "a vector store that "
            held += "" if self.vector_store is None else "keeps no text (stores_text=False)"
            raise InvalidSettingsError(
                f"SCARNodePostprocessor has no docstore and {held}, so it cannot read neighbour "
                "nodes; pass docstore=index.docstore and vector_store=index.vector_store, or "
                "build it with SCARNodePostprocessor.from_index(index)."
            )
        self._refuse_unfiltered(reader)
        return self

    def _refuse_unfiltered(self, reader: StoreReader) -> None:
        """Raise if ``reader`` cannot apply the filters and no other way was chosen."""
        why = reader.unfilterable()
        if why is not None and self.neighbor_filter is None and not self.allow_unfiltered_neighbors:
            raise unfilterable_store_error(reader.name, why)

    # The sync and async shells: the same steps, with the stores' sync or async reads.

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        """Return the selected nodes, reading neighbours with the stores' sync APIs."""
        if not self._expands(nodes):
            return self._unexpanded(nodes)
        bundle = _required(query_bundle)
        vector = bundle.embedding
        if vector is None:
            vector = self._embedder().get_agg_embedding_from_queries(bundle.embedding_strs)
        driver, reads = self._start(nodes, vector)
        while ids := driver.wanted():
            driver.receive(reads.read(ids))
        return self._finish(nodes, driver, reads)

    async def _apostprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        """Return the selected nodes, reading neighbours with the stores' async APIs."""
        if not self._expands(nodes):
            return self._unexpanded(nodes)
        bundle = _required(query_bundle)
        vector = bundle.embedding
        if vector is None:
            vector = await self._embedder().aget_agg_embedding_from_queries(bundle.embedding_strs)
        driver, reads = self._start(nodes, vector)
        while ids := driver.wanted():
            driver.receive(await reads.aread(ids))
        return self._finish(nodes, driver, reads)

    # The steps both shells share.

    def _settings(self, k: int) -> BudgetSettings | PaperSettings:
        names = _PAPER_ONLY if self.mode == "paper" else _BUDGET_ONLY
        given = {n: getattr(self, n) for n in names if getattr(self, n) is not None}
        if self.mode == "paper":
            return PaperSettings(k=k, lambda_=self.lambda_, **given)
        if self.keep is not None:
            given["keep"] = min(self.keep, k)  # fewer nodes than keep: every one is kept
        return BudgetSettings(k=k, lambda_=self.lambda_, **given)

    def _embedder(self) -> BaseEmbedding:
        return self.embed_model if self.embed_model is not None else Settings.embed_model

    def _cache(self) -> EmbeddingCache:
        if self.embedding_cache is not None:
            return self.embedding_cache
        if self._default_cache is None:
            self._default_cache = EmbeddingCache()
        return self._default_cache

    def _expands(self, nodes: list[NodeWithScore]) -> bool:
        """Whether some node has a neighbour link; warns once per postprocessor if none has."""
        if any(any(links_of(n.node)) for n in nodes):
            return True
        if nodes and not self._warned_unlinked:
            self._warned_unlinked = True
            warnings.warn(
                "None of the nodes SCARNodePostprocessor received has PREVIOUS/NEXT "
                "relationships, so it returns them as they came (plain top-k). Parse documents "
                "with a LlamaIndex node parser (e.g. SentenceSplitter, the VectorStoreIndex "
                "default), which sets them.",
                stacklevel=4,
            )
        return False

    def _unexpanded(self, nodes: list[NodeWithScore]) -> list[NodeWithScore]:
        distinct: dict[str, NodeWithScore] = {}
        for given in nodes:  # the same node twice comes back once
            distinct.setdefault(given.node.node_id, given)
        out = []
        for rank, given in enumerate(list(distinct.values())[: self.top_n or len(nodes)]):
            trace = {**_UNEXPANDED, "scar_passage": rank, "scar_seed_id": given.node.node_id}
            out.append(NodeWithScore(node=_annotated(given.node, trace), score=given.score))
        return out

    def _start(
        self, nodes: list[NodeWithScore], query: list[float]
    ) -> tuple[QueryDriver, NodeReads]:
        stores = (self.docstore, self.vector_store, self.index_struct, self.filters)
        if self._reader is None or any(map(operator.is_not, self._reader.stores, stores)):
            reader = reader_for(*stores)  # built again if a store or the filters were replaced
            self._refuse_unfiltered(reader)
            self._reader = reader
        known = [n.node for n in nodes]
        reads = NodeReads(self._reader, known, self._embedder, self._cache, self._may_see)
        hits = reads.chunks([n.node.node_id for n in nodes])
        return QueryDriver(query, hits, self._settings(self.top_n or len(nodes))), reads

    def _may_see(self, node: BaseNode) -> bool:
        """Whether a neighbour read is within the retriever's ids and passes neighbor_filter."""
        return (
            (self._node_ids is None or node.node_id in self._node_ids)
            and (self._doc_ids is None or node.ref_doc_id in self._doc_ids)
            and (self.neighbor_filter is None or self.neighbor_filter(dict(node.metadata)))
        )

    def _finish(
        self, nodes: list[NodeWithScore], driver: QueryDriver, reads: NodeReads
    ) -> list[NodeWithScore]:
        selection = driver.result()
        # Unscored ids the store does not hold are dangling links: the passage just ends there.
        self._warn_about(reads, len({c for c in selection.unscored if c in reads.nodes}))
        given = {n.node.node_id: n for n in reversed(nodes)}  # the first of equal ids wins
        picked = {s.chunk_id: s for s in selection.selected}
        out: list[NodeWithScore] = []
        for number, passage in enumerate(selection.passages):
            for chunk_id in passage:
                item, source = picked[chunk_id], given.get(chunk_id)
                trace: dict[str, Any] = {
                    "scar_origin": item.origin, "scar_passage": number,
                    "scar_seed_id": item.seed_id, "scar_score": item.score,
                    "scar_expanded": True, "scar_embedded": reads.embedded,
                }  # fmt: skip
                score = source.score if source is not None else None
                if item.decision is not None:
                    d = item.decision
                    trace["scar_decision"] = {
                        "relevance": d.relevance, "boundary_penalty": d.boundary_penalty,
                        "score": d.score, "threshold": d.threshold,
                    }  # fmt: skip
                    score = d.relevance if score is None else score
                out.append(
                    NodeWithScore(node=_annotated(reads.nodes[chunk_id], trace), score=score)
                )
        return out

    def _warn_about(self, reads: NodeReads, unscored: int) -> None:
        reader = reads.reader
        store = reader.vector_store if reader.vector_store is not None else reader.store
        if reads.fell_back and _first_warning("embedded", store):
            fix = "use SCARNodePostprocessor.from_index(index)" + (
                " (or pass vector_store=index.vector_store)"
                if self.vector_store is None
                else " on a store SCAR reads vectors from (Simple, FAISS, Chroma, Qdrant, PGVector, "
                "or one whose get_nodes returns embeddings)"
            )
            warnings.warn(
                f"{type(store).__name__} gave no stored embeddings for some nodes, so SCAR "
                f"embedded their text with {self._embedder().model_name!r} (each text once, then "
                f"cached; counted in metadata['scar_embedded']). To read stored vectors instead, "
                f"{fix}.",
                stacklevel=4,
            )
        if reader.async_error is not None and _first_warning("async", reader.store):
            warnings.warn(
                f"{type(reader.store).__name__}.aget_nodes failed ({type(reader.async_error).__name__}"
                f": {reader.async_error}), so SCAR reads it with get_nodes in a worker thread. "
                "Give the store a working async client to use its async path.",
                stacklevel=4,
            )
        if unscored and not self._warned_unscored:
            self._warned_unscored = True
            warnings.warn(
                f"{unscored} node(s) had no usable embedding (NaN, or a dimension other than the "
                "query's), so SCAR did not score them as neighbours; check that embed_model is "
                "the model the index was built with.",
                stacklevel=4,
            )


def _required(query_bundle: QueryBundle | None) -> QueryBundle:
    if query_bundle is None:
        raise ValueError(
            "SCARNodePostprocessor needs the query: pass query_str=... or query_bundle=... to "
            "postprocess_nodes (query engines pass it themselves)."
        )
    return query_bundle


def _first_warning(reason: str, store: object) -> bool:
    """Return whether ``store`` was not yet warned about for ``reason`` (then it counts as warned)."""
    key = (reason, id(store))
    known = _warned_stores.get(key)
    if known is not None and known() is store:
        return False
    _warned_stores[key] = weakref.ref(store, lambda _: _warned_stores.pop(key, None))
    return True


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
