"""An on-disk cache of embeddings, and an embedder wrapper that uses it.

:class:`EmbeddingCache` keeps one float32 vector per (model name, SHA-256 of the text). Each model
has a folder of 256 shard files, ``00.npy`` to ``ff.npy``, picked by the first byte of the hash;
each shard is one structured ``.npy`` array of ``(key, vector)`` rows, read with
``allow_pickle=False``. A write rewrites only the shards it touches, through a temporary file and
``os.replace``, so a reader never sees half a file. Two processes writing the same shard at once
both succeed, and the last one wins: the other's new rows are only recomputed later. A shard that
cannot be read is reported with a warning and rebuilt; corruption costs recomputation, never a
wrong vector.

:class:`CachedEmbedder` wraps any :class:`~scar_core.embedders.Embedder` so that each document text
is embedded once, whichever process or instance embedded it first.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
import threading
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from scar_core.errors import DataFormatError, EmbeddingError

if TYPE_CHECKING:
    from scar_core.embedders import Embedder

__all__ = ["CachedEmbedder", "EmbeddingCache"]

#: What :meth:`EmbeddingCache.embed` calls: texts in, one vector per text out.
Compute = Callable[[list[str]], Sequence[Sequence[float]] | np.ndarray]


def _key(text: str) -> bytes:
    """The hex SHA-256 of a text, as ASCII bytes (hex, so numpy never strips a trailing NUL)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest().encode("ascii")


def _shard(folder: Path, prefix: bytes) -> Path:
    """The shard file of the keys that start with ``prefix`` (two hex digits)."""
    return folder / f"{prefix.decode()}.npy"


def _row_dtype(shape: tuple[int, ...]) -> np.dtype:
    """The row layout of a shard file: the text's key and its vector."""
    return np.dtype([("key", "S64"), ("vector", "<f4", shape)])


