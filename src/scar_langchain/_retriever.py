"""``SCARRetriever``: a LangChain retriever that adds a seed's neighbours only when they continue it."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
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
)
from scar_core.tokens import TokenCounter, tiktoken_counter
from scar_langchain._links import DEFAULT_KEYS, ChunkMetadataKeys, read_links
from scar_langchain._metadata import chunk_record, decision_record
from scar_langchain._neighbors import (
    DocstoreNeighbors,
    FetchedChunks,
    NeighborSource,
    VectorStoreNeighbors,
)
from scar_langchain._vectors import NeighborVectorSource, default_vector_source

__all__ = ["SCARRetriever"]

logger = logging.getLogger(__name__)

FloatVector = npt.NDArray[np.float64]
OnError = Literal["raise", "return_seeds"]

_ON_ERROR: tuple[str, ...] = ("raise", "return_seeds")
#: Prefix of the stand-in id given to a retrieved chunk that carries no id.
_UNIDENTIFIED_PREFIX = "scar-unidentified:"


class SCARRetriever(BaseRetriever):
    r"""Semantic Continuity-Aware Retrieval: top-k search plus the neighbours that continue it.

    For each retrieved seed chunk ``c`` and adjacent chunk ``n`` of the same document, SCAR adds
    ``n`` when ``cos(q, n) - lambda_ * (1 - cos(c, n)) > gamma * cos(q, c)``. Each seed and its
    accepted neighbours are returned as one passage, stitched in document order with chunk
    overlap removed. Seeds are never dropped. The decision is made by :mod:`scar_core`; this class
    fetches the chunks and their vectors and shapes the output for LangChain.

    Setup:
        Install the LangChain extra, split your documents, and link the chunks before storing
        them, so each one knows its neighbours:

        .. code-block:: bash

            pip install "scar-retrieval[langchain]"

        .. code-block:: python

            from langchain_core.vectorstores import InMemoryVectorStore
            from langchain_text_splitters import RecursiveCharacterTextSplitter
            from scar_langchain import ScarEmbeddings, link_chunks

            splitter = RecursiveCharacterTextSplitter(chunk_size=800, add_start_index=True)
            chunks = link_chunks(splitter.split_documents(docs))
            vectorstore = InMemoryVectorStore(ScarEmbeddings())  # bundled MiniLM; any Embeddings
            vectorstore.add_documents(chunks, ids=[chunk.id for chunk in chunks])

    Key init args — where chunks come from:
        vectorstore: VectorStore
            The store to search; neighbours are fetched with its ``get_by_ids``.
        base_retriever: BaseRetriever
            Any retriever, instead of ``vectorstore``; needs ``docstore`` and ``embeddings``.
        docstore: BaseStore[str, Document]
            Holds each chunk under its id, for use with ``base_retriever``.
        embeddings: Embeddings
            Embeds the query (and chunks whose vectors the store does not hold); defaults to
            the store's own. Wrap it in ``CacheBackedEmbeddings`` so each chunk is embedded once.

    Key init args — the SCAR rule:
        k: int
            Number of passages to return (default 4).
        lambda_: float
            Boundary-penalty weight, ``>= 0`` (paper: 0.1).
        gamma: float
            Relative threshold in ``(0, 1]`` (paper: 0.8; lower expands more).
        window: int
            How many chunks away from a seed to look (1 or 2 in the paper).

    Key init args — output:
        return_chunks: bool
            Return individual chunks, grouped by passage, instead of passages.
        max_tokens: int | None
            Drop the weakest neighbours until the output fits this many tokens.
        on_error: "raise" | "return_seeds"
            On a failure while expanding, raise (default) or return the seeds unexpanded.

    Instantiate:
        .. code-block:: python

            from scar_langchain import SCARRetriever

            retriever = SCARRetriever(vectorstore=vectorstore, k=4, lambda_=0.1, gamma=0.8)

    Usage:
        .. code-block:: python

            docs = retriever.invoke("What does the retransmission timer do?")
            docs[0].metadata["scar_chunk_ids"]  # the chunks stitched into the first passage
            docs[0].metadata["scar_chunks"]     # each chunk's origin, S, threshold and b

            retriever.invoke("...", k=2)        # override k for one call

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
        adds plain JSON values: ``scar_chunk_ids`` (document order), ``scar_seed_id``,
        ``scar_seed_rank``, ``scar_score`` (``cos(q, seed)``, never None), ``scar_chunks`` (per
        chunk: origin, seed, score; for a neighbour also ``S`` as ``score``, ``threshold`` and
        ``boundary_penalty`` ``b``), ``scar_rejected`` (neighbours refused, with the same
        figures) and ``scar_expanded``. With ``return_chunks=True`` each chunk keeps its own
        metadata plus the same per-chunk fields prefixed ``scar_`` and ``scar_passage``.
    """

    vectorstore: VectorStore | None = Field(
        default=None,
        description="Vector store searched for seed chunks; neighbours come from its get_by_ids.",
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
    vector_source: NeighborVectorSource | None = Field(
        default=None,
        description="Supplies chunk vectors; by default the store's own vectors when it holds "
        "them (InMemoryVectorStore, FAISS), otherwise the embeddings.",
    )
    k: int = Field(default=4, description="Number of passages (or passages' chunks) to return.")
    fetch_k: int | None = Field(
        default=None,
        description="Seeds asked of the store in the first search (default 2*k); more are "
        "asked for when seeds merge into fewer than k passages.",
    )
    lambda_: float = Field(
        default=DEFAULT_LAMBDA, description="Boundary-penalty weight, >= 0 (paper: 0.1)."
    )
    gamma: float = Field(
        default=DEFAULT_GAMMA, description="Relative acceptance threshold in (0, 1] (paper: 0.8)."
    )
    window: int = Field(
        default=DEFAULT_WINDOW, description="Maximum steps from a seed to a neighbour, >= 1."
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
        description="Token budget of the whole output; the weakest neighbours at passage ends "
        "are dropped until it fits. Seeds are never dropped. Must be >= k.",
    )
    token_counter: Callable[[str], int] | None = Field(
        default=None,
        description="Counts tokens for max_tokens; defaults to tiktoken's cl100k_base.",
    )
    on_error: OnError = Field(
        default="raise",
        description="On a failure while fetching neighbours or vectors or expanding: raise, "
        "with the cause chained, or return the seeds alone marked scar_expanded=False.",
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
    _query_embeddings: Embeddings = PrivateAttr()
    _count_tokens: TokenCounter | None = PrivateAttr(default=None)

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
        if self.neighbor_source is not None:
            self._neighbors = self.neighbor_source
        elif self.docstore is not None:
            self._neighbors = DocstoreNeighbors(self.docstore)
        elif self.vectorstore is not None:
            self._neighbors = VectorStoreNeighbors(self.vectorstore, self.metadata_keys)
        else:
            raise InvalidSettingsError(
                "base_retriever= needs docstore= (a BaseStore[str, Document] holding every "
                "chunk under its id) or neighbor_source= to fetch neighbours from."
            )
        self._vectors = self.vector_source or default_vector_source(self.vectorstore, embeddings)
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

    def _settings(self) -> ScarSettings:
        return ScarSettings(
            lambda_=self.lambda_, gamma=self.gamma, window=self.window, direction=self.direction
        )

    def _request(self, k: int | None) -> _Request:
        wanted = self.k if k is None else k
        validate_k(wanted)
        if self.max_tokens is not None and self.max_tokens < wanted:
            raise InvalidSettingsError(
                f"max_tokens={self.max_tokens} is smaller than k={wanted}; the budget must "
                "leave at least one token per passage (seeds are never dropped)."
            )
        first = max(self.fetch_k if self.fetch_k is not None else 2 * wanted, wanted)
        return _Request(k=wanted, first_pool=first, settings=self._settings())

    # ----------------------------------------------------------------------------------------
    # Sync path

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
    ) -> list[Document]:
        request = self._request(k)
        pool = _Pool(np.asarray(self._query_embeddings.embed_query(query), dtype=np.float64))
        size = request.first_pool
        while True:
            found = self._search(query, pool.query_vector, size, run_manager)
            pool.add_seeds(found, size, self.metadata_keys)
            try:
                for _ in range(self.window):
                    wanted = pool.unfetched_neighbors(request.settings, self.metadata_keys)
                    if not wanted:
                        break
                    pool.add_fetched(wanted, self._fetch(wanted))
                pool.add_vectors(self._vectors_for(pool.chunks_without_vectors()))
                selection = pool.select(request, self.metadata_keys)
            except Exception as exc:
                return self._seeds_only(pool, request.k, exc)
            if selection.complete or pool.exhausted:
                return self._output(selection, pool)
            size *= 2

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

    def _fetch(self, chunk_ids: list[str]) -> FetchedChunks:
        try:
            return self._neighbors.fetch(chunk_ids)
        except ScarError:
            raise
        except Exception as exc:
            raise _fetch_error(self._neighbors, chunk_ids, exc) from exc

    def _vectors_for(self, chunks: Mapping[str, Document]) -> dict[str, FloatVector]:
        if not chunks:
            return {}
        try:
            return self._vectors.vectors_for(chunks)
        except ScarError:
            raise
        except Exception as exc:
            raise _vector_error(self._vectors, chunks, exc) from exc

    # ----------------------------------------------------------------------------------------
    # Async path

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
    ) -> list[Document]:
        request = self._request(k)
        query_vector = await self._query_embeddings.aembed_query(query)
        pool = _Pool(np.asarray(query_vector, dtype=np.float64))
        size = request.first_pool
        while True:
            found = await self._asearch(query, pool.query_vector, size, run_manager)
            pool.add_seeds(found, size, self.metadata_keys)
            try:
                for _ in range(self.window):
                    wanted = pool.unfetched_neighbors(request.settings, self.metadata_keys)
                    if not wanted:
                        break
                    pool.add_fetched(wanted, await self._afetch(wanted))
                pool.add_vectors(await self._avectors_for(pool.chunks_without_vectors()))
                selection = pool.select(request, self.metadata_keys)
            except Exception as exc:
                return self._seeds_only(pool, request.k, exc)
            if selection.complete or pool.exhausted:
                return self._output(selection, pool)
            size *= 2

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

    async def _afetch(self, chunk_ids: list[str]) -> FetchedChunks:
        try:
            return await self._neighbors.afetch(chunk_ids)
        except ScarError:
            raise
        except Exception as exc:
            raise _fetch_error(self._neighbors, chunk_ids, exc) from exc

    async def _avectors_for(self, chunks: Mapping[str, Document]) -> dict[str, FloatVector]:
        if not chunks:
            return {}
        try:
            return await self._vectors.avectors_for(chunks)
        except ScarError:
            raise
        except Exception as exc:
            raise _vector_error(self._vectors, chunks, exc) from exc

    # ----------------------------------------------------------------------------------------
    # Output

    def _output(self, selection: _Selection, pool: _Pool) -> list[Document]:
        if selection.result is None:
            return []
        result = selection.result
        passages = selection.passages
        if self.max_tokens is not None:
            counter = self._count_tokens or self.token_counter or tiktoken_counter()
            result = trim_to_token_budget(
                result, selection.records, self.max_tokens, counter, selection.graph
            )
            passages = assemble_passages(result, selection.records, selection.graph)[
                : len(selection.passages)
            ]
        if self.return_chunks:
            return [
                _chunk_document(pool.documents[chunk.chunk_id], chunk_record(chunk), index)
                for index, passage in enumerate(passages)
                for chunk in passage.chunks
            ]
        return [
            _passage_document(passage, result, pool.documents, self.metadata_keys)
            for passage in passages
        ]

    def _seeds_only(self, pool: _Pool, k: int, error: Exception) -> list[Document]:
        if self.on_error == "raise":
            raise error
        logger.warning(
            "SCAR expansion failed (%s); returning %d seeds unexpanded as on_error='return_seeds'",
            type(error).__name__,
            min(k, len(pool.seeds)),
        )
        documents: list[Document] = []
        for rank, seed_id in enumerate(pool.seeds[:k]):
            seed = pool.documents[seed_id]
            metadata = dict(seed.metadata or {})
            metadata.update(
                {
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
# Per-query state (no state lives on the retriever, so concurrent queries never interfere)


@dataclass(frozen=True)
class _Request:
    k: int
    first_pool: int
    settings: ScarSettings


@dataclass
class _Selection:
    result: ExpansionResult | None
    passages: list[Passage]
    records: dict[str, ChunkRecord]
    graph: NeighborGraph | None
    complete: bool


@dataclass
class _Pool:
    """Everything one query has learnt so far: seeds, fetched chunks and their vectors."""

    query_vector: FloatVector
    seeds: list[str] = field(default_factory=list)
    documents: dict[str, Document] = field(default_factory=dict)
    vectors: dict[str, FloatVector] = field(default_factory=dict)
    requested: set[str] = field(default_factory=set)
    exhausted: bool = False

    def add_seeds(self, found: Sequence[Document], size: int, keys: ChunkMetadataKeys) -> None:
        """Record a search's results, best first; the pool is exhausted when it ran short."""
        previous = set(self.seeds)
        seeds: dict[str, None] = {}
        for document in found:
            chunk_id = read_links(document, keys).chunk_id or _unidentified_id(document)
            if chunk_id in seeds:
                continue
            seeds[chunk_id] = None
            self.documents.setdefault(chunk_id, document)
        self.seeds = list(seeds)
        self.exhausted = len(found) < size or not (set(self.seeds) - previous)

    def links(self, keys: ChunkMetadataKeys) -> NeighborGraph:
        """The neighbour graph of every chunk known so far."""
        links: dict[str, tuple[str | None, str | None]] = {}
        documents: dict[str, str] = {}
        for chunk_id, document in self.documents.items():
            chunk = read_links(document, keys)
            links[chunk_id] = (chunk.previous_id, chunk.next_id)
            if chunk.document_id is not None:
                documents[chunk_id] = chunk.document_id
        return NeighborGraph(links, documents)

    def unfetched_neighbors(self, settings: ScarSettings, keys: ChunkMetadataKeys) -> list[str]:
        """Ids on the seeds' walks that are neither known nor already asked for."""
        graph = self.links(keys)
        steps: tuple[Literal["previous", "next"], ...] = (
            ("previous", "next") if settings.direction == "both" else (settings.direction,)
        )
        wanted: dict[str, None] = {}
        for seed in self.seeds:
            for step in steps:
                for chunk_id in graph.walk(seed, step, settings.window):
                    if chunk_id not in self.documents and chunk_id not in self.requested:
                        wanted[chunk_id] = None
        return list(wanted)

    def add_fetched(self, requested: list[str], fetched: FetchedChunks) -> None:
        """Record the chunks (and any vectors) a neighbour source returned."""
        self.requested.update(requested)
        wanted = set(requested)
        for chunk_id, document in fetched.documents.items():
            if chunk_id in wanted:
                self.documents.setdefault(chunk_id, document)
        for chunk_id, vector in fetched.vectors.items():
            if chunk_id in wanted:
                self.vectors.setdefault(chunk_id, np.asarray(vector, dtype=np.float64))

    def chunks_without_vectors(self) -> dict[str, Document]:
        """The known chunks that still need a vector."""
        return {c: d for c, d in self.documents.items() if c not in self.vectors}

    def add_vectors(self, vectors: Mapping[str, FloatVector]) -> None:
        """Record vectors from the vector source."""
        for chunk_id, vector in vectors.items():
            if chunk_id in self.documents:
                self.vectors.setdefault(chunk_id, np.asarray(vector, dtype=np.float64))

    def records(self, keys: ChunkMetadataKeys) -> dict[str, ChunkRecord]:
        """Text and position of every known chunk, for passage assembly."""
        records: dict[str, ChunkRecord] = {}
        for chunk_id, document in self.documents.items():
            chunk = read_links(document, keys)
            records[chunk_id] = ChunkRecord(
                chunk_id=chunk_id,
                text=document.page_content,
                document_id=chunk.document_id,
                position=chunk.position,
                start_index=chunk.start_index,
            )
        return records

    def select(self, request: _Request, keys: ChunkMetadataKeys) -> _Selection:
        """Expand the fewest best seeds that give ``k`` passages (or all seeds, if fewer).

        Adding one seed adds at most one passage (it can only join or extend runs around
        itself), so the count of seeds still needed is at least the count of passages missing.
        """
        graph = self.links(keys)
        records = self.records(keys)
        if not self.seeds:
            return _Selection(None, [], records, graph, complete=True)
        policy = ScarPolicy(request.settings)
        used = min(request.k, len(self.seeds))
        while True:
            result = policy.expand(self.query_vector, self.seeds[:used], graph, self.vectors)
            passages = assemble_passages(result, records, graph)
            if len(passages) >= request.k or used >= len(self.seeds):
                break
            used = min(used + request.k - len(passages), len(self.seeds))
        complete = len(passages) >= request.k
        return _Selection(result, passages[: request.k], records, graph, complete)


