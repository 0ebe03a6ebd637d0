"""The ``parent`` and ``rerank`` methods, built on :mod:`scar_core.baselines`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from scar_core.assembly import ChunkRecord
from scar_core.baselines import (
    CrossEncoderReranker,
    available_offline_cross_encoder,
    parent_retrieval,
)
from scar_core.eval.methods import EvalMethod, MethodUnavailableError, QueryContext
from scar_core.policy import ExpansionResult
from scar_core.settings import validate_k

__all__ = ["DEFAULT_PARENT_SIZE", "ParentMethod", "RerankMethod", "parent_blocks"]


#: Characters of a parent block when the method name gives none (four 500-character chunks).
DEFAULT_PARENT_SIZE = 2000


def parent_blocks(records: Mapping[str, ChunkRecord], parent_size: int) -> dict[str, str]:
    """Assign every chunk to a parent block: ``chunk id -> block id``.

    The chunks of each document, in order, are packed greedily into blocks that span at most
    ``parent_size`` characters (from the first chunk's start to the last chunk's end); a chunk
    longer than that forms a block of its own. Blocks never cross documents.
    """
    validate_k(parent_size, "parent_size")
    by_document: dict[str, list[ChunkRecord]] = {}
    for record in records.values():
        by_document.setdefault(str(record.document_id), []).append(record)
    blocks: dict[str, str] = {}
    for document_id, chunks in by_document.items():
        chunks.sort(key=lambda r: r.position or 0)
        block, block_start = 0, None
        for record in chunks:
            start = record.start_index or 0
            end = start + len(record.text)
            if block_start is not None and end - block_start > parent_size:
                block, block_start = block + 1, None
            if block_start is None:
                block_start = start
            blocks[record.chunk_id] = f"{document_id}\x1f{block}"
    return blocks


class ParentMethod(EvalMethod):
    """Parent retrieval of the ``k`` best chunks: each seed brings its whole parent block.

    The benchmarks are plain text without section markup, so parents are blocks of consecutive
    chunks spanning at most ``parent_size`` characters (see :func:`parent_blocks`), as LangChain's
    ``ParentDocumentRetriever`` would build with a 2,000-character parent splitter. Selection is
    :func:`scar_core.baselines.parent_retrieval` with those blocks as sections.

    Args:
        parent_size: Characters a parent block may span.
    """

    def __init__(self, parent_size: int = DEFAULT_PARENT_SIZE) -> None:
        validate_k(parent_size, "parent_size")
        self.parent_size = parent_size
        self._blocks: tuple[Mapping[str, ChunkRecord], dict[str, str]] | None = None

    def _sections(self, records: Mapping[str, ChunkRecord]) -> dict[str, str]:
        if self._blocks is None or self._blocks[0] is not records:
            self._blocks = (records, parent_blocks(records, self.parent_size))
        return self._blocks[1]

    def select(self, context: QueryContext) -> ExpansionResult:
        """Return the seeds' parent blocks."""
        return parent_retrieval(
            context.vector,
            context.seeds,
            context.graph,
            context.vectors,
            sections=self._sections(context.records),
        )


class RerankMethod(EvalMethod):
    """Cross-encoder re-ranking: score the best ``candidates`` chunks of the scope, keep ``k``.

    Args:
        reranker: The cross-encoder and how many candidates it re-ranks.
    """

    def __init__(self, reranker: CrossEncoderReranker) -> None:
        self.reranker = reranker

    @classmethod
    def offline_default(cls, candidates: int = 20) -> RerankMethod:
        """Use the cross-encoder :func:`~scar_core.baselines.available_offline_cross_encoder` finds.

        Raises:
            MethodUnavailableError: If no cross-encoder can be loaded without the network (set
                ``SCAR_CROSS_ENCODER`` to a local model folder to enable it).
        """
        name = available_offline_cross_encoder()
        if name is None:
            raise MethodUnavailableError(
                "no cross-encoder is available offline; set SCAR_CROSS_ENCODER to a local "
                "cross-encoder folder (e.g. ms-marco-MiniLM-L6-v2) to run it."
            )
        return cls(CrossEncoderReranker(name, candidates=candidates))

    def select(self, context: QueryContext) -> ExpansionResult:
        """Re-rank the best candidates of the scope and keep ``k``."""
        pool = context.candidates.head(self.reranker.candidates)
        return self.reranker.rerank(context.query.text, pool, context.texts, context.k)

    def select_batch(self, contexts: Sequence[QueryContext]) -> list[ExpansionResult]:
        """Re-rank query by query."""
        return [self.select(context) for context in contexts]
