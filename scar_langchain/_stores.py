"""How SCAR reads, lists and writes each LangChain vector store's chunks, and what it applies.

:func:`access_for` picks one class per store. ``read(ids, search_kwargs)`` returns, in one call,
the chunks among ``ids`` that the store holds and that its search, given the same arguments,
could return, with their vectors; ``listing`` and ``write`` serve ``link_store``. Each class's
``applies`` is its allow-list. Every read and write goes through the store's own API.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

import numpy as np
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore

from scar_core._errors import InvalidSettingsError, warn_once
from scar_langchain import _compat
from scar_langchain._links import link_changes, merged_links

#: What a read returns: ``{chunk id: (document, stored vector or None)}``.
Rows = dict[str, tuple[Document, Any]]
#: ``(chunk id, metadata, text)`` of a listed chunk (the text ``None`` when not asked for).
ListedRow = tuple[str, dict[str, Any], str | None]
#: How many chunks a store holds, and their rows, a page at a time.
Listing = tuple[int, Iterator[list[ListedRow]]]
#: A write: ``(chunk id, links before, links after)``, each in the order of ``LINK_KEYS``.
Change = tuple[str, tuple[Any, ...], tuple[Any, ...]]
#: Search arguments that change how a search ranks or how many hits it fetches, never which
#: chunks it may return.
NOT_RESTRICTING = frozenset(
    {"fetch_k", "score_threshold", "search_params", "consistency", "offset", "lambda_mult"}
)
#: Search arguments that restrict a search on the stores SCAR has a class for.
RESTRICTING = frozenset({"filter", "where_document"})
#: A search argument's form: in words, and a test of a value.
Form = tuple[str, Callable[[Any], bool]]
_DICT: Form = ("a dict, as the store's search takes it", lambda value: isinstance(value, dict))
PAGE = 1024  # chunks per listed page and per write
_QDRANT_PAGE = 16384  # chunks per listing scroll (local Qdrant sorts every id on each call)
_PG_WRITERS = 4  # concurrent add_embeddings calls (PGVectorStore commits each row on its own)
_GET_INCLUDE = ["documents", "metadatas", "embeddings"]


def _rows(found: Iterable[tuple[Any, str | None, dict[str, Any] | None, Any]]) -> Rows:
    return {
        str(i): (Document(text or "", id=str(i), metadata=m or {}), v) for i, text, m, v in found
    }


def _batches(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    iterator = iter(items)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


class StoreAccess:
    """Reads any other store through ``get_by_ids``, without vectors or filter; cannot list."""

    in_process = False  # reads are in-process lookups, answered without a worker thread
    #: The search arguments this class applies to every read as the search does (the
    #: allow-list), each with the form it must have (``None`` always means "not given").
    applies: ClassVar[dict[str, Form]] = {}

    def __init__(self, store: VectorStore) -> None:
        self.store: Any = store

    def read(self, ids: Sequence[str], search_kwargs: dict[str, Any]) -> Rows:
        """Return ``{id: (document, vector or None)}`` for the ids the store holds."""
        return {d.id: (d, None) for d in self.store.get_by_ids(list(ids)) if d.id}

    async def aread(self, ids: Sequence[str], search_kwargs: dict[str, Any]) -> Rows:
        """Async :meth:`read`: the store's async API where it has one, else a worker thread."""
        if self.in_process:
            return self.read(ids, search_kwargs)
        if type(self) is StoreAccess:
            return {d.id: (d, None) for d in await self.store.aget_by_ids(list(ids)) if d.id}
        return await asyncio.to_thread(self.read, ids, search_kwargs)

    def listing(self, keys: Sequence[str], texts: bool = False) -> Listing:
        """Return how many chunks the store holds, and their rows, a page at a time.

        ``keys`` are the metadata keys the caller reads, ``texts`` whether it reads texts too.
        """
        raise InvalidSettingsError(
            f"SCAR cannot list the chunks of a {type(self.store).__name__}, so it cannot link "
            "them in place; index them with scar_langchain.link_chunks(...) instead, or use a "
            "store SCAR can list (InMemory, FAISS, PGVector, Chroma, Qdrant)."
        )

    def write(self, changes: Iterable[Change]) -> int:
        """Write new links, a batch per call; return how many chunks it wrote."""
        written = 0
        for batch in _batches(changes, self._batch_size()):
            self._write(batch)
            written += len(batch)
        return written

    def _batch_size(self) -> int:
        return PAGE

    def _write(self, changes: list[Change]) -> None:
        raise NotImplementedError  # listing() refuses first


class _InMemory(StoreAccess):
    """Its ``store`` dict; ``filter`` called on a Document, as its search calls it."""

    in_process = True
    applies: ClassVar[dict[str, Form]] = {
        "filter": ("a function of a Document (lambda doc: ... -> bool)", callable)
    }

    def read(self, ids: Sequence[str], search_kwargs: dict[str, Any]) -> Rows:
        rows = self.store.store
        fields = ("text", "metadata", "vector")
        found = _rows((i, *(rows[i][field] for field in fields)) for i in ids if i in rows)
        allowed = search_kwargs.get("filter")
        return found if allowed is None else {i: f for i, f in found.items() if allowed(f[0])}

    def listing(self, keys: Sequence[str], texts: bool = False) -> Listing:
        rows = self.store.store
        return len(rows), _batches(((i, r["metadata"], r["text"]) for i, r in rows.items()), PAGE)

    def _write(self, changes: list[Change]) -> None:
        for chunk_id, _, links in changes:
            row = self.store.store[chunk_id]
            row["metadata"] = merged_links(row["metadata"], links)