def _unidentified_id(document: Document) -> str:
    """A stable stand-in id for a retrieved chunk that carries none (it gets no neighbours)."""
    digest = hashlib.sha256(document.page_content.encode("utf-8")).hexdigest()[:32]
    return f"{_UNIDENTIFIED_PREFIX}{digest}"


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


def _chunk_document(document: Document, record: dict[str, Any], passage: int) -> Document:
    metadata = dict(document.metadata or {})
    metadata.update({f"scar_{key}": value for key, value in record.items()})
    metadata["scar_passage"] = passage
    metadata["scar_expanded"] = True
    return Document(id=document.id, page_content=document.page_content, metadata=metadata)


def _passage_document(
    passage: Passage,
    result: ExpansionResult,
    documents: Mapping[str, Document],
    keys: ChunkMetadataKeys,
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


def _check_settings(data: Mapping[str, Any]) -> None:
    """Validate the SCAR settings as given, before pydantic coerces them.

    Raises:
        InvalidSettingsError: Naming the bad value and the valid range.
    """
    settings = {
        name: data[name] for name in ("lambda_", "gamma", "window", "direction") if name in data
    }
    ScarSettings(**settings)
    k = data.get("k", 4)
    validate_k(k)
    fetch_k = data.get("fetch_k")
    if fetch_k is not None:
        validate_k(fetch_k, "fetch_k")
        if fetch_k < k:
            raise InvalidSettingsError(
                f"fetch_k={fetch_k} is smaller than k={k}; it must be >= k (or None for 2*k)."
            )
    max_tokens = data.get("max_tokens")
    if max_tokens is not None:
        validate_k(max_tokens, "max_tokens")
        if max_tokens < k:
            raise InvalidSettingsError(
                f"max_tokens={max_tokens} is smaller than k={k}; the budget must leave at least "
                "one token per passage (seeds are never dropped)."
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
            "set k= (passages returned) or fetch_k= (seeds in the first search) instead."
        )
    return_chunks = data.get("return_chunks", False)
    if not isinstance(return_chunks, bool):
        raise InvalidSettingsError(
            f"return_chunks={return_chunks!r} is not valid; it must be True or False."
        )
