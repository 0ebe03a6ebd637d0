"""``SCARRetriever``: a drop-in for ``vectorstore.as_retriever()`` that returns better chunks."""

from __future__ import annotations

import difflib
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
    MissingQueryError,
    NeighborFetchError,
    settings_error_in,
    unfilterable_store_error,
)
from scar_core.passages import stitch
from scar_core.query import Fallback, Found, Placed, ScarQuery, warn_once
from scar_core.settings import DEFAULT_K, ScarSettings, take_settings
from scar_langchain import links as lk
from scar_langchain.stores import NOT_RESTRICTING, RESTRICTING, StoreReader, reader_for

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
#: First stages SCAR sees into, by exact class: the attribute holding the retrievers they search
#: with. Their own steps (fusing ranks, reranking, rewording the query) never widen what the
#: retrievers inside may return, so their filters are theirs. Any other first stage is opaque.
_SEES_INTO = {
    "langchain_classic.retrievers.ensemble.EnsembleRetriever": "retrievers",
    "langchain_classic.retrievers.contextual_compression.ContextualCompressionRetriever": (
        "base_retriever"
    ),
    "langchain_classic.retrievers.multi_query.MultiQueryRetriever": "retriever",
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
        self._check_names(self.search_kwargs, per_call=False)
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
        self._reader.check(search)
        unapplied = self._reader.unapplied(search)
        allowed = self.settings.neighbor_filter or self.settings.allow_unfiltered_neighbors
        if unapplied and not allowed:
            known = sorted(self._reader.applies) or "none"
            raise unfilterable_store_error(
                type(self.vectorstore).__name__,
                f"it applies {known} of the search's arguments to reads by id, not {unapplied}",
            )

    def _check_names(self, search: dict[str, Any], per_call: bool) -> None:
        """Refuse a misspelled search argument, and per call any argument not on the allow-list.

        Per call, ``invoke`` takes ``k``, the arguments the store's reader applies to neighbour
        reads, and those that never restrict a search; a restricting argument of another store
        (``filter``, ``where_document``) then meets :meth:`_check_filter`.
        """
        takes = ["k", *sorted(self._reader.applies), *sorted(NOT_RESTRICTING)]
        for name, value in search.items():
            if name in takes or (name in RESTRICTING and per_call):
                continue
            near = difflib.get_close_matches(name, takes, n=1, cutoff=0.6)
            if near and name not in RESTRICTING:
                where = "invoke()" if per_call else "search_kwargs"
                raise InvalidSettingsError(
                    f"{where} got {name}={value!r}, which is not an argument SCARRetriever "
                    f"knows; did you mean {near[0]}?"
                )
            if per_call:
                raise InvalidSettingsError(
                    f"invoke() got {name}={value!r}, which SCARRetriever does not pass on: per "
                    f"call it takes {', '.join(takes)}. Pass other search arguments in "
                    "SCARRetriever(search_kwargs={...}), where SCAR checks that it can apply "
                    "them to the neighbours it reads."
                )

    def _check_first_stage(self) -> None:
        """Refuse a first stage whose filter SCAR cannot see or that differs from the neighbours'.

        SCAR sees into a ``VectorStoreRetriever`` of ``vectorstore`` and into the first stages of
        ``_SEES_INTO`` around such retrievers. Around anything else (BM25, a user's own
        retriever, another store) it cannot know the filter, so ``search_kwargs`` must state it,
        ``{}`` for none; it is never assumed that there is none.
        """
        if self.retriever is None:
            return
        seen, opaque = _first_stage_parts(self.retriever, self.vectorstore)
        if opaque and "search_kwargs" not in self.model_fields_set:
            raise InvalidSettingsError(
                f"SCARRetriever cannot see which filter the first stage searches with: "
                f"{', '.join(opaque)} is not a retriever it can look into (it sees into "
                "vectorstore.as_retriever(...), and EnsembleRetriever, "
                "ContextualCompressionRetriever and MultiQueryRetriever around such "
                "retrievers). Neighbours are read under search_kwargs' filter, so state it: "
                "SCARRetriever(vectorstore=..., retriever=..., search_kwargs={'filter': <the "
                "filter the first stage searches with>}), or search_kwargs={} if it searches "
                "without a filter."
            )
        mine = _restricting(self.search_kwargs)
        for leaf in seen:
            theirs = _restricting(leaf.search_kwargs)
            if theirs != mine:
                raise InvalidSettingsError(
                    f"the first stage searches with {_arguments(theirs)}, but SCARRetriever "
                    f"would read neighbours with {_arguments(mine)}; pass SCARRetriever("
                    f"search_kwargs={theirs!r}) so that neighbours are read under the same "
                    "filter."
                )

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
            found = self._read(ids, search)
            missing.update(set(ids) - {f.id for f in found})
            scar.receive(found)
        self._check_held(scar, hits, missing)
        return self._render(scar.placed())

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
            found = await self._aread(ids, search)
            missing.update(set(ids) - {f.id for f in found})
            await scar.areceive(found)
        self._check_held(scar, hits, missing)
        return self._render(scar.placed())

    # The steps both shells share.

    def _call(self, query: Any, kwargs: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Return one call's budget and search arguments (``search_kwargs | kwargs``, k apart).

        Raises:
            MissingQueryError: If ``query`` is not a non-empty string.
            InvalidSettingsError: For a setting or an argument that may not change per call.
        """
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
        self._check_names(kwargs, per_call=True)
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

    def _check_held(self, scar: ScarQuery, hits: list[Document], missing: set[str]) -> None:
        """Warn once if first-stage hits lack an id the store holds: SCAR cannot expand them.

        A hit is matched to its stored chunk by id only: a store has no general read by text,
        and a text the store holds more than once (boilerplate, two tenants' copies of a file)
        names no single chunk.
        """
        if self.retriever is None or not scar.linked:
            return
        ids = [lk.chunk_id_of(d) for d in hits]
        outside = [d for d, i in zip(hits, ids, strict=True) if i is None or i in missing]
        if outside:
            store = type(self.vectorstore).__name__
            named = ", ".join(repr(lk.chunk_id_of(d)) for d in outside[:3])
            warn_once(
                "hits outside the store",
                self.vectorstore,
                f"{type(self.retriever).__name__} returned {len(outside)} of {len(hits)} hits "
                f"with no id that {store} holds under the search's filter (ids {named}), so "
                "SCAR keeps them but cannot expand them. Build the first stage from the "
                "documents the store holds, with their ids: the link_chunks output you added, "
                "or, after link_store, the store's own documents (vectorstore.get_by_ids(ids)).",
                stacklevel=4,
            )

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
            metadata = _shared([p.found.metadata for p in members])
            metadata |= {"start_index": starts[0]} if usable[0] is not None else {}
            metadata |= {k: best.trace[k] for k in ("scar_expanded", "scar_embedded")}
            metadata |= {"scar_passage": number, "scar_score": seed.trace["scar_score"]}
            metadata |= {"scar_chunk_ids": [p.chunk_id for p in members]}
            metadata |= {"scar_chunks": [dict(p.found.metadata) | p.trace for p in members]}
            text = stitch([p.found.text for p in members], usable)
            out.append(Document(page_content=text, metadata=metadata))
        return out


def _shared(chunks: list[Any]) -> dict[str, Any]:
    """The metadata on which every chunk of a passage agrees, less what is each chunk's own."""
    first, others = chunks[0], chunks[1:]
    return {
        key: value
        for key, value in first.items()
        if key not in _CHUNK_KEYS and all(key in m and _same(m[key], value) for m in others)
    }


def _same(a: Any, b: Any) -> bool:
    """Whether two metadata values are equal (values whose ``==`` is not a bool: if identical)."""
    try:
        return a is b or (type(a) is type(b) and bool(a == b))
    except (TypeError, ValueError):  # an array's == is elementwise
        return False


def _first_stage_parts(
    retriever: BaseRetriever, store: VectorStore
) -> tuple[list[VectorStoreRetriever], list[str]]:
    """The retrievers of ``store`` a first stage searches with, and its parts SCAR cannot see into.

    Returns:
        The vector store retrievers of ``store`` found through the first stages of
        ``_SEES_INTO``, and each other part, named with the first stages around it.
    """
    seen: list[VectorStoreRetriever] = []
    opaque: list[str] = []
    stack: list[tuple[Any, str]] = [(retriever, "")]
    while stack:
        current, around = stack.pop()
        kind = type(current)
        children = _SEES_INTO.get(f"{kind.__module__}.{kind.__qualname__}")
        if kind is VectorStoreRetriever and current.vectorstore is store:
            seen.append(current)
        elif children is not None:
            inner = getattr(current, children)
            inside = f" in {kind.__name__}{around}"
            stack += [(c, inside) for c in (inner if isinstance(inner, list) else [inner])]
        elif kind is VectorStoreRetriever:
            other = type(current.vectorstore).__name__
            opaque.append(f"a VectorStoreRetriever of another store ({other}){around}")
        else:
            opaque.append(f"{kind.__name__}{around}")
    return seen, opaque


def _restricting(search: dict[str, Any]) -> dict[str, Any]:
    """The search arguments that may restrict what a search returns (all but k and ranking)."""
    return {k: v for k, v in search.items() if k != "k" and k not in NOT_RESTRICTING}


def _arguments(search: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in search.items()) or "no filter"


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