class _Faiss(StoreAccess):
    """The docstore, vectors by ``reconstruct_batch``, ``filter`` by FAISS's own test."""

    in_process = True
    applies: ClassVar[dict[str, Form]] = {
        "filter": (
            "a dict of metadata conditions or a function of a chunk's metadata",
            lambda value: isinstance(value, dict) or callable(value),
        )
    }
    _row_of: tuple[int, int, dict[str, int]] = (0, -1, {})  # (mapping's id, size, id -> row)

    def read(self, ids: Sequence[str], search_kwargs: dict[str, Any]) -> Rows:
        mapping: dict[int, str] = self.store.index_to_docstore_id
        if self._row_of[:2] != (id(mapping), len(mapping)):  # chunks were added or deleted
            self._row_of = (id(mapping), len(mapping), {c: row for row, c in mapping.items()})
        rows = self._row_of[2]
        documents = {i: self.store.docstore.search(i) for i in ids if i in rows}
        found = [i for i, d in documents.items() if isinstance(d, Document)]
        if search_kwargs.get("filter") is not None:
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
                stacklevel=5,
            )
            vectors = [None] * len(found)
        return {  # the docstore's own Documents, unchanged where they carry their id
            i: (d if d.id == i else Document(d.page_content, id=i, metadata=d.metadata), v)
            for i, v in zip(found, vectors, strict=True)
            if (d := documents[i]) is not None
        }

    def listing(self, keys: Sequence[str], texts: bool = False) -> Listing:
        ids = self.store.index_to_docstore_id.values()
        found = ((i, self.store.docstore.search(i)) for i in ids)
        rows = ((i, d.metadata, d.page_content) for i, d in found if not isinstance(d, str))
        return len(ids), _batches(rows, PAGE)

    def _write(self, changes: list[Change]) -> None:
        docstore, documents = self.store.docstore, {}
        for chunk_id, _, links in changes:
            document = docstore.search(chunk_id)
            metadata = merged_links(document.metadata, links)
            documents[chunk_id] = document.model_copy(update={"metadata": metadata})
        docstore.delete(list(documents))  # the docstore's add refuses ids it holds
        docstore.add(documents)


def _from_get(result: dict[str, Any]) -> Rows:
    """``Rows`` from a ``get`` result; pgvector gives vectors as text (of float32 values)."""
    return _rows(
        (i, text, meta, np.asarray(json.loads(v), np.float32) if isinstance(v, str) else v)
        for i, text, meta, v in zip(*(result[k] for k in ["ids", *_GET_INCLUDE]), strict=True)
    )


class _ByGet(StoreAccess):
    """What Chroma and PGVectorStore share: ``get`` by ids with the search's ``where``."""

    def _where(self, search_kwargs: dict[str, Any]) -> dict[str, Any]:
        return {"where": search_kwargs.get("filter")}

    def read(self, ids: Sequence[str], search_kwargs: dict[str, Any]) -> Rows:
        where = self._where(search_kwargs)
        return _from_get(self.store.get(ids=list(ids), include=_GET_INCLUDE, **where))

    def listing(self, keys: Sequence[str], texts: bool = False) -> Listing:
        ids = self.store.get(include=[])["ids"]
        include = ["metadatas", "documents"] if texts else ["metadatas"]

        def pages() -> Iterator[list[ListedRow]]:
            for batch in _batches(ids, PAGE):
                got = self.store.get(ids=batch, include=include)
                read = got["documents"] if texts else [None] * len(got["ids"])
                rows = zip(got["ids"], got["metadatas"], read, strict=True)
                yield [(str(i), m or {}, t) for i, m, t in rows]

        return len(ids), pages()


class _Chroma(_ByGet):
    """Writes the link keys alone with its collection's ``update``, which merges them."""

    applies: ClassVar[dict[str, Form]] = {"filter": _DICT, "where_document": _DICT}

    def _where(self, search_kwargs: dict[str, Any]) -> dict[str, Any]:
        return super()._where(search_kwargs) | {
            "where_document": search_kwargs.get("where_document")
        }

    def _batch_size(self) -> int:
        return _compat.chroma_max_batch_size(self.store)

    def _write(self, changes: list[Change]) -> None:
        metadatas = []  # a None value removes a key
        for _, old, new in changes:
            values, gone = link_changes(old, new)
            metadatas.append(values | dict.fromkeys(gone))
        collection = _compat.chroma_collection(self.store)
        collection.update(ids=[i for i, _, _ in changes], metadatas=metadatas)


