"""SCARNodePostprocessor: add a retrieved node's neighbours only when they continue its evidence."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle
from llama_index.core.settings import Settings
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from scar_core.assembly import trim_to_token_budget
from scar_core.budget import (
    DEFAULT_BUDGET,
    DEFAULT_CONTINUITY_BONUS,
    DEFAULT_SEEDS,
    BudgetSettings,
    validate_continuity_bonus,
)
from scar_core.errors import (
    EmbeddingError,
    InvalidSettingsError,
    InvalidTextError,
    NeighborFetchError,
    ScarError,
)
from scar_core.graph import NeighborGraph
from scar_core.policy import ExpansionResult
from scar_core.settings import (
    DEFAULT_GAMMA,
    DEFAULT_LAMBDA,
    DEFAULT_WINDOW,
    ScarSettings,
    validate_k,
    validate_window,
)
from scar_core.tokens import TokenCounter, tiktoken_counter
from scar_llamaindex._budget import PREFETCH_HOPS, BudgetRun
from scar_llamaindex._expansion import ExpansionRun
from scar_llamaindex._links import NodeLinks
from scar_llamaindex._output import Mode, expanded, records_of, unexpanded
from scar_llamaindex._vectors import (
    MemoryTextVectorCache,
    TextVectorCache,
    cache_model_key,
    missing_texts,
    spread,
)
from scar_llamaindex._window import WindowAnswers, merged, window_radius
from scar_llamaindex.sources import (
    FetchedNodes,
    FetchedWindow,
    NeighborSource,
    StoreNeighborSource,
    WindowNeighborSource,
)

if TYPE_CHECKING:
    from llama_index.core.indices.vector_store.base import VectorStoreIndex

__all__ = ["OnError", "SCARNodePostprocessor"]

logger = logging.getLogger(__name__)

OnError = Literal["raise", "return_seeds"]
DirectionSetting = Literal["both", "previous", "next"]

_ON_ERROR_VALUES: tuple[str, ...] = ("raise", "return_seeds")


class SCARNodePostprocessor(BaseNodePostprocessor):
    """Add retrieved nodes' neighbours when they continue the evidence (SCAR).

    For a node ``c`` and an adjacent node ``n`` of the same document, with
    ``b = 1 - cos(e_c, e_n)``, SCAR scores ``n`` by ``S = cos(e_q, e_n) - lambda_ * b``. Cosines
    come from the vectors, never from the retriever's scores, which may be distances. Two modes:

    * **Budget mode, the default** (``budget=10``): return ``budget`` nodes. Every incoming
      node is kept (no retrieved node is ever lost), and the free slots go to neighbours of the
      nodes already selected: a neighbour bids ``S + continuity_bonus`` and the highest bid
      takes each slot. A passage may grow as far as the budget lets it (``window=None``).
      Retrieve about ``k`` nodes (``similarity_top_k=3``) so that slots are left for
      neighbours; when ``budget`` or more nodes arrive, all are kept, none is added, and a
      warning is logged once.
    * **Plain mode, the paper's rule** (``budget=None``): every incoming node is kept and adds
      ``n`` when ``S > gamma * cos(e_q, e_c)``, up to ``window`` steps away (default 1).

    Setup:
        Install the LlamaIndex extra: ``pip install 'scar-retrieval[llamaindex]'``.

    Key init args:
        docstore: Where neighbour nodes are fetched first (``index.docstore``).
        vector_store: Where neighbours missing from the docstore, and stored vectors, are
            fetched (``index.vector_store``). Give it when nodes live only in a vector database;
            a ``PGVectorStore`` with no docstore nodes is read through
            :class:`~scar_llamaindex.PGVectorNodeSource` (one statement per query).
        budget: Nodes returned in budget mode (default 10); ``None`` selects plain mode.
        k: The number of retrieved nodes budget mode is sized for (default 3), ``<= budget``:
            set ``similarity_top_k`` to about ``k``. Every incoming node is kept, however many.
        continuity_bonus: Credit of a neighbour continuing a passage, in cosine units (default
            0.2, measured for all-MiniLM-L6-v2; ``scar calibrate`` estimates it for your model).
        lambda_, gamma, window, direction: The rule's settings (paper: 0.1, 0.8, 1, both);
            ``gamma`` applies in plain mode only. ``window=None`` means no limit but the budget
            in budget mode and the paper's 1 in plain mode.
        max_tokens: Token budget of the nodes' text (metadata not counted), counted with
            ``token_counter`` (tiktoken's cl100k_base by default).
        merge_passages: Return one node per contiguous passage instead of one per chunk.
        on_error: ``"raise"`` (default) or ``"return_seeds"`` when a store or the embed model
            fails.
        embed_model: Embeds the query when the retriever left ``QueryBundle.embedding`` empty
            (the async path does) and nodes whose vectors no store holds. Defaults to
            ``Settings.embed_model``; it must be the model the index was built with.

    Instantiate:
        .. code-block:: python

            from scar_llamaindex import SCARNodePostprocessor

            postprocessor = SCARNodePostprocessor.from_index(index)  # budget mode, 10 nodes
            # The paper's rule, exactly (lambda 0.1, gamma 0.8, window 1):
            paper = SCARNodePostprocessor.from_index(index, budget=None)
            # or, giving the stores yourself:
            postprocessor = SCARNodePostprocessor(docstore=index.docstore, budget=8, k=2)

    Use within a query engine:
        .. code-block:: python

            # Retrieve about k nodes: budget mode keeps them all and adds neighbours up to 10.
            engine = index.as_query_engine(similarity_top_k=3, node_postprocessors=[postprocessor])
            response = engine.query("How is the connection closed?")

    Output:
        Passages ordered by their best incoming node's rank; nodes within a passage in document
        order; no duplicates. Incoming nodes keep their scores; an added neighbour's score is
        its ``S``. Each returned node is a copy whose metadata holds the decision trace under
        ``scar_*`` keys (mode, origin, seed id, ``S``, threshold, boundary penalty), excluded
        from the LLM's and the embedder's view of the node. In budget mode a neighbour's
        threshold is the bid it beat, less the continuity bonus, so ``S > threshold`` holds as in
        plain mode.
    """

    budget: int | None = Field(
        default=DEFAULT_BUDGET,
        description=(
            "Budget mode (the default): the number of nodes returned, >= k. None selects "
            "plain mode (the paper's rule)."
        ),
    )
    k: int = Field(
        default=DEFAULT_SEEDS,
        description=(
            "Budget mode: the number of retrieved nodes the budget is sized for, <= budget; set "
            "similarity_top_k to about k. Every incoming node is kept, however many arrive, and "
            "the free slots go to neighbours. Unused in plain mode."
        ),
    )
    continuity_bonus: float = Field(
        default=DEFAULT_CONTINUITY_BONUS,
        description=(
            "Budget mode: added to a neighbour's S when it bids against an incoming node, in "
            "cosine units, >= 0 (0.2 for all-MiniLM-L6-v2; `scar calibrate` estimates it)."
        ),
    )
    lambda_: float = Field(
        default=DEFAULT_LAMBDA,
        description="Weight of the boundary penalty b = 1 - cos(e_c, e_n); >= 0 (0 disables it).",
    )
    gamma: float = Field(
        default=DEFAULT_GAMMA,
        description=(
            "Plain mode: relative threshold in (0, 1]; a neighbour needs S > gamma * cos(q, seed)."
        ),
    )
    window: int | None = Field(
        default=None,
        description=(
            "How many steps from an incoming node a neighbour may lie (integer >= 1). None: as "
            "far as the budget allows in budget mode, 1 (the paper's) in plain mode."
        ),
    )
    direction: DirectionSetting = Field(
        default="both", description="Which side to expand: 'both', 'previous' or 'next'."
    )
    max_tokens: int | None = Field(
        default=None,
        description=(
            "Token budget of the output's text (metadata not counted). Budget mode: a node that "
            "would overflow it is passed over. Plain mode: the weakest neighbours at passage "
            "ends are dropped until it fits. Seeds are never dropped."
        ),
    )
    merge_passages: bool = Field(
        default=False,
        description="Return one node per contiguous passage, with overlapping text kept once.",
    )
    on_error: OnError = Field(
        default="raise",
        description=(
            "When a store or the embed model fails: 'raise' (the cause chained) or "
            "'return_seeds' (the incoming nodes alone, marked scar_expanded=False)."
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
    _token_counter: TokenCounter | None = PrivateAttr(default=None)
    _warned_over_budget: bool = PrivateAttr(default=False)

    def __init__(
        self,
        docstore: BaseDocumentStore | None = None,
        vector_store: BasePydanticVectorStore | None = None,
        *,
        budget: int | None = DEFAULT_BUDGET,
        k: int = DEFAULT_SEEDS,
        continuity_bonus: float = DEFAULT_CONTINUITY_BONUS,
        lambda_: float = DEFAULT_LAMBDA,
        gamma: float = DEFAULT_GAMMA,
        window: int | None = None,
        direction: DirectionSetting = "both",
        max_tokens: int | None = None,
        token_counter: Callable[[str], int] | None = None,
        merge_passages: bool = False,
        on_error: OnError = "raise",
        previous_id_key: str | None = None,
        next_id_key: str | None = None,
        document_id_key: str | None = None,
        embed_model: BaseEmbedding | None = None,
        neighbor_source: NeighborSource | None = None,
        vector_cache: TextVectorCache | None = None,
    ) -> None:
        _validate_rule(budget, k, continuity_bonus, lambda_, gamma, window, direction)
        _validate_max_tokens(max_tokens, k if budget is not None else 1)
        _validate_choices(merge_passages, on_error, previous_id_key, next_id_key, document_id_key)
        source = _choose_source(docstore, vector_store, neighbor_source)
        if embed_model is not None and not isinstance(embed_model, BaseEmbedding):
            raise InvalidSettingsError(
                f"embed_model={embed_model!r} is not valid; it must be a LlamaIndex BaseEmbedding "
                "(for a scar_core embedder, wrap it in scar_llamaindex.ScarEmbedding)."
            )
        if token_counter is not None and not callable(token_counter):
            raise InvalidSettingsError(
                f"token_counter={token_counter!r} is not valid; it must be a function from a "
                "text to its number of tokens."
            )
        super().__init__(  # type: ignore[call-arg]  # pydantic fields declared above
            budget=budget,
            k=k,
            continuity_bonus=continuity_bonus,
            lambda_=lambda_,
            gamma=gamma,
            window=window,
            direction=direction,
            max_tokens=max_tokens,
            merge_passages=merge_passages,
            on_error=on_error,
            previous_id_key=previous_id_key,
            next_id_key=next_id_key,
            document_id_key=document_id_key,
        )
        self._source = source
        self._embed_model = embed_model
        self._vector_cache = vector_cache if vector_cache is not None else MemoryTextVectorCache()
        self._token_counter = token_counter
        if max_tokens is not None and token_counter is None:
            # Resolved now so that a missing tokenizer fails at construction, not mid-query.
            self._token_counter = tiktoken_counter()

    @classmethod
    def from_index(
        cls,
        index: VectorStoreIndex,
        *,
        budget: int | None = DEFAULT_BUDGET,
        k: int = DEFAULT_SEEDS,
        continuity_bonus: float = DEFAULT_CONTINUITY_BONUS,
        lambda_: float = DEFAULT_LAMBDA,
        gamma: float = DEFAULT_GAMMA,
        window: int | None = None,
        direction: DirectionSetting = "both",
        max_tokens: int | None = None,
        token_counter: Callable[[str], int] | None = None,
        merge_passages: bool = False,
        on_error: OnError = "raise",
        vector_cache: TextVectorCache | None = None,
    ) -> SCARNodePostprocessor:
        """Build a postprocessor over an index's docstore, vector store and embed model.

        Neighbours come from the docstore, then the vector store; vectors from the vector store,
        then the index's embed model (cached). An index that lives only in a LlamaIndex
        ``PGVectorStore`` (its docstore holds no node) is read from the table directly, through
        :class:`~scar_llamaindex.PGVectorNodeSource`.

        Args:
            index: The index whose query engine the postprocessor will serve.
            budget: Nodes returned (budget mode); ``None`` for plain mode, the paper's rule.
            k: The number of retrieved nodes budget mode is sized for, ``<= budget`` (set
                ``similarity_top_k`` to about ``k``); every incoming node is kept.
            continuity_bonus: Budget mode's credit for continuing a passage, ``>= 0``.
            lambda_: Boundary-penalty weight, ``>= 0``.
            gamma: Plain mode's relative threshold in ``(0, 1]``.
            window: Maximum steps from an incoming node, integer ``>= 1``, or ``None`` (no limit
                but the budget in budget mode; 1 in plain mode).
            direction: ``"both"``, ``"previous"`` or ``"next"``.
            max_tokens: Token budget of the output's text, or ``None``.
            token_counter: Counts tokens for ``max_tokens`` (tiktoken's cl100k_base by default).
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
            budget=budget,
            k=k,
            continuity_bonus=continuity_bonus,
            lambda_=lambda_,
            gamma=gamma,
            window=window,
            direction=direction,
            max_tokens=max_tokens,
            token_counter=token_counter,
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
    def mode(self) -> Mode:
        """``"budget"`` when ``budget`` is set, ``"plain"`` (the paper's rule) when it is None."""
        return "plain" if self.budget is None else "budget"

    @property
    def settings(self) -> ScarSettings:
        """The plain rule's settings, validated (a bad assignment raises here)."""
        return ScarSettings(
            lambda_=self.lambda_,
            gamma=self.gamma,
            window=DEFAULT_WINDOW if self.window is None else self.window,
            direction=self.direction,
        )

    def budget_settings(self, incoming: int) -> BudgetSettings:
        """The budget mode's settings for a call that receives ``incoming`` distinct nodes.

        Every incoming node is kept (no retrieved node is ever lost), so ``min_seeds`` is
        ``incoming`` and the budget is at least ``incoming``; the remaining slots go to neighbours,
        which compete with one another. Set ``similarity_top_k`` below the budget (about ``k``)
        to leave room for them.

        Raises:
            InvalidSettingsError: In plain mode (``budget=None``), or if a setting is invalid.
        """
        if self.budget is None:
            raise InvalidSettingsError(
                "budget=None selects plain mode, which has no budget settings; set budget= to a "
                "number of nodes."
            )
        _validate_rule(
            self.budget,
            self.k,
            self.continuity_bonus,
            self.lambda_,
            self.gamma,
            self.window,
            self.direction,
        )
        _validate_max_tokens(self.max_tokens, self.k)
        return BudgetSettings(
            max_chunks=max(int(self.budget), incoming),
            continuity_bonus=float(self.continuity_bonus),
            lambda_=float(self.lambda_),
            min_seeds=max(1, incoming),
            window=None if self.window is None else int(self.window),
            direction=self.direction,
            max_tokens=None if self.max_tokens is None else int(self.max_tokens),
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
        if self.budget is not None:
            return self._select_within_budget(nodes, bundle)
        run = self._start(nodes)
        try:
            query_vector = self._query_vector(bundle)
            self._fetch_all(run)
            run.add_vectors(self._embed_nodes(run.nodes_without_vectors()))
        except (NeighborFetchError, EmbeddingError) as error:
            return self._fall_back(list(run.seeds.values()), error)
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
        if self.budget is not None:
            return await self._aselect_within_budget(nodes, bundle)
        run = self._start(nodes)
        try:
            query_vector, _ = await self._aquery_vector_while_fetching(bundle, run)
            run.add_vectors(await self._aembed_nodes(run.nodes_without_vectors()))
        except (NeighborFetchError, EmbeddingError) as error:
            return self._fall_back(list(run.seeds.values()), error)
        return self._finish(run, query_vector)

    def _select_within_budget(
        self, nodes: list[NodeWithScore], bundle: QueryBundle
    ) -> list[NodeWithScore]:
        run = self._start_budget(nodes)
        try:
            query_vector = self._query_vector(bundle)
            answers = self._fetch_all(run)
            while True:
                run.add_vectors(self._embed_nodes(run.nodes_without_vectors()))
                missing = run.attempt(query_vector)
                if not missing:
                    break
                run.absorb_missing(missing, self._fetch_through(answers, missing, []))
        except (NeighborFetchError, EmbeddingError) as error:
            return self._fall_back(list(run.seeds.values()), error)
        return self._finish_budget(run)

    async def _aselect_within_budget(
        self, nodes: list[NodeWithScore], bundle: QueryBundle
    ) -> list[NodeWithScore]:
        run = self._start_budget(nodes)
        try:
            query_vector, answers = await self._aquery_vector_while_fetching(bundle, run)
            while True:
                run.add_vectors(await self._aembed_nodes(run.nodes_without_vectors()))
                missing = run.attempt(query_vector)
                if not missing:
                    break
                run.absorb_missing(missing, await self._afetch_through(answers, missing, []))
        except (NeighborFetchError, EmbeddingError) as error:
            return self._fall_back(list(run.seeds.values()), error)
        return self._finish_budget(run)

    # -- steps shared by both paths -----------------------------------------------------------

    def _links(self) -> NodeLinks:
        return NodeLinks(self.previous_id_key, self.next_id_key, self.document_id_key)

    def _check_choices(self) -> None:
        # Fields can be reassigned after construction; check them again (it costs microseconds).
        _validate_choices(
            self.merge_passages,
            self.on_error,
            self.previous_id_key,
            self.next_id_key,
            self.document_id_key,
        )

    def _start(self, nodes: Sequence[NodeWithScore]) -> ExpansionRun:
        self._check_choices()
        _validate_max_tokens(self.max_tokens, 1)
        return ExpansionRun(nodes, self.settings, self._links())

    def _start_budget(self, nodes: Sequence[NodeWithScore]) -> BudgetRun:
        self._check_choices()
        incoming = len({scored.node.node_id for scored in nodes})
        settings = self.budget_settings(incoming)
        if incoming >= int(self.budget or 0):
            self._report_over_budget(incoming, int(self.budget or 0))
        counter = self._resolve_token_counter() if settings.max_tokens is not None else None
        # A window source is asked, in one request, for every ring the selection can reach.
        hops = (
            window_radius(settings, incoming)
            if isinstance(self._source, WindowNeighborSource)
            else PREFETCH_HOPS
        )
        return BudgetRun(nodes, settings, self._links(), counter, prefetch_hops=hops)

    def _report_over_budget(self, incoming: int, budget: int) -> None:
        message = (
            "%d nodes arrived for a budget of %d: every incoming node is kept, so no slot is "
            "left for neighbours. Set similarity_top_k below the budget (about k) so that "
            "SCAR can add the neighbours that continue them."
        )
        if not self._warned_over_budget:
            self._warned_over_budget = True
            logger.warning(message, incoming, budget)
        else:
            logger.debug(message, incoming, budget)

    def _resolve_token_counter(self) -> TokenCounter:
        if self._token_counter is None:
            self._token_counter = tiktoken_counter()
        return self._token_counter

    def _finish(self, run: ExpansionRun, query_vector: npt.ArrayLike) -> list[NodeWithScore]:
        graph = run.graph()
        result = self._trimmed(run.decide(query_vector, graph), run, graph)
        return expanded(
            result, run.seeds, run.known, graph, run.links, self.merge_passages, "plain"
        )

    def _finish_budget(self, run: BudgetRun) -> list[NodeWithScore]:
        assert run.result is not None
        graph = run.walk.graph()
        for skipped in run.result.skipped:
            if skipped.reason == "invalid_vector":
                logger.warning(
                    "skipped neighbour %r of %r: its vector is unusable (%s)",
                    skipped.neighbor_id,
                    skipped.seed_id,
                    skipped.detail,
                )
        result = self._trimmed(run.result, run.walk, graph)
        return expanded(
            result, run.seeds, run.walk.known, graph, run.walk.links, self.merge_passages, "budget"
        )

    def _trimmed(
        self, result: ExpansionResult, run: ExpansionRun, graph: NeighborGraph
    ) -> ExpansionResult:
        """Apply ``max_tokens`` to the assembled passages (budget mode counted node by node).

        In budget mode the selection already fits, counted node by node; stitching overlapping
        nodes only shortens the text, so the check there is a safety net.
        """
        if self.max_tokens is None:
            return result
        selected = {chunk.chunk_id: run.known[chunk.chunk_id] for chunk in result.selected}
        records = records_of(selected, run.links)
        return trim_to_token_budget(
            result, records, int(self.max_tokens), self._resolve_token_counter(), graph
        )

    def _fall_back(self, seeds: list[NodeWithScore], error: ScarError) -> list[NodeWithScore]:
        if self.on_error == "raise":
            raise error
        logger.warning("SCAR returned the %d retrieved node(s) unexpanded: %s", len(seeds), error)
        return unexpanded(seeds, type(error).__name__, self.mode)

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
        self, bundle: QueryBundle, run: ExpansionRun | BudgetRun
    ) -> tuple[npt.ArrayLike, WindowAnswers | None]:
        """Embed the query and fetch the neighbours concurrently; they do not depend on each other.

        If the fetch fails, the query embedding is cancelled, so nothing runs on after the call.

        Returns:
            The query vector, and the window fetched up front (``None`` when there was none).
        """
        query_task = asyncio.ensure_future(self._aquery_vector(bundle))
        try:
            answers = await self._afetch_all(run)
        except BaseException:
            query_task.cancel()
            # The fetch error is the one to report; the query task's outcome is discarded.
            with contextlib.suppress(BaseException):
                await query_task
            raise
        return await query_task, answers

    def _fetch(self, node_ids: list[str], vector_ids: list[str]) -> FetchedNodes:
        try:
            return self._source.fetch(node_ids, vector_ids)
        except ScarError:
            raise
        except Exception as error:
            raise self._fetch_failed(node_ids, vector_ids, error) from error

    async def _afetch(self, node_ids: list[str], vector_ids: list[str]) -> FetchedNodes:
        try:
            return await self._source.afetch(node_ids, vector_ids)
        except ScarError:
            raise
        except Exception as error:
            raise self._fetch_failed(node_ids, vector_ids, error) from error

    def _window_plan(
        self, run: ExpansionRun | BudgetRun
    ) -> tuple[WindowNeighborSource, list[str], list[str], int] | None:
        """The window to fetch in one request, or ``None`` when rings are fetched one by one.

        A one-ring walk is one request either way, and the plain fetch is the simpler query.
        """
        source = self._source
        if not isinstance(source, WindowNeighborSource):
            return None
        start_ids, vector_ids, radius = run.window_request()
        if radius < 2:
            return None
        return source, start_ids, vector_ids, radius

    def _fetch_all(self, run: ExpansionRun | BudgetRun) -> WindowAnswers | None:
        """Walk the prefetch rings; from one window request when the source offers it.

        Returns:
            The window, to answer later fetches from; ``None`` when none was fetched.
        """
        answers = None
        plan = self._window_plan(run)
        if plan is not None:
            source, start_ids, vector_ids, radius = plan
            try:
                window = source.fetch_window(start_ids, vector_ids, radius, self.direction)
            except ScarError:
                raise
            except Exception as error:
                raise self._window_failed(start_ids, radius, error) from error
            answers = WindowAnswers(window, vector_ids)
        while (request := run.next_request()) is not None:
            node_ids, vector_ids = request
            run.absorb(node_ids, self._fetch_through(answers, node_ids, vector_ids))
        return answers

    async def _afetch_all(self, run: ExpansionRun | BudgetRun) -> WindowAnswers | None:
        """Async form of :meth:`_fetch_all`."""
        answers = None
        plan = self._window_plan(run)
        if plan is not None:
            source, start_ids, vector_ids, radius = plan
            try:
                window: FetchedWindow = await source.afetch_window(
                    start_ids, vector_ids, radius, self.direction
                )
            except ScarError:
                raise
            except Exception as error:
                raise self._window_failed(start_ids, radius, error) from error
            answers = WindowAnswers(window, vector_ids)
        while (request := run.next_request()) is not None:
            node_ids, vector_ids = request
            run.absorb(node_ids, await self._afetch_through(answers, node_ids, vector_ids))
        return answers

    def _fetch_through(
        self, answers: WindowAnswers | None, node_ids: list[str], vector_ids: list[str]
    ) -> FetchedNodes:
        """Answer from the window what it holds; fetch the rest from the source."""
        if answers is None:
            return self._fetch(node_ids, vector_ids)
        answered, node_rest, vector_rest = answers.split(node_ids, vector_ids)
        if not node_rest and not vector_rest:
            return answered
        return merged(answered, self._fetch(node_rest, vector_rest))

    async def _afetch_through(
        self, answers: WindowAnswers | None, node_ids: list[str], vector_ids: list[str]
    ) -> FetchedNodes:
        """Async form of :meth:`_fetch_through`."""
        if answers is None:
            return await self._afetch(node_ids, vector_ids)
        answered, node_rest, vector_rest = answers.split(node_ids, vector_ids)
        if not node_rest and not vector_rest:
            return answered
        return merged(answered, await self._afetch(node_rest, vector_rest))

    def _window_failed(
        self, start_ids: list[str], radius: int, error: Exception
    ) -> NeighborFetchError:
        # The cause's message is chained, not copied: it may hold a connection string.
        return NeighborFetchError(
            f"fetching the nodes within {radius} step(s) of {len(start_ids)} node(s) from "
            f"{self._source!r} failed ({type(error).__name__})."
        )

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


def _validate_rule(
    budget: int | None,
    k: int,
    continuity_bonus: float,
    lambda_: float,
    gamma: float,
    window: int | None,
    direction: DirectionSetting,
) -> None:
    """Check the rule's settings in both modes, naming a bad value and its valid range.

    Values may be assigned after construction without pydantic's checks, so each is checked at
    run time.
    """
    if window is not None:
        validate_window(window)
    ScarSettings(
        lambda_=lambda_,
        gamma=gamma,
        window=DEFAULT_WINDOW if window is None else window,
        direction=direction,
    )
    validate_k(k, "k")
    validate_continuity_bonus(continuity_bonus)
    if budget is None:
        return
    validate_k(budget, "budget")
    if budget < k:
        raise InvalidSettingsError(
            f"budget={budget} is smaller than k={k}: a budget smaller than the "
            "number of seeds cannot keep them all. Raise budget, lower k, or pass "
            "budget=None for plain SCAR."
        )


def _validate_max_tokens(max_tokens: int | None, seeds: int) -> None:
    if max_tokens is None:
        return
    validate_k(max_tokens, "max_tokens")
    if max_tokens < seeds:
        raise InvalidSettingsError(
            f"max_tokens={max_tokens} is smaller than k={seeds}; the budget must leave "
            "at least one token per seed (seeds are never dropped)."
        )


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
    from scar_llamaindex.pgvector import PGVectorNodeSource, is_pgvector_store

    # The store type first: counting a filled docstore's nodes is work any other setup skips.
    if is_pgvector_store(vector_store) and _holds_no_nodes(docstore):
        # The whole index lives in the table: read it directly (binary vectors, and every
        # ring of neighbours in one recursive statement) instead of through get_nodes.
        return PGVectorNodeSource(vector_store)
    return StoreNeighborSource(docstore=docstore, vector_store=vector_store)


def _holds_no_nodes(docstore: BaseDocumentStore | None) -> bool:
    """Whether a docstore is absent or an in-memory one with no node (as on pgvector)."""
    if docstore is None:
        return True
    return isinstance(docstore, SimpleDocumentStore) and not docstore.get_all_document_hashes()


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
    texts = list(bundle.embedding_strs) or [bundle.query_str]
    if not any(isinstance(text, str) and text.strip() for text in texts):
        raise InvalidTextError(
            f"the query text {bundle.query_str!r} is empty and the query bundle carries no "
            "embedding; an empty query has no meaningful embedding. Pass the question, or a "
            "QueryBundle with its embedding."
        )
    return texts


def _embedding_failed(model: BaseEmbedding, what: str, error: Exception) -> EmbeddingError:
    return EmbeddingError(
        f"embedding {what} with {type(model).__name__} failed ({type(error).__name__})."
    )
