"""``SCARRetriever``: a drop-in for ``vectorstore.as_retriever()`` that returns better chunks."""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Literal

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore
from pydantic import ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from scar_core.cache import EmbeddingCache
from scar_core.driver import QueryDriver, distinct_ids
from scar_core.errors import InvalidSettingsError, NeighborFetchError, unfilterable_store_error
from scar_core.passages import stitch
from scar_core.selection import Chunk
from scar_core.settings import DEFAULT_K, BudgetSettings, Direction, PaperSettings
from scar_langchain import links as lk
from scar_langchain.links import chunk_id_of, links_of
from scar_langchain.stores import Found, StoreReader, reader_for

__all__ = ["SCARRetriever"]

_BUDGET_ONLY = ("keep", "continuity_bonus")
_PAPER_ONLY = ("gamma", "window", "direction")
#: Per-chunk keys that do not describe a stitched passage.
_CHUNK_KEYS = {lk.CHUNK_ID_KEY, lk.POSITION_KEY, lk.PREVIOUS_ID_KEY, lk.NEXT_ID_KEY, "_id"}
_CHUNK_KEYS.add("_collection_name")  # Qdrant adds it and "_id" to each hit
_TRACE = ("scar_passage", "scar_origin", "scar_score", "scar_seed_id")
_DECISION = ("relevance", "boundary_penalty", "score", "threshold")
_warned_stores: weakref.WeakSet[VectorStore] = weakref.WeakSet()


