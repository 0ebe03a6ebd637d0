"""``link_store``: link the chunks already in a vector store, in place, without re-embedding.

:func:`link_store` pages through a store's chunks, keeping only a few facts per chunk (its id,
document, order values and current links), orders each document's chunks, then writes SCAR's
four link keys (``scar_document_id``, ``scar_position``, ``scar_prev_id``, ``scar_next_id``) into
the chunks whose links changed, in batches, through each store's own API:

- ``InMemoryVectorStore``: reads and writes the ``metadata`` of its ``store`` dict's rows.
- FAISS: reads ``docstore.search``; writes ``docstore.delete`` then ``docstore.add`` (the index,
  and so the vectors, are never touched).
- Chroma: lists ids with ``get(include=[])``, reads ``get(ids, include=["metadatas"])`` a page at
  a time; writes ``collection.update(ids, metadatas)`` with the link keys alone (Chroma merges
  them into the chunk's metadata), at most ``client.get_max_batch_size()`` chunks a call.
- ``QdrantVectorStore``: reads ``client.scroll`` with only the metadata keys it needs, no
  vectors; writes ``client.batch_update_points`` with a ``SetPayload`` under the metadata key
  per chunk (other payload keys are kept), and a ``DeletePayload`` for a link that went away.
- ``PGVectorStore``: reads as Chroma. Its only public write is ``add_embeddings``, an upsert of
  whole rows (text, vector, metadata), so for the changed chunks alone, a page at a time,
  link_store reads the rows (``get(ids, include=["documents", "metadatas", "embeddings"])``) and
  writes them back with the new link keys; texts and vectors go back as read, and PostgreSQL
  stores them unchanged. As ``add_embeddings`` commits row by row, four calls run at once.

SCAR opens no connection of its own: every read and write goes through the store.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from langchain_core.vectorstores import InMemoryVectorStore, VectorStore

from scar_core.errors import DataFormatError, InvalidSettingsError
from scar_langchain.links import DOCUMENT_ID_KEY, NEXT_ID_KEY, POSITION_KEY, PREVIOUS_ID_KEY

__all__ = ["PAGE_KEYS", "LinkReport", "link_store"]

#: The keys link_store writes, in this order in a ``Links`` tuple.
LINK_KEYS = (DOCUMENT_ID_KEY, POSITION_KEY, PREVIOUS_ID_KEY, NEXT_ID_KEY)
#: Metadata keys that split a document into pages or sections (PyPDFLoader writes ``"page"``,
#: Unstructured ``"page_number"``). Chunks carrying one that ``order_key`` does not name are
#: checked: if ordering by ``order_key`` alone would interleave pages, link_store refuses.
PAGE_KEYS = ("page", "page_number", "section")
#: Chunks per read and per write (Chroma writes at most its client's max batch size).
_PAGE = 1024
#: Chunks per ``scroll`` (local Qdrant sorts every id on each call, so pages are large).
_QDRANT_PAGE = 16384
#: Concurrent ``add_embeddings`` calls (PGVectorStore commits each row on its own).
_PG_WRITERS = 4

#: A chunk's ``(document id, position, previous id, next id)``, ``None`` where absent.
Links = tuple[Any, ...]
#: ``(chunk id, metadata)`` as a store holds them.
Row = tuple[str, dict[str, Any]]
#: ``(chunk id, links before, links after)``: a write.
Change = tuple[str, Links, Links]


@dataclass
class LinkReport:
    """What :func:`link_store` did.

    Attributes:
        documents: Documents whose chunks it ordered.
        linked: Chunks that have a previous or next chunk after the run.
        changed: Chunks whose metadata it wrote (0 when the store was already linked).
        skipped: ``{chunk id: reason}`` for chunks it left unlinked (they name no document).
    """

    documents: int = 0
    linked: int = 0
    changed: int = 0
    skipped: dict[str, str] = field(default_factory=dict)


class _Chunk(NamedTuple):
    """The facts link_store keeps about one chunk while it reads the store."""

    order: tuple[float, ...]
    chunk_id: str
    links: Links
    page: tuple[str, float] | None  # (key, number) of a page key that order_key does not name


def _batches(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    iterator = iter(items)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


def _merged(metadata: dict[str, Any], links: Links) -> dict[str, Any]:
    """``metadata`` with ``links`` written: ``None`` removes a link, or leaves document/position."""
    gone = {key for key, value in zip(LINK_KEYS[2:], links[2:], strict=True) if value is None}
    kept = {key: value for key, value in metadata.items() if key not in gone}
    return kept | {
        key: value for key, value in zip(LINK_KEYS, links, strict=True) if value is not None
    }


def _diff(old: Links, new: Links) -> tuple[dict[str, Any], list[str]]:
    """The link keys to set, and the link keys to remove (links that went away)."""
    values = {key: value for key, value in zip(LINK_KEYS, new, strict=True) if value is not None}
    pairs = zip(LINK_KEYS[2:], old[2:], new[2:], strict=True)
    return values, [key for key, was, value in pairs if was is not None and value is None]


class _Linker:
    """Lists one kind of store's chunks and writes SCAR's link keys into them."""

    batch_size = _PAGE

    def __init__(self, store: Any, keys: Sequence[str]) -> None:
        self.store = store
        self.keys = keys  # the metadata keys link_store reads

    def scan(self) -> tuple[int, Iterator[list[Row]]]:
        """Return how many chunks the store holds, and their rows, a page at a time."""
        raise NotImplementedError

    def write(self, changes: list[Change]) -> None:
        """Write the new links of up to :attr:`batch_size` chunks in one call."""
        raise NotImplementedError


class _InMemoryLinker(_Linker):
    def scan(self) -> tuple[int, Iterator[list[Row]]]:
        rows = self.store.store
        return len(rows), _batches(((i, r["metadata"]) for i, r in rows.items()), _PAGE)

    def write(self, changes: list[Change]) -> None:
        for chunk_id, _, links in changes:
            row = self.store.store[chunk_id]
            row["metadata"] = _merged(row["metadata"], links)


class _FaissLinker(_Linker):
    def scan(self) -> tuple[int, Iterator[list[Row]]]:
        ids = self.store.index_to_docstore_id.values()
        found = ((i, self.store.docstore.search(i)) for i in ids)
        rows = ((i, d.metadata) for i, d in found if not isinstance(d, str))
        return len(ids), _batches(rows, _PAGE)

    def write(self, changes: list[Change]) -> None:
        docstore = self.store.docstore
        documents = {}
        for chunk_id, _, links in changes:
            document = docstore.search(chunk_id)
            metadata = _merged(document.metadata, links)
            documents[chunk_id] = document.model_copy(update={"metadata": metadata})
        docstore.delete(list(documents))  # the docstore's add refuses ids it holds
        docstore.add(documents)


class _GetLinker(_Linker):
    """Chroma and PGVectorStore: ``get`` lists ids, then reads metadata by ids, page by page."""

    def scan(self) -> tuple[int, Iterator[list[Row]]]:
        ids = self.store.get(include=[])["ids"]

        def pages() -> Iterator[list[Row]]:
            for batch in _batches(ids, _PAGE):
                got = self.store.get(ids=batch, include=["metadatas"])
                yield [(str(i), m or {}) for i, m in zip(got["ids"], got["metadatas"], strict=True)]

        return len(ids), pages()


class _ChromaLinker(_GetLinker):
    def __init__(self, store: Any, keys: Sequence[str]) -> None:
        super().__init__(store, keys)
        self.batch_size = self.store._client.get_max_batch_size()

    def write(self, changes: list[Change]) -> None:
        # ``update`` merges metadata into what the chunk holds; a None value removes a key.
        metadatas = []
        for _, old, new in changes:
            values, gone = _diff(old, new)
            metadatas.append(values | dict.fromkeys(gone))
        self.store._collection.update(ids=[i for i, _, _ in changes], metadatas=metadatas)


class _PGVectorLinker(_GetLinker):
    def write(self, changes: list[Change]) -> None:
        # add_embeddings commits row by row: a few calls at once keep the database busy.
        links = {chunk_id: new for chunk_id, _, new in changes}
        parts = _batches(links, -(-len(links) // _PG_WRITERS))
        with ThreadPoolExecutor(_PG_WRITERS) as pool:
            list(pool.map(self._rewrite, [{i: links[i] for i in part} for part in parts]))

    def _rewrite(self, links: dict[str, Links]) -> None:
        """Read these chunks' rows whole, and upsert them with their new links."""
        got = self.store.get(ids=list(links), include=["documents", "metadatas", "embeddings"])
        ids = [str(i) for i in got["ids"]]
        self.store.add_embeddings(
            got["documents"],
            [
                json.loads(v) if isinstance(v, str) else list(map(float, v))
                for v in got["embeddings"]
            ],
            metadatas=[
                _merged(m or {}, links[i]) for i, m in zip(ids, got["metadatas"], strict=True)
            ],
            ids=ids,
        )


