"""What SCARRetriever is given, checked: search arguments per store and per call, first stages.

The allow-lists are each store's ``applies`` (``_stores.py``), :data:`NOT_RESTRICTING` and
:data:`SEES_INTO`; anything else that may restrict a search is refused by name.
"""

from __future__ import annotations

import difflib
from typing import Any

from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore, VectorStoreRetriever

from scar_core._errors import InvalidSettingsError, unfilterable_store_error, warn_once
from scar_langchain._links import chunk_id_of
from scar_langchain._stores import NOT_RESTRICTING, RESTRICTING, StoreAccess

#: First stages SCAR sees into, by exact class: the attribute holding the retrievers they search
#: with (fusing, reranking or rewording never widens what those may return). Others are opaque.
SEES_INTO = {
    "langchain_classic.retrievers.ensemble.EnsembleRetriever": "retrievers",
    "langchain_classic.retrievers.contextual_compression.ContextualCompressionRetriever": (
        "base_retriever"
    ),
    "langchain_classic.retrievers.multi_query.MultiQueryRetriever": "retriever",
}


def check_first_stage(
    retriever: BaseRetriever, store: VectorStore, search_kwargs: dict[str, Any], stated: bool
) -> None:
    """Refuse a first stage whose filter SCAR cannot see or that differs from the neighbours'.

    Around anything but :data:`SEES_INTO` and ``VectorStoreRetriever`` of ``store``,
    ``search_kwargs`` must be ``stated`` (``{}`` for none): it is never assumed there is none.
    """
    seen, opaque = [], []
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


def _restricting(search: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in search.items() if k != "k" and k not in NOT_RESTRICTING}


def _arguments(search: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in search.items()) or "no filter"


def warn_outside(
    retriever: BaseRetriever, store: VectorStore, hits: list[Document], missing: set[str]
) -> None:
    """Warn once if first-stage hits lack an id the store holds: SCAR cannot expand them.

    A hit is matched by id only: a store has no general read by text, and a text held more than
    once (boilerplate, two tenants' copies of a file) names no single chunk.
    """
    outside = [d for d in hits if (i := chunk_id_of(d)) is None or i in missing]
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
            stacklevel=4,
        )


def check_search(access: StoreAccess, search: dict[str, Any], opted_out: bool) -> None:
    """Refuse an argument in a form the store does not take, or one this read cannot apply.

    ``opted_out``: the user passed ``neighbor_filter`` or ``allow_unfiltered_neighbors=True``.
    """
    for name, (form, takes) in access.applies.items():
        value = search.get(name)
        if value is not None and not takes(value):
            raise InvalidSettingsError(
                f"{type(access.store).__name__} searches with {name}={value!r}, which is not "
                f"{form}; pass {name}=<{form}>, the same in search_kwargs and per call."
            )
    unapplied = sorted(set(search) - set(access.applies) - NOT_RESTRICTING)
    if unapplied and not opted_out:
        raise unfilterable_store_error(
            type(access.store).__name__,
            f"it applies {sorted(access.applies) or 'none'} of the search's arguments to reads "
            f"by id, not {unapplied}",
        )


def check_names(access: StoreAccess, search: dict[str, Any], per_call: bool) -> None:
    """Refuse a misspelled search argument, and per call any argument not on the allow-list.

    Per call, a restricting argument of another store then meets :func:`check_search`.
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
