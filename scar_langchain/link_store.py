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
import warnings
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore

from scar_core.errors import DataFormatError, InvalidSettingsError
from scar_core.links import MAX_GAP, Span, canonical, overlap_fault
from scar_langchain.links import (
    CHUNK_ID_KEY,
    DOCUMENT_ID_KEY,
    NEXT_ID_KEY,
    OFFSET_KEY,
    PAGE_KEYS,
    POSITION_KEY,
    PREVIOUS_ID_KEY,
    document_label,
    key_names,
    page_key_of,
)

__all__ = ["PAGE_KEYS", "LinkReport", "link_store", "replace_documents"]

#: The keys link_store writes, in this order in a ``Links`` tuple.
LINK_KEYS = (DOCUMENT_ID_KEY, POSITION_KEY, PREVIOUS_ID_KEY, NEXT_ID_KEY)
#: Keys that describe one chunk, not its document: never compared by replace_documents.
_PER_CHUNK = frozenset({*LINK_KEYS, CHUNK_ID_KEY, OFFSET_KEY, *PAGE_KEYS})
#: Characters of each end of a chunk's text link_store keeps, to compare where chunks overlap.
_WINDOW = 256
#: Chunks per read and per write (Chroma writes at most its client's max batch size).
_PAGE = 1024
#: Chunks per ``scroll`` (local Qdrant sorts every id on each call, so pages are large).
_QDRANT_PAGE = 16384
#: Concurrent ``add_embeddings`` calls (PGVectorStore commits each row on its own).
_PG_WRITERS = 4

