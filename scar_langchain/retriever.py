"""``SCARRetriever``: a drop-in for ``vectorstore.as_retriever()`` that returns better chunks."""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore, VectorStoreRetriever
from pydantic import ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from scar_core.cache import EmbeddingCache
from scar_core.errors import (
    InvalidSettingsError,
    NeighborFetchError,
    settings_error_in,
    unfilterable_store_error,
)
from scar_core.passages import stitch
from scar_core.query import Fallback, Found, Placed, ScarQuery, warn_once
from scar_core.settings import DEFAULT_K, ScarSettings, take_settings
from scar_langchain import links as lk
from scar_langchain.stores import StoreReader, reader_for

__all__ = ["SCARRetriever"]

#: Per-chunk keys that do not describe a stitched passage (Qdrant adds "_id", "_collection_name").
_CHUNK_KEYS = {lk.CHUNK_ID_KEY, lk.POSITION_KEY, lk.PREVIOUS_ID_KEY, lk.NEXT_ID_KEY, "_id"}
_CHUNK_KEYS.add("_collection_name")
#: What users bring from ``as_retriever`` and LlamaIndex, and what SCAR takes instead.
_HINTS = {
    "top_k": "SCARRetriever's budget is k=...",
    "similarity_top_k": "SCARRetriever's budget is k=...",
    "search_type": "to put SCAR after MMR, hybrid search or a reranker, pass that retriever "
    "as retriever=... (SCAR then reads vectors and neighbours from vectorstore)",
}


