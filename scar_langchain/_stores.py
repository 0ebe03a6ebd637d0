"""One class per LangChain vector store: how SCAR reads, lists and writes its chunks.

:func:`access_for` picks the class by the store's type (its package is imported only then).
``read(ids, search_kwargs)`` returns, in one batched call, the chunks among ``ids`` that the
store holds **and that its search, given the same ``search_kwargs``, could return**, with their
stored vectors; ``listing`` pages through every chunk's id, metadata and (if asked) text, and
``write`` sets SCAR's link keys in place, for ``link_store``:

=====================  ==========================================================================
store                  read / list and write
=====================  ==========================================================================
InMemoryVectorStore    its ``store`` dict; ``filter`` (a callable) called as its search calls it;
                       writes the rows' ``metadata``
FAISS                  the docstore, vectors by ``index.reconstruct_batch``; ``filter`` (dict or
                       callable) evaluated by FAISS's own filter function; writes the docstore
                       (``delete`` then ``add``), never the index
PGVectorStore          ``get(ids, where=filter, include=[...])``, the search's filter clause;
                       writes whole rows back with ``add_embeddings`` (its only public write),
                       texts and vectors as read, four calls at once (it commits row by row)
Chroma                 ``get(ids, where=filter, where_document=..., include=[...])``; writes the
                       link keys alone with its collection's ``update``, which merges them
QdrantVectorStore      ``client.scroll`` with the search's ``filter`` and a ``HasIdCondition``;
                       writes ``batch_update_points`` (``SetPayload``, ``DeletePayload``)
any other store        ``get_by_ids``, without vectors, and with no filter it can apply; it
                       cannot be listed
=====================  ==========================================================================

SCAR opens no connection of its own: every read and write goes through the store.
``docs/stores.md`` has the matrix; :mod:`scar_langchain._access` the allow-lists.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore

from scar_core._errors import warn_once
from scar_langchain import _compat
from scar_langchain._access import (
    PAGE,
    Change,
    Form,
    ListedRow,
    Rows,
    StoreAccess,
    a_dict,
    as_rows,
    batches,
    diff,
    merged,
)

__all__ = ["StoreAccess", "access_for"]

#: Chunks per ``scroll`` when listing (local Qdrant sorts every id on each call).
_QDRANT_PAGE = 16384
#: Concurrent ``add_embeddings`` calls (PGVectorStore commits each row on its own).
_PG_WRITERS = 4
_GET_INCLUDE = ["documents", "metadatas", "embeddings"]


def _point_id(chunk_id: str) -> int | str:
    """A Qdrant point id (integer ids come back from metadata links as digit strings)."""
    return int(chunk_id) if chunk_id.isdigit() else chunk_id


class _InMemory(StoreAccess):
    in_process = True
    applies = frozenset({"filter"})
    forms = (("filter", "a function of a Document (lambda doc: ... -> bool)", callable),)

    def read(self, ids: Sequence[str], search_kwargs: dict[str, Any]) -> Rows:
        rows = self.store.store
        fields = ("text", "metadata", "vector")
        found = as_rows((i, *(rows[i][field] for field in fields)) for i in ids if i in rows)
        allowed = search_kwargs.get("filter")  # the search calls it on a Document, as here
        return found if allowed is None else {i: f for i, f in found.items() if allowed(f[0])}

    def listing(
        self, keys: Sequence[str], texts: bool = False
    ) -> tuple[int, Iterator[list[ListedRow]]]:
        rows = self.store.store
        return len(rows), batches(((i, r["metadata"], r["text"]) for i, r in rows.items()), PAGE)

    def _write(self, changes: list[Change]) -> None:
        for chunk_id, _, links in changes:
            row = self.store.store[chunk_id]
            row["metadata"] = merged(row["metadata"], links)


class _Faiss(StoreAccess):
    in_process = True
    applies = frozenset({"filter"})
    forms = (
        (
            "filter",
            "a dict of metadata conditions or a function of a chunk's metadata",
            lambda value: isinstance(value, dict) or callable(value),
        ),
    )
    _row_of: tuple[int, int, dict[str, int]] = (0, -1, {})  # (mapping's id, size, id -> row)

    def read(self, ids: Sequence[str], search_kwargs: dict[str, Any]) -> Rows:
        mapping: dict[int, str] = self.store.index_to_docstore_id
        if self._row_of[:2] != (id(mapping), len(mapping)):  # chunks were added or deleted
            self._row_of = (id(mapping), len(mapping), {c: row for row, c in mapping.items()})
        rows = self._row_of[2]
        documents = {i: self.store.docstore.search(i) for i in ids if i in rows}
        found = [i for i, d in documents.items() if isinstance(d, Document)]
        if search_kwargs.get("filter") is not None:  # FAISS's own evaluation of its filter
            allowed = _compat.faiss_filter(self.store, search_kwargs["filter"])
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

    def listing(
        self, keys: Sequence[str], texts: bool = False
    ) -> tuple[int, Iterator[list[ListedRow]]]:
        ids = self.store.index_to_docstore_id.values()
        found = ((i, self.store.docstore.search(i)) for i in ids)
        rows = ((i, d.metadata, d.page_content) for i, d in found if not isinstance(d, str))
        return len(ids), batches(rows, PAGE)

    def _write(self, changes: list[Change]) -> None:
        docstore, documents = self.store.docstore, {}
        for chunk_id, _, links in changes:
            document = docstore.search(chunk_id)
            metadata = merged(document.metadata, links)
            documents[chunk_id] = document.model_copy(update={"metadata": metadata})
        docstore.delete(list(documents))  # the docstore's add refuses ids it holds
        docstore.add(documents)


def _from_get(result: dict[str, Any]) -> Rows:
    """``Rows`` from a ``get`` result; pgvector gives vectors as text (of float32 values)."""
    return as_rows(
        (i, text, meta, np.asarray(json.loads(v), np.float32) if isinstance(v, str) else v)
        for i, text, meta, v in zip(*(result[k] for k in ["ids", *_GET_INCLUDE]), strict=True)
    )


class _ByGet(StoreAccess):
    """What Chroma and PGVectorStore share: ``get`` by ids, and ``get`` to list them."""

    def _where(self, search_kwargs: dict[str, Any]) -> dict[str, Any]:
        """The ``get`` arguments that restrict a read as ``search_kwargs`` restrict the search."""
        raise NotImplementedError

    def read(self, ids: Sequence[str], search_kwargs: dict[str, Any]) -> Rows:
        where = self._where(search_kwargs)
        return _from_get(self.store.get(ids=list(ids), include=_GET_INCLUDE, **where))

    def listing(
        self, keys: Sequence[str], texts: bool = False
    ) -> tuple[int, Iterator[list[ListedRow]]]:
        ids = self.store.get(include=[])["ids"]
        include = ["metadatas", "documents"] if texts else ["metadatas"]

        def pages() -> Iterator[list[ListedRow]]:
            for batch in batches(ids, PAGE):
                got = self.store.get(ids=batch, include=include)
                read = got["documents"] if texts else [None] * len(got["ids"])
                rows = zip(got["ids"], got["metadatas"], read, strict=True)
                yield [(str(i), m or {}, t) for i, m, t in rows]

        return len(ids), pages()


class _Chroma(_ByGet):
    applies = frozenset({"filter", "where_document"})
    forms: tuple[Form, ...] = (a_dict("filter"), a_dict("where_document"))

    def _where(self, search_kwargs: dict[str, Any]) -> dict[str, Any]:
        where = {"where": search_kwargs.get("filter")}
        return where | {"where_document": search_kwargs.get("where_document")}

    @property
    def batch_size(self) -> int:
        """At most the client's max batch size."""
        return _compat.chroma_max_batch_size(self.store)

    def _write(self, changes: list[Change]) -> None:
        # ``update`` merges metadata into what the chunk holds; a None value removes a key.
        metadatas = []
        for _, old, new in changes:
            values, gone = diff(old, new)
            metadatas.append(values | dict.fromkeys(gone))
        collection = _compat.chroma_collection(self.store)
        collection.update(ids=[i for i, _, _ in changes], metadatas=metadatas)


