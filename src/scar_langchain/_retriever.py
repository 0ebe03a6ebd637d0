"""``SCARRetriever``: a LangChain retriever that adds a seed's neighbours only when they continue it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever, LangSmithRetrieverParams
from langchain_core.stores import BaseStore
from langchain_core.vectorstores import VectorStore
from pydantic import Field, PrivateAttr

from scar_core.assembly import ChunkRecord, Passage, assemble_passages, trim_to_token_budget
from scar_core.budget import (
    DEFAULT_BUDGET,
    DEFAULT_CONTINUITY_BONUS,
    DEFAULT_SEEDS,
    BudgetSettings,
    validate_continuity_bonus,
)
from scar_core.embedders.base import check_query_text
from scar_core.errors import (
    EmbeddingError,
    InvalidSettingsError,
    NeighborFetchError,
    ScarError,
)
from scar_core.graph import NeighborGraph
from scar_core.policy import ExpansionResult, ScarPolicy
from scar_core.settings import (
    DEFAULT_GAMMA,
    DEFAULT_LAMBDA,
    DEFAULT_WINDOW,
    Direction,
    ScarSettings,
    validate_k,
    validate_window,
)
from scar_core.tokens import TokenCounter, tiktoken_counter
from scar_langchain._budget import (
    DEEP_PREFETCH_HOPS,
    EMBEDDED_PREFETCH_HOPS,
    PREFETCH_HOPS,
    BudgetRun,
    PoolTokenCounts,
)
from scar_langchain._links import DEFAULT_KEYS, ChunkMetadataKeys
from scar_langchain._metadata import chunk_record, decision_record
from scar_langchain._neighbors import (
    DocstoreNeighbors,
    FetchedChunks,
    NeighborSource,
    SearchHits,
    VectorSearchSource,
    VectorStoreNeighbors,
)
from scar_langchain._pool import QueryPool, seeds_for_passages
from scar_langchain._vectors import (
    EmbeddingVectors,
    FallbackVectors,
    NeighborVectorSource,
    computes_vectors,
    default_vector_source,
)

__all__ = ["SCARRetriever"]

logger = logging.getLogger(__name__)

FloatVector = npt.NDArray[np.float64]
OnError = Literal["raise", "return_seeds"]
Mode = Literal["budget", "plain"]

_ON_ERROR: tuple[str, ...] = ("raise", "return_seeds")
#: Plain mode's first search asks for this many hits per passage wanted (``fetch_k`` = 3k) and
#: expands only the best seeds needed. Seeds merge into fewer passages when hits are adjacent:
#: with 2k hits, 200 queries on the end-to-end benchmark's 10k x 1536 corpus averaged 1.58
#: searches each (a one-off count, in memory), and a further search costs as much as the first.
PLAIN_POOL_PER_SEED = 3
#: Validated settings combinations a retriever keeps (each call's ``k``/``budget`` can differ).
_REQUESTS_KEPT = 64


class SCARRetriever(BaseRetriever):
    r"""Semantic Continuity-Aware Retrieval: search hits plus the neighbours that continue them.

    SCAR scores a chunk ``n`` adjacent to a selected chunk ``c`` of the same document by
    ``S = cos(q, n) - lambda_ * (1 - cos(c, n))``: relevant to the query, and reading as one text
    with ``c``. Cosines come from the vectors, never from the store's scores. Two modes:

    * **Budget mode, the default** (``budget=10``): return ``budget`` chunks. The ``k`` best
      search hits (the seeds) are always kept; each further slot goes to the highest bid, where
      a further search hit ``x`` bids ``cos(q, x)`` and a neighbour of an already selected chunk
      bids ``S + continuity_bonus``. A passage may grow as far as the budget lets it
      (``window=None``). On the project's dev sets (all-MiniLM-L6-v2, 500-character chunks,
      fragmented queries) this recalled 2 to 13 points more than plain top-B at B = 7, 10 and
      12 chunks. The number of passages follows from the budget; ``k`` does not set it here.
    * **Plain mode, the paper's rule** (``budget=None``): add ``n`` when
      ``S > gamma * cos(q, c)``, up to ``window`` steps from a seed (default 1), and return
      ``k`` passages.

    Either way the selected chunks come back as passages: contiguous runs of one document,
    stitched in document order with chunk overlap removed, ordered by their best seed. Seeds are
    never dropped. The decisions are made by :mod:`scar_core`; this class fetches the chunks and
    their vectors and shapes the output for LangChain.

    Setup:
        Install the LangChain extra, split your documents, and link the chunks before storing
        them, so each one knows its neighbours:

        .. code-block:: bash

            pip install "scar-retrieval[langchain]"

        .. code-block:: python

            from langchain_core.vectorstores import InMemoryVectorStore
            from langchain_text_splitters import RecursiveCharacterTextSplitter
            from scar_langchain import ScarEmbeddings, link_chunks

            splitter = RecursiveCharacterTextSplitter(chunk_size=500, add_start_index=True)
            chunks = link_chunks(splitter.split_documents(docs))
            vectorstore = InMemoryVectorStore(ScarEmbeddings())  # bundled MiniLM; any Embeddings
            vectorstore.add_documents(chunks, ids=[chunk.id for chunk in chunks])

    Key init args — where chunks come from:
        vectorstore: VectorStore
            The store to search; neighbours are fetched with its ``get_by_ids``. A
            langchain-postgres ``PGVectorStore``'s table is read directly instead (vectors in
            binary, one statement per batch) on a sync pool of SCAR's own opened with the
            store's connection settings; an async call runs the whole query in one thread of
            the event loop's default executor (``scar_langchain.pgvector.default_store_chunks``).
        base_retriever: BaseRetriever
            Any retriever, instead of ``vectorstore``; needs ``docstore`` and ``embeddings``.
        docstore: BaseStore[str, Document]
            Holds each chunk under its id, for use with ``base_retriever``.
        embeddings: Embeddings
            Embeds the query (and chunks whose vectors the store does not hold); defaults to
            the store's own. Wrap it in ``CacheBackedEmbeddings`` so each chunk is embedded once.
        search_source: VectorSearchSource
            On pgvector, ``PGVectorChunks.from_store(store)``: the search then returns the hits'
            vectors (binary, exact) and every neighbour batch is one statement. Same results as
            the store's own search path, with fewer round trips.

    Key init args — budget mode (the default):
        budget: int | None
            Chunks to return (default 10); ``None`` selects plain mode.
        k: int
            Search hits always kept (default 3); at most ``budget``.
        continuity_bonus: float
            Credit, in cosine units, of a neighbour continuing a passage (default 0.2, measured
            for MiniLM; ``scar calibrate`` estimates it for your model and corpus).
        fetch_k: int | None
            Search hits that compete for the slots (default ``budget``).
        window: int | None
            Furthest a passage may grow from its seed (default ``None``: as far as the budget).

    Key init args — plain mode (``budget=None``):
        k: int
            Passages to return (default 3).
        fetch_k: int | None
            Hits of the first search (default ``3 * k``); only the best ones needed for ``k``
            passages are expanded, and a second search runs only when all merge into fewer.
        gamma: float
            Relative threshold in ``(0, 1]`` (paper: 0.8; lower expands more).
        window: int | None
            Steps from a seed to consider (``None`` means the paper's 1; 2 for its ±2 variant).

    Key init args — both modes:
        lambda_: float
            Boundary-penalty weight, ``>= 0`` (paper: 0.1).
        return_chunks: bool
            Return individual chunks, grouped by passage, instead of passages.
        max_tokens: int | None
            Token budget of the output (counted with ``token_counter``, tiktoken by default).
        on_error: "raise" | "return_seeds"
            On a failure while expanding, raise (default) or return the search hits unexpanded.

    Instantiate:
        .. code-block:: python

            from scar_langchain import SCARRetriever

            retriever = SCARRetriever(vectorstore=vectorstore)  # 10 chunks, 3 seeds kept

            # The paper's rule, exactly: lambda 0.1, gamma 0.8, window 1, k passages.
            paper = SCARRetriever(vectorstore=vectorstore, budget=None, k=4)

    Usage:
        .. code-block:: python

            docs = retriever.invoke("What does the retransmission timer do?")
            docs[0].metadata["scar_chunk_ids"]  # the chunks stitched into the first passage
            docs[0].metadata["scar_chunks"]     # each chunk's origin, score, threshold and b

            retriever.invoke("...", budget=6)   # override the budget for one call
            retriever.invoke("...", k=2)        # override k (seeds kept) for one call

    Use within a chain:
        .. code-block:: python

            from langchain_core.output_parsers import StrOutputParser
            from langchain_core.prompts import ChatPromptTemplate
            from langchain_core.runnables import RunnablePassthrough

            prompt = ChatPromptTemplate.from_template(
                "Answer from the context.\n\nContext: {context}\n\nQuestion: {question}"
            )

            def format_docs(docs):
                return "\n\n".join(doc.page_content for doc in docs)

            chain = (
                {"context": retriever | format_docs, "question": RunnablePassthrough()}
                | prompt
                | llm
                | StrOutputParser()
            )
            chain.invoke("What does the retransmission timer do?")

    Output metadata:
        Each passage keeps its best seed's metadata (``start_index`` becomes the passage's) and
        adds plain JSON values: ``scar_mode`` (``"budget"`` or ``"plain"``), ``scar_chunk_ids``
        (document order), ``scar_seed_id``, ``scar_seed_rank``, ``scar_score``
        (``cos(q, seed)``, never None), ``scar_chunks`` (per chunk: origin ``"seed"`` for a
        search hit or ``"neighbor"``, seed, score; for a neighbour also ``S`` as ``score``,
        ``threshold`` and ``boundary_penalty`` ``b``), ``scar_rejected`` (neighbours refused,
        with the same figures) and ``scar_expanded``. In budget mode a neighbour's
        ``threshold`` is the bid it beat, less the continuity bonus, so ``score > threshold``
        holds as in plain mode. With ``return_chunks=True`` each chunk keeps its own metadata
        plus ``scar_mode``, the per-chunk fields prefixed ``scar_`` and ``scar_passage``.
    """

    vectorstore: VectorStore | None = Field(
        default=None,
        description="Vector store searched for seed chunks; neighbours come from its get_by_ids "
        "(a PGVectorStore's table is read directly, with the store's connection settings).",
    )
    base_retriever: BaseRetriever | None = Field(
        default=None,
        description="Retriever that finds the seed chunks, used instead of vectorstore.",
    )
    docstore: BaseStore[str, Document] | None = Field(
        default=None,
        description="Key-value store holding every chunk under its id; neighbours come from it.",
    )
    embeddings: Embeddings | None = Field(
        default=None,
        description="Embeds the query and any chunk whose vector the store does not hold. "
        "Defaults to the vector store's embeddings. Must be the model that embedded the chunks.",
    )
    neighbor_source: NeighborSource | None = Field(
        default=None,
        description="Fetches neighbour chunks by id; chosen from vectorstore/docstore if unset.",
    )
    search_source: VectorSearchSource | None = Field(
        default=None,
        description="Searches the vector store's table itself and returns the hits with their "
        "stored vectors in the same round trip (PGVectorChunks.from_store(store)). Used instead "
        "of the vector store's search, which it must match (same table, columns, distance and "
        "index options); search_kwargs must then be empty. It also serves as neighbor_source and "
        "vector_source when those are unset.",
    )
    vector_source: NeighborVectorSource | None = Field(
        default=None,
        description="Supplies chunk vectors; by default the store's own vectors when it holds "
        "them (InMemoryVectorStore, FAISS), otherwise the embeddings.",
    )
    budget: int | None = Field(
        default=DEFAULT_BUDGET,
        description="Budget mode (the default): the number of chunks returned, >= k. The k best "
        "search hits are kept and every other slot goes to the best bid: a further hit's "
        "cos(q, x) or a neighbour's S + continuity_bonus. None selects plain mode (the paper's "
        "rule).",
    )
    k: int = Field(
        default=DEFAULT_SEEDS,
        description="Budget mode: search hits always kept (the seeds), <= budget. Plain mode: "
        "the number of passages returned.",
    )
    fetch_k: int | None = Field(
        default=None,
        description="Search hits asked of the store, >= k. Budget mode: the hits competing for "
        "the slots (default: budget). Plain mode: the seeds of the first search (default 3*k), "
        "of which only those needed for k passages are expanded; a second search happens only "
        "when all of them merge into fewer than k passages.",
    )
    continuity_bonus: float = Field(
        default=DEFAULT_CONTINUITY_BONUS,
        description="Budget mode: added to a neighbour's S when it bids against a further search "
        "hit, in cosine units, >= 0 (0.2 measured for all-MiniLM-L6-v2; `scar calibrate` "
        "estimates it for a model and corpus).",
    )
    lambda_: float = Field(
        default=DEFAULT_LAMBDA, description="Boundary-penalty weight, >= 0 (paper: 0.1)."
    )
    gamma: float = Field(
        default=DEFAULT_GAMMA,
        description="Plain mode: relative acceptance threshold in (0, 1] (paper: 0.8).",
    )
    window: int | None = Field(
        default=None,
        description="Maximum steps from a seed to an added neighbour, >= 1. None: as far as the "
        "budget allows in budget mode, 1 (the paper's) in plain mode.",
    )
    direction: Direction = Field(
        default="both", description="Which side of a seed to expand: both, previous or next."
    )
    return_chunks: bool = Field(
        default=False,
        description="Return the individual chunks, in document order grouped by passage, "
        "instead of one stitched Document per passage.",
    )
    max_tokens: int | None = Field(
        default=None,
        description="Token budget of the whole output, >= k. Budget mode: a chunk that would "
        "overflow it is passed over. Plain mode: the weakest neighbours at passage ends are "
        "dropped until it fits. Seeds are never dropped.",
    )
    token_counter: Callable[[str], int] | None = Field(
        default=None,
        description="Counts tokens for max_tokens; defaults to tiktoken's cl100k_base.",
    )
    on_error: OnError = Field(
        default="raise",
        description="On a failure while fetching neighbours or vectors or expanding: raise, "
        "with the cause chained, or return the search hits alone (k in plain mode, up to the "
        "budget in budget mode) marked scar_expanded=False.",
    )
    metadata_keys: ChunkMetadataKeys = Field(
        default=DEFAULT_KEYS,
        description="Metadata keys holding each chunk's id and previous/next links.",
    )
    search_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="Extra arguments of the vector store search, such as a filter.",
    )
    base_retriever_k_kwarg: str | None = Field(
        default="k",
        description="Keyword passed to base_retriever.invoke with the number of seeds wanted; "
        "None to never pass one.",
    )

    _neighbors: NeighborSource = PrivateAttr()
    _vectors: NeighborVectorSource = PrivateAttr()
    #: Searches the store's table and returns the hits' vectors: ``search_source``, or, for a
    #: PGVectorStore given no sources and no ``search_kwargs``, ``default_store_chunks``.
    _searcher: VectorSearchSource | None = PrivateAttr(default=None)
    _query_embeddings: Embeddings = PrivateAttr()
    _count_tokens: TokenCounter | None = PrivateAttr(default=None)
    #: Validated per-call settings, by their values and types (see :meth:`_request`).
    _requests: dict[tuple[tuple[type, object], ...], _PlainRequest | _BudgetRequest] = PrivateAttr(
        default_factory=dict
    )

    def __init__(self, **data: Any) -> None:
        """Create the retriever; see the class docstring for the arguments.

        Raises:
            InvalidSettingsError: If a setting is out of range or the sources are incomplete.
        """
        _check_settings(data)
        super().__init__(**data)
        self._resolve_sources()

    # ----------------------------------------------------------------------------------------
    # Construction

    def _resolve_sources(self) -> None:
        if (self.vectorstore is None) == (self.base_retriever is None):
            raise InvalidSettingsError(
                "pass exactly one of vectorstore= (search a vector store) or base_retriever= "
                "(any retriever, together with docstore= or neighbor_source=)."
            )
        embeddings = self.embeddings
        if embeddings is None and self.vectorstore is not None:
            embeddings = self.vectorstore.embeddings
        if embeddings is None:
            raise InvalidSettingsError(
                "no embeddings model: pass embeddings= (the model that embedded the chunks); "
                "SCAR needs it to embed the query"
                + ("." if self.vectorstore is None else " because the vector store exposes none.")
            )
        self._query_embeddings = embeddings
        search_source = self.search_source
        if search_source is not None:
            if self.vectorstore is None:
                raise InvalidSettingsError(
                    "search_source= searches the table of a vector store: pass vectorstore= (the "
                    "store whose table it reads) instead of base_retriever=."
                )
            if self.search_kwargs:
                raise InvalidSettingsError(
                    f"search_source= cannot apply search_kwargs={self.search_kwargs!r}: its "
                    "search has no filter. Drop search_source= to search through the store, "
                    "or drop the search_kwargs."
                )
            from scar_langchain.pgvector import check_search_matches_store

            check_search_matches_store(self.vectorstore, search_source)
        self._searcher = search_source
        # A PGVectorStore given no search_source: read its table directly, vectors in binary.
        store_chunks = None
        if search_source is None and self.vectorstore is not None:
            from scar_langchain.pgvector import default_store_chunks, runs_hybrid_search

            store_chunks = default_store_chunks(self.vectorstore)
            if (
                store_chunks is not None
                and not self.search_kwargs
                and not runs_hybrid_search(self.vectorstore)
            ):
                self._searcher = store_chunks
        if self.neighbor_source is not None:
            self._neighbors = self.neighbor_source
        elif isinstance(search_source, NeighborSource):
            self._neighbors = search_source
        elif self.docstore is not None:
            self._neighbors = DocstoreNeighbors(self.docstore)
        elif store_chunks is not None:
            self._neighbors = store_chunks
        elif self.vectorstore is not None:
            self._neighbors = VectorStoreNeighbors(self.vectorstore, self.metadata_keys)
        else:
            raise InvalidSettingsError(
                "base_retriever= needs docstore= (a BaseStore[str, Document] holding every "
                "chunk under its id) or neighbor_source= to fetch neighbours from."
            )
        if self.vector_source is not None:
            self._vectors = self.vector_source
        elif isinstance(search_source, NeighborVectorSource):
            self._vectors = search_source
        elif store_chunks is not None:
            self._vectors = FallbackVectors(store_chunks, EmbeddingVectors(embeddings))
        else:
            self._vectors = default_vector_source(self.vectorstore, embeddings)
        if self.max_tokens is not None:
            # Resolved now so that a missing tokenizer fails at construction, not mid-query.
            self._count_tokens = self.token_counter or tiktoken_counter()

    def _get_ls_params(self, **kwargs: Any) -> LangSmithRetrieverParams:
        """Return LangSmith's standard retriever parameters."""
        params = super()._get_ls_params(**kwargs)
        if self.vectorstore is not None:
            params["ls_vector_store_provider"] = type(self.vectorstore).__name__
        reported = self._query_embeddings
        # A cache wrapper (CacheBackedEmbeddings) reports the model it wraps.
        underlying = getattr(reported, "underlying_embeddings", None)
        if isinstance(underlying, Embeddings):
            reported = underlying
        params["ls_embedding_provider"] = type(reported).__name__
        for attribute in ("model", "model_name"):
            value = getattr(reported, attribute, None)
            if isinstance(value, str) and value:
                params["ls_embedding_model"] = value
                break
        return params

    def _request(self, k: int | None, budget: int | None) -> _PlainRequest | _BudgetRequest:
        """Validate the settings of one call (fields may be reassigned after construction).

        A combination that passed once is not validated again: the outcome is kept under the
        values and their types (``1`` and ``True`` differ), so a reassigned field or another
        per-call ``k`` is checked when first seen.
        """
        settings: dict[str, Any] = {
            "k": self.k if k is None else k,
            "budget": self.budget if budget is None else budget,
            "fetch_k": self.fetch_k,
            "lambda_": self.lambda_,
            "gamma": self.gamma,
            "window": self.window,
            "direction": self.direction,
            "continuity_bonus": self.continuity_bonus,
            "max_tokens": self.max_tokens,
        }
        key: tuple[tuple[type, object], ...] | None
        try:
            key = tuple((type(value), value) for value in settings.values())
            return self._requests[key]
        except TypeError:  # an unhashable value: let the validation name it
            key = None
        except KeyError:
            pass
        request = _request_for(**settings)
        if key is not None:
            if len(self._requests) >= _REQUESTS_KEPT:
                self._requests.clear()
            self._requests[key] = request
        return request

    def _token_counter(self) -> TokenCounter:
        return self._count_tokens or self.token_counter or tiktoken_counter()

    # ----------------------------------------------------------------------------------------
    # Sync path

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        budget: int | None = None,
    ) -> list[Document]:
        request = self._request(k, budget)
        query_vector = self._query_embeddings.embed_query(check_query_text(query))
        pool = QueryPool(np.asarray(query_vector, dtype=np.float64), keys=self.metadata_keys)
        return self._retrieve(query, pool, request, run_manager)

    def _retrieve(
        self,
        query: str,
        pool: QueryPool,
        request: _PlainRequest | _BudgetRequest,
        run_manager: CallbackManagerForRetrieverRun,
    ) -> list[Document]:
        """Search, fetch and select for a query whose pool holds its embedding."""
        if isinstance(request, _BudgetRequest):
            return self._select_within_budget(query, pool, request, run_manager)
        size = request.first_pool
        while True:
            if self._searcher is not None:
                pool.add_hits(self._search_hits(pool, size), size)
            else:
                pool.add_seeds(self._search(query, pool.query_vector, size, run_manager), size)
            try:
                run = _PlainRun(pool, request)
                while True:
                    while (wanted := run.fetch_request()) is not None:
                        pool.add_fetched(wanted, self._fetch(wanted))
                    self._add_vectors(pool)
                    if (selection := run.attempt()) is not None:
                        break
            except Exception as exc:
                return self._seeds_only(pool, request.k, "plain", exc)
            if selection.complete or pool.exhausted:
                return self._output(selection, pool, "plain")
            size *= 2

    def _select_within_budget(
        self,
        query: str,
        pool: QueryPool,
        request: _BudgetRequest,
        run_manager: CallbackManagerForRetrieverRun,
    ) -> list[Document]:
        if self._searcher is not None:
            pool.add_hits(self._search_hits(pool, request.candidates), request.candidates)
        else:
            found = self._search(query, pool.query_vector, request.candidates, run_manager)
            pool.add_seeds(found, request.candidates)
        if not pool.seeds:
            return []
        run = self._budget_run(pool, request)
        try:
            while True:
                wanted = run.prefetch_request()
                if wanted is None:
                    self._add_vectors(pool)
                    wanted = run.attempt()
                    if not wanted:
                        break
                pool.add_fetched(wanted, self._fetch(wanted))
        except Exception as exc:
            return self._seeds_only(pool, request.settings.max_chunks, "budget", exc)
        return self._output(_budget_selection(run), pool, "budget")

    def _search(
        self,
        query: str,
        query_vector: FloatVector,
        size: int,
        run_manager: CallbackManagerForRetrieverRun,
    ) -> list[Document]:
        if self.vectorstore is not None:
            try:
                return self.vectorstore.similarity_search_by_vector(
                    query_vector.tolist(), k=size, **self.search_kwargs
                )
            except NotImplementedError:
                return self.vectorstore.similarity_search(query, k=size, **self.search_kwargs)
        assert self.base_retriever is not None
        extra = {} if self.base_retriever_k_kwarg is None else {self.base_retriever_k_kwarg: size}
        return self.base_retriever.invoke(
            query, config={"callbacks": run_manager.get_child()}, **extra
        )

    def _search_hits(self, pool: QueryPool, size: int) -> SearchHits:
        assert self._searcher is not None
        return self._searcher.search_with_vectors(pool.query_vector.tolist(), size)

    def _fetch(self, chunk_ids: list[str]) -> FetchedChunks:
        try:
            return self._neighbors.fetch(chunk_ids)
        except ScarError:
            raise
        except Exception as exc:
            raise _fetch_error(self._neighbors, chunk_ids, exc) from exc

    def _add_vectors(self, pool: QueryPool) -> None:
        chunks = pool.chunks_needing_vectors()
        if not chunks:
            return
        try:
            vectors = self._vectors.vectors_for(chunks)
        except ScarError:
            raise
        except Exception as exc:
            raise _vector_error(self._vectors, chunks, exc) from exc
        pool.add_vectors(chunks, vectors)

    # ----------------------------------------------------------------------------------------
    # Async path

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
        budget: int | None = None,
    ) -> list[Document]:
        request = self._request(k, budget)
        query_vector = await self._query_embeddings.aembed_query(check_query_text(query))
        pool = QueryPool(np.asarray(query_vector, dtype=np.float64), keys=self.metadata_keys)
        if self._retrieves_in_one_thread():
            # One hand-over to a worker thread for the whole query, instead of one a statement.
            return await asyncio.to_thread(
                self._retrieve, query, pool, request, run_manager.get_sync()
            )
        if isinstance(request, _BudgetRequest):
            return await self._aselect_within_budget(query, pool, request, run_manager)
        size = request.first_pool
        while True:
            if self._searcher is not None:
                pool.add_hits(await self._asearch_hits(pool, size), size)
            else:
                found = await self._asearch(query, pool.query_vector, size, run_manager)
                pool.add_seeds(found, size)
            try:
                run = _PlainRun(pool, request)
                while True:
                    while (wanted := run.fetch_request()) is not None:
                        pool.add_fetched(wanted, await self._afetch(wanted))
                    await self._aadd_vectors(pool)
                    if (selection := run.attempt()) is not None:
                        break
            except Exception as exc:
                return self._seeds_only(pool, request.k, "plain", exc)
            if selection.complete or pool.exhausted:
                return self._output(selection, pool, "plain")
            size *= 2

    def _retrieves_in_one_thread(self) -> bool:
        """Whether an async call may run the sync retrieval in one worker thread.

        So it may when every statement goes to a pgvector reader (``PGVectorChunks``) whose
        sync reads need no event loop of the caller's: the default sources once SCAR's own pool
        is open, or a ``search_source`` reading on a pool of its own. Each statement would
        otherwise be handed to a worker thread and back on its own. Sources of the user's
        (``neighbor_source``, ``vector_source``, ``docstore``) keep their async methods.
        """
        searcher: object = self._searcher
        neighbors: object = self._neighbors
        if searcher is None or neighbors is not searcher:
            return False
        if self.vector_source is not None or self.docstore is not None:
            return False
        ready = getattr(searcher, "_sync_reads_in_any_thread", None)
        return callable(ready) and bool(ready())

    async def _aselect_within_budget(
        self,
        query: str,
        pool: QueryPool,
        request: _BudgetRequest,
        run_manager: AsyncCallbackManagerForRetrieverRun,
    ) -> list[Document]:
        if self._searcher is not None:
            hits = await self._asearch_hits(pool, request.candidates)
            pool.add_hits(hits, request.candidates)
        else:
            found = await self._asearch(query, pool.query_vector, request.candidates, run_manager)
            pool.add_seeds(found, request.candidates)
        if not pool.seeds:
            return []
        run = self._budget_run(pool, request)
        try:
            while True:
                wanted = run.prefetch_request()
                if wanted is None:
                    await self._aadd_vectors(pool)
                    wanted = run.attempt()
                    if not wanted:
                        break
                pool.add_fetched(wanted, await self._afetch(wanted))
        except Exception as exc:
            return self._seeds_only(pool, request.settings.max_chunks, "budget", exc)
        return self._output(_budget_selection(run), pool, "budget")

    async def _asearch(
        self,
        query: str,
        query_vector: FloatVector,
        size: int,
        run_manager: AsyncCallbackManagerForRetrieverRun,
    ) -> list[Document]:
        if self.vectorstore is not None:
            try:
                return await self.vectorstore.asimilarity_search_by_vector(
                    query_vector.tolist(), k=size, **self.search_kwargs
                )
            except NotImplementedError:
                return await self.vectorstore.asimilarity_search(
                    query, k=size, **self.search_kwargs
                )
        assert self.base_retriever is not None
        extra = {} if self.base_retriever_k_kwarg is None else {self.base_retriever_k_kwarg: size}
        return await self.base_retriever.ainvoke(
            query, config={"callbacks": run_manager.get_child()}, **extra
        )

    async def _asearch_hits(self, pool: QueryPool, size: int) -> SearchHits:
        assert self._searcher is not None
        return await self._searcher.asearch_with_vectors(pool.query_vector.tolist(), size)

    async def _afetch(self, chunk_ids: list[str]) -> FetchedChunks:
        try:
            return await self._neighbors.afetch(chunk_ids)
        except ScarError:
            raise
        except Exception as exc:
            raise _fetch_error(self._neighbors, chunk_ids, exc) from exc

    async def _aadd_vectors(self, pool: QueryPool) -> None:
        chunks = pool.chunks_needing_vectors()
        if not chunks:
            return
        try:
            vectors = await self._vectors.avectors_for(chunks)
        except ScarError:
            raise
        except Exception as exc:
            raise _vector_error(self._vectors, chunks, exc) from exc
        pool.add_vectors(chunks, vectors)

    # ----------------------------------------------------------------------------------------
    # Output

    def _budget_run(self, pool: QueryPool, request: _BudgetRequest) -> BudgetRun:
        token_counts = None
        if request.settings.max_tokens is not None:
            token_counts = PoolTokenCounts(pool, self._token_counter())
        if computes_vectors(self._vectors):
            return BudgetRun(pool, request.settings, token_counts, most_hops=EMBEDDED_PREFETCH_HOPS)
        return BudgetRun(
            pool,
            request.settings,
            token_counts,
            most_hops=PREFETCH_HOPS,
            deep_hops=DEEP_PREFETCH_HOPS,
        )

    def _output(self, selection: _Selection, pool: QueryPool, mode: Mode) -> list[Document]:
        if selection.result is None:
            return []
        result = selection.result
        passages = selection.passages
        if self.max_tokens is not None:
            # Budget mode counted each chunk; stitching can still shift the count a little, so
            # both modes end with the same check. A trim may split a passage between two
            # seeds; both parts are returned, as no seed is ever dropped.
            result = trim_to_token_budget(
                result, selection.records, self.max_tokens, self._token_counter(), selection.graph
            )
            if result is not selection.result:
                passages = assemble_passages(result, selection.records, selection.graph)
        if self.return_chunks:
            return [
                _chunk_document(pool.documents[chunk.chunk_id], chunk_record(chunk), index, mode)
                for index, passage in enumerate(passages)
                for chunk in passage.chunks
            ]
        return [
            _passage_document(passage, result, pool.documents, self.metadata_keys, mode)
            for passage in passages
        ]

    def _seeds_only(
        self, pool: QueryPool, count: int, mode: Mode, error: Exception
    ) -> list[Document]:
        if self.on_error == "raise":
            raise error
        logger.warning(
            "SCAR expansion failed (%s); returning %d search hits unexpanded as "
            "on_error='return_seeds'",
            type(error).__name__,
            min(count, len(pool.seeds)),
        )
        documents: list[Document] = []
        for rank, seed_id in enumerate(pool.seeds[:count]):
            seed = pool.documents[seed_id]
            metadata = dict(seed.metadata or {})
            metadata.update(
                {
                    "scar_mode": mode,
                    "scar_chunk_ids": [seed_id],
                    "scar_seed_id": seed_id,
                    "scar_seed_rank": rank,
                    "scar_expanded": False,
                    "scar_error": type(error).__name__,
                }
            )
            if self.return_chunks:
                metadata["scar_passage"] = rank
                metadata["scar_origin"] = "seed"
            document_id = seed.id if self.return_chunks else None
            documents.append(
                Document(id=document_id, page_content=seed.page_content, metadata=metadata)
            )
        return documents