class SCARRetriever(BaseRetriever):
    """Retrieve ``k`` chunks like ``vectorstore.as_retriever()``, spent on better evidence.

    Budget mode (the default) returns exactly ``k`` Documents, one per chunk, like
    ``as_retriever(search_kwargs={"k": k})``: the two best retrieved chunks are kept, and the
    other slots go to further hits or to neighbours that continue a chosen chunk, whichever set
    bids higher in total (see ``scar_core.selection``). ``mode="paper"`` applies the paper's rule to ``k`` seeds instead, and the count varies.

    Documents come passage by passage (passages by their best hit's rank, chunks in document
    order). Metadata adds ``scar_passage``, ``scar_origin`` (``"hit"`` or ``"neighbor"``),
    ``scar_score``, ``scar_seed_id``, ``scar_decision`` (for a neighbour: relevance, boundary
    penalty, score and threshold), ``scar_expanded`` and ``scar_embedded`` (chunks this query had
    to embed because the store did not return their vectors).

    Setup:
        Index chunks with links: ``link_chunks`` gives each chunk a stable id and its neighbours'
        ids in metadata (``pip install 'scar-retrieval[langchain]'``).

    Key init args:
        vectorstore: The store to search; its ``embeddings`` embed the query.
        k: Chunks returned (budget mode) or seeds expanded (paper mode). Default 4.
        mode: ``"budget"`` (default) or ``"paper"``.
        search_kwargs: Passed to the store's search, e.g. ``{"filter": ...}``; the filter
            applies to every neighbour SCAR reads too (see "Filters" below).
        merge_passages: Return each passage as one stitched Document (at most ``k`` of them,
            holding exactly ``k`` chunks in budget mode).
        keep, continuity_bonus: Budget mode only: hits always kept (default 2)
            and the bonus a continuing neighbour gets (0.25, for MiniLM-scale cosines).
        lambda_: Boundary-penalty weight, both modes (0.1).
        gamma, window, direction: Paper mode only (0.8, 1, ``"both"``).
        neighbor_filter: A function of a chunk's metadata that says whether this retriever may
            return it; applied to every neighbour, on top of the search's filter.
        allow_unfiltered_neighbors: Read neighbours of a store whose filter SCAR cannot apply
            to reads by id, without that filter. Only for stores where no filter guards access.

    Filters:
        SCAR never returns a chunk that the search, with the same ``search_kwargs``, could not
        return: the search's ``filter`` (and Chroma's ``where_document``) restricts every read of
        neighbours, natively, on InMemory, FAISS, PGVector, Chroma and Qdrant. A neighbour the
        filter excludes counts as missing, and a passage ends there. On any other store, a
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

    Use within a chain:
        .. code-block:: python

            chain = {"context": retriever, "question": RunnablePassthrough()} | prompt | llm
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    vectorstore: VectorStore
    k: int = Field(default=DEFAULT_K, ge=1, description="Chunks returned, or paper-mode seeds.")
    mode: Literal["budget", "paper"] = "budget"
    search_kwargs: dict[str, Any] = Field(default_factory=dict)
    merge_passages: bool = False
    keep: int | None = Field(default=None, ge=1, description="Budget mode: hits always kept.")
    continuity_bonus: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    lambda_: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    gamma: float | None = Field(default=None, gt=0, le=1, description="Paper mode: threshold.")
    window: int | None = Field(default=None, ge=1, description="Paper mode: steps from a seed.")
    direction: Direction | None = None
    embedding_cache: EmbeddingCache | None = Field(
        default=None, description="Where embedded chunk vectors are kept (default on disk)."
    )
    neighbor_filter: Callable[[dict[str, Any]], bool] | None = Field(
        default=None, description="Whether a neighbour may be returned, from its metadata."
    )
    allow_unfiltered_neighbors: bool = Field(
        default=False, description="Read neighbours without a filter SCAR cannot apply."
    )

    _reader: StoreReader = PrivateAttr()
    _warned_unlinked: bool = PrivateAttr(default=False)

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as error:  # raise SCAR's own error as documented, not pydantic's
            ours = [e["ctx"]["error"] for e in error.errors() if "error" in e.get("ctx", {})]
            settings_errors = [e for e in ours if isinstance(e, InvalidSettingsError)]
            if settings_errors:
                raise settings_errors[0] from None
            raise

    @model_validator(mode="after")
    def _settings_fit_the_mode(self) -> SCARRetriever:
        given = self.model_fields_set
        wrong, fix = (
            (_PAPER_ONLY, "pass mode='paper' to use the paper's rule")
            if self.mode == "budget"
            else (_BUDGET_ONLY, "drop it, or use the default mode='budget'")
        )
        for name in wrong:
            if name in given and getattr(self, name) is not None:
                raise InvalidSettingsError(
                    f"{name}={getattr(self, name)!r} does not apply to mode={self.mode!r}; {fix}."
                )
        if "k" in self.search_kwargs:
            raise InvalidSettingsError(
                "search_kwargs must not hold 'k': SCARRetriever sets the search's k itself; "
                "pass SCARRetriever(k=...) instead."
            )
        if getattr(self.vectorstore, "embeddings", None) is None:
            raise InvalidSettingsError(
                f"{type(self.vectorstore).__name__} exposes no `embeddings`, so SCAR cannot embed "
                "the query; create the store with an Embeddings object."
            )
        self._settings(self.k)  # range checks the pydantic constraints cannot express
        self._reader = reader_for(self.vectorstore)
        self._check_filter(self.search_kwargs)
        return self

    def _check_filter(self, search: dict[str, Any]) -> None:
        """Refuse search arguments that restrict the search but that SCAR cannot apply to reads."""
        unapplied = self._reader.unapplied(search)
        if unapplied and self.neighbor_filter is None and not self.allow_unfiltered_neighbors:
            known = sorted(self._reader.applies) or "none"
            raise unfilterable_store_error(
                type(self.vectorstore).__name__,
                f"it applies {known} of the search's arguments to reads by id, not {unapplied}",
            )

    def _settings(self, k: int) -> BudgetSettings | PaperSettings:
        names = ("lambda_", *(_PAPER_ONLY if self.mode == "paper" else _BUDGET_ONLY))
        given = {n: getattr(self, n) for n in names if getattr(self, n) is not None}
        if self.mode == "paper":
            return PaperSettings(k=k, **given)
        if self.keep is not None and self.keep > k != self.k:
            given["keep"] = k  # a smaller per-call k keeps at most k hits
        return BudgetSettings(k=k, **given)

    # The sync and async shells: the same steps, with the store's sync or async reads.

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        k, search = self._call(kwargs)
        vector = self.vectorstore.embeddings.embed_query(query)  # type: ignore[union-attr]
        hits = self.vectorstore.similarity_search_by_vector(vector, k=k, **search)
        driver, documents = self._start(vector, hits, k)
        embedded = 0
        while ids := driver.wanted():
            try:
                found = self._reader.read(ids, search)
            except Exception as error:
                raise self._fetch_error(ids, error) from error
            embedded += self._receive(driver, found, documents)
        return self._documents(driver, documents, embedded)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        k, search = self._call(kwargs)
        vector = await self.vectorstore.embeddings.aembed_query(query)  # type: ignore[union-attr]
        hits = await self.vectorstore.asimilarity_search_by_vector(vector, k=k, **search)
        driver, documents = self._start(vector, hits, k)
        embedded = 0
        while ids := driver.wanted():
            try:
                found = await self._reader.aread(ids, search)
            except Exception as error:
                raise self._fetch_error(ids, error) from error
            embedded += self._receive(driver, found, documents)
        return self._documents(driver, documents, embedded)

    # The steps both shells share.

    def _call(self, kwargs: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Return one call's budget and search arguments (``search_kwargs | kwargs``, k apart)."""
        settings = sorted(set(kwargs) & set(type(self).model_fields) - {"k"})
        if settings:
            raise InvalidSettingsError(
                f"invoke() got {settings}; of SCAR's settings only k=... may change per call "
                "(other keyword arguments go to the search, as search_kwargs do). Set the "
                "others on the retriever."
            )
        search = self.search_kwargs | kwargs
        k = search.pop("k", self.k)
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise InvalidSettingsError(f"k={k!r} is not valid; it must be an integer >= 1.")
        self._check_filter(search)
        return k, search

    def _start(
        self, vector: Sequence[float], hits: list[Document], k: int
    ) -> tuple[QueryDriver, dict[str, Document]]:
        hit_ids = distinct_ids([(chunk_id_of(d), _content_key(d)) for d in hits])
        if hits and not any(any(links_of(d.metadata)) for d in hits) and not self._warned_unlinked:
            self._warned_unlinked = True
            warnings.warn(
                f"None of the chunks {type(self.vectorstore).__name__} returned carries neighbour "
                "links, so SCAR returns plain top-k. Index chunks with "
                "scar_langchain.link_chunks(...), or link an existing store with "
                "scar_langchain.link_store(...).",
                stacklevel=4,
            )
        chunks = [Chunk(i, None, *links_of(d.metadata)) for i, d in zip(hit_ids, hits, strict=True)]
        documents = dict(zip(reversed(hit_ids), reversed(hits), strict=True))  # the first wins
        return QueryDriver(vector, chunks, self._settings(k)), documents

    def _receive(self, driver: QueryDriver, found: Found, documents: dict[str, Document]) -> int:
        """Hand one read to the driver, embedding the chunks the store gave no vector for.

        A neighbour that ``neighbor_filter`` refuses is left out, so it counts as missing.
        """
        if self.neighbor_filter is not None:
            allowed = self.neighbor_filter
            found = {
                i: f for i, f in found.items() if i in driver.hit_ids or allowed(f[0].metadata)
            }
        lacking = [i for i, (_, vector) in found.items() if vector is None]
        texts = [found[i][0].page_content for i in lacking]
        embedded = dict(zip(lacking, self._embed(texts), strict=True)) if lacking else {}
        for chunk_id, (document, _) in found.items():
            documents.setdefault(chunk_id, document)
        driver.receive(
            Chunk(i, embedded.get(i, v), *links_of(d.metadata)) for i, (d, v) in found.items()
        )
        return len(lacking)

    def _embed(self, texts: list[str]) -> Any:
        store = self.vectorstore
        if store not in _warned_stores:
            _warned_stores.add(store)
            warnings.warn(
                f"{type(store).__name__} does not return stored vectors to SCAR, so chunk texts "
                "are embedded at query time (once each, then cached on disk). Use a store SCAR "
                "reads vectors from (InMemory, FAISS, PGVector, Chroma, Qdrant) to avoid it.",
                stacklevel=5,
            )
        embeddings: Embeddings = store.embeddings  # type: ignore[assignment]
        cache = self.embedding_cache or EmbeddingCache()
        return list(cache.embed(_embedding_key(embeddings), texts, embeddings.embed_documents)[0])

    def _fetch_error(self, ids: Sequence[str], error: Exception) -> NeighborFetchError:
        return NeighborFetchError(
            f"{type(self.vectorstore).__name__} failed while SCAR read {len(ids)} chunks: {error}"
        )

    def _documents(
        self, driver: QueryDriver, documents: dict[str, Document], embedded: int
    ) -> list[Document]:
        expanded = any(any(links_of(documents[h].metadata)) for h in driver.hit_ids)
        selection = driver.result()
        common = {"scar_expanded": expanded, "scar_embedded": embedded}
        out: list[Document] = []
        for index, passage in enumerate(selection.passages):
            records = [record for c in passage if (record := selection.get(c)) is not None]
            chunks = [documents[c] for c in passage]
            if self.merge_passages:
                best = min(records, key=lambda r: r.seed_rank)
                source = documents[best.seed_id].metadata
                metadata = {k: v for k, v in source.items() if k not in _CHUNK_KEYS}
                starts = [c.metadata.get("start_index") for c in chunks]
                metadata |= common | {"scar_passage": index, "scar_chunk_ids": list(passage)}
                metadata |= {"scar_score": best.score, "start_index": starts[0]}
                usable = [s if isinstance(s, int) else None for s in starts]
                text = stitch([c.page_content for c in chunks], usable)
                out.append(Document(page_content=text, metadata=metadata))
                continue
            for chunk_id, chunk, record in zip(passage, chunks, records, strict=True):
                values = (index, record.origin, record.score, record.seed_id)
                trace: dict[str, Any] = dict(zip(_TRACE, values, strict=True))
                if record.decision is not None:
                    trace["scar_decision"] = {n: getattr(record.decision, n) for n in _DECISION}
                metadata = dict(chunk.metadata) | common | trace
                out.append(Document(chunk.page_content, id=chunk.id or chunk_id, metadata=metadata))
        return out


def _content_key(document: Document) -> str:
    """What tells two hits with one id apart: their text and metadata."""
    return repr((document.page_content, sorted(document.metadata.items(), key=str)))


def _embedding_key(embeddings: Embeddings) -> str:
    """A cache key naming the embedding model as precisely as its attributes allow."""
    kind = f"{type(embeddings).__module__}.{type(embeddings).__qualname__}"
    details = [
        f"{name}={getattr(embeddings, name)}"
        for name in ("model", "model_name", "deployment", "dimensions", "size")
        if getattr(embeddings, name, None) is not None
    ]
    return f"{kind}({','.join(details)})"
