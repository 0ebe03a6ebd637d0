"""Read chunks and their stored vectors from a LangChain vector store, under the search's filter.

One small reader per store, chosen by the store's type (its package is imported only then).
``read(ids, search_kwargs)`` returns, in one batched call, the chunks among ``ids`` that the
store holds **and that its search, given the same ``search_kwargs``, could return**, with their
stored vectors:

=====================  ==========================================================================
store                  read
=====================  ==========================================================================
InMemoryVectorStore    its ``store`` dict; ``filter`` (a callable) called as its search calls it
FAISS                  the docstore, vectors by ``index.reconstruct_batch``; ``filter`` (dict or
                       callable) evaluated by FAISS's own filter function
PGVectorStore          ``get(ids, where=filter, include=[...])``, the search's filter clause
Chroma                 ``get(ids, where=filter, where_document=..., include=[...])``
QdrantVectorStore      ``client.scroll`` with the search's ``filter`` and a ``HasIdCondition``
any other store        ``get_by_ids``, without vectors, and with no filter it can apply
=====================  ==========================================================================

A reader lists the ``search_kwargs`` it applies (:attr:`StoreReader.applies`) and the form each
must have (:meth:`StoreReader.check`); any other key that may restrict what a search returns is
reported by :meth:`StoreReader.unapplied`, and the retriever refuses to read neighbours past it.
``docs/stores.md`` has the matrix.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore

from scar_core.errors import InvalidSettingsError
from scar_core.query import warn_once

__all__ = ["NOT_RESTRICTING", "RESTRICTING", "Rows", "StoreReader", "reader_for"]

#: What a read returns: ``{chunk id: (document, stored vector or None)}``.
Rows = dict[str, tuple[Document, Any]]

#: Search keyword arguments that change how a search ranks or how many hits it fetches, but never
#: which chunks it may return; a reader need not apply them to neighbours.
NOT_RESTRICTING = frozenset(
    {"fetch_k", "score_threshold", "search_params", "consistency", "offset", "lambda_mult"}
)
#: Search keyword arguments that restrict which chunks a search returns, on the stores SCAR has a
#: reader for; on any other store they are refused unless the user opts out.
RESTRICTING = frozenset({"filter", "where_document"})

#: A form a search argument must have: its name, the form in words, and a test of a value.
Form = tuple[str, str, Callable[[Any], bool]]


def _a_dict(name: str) -> Form:
    return (name, "a dict, as the store's search takes it", lambda value: isinstance(value, dict))


def _found(rows: Iterable[tuple[Any, str | None, dict[str, Any] | None, Any]]) -> Rows:
    """``Rows`` from ``(id, text, metadata, vector)`` tuples, ids as strings."""
    return {
        str(i): (Document(id=str(i), page_content=text or "", metadata=meta or {}), vector)
        for i, text, meta, vector in rows
    }


class StoreReader:
    """The default reader: documents through ``get_by_ids``, without vectors or filter.

    Args:
        store: The vector store to read from.
    """

    #: Whether reads are in-process lookups, answered without a worker thread on the async path.
    in_process = False
    #: The search keyword arguments this reader applies to every read, as the search does.
    applies: frozenset[str] = frozenset()
    #: The form each of :attr:`applies` must have (``None`` always means "not given").
    forms: tuple[Form, ...] = ()

    def __init__(self, store: VectorStore) -> None:
        self.store: Any = store

    def check(self, search_kwargs: dict[str, Any]) -> None:
        """Refuse a search argument this reader applies but whose form the store does not take.

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
        if type(self) is StoreReader:
            return {d.id: (d, None) for d in await self.store.aget_by_ids(list(ids)) if d.id}
        return await asyncio.to_thread(self.read, ids, search_kwargs)


class _InMemoryReader(StoreReader):
    in_process = True
    applies = frozenset({"filter"})
    forms = (("filter", "a function of a Document (lambda doc: ... -> bool)", callable),)

    def read(self, ids: Sequence[str], search_kwargs: dict[str, Any]) -> Rows:
        rows = self.store.store
        fields = ("text", "metadata", "vector")
        found = _found((i, *(rows[i][field] for field in fields)) for i in ids if i in rows)
        allowed = search_kwargs.get("filter")  # the search calls it on a Document, as here
        return found if allowed is None else {i: f for i, f in found.items() if allowed(f[0])}


