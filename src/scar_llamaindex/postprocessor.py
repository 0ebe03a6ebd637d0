"""SCARNodePostprocessor: add a retrieved node's neighbours only when they continue its evidence."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle
from llama_index.core.settings import Settings
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from scar_core.errors import (
    EmbeddingError,
    InvalidSettingsError,
    InvalidTextError,
    NeighborFetchError,
    ScarError,
)
from scar_core.settings import DEFAULT_GAMMA, DEFAULT_LAMBDA, DEFAULT_WINDOW, ScarSettings
from scar_llamaindex._expansion import ExpansionRun
from scar_llamaindex._links import NodeLinks
from scar_llamaindex._output import expanded, unexpanded
from scar_llamaindex._vectors import (
    MemoryTextVectorCache,
    TextVectorCache,
    cache_model_key,
    missing_texts,
    spread,
)
from scar_llamaindex.sources import FetchedNodes, NeighborSource, StoreNeighborSource

if TYPE_CHECKING:
    from llama_index.core.indices.vector_store.base import VectorStoreIndex

__all__ = ["OnError", "SCARNodePostprocessor"]

logger = logging.getLogger(__name__)

OnError = Literal["raise", "return_seeds"]
DirectionSetting = Literal["both", "previous", "next"]

_ON_ERROR_VALUES: tuple[str, ...] = ("raise", "return_seeds")


class SCARNodePostprocessor(BaseNodePostprocessor):
    """Add each retrieved node's neighbours when they continue its evidence (SCAR).

    For a retrieved node ``c`` and an adjacent node ``n`` of the same document, with
    ``b = 1 - cos(e_c, e_n)`` and ``S = cos(e_q, e_n) - lambda_ * b``, ``n`` is added when
    ``S > gamma * cos(e_q, e_c)``. Cosines come from the vectors, never from the retriever's
    scores, which may be distances. Retrieved nodes are never dropped.

    Setup:
        Install the LlamaIndex extra: ``pip install 'scar-retrieval[llamaindex]'``.

    Key init args:
        docstore: Where neighbour nodes are fetched first (``index.docstore``).
        vector_store: Where neighbours missing from the docstore, and stored vectors, are
            fetched (``index.vector_store``). Give it when nodes live only in a vector database.
        lambda_, gamma, window, direction: The SCAR rule's settings (paper: 0.1, 0.8, 1, both).
        merge_passages: Return one node per contiguous passage instead of one per chunk.
        on_error: ``"raise"`` (default) or ``"return_seeds"`` when a store or the embed model
            fails.
        embed_model: Embeds the query when the retriever left ``QueryBundle.embedding`` empty
            (the async path does) and nodes whose vectors no store holds. Defaults to
            ``Settings.embed_model``; it must be the model the index was built with.

    Instantiate:
        .. code-block:: python

            from scar_llamaindex import SCARNodePostprocessor

            postprocessor = SCARNodePostprocessor.from_index(index, lambda_=0.1, gamma=0.8)
            # or, giving the stores yourself:
            postprocessor = SCARNodePostprocessor(
                docstore=index.docstore, lambda_=0.1, gamma=0.8, window=1
            )

    Use within a query engine:
        .. code-block:: python

            engine = index.as_query_engine(similarity_top_k=5, node_postprocessors=[postprocessor])
            response = engine.query("How is the connection closed?")

    Output:
        Passages ordered by their best retrieved node's rank; nodes within a passage in document
        order; no duplicates. Retrieved nodes keep their scores; an added neighbour's score is
        its ``S``. Each returned node is a copy whose metadata holds the decision trace under
        ``scar_*`` keys (origin, seed id, ``S``, threshold, boundary penalty), excluded from the
        LLM's and the embedder's view of the node.
    """

    lambda_: float = Field(
        default=DEFAULT_LAMBDA,
        description="Weight of the boundary penalty b = 1 - cos(e_c, e_n); >= 0 (0 disables it).",
    )
    gamma: float = Field(
        default=DEFAULT_GAMMA,
        description="Relative threshold in (0, 1]: a neighbour needs S > gamma * cos(q, seed).",
    )
    window: int = Field(
        default=DEFAULT_WINDOW,
        description="How many steps from a retrieved node a neighbour may lie (integer >= 1).",
    )
    direction: DirectionSetting = Field(
        default="both", description="Which side to expand: 'both', 'previous' or 'next'."
    )
    merge_passages: bool = Field(
        default=False,
        description="Return one node per contiguous passage, with overlapping text kept once.",
    )
    on_error: OnError = Field(
        default="raise",
        description=(
            "When a store or the embed model fails: 'raise' (the cause chained) or "
            "'return_seeds' (the retrieved nodes alone, marked scar_expanded=False)."
        ),
    )
    previous_id_key: str | None = Field(
        default=None,
        description="Metadata key holding the previous node's id, for nodes ingested elsewhere.",
    )
    next_id_key: str | None = Field(
        default=None,
        description="Metadata key holding the next node's id, for nodes ingested elsewhere.",
    )
    document_id_key: str | None = Field(
        default=None,
        description="Metadata key holding the document id (default: the node's ref_doc_id).",
    )

    _source: NeighborSource = PrivateAttr()
    _embed_model: BaseEmbedding | None = PrivateAttr(default=None)
    _vector_cache: TextVectorCache = PrivateAttr()

    def __init__(
        self,
        docstore: BaseDocumentStore | None = None,
        vector_store: BasePydanticVectorStore | None = None,
        *,
        lambda_: float = DEFAULT_LAMBDA,
        gamma: float = DEFAULT_GAMMA,
        window: int = DEFAULT_WINDOW,
        direction: DirectionSetting = "both",
        merge_passages: bool = False,
        on_error: OnError = "raise",
        previous_id_key: str | None = None,
        next_id_key: str | None = None,
        document_id_key: str | None = None,
        embed_model: BaseEmbedding | None = None,
        neighbor_source: NeighborSource | None = None,
        vector_cache: TextVectorCache | None = None,
    ) -> None:
        ScarSettings(lambda_=lambda_, gamma=gamma, window=window, direction=direction)
        _validate_choices(merge_passages, on_error, previous_id_key, next_id_key, document_id_key)
        source = _choose_source(docstore, vector_store, neighbor_source)
        if embed_model is not None and not isinstance(embed_model, BaseEmbedding):
            raise InvalidSettingsError(
                f"embed_model={embed_model!r} is not valid; it must be a LlamaIndex BaseEmbedding "
                "(for a scar_core embedder, wrap it in scar_llamaindex.ScarEmbedding)."
            )
        super().__init__(  # type: ignore[call-arg]  # pydantic fields declared above
            lambda_=lambda_,
            gamma=gamma,
            window=window,
            direction=direction,
            merge_passages=merge_passages,
            on_error=on_error,
            previous_id_key=previous_id_key,
            next_id_key=next_id_key,
            document_id_key=document_id_key,
        )
        self._source = source
        self._embed_model = embed_model
        self._vector_cache = vector_cache if vector_cache is not None else MemoryTextVectorCache()

    @classmethod
    def from_index(
        cls,
        index: VectorStoreIndex,
        *,
        lambda_: float = DEFAULT_LAMBDA,
        gamma: float = DEFAULT_GAMMA,
        window: int = DEFAULT_WINDOW,
        direction: DirectionSetting = "both",
        merge_passages: bool = False,
        on_error: OnError = "raise",
        vector_cache: TextVectorCache | None = None,
    ) -> SCARNodePostprocessor:
        """Build a postprocessor over an index's docstore, vector store and embed model.

        Neighbours come from the docstore, then the vector store; vectors from the vector store,
        then the index's embed model (cached).

        Args:
            index: The index whose query engine the postprocessor will serve.
            lambda_: Boundary-penalty weight, ``>= 0``.
            gamma: Relative threshold in ``(0, 1]``.
            window: Maximum steps from a retrieved node, integer ``>= 1``.
            direction: ``"both"``, ``"previous"`` or ``"next"``.
            merge_passages: Return one node per contiguous passage.
            on_error: ``"raise"`` or ``"return_seeds"``.
            vector_cache: A persistent cache for embedded nodes (e.g.
                :class:`scar_core.cache.VectorCache`); in memory when omitted.

        Returns:
            The postprocessor.
        """
        return cls(
            docstore=index.docstore,
            vector_store=index.vector_store,
            lambda_=lambda_,
            gamma=gamma,
            window=window,
            direction=direction,
            merge_passages=merge_passages,
            on_error=on_error,
            embed_model=index._embed_model,
            vector_cache=vector_cache,
        )

    @classmethod
    def class_name(cls) -> str:
        """The class's name in LlamaIndex serialisation."""
        return "SCARNodePostprocessor"

    @property
    def settings(self) -> ScarSettings:
        """The SCAR rule's settings, validated (a bad assignment raises here)."""
        return ScarSettings(
            lambda_=self.lambda_, gamma=self.gamma, window=self.window, direction=self.direction
        )

    @property
    def neighbor_source(self) -> NeighborSource:
        """Where neighbour nodes and stored vectors come from."""
        return self._source

    @property
    def vector_cache(self) -> TextVectorCache:
        """The cache of node vectors computed by the embed model."""
        return self._vector_cache

    # -- the two entry points -----------------------------------------------------------------

    def _postprocess_nodes(
        self,
        nodes: list[NodeWithScore],
        query_bundle: QueryBundle | None = None,
    ) -> list[NodeWithScore]:
        """Expand the retrieved nodes (sync)."""
        if not nodes:
            return []
        bundle = _require_query(query_bundle)
        run = self._start(nodes)
        try:
            query_vector = self._query_vector(bundle)
            while (request := run.next_request()) is not None:
                node_ids, vector_ids = request
                run.absorb(node_ids, self._fetch(node_ids, vector_ids))
            run.add_vectors(self._embed_nodes(run.nodes_without_vectors()))
        except (NeighborFetchError, EmbeddingError) as error:
            return self._fall_back(run, error)
        return self._finish(run, query_vector)

    async def _apostprocess_nodes(
        self,
        nodes: list[NodeWithScore],
        query_bundle: QueryBundle | None = None,
    ) -> list[NodeWithScore]:
        """Expand the retrieved nodes (async: async stores and embeddings, no worker thread)."""
        if not nodes:
            return []
        bundle = _require_query(query_bundle)
        run = self._start(nodes)
        try:
            query_vector = await self._aquery_vector_while_fetching(bundle, run)
            run.add_vectors(await self._aembed_nodes(run.nodes_without_vectors()))
        except (NeighborFetchError, EmbeddingError) as error:
            return self._fall_back(run, error)
        return self._finish(run, query_vector)

    # -- steps shared by both paths -----------------------------------------------------------

    def _links(self) -> NodeLinks:
        return NodeLinks(self.previous_id_key, self.next_id_key, self.document_id_key)

    def _start(self, nodes: Sequence[NodeWithScore]) -> ExpansionRun:
        # Fields can be reassigned after construction; check them again (it costs microseconds).
        _validate_choices(
            self.merge_passages,
            self.on_error,
            self.previous_id_key,
            self.next_id_key,
            self.document_id_key,
        )
        return ExpansionRun(nodes, self.settings, self._links())

    def _finish(self, run: ExpansionRun, query_vector: npt.ArrayLike) -> list[NodeWithScore]:
        graph = run.graph()
        result = run.decide(query_vector, graph)
        return expanded(result, run.seeds, run.known, graph, run.links, self.merge_passages)

    def _fall_back(self, run: ExpansionRun, error: ScarError) -> list[NodeWithScore]:
        if self.on_error == "raise":
            raise error
        logger.warning(
            "SCAR returned the %d retrieved node(s) unexpanded: %s", len(run.seeds), error
        )
        return unexpanded(list(run.seeds.values()), type(error).__name__)

    def _resolve_embed_model(self) -> BaseEmbedding:
        if self._embed_model is not None:
            return self._embed_model
        try:
            return Settings.embed_model
        except Exception as error:
            raise EmbeddingError(
                "SCAR needs an embed model (for the query or for nodes whose vectors no store "
                f"holds) and Settings.embed_model could not be resolved ({type(error).__name__}). "
                "Pass embed_model= (the model the index was built with) or use "
                "SCARNodePostprocessor.from_index(index)."
            ) from error

    def _query_vector(self, bundle: QueryBundle) -> npt.ArrayLike:
        if _has_embedding(bundle):
            return bundle.embedding  # type: ignore[return-value]
        model = self._resolve_embed_model()
        try:
            return model.get_agg_embedding_from_queries(_query_texts(bundle))
        except ScarError:
            raise
        except Exception as error:
            raise _embedding_failed(model, "the query", error) from error

    async def _aquery_vector(self, bundle: QueryBundle) -> npt.ArrayLike:
        if _has_embedding(bundle):
            return bundle.embedding  # type: ignore[return-value]
        model = self._resolve_embed_model()
        try:
            return await model.aget_agg_embedding_from_queries(_query_texts(bundle))
        except ScarError:
            raise
        except Exception as error:
            raise _embedding_failed(model, "the query", error) from error

    async def _aquery_vector_while_fetching(
        self, bundle: QueryBundle, run: ExpansionRun
    ) -> npt.ArrayLike:
        """Embed the query and fetch the neighbours concurrently; they do not depend on each other.

        If the fetch fails, the query embedding is cancelled, so nothing runs on after the call.
        """
        query_task = asyncio.ensure_future(self._aquery_vector(bundle))
        try:
            await self._afetch_all(run)
        except BaseException:
            query_task.cancel()
            # The fetch error is the one to report; the query task's outcome is discarded.
            with contextlib.suppress(BaseException):
                await query_task
            raise
        return await query_task

    def _fetch(self, node_ids: list[str], vector_ids: list[str]) -> FetchedNodes:
        try:
            return self._source.fetch(node_ids, vector_ids)
        except ScarError:
            raise
        except Exception as error:
            raise self._fetch_failed(node_ids, vector_ids, error) from error

    async def _afetch_all(self, run: ExpansionRun) -> None:
        while (request := run.next_request()) is not None:
            node_ids, vector_ids = request
            try:
                fetched = await self._source.afetch(node_ids, vector_ids)
            except ScarError:
                raise
            except Exception as error:
                raise self._fetch_failed(node_ids, vector_ids, error) from error
            run.absorb(node_ids, fetched)

    def _fetch_failed(
        self, node_ids: list[str], vector_ids: list[str], error: Exception
    ) -> NeighborFetchError:
        # The cause's message is chained, not copied: it may hold a connection string.
        return NeighborFetchError(
            f"fetching {len(node_ids)} neighbour node(s) and {len(vector_ids)} stored vector(s) "
            f"from {self._source!r} failed ({type(error).__name__})."
        )

    def _embed_nodes(self, nodes: list[BaseNode]) -> dict[str, npt.ArrayLike]:
        if not nodes:
            return {}
        model = self._resolve_embed_model()
        key = cache_model_key(model)
        hits, misses = missing_texts(self._vector_cache, key, nodes)
        if not misses:
            return hits
        logger.debug("embedding %d node(s) whose vectors no store holds", len(misses))
        texts = list(misses)
        try:
            vectors = model.get_text_embedding_batch(texts)
        except ScarError:
            raise
        except Exception as error:
            raise _embedding_failed(model, f"{len(texts)} node(s)", error) from error
        return {**hits, **self._remember(model, key, texts, vectors, misses)}

    async def _aembed_nodes(self, nodes: list[BaseNode]) -> dict[str, npt.ArrayLike]:
        if not nodes:
            return {}
        model = self._resolve_embed_model()
        key = cache_model_key(model)
        hits, misses = missing_texts(self._vector_cache, key, nodes)
        if not misses:
            return hits
        logger.debug("embedding %d node(s) whose vectors no store holds", len(misses))
        texts = list(misses)
        try:
            vectors = await model.aget_text_embedding_batch(texts)
        except ScarError:
            raise
        except Exception as error:
            raise _embedding_failed(model, f"{len(texts)} node(s)", error) from error
        return {**hits, **self._remember(model, key, texts, vectors, misses)}

    def _remember(
        self,
        model: BaseEmbedding,
        key: str,
        texts: list[str],
        vectors: Sequence[Sequence[float]],
        misses: dict[str, list[str]],
    ) -> dict[str, npt.ArrayLike]:
        if len(vectors) != len(texts):
            raise EmbeddingError(
                f"{type(model).__name__} returned {len(vectors)} vector(s) for {len(texts)} "
                "text(s); expected one per text."
            )
        # Caches keep float32; use float32 now too, so a cache hit later gives identical results.
        matrix = np.asarray(vectors, dtype=np.float32)
        self._vector_cache.put_many(key, texts, matrix)
        return spread(misses, matrix)