class _PGVector(_ByGet):
    """``get`` by ids; its ``where`` takes the search's ``filter`` through the same clause builder.

    A link can name an id the table's id column cannot hold (``"not-a-uuid"`` in a ``UUID``
    column): PostgreSQL then refuses the whole read with a data error. The ids it refuses, each
    asked alone (PostgreSQL, not SCAR, judges what the column holds), count as missing, are
    remembered, and are warned about once.
    """

    applies = frozenset({"filter"})
    forms: tuple[Form, ...] = (a_dict("filter"),)

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
        try:
            return super().read(wanted, search_kwargs)
        except Exception as error:
            if not _data_error(error):
                raise
            if not self._refuse([i for i in wanted if not self._holds(i)], error):
                raise
        return self.read(wanted, search_kwargs)  # again, without the ids the column refused

    async def aread(self, ids: Sequence[str], search_kwargs: dict[str, Any]) -> Rows:
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
            "missing. Relink the chunks with scar_langchain._link_store(vectorstore), which "
            "writes links naming the ids the store holds.",
            stacklevel=2,
        )
        return True

    def _write(self, changes: list[Change]) -> None:
        # add_embeddings commits row by row: a few calls at once keep the database busy.
        links = {chunk_id: new for chunk_id, _, new in changes}
        parts = batches(links, -(-len(links) // _PG_WRITERS))
        with ThreadPoolExecutor(_PG_WRITERS) as pool:
            list(pool.map(self._rewrite, [{i: links[i] for i in part} for part in parts]))

    def _rewrite(self, links: dict[str, tuple[Any, ...]]) -> None:
        """Read these chunks' rows whole, and upsert them with their new links."""
        got = self.store.get(ids=list(links), include=_GET_INCLUDE)
        ids = [str(i) for i in got["ids"]]
        self.store.add_embeddings(
            got["documents"],
            [
                json.loads(v) if isinstance(v, str) else list(map(float, v))
                for v in got["embeddings"]
            ],
            metadatas=[
                merged(m or {}, links[i]) for i, m in zip(ids, got["metadatas"], strict=True)
            ],
            ids=ids,
        )


def _data_error(error: Exception) -> bool:
    """Whether PostgreSQL refused a value (SQLSTATE class 22, which SQLAlchemy calls DataError)."""
    try:
        from sqlalchemy.exc import DataError
    except ImportError:  # not a PostgreSQL store
        return False
    return isinstance(error, DataError)


def _qdrant_filter(value: Any) -> bool:
    from qdrant_client import models

    return isinstance(value, models.Filter)


class _Qdrant(StoreAccess):
    """``scroll`` over the points that have one of the ids and match the search's ``filter``."""

    applies = frozenset({"filter"})
    forms = (("filter", "a qdrant_client.models.Filter", _qdrant_filter),)

    def read(self, ids: Sequence[str], search_kwargs: dict[str, Any]) -> Rows:
        from qdrant_client import models

        conditions: list[Any] = [models.HasIdCondition(has_id=[_point_id(i) for i in ids])]
        if search_kwargs.get("filter") is not None:  # a models.Filter, as the search takes it
            conditions.append(search_kwargs["filter"])
        store = self.store
        points, _ = store.client.scroll(
            store.collection_name,
            scroll_filter=models.Filter(must=conditions),
            limit=len(ids),
            with_payload=True,
            with_vectors=[store.vector_name],
        )
        rows = []
        for point in points:  # with the metadata keys the store's search adds to its hits
            payload, vector = point.payload or {}, point.vector
            metadata = dict(payload.get(store.metadata_payload_key) or {})
            metadata |= {"_id": point.id, "_collection_name": store.collection_name}
            vector = vector.get(store.vector_name) if isinstance(vector, dict) else vector
            rows.append((point.id, payload.get(store.content_payload_key), metadata, vector))
        return as_rows(rows)

    def listing(
        self, keys: Sequence[str], texts: bool = False
    ) -> tuple[int, Iterator[list[ListedRow]]]:
        client, name = self.store.client, self.store.collection_name
        key, content = self.store.metadata_payload_key, self.store.content_payload_key
        # Only the metadata keys asked for (all the metadata if a key needs quoting).
        simple = all(k.isidentifier() for k in keys)
        payload = [f"{key}.{k}" for k in keys] if simple else [key]
        payload += [content] if texts else []

        def pages() -> Iterator[list[ListedRow]]:
            offset = None
            while True:
                points, offset = client.scroll(
                    name,
                    limit=_QDRANT_PAGE,
                    offset=offset,
                    with_payload=payload,
                    with_vectors=False,
                )
                yield [
                    (str(p.id), (p.payload or {}).get(key) or {}, (p.payload or {}).get(content))
                    for p in points
                ]
                if offset is None:
                    return

        return client.count(name, exact=True).count, pages()

    def _write(self, changes: list[Change]) -> None:
        from qdrant_client import models

        key, operations = self.store.metadata_payload_key, list[models.UpdateOperation]()
        for chunk_id, old, new in changes:
            point: list[models.ExtendedPointId] = [_point_id(chunk_id)]
            values, gone = diff(old, new)
            operations.append(
                models.SetPayloadOperation(
                    set_payload=models.SetPayload(payload=values, points=point, key=key)
                )
            )
            if gone:
                keys = [f"{key}.{k}" for k in gone]
                operations.append(
                    models.DeletePayloadOperation(
                        delete_payload=models.DeletePayload(keys=keys, points=point)
                    )
                )
        self.store.client.batch_update_points(self.store.collection_name, operations)


#: The class of each store SCAR knows, by package and class name (a subclass is served by its
#: nearest known base; ``InMemoryVectorStore`` only by exact type, as a subclass may keep its
#: rows elsewhere).
_ACCESS: dict[str, type[StoreAccess]] = {
    "langchain_community.FAISS": _Faiss,
    "langchain_postgres.PGVectorStore": _PGVector,
    "langchain_chroma.Chroma": _Chroma,
    "langchain_qdrant.QdrantVectorStore": _Qdrant,
}


def access_for(store: VectorStore) -> StoreAccess:
    """Return the class for ``store``'s type: the most direct public way to its chunks."""
    if type(store) is InMemoryVectorStore:
        return _InMemory(store)
    for cls in type(store).__mro__:
        access = _ACCESS.get(f"{cls.__module__.split('.')[0]}.{cls.__name__}")
        if access is not None:
            return access(store)
    return StoreAccess(store)