class EmbeddingCache:
    """Embedding vectors on disk, keyed by model name and text, shared by processes and instances.

    Args:
        directory: The cache folder. ``None`` uses ``$SCAR_CACHE_DIR``, else
            ``~/.cache/scar/embeddings``. It is created on the first write.

    Example:
        >>> cache = EmbeddingCache("/tmp/scar-example")  # doctest: +SKIP
        >>> cache.embed("m", ["a", "b", "a"], lambda t: [[1.0]] * len(t))[1]  # doctest: +SKIP
        2
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        if directory is None:
            default = Path.home() / ".cache" / "scar" / "embeddings"
            directory = os.environ.get("SCAR_CACHE_DIR") or default
        self.directory = Path(directory).expanduser()
        self._memo: dict[str, dict[bytes, np.ndarray]] = {}
        self._lock = threading.Lock()

    def _folder(self, model: str) -> Path:
        """The model's folder: a readable form of its name plus a hash that keeps names apart."""
        readable = re.sub(r"[^A-Za-z0-9._-]+", "_", model)[:64]
        return self.directory / f"{readable}-{_key(model)[:12].decode()}"

    def _read(self, path: Path, *, warn: bool = True) -> dict[bytes, np.ndarray]:
        """Return a shard's rows; an unreadable shard warns (if asked) and counts as empty."""
        if not path.exists():
            return {}
        try:
            data = np.load(path, allow_pickle=False)
            if data.ndim != 1 or data.dtype != _row_dtype(data.dtype["vector"].shape[-1:]):
                raise ValueError(f"unexpected layout {data.dtype} of shape {data.shape}")
        except (OSError, ValueError, EOFError, KeyError) as exc:
            if warn:
                warnings.warn(
                    f"embedding cache file {path} is unreadable ({exc}); it will be rebuilt.",
                    RuntimeWarning,
                    stacklevel=3,
                )
            return {}
        return dict(zip(data["key"].tolist(), data["vector"], strict=True))

    def _write(self, path: Path, rows: dict[bytes, np.ndarray]) -> None:
        width = next(iter(rows.values())).shape[0]
        array = np.empty(len(rows), dtype=_row_dtype((width,)))
        array["key"] = list(rows)
        array["vector"] = np.stack(list(rows.values()))
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.stem, suffix=".tmp")
        try:
            with os.fdopen(handle, "wb") as file:
                np.save(file, array, allow_pickle=False)
            os.replace(temporary, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)

    def embed(self, model: str, texts: Sequence[str], compute: Compute) -> tuple[np.ndarray, int]:
        """Return the vectors of ``texts``, computing and storing only those not cached yet.

        Args:
            model: The embedder's ``model_name``; vectors of different names never mix.
            texts: The texts, in order; repeats are computed once.
            compute: Called at most once, with the distinct uncached texts; returns one vector
                per text.

        Returns:
            A float32 matrix with one row per text, in order (``(0, d)`` or ``(0, 0)`` for no
            texts), and how many distinct texts ``compute`` embedded.

        Raises:
            DataFormatError: If ``texts`` is one str instead of a list.
            EmbeddingError: If ``compute`` returns the wrong number of vectors, vectors of the
                wrong dimension, or non-finite values.
        """
        if isinstance(texts, str):
            raise DataFormatError(f"embed got one str ({texts[:40]!r}); pass a list of texts.")
        keys = [_key(text) for text in texts]
        folder = self._folder(model)
        with self._lock:
            memo = self._memo.setdefault(model, {})
            for shard in {key[:2] for key in keys if key not in memo}:
                memo.update(self._read(_shard(folder, shard)))
            width = next((row.shape[0] for row in memo.values()), None)
        missing = {key: text for key, text in zip(keys, texts, strict=True) if key not in memo}
        if missing:
            self._add(model, missing, compute(list(missing.values())), width)
        if not keys:
            return np.zeros((0, width or 0), dtype=np.float32), 0
        rows = [memo[key] for key in keys]
        if len({row.shape[0] for row in rows}) > 1:
            raise EmbeddingError(
                f"the cache of model {model!r} in {self.directory} holds vectors of different "
                "dimensions; give each embedder configuration its own model name, or delete it."
            )
        return np.stack(rows).astype(np.float32, copy=False), len(missing)

    def _add(
        self, model: str, missing: dict[bytes, str], output: object, width: int | None
    ) -> None:
        expected = f"({len(missing)}, {width or 'd'})"
        try:
            matrix = np.asarray(output, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise EmbeddingError(
                f"embedder {model!r} returned vectors that are not a {expected} array: {exc}"
            ) from exc
        shape_ok = matrix.ndim == 2 and matrix.shape[0] == len(missing) and matrix.shape[1] > 0
        if not shape_ok or (width is not None and matrix.shape[1] != width):
            raise EmbeddingError(
                f"embedder {model!r} returned an array of shape {matrix.shape} for "
                f"{len(missing)} texts; expected {expected}. A model whose dimension changed "
                "needs a new model name."
            )
        if not np.isfinite(matrix).all():
            raise EmbeddingError(f"embedder {model!r} returned NaN or infinite values.")
        new = dict(zip(missing, matrix, strict=True))
        by_shard: dict[bytes, dict[bytes, np.ndarray]] = {}
        for key, row in new.items():
            by_shard.setdefault(key[:2], {})[key] = row
        folder = self._folder(model)
        with self._lock:
            self._memo[model].update(new)
            for prefix, rows in by_shard.items():
                path = _shard(folder, prefix)
                merged = self._read(path, warn=False)
                if any(row.shape[0] != matrix.shape[1] for row in merged.values()):
                    merged = {}  # another process wrote another dimension: the newest wins
                try:
                    self._write(path, {**merged, **rows})
                except OSError as exc:
                    warnings.warn(f"could not write {path} ({exc})", RuntimeWarning, stacklevel=3)


class CachedEmbedder:
    """An :class:`~scar_core.embedders.Embedder` that embeds each document text only once.

    Document vectors go through an :class:`EmbeddingCache` under the inner embedder's
    ``model_name``; queries pass straight through (each is usually new).

    Args:
        embedder: The embedder that computes missing vectors.
        cache: The cache; ``None`` opens the default folder (see :class:`EmbeddingCache`).

    Attributes:
        computed: How many document texts the inner embedder actually embedded so far.

    Example:
        >>> cached = CachedEmbedder(SentenceTransformerEmbedder())  # doctest: +SKIP
        >>> _ = cached.embed_documents(["a", "b", "a"]); cached.computed  # doctest: +SKIP
        2
    """

    def __init__(self, embedder: Embedder, cache: EmbeddingCache | None = None) -> None:
        self.embedder = embedder
        self.cache = cache if cache is not None else EmbeddingCache()
        self.model_name = embedder.model_name
        self.computed = 0
        self._lock = threading.Lock()

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Return the cached vectors of ``texts``, embedding only the missing ones, in one call."""
        matrix, computed = self.cache.embed(self.model_name, texts, self.embedder.embed_documents)
        with self._lock:
            self.computed += computed
        return matrix

    def embed_query(self, text: str) -> np.ndarray:
        """Embed a query with the inner embedder (queries are not cached)."""
        return self.embedder.embed_query(text)

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.embedder!r}, cache={str(self.cache.directory)!r})"