class _FaissReader(StoreReader):
    in_process = True
    applies = frozenset({"filter"})
    forms = (
        (
            "filter",
            "a dict of metadata conditions or a function of a chunk's metadata",
            lambda value: isinstance(value, dict) or callable(value),
        ),
    )
    _rows: tuple[int, int, dict[str, int]] = (0, -1, {})  # (mapping's id, size, chunk id -> row)

    def read(self, ids: Sequence[str], search_kwargs: dict[str, Any]) -> Rows:
        mapping: dict[int, str] = self.store.index_to_docstore_id
        if self._rows[:2] != (id(mapping), len(mapping)):  # chunks were added or deleted
            self._rows = (id(mapping), len(mapping), {c: row for row, c in mapping.items()})
        rows = self._rows[2]
        documents = {i: self.store.docstore.search(i) for i in ids if i in rows}
        found = [i for i, d in documents.items() if isinstance(d, Document)]
        if search_kwargs.get("filter") is not None:  # FAISS's own evaluation of its filter
            allowed = self.store._create_filter_func(search_kwargs["filter"])
            found = [i for i in found if allowed(documents[i].metadata)]
        if not found:
            return {}
        try:
            vectors = self.store.index.reconstruct_batch(np.array([rows[i] for i in found]))
        except RuntimeError as error:  # an IVF index without a direct map: texts are embedded
            warn_once(  # said instead of the general "embedded at query time" warning
                "embedded",
                self.store,
                f"FAISS could not give SCAR its stored vectors ({str(error).splitlines()[0]}), so "
                "their texts are embedded instead. For an IVF index, call "
                "vectorstore.index.make_direct_map() once after adding chunks.",
                stacklevel=6,
            )
            vectors = [None] * len(found)
        # The docstore's own Documents are returned as they are (SCAR never changes them).
        return {
            i: (
                d
                if d.id == i
                else Document(id=i, page_content=d.page_content, metadata=d.metadata),
                v,
            )
            for i, v in zip(found, vectors, strict=True)
            if (d := documents[i]) is not None
        }


_GET_INCLUDE = ["documents", "metadatas", "embeddings"]


def _from_get(result: dict[str, Any]) -> Rows:
    """``Rows`` from a ``get`` result; pgvector gives vectors as text (of float32 values)."""
    return _found(
        (i, text, meta, np.asarray(json.loads(v), np.float32) if isinstance(v, str) else v)
        for i, text, meta, v in zip(*(result[k] for k in ["ids", *_GET_INCLUDE]), strict=True)
    )


class _PGVectorReader(StoreReader):
    """``get`` by ids; its ``where`` takes the search's ``filter`` through the same clause builder.

    A link can name an id the table's id column cannot hold (``"not-a-uuid"`` in a ``UUID``
    column): PostgreSQL then refuses the whole read with a data error. The ids it refuses, each
    asked alone (PostgreSQL, not SCAR, judges what the column holds), count as missing, are
    remembered, and are warned about once.
    """

    applies = frozenset({"filter"})
    forms: tuple[Form, ...] = (_a_dict("filter"),)

    def __init__(self, store: VectorStore) -> None:
        super().__init__(store)
        #: Ids the store's id column cannot hold, found by :meth:`_refuse`.
        self.refused: set[str] = set()

    def _where(self, search_kwargs: dict[str, Any]) -> dict[str, Any]:
        return {"where": search_kwargs.get("filter")}

    def read(self, ids: Sequence[str], search_kwargs: dict[str, Any]) -> Rows:
        wanted = [i for i in ids if i not in self.refused]
        if not wanted:
            return {}
        where = self._where(search_kwargs)
        try:
            return _from_get(self.store.get(ids=wanted, include=_GET_INCLUDE, **where))
        except Exception as error:
            if not _data_error(error):
                raise
            if not self._refuse([i for i in wanted if not self._holds(i)], error):
                raise
        return self.read(wanted, search_kwargs)  # again, without the ids the column refused

    async def aread(self, ids: Sequence[str], search_kwargs: dict[str, Any]) -> Rows:
        if not hasattr(self.store, "aget"):  # Chroma
            return await asyncio.to_thread(self.read, ids, search_kwargs)
        wanted = [i for i in ids if i not in self.refused]
        if not wanted:
            return {}
        where = self._where(search_kwargs)
        try:
            return _from_get(await self.store.aget(ids=wanted, include=_GET_INCLUDE, **where))
        except Exception as error:
            if not _data_error(error):
                raise
            if not self._refuse([i for i in wanted if not await self._aholds(i)], error):
                raise
        return await self.aread(wanted, search_kwargs)

    def _holds(self, chunk_id: str) -> bool:
        """Whether the id column can hold ``chunk_id``: PostgreSQL's answer to a read of it alone."""
        try:
            self.store.get(ids=[chunk_id], include=[])
        except Exception as error:
            if _data_error(error):
                return False
            raise
        return True

    async def _aholds(self, chunk_id: str) -> bool:
        """Async :meth:`_holds`."""
        try:
            await self.store.aget(ids=[chunk_id], include=[])
        except Exception as error:
            if _data_error(error):
                return False
            raise
        return True

    def _refuse(self, refused: list[str], error: Exception) -> bool:
        """Count ``refused`` as missing from now on, and warn once; whether there were any.

        If there were none, the data error was not about the ids (a filter comparing a column
        with a value of another type, say), and the caller raises it.
        """
        if not refused:
            return False
        self.refused.update(refused)
        named = ", ".join(repr(i if len(i) <= 40 else i[:40] + "...") for i in refused[:3])
        warn_once(
            "unholdable ids",
            self.store,
            f"{type(self.store).__name__}'s id column cannot hold the ids {named} that chunk "
            f"links name ({str(error).splitlines()[0]}), so SCAR counts those neighbours as "
            "missing. Relink the chunks with scar_langchain.link_store(vectorstore), which "
            "writes links naming the ids the store holds.",
            stacklevel=2,
        )
        return True