# --------------------------------------------------------------------------------------------
# Per-query requests and selections (no state lives on the retriever, so concurrent queries
# never interfere)


@dataclass(frozen=True)
class _PlainRequest:
    k: int
    first_pool: int
    settings: ScarSettings


@dataclass(frozen=True)
class _BudgetRequest:
    candidates: int
    settings: BudgetSettings


@dataclass
class _Selection:
    result: ExpansionResult | None
    passages: list[Passage]
    records: Mapping[str, ChunkRecord]
    graph: NeighborGraph | None
    complete: bool
    #: Plain mode, when not complete: the fewest seeds the next try needs.
    seeds_next: int = 0


def _select_plain(pool: QueryPool, request: _PlainRequest, start: int, limit: int) -> _Selection:
    """Expand the fewest best seeds that give ``k`` passages (or the first ``limit``, if fewer).

    ``start`` must be a count of seeds known to be too few or just enough, such as
    :func:`~scar_langchain._pool.seeds_for_passages`' (fewer seeds hold fewer than ``k`` runs of
    adjacent seeds, so fewer passages). Adding one seed adds at most one passage (it can only
    join or extend runs around itself), so the count of seeds still needed is at least the
    count of passages missing: starting at ``start`` and stepping by the passages missing never
    passes the fewest seeds that suffice. Only the first ``limit`` seeds have their neighbours
    fetched; an incomplete selection says in ``seeds_next`` how many seeds the next try needs
    at least.
    """
    graph = pool.links()
    records = pool.records()
    if not pool.seeds:
        return _Selection(None, [], records, graph, complete=True)
    policy = ScarPolicy(request.settings)
    limit = min(limit, len(pool.seeds))
    used = min(start, limit)
    while True:
        result = policy.expand(pool.query_vector, pool.seeds[:used], graph, pool.vectors)
        passages = assemble_passages(result, records, graph)
        held = sum(_holds_seed(passage) for passage in passages)
        if held >= request.k or used >= limit:
            break
        used = min(used + request.k - held, limit)
    return _Selection(
        result,
        _first_passages(passages, request.k),
        records,
        graph,
        held >= request.k,
        seeds_next=used + request.k - held,
    )


