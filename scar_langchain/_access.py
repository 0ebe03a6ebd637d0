"""What SCAR does with a LangChain vector store's chunks: the base of each store's class.

:class:`StoreAccess` reads, lists and writes chunks; :mod:`scar_langchain._stores` has one
subclass per store SCAR knows, and picks it. Each lists the ``search_kwargs`` it applies to reads
by id (:attr:`StoreAccess.applies`, an allow-list) and the form each must have
(:meth:`StoreAccess.check`); any other key that may restrict what a search returns is reported
by :meth:`StoreAccess.unapplied`, and the retriever refuses to read neighbours past it.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.vectorstores import VectorStore

from scar_core._errors import InvalidSettingsError
from scar_langchain._links import LINK_KEYS

__all__ = [
    "NOT_RESTRICTING",
    "PAGE",
    "RESTRICTING",
    "Change",
    "Form",
    "ListedRow",
    "Rows",
    "StoreAccess",
    "a_dict",
    "as_rows",
    "batches",
    "diff",
    "merged",
]

#: What a read returns: ``{chunk id: (document, stored vector or None)}``.
Rows = dict[str, tuple[Document, Any]]
#: ``(chunk id, metadata, text)`` of a listed chunk (the text ``None`` when not asked for).
ListedRow = tuple[str, dict[str, Any], str | None]
#: A write: ``(chunk id, links before, links after)``, each ``(document id, position, previous
#: id, next id)`` in the order of :data:`~scar_langchain._links.LINK_KEYS`, ``None`` where absent.
Change = tuple[str, tuple[Any, ...], tuple[Any, ...]]

#: Search keyword arguments that change how a search ranks or how many hits it fetches, but never
#: which chunks it may return; a read need not apply them to neighbours.
NOT_RESTRICTING = frozenset(
    {"fetch_k", "score_threshold", "search_params", "consistency", "offset", "lambda_mult"}
)
#: Search keyword arguments that restrict which chunks a search returns, on the stores SCAR has a
#: class for; on any other store they are refused unless the user opts out.
RESTRICTING = frozenset({"filter", "where_document"})

#: A form a search argument must have: its name, the form in words, and a test of a value.
Form = tuple[str, str, Callable[[Any], bool]]
#: Chunks per listed page and per write (Chroma writes at most its client's max batch size).
PAGE = 1024


def a_dict(name: str) -> Form:
    return (name, "a dict, as the store's search takes it", lambda value: isinstance(value, dict))


def as_rows(found: Iterable[tuple[Any, str | None, dict[str, Any] | None, Any]]) -> Rows:
    """``Rows`` from ``(id, text, metadata, vector)`` tuples, ids as strings."""
    return {
        str(i): (Document(id=str(i), page_content=text or "", metadata=meta or {}), vector)
        for i, text, meta, vector in found
    }


def batches(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    iterator = iter(items)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


def merged(metadata: dict[str, Any], links: tuple[Any, ...]) -> dict[str, Any]:
    """``metadata`` with ``links`` written: ``None`` removes a link, or leaves document/position."""
    gone = {key for key, value in zip(LINK_KEYS[2:], links[2:], strict=True) if value is None}
    kept = {key: value for key, value in metadata.items() if key not in gone}
    return kept | {k: v for k, v in zip(LINK_KEYS, links, strict=True) if v is not None}


def diff(old: tuple[Any, ...], new: tuple[Any, ...]) -> tuple[dict[str, Any], list[str]]:
    """The link keys to set, and the link keys to remove (links that went away)."""
    values = {key: value for key, value in zip(LINK_KEYS, new, strict=True) if value is not None}
    pairs = zip(LINK_KEYS[2:], old[2:], new[2:], strict=True)
    return values, [key for key, was, value in pairs if was is not None and value is None]


class StoreAccess:
    """How SCAR reads, lists and writes one store's chunks; this base reads any other store.

    It reads documents through ``get_by_ids``, without vectors or filter, and cannot list.

    Args:
        store: The vector store.
    """

    #: Whether reads are in-process lookups, answered without a worker thread on the async path.
    in_process = False
    #: The search keyword arguments this class applies to every read, as the search does.
    applies: frozenset[str] = frozenset()
    #: The form each of :attr:`applies` must have (``None`` always means "not given").
    forms: tuple[Form, ...] = ()

    def __init__(self, store: VectorStore) -> None:
        self.store: Any = store

    def check(self, search_kwargs: dict[str, Any]) -> None:
        """Refuse a search argument this class applies but whose form the store does not take.

        Raises:
            InvalidSettingsError: Naming the store, the argument, its value and the form.
        """
        for name, form, takes in self.forms:
            value = search_kwargs.get(name)
            if value is not None and not takes(value):
                raise InvalidSettingsError(
                    f"{type(self.store).__name__} searches with {name}={value!r}, which is not "
                    f"{form}; pass {name}=<{form}>, the same in search_kwargs and per call."
                )

    def unapplied(self, search_kwargs: dict[str, Any]) -> list[str]:
        """Return the keys of ``search_kwargs`` that may restrict a search but not this read."""
        return sorted(set(search_kwargs) - self.applies - NOT_RESTRICTING)

    def read(self, ids: Sequence[str], search_kwargs: dict[str, Any]) -> Rows:
        """Return ``{id: (document, vector or None)}`` for the ids the store holds.

        Args:
            ids: The chunk ids to read.
            search_kwargs: The search's keyword arguments; the keys in :attr:`applies` restrict
                the read exactly as they restrict the search.
        """
        return {d.id: (d, None) for d in self.store.get_by_ids(list(ids)) if d.id}

    async def aread(self, ids: Sequence[str], search_kwargs: dict[str, Any]) -> Rows:
        """Async :meth:`read`: the store's async API where it has one, else a worker thread."""
        if self.in_process:
            return self.read(ids, search_kwargs)
        if type(self) is StoreAccess:
            return {d.id: (d, None) for d in await self.store.aget_by_ids(list(ids)) if d.id}
        return await asyncio.to_thread(self.read, ids, search_kwargs)

    @property
    def batch_size(self) -> int:
        """The most chunks one :meth:`write` takes."""
        return PAGE

    def listing(
        self, keys: Sequence[str], texts: bool = False
    ) -> tuple[int, Iterator[list[ListedRow]]]:
        """Return how many chunks the store holds, and their rows, a page at a time.

        Args:
            keys: The metadata keys the caller reads (a store may read only those).
            texts: Whether to read the chunks' texts too.

        Raises:
            InvalidSettingsError: If SCAR cannot list this store's chunks.
        """
        raise InvalidSettingsError(
            f"SCAR cannot list the chunks of a {type(self.store).__name__}, so it cannot link "
            "them in place; index them with scar_langchain.link_chunks(...) instead, or use a "
            "store SCAR can list (InMemory, FAISS, PGVector, Chroma, Qdrant)."
        )

    def write(self, changes: Iterable[Change]) -> int:
        """Write new links, :attr:`batch_size` chunks a call; return how many chunks it wrote."""
        written = 0
        for batch in batches(changes, self.batch_size):
            self._write(batch)
            written += len(batch)
        return written

    def _write(self, changes: list[Change]) -> None:
        raise NotImplementedError  # listing() refuses first

    def delete(self, ids: list[str]) -> None:
        """Delete chunks, through the store's public ``delete``."""
        self.store.delete(ids)
