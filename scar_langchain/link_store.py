"""``link_store``: link the chunks already in a vector store, in place, without re-embedding."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from langchain_core.vectorstores import VectorStore

from scar_core.errors import DataFormatError
from scar_core.links import ChunkLinks
from scar_langchain.links import linked_metadata
from scar_langchain.stores import Found, reader_for

__all__ = ["LinkReport", "link_store"]


@dataclass
class LinkReport:
    """What :func:`link_store` did.

    Attributes:
        documents: Documents whose chunks it ordered.
        linked: Chunks that have a previous or next chunk after the run.
        changed: Chunks whose metadata it wrote (0 when the store was already linked).
        skipped: ``{chunk id: reason}`` for chunks it could not link, or not link to a neighbour.
    """

    documents: int = 0
    linked: int = 0
    changed: int = 0
    skipped: dict[str, str] = field(default_factory=dict)


def link_store(
    vectorstore: VectorStore, *, document_key: str = "source", order_key: str = "start_index"
) -> LinkReport:
    """Write previous/next links into the metadata of the chunks a store already holds.

    For stores indexed without :func:`~scar_langchain.link_chunks`. Chunks are grouped by
    ``metadata[document_key]`` and ordered by ``metadata[order_key]``; each gets the metadata
    ``link_chunks`` writes (document id, position, previous and next ids), the ids being the
    chunks' existing store ids. Only metadata is written, through the store's own API (texts and
    vectors stay as they are). Running it again changes nothing. Chunks without
    ``metadata[document_key]`` are left as they are, and chunks sharing one order value in a
    document get no links (the order between them is unknown); the report lists both.

    Args:
        vectorstore: An ``InMemoryVectorStore``, FAISS, ``PGVectorStore``, Chroma or
            ``QdrantVectorStore`` (stores SCAR can list).
        document_key: Metadata key naming each chunk's document (loaders write ``"source"``).
        order_key: Numeric metadata key ordering chunks inside a document (splitters write
            ``"start_index"`` when created with ``add_start_index=True``).

    Returns:
        What was linked and written, and the chunks skipped, with reasons.

    Raises:
        InvalidSettingsError: If SCAR cannot list the store's chunks (the message names it).
        DataFormatError: If a chunk with a document has no numeric ``metadata[order_key]``.
    """
    reader = reader_for(vectorstore)
    found = reader.scan()
    report = LinkReport()
    groups: dict[str, list[tuple[Any, str]]] = {}
    for chunk_id, (document, _) in found.items():
        document_id, order = (document.metadata.get(key) for key in (document_key, order_key))
        if document_id is None or document_id == "":
            report.skipped[chunk_id] = f"no metadata[{document_key!r}] names its document"
        elif isinstance(order, bool) or not isinstance(order, int | float):
            raise DataFormatError(
                f"chunk {chunk_id!r} has no numeric metadata[{order_key!r}], so link_store cannot "
                "order it; split with add_start_index=True (LangChain's splitters then write "
                "'start_index'), or pass order_key=... naming the key that orders chunks."
            )
        else:
            groups.setdefault(str(document_id), []).append((order, chunk_id))
    changes: Found = {}
    for document_id, members in groups.items():
        members.sort()
        counts = Counter(order for order, _ in members)
        linkable = [None, *(c if counts[o] == 1 else None for o, c in members), None]
        for position, (order, chunk_id) in enumerate(members):
            previous_id, next_id = linkable[position], linkable[position + 2]
            if counts[order] > 1:
                previous_id = next_id = None
                report.skipped[chunk_id] = (
                    f"shares metadata[{order_key!r}]={order!r} with another chunk of "
                    f"{document_id!r}: their order is unknown (pass a finer document_key)"
                )
            report.linked += bool(previous_id or next_id)
            document, vector = found[chunk_id]
            links = ChunkLinks(chunk_id, document_id, position, previous_id, next_id)
            metadata = linked_metadata(document.metadata, links)
            if metadata != document.metadata:
                changes[chunk_id] = (document.model_copy(update={"metadata": metadata}), vector)
    if changes:
        reader.write(changes)
    report.documents, report.changed = len(groups), len(changes)
    return report