class _PlainRun:
    """The fetch plan and the selection of one plain-mode query over the current search hits.

    Drive it as: fetch what :meth:`fetch_request` asks for until it returns ``None``; supply
    vectors for the pool's new chunks; call :meth:`attempt`. ``None`` from it means more seeds
    must be expanded: fetch again, and so on. Only the seeds the selection can need have their
    neighbourhoods fetched, starting with as many as :func:`seeds_for_passages` counts.

    Args:
        pool: The query's pool, holding the search hits (best first) as its seeds.
        request: The plain-mode settings.
    """

    def __init__(self, pool: QueryPool, request: _PlainRequest) -> None:
        self.pool = pool
        self.request = request
        #: The fewest seeds that can give ``k`` passages, as far as is known: where the next
        #: selection starts.
        self._start = seeds_for_passages(pool, request.k)
        #: The seeds whose neighbourhoods are fetched.
        self.expanded = self._start
        self._ring = 0

    def fetch_request(self) -> list[str] | None:
        """Return the next ring of neighbours to fetch, or ``None`` when every ring is known.

        A ring the pool already holds (hits next to hits) may lead to one it does not, so every
        ring up to the window is looked at.
        """
        while self._ring < self.request.settings.window:
            self._ring += 1
            depths = [
                self._ring if rank < self.expanded else 0 for rank in range(len(self.pool.seeds))
            ]
            wanted = self.pool.unfetched_neighbors(self.request.settings.direction, depths)
            if wanted:
                return wanted
        return None

    def attempt(self) -> _Selection | None:
        """Select over what the pool holds; ``None`` when more seeds must be expanded first."""
        selection = _select_plain(self.pool, self.request, self._start, self.expanded)
        if selection.complete or self.expanded >= len(self.pool.seeds):
            return selection
        self._start = selection.seeds_next
        self.expanded = seeds_for_passages(self.pool, self.request.k, self._start)
        self._ring = 0
        return None