# -- helpers ----------------------------------------------------------------------------------


def _validate_choices(
    merge_passages: object,
    on_error: object,
    previous_id_key: object,
    next_id_key: object,
    document_id_key: object,
) -> None:
    if not isinstance(merge_passages, bool):
        raise InvalidSettingsError(
            f"merge_passages={merge_passages!r} is not valid; it must be True or False."
        )
    if on_error not in _ON_ERROR_VALUES:
        raise InvalidSettingsError(
            f"on_error={on_error!r} is not valid; use 'raise' (default) or 'return_seeds'."
        )
    for name, key in (
        ("previous_id_key", previous_id_key),
        ("next_id_key", next_id_key),
        ("document_id_key", document_id_key),
    ):
        if key is not None and (not isinstance(key, str) or not key):
            raise InvalidSettingsError(
                f"{name}={key!r} is not valid; it must be a non-empty metadata key or None."
            )


def _choose_source(
    docstore: BaseDocumentStore | None,
    vector_store: BasePydanticVectorStore | None,
    neighbor_source: NeighborSource | None,
) -> NeighborSource:
    if neighbor_source is not None:
        if docstore is not None or vector_store is not None:
            raise InvalidSettingsError(
                "pass either neighbor_source or docstore/vector_store, not both: a custom "
                "neighbor_source replaces the stores."
            )
        if not isinstance(neighbor_source, NeighborSource):
            raise InvalidSettingsError(
                f"neighbor_source={neighbor_source!r} is not valid; it must implement "
                "fetch(node_ids, vector_ids) and afetch(node_ids, vector_ids)."
            )
        return neighbor_source
    if docstore is None and vector_store is None:
        raise InvalidSettingsError(
            "SCARNodePostprocessor needs somewhere to fetch neighbours from: pass "
            "docstore=index.docstore, vector_store=index.vector_store (or both), or use "
            "SCARNodePostprocessor.from_index(index)."
        )
    if docstore is not None and not isinstance(docstore, BaseDocumentStore):
        raise InvalidSettingsError(
            f"docstore={docstore!r} is not valid; it must be a LlamaIndex BaseDocumentStore."
        )
    if vector_store is not None and not isinstance(vector_store, BasePydanticVectorStore):
        raise InvalidSettingsError(
            f"vector_store={vector_store!r} is not valid; it must be a LlamaIndex "
            "BasePydanticVectorStore."
        )
    return StoreNeighborSource(docstore=docstore, vector_store=vector_store)


def _require_query(query_bundle: QueryBundle | None) -> QueryBundle:
    if query_bundle is None:
        raise InvalidTextError(
            "SCARNodePostprocessor needs the query to decide which neighbours continue the "
            "evidence; pass query_bundle= or query_str= to postprocess_nodes."
        )
    return query_bundle


def _has_embedding(bundle: QueryBundle) -> bool:
    return bundle.embedding is not None and len(bundle.embedding) > 0


def _query_texts(bundle: QueryBundle) -> list[str]:
    return list(bundle.embedding_strs) or [bundle.query_str]


def _embedding_failed(model: BaseEmbedding, what: str, error: Exception) -> EmbeddingError:
    return EmbeddingError(
        f"embedding {what} with {type(model).__name__} failed ({type(error).__name__})."
    )