class _QdrantLinker(_Linker):
    def scan(self) -> tuple[int, Iterator[list[Row]]]:
        client, name = self.store.client, self.store.collection_name
        key = self.store.metadata_payload_key
        # Only the metadata keys link_store reads (all the metadata if a key needs quoting).
        simple = all(k.isidentifier() for k in self.keys)
        payload = [f"{key}.{k}" for k in self.keys] if simple else [key]

        def pages() -> Iterator[list[Row]]:
            offset = None
            while True:
                points, offset = client.scroll(
                    name,
                    limit=_QDRANT_PAGE,
                    offset=offset,
                    with_payload=payload,
                    with_vectors=False,
                )
                yield [(str(p.id), (p.payload or {}).get(key) or {}) for p in points]
                if offset is None:
                    return

        return client.count(name, exact=True).count, pages()

    def write(self, changes: list[Change]) -> None:
        from qdrant_client import models

        key, operations = self.store.metadata_payload_key, list[models.UpdateOperation]()
        for chunk_id, old, new in changes:
            point: list[models.ExtendedPointId] = [
                int(chunk_id) if chunk_id.isdigit() else chunk_id
            ]
            values, gone = _diff(old, new)
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


_LINKERS: dict[str, type[_Linker]] = {
    "langchain_community.FAISS": _FaissLinker,
    "langchain_postgres.PGVectorStore": _PGVectorLinker,
    "langchain_chroma.Chroma": _ChromaLinker,
    "langchain_qdrant.QdrantVectorStore": _QdrantLinker,
}