def _holds_seed(passage: Passage) -> bool:
    return any(chunk.origin == "seed" for chunk in passage.chunks)


def _first_passages(passages: Sequence[Passage], k: int) -> list[Passage]:
    """The ``k`` best passages that hold a seed, with any neighbour-only run of their seeds.

    Links that disagree with each other can leave an added neighbour in a run of its own; such
    a run is kept with its seed and never counts towards ``k``, so it cannot push a seed out.
    """
    kept = [p for p in passages if _holds_seed(p)][:k]
    ranks = {c.seed_rank for p in kept for c in p.chunks if c.origin == "seed"}
    return [
        p
        for p in passages
        if any(p is q for q in kept) or (not _holds_seed(p) and p.seed_rank in ranks)
    ]


def _budget_selection(run: BudgetRun) -> _Selection:
    """Every passage of a finished budgeted run: their number follows from the budget."""
    assert run.result is not None
    for skipped in run.result.skipped:
        if skipped.reason == "invalid_vector":
            logger.warning(
                "skipped neighbour %r of %r: its vector is unusable (%s)",
                skipped.neighbor_id,
                skipped.seed_id,
                skipped.detail,
            )
    graph = run.pool.links()
    records = run.pool.records()
    passages = assemble_passages(run.result, records, graph)
    return _Selection(run.result, passages, records, graph, complete=True)


