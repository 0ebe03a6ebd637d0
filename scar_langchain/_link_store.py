"""``link_store`` and ``replace_documents``: link or replace the chunks a store already holds.

Only the link keys are written, through each store's own API: the link keys alone (Chroma, Qdrant),
the rows' metadata (InMemory, FAISS, never its index), or, for ``PGVectorStore``, whose only public
write is ``add_embeddings`` (an upsert of whole rows), the changed rows as read, with new links.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, TypeVar

from langchain_core.documents import Document
from langchain_core.vectorstores import VectorStore

from scar_core._errors import DataFormatError, InvalidSettingsError, missing_dependency
from scar_core._links import (
    MAX_GAP,
    OFFSET_KEY,
    PAGE_KEYS,
    ListedChunk,
    Span,
    document_label,
    document_of,
    is_number,
    key_names,
    link_sequence,
    metadata_named,
    missing,
    order_joins,
    typed_json,
)
from scar_core._settings import check_int
from scar_langchain._links import (
    CHUNK_ID_KEY,
    LINK_KEYS,
    WRITTEN_KEYS,
    document_names,
    window_ids,
)
from scar_langchain._stores import Change, access_for

#: Keys that describe one chunk, not its document: never compared by replace_documents.
_PER_CHUNK = frozenset({*WRITTEN_KEYS, OFFSET_KEY, *PAGE_KEYS})
T = TypeVar("T")
#: Characters of each end of a listed chunk's text kept, to compare where chunks overlap.
_WINDOW = 256


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


def _listed_chunk(
    chunk_id: str,
    metadata: Mapping[str, Any],
    text: str | None,
    keys: tuple[str, ...],
    links: tuple[Any, ...],
) -> ListedChunk:
    """What ordering a chunk needs: its order values, pages, span (``text`` read) and links."""
    order: tuple[Any, ...] = tuple(metadata.get(key) for key in keys)
    for key, value in zip(keys, order, strict=True):
        if not is_number(value):
            raise DataFormatError(
                f"chunk {chunk_id!r} has no numeric metadata[{key!r}] (it holds {value!r}), so "
                "link_store cannot order it; split with add_start_index=True (LangChain's "
                "splitters then write 'start_index'), or pass order_key=... naming the numeric "
                "key, or keys, that order chunks."
            )
    pages = {k: metadata[k] for k in PAGE_KEYS if k not in keys and not missing(metadata.get(k))}
    start, span = metadata.get(OFFSET_KEY), None
    if keys[-1] == OFFSET_KEY and text is not None and type(start) is int:  # not a bool
        span = Span(start, len(text), text[:_WINDOW], text[-_WINDOW:] if text else "")
    return ListedChunk(order, chunk_id, links, pages, span)


def _progress(items: Iterable[T], show: bool, total: int | None, description: str) -> Iterable[T]:
    """``items``, counted by a tqdm bar when ``show`` (tqdm comes with the ``eval`` extra)."""
    if not show:
        return items
    try:
        from tqdm.auto import tqdm
    except ImportError:
        raise missing_dependency("tqdm", "eval") from None
    bar: Iterable[T] = tqdm(items, total=total, desc=description, unit="chunk")
    return bar


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
    keys = key_names(order_key, "order_key", "'start_index' or ('page', 'start_index')")
    names = document_names(document_key)
    check_int("max_gap", max_gap, 0)
    page_keys = [key for key in PAGE_KEYS if key not in keys]
    texts = keys[-1] == OFFSET_KEY
    access = access_for(vectorstore)
    total, pages = access.listing([*names, *keys, *page_keys, *LINK_KEYS], texts)
    report = LinkReport()
    documents: dict[str, tuple[str, list[ListedChunk]]] = {}  # key -> (label, chunks)
    unlisted: list[tuple[str, tuple[Any, ...]]] = []  # chunks without a document, with links
    named = metadata_named(names)
    rows = _progress(chain.from_iterable(pages), progress, total, "link_store: reading")
    for chunk_id, metadata, text in rows:
        links = tuple(metadata.get(key) for key in LINK_KEYS)
        values = document_of(metadata, names)
        if values is None:
            report.skipped[chunk_id] = f"no {named} names its document"
            if any(link is not None for link in links[2:]):
                unlisted.append((chunk_id, links))
            continue
        group = documents.setdefault(typed_json(list(values)), (document_label(values), []))
        group[1].append(_listed_chunk(chunk_id, metadata, text, keys, links))
    if report.skipped and not documents:
        raise InvalidSettingsError(
            f"document_key={document_key!r} names no chunk's document: none of the "
            f"{len(report.skipped)} chunks holds {named}. Pass document_key=... naming the "
            "metadata key your loader wrote (LangChain's loaders write 'source')."
        )
    joins: dict[str, list[bool]] = {}
    for key, (label, chunks) in documents.items():
        chunks.sort(key=lambda chunk: chunk.order)
        joins[key], gaps = order_joins(label, chunks, keys, max_gap)
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
            ids = [chunk.chunk_id for chunk in chunks]
            sequence = link_sequence(label, ids, joins[key])
            for chunk, new, window in zip(chunks, sequence, window_ids(sequence), strict=True):
                report.linked += new.previous_id is not None or new.next_id is not None
                links = (label, new.position, new.previous_id, new.next_id, *window)
                if links != chunk.links:
                    yield chunk.chunk_id, chunk.links, links
        if unlisted:  # drop links that name chunks the store does not hold
            known = {c.chunk_id for _, chunks in documents.values() for c in chunks}
            known |= report.skipped.keys()
            for chunk_id, old in unlisted:
                kept = tuple(i if i in known else None for i in old[2:])
                if kept != old[2:]:
                    yield chunk_id, old, (None, None, *kept)

    report.changed = access.write(_progress(changes(), progress, None, "link_store: writing"))
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
    names = document_names(document_key)
    new: dict[str, Document] = {}
    shared: dict[str, dict[str, str]] = {}  # document -> the metadata all its new chunks hold
    for index, chunk in enumerate(chunks):
        metadata = chunk.metadata or {}
        values = document_of(metadata, names)
        if chunk.id is None or metadata.get(CHUNK_ID_KEY) != chunk.id or values is None:
            raise DataFormatError(
                f"chunk {index} (id {chunk.id!r}) is not as link_chunks returns it, with its id "
                f"in metadata[{CHUNK_ID_KEY!r}] and its document in metadata{list(names)}; pass "
                f"link_chunks(..., document_key={document_key!r})'s chunks."
            )
        new[chunk.id] = chunk
        own = {k: typed_json(v) for k, v in metadata.items() if k not in _PER_CHUNK}
        document = typed_json(list(values))
        known = shared.setdefault(document, own)
        shared[document] = {k: v for k, v in known.items() if own.get(k) == v}
    keys = sorted({key for metadata in shared.values() for key in metadata})
    held: set[str] = set()
    stale: list[str] = []
    kept: list[str] = []
    _, pages = access_for(vectorstore).listing([*names, *keys, CHUNK_ID_KEY])
    for chunk_id, metadata, _ in chain.from_iterable(pages):
        held.add(chunk_id)
        values = document_of(metadata, names)
        if values is None or chunk_id in new or metadata.get(CHUNK_ID_KEY) != chunk_id:
            continue
        wanted = shared.get(typed_json(list(values)))
        if wanted is not None:
            same = all(k in metadata and typed_json(metadata[k]) == v for k, v in wanted.items())
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
