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
from langchain_core.vectorstores import VectorStore
from pydantic import ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from scar_core._driver import QueryDriver, VectorMemory
from scar_core._errors import (
    InvalidSettingsError,
    MissingQueryError,
    NeighborFetchError,
    settings_error_in,
    warn_once,
)
from scar_core._settings import DEFAULT_K, ScarSettings, check_int, take_settings
from scar_langchain._checks import check_first_stage, check_names, check_search, warn_outside
from scar_langchain._links import render, to_chunk
from scar_langchain._stores import StoreAccess, access_for

__all__ = ["SCARRetriever"]

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
    bids higher in total (see ``scar_core._selection``). ``mode="paper"`` applies the paper's
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
            (``ContextualCompressionRetriever``), ``MultiQueryRetriever``, MMR. Its hits that
            ``vectorstore`` does not hold under their ids are kept, never expanded, and warned
            about once. SCAR sees the filter of a ``vectorstore.as_retriever(...)`` inside those
            three, and ``search_kwargs`` must hold the same one. Around anything else (BM25, a
            retriever of your own, another store) ``search_kwargs`` must state the filter the
            first stage searches with, ``{}`` for none, or SCAR refuses.
        k: Chunks returned (budget mode) or seeds expanded (paper mode). Default 4.
        search_kwargs: Passed to the store's search, e.g. ``{"filter": ...}``; the filter
            restricts every neighbour SCAR reads too (see "Filters"). A misspelled name, or a
            filter in a form the store's search does not take, is refused.
        merge_passages: Return each passage as one stitched Document. Its metadata keeps only
            the keys on which all its chunks agree, its ``start_index`` is its first chunk's,
            and ``scar_chunks`` lists each chunk's own metadata and trace.
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
        Per call, ``invoke`` takes ``k``, the arguments the store's reader applies and those that
        never restrict a search (``fetch_k``, ``score_threshold``, ...); any other name is
        refused, a misspelling with the nearest name.

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

            bm25 = BM25Retriever.from_documents(chunks)  # the chunks, with the store's ids
            hybrid = EnsembleRetriever(retrievers=[bm25, vectorstore.as_retriever()])
            retriever = SCARRetriever(
                vectorstore=vectorstore, retriever=hybrid, search_kwargs={}, k=8
            )  # BM25 has no filter SCAR can see: search_kwargs states it ({} for none)

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

    _reader: StoreAccess = PrivateAttr()
    #: Texts embedded because the store gave no vector: in memory only, never on disk.
    _memory: VectorMemory = PrivateAttr(default_factory=VectorMemory)

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
        self._reader = access_for(self.vectorstore)
        check_names(self._reader, self.search_kwargs, per_call=False)
        check_search(self._reader, self.search_kwargs, self._opted_out)
        if self.retriever is not None:
            stated = "search_kwargs" in self.model_fields_set
            check_first_stage(self.retriever, self.vectorstore, self.search_kwargs, stated)
        self._memory = VectorMemory()
        return self

    @property
    def _opted_out(self) -> bool:
        return bool(self.settings.neighbor_filter or self.settings.allow_unfiltered_neighbors)

    # The sync and async shells: search, read what the query asks for, render.

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        k, search = self._call(query, kwargs)
        vector = self.vectorstore.embeddings.embed_query(query)  # type: ignore[union-attr]
        if self.retriever is not None:
            hits = self.retriever.invoke(query, config={"callbacks": run_manager.get_child()})
        else:
            hits = self.vectorstore.similarity_search_by_vector(vector, k=k, **search)
        scar, missing = self._query(vector, hits, k), set()
        while ids := scar.wanted():
            try:
                found = [to_chunk(*row) for row in self._reader.read(ids, search).values()]
            except Exception as error:
                raise self._fetch_error(ids, error) from error
            missing.update(set(ids) - {f.id for f in found})
            scar.receive(found)
            if texts := scar.lacking():
                scar.embedded(self._embeddings(len(texts)).embed_documents(texts))
        if self.retriever is not None and scar.linked:
            warn_outside(self.retriever, self.vectorstore, hits, missing)
        return render(scar.returned(), scar.hit_ids, self.merge_passages)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        k, search = self._call(query, kwargs)
        vector = await self.vectorstore.embeddings.aembed_query(query)  # type: ignore[union-attr]
        if self.retriever is not None:
            config = {"callbacks": run_manager.get_child()}
            hits = await self.retriever.ainvoke(query, config=config)  # type: ignore[arg-type]
        else:
            hits = await self.vectorstore.asimilarity_search_by_vector(vector, k=k, **search)
        scar, missing = self._query(vector, hits, k), set()
        while ids := scar.wanted():
            try:
                found = [to_chunk(*row) for row in (await self._reader.aread(ids, search)).values()]
            except Exception as error:
                raise self._fetch_error(ids, error) from error
            missing.update(set(ids) - {f.id for f in found})
            scar.receive(found)
            if texts := scar.lacking():
                scar.embedded(await self._embeddings(len(texts)).aembed_documents(texts))
        if self.retriever is not None and scar.linked:
            warn_outside(self.retriever, self.vectorstore, hits, missing)
        return render(scar.returned(), scar.hit_ids, self.merge_passages)

    # The steps both shells share.

    def _call(self, query: Any, kwargs: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Return one call's budget and search arguments (``search_kwargs | kwargs``, k apart)."""
        if not isinstance(query, str) or not query.strip():
            raise MissingQueryError(
                f"SCARRetriever got {query!r} ({type(query).__name__}) as the query; it needs "
                "the question as a non-empty string: retriever.invoke('How long is CCTV "
                "footage kept?')."
            )
        settings = sorted(set(kwargs) & set(ScarSettings.names()) - {"k"})
        if settings:
            raise InvalidSettingsError(
                f"invoke() got {settings}; of SCAR's settings only k=... may change per call "
                "(other keyword arguments go to the search, as search_kwargs do). Set the "
                "others on the retriever."
            )
        check_names(self._reader, kwargs, per_call=True)
        if self.retriever is not None and set(kwargs) - {"k"}:
            raise InvalidSettingsError(
                f"invoke() got {sorted(set(kwargs) - {'k'})}, which cannot reach the first "
                "stage (retriever=...); set its filter on the first stage and the same filter "
                "in SCARRetriever's search_kwargs."
            )
        search = self.search_kwargs | kwargs
        k = search.pop("k", self.settings.k or DEFAULT_K)
        check_int("k", k)
        check_search(self._reader, search, self._opted_out)
        return k, search

    def _query(self, vector: list[float], hits: list[Document], k: int) -> QueryDriver:
        scar = QueryDriver.for_adapter(
            vector, [to_chunk(d) for d in hits], self.settings, k, self._memory, self.vectorstore
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

    def _fetch_error(self, ids: list[str], error: Exception) -> NeighborFetchError:
        return NeighborFetchError(
            f"{type(self.vectorstore).__name__} failed while SCAR read {len(ids)} chunks "
            f"({type(error).__name__}: {error}); check that the store is reachable."
        )

    def _embeddings(self, texts: int) -> Embeddings:
        """The store's embeddings, to embed ``texts`` texts it gave no vector for (warned once)."""
        warn_once(
            "embedded",
            self.vectorstore,
            f"{type(self.vectorstore).__name__} gave SCAR no stored vectors for some chunks "
            f"({texts} this query), so their texts are embedded at query time with the store's "
            "embeddings (each once per retriever, kept in memory; counted in "
            "metadata['scar_embedded']). Use a store SCAR reads vectors from (InMemory, FAISS, "
            "PGVector, Chroma, Qdrant) to avoid it, or give the store CacheBackedEmbeddings to "
            "keep the vectors on disk.",
            stacklevel=4,
        )
        return self.vectorstore.embeddings  # type: ignore[return-value]