def _fetch_error(source: object, chunk_ids: Sequence[str], exc: Exception) -> NeighborFetchError:
    return NeighborFetchError(
        f"{type(source).__name__} failed to fetch {len(chunk_ids)} neighbour chunks "
        f"({type(exc).__name__}); set on_error='return_seeds' to return the seeds alone instead."
    )


def _vector_error(source: object, chunks: Mapping[str, Document], exc: Exception) -> EmbeddingError:
    return EmbeddingError(
        f"{type(source).__name__} failed to supply vectors for {len(chunks)} chunks "
        f"({type(exc).__name__}); set on_error='return_seeds' to return the seeds alone instead."
    )


def _chunk_document(
    document: Document, record: dict[str, Any], passage: int, mode: Mode
) -> Document:
    metadata = dict(document.metadata or {})
    metadata.update({f"scar_{key}": value for key, value in record.items()})
    metadata["scar_mode"] = mode
    metadata["scar_passage"] = passage
    metadata["scar_expanded"] = True
    return Document(id=document.id, page_content=document.page_content, metadata=metadata)


def _passage_document(
    passage: Passage,
    result: ExpansionResult,
    documents: Mapping[str, Document],
    keys: ChunkMetadataKeys,
    mode: Mode,
) -> Document:
    best = min(passage.chunks, key=lambda chunk: (chunk.seed_rank, chunk.origin != "seed"))
    metadata = dict(documents[best.chunk_id].metadata or {})
    for key in (keys.chunk_id, keys.position, keys.previous_id, keys.next_id, keys.start_index):
        metadata.pop(key, None)
    if passage.start_index is not None:
        metadata[keys.start_index] = passage.start_index
    seeds = {chunk.chunk_id for chunk in passage.chunks if chunk.origin == "seed"}
    metadata.update(
        {
            "scar_mode": mode,
            "scar_chunk_ids": passage.chunk_ids,
            "scar_seed_id": best.seed_id,
            "scar_seed_rank": int(passage.seed_rank),
            "scar_score": float(passage.score),
            "scar_chunks": [chunk_record(chunk) for chunk in passage.chunks],
            "scar_rejected": [
                decision_record(decision)
                for decision in result.decisions
                if decision.seed_id in seeds and not decision.accepted
            ],
            "scar_expanded": True,
        }
    )
    return Document(page_content=passage.text, metadata=metadata)