class _PGVector(_ByGet):
    """Writes whole rows back with ``add_embeddings`` (its only public write), as read.

    A link can name an id the id column cannot hold (``"not-a-uuid"`` in a ``UUID`` column), and
    PostgreSQL then refuses the whole read with a data error: the ids it refuses when asked
    alone count as missing from then on, and are warned about once.
    """

    applies: ClassVar[dict[str, Form]] = {"filter": _DICT}

    def __init__(self, store: VectorStore) -> None:
        super().__init__(store)
        self.refused: set[str] = set()

    def read(self, ids: Sequence[str], search_kwargs: dict[str, Any]) -> Rows:
        wanted = [i for i in ids if i not in self.refused]
        if not wanted:
            return {}
        try:
            return super().read(wanted, search_kwargs)
        except Exception as error:
            if not _data_error(error) or not (refused := [i for i in wanted if not self._holds(i)]):
                raise  # not about the ids (a filter comparing other types, say)
            self._refuse(refused, error)
        return self.read(wanted, search_kwargs)  # again, without the ids the column refused

    async def aread(self, ids: Sequence[str], search_kwargs: dict[str, Any]) -> Rows:
        wanted = [i for i in ids if i not in self.refused]
        if not wanted:
            return {}
        where = self._where(search_kwargs)
        try:
            return _from_get(await self.store.aget(ids=wanted, include=_GET_INCLUDE, **where))
        except Exception as error:
            if not _data_error(error) or not (
                refused := [i for i in wanted if not await self._aholds(i)]
            ):
                raise
            self._refuse(refused, error)
        return await self.aread(wanted, search_kwargs)

    def _holds(self, chunk_id: str) -> bool:
        """Whether the id column can hold ``chunk_id``: PostgreSQL's answer to a read of it."""
        try:
            self.store.get(ids=[chunk_id], include=[])
        except Exception as error:
            if _data_error(error):
                return False
            raise
        return True

    async def _aholds(self, chunk_id: str) -> bool:
        try:
            await self.store.aget(ids=[chunk_id], include=[])
        except Exception as error:
            if _data_error(error):
                return False
            raise
        return True

    def _refuse(self, refused: list[str], error: Exception) -> None:
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

    def _write(self, changes: list[Change]) -> None:
        links = {chunk_id: new for chunk_id, _, new in changes}
        parts = _batches(links, -(-len(links) // _PG_WRITERS))
        with ThreadPoolExecutor(_PG_WRITERS) as pool:
            list(pool.map(self._rewrite, [{i: links[i] for i in part} for part in parts]))

    def _rewrite(self, links: dict[str, tuple[Any, ...]]) -> None:
        got = self.store.get(ids=list(links), include=_GET_INCLUDE)
        ids = [str(i) for i in got["ids"]]
        self.store.add_embeddings(
            got["documents"],
            [
                json.loads(v) if isinstance(v, str) else list(map(float, v))
                for v in got["embeddings"]
            ],
            metadatas=[
                merged_links(m or {}, links[i]) for i, m in zip(ids, got["metadatas"], strict=True)
            ],
            ids=ids,
        )


def _data_error(error: Exception) -> bool:
    """Whether PostgreSQL refused a value (SQLSTATE class 22, which SQLAlchemy calls DataError)."""
    from sqlalchemy.exc import DataError  # langchain-postgres's own dependency

    return isinstance(error, DataError)


def _qdrant_filter(value: Any) -> bool:
    from qdrant_client import models

    return isinstance(value, models.Filter)


def _point_id(chunk_id: str) -> int | str:
    """A Qdrant point id (integer ids come back from metadata links as digit strings)."""
    return int(chunk_id) if chunk_id.isdigit() else chunk_id


class _Qdrant(StoreAccess):
    """``scroll`` over the points with one of the ids that match the search's ``filter``."""

    applies: ClassVar[dict[str, Form]] = {
        "filter": ("a qdrant_client.models.Filter", _qdrant_filter)
    }

    def read(self, ids: Sequence[str], search_kwargs: dict[str, Any]) -> Rows:
        from qdrant_client import models

        conditions: list[Any] = [models.HasIdCondition(has_id=[_point_id(i) for i in ids])]
        if search_kwargs.get("filter") is not None:
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
        return _rows(rows)

    def listing(self, keys: Sequence[str], texts: bool = False) -> Listing:
        client, name = self.store.client, self.store.collection_name
        key, content = self.store.metadata_payload_key, self.store.content_payload_key
        simple = all(k.isidentifier() for k in keys)  # else all the metadata
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
            values, gone = link_changes(old, new)
            set_payload = models.SetPayload(payload=values, points=point, key=key)
            operations.append(models.SetPayloadOperation(set_payload=set_payload))
            if gone:
                delete = models.DeletePayload(keys=[f"{key}.{k}" for k in gone], points=point)
                operations.append(models.DeletePayloadOperation(delete_payload=delete))
        self.store.client.batch_update_points(self.store.collection_name, operations)


#: Each store's class, by package and class name; a subclass is served by its nearest known base
#: (``InMemoryVectorStore`` only by exact type: a subclass may keep its rows elsewhere).
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