def _data_error(error: Exception) -> bool:
    """Whether PostgreSQL refused a value (SQLSTATE class 22, which SQLAlchemy calls DataError)."""
    try:
        from sqlalchemy.exc import DataError
    except ImportError:  # not a PostgreSQL store
        return False
    return isinstance(error, DataError)


class _ChromaReader(_PGVectorReader):
    """``get`` by ids with the search's ``filter`` as ``where`` and its ``where_document``."""

    applies = frozenset({"filter", "where_document"})
    forms: tuple[Form, ...] = (_a_dict("filter"), _a_dict("where_document"))

    def _where(self, search_kwargs: dict[str, Any]) -> dict[str, Any]:
        where = {"where": search_kwargs.get("filter")}
        return where | {"where_document": search_kwargs.get("where_document")}


def _point_id(chunk_id: str) -> int | str:
    """A Qdrant point id (integer ids come back from metadata links as digit strings)."""
    return int(chunk_id) if chunk_id.isdigit() else chunk_id


def _qdrant_filter(value: Any) -> bool:
    from qdrant_client import models

    return isinstance(value, models.Filter)


class _QdrantReader(StoreReader):
    """``scroll`` over the points that have one of the ids and match the search's ``filter``."""

    applies = frozenset({"filter"})
    forms = (("filter", "a qdrant_client.models.Filter", _qdrant_filter),)

    def read(self, ids: Sequence[str], search_kwargs: dict[str, Any]) -> Rows:
        from qdrant_client import models

        conditions: list[Any] = [models.HasIdCondition(has_id=[_point_id(i) for i in ids])]
        if search_kwargs.get("filter") is not None:  # a models.Filter, as the search takes it
            conditions.append(search_kwargs["filter"])
        points, _ = self.store.client.scroll(
            self.store.collection_name,
            scroll_filter=models.Filter(must=conditions),
            limit=len(ids),
            with_payload=True,
            with_vectors=[self.store.vector_name],
        )
        rows, store = [], self.store
        for point in points:  # with the metadata keys the store's search adds to its hits
            payload, vector = point.payload or {}, point.vector
            metadata = dict(payload.get(store.metadata_payload_key) or {})
            metadata |= {"_id": point.id, "_collection_name": store.collection_name}
            vector = vector.get(store.vector_name) if isinstance(vector, dict) else vector
            rows.append((point.id, payload.get(store.content_payload_key), metadata, vector))
        return _found(rows)


_READERS: dict[str, type[StoreReader]] = {
    "langchain_community.FAISS": _FaissReader,
    "langchain_postgres.PGVectorStore": _PGVectorReader,
    "langchain_chroma.Chroma": _ChromaReader,
    "langchain_qdrant.QdrantVectorStore": _QdrantReader,
}


def reader_for(store: VectorStore) -> StoreReader:
    """Return the reader for ``store``'s type: the most direct public way to its vectors."""
    if type(store) is InMemoryVectorStore:  # a subclass may keep its rows elsewhere
        return _InMemoryReader(store)
    for cls in type(store).__mro__:
        reader = _READERS.get(f"{cls.__module__.split('.')[0]}.{cls.__name__}")
        if reader is not None:
            return reader(store)
    return StoreReader(store)