# --------------------------------------------------------------------------------------------
# Settings


def _request_for(
    *,
    k: int,
    budget: int | None,
    fetch_k: int | None,
    lambda_: float,
    gamma: float,
    window: int | None,
    direction: Direction,
    continuity_bonus: float,
    max_tokens: int | None,
) -> _PlainRequest | _BudgetRequest:
    """Validate one combination of settings and say what a call with them does.

    The values may come straight from the caller (before pydantic coerces them), so each is
    checked at run time; integers may be numpy integers.

    Raises:
        InvalidSettingsError: Naming the bad value and the valid range.
    """
    validate_k(k)
    seeds = int(k)
    if window is not None:
        validate_window(window)
    # gamma is checked in both modes, so a typo fails now rather than when switching modes.
    plain = ScarSettings(
        lambda_=lambda_,
        gamma=gamma,
        window=DEFAULT_WINDOW if window is None else window,
        direction=direction,
    )
    if fetch_k is not None:
        validate_k(fetch_k, "fetch_k")
        if fetch_k < seeds:
            raise InvalidSettingsError(
                f"fetch_k={fetch_k} is smaller than k={k}; it must be >= k (or None for the "
                "default)."
            )
    if max_tokens is not None:
        validate_k(max_tokens, "max_tokens")
        if max_tokens < seeds:
            raise InvalidSettingsError(
                f"max_tokens={max_tokens} is smaller than k={k}; the budget must leave at least "
                "one token per seed (seeds are never dropped)."
            )
    bonus = validate_continuity_bonus(continuity_bonus)
    if budget is None:
        first = seeds * PLAIN_POOL_PER_SEED if fetch_k is None else int(fetch_k)
        return _PlainRequest(k=seeds, first_pool=max(first, seeds), settings=plain)
    validate_k(budget, "budget")
    if budget < seeds:
        raise InvalidSettingsError(
            f"budget={budget} is smaller than k={k}: a budget smaller than the number of seeds "
            "cannot keep them all. Raise budget, lower k, or pass budget=None for plain SCAR."
        )
    settings = BudgetSettings(
        max_chunks=int(budget),
        continuity_bonus=bonus,
        lambda_=plain.lambda_,
        min_seeds=seeds,
        window=None if window is None else plain.window,
        direction=plain.direction,
        max_tokens=None if max_tokens is None else int(max_tokens),
    )
    candidates = int(budget) if fetch_k is None else int(fetch_k)
    return _BudgetRequest(candidates=max(candidates, seeds), settings=settings)


