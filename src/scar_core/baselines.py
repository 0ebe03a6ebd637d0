"""The baselines SCAR is compared with, behind the same inputs and output as :func:`~scar_core.expand`.

* :func:`top_k`: the retrieved chunks only.
* :func:`static_window`: every chunk within ``window`` steps of a seed.
* :func:`parent_retrieval`: every chunk of a seed's section (or of its whole document).
* :class:`CrossEncoderReranker`: rerank a larger candidate set with a cross-encoder, keep ``k``.

All return an :class:`~scar_core.policy.ExpansionResult`, so evaluation code and users can swap
SCAR for a baseline without changing anything else. Every chunk gets a real score: a seed's is
``cos(e_q, e_c)``; a neighbour's is the ``S`` the SCAR rule would give it (with the penalty measured
across the boundary it crosses), recorded in a decision with ``accepted=True``.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from scar_core.errors import (
    DataFormatError,
    InvalidSettingsError,
    InvalidTextError,
    missing_dependency,
)
from scar_core.graph import NeighborGraph
from scar_core.policy import (
    ExpansionResult,
    Links,
    ScarPolicy,
    SelectedChunk,
    as_graph,
)
from scar_core.settings import DEFAULT_GAMMA, DEFAULT_LAMBDA, Direction, ScarSettings, validate_k
from scar_core.vectors import VectorSource

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder

__all__ = [
    "KNOWN_CROSS_ENCODERS",
    "CrossEncoderReranker",
    "available_offline_cross_encoder",
    "parent_retrieval",
    "static_window",
    "top_k",
]

#: Cross-encoders :func:`available_offline_cross_encoder` looks for in the local Hugging Face cache.
KNOWN_CROSS_ENCODERS = (
    "cross-encoder/ms-marco-MiniLM-L6-v2",
    "cross-encoder/ms-marco-MiniLM-L-6-v2",
    "BAAI/bge-reranker-base",
)
#: Environment variable naming a local cross-encoder folder (or cached Hub name) to use.
CROSS_ENCODER_ENV = "SCAR_CROSS_ENCODER"


def _unique(ids: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(ids))


def top_k(
    query: npt.ArrayLike,
    seeds: Sequence[str],
    neighbors: Links | NeighborGraph,
    vectors: VectorSource,
    k: int | None = None,
) -> ExpansionResult:
    """Keep the first ``k`` retrieved chunks and add nothing: the plain retriever.

    Args:
        query: The query embedding (1-D, any scale).
        seeds: Retrieved chunk ids, best first; duplicates are ignored after the first.
        neighbors: Accepted for a uniform signature; not used.
        vectors: ``id -> vector`` or a lookup; each kept seed is scored ``cos(e_q, e_c)``.
        k: How many seeds to keep; ``None`` keeps them all.

    Returns:
        The kept seeds, best first, with no decisions.

    Raises:
        InvalidSettingsError: If ``k`` is not an integer ``>= 1``.
        InvalidVectorError: If the query or a kept seed's vector is unusable.
        MissingVectorError: If a kept seed has no vector.
    """
    del neighbors  # the plain retriever never looks at neighbours
    unique = _unique(seeds)
    if k is not None:
        validate_k(k)
        unique = unique[:k]
    return ScarPolicy().expand(query, unique, NeighborGraph({}), vectors)


def static_window(
    query: npt.ArrayLike,
    seeds: Sequence[str],
    neighbors: Links | NeighborGraph,
    vectors: VectorSource,
    window: int = 1,
    direction: Direction = "both",
    *,
    lambda_: float = DEFAULT_LAMBDA,
    gamma: float = DEFAULT_GAMMA,
) -> ExpansionResult:
    """Add every chunk within ``window`` steps of each seed: the static-window baseline.

    Every neighbour is accepted; it is still scored and its decision recorded (``accepted=True``)
    so the result compares line by line with SCAR's. A neighbour without a usable vector cannot
    be scored: like SCAR, it is reported in ``skipped`` and ends the walk on that side.

    Args:
        query: The query embedding (1-D, any scale).
        seeds: Retrieved chunk ids, best first.
        neighbors: ``id -> (previous, next)`` links or a :class:`NeighborGraph`.
        vectors: ``id -> vector`` or a lookup.
        window: Steps on each side, integer ``>= 1``.
        direction: ``"both"``, ``"previous"`` or ``"next"``.
        lambda_: Penalty weight used for the recorded scores only.
        gamma: Relative threshold used for the recorded thresholds only.

    Returns:
        Seeds plus every neighbour within the window.
    """
    settings = ScarSettings(lambda_=lambda_, gamma=gamma, window=window, direction=direction)
    return ScarPolicy(settings).static_window(query, seeds, neighbors, vectors)


def _section_walk(
    graph: NeighborGraph, seed: str, step: str, sections: Mapping[str, str] | None
) -> list[str]:
    """Chunks from ``seed`` in one direction up to the section (or document) edge."""
    path: list[str] = []
    seen = {seed}
    current = seed
    section = sections.get(seed) if sections is not None else None
    while True:
        following = graph.step(current, "previous" if step == "previous" else "next")
        if following is None or following in seen:
            return path
        if sections is not None and sections.get(following) != section:
            return path
        path.append(following)
        seen.add(following)
        current = following


def parent_retrieval(
    query: npt.ArrayLike,
    seeds: Sequence[str],
    neighbors: Links | NeighborGraph,
    vectors: VectorSource,
    *,
    sections: Mapping[str, str] | None = None,
    lambda_: float = DEFAULT_LAMBDA,
    gamma: float = DEFAULT_GAMMA,
) -> ExpansionResult:
    """Add every chunk of each seed's enclosing section: the parent-retrieval baseline.

    The walk follows the neighbour graph both ways from each seed. With ``sections`` it stops
    where the section id changes (a chunk absent from ``sections`` counts as its own kind of
    section, so the walk also stops between a known and an unknown section); without it, it runs
    to the document's edges (links across known documents are refused by the graph, as always).

    Neighbours are scored like SCAR's: ``S = cos(e_q, e_n) - lambda_ * (1 - cos(e_v, e_n))`` with
    ``v`` the chunk before ``n`` on the walk from the seed, and recorded as accepted decisions.

    Args:
        query: The query embedding (1-D, any scale).
        seeds: Retrieved chunk ids, best first.
        neighbors: ``id -> (previous, next)`` links or a :class:`NeighborGraph`.
        vectors: ``id -> vector`` or a lookup.
        sections: Optional ``chunk id -> section id``.
        lambda_: Penalty weight used for the recorded scores only.
        gamma: Relative threshold used for the recorded thresholds only.

    Returns:
        Seeds plus every other chunk of their sections (or documents).
    """
    graph = as_graph(neighbors)
    links: dict[str, list[str | None]] = {}
    longest = 1
    for seed in _unique(seeds):
        for step in ("previous", "next"):
            path = _section_walk(graph, seed, step, sections)
            longest = max(longest, len(path))
            for before, after in zip([seed, *path], path, strict=False):
                # Record each followed link from both ends, as (previous, next) pairs.
                first, second = (after, before) if step == "previous" else (before, after)
                links.setdefault(first, [None, None])[1] = second
                links.setdefault(second, [None, None])[0] = first
    restricted = NeighborGraph({chunk: (pair[0], pair[1]) for chunk, pair in links.items()})
    settings = ScarSettings(lambda_=lambda_, gamma=gamma, window=longest, direction="both")
    return ScarPolicy(settings).static_window(query, seeds, restricted, vectors)


def available_offline_cross_encoder() -> str | None:
    """Return a cross-encoder that can be loaded without the network, or ``None``.

    Looks first at the ``SCAR_CROSS_ENCODER`` environment variable (a local folder), then for
    :data:`KNOWN_CROSS_ENCODERS` in the local Hugging Face cache. Never downloads anything.
    """
    configured = os.environ.get(CROSS_ENCODER_ENV)
    if configured:
        return configured if Path(configured, "config.json").is_file() else None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    for name in KNOWN_CROSS_ENCODERS:
        if isinstance(try_to_load_from_cache(name, "config.json"), str):
            return name
    return None


class CrossEncoderReranker:
    """Rerank retrieved candidates with a sentence-transformers ``CrossEncoder`` and keep ``k``.

    Setup:
        ``pip install 'scar-retrieval[sentence-transformers]'`` and a cross-encoder model (a Hub
        name already in the local cache, or a folder); see :func:`available_offline_cross_encoder`.

    Key init args:
        model_name_or_path: The cross-encoder.
        candidates: How many of the retrieved chunks (best first) to rerank.
        batch_size: (query, chunk) pairs per forward pass.
        device: ``"cpu"``, ``"cuda"``, ...; ``None`` lets sentence-transformers choose.

    Usage:
        >>> reranker = CrossEncoderReranker("cross-encoder/ms-marco-MiniLM-L6-v2")  # doctest: +SKIP
        >>> reranker.rerank("query", ids, texts, k=5).chunk_ids  # doctest: +SKIP
    """

    def __init__(
        self,
        model_name_or_path: str,
        *,
        candidates: int = 20,
        batch_size: int = 32,
        device: str | None = None,
    ) -> None:
        if importlib.util.find_spec("sentence_transformers") is None:
            raise missing_dependency("sentence_transformers", "sentence-transformers")
        if not isinstance(model_name_or_path, str) or not model_name_or_path:
            raise InvalidSettingsError(
                f"model_name_or_path={model_name_or_path!r} is not valid; name a cross-encoder."
            )
        validate_k(candidates, "candidates")
        validate_k(batch_size, "batch_size")
        self.model_name_or_path = model_name_or_path
        self.candidates = candidates
        self.batch_size = batch_size
        self.device = device
        self._model: CrossEncoder | None = None
        self._load_lock = threading.Lock()

    @property
    def model(self) -> CrossEncoder:
        """The loaded cross-encoder (loaded on first use, once)."""
        if self._model is None:
            with self._load_lock:
                if self._model is None:
                    try:
                        from sentence_transformers import CrossEncoder
                    except ImportError as exc:
                        raise missing_dependency(
                            "sentence_transformers", "sentence-transformers"
                        ) from exc
                    self._model = CrossEncoder(self.model_name_or_path, device=self.device)
        return self._model

    def score(self, query_text: str, texts: Sequence[str]) -> npt.NDArray[np.float64]:
        """Return the cross-encoder's score of each (query, text) pair."""
        if not texts:
            return np.zeros(0, dtype=np.float64)
        scores = self.model.predict(
            [(query_text, text) for text in texts],
            batch_size=self.batch_size,
            show_progress_bar=False,
            convert_to_numpy=True,
        )
        return np.asarray(scores, dtype=np.float64).reshape(len(texts))

    def rerank(
        self,
        query_text: str,
        candidate_ids: Sequence[str],
        texts: Mapping[str, str],
        k: int,
    ) -> ExpansionResult:
        """Score the first ``candidates`` retrieved chunks against the query and keep the best ``k``.

        Args:
            query_text: The query.
            candidate_ids: Retrieved chunk ids, best first (duplicates ignored after the first).
            texts: ``chunk id -> text`` for at least the reranked candidates.
            k: How many chunks to keep.

        Returns:
            The ``k`` best candidates as seeds, in the cross-encoder's order (ties keep the
            retriever's order); each ``score`` is the cross-encoder's score.

        Raises:
            InvalidTextError: If the query is empty.
            InvalidSettingsError: If ``k`` is not an integer ``>= 1``.
            DataFormatError: If a candidate has no text.
        """
        if not isinstance(query_text, str) or not query_text.strip():
            raise InvalidTextError(f"the query text {query_text!r} is empty; nothing to rerank.")
        validate_k(k)
        pool = _unique(candidate_ids)[: self.candidates]
        missing = [chunk_id for chunk_id in pool if chunk_id not in texts]
        if missing:
            raise DataFormatError(
                f"no text for candidate(s) {missing[:5]!r}; pass the text of every candidate."
            )
        scores = self.score(query_text, [texts[chunk_id] for chunk_id in pool])
        order = np.argsort(-scores, kind="stable")[:k]
        selected = tuple(
            SelectedChunk(pool[index], "seed", pool[index], rank, float(scores[index]))
            for rank, index in enumerate(order.tolist())
        )
        return ExpansionResult(selected)

    def __repr__(self) -> str:
        return (
            f"CrossEncoderReranker({self.model_name_or_path!r}, candidates={self.candidates}, "
            f"batch_size={self.batch_size})"
        )
