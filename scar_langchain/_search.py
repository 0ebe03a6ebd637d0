"""The search's arguments, checked against what SCAR can apply to the neighbours it reads.

Allow-lists only: a search argument is taken when the store's class applies it to reads by id
(:attr:`~scar_langchain._access.StoreAccess.applies`) or it never restricts a search
(:data:`~scar_langchain._access.NOT_RESTRICTING`); a first stage is seen into only when it is a
``VectorStoreRetriever`` of the store, or one of :data:`SEES_INTO` around such retrievers.
Anything else is refused by name, with the fix.
"""

from __future__ import annotations

import difflib
from typing import Any

from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore, VectorStoreRetriever

from scar_core._errors import (
    InvalidSettingsError,
    MissingQueryError,
    unfilterable_store_error,
    warn_once,
)
from scar_langchain._access import NOT_RESTRICTING, RESTRICTING, StoreAccess
from scar_langchain._links import chunk_id_of

__all__ = [
    "SEES_INTO",
    "check_filter",
    "check_first_stage",
    "check_names",
    "check_query",
    "warn_outside",
]

#: First stages SCAR sees into, by exact class: the attribute holding the retrievers they search
#: with. Their own steps (fusing ranks, reranking, rewording the query) never widen what the
#: retrievers inside may return, so their filters are theirs. Any other first stage is opaque.
SEES_INTO = {
    "langchain_classic.retrievers.ensemble.EnsembleRetriever": "retrievers",
    "langchain_classic.retrievers.contextual_compression.ContextualCompressionRetriever": (
        "base_retriever"
    ),
    "langchain_classic.retrievers.multi_query.MultiQueryRetriever": "retriever",
}


def check_query(query: Any) -> None:
    """Refuse a query that is not a non-empty string.

    Raises:
        MissingQueryError: Naming the value and its type.
    """
    if not isinstance(query, str) or not query.strip():
        raise MissingQueryError(
            f"SCARRetriever got {query!r} ({type(query).__name__}) as the query; it needs "
            "the question as a non-empty string: retriever.invoke('How long is CCTV "
            "footage kept?')."
        )


def check_filter(access: StoreAccess, search: dict[str, Any], opted_out: bool) -> None:
    """Refuse search arguments that restrict the search but that SCAR cannot apply to reads.

    Args:
        access: The store's class.
        search: The search's keyword arguments.
        opted_out: Whether the user passed ``neighbor_filter`` or
            ``allow_unfiltered_neighbors=True``.
    """
    access.check(search)
    unapplied = access.unapplied(search)
    if unapplied and not opted_out:
        known = sorted(access.applies) or "none"
        raise unfilterable_store_error(
            type(access.store).__name__,
            f"it applies {known} of the search's arguments to reads by id, not {unapplied}",
        )


def check_names(access: StoreAccess, search: dict[str, Any], per_call: bool) -> None:
    """Refuse a misspelled search argument, and per call any argument not on the allow-list.

    Per call, ``invoke`` takes ``k``, the arguments the store's class applies to neighbour
    reads, and those that never restrict a search; a restricting argument of another store
    (``filter``, ``where_document``) then meets :func:`check_filter`.
    """
    takes = ["k", *sorted(access.applies), *sorted(NOT_RESTRICTING)]
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


def check_first_stage(
    retriever: BaseRetriever, store: VectorStore, search_kwargs: dict[str, Any], stated: bool
) -> None:
    """Refuse a first stage whose filter SCAR cannot see or that differs from the neighbours'.

    SCAR sees into a ``VectorStoreRetriever`` of ``store`` and into the first stages of
    :data:`SEES_INTO` around such retrievers. Around anything else (BM25, a user's own
    retriever, another store) it cannot know the filter, so ``search_kwargs`` must be
    ``stated``, ``{}`` for none; it is never assumed that there is none.
    """
    seen, opaque = _first_stage_parts(retriever, store)
    if opaque and not stated:
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
    mine = _restricting(search_kwargs)
    for leaf in seen:
        theirs = _restricting(leaf.search_kwargs)
        if theirs != mine:
            raise InvalidSettingsError(
                f"the first stage searches with {_arguments(theirs)}, but SCARRetriever "
                f"would read neighbours with {_arguments(mine)}; pass SCARRetriever("
                f"search_kwargs={theirs!r}) so that neighbours are read under the same "
                "filter."
            )


def _first_stage_parts(
    retriever: BaseRetriever, store: VectorStore
) -> tuple[list[VectorStoreRetriever], list[str]]:
    """The retrievers of ``store`` a first stage searches with, and its parts SCAR cannot see into.

    Returns:
        The vector store retrievers of ``store`` found through the first stages of
        :data:`SEES_INTO`, and each other part, named with the first stages around it.
    """
    seen: list[VectorStoreRetriever] = []
    opaque: list[str] = []
    stack: list[tuple[Any, str]] = [(retriever, "")]
    while stack:
        current, around = stack.pop()
        kind = type(current)
        children = SEES_INTO.get(f"{kind.__module__}.{kind.__qualname__}")
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


def warn_outside(
    retriever: BaseRetriever, store: VectorStore, hits: list[Document], missing: set[str]
) -> None:
    """Warn once if first-stage hits lack an id the store holds: SCAR cannot expand them.

    A hit is matched to its stored chunk by id only: a store has no general read by text,
    and a text the store holds more than once (boilerplate, two tenants' copies of a file)
    names no single chunk.
    """
    ids = [chunk_id_of(d) for d in hits]
    outside = [d for d, i in zip(hits, ids, strict=True) if i is None or i in missing]
    if outside:
        named = ", ".join(repr(chunk_id_of(d)) for d in outside[:3])
        warn_once(
            "hits outside the store",
            store,
            f"{type(retriever).__name__} returned {len(outside)} of {len(hits)} hits "
            f"with no id that {type(store).__name__} holds under the search's filter (ids "
            f"{named}), so SCAR keeps them but cannot expand them. Build the first stage from "
            "the documents the store holds, with their ids: the link_chunks output you added, "
            "or, after link_store, the store's own documents (vectorstore.get_by_ids(ids)).",
            stacklevel=5,
        )