def _check_settings(data: Mapping[str, Any]) -> None:
    """Validate the settings as given, before pydantic coerces them.

    Raises:
        InvalidSettingsError: Naming the bad value and the valid range.
    """
    _request_for(
        k=data.get("k", DEFAULT_SEEDS),
        budget=data.get("budget", DEFAULT_BUDGET),
        fetch_k=data.get("fetch_k"),
        lambda_=data.get("lambda_", DEFAULT_LAMBDA),
        gamma=data.get("gamma", DEFAULT_GAMMA),
        window=data.get("window"),
        direction=data.get("direction", "both"),
        continuity_bonus=data.get("continuity_bonus", DEFAULT_CONTINUITY_BONUS),
        max_tokens=data.get("max_tokens"),
    )
    on_error = data.get("on_error", "raise")
    if on_error not in _ON_ERROR:
        raise InvalidSettingsError(
            f"on_error={on_error!r} is not valid; use 'raise' or 'return_seeds'."
        )
    search_kwargs = data.get("search_kwargs") or {}
    if isinstance(search_kwargs, Mapping) and "k" in search_kwargs:
        raise InvalidSettingsError(
            "search_kwargs must not hold 'k': SCARRetriever sizes its searches itself; "
            "set budget= (chunks returned), k= (seeds kept) or fetch_k= (search hits) instead."
        )
    return_chunks = data.get("return_chunks", False)
    if not isinstance(return_chunks, bool):
        raise InvalidSettingsError(
            f"return_chunks={return_chunks!r} is not valid; it must be True or False."
        )
