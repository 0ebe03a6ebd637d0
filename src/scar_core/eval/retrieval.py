"""Embedding a chunked benchmark and ranking every chunk of each query's scope by cosine.

Scopes:

* ``"document"``: a query is matched against the chunks of the document(s) its evidence lies in
  (the paper's setting; LegalBench-RAG queries name their document in the text);
* ``"corpus"``: against every chunk of the benchmark.

Queries that share a scope are ranked with one matrix product. Ties are broken by chunk order.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Literal, TypeVar

import numpy as np
import numpy.typing as npt

from scar_core.embedders.base import Embedder
from scar_core.errors import EmbeddingError, InvalidSettingsError, missing_dependency
from scar_core.eval.chunking import ChunkedCorpus
from scar_core.eval.data import EvalQuery

__all__ = [
    "DEFAULT_CACHE_ENV",
    "Scope",
    "default_cache_path",
    "embed_chunks",
    "embed_queries",
    "embedder_for",
    "progress",
    "rank_in_scope",
    "unit_rows",
]

Scope = Literal["document", "corpus"]

#: Environment variable that overrides :func:`default_cache_path`'s folder.
DEFAULT_CACHE_ENV = "SCAR_CACHE_DIR"

#: Texts sent to the embedder per call (one progress-bar step).
_EMBED_BATCH = 256

T = TypeVar("T")


def default_cache_path() -> Path:
    """Return where ``scar eval`` keeps its vector cache by default.

    ``$SCAR_CACHE_DIR/vectors.sqlite`` when that variable is set, else
    ``$XDG_CACHE_HOME/scar/vectors.sqlite``, else ``~/.cache/scar/vectors.sqlite``: outside any
    checkout, so it never needs ignoring.
    """
    folder = os.environ.get(DEFAULT_CACHE_ENV)
    if folder:
        return Path(folder) / "vectors.sqlite"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "scar" / "vectors.sqlite"


def embedder_for(model: str | None = None, *, cache_path: str | Path | None = None) -> Embedder:
    """Build the embedder ``scar eval --model`` names, wrapped in a vector cache.

    Args:
        model: ``None`` for the bundled all-MiniLM-L6-v2 (offline); ``"openai:MODEL"`` for an
            OpenAI model (needs ``OPENAI_API_KEY``); anything else is a sentence-transformers
            model name or folder.
        cache_path: The SQLite vector cache; ``None`` keeps vectors in memory only.

    Returns:
        A :class:`~scar_core.cache.CachedEmbedder`.
    """
    from scar_core.cache import CachedEmbedder, VectorCache

    inner: Embedder
    if model is not None and model.startswith("openai:"):
        from scar_core.embedders.openai import OpenAIEmbedder

        inner = OpenAIEmbedder(model.removeprefix("openai:"))
    else:
        from scar_core.embedders.sentence_transformers import SentenceTransformerEmbedder

        inner = SentenceTransformerEmbedder(model)
    cache = VectorCache(cache_path) if cache_path is not None else None
    return CachedEmbedder(inner, cache)


def progress(
    items: Iterable[T], *, total: int | None, description: str, enabled: bool
) -> Iterator[T]:
    """Iterate ``items`` with a tqdm progress bar on stderr when ``enabled``.

    Raises:
        MissingDependencyError: If a bar is asked for and tqdm is not installed (extra ``eval``).
    """
    if not enabled:
        yield from items
        return
    try:
        from tqdm.auto import tqdm
    except ImportError as exc:
        raise missing_dependency("tqdm", "eval") from exc
    with tqdm(total=total, desc=description, unit="it", leave=False, dynamic_ncols=True) as bar:
        for item in items:
            yield item
            bar.update(1)


def unit_rows(matrix: npt.ArrayLike, what: str) -> npt.NDArray[np.float64]:
    """Return the rows of ``matrix`` scaled to unit length.

    Raises:
        EmbeddingError: If a row is zero, NaN or infinite (its cosines would be undefined).
    """
    array = np.asarray(matrix, dtype=np.float64)
    norms = np.linalg.norm(array, axis=1)
    bad = np.flatnonzero(~np.isfinite(norms) | (norms == 0))
    if bad.size:
        raise EmbeddingError(
            f"the embedding of {what} {int(bad[0])} is zero, NaN or infinite; "
            "its cosine to anything is undefined. Check the embedding model's output."
        )
    return np.asarray(array / norms[:, None], dtype=np.float64)


def embed_chunks(
    embedder: Embedder, texts: Sequence[str], *, show_progress: bool = True
) -> npt.NDArray[np.float64]:
    """Embed chunk texts in batches, with a progress bar; returns unit rows."""
    batches = [texts[i : i + _EMBED_BATCH] for i in range(0, len(texts), _EMBED_BATCH)]
    parts = [
        np.asarray(embedder.embed_documents(list(batch)), dtype=np.float64)
        for batch in progress(
            batches, total=len(batches), description="embedding chunks", enabled=show_progress
        )
    ]
    if not parts:
        raise EmbeddingError("there are no chunks to embed; every document is empty.")
    return unit_rows(np.vstack(parts), "chunk")


def embed_queries(
    embedder: Embedder, queries: Sequence[EvalQuery], *, show_progress: bool = True
) -> npt.NDArray[np.float64]:
    """Embed the query texts one by one (queries may use a prompt of their own); unit rows."""
    rows = [
        np.asarray(embedder.embed_query(query.text), dtype=np.float64)
        for query in progress(
            queries, total=len(queries), description="embedding queries", enabled=show_progress
        )
    ]
    return unit_rows(np.vstack(rows), "query")


def _scope_rows(
    corpus: ChunkedCorpus, scope: Scope
) -> Callable[[EvalQuery], tuple[tuple[str, ...], npt.NDArray[np.int64]]]:
    everything = np.arange(len(corpus), dtype=np.int64)

    def rows_for(query: EvalQuery) -> tuple[tuple[str, ...], npt.NDArray[np.int64]]:
        if scope == "corpus":
            return (), everything
        documents = query.document_ids
        ranges = [corpus.rows_of_document.get(d, (0, 0)) for d in documents]
        return documents, np.concatenate(
            [np.arange(first, last, dtype=np.int64) for first, last in ranges]
        )

    return rows_for


def rank_in_scope(
    queries: Sequence[EvalQuery],
    query_units: npt.NDArray[np.float64],
    chunk_units: npt.NDArray[np.float64],
    corpus: ChunkedCorpus,
    scope: Scope,
) -> list[tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]]:
    """Rank every chunk of each query's scope by cosine to the query.

    Args:
        queries: The queries.
        query_units: Their unit embeddings, one row per query.
        chunk_units: Unit embeddings of ``corpus.chunks``, by row.
        corpus: The chunked corpus.
        scope: ``"document"`` or ``"corpus"``.

    Returns:
        Per query: the scope's chunk rows, best first, and their cosines.
    """
    if scope not in ("document", "corpus"):
        raise InvalidSettingsError(f"scope={scope!r} is not valid; use 'document' or 'corpus'.")
    rows_for = _scope_rows(corpus, scope)
    groups: dict[tuple[str, ...], tuple[npt.NDArray[np.int64], list[int]]] = {}
    for index, query in enumerate(queries):
        key, rows = rows_for(query)
        if key not in groups:
            groups[key] = (rows, [])
        groups[key][1].append(index)
    ranked: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]] = [
        (np.zeros(0, np.int64), np.zeros(0))
    ] * len(queries)
    for rows, members in groups.values():
        similarities = query_units[members] @ chunk_units[rows].T
        orders = np.argsort(-similarities, axis=1, kind="stable")
        for position, index in enumerate(members):
            order = orders[position]
            ranked[index] = (rows[order], similarities[position, order])
    return ranked