def _linker_for(store: VectorStore, keys: Sequence[str]) -> _Linker:
    if type(store) is InMemoryVectorStore:  # a subclass may keep its rows elsewhere
        return _InMemoryLinker(store, keys)
    for cls in type(store).__mro__:
        linker = _LINKERS.get(f"{cls.__module__.split('.')[0]}.{cls.__name__}")
        if linker is not None:
            return linker(store, keys)
    raise InvalidSettingsError(
        f"SCAR cannot list the chunks of a {type(store).__name__}, so it cannot link them in "
        "place; index them with scar_langchain.link_chunks(...) instead, or use a store SCAR "
        "can list (InMemory, FAISS, PGVector, Chroma, Qdrant)."
    )


def _order(chunk_id: str, metadata: dict[str, Any], keys: tuple[str, ...]) -> tuple[float, ...]:
    values: tuple[Any, ...] = tuple(metadata.get(key) for key in keys)
    for key, value in zip(keys, values, strict=True):
        if not _number(value):
            raise DataFormatError(
                f"chunk {chunk_id!r} has no numeric metadata[{key!r}] (it holds {value!r}), so "
                "link_store cannot order it; split with add_start_index=True (LangChain's "
                "splitters then write 'start_index'), or pass order_key=... naming the numeric "
                "key, or keys, that order chunks."
            )
    return values


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value


def _check_order(document_id: str, chunks: list[_Chunk], keys: tuple[str, ...]) -> None:
    """Refuse an ambiguous order: pages that ``keys`` would interleave, or equal order values."""
    named = f"metadata[{keys[0]!r}]" if len(keys) == 1 else f"metadata{list(keys)}"
    paged = sorted((c.page[1], c.order, c.page[0]) for c in chunks if c.page is not None)
    if len(paged) == len(chunks):  # each chunk names its page: page by page, is keys' order kept?
        for (_, a, key), (_, b, _) in itertools.pairwise(paged):
            if b < a:
                raise DataFormatError(
                    f"the chunks of document {document_id!r} carry metadata[{key!r}], and "
                    f"ordering them by {named} alone would interleave its pages ({named} "
                    f"restarts on each page); pass order_key=({key!r}, "
                    f"{', '.join(map(repr, keys))})."
                )
    for first, second in itertools.pairwise(chunks):
        if first.order == second.order:
            value = first.order[0] if len(keys) == 1 else first.order
            raise DataFormatError(
                f"chunks {first.chunk_id!r} and {second.chunk_id!r} of document "
                f"{document_id!r} share {named}={value!r}, so their order is unknown; pass "
                "order_key=(...) with a key that tells them apart, such as ('page', "
                "'start_index'), or document_key=... naming a finer document."
            )


class _NoBar:
    def update(self, count: int) -> None:
        """Count nothing: no progress bar."""

    def close(self) -> None:
        """Close nothing."""


def _progress(show: bool, total: int | None, description: str) -> Any:
    """A tqdm bar when ``show`` and tqdm is installed (the ``eval`` extra), else a no-op bar."""
    if show:
        try:
            from tqdm.auto import tqdm
        except ImportError:
            pass
        else:
            return tqdm(total=total, desc=description, unit="chunk")
    return _NoBar()