#: A chunk's ``(document id, position, previous id, next id)``, ``None`` where absent.
Links = tuple[Any, ...]
#: ``(chunk id, metadata, text)`` as a store holds them (the text ``None`` when not read).
Row = tuple[str, dict[str, Any], str | None]
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
        gaps: Places where a document's text is missing between two chunks (more than
            ``max_gap`` characters, such as a deleted chunk): the chain is cut there.
    """

    documents: int = 0
    linked: int = 0
    changed: int = 0
    skipped: dict[str, str] = field(default_factory=dict, repr=False)
    gaps: int = 0

    def __str__(self) -> str:
        """A few lines: the counts, and the first skipped chunks with their reasons."""
        lines = [
            f"link_store: {self.documents} documents, {self.linked} chunks linked, "
            f"{self.changed} written, {len(self.skipped)} skipped, {self.gaps} gaps cut"
        ]
        shown = list(self.skipped.items())[:3]
        lines += [f"  skipped {chunk_id!r}: {reason}" for chunk_id, reason in shown]
        if len(self.skipped) > len(shown):
            lines.append(f"  ... and {len(self.skipped) - len(shown)} more (report.skipped)")
        return "\n".join(lines)


class _Chunk(NamedTuple):
    """The facts link_store keeps about one chunk while it reads the store."""

    order: tuple[float, ...]
    chunk_id: str
    links: Links
    pages: dict[str, Any]  # the page keys that order_key does not name, as the chunk holds them
    span: Span | None  # where it lies in its text, when order_key ends with start_index


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

    def __init__(self, store: Any, keys: Sequence[str], texts: bool = False) -> None:
        self.store = store
        self.keys = keys  # the metadata keys link_store reads
        self.texts = texts  # whether it reads the chunks' texts

    def scan(self) -> tuple[int, Iterator[list[Row]]]:
        """Return how many chunks the store holds, and their rows, a page at a time."""
        raise NotImplementedError

    def write(self, changes: list[Change]) -> None:
        """Write the new links of up to :attr:`batch_size` chunks in one call."""
        raise NotImplementedError


class _InMemoryLinker(_Linker):
    def scan(self) -> tuple[int, Iterator[list[Row]]]:
        rows = self.store.store
        return len(rows), _batches(((i, r["metadata"], r["text"]) for i, r in rows.items()), _PAGE)

    def write(self, changes: list[Change]) -> None:
        for chunk_id, _, links in changes:
            row = self.store.store[chunk_id]
            row["metadata"] = _merged(row["metadata"], links)


class _FaissLinker(_Linker):
    def scan(self) -> tuple[int, Iterator[list[Row]]]:
        ids = self.store.index_to_docstore_id.values()
        found = ((i, self.store.docstore.search(i)) for i in ids)
        rows = ((i, d.metadata, d.page_content) for i, d in found if not isinstance(d, str))
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

        include = ["metadatas", "documents"] if self.texts else ["metadatas"]

        def pages() -> Iterator[list[Row]]:
            for batch in _batches(ids, _PAGE):
                got = self.store.get(ids=batch, include=include)
                texts = got["documents"] if self.texts else [None] * len(got["ids"])
                rows = zip(got["ids"], got["metadatas"], texts, strict=True)
                yield [(str(i), m or {}, t) for i, m, t in rows]

        return len(ids), pages()


class _ChromaLinker(_GetLinker):
    def __init__(self, store: Any, keys: Sequence[str], texts: bool = False) -> None:
        super().__init__(store, keys, texts)
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
        key, content = self.store.metadata_payload_key, self.store.content_payload_key
        # Only the metadata keys link_store reads (all the metadata if a key needs quoting).
        simple = all(k.isidentifier() for k in self.keys)
        payload = [f"{key}.{k}" for k in self.keys] if simple else [key]
        payload += [content] if self.texts else []

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
                yield [
                    (str(p.id), (p.payload or {}).get(key) or {}, (p.payload or {}).get(content))
                    for p in points
                ]
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


def _linker_for(store: VectorStore, keys: Sequence[str], texts: bool = False) -> _Linker:
    if type(store) is InMemoryVectorStore:  # a subclass may keep its rows elsewhere
        return _InMemoryLinker(store, keys, texts)
    for cls in type(store).__mro__:
        linker = _LINKERS.get(f"{cls.__module__.split('.')[0]}.{cls.__name__}")
        if linker is not None:
            return linker(store, keys, texts)
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


def _span(metadata: dict[str, Any], text: str | None) -> Span | None:
    start = metadata.get(OFFSET_KEY)
    if text is None or not isinstance(start, int) or isinstance(start, bool):
        return None
    return Span(start, len(text), text[:_WINDOW], text[-_WINDOW:] if text else "")


def _check_order(
    document_id: str, chunks: list[_Chunk], keys: tuple[str, ...], max_gap: int
) -> tuple[list[bool], int]:
    """Refuse an ambiguous order, or chunks that do not tile one text; return the joins.

    Returns:
        For each chunk after the first, whether it continues the one before, and how many
        gaps (text missing between two chunks) cut the chain.
    """
    named = f"metadata[{keys[0]!r}]" if len(keys) == 1 else f"metadata{list(keys)}"
    page = page_key_of(document_id, [(repr(c.chunk_id), c.pages) for c in chunks])
    if page is not None:  # page by page, is the order of keys kept?
        paged = sorted((c.pages[page], c.order) for c in chunks)
        for (_, before), (_, after) in itertools.pairwise(paged):
            if after < before:
                raise DataFormatError(
                    f"the chunks of document {document_id!r} carry metadata[{page!r}], and "
                    f"ordering them by {named} alone would interleave its pages ({named} "
                    f"restarts on each page); pass order_key=({page!r}, "
                    f"{', '.join(map(repr, keys))})."
                )
    joins, gaps = [], 0
    for first, second in itertools.pairwise(chunks):
        if first.order == second.order:
            value = first.order[0] if len(keys) == 1 else first.order
            raise DataFormatError(
                f"chunks {first.chunk_id!r} and {second.chunk_id!r} of document "
                f"{document_id!r} share {named}={value!r}, so their order is unknown; pass "
                "order_key=(...) with a key that tells them apart, such as ('page', "
                "'start_index'), or document_key=... naming a finer document."
            )
        joined = first.order[-1] < second.order[-1]
        a, b = first.span, second.span
        if joined and a is not None and b is not None:
            if first.order[:-1] != second.order[:-1] and b.start <= max_gap:
                joined = False  # a new page whose offsets start again
            elif (fault := overlap_fault(a, b)) is not None:
                raise DataFormatError(
                    f"the chunks of document {document_id!r} do not tile one text: chunk "
                    f"{second.chunk_id!r} {fault} ({first.chunk_id!r}), so they are not one "
                    "document's chunks (two files, or two tenants' files, sharing "
                    f"{document_id!r}?); pass document_key=(...) naming the keys that tell "
                    "documents apart, such as ('source', 'tenant')."
                )
            elif b.start - a.end > max_gap:
                joined, gaps = False, gaps + 1
        joins.append(joined)
    return joins, gaps


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


def _document_of(metadata: dict[str, Any], names: tuple[str, ...]) -> tuple[Any, ...] | None:
    """The values of the document key a chunk holds, ``None`` if one is absent or empty."""
    values = tuple(metadata.get(name) for name in names)
    return None if any(v is None or v == "" for v in values) else values


def link_store(
    vectorstore: VectorStore,
    *,
    document_key: str | Sequence[str] = "source",
    order_key: str | Sequence[str] = "start_index",
    max_gap: int = MAX_GAP,
    progress: bool = False,
) -> LinkReport:
    """Write previous/next links into the metadata of the chunks a store already holds.

    For stores indexed without :func:`~scar_langchain.link_chunks`, and to migrate stores linked
    with an older id scheme. Chunks are grouped by the values of ``document_key`` (a tuple of
    keys names a composite document, such as ``("source", "tenant")``; ``1`` and ``"1"`` are two
    documents) and ordered by ``metadata[order_key]`` (a tuple of keys is compared in order).
    Each gets the metadata ``link_chunks`` writes (document id, position, previous and next
    ids), the ids being the chunks' existing store ids, so afterwards every link names a chunk
    the store holds. As in ``link_chunks``, the chain is cut where the last order key does not
    increase (where ``start_index`` restarts on a new page), so each page is linked on its own.

    Only SCAR's four link keys change; texts, vectors and other metadata keys stay as they
    are. Only chunks whose links changed are written, in batches (a re-run writes nothing).
    Memory grows with the number of chunks by about a kilobyte each (their ids, order values,
    links, and up to 256 characters of each end of their text); vectors are never read, except
    for the chunks ``PGVectorStore`` rewrites (see the module docstring). Chunks without
    ``metadata[document_key]`` keep their metadata, less any link naming a chunk the store does
    not hold; they are listed in the report, with a warning.

    The order in a document must be unambiguous, or link_store refuses before writing anything:
    two chunks of a document may not share an order value, and if a document's chunks carry a
    page key (:data:`PAGE_KEYS`) that ``order_key`` does not name, every chunk must hold a page
    number there, and ordering them by ``order_key`` alone must not interleave their pages. A
    PDF split with ``start_index`` (which restarts on each page) therefore needs
    ``order_key=("page", "start_index")``; the error says so.

    Where the last order key is ``start_index``, a document's chunks must tile one text: each
    starts after the one before starts, ends after it ends, and holds the same characters where
    the two overlap, else link_store refuses (two tenants' files that share a ``source`` do
    not tile). Where more than ``max_gap`` characters lie between two chunks, text is missing
    (a chunk was deleted, say): the chain is cut there, and counted in ``report.gaps``.

    Args:
        vectorstore: An ``InMemoryVectorStore``, FAISS, ``PGVectorStore``, Chroma or
            ``QdrantVectorStore`` (stores SCAR can list).
        document_key: Metadata key, or tuple of keys, naming each chunk's document (loaders
            write ``"source"``).
        order_key: Numeric metadata key, or tuple of keys, ordering chunks inside a document
            (splitters write ``"start_index"`` when created with ``add_start_index=True``).
        max_gap: Characters a splitter may drop between two chunks (whitespace, separators).
        progress: Show tqdm progress bars (when tqdm is installed).

    Returns:
        What was linked and written, and the chunks skipped, with reasons; ``print(report)``
        shows a summary.

    Raises:
        InvalidSettingsError: If SCAR cannot list the store's chunks (the message names it),
            ``order_key`` or ``document_key`` names no key, or no chunk of a non-empty store
            holds ``metadata[document_key]``.
        DataFormatError: If a chunk with a document has no numeric order value, or the order
            inside a document is ambiguous, or its chunks do not tile one text (the message
            names the document and the fix).
    """
    keys = (order_key,) if isinstance(order_key, str) else tuple(order_key)
    if not keys or not all(isinstance(key, str) and key for key in keys):
        raise InvalidSettingsError(
            f"order_key={order_key!r} must be a metadata key or a tuple of them, such as "
            "'start_index' or ('page', 'start_index')."
        )
    names = key_names(document_key)
    if not isinstance(max_gap, int) or isinstance(max_gap, bool) or max_gap < 0:
        raise InvalidSettingsError(f"max_gap={max_gap!r} must be an integer >= 0, such as 64.")
    page_keys = [key for key in PAGE_KEYS if key not in keys]
    texts = keys[-1] == OFFSET_KEY
    linker = _linker_for(vectorstore, [*names, *keys, *page_keys, *LINK_KEYS], texts)
    report = LinkReport()
    documents: dict[str, tuple[str, list[_Chunk]]] = {}  # key -> (label, chunks)
    unlisted: list[tuple[str, Links]] = []  # chunks without a document that carry links
    named = f"metadata[{names[0]!r}]" if len(names) == 1 else f"metadata{list(names)}"
    total, pages = linker.scan()
    bar = _progress(progress, total, "link_store: reading")
    for page in pages:
        for chunk_id, metadata, text in page:
            links = tuple(metadata.get(key) for key in LINK_KEYS)
            values = _document_of(metadata, names)
            if values is None:
                report.skipped[chunk_id] = f"no {named} names its document"
                if links[2] is not None or links[3] is not None:
                    unlisted.append((chunk_id, links))
                continue
            paged = {k: metadata[k] for k in page_keys if metadata.get(k) not in (None, "")}
            span = _span(metadata, text) if texts else None
            chunk = _Chunk(_order(chunk_id, metadata, keys), chunk_id, links, paged, span)
            key = json.dumps(canonical(list(values)))
            documents.setdefault(key, (document_label(values), []))[1].append(chunk)
        bar.update(len(page))
    bar.close()
    if report.skipped and not documents:
        raise InvalidSettingsError(
            f"document_key={document_key!r} names no chunk's document: none of the "
            f"{len(report.skipped)} chunks holds {named}. Pass document_key=... naming the "
            "metadata key your loader wrote (LangChain's loaders write 'source')."
        )
    joins: dict[str, list[bool]] = {}
    for key, (label, chunks) in documents.items():
        chunks.sort(key=lambda chunk: chunk.order)
        joins[key], gaps = _check_order(label, chunks, keys, max_gap)
        report.gaps += gaps
    report.documents = len(documents)
    if report.skipped:
        examples = ", ".join(map(repr, list(report.skipped)[:3]))
        warnings.warn(
            f"link_store left {len(report.skipped)} of {total} chunks unlinked: they hold no "
            f"{named} (such as {examples}); report.skipped lists them all.",
            UserWarning,
            stacklevel=2,
        )

    def changes() -> Iterator[Change]:
        for key, (label, chunks) in documents.items():
            ids = [None, *(chunk.chunk_id for chunk in chunks), None]
            joined = [False, *joins[key], False]
            for position, chunk in enumerate(chunks):
                previous_id = ids[position] if joined[position] else None
                next_id = ids[position + 2] if joined[position + 1] else None
                report.linked += previous_id is not None or next_id is not None
                links = (label, position, previous_id, next_id)
                if links != chunk.links:
                    yield chunk.chunk_id, chunk.links, links
        if unlisted:  # drop links that name chunks the store does not hold
            known = {c.chunk_id for _, chunks in documents.values() for c in chunks}
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


def replace_documents(
    vectorstore: VectorStore,
    chunks: Sequence[Document],
    *,
    document_key: str | Sequence[str] = "source",
) -> list[str]:
    """Store a new version of documents, then delete the chunks SCAR linked for older ones.

    Re-ingesting an edited document gives its chunks new ids (:func:`link_chunks` derives them
    from the whole document), so its old chunks would stay in the store. This adds ``chunks``
    (as ``link_chunks`` returned them; those the store holds already are not added again) with
    ``vectorstore.add_documents``, then deletes, with
    the store's public ``delete``, every chunk that holds the same ``document_key`` values as
    one of them, was created by ``link_chunks`` (its ``scar_chunk_id`` is its store id) and is
    not among the new chunks, and that carries every metadata value the new version's chunks of
    its document all share (so a chunk of another tenant's upload with the same name, whose
    ``tenant`` differs, is kept, and named in a warning). Chunks SCAR did not create are never
    deleted.

    Args:
        vectorstore: A store SCAR can list (see :func:`link_store`).
        chunks: Every chunk of the new versions, from :func:`link_chunks`.
        document_key: The ``document_key`` they were linked with.

    Returns:
        The ids of the chunks it deleted.

    Raises:
        DataFormatError: If a chunk was not linked by :func:`link_chunks`, or holds no
            ``metadata[document_key]``.
        InvalidSettingsError: If SCAR cannot list the store's chunks.
    """
    names = key_names(document_key)
    new: dict[str, Document] = {}
    shared: dict[str, dict[str, str]] = {}  # document -> the metadata all its new chunks hold
    for index, chunk in enumerate(chunks):
        metadata = chunk.metadata or {}
        values = _document_of(metadata, names)
        if chunk.id is None or metadata.get(CHUNK_ID_KEY) != chunk.id or values is None:
            raise DataFormatError(
                f"chunk {index} (id {chunk.id!r}) is not as link_chunks returns it, with its id "
                f"in metadata[{CHUNK_ID_KEY!r}] and its document in metadata{list(names)}; pass "
                f"link_chunks(..., document_key={document_key!r})'s chunks."
            )
        new[chunk.id] = chunk
        own = {k: json.dumps(canonical(v)) for k, v in metadata.items() if k not in _PER_CHUNK}
        document = json.dumps(canonical(list(values)))
        known = shared.setdefault(document, own)
        shared[document] = {k: v for k, v in known.items() if own.get(k) == v}
    keys = sorted({key for metadata in shared.values() for key in metadata})
    held: set[str] = set()
    stale: list[str] = []
    kept: list[str] = []
    _, pages = _linker_for(vectorstore, [*names, *keys, CHUNK_ID_KEY]).scan()
    for page in pages:
        for chunk_id, metadata, _ in page:
            held.add(chunk_id)
            values = _document_of(metadata, names)
            if values is None or chunk_id in new or metadata.get(CHUNK_ID_KEY) != chunk_id:
                continue
            document = json.dumps(canonical(list(values)))
            if document not in shared:
                continue
            same = all(
                k in metadata and json.dumps(canonical(metadata[k])) == v
                for k, v in shared[document].items()
            )
            (stale if same else kept).append(chunk_id)
    added = [chunk_id for chunk_id in new if chunk_id not in held]
    if added:
        vectorstore.add_documents([new[i] for i in added], ids=added)
    if stale:
        vectorstore.delete(stale)
    if kept:
        warnings.warn(
            f"replace_documents kept {len(kept)} chunk(s) of the same {list(names)} whose "
            f"metadata differs from the new version's (another tenant's upload, say), e.g. "
            f"{kept[:3]}; delete them with vectorstore.delete(ids) if they are stale, or pass a "
            f"document_key that tells the documents apart.",
            stacklevel=2,
        )
    return stale