class SCARRetriever(BaseRetriever):
    """Retrieve ``k`` chunks like ``vectorstore.as_retriever()``, spent on better evidence.

    Budget mode (the default) returns exactly ``k`` Documents, one per chunk, like
    ``as_retriever(search_kwargs={"k": k})``: the two best retrieved chunks are kept, and the
    other slots go to further hits or to neighbours that continue a chosen chunk, whichever set
    bids higher in total (see ``scar_core.selection``). ``mode="paper"`` applies the paper's
    rule to ``k`` seeds instead, and the count varies.

    Documents come passage by passage (passages by their best hit's rank, chunks in document
    order). Metadata adds ``scar_passage``, ``scar_origin`` (``"hit"`` or ``"neighbor"``),
    ``scar_score`` (the chunk's cosine to the query, or a neighbour's ``S``), ``scar_seed_id``,
    ``scar_decision`` (for a neighbour: relevance, boundary penalty, score and the threshold it
    cleared), ``scar_expanded`` and ``scar_embedded`` (texts this query had to embed because the
    store gave no vector).

    Setup:
        Index chunks with links: ``link_chunks`` gives each chunk an id and its neighbours' ids in
        metadata (``pip install 'scar-retrieval[langchain]'``).

    Key init args:
        vectorstore: The store to search, and to read vectors and neighbours from; its
            ``embeddings`` embed the query.
        retriever: A first stage to take the hits from instead of the store's similarity
            search, in its order: hybrid search (``EnsembleRetriever``), a reranker
            (``ContextualCompressionRetriever``), MMR. Its hits that ``vectorstore`` does not
            hold are kept, and never expanded. If it filters through a ``VectorStoreRetriever``,
            ``search_kwargs`` must hold the same filter, which SCAR applies to neighbours.
        k: Chunks returned (budget mode) or seeds expanded (paper mode). Default 4.
        search_kwargs: Passed to the store's search, e.g. ``{"filter": ...}``; the filter
            restricts every neighbour SCAR reads too (see "Filters").
        merge_passages: Return each passage as one stitched Document.
        **settings: The rest of :class:`scar_core.ScarSettings` (``mode``, ``lambda_``,
            ``keep``, ``continuity_bonus``, ``gamma``, ``window``, ``direction``,
            ``neighbor_filter``, ``allow_unfiltered_neighbors``); kept in ``retriever.settings``.
            An unknown name is refused.

    Filters:
        SCAR never returns a chunk that the search, with the same ``search_kwargs``, could not
        return: the search's ``filter`` (and Chroma's ``where_document``) restricts every read
        of neighbours, natively, on InMemory, FAISS, PGVector, Chroma and Qdrant. A neighbour the
        filter excludes counts as missing, and the passage ends there. On any other store, a
        search argument that may restrict the search is refused with the two ways forward
        (``neighbor_filter`` or ``allow_unfiltered_neighbors``), never dropped silently.

    Instantiate:
        .. code-block:: python

            from scar_langchain import SCARRetriever, link_chunks

            chunks = link_chunks(splitter.split_documents(docs))
            vectorstore.add_documents(chunks, ids=[c.id for c in chunks])
            retriever = SCARRetriever(vectorstore=vectorstore, k=10)

    Usage:
        .. code-block:: python

            docs = retriever.invoke("How long is CCTV footage kept?")
            docs = retriever.invoke("...", k=5)  # another budget for one call
            docs = retriever.invoke("...", filter=tenant_filter)  # search_kwargs | kwargs

            hybrid = EnsembleRetriever(retrievers=[bm25, vectorstore.as_retriever()])
            retriever = SCARRetriever(vectorstore=vectorstore, retriever=hybrid, k=8)

    Use within a chain:
        .. code-block:: python

            chain = {"context": retriever, "question": RunnablePassthrough()} | prompt | llm
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    vectorstore: VectorStore
    retriever: BaseRetriever | None = Field(
        default=None, description="A first stage whose hits SCAR takes, in its order."
    )
    settings: ScarSettings = Field(default_factory=ScarSettings)
    search_kwargs: dict[str, Any] = Field(default_factory=dict)
    merge_passages: bool = False
    embedding_cache: EmbeddingCache | None = Field(
        default=None, description="Where embedded chunk vectors are kept (default on disk)."
    )

    _reader: StoreReader = PrivateAttr()
    _fallback: Fallback = PrivateAttr()

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as error:  # raise SCAR's own error, as documented
            raise settings_error_in(error) or error from None

    @model_validator(mode="before")
    @classmethod
    def _take_settings(cls, data: Any) -> Any:
        if isinstance(data, dict) and "settings" not in data:
            data = dict(data)
            own = [name for name in cls.model_fields if name != "settings"]
            data["settings"] = take_settings(data, "SCARRetriever", own, _HINTS)
        return data

    @model_validator(mode="after")
    def _check_store(self) -> SCARRetriever:
        if "k" in self.search_kwargs:
            raise InvalidSettingsError(
                "search_kwargs must not hold 'k': SCARRetriever sets the search's k itself; "
                "pass SCARRetriever(k=...) instead."
            )
        embeddings: Embeddings | None = getattr(self.vectorstore, "embeddings", None)
        if embeddings is None:
            raise InvalidSettingsError(
                f"{type(self.vectorstore).__name__} exposes no `embeddings`, so SCAR cannot embed "
                "the query; create the store with an Embeddings object."
            )
        self._reader = reader_for(self.vectorstore)
        self._check_filter(self.search_kwargs)
        self._check_first_stage()
        store = type(self.vectorstore).__name__
        self._fallback = Fallback(
            _embedding_key(embeddings),
            embeddings.embed_documents,
            self.embedding_cache,
            f"{store} gave SCAR no stored vectors for some chunks, so their texts are embedded "
            "at query time (once each, then cached on disk; counted in "
            "metadata['scar_embedded']). Use a store SCAR reads vectors from (InMemory, FAISS, "
            "PGVector, Chroma, Qdrant) to avoid it.",
            self.vectorstore,
        )
        return self

    def _check_filter(self, search: dict[str, Any]) -> None:
        """Refuse search arguments that restrict the search but that SCAR cannot apply to reads."""
        unapplied = self._reader.unapplied(search)
        allowed = self.settings.neighbor_filter or self.settings.allow_unfiltered_neighbors
        if unapplied and not allowed:
            known = sorted(self._reader.applies) or "none"
            raise unfilterable_store_error(
                type(self.vectorstore).__name__,
                f"it applies {known} of the search's arguments to reads by id, not {unapplied}",
            )

    def _check_first_stage(self) -> None:
        """Refuse a first stage that filters with another filter than the neighbours' reads."""
        mine = self.search_kwargs.get("filter")
        for theirs in _first_stage_filters(self.retriever):
            if theirs is not mine and theirs != mine:
                raise InvalidSettingsError(
                    f"the first stage searches with filter={theirs!r}, but SCARRetriever would "
                    f"read neighbours with filter={mine!r}; pass SCARRetriever(search_kwargs="
                    "{'filter': <the same filter>}) so that neighbours are read under it too."
                )

    # The sync and async shells: search, read what the query asks for, render.

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        k, search = self._call(kwargs)
        vector = self.vectorstore.embeddings.embed_query(query)  # type: ignore[union-attr]
        if self.retriever is not None:
            hits = self.retriever.invoke(query, config={"callbacks": run_manager.get_child()})
        else:
            hits = self.vectorstore.similarity_search_by_vector(vector, k=k, **search)
        scar = self._query(vector, hits, k)
        while ids := scar.wanted():
            scar.receive(self._read(ids, search))
        return self._render(scar.placed())

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        k, search = self._call(kwargs)
        vector = await self.vectorstore.embeddings.aembed_query(query)  # type: ignore[union-attr]
        if self.retriever is not None:
            config = {"callbacks": run_manager.get_child()}
            hits = await self.retriever.ainvoke(query, config=config)  # type: ignore[arg-type]
        else:
            hits = await self.vectorstore.asimilarity_search_by_vector(vector, k=k, **search)
        scar = self._query(vector, hits, k)
        while ids := scar.wanted():
            await scar.areceive(await self._aread(ids, search))
        return self._render(scar.placed())

    # The steps both shells share.

    def _call(self, kwargs: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Return one call's budget and search arguments (``search_kwargs | kwargs``, k apart)."""
        settings = sorted(set(kwargs) & set(ScarSettings.names()) - {"k"})
        if settings:
            raise InvalidSettingsError(
                f"invoke() got {settings}; of SCAR's settings only k=... may change per call "
                "(other keyword arguments go to the search, as search_kwargs do). Set the "
                "others on the retriever."
            )
        if self.retriever is not None and set(kwargs) - {"k"}:
            raise InvalidSettingsError(
                f"invoke() got {sorted(set(kwargs) - {'k'})}, which cannot reach the first "
                "stage (retriever=...); set its filter on the first stage and the same filter "
                "in SCARRetriever's search_kwargs."
            )
        search = self.search_kwargs | kwargs
        k = search.pop("k", self.settings.k or DEFAULT_K)
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise InvalidSettingsError(f"k={k!r} is not valid; it must be an integer >= 1.")
        self._check_filter(search)
        return k, search

    def _query(self, vector: list[float], hits: list[Document], k: int) -> ScarQuery:
        scar = ScarQuery(
            vector, [_hit(d) for d in hits], self.settings, k, self._fallback, self.vectorstore
        )
        if hits and not scar.linked:
            warn_once(
                "unlinked",
                self.vectorstore,
                f"None of the chunks {type(self.vectorstore).__name__} returned was linked, so "
                "SCAR returns plain top-k. Index chunks with scar_langchain.link_chunks(...), or "
                "link an existing store with scar_langchain.link_store(...).",
                stacklevel=5,
            )
        return scar

    def _read(self, ids: list[str], search: dict[str, Any]) -> list[Found]:
        try:
            return [_hit(d, vector) for d, vector in self._reader.read(ids, search).values()]
        except Exception as error:
            raise self._fetch_error(ids, error) from error

    async def _aread(self, ids: list[str], search: dict[str, Any]) -> list[Found]:
        try:
            found = await self._reader.aread(ids, search)
        except Exception as error:
            raise self._fetch_error(ids, error) from error
        return [_hit(d, vector) for d, vector in found.values()]

    def _fetch_error(self, ids: list[str], error: Exception) -> NeighborFetchError:
        return NeighborFetchError(
            f"{type(self.vectorstore).__name__} failed while SCAR read {len(ids)} chunks "
            f"({type(error).__name__}: {error}); check that the store is reachable."
        )

    def _render(self, placed: list[Placed]) -> list[Document]:
        if not self.merge_passages:
            return [
                Document(p.found.text, id=p.found.id, metadata=dict(p.found.metadata) | p.trace)
                for p in placed
            ]
        passages: dict[int, list[Placed]] = {}
        for p in placed:
            passages.setdefault(p.trace["scar_passage"], []).append(p)
        out = []
        for number, members in passages.items():
            best = min(members, key=lambda p: p.selected.seed_rank if p.selected else 0)
            seed = next((p for p in members if p.chunk_id == best.trace["scar_seed_id"]), best)
            starts = [p.found.metadata.get("start_index") for p in members]
            usable = [s if isinstance(s, int) else None for s in starts]
            metadata = {k: v for k, v in seed.found.metadata.items() if k not in _CHUNK_KEYS}
            metadata |= {k: best.trace[k] for k in ("scar_expanded", "scar_embedded")}
            metadata |= {"scar_passage": number, "scar_score": seed.trace["scar_score"]}
            metadata |= {"scar_chunk_ids": [p.chunk_id for p in members], "start_index": starts[0]}
            text = stitch([p.found.text for p in members], usable)
            out.append(Document(page_content=text, metadata=metadata))
        return out


def _first_stage_filters(retriever: BaseRetriever | None) -> list[Any]:
    """The filters of the vector store retrievers inside a first stage (ensembles, rerankers)."""
    found, stack = [], [retriever]
    while stack:
        current = stack.pop()
        if isinstance(current, VectorStoreRetriever):
            found += [current.search_kwargs["filter"]] if "filter" in current.search_kwargs else []
        stack += list(getattr(current, "retrievers", None) or [])
        stack += [base] if (base := getattr(current, "base_retriever", None)) is not None else []
    return found


def _hit(document: Document, vector: Any = None) -> Found:
    """The core's view of a Document: id, vector, links and what tells it apart."""
    metadata = document.metadata or {}
    previous_id, next_id = lk.links_of(metadata)
    linked = bool(previous_id or next_id or metadata.get(lk.DOCUMENT_ID_KEY))
    return Found(
        lk.chunk_id_of(document), document, vector, previous_id, next_id, linked, metadata,
        document.page_content,
    )  # fmt: skip


def _embedding_key(embeddings: Embeddings) -> str:
    """A cache key naming the embedding model as precisely as its attributes allow."""
    kind = f"{type(embeddings).__module__}.{type(embeddings).__qualname__}"
    details = [
        f"{name}={getattr(embeddings, name)}"
        for name in ("model", "model_name", "deployment", "dimensions", "size")
        if getattr(embeddings, name, None) is not None
    ]
    return f"{kind}({','.join(details)})"