def link_store(
    vectorstore: VectorStore,
    *,
    document_key: str = "source",
    order_key: str | Sequence[str] = "start_index",
    progress: bool = False,
) -> LinkReport:
    """Write previous/next links into the metadata of the chunks a store already holds.

    For stores indexed without :func:`~scar_langchain.link_chunks`, and to migrate stores linked
    with an older id scheme. Chunks are grouped by ``metadata[document_key]`` and ordered by
    ``metadata[order_key]`` (a tuple of keys is compared in order). Each gets the metadata
    ``link_chunks`` writes (document id, position, previous and next ids), the ids being the
    chunks' existing store ids, so afterwards every link names a chunk the store holds. As in
    ``link_chunks``, the chain is cut where the last order key does not increase (where
    ``start_index`` restarts on a new page), so each page is linked on its own.

    Only SCAR's four link keys change; texts, vectors and other metadata keys stay as they
    are. Only chunks whose links changed are written, in batches (a re-run writes nothing).
    Memory grows with the number of chunks by a few hundred bytes each (their ids, order values
    and links); texts and vectors are never read, except for the chunks ``PGVectorStore``
    rewrites (see the module docstring). Chunks without ``metadata[document_key]`` are listed in
    the report and keep their metadata, less any link naming a chunk the store does not hold.

    The order in a document must be unambiguous, or link_store refuses before writing anything:
    two chunks of a document may not share an order value, and if a document's chunks carry a
    page key (:data:`PAGE_KEYS`) that ``order_key`` does not name, ordering them by
    ``order_key`` alone must not interleave their pages. A PDF split with ``start_index``
    (which restarts on each page) therefore needs ``order_key=("page", "start_index")``; the
    error says so, rather than link_store guessing a key whose meaning it cannot know.

    Args:
        vectorstore: An ``InMemoryVectorStore``, FAISS, ``PGVectorStore``, Chroma or
            ``QdrantVectorStore`` (stores SCAR can list).
        document_key: Metadata key naming each chunk's document (loaders write ``"source"``).
        order_key: Numeric metadata key, or tuple of keys, ordering chunks inside a document
            (splitters write ``"start_index"`` when created with ``add_start_index=True``).
        progress: Show tqdm progress bars (when tqdm is installed).

    Returns:
        What was linked and written, and the chunks skipped, with reasons.

    Raises:
        InvalidSettingsError: If SCAR cannot list the store's chunks (the message names it), or
            ``order_key`` names no key.
        DataFormatError: If a chunk with a document has no numeric order value, or the order
            inside a document is ambiguous (the message names the document and the fix).
    """
    keys = (order_key,) if isinstance(order_key, str) else tuple(order_key)
    if not keys or not all(isinstance(key, str) and key for key in keys):
        raise InvalidSettingsError(
            f"order_key={order_key!r} must be a metadata key or a tuple of them, such as "
            "'start_index' or ('page', 'start_index')."
        )
    page_keys = [key for key in PAGE_KEYS if key not in keys]
    linker = _linker_for(vectorstore, [document_key, *keys, *page_keys, *LINK_KEYS])
    report = LinkReport()
    documents: dict[str, list[_Chunk]] = {}
    unlisted: list[tuple[str, Links]] = []  # chunks without a document that carry links
    total, pages = linker.scan()
    bar = _progress(progress, total, "link_store: reading")
    for page in pages:
        for chunk_id, metadata in page:
            links = tuple(metadata.get(key) for key in LINK_KEYS)
            document = metadata.get(document_key)
            if document is None or document == "":
                report.skipped[chunk_id] = f"no metadata[{document_key!r}] names its document"
                if links[2] is not None or links[3] is not None:
                    unlisted.append((chunk_id, links))
                continue
            paged = next(((k, metadata[k]) for k in page_keys if _number(metadata.get(k))), None)
            chunk = _Chunk(_order(chunk_id, metadata, keys), chunk_id, links, paged)
            documents.setdefault(str(document), []).append(chunk)
        bar.update(len(page))
    for document_id, chunks in documents.items():
        chunks.sort(key=lambda chunk: chunk.order)
        _check_order(document_id, chunks, keys)
    bar.close()
    report.documents = len(documents)

    def changes() -> Iterator[Change]:
        for document_id, chunks in documents.items():
            ids = [None, *(chunk.chunk_id for chunk in chunks), None]
            joins = [False, *(a.order[-1] < b.order[-1] for a, b in itertools.pairwise(chunks))]
            joins.append(False)
            for position, chunk in enumerate(chunks):
                previous_id = ids[position] if joins[position] else None
                next_id = ids[position + 2] if joins[position + 1] else None
                report.linked += previous_id is not None or next_id is not None
                links = (document_id, position, previous_id, next_id)
                if links != chunk.links:
                    yield chunk.chunk_id, chunk.links, links
        if unlisted:  # drop links that name chunks the store does not hold
            known = {c.chunk_id for chunks in documents.values() for c in chunks}
            known |= report.skipped.keys()
            for chunk_id, old in unlisted:
                kept = tuple(i if i in known else None for i in old[2:])
                if kept != old[2:]:
                    yield chunk_id, old, (None, None, *kept)

    bar = _progress(progress, None, "link_store: writing")
    for batch in _batches(changes(), linker.batch_size):
        linker.write(batch)
        report.changed += len(batch)
        bar.update(len(batch))
    bar.close()
    return report
