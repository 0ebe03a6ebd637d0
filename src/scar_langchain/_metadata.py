"""How SCAR's decisions are written into the metadata of returned documents.

Every value is plain JSON (str, int, float, bool, lists and dicts of those), so results serialise
with LangChain's tracing and any document store. Scores are never ``None``: a seed carries
``cos(q, seed)``, a neighbour its expansion score ``S``.

Passage documents (the default output) carry:

* ``scar_chunk_ids``: the chunk ids in the passage, in document order;
* ``scar_seed_id``, ``scar_seed_rank``, ``scar_score``: the passage's best seed, its zero-based
  rank among the retrieved chunks and its score ``cos(q, seed)``;
* ``scar_chunks``: one record per chunk, in document order (see :func:`chunk_record`);
* ``scar_rejected``: the neighbours the seeds of this passage considered and refused, with their
  ``S``, threshold and ``b`` (see :func:`decision_record`);
* ``scar_expanded``: ``True``, or ``False`` when expansion failed and ``on_error="return_seeds"``
  returned the seeds alone; then ``scar_error`` names the exception type and ``scar_score`` is
  absent.

Chunk documents (``return_chunks=True``) carry their own metadata plus ``scar_passage`` (the index
of their passage in the output), ``scar_expanded`` and the fields of :func:`chunk_record`
prefixed with ``scar_``.
"""

from __future__ import annotations

from typing import Any

from scar_core.policy import Decision, SelectedChunk

__all__ = ["chunk_record", "decision_record"]


def decision_record(decision: Decision) -> dict[str, Any]:
    """Return one decision of the SCAR rule as a JSON-able dict.

    Keys: ``seed_id``, ``neighbor_id``, ``via_id``, ``direction``, ``distance``, ``relevance``
    (``cos(q, n)``), ``boundary_penalty`` (``b``), ``score`` (``S``), ``threshold``
    (``gamma * cos(q, seed)``) and ``accepted``.
    """
    return {
        "seed_id": decision.seed_id,
        "neighbor_id": decision.neighbor_id,
        "via_id": decision.via_id,
        "direction": decision.direction,
        "distance": int(decision.distance),
        "relevance": float(decision.relevance),
        "boundary_penalty": float(decision.boundary_penalty),
        "score": float(decision.score),
        "threshold": float(decision.threshold),
        "accepted": bool(decision.accepted),
    }


def chunk_record(chunk: SelectedChunk) -> dict[str, Any]:
    """Return a selected chunk as a JSON-able dict.

    Keys: ``chunk_id``, ``origin`` (``"seed"`` or ``"neighbor"``), ``seed_id``, ``seed_rank``
    and ``score``; a neighbour adds ``relevance``, ``boundary_penalty``, ``threshold``,
    ``via_id``, ``direction`` and ``distance`` from the decision that admitted it.
    """
    record: dict[str, Any] = {
        "chunk_id": chunk.chunk_id,
        "origin": chunk.origin,
        "seed_id": chunk.seed_id,
        "seed_rank": int(chunk.seed_rank),
        "score": float(chunk.score),
    }
    if chunk.decision is not None:
        decision = decision_record(chunk.decision)
        for key in ("relevance", "boundary_penalty", "threshold", "via_id", "direction"):
            record[key] = decision[key]
        record["distance"] = decision["distance"]
    return record
