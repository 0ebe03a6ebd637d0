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
from typing import Any, Literal

from llama_index.core import Settings, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr, ValidationError, model_validator
from llama_index.core.data_structs.data_structs import IndexDict
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle
from llama_index.core.storage.docstore import BaseDocumentStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from scar_core.cache import EmbeddingCache
from scar_core.driver import QueryDriver
from scar_core.errors import InvalidSettingsError
from scar_core.settings import DEFAULT_LAMBDA, BudgetSettings, Direction, PaperSettings
from scar_llamaindex.reads import NodeReads, StoreReader, links_of, reader_for

__all__ = ["SCARNodePostprocessor"]

_BUDGET_ONLY = ("keep", "continuity_bonus")
_PAPER_ONLY = ("gamma", "window", "direction")
#: (reason, id(store)) -> the store, so each store instance is warned about once per reason.
_warned_stores: dict[tuple[str, int], weakref.ref[Any]] = {}
_UNEXPANDED = {"scar_origin": "hit", "scar_expanded": False, "scar_embedded": 0}


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
    vectors). A hit keeps its score; a neighbour's score is its cosine to the query.

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

    Examples:
        ```python
        from llama_index.core import VectorStoreIndex
        from scar_llamaindex import SCARNodePostprocessor

        index = VectorStoreIndex.from_documents(documents)  # node parsers link the nodes
        scar = SCARNodePostprocessor.from_index(index)
        query_engine = index.as_query_engine(similarity_top_k=5, node_postprocessors=[scar])
        response = query_engine.query("How long is CCTV footage kept?")
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

    _default_cache: EmbeddingCache | None = PrivateAttr(default=None)
    _warned_unlinked: bool = PrivateAttr(default=False)
    _warned_unscored: bool = PrivateAttr(default=False)
    _reader: StoreReader | None = PrivateAttr(default=None)

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
        if reader_for(self.docstore, self.vector_store).store is None:
            held = "no vector store" if self.vector_store is None else "a vector store that "
            held += "" if self.vector_store is None else "keeps no text (stores_text=False)"
            raise InvalidSettingsError(
                f"SCARNodePostprocessor has no docstore and {held}, so it cannot read neighbour "
                "nodes; pass docstore=index.docstore and vector_store=index.vector_store, or "
                "build it with SCARNodePostprocessor.from_index(index)."
            )
        return self

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
        out = []
        for rank, given in enumerate(nodes[: self.top_n or len(nodes)]):
            trace = {**_UNEXPANDED, "scar_passage": rank, "scar_seed_id": given.node.node_id}
            out.append(NodeWithScore(node=_annotated(given.node, trace), score=given.score))
        return out

    def _start(
        self, nodes: list[NodeWithScore], query: list[float]
    ) -> tuple[QueryDriver, NodeReads]:
        stores = (self.docstore, self.vector_store, self.index_struct)
        if self._reader is None or any(map(operator.is_not, self._reader.stores, stores)):
            self._reader = reader_for(*stores)  # built again if a store was replaced
        reads = NodeReads(self._reader, [n.node for n in nodes], self._embedder, self._cache)
        hits = reads.chunks([n.node.node_id for n in nodes])
        return QueryDriver(query, hits, self._settings(self.top_n or len(nodes))), reads

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
