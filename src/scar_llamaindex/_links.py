"""Read a LlamaIndex node's neighbour links and document id.

Every LlamaIndex node parser sets ``NodeRelationship.PREVIOUS`` / ``NEXT``; nodes ingested
elsewhere may carry the neighbour ids in metadata instead. A malformed link is ignored (with a
warning), never followed and never raised, so a bad node is simply not expanded.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from llama_index.core.schema import BaseNode, NodeRelationship, RelatedNodeInfo

from scar_core.graph import Step

logger = logging.getLogger(__name__)

_RELATIONSHIP_OF: dict[Step, NodeRelationship] = {
    "previous": NodeRelationship.PREVIOUS,
    "next": NodeRelationship.NEXT,
}


@dataclass(frozen=True)
class NodeLinks:
    """Where to read neighbour ids and document ids on a node.

    Attributes:
        previous_id_key: Metadata key holding the previous node's id, or ``None`` to use only the
            ``PREVIOUS`` relationship.
        next_id_key: Metadata key holding the next node's id, or ``None`` to use only ``NEXT``.
        document_id_key: Metadata key holding the document id, or ``None`` to use the node's
            ``SOURCE`` relationship (its ``ref_doc_id``).
    """

    previous_id_key: str | None = None
    next_id_key: str | None = None
    document_id_key: str | None = None

    def neighbor_id(self, node: BaseNode, step: Step) -> str | None:
        """Return the id of the node one step away, or ``None`` when there is no usable link.

        A configured metadata key wins when the node has it; otherwise the relationship is used.
        """
        key = self.previous_id_key if step == "previous" else self.next_id_key
        if key is not None and key in node.metadata:
            return _clean_id(node, node.metadata[key], f"metadata[{key!r}]")
        related = node.relationships.get(_RELATIONSHIP_OF[step])
        if related is None:
            return None
        if not isinstance(related, RelatedNodeInfo):
            logger.warning(
                "ignored the %s relationship of node %r: it holds %s, not one RelatedNodeInfo",
                step,
                node.node_id,
                type(related).__name__,
            )
            return None
        return _clean_id(node, related.node_id, f"the {step} relationship")

    def document_id(self, node: BaseNode) -> str | None:
        """Return the id of the document the node belongs to, or ``None`` when unknown."""
        if self.document_id_key is not None and self.document_id_key in node.metadata:
            return _clean_id(
                node, node.metadata[self.document_id_key], f"metadata[{self.document_id_key!r}]"
            )
        source = node.relationships.get(NodeRelationship.SOURCE)
        if isinstance(source, RelatedNodeInfo) and isinstance(source.node_id, str):
            return source.node_id or None
        return None


def _clean_id(node: BaseNode, value: object, where: str) -> str | None:
    """Return ``value`` if it is a usable node id; ``None`` (and a warning) otherwise."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        logger.warning(
            "ignored %s of node %r: node ids must be strings, not %s",
            where,
            node.node_id,
            type(value).__name__,
        )
        return None
    if value == node.node_id:
        logger.warning("ignored %s of node %r: it links the node to itself", where, node.node_id)
        return None
    return value
