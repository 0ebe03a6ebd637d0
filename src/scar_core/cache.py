"""A persistent vector cache in SQLite, and an embedder wrapper that uses it.

:class:`VectorCache` stores one float32 vector per (model name, SHA-256 of the text). Vectors are
raw little-endian float32 bytes with their dimension and a CRC-32, never pickles. A file that is
not a readable SQLite database, or that fails SQLite's ``quick_check``, is moved aside and
replaced by an empty cache; a row whose length or checksum does not match is deleted and treated as
a miss. Both are logged as warnings and counted (:attr:`VectorCache.rebuilds`,
:attr:`VectorCache.dropped_rows`), so corruption costs recomputation, never a wrong vector.

:class:`CachedEmbedder` wraps any :class:`~scar_core.embedders.base.Embedder`: it looks texts up,
sends only the misses to the inner embedder in one batch, and stores what comes back.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import threading
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Protocol

import numpy as np
import numpy.typing as npt

from scar_core.embedders.base import (
    Embedder,
    FloatMatrix,
    FloatVector,
    as_float32_matrix,
    check_query_text,
    check_texts,
)
from scar_core.errors import CacheCorruptedError, EmbeddingError, InvalidVectorError

__all__ = ["QUERY_NAMESPACE", "CachedEmbedder", "VectorCache", "text_key"]

logger = logging.getLogger(__name__)

#: ``PRAGMA application_id`` of a SCAR cache ("SCAR" in ASCII).
APPLICATION_ID = 0x53434152
#: ``PRAGMA user_version`` of the current layout; another value means rebuild.
SCHEMA_VERSION = 1
#: Suffix appended to a model name to keep query vectors apart from document vectors.
QUERY_NAMESPACE = "|query"
#: SQLite's default limit on bound parameters is 999 in old builds; stay well below it.
_LOOKUP_CHUNK = 500
#: Primary result codes that mean the file itself is damaged: SQLITE_CORRUPT, SQLITE_NOTADB.
_CORRUPTION_CODES = frozenset({11, 26})

_SCHEMA = """
CREATE TABLE IF NOT EXISTS vectors (
    model TEXT NOT NULL,
    text_sha256 TEXT NOT NULL,
    dim INTEGER NOT NULL,
    data BLOB NOT NULL,
    crc32 INTEGER NOT NULL,
    PRIMARY KEY (model, text_sha256)
) WITHOUT ROWID
"""


def text_key(text: str) -> str:
    """Return the content key of a text: the hex SHA-256 of its UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _is_corruption(error: sqlite3.DatabaseError) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in _CORRUPTION_CODES
    # Python < 3.11 has no error code; SQLite reports corruption as a plain DatabaseError.
    return type(error) is sqlite3.DatabaseError  # pragma: no cover


class _UnreadableCacheError(Exception):
    """Internal: the cache file must be moved aside and rebuilt, for the reason given."""


class VectorCache:
    """A thread-safe, persistent ``(model, text) -> float32 vector`` cache in one SQLite file.

    Args:
        path: The database file; created (with its folder) when absent.

    Attributes:
        path: The database file.
        rebuilds: How many times an unreadable file was moved aside and replaced.
        dropped_rows: How many rows failed their length or checksum check and were deleted.

    Raises:
        CacheCorruptedError: If ``path`` is an SQLite database of some other application (it is
            left untouched; choose another path).

    Example:
        >>> import numpy as np, tempfile, os
        >>> with VectorCache(os.path.join(tempfile.mkdtemp(), "v.sqlite")) as cache:
        ...     cache.put_many("model", ["text"], np.ones((1, 3)))
        ...     cache.get_many("model", ["text", "other"])[1] is None
        True
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.rebuilds = 0
        self.dropped_rows = 0
        self._lock = threading.RLock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._connection = self._open()

    # -- opening, checking and rebuilding -----------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30.0, check_same_thread=False)

    def _open(self) -> sqlite3.Connection:
        connection = self._connect()
        try:
            self._prepare(connection)
        except _UnreadableCacheError as reason:
            connection.close()
            return self._rebuild(str(reason))
        except sqlite3.DatabaseError as error:
            connection.close()
            if not _is_corruption(error):
                raise
            return self._rebuild(f"{type(error).__name__}: {error}")
        except BaseException:
            connection.close()
            raise
        return connection

    def _prepare(self, connection: sqlite3.Connection) -> None:
        """Check an opened file and create the layout if it is new."""
        table_count = connection.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        if table_count == 0:
            with connection:
                connection.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                connection.execute(_SCHEMA)
            return
        application_id = connection.execute("PRAGMA application_id").fetchone()[0]
        if application_id != APPLICATION_ID:
            raise CacheCorruptedError(
                f"{self.path} is an SQLite database but not a SCAR vector cache "
                f"(application_id {application_id}); it was left untouched. "
                "Choose another cache path."
            )
        user_version = connection.execute("PRAGMA user_version").fetchone()[0]
        if user_version != SCHEMA_VERSION:
            raise _UnreadableCacheError(f"layout version {user_version}, expected {SCHEMA_VERSION}")
        check = connection.execute("PRAGMA quick_check").fetchone()
        if check is None or check[0] != "ok":
            raise _UnreadableCacheError(
                f"quick_check reported {check[0] if check else 'nothing'!r}"
            )
        connection.execute(_SCHEMA)

    def _rebuild(self, reason: str) -> sqlite3.Connection:
        aside = self._move_aside()
        self.rebuilds += 1
        logger.warning(
            "vector cache %s is unreadable (%s); moved it to %s and started an empty cache "
            "(rebuild %d)",
            self.path,
            reason,
            aside,
            self.rebuilds,
        )
        connection = self._connect()
        try:
            self._prepare(connection)
        except BaseException:
            connection.close()
            raise
        return connection

    def _move_aside(self) -> Path:
        stamp = time.strftime("%Y%m%dT%H%M%S")
        for attempt in range(1000):
            aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}-{attempt}")
            if not aside.exists():
                break
        for suffix in ("", "-journal", "-wal", "-shm"):
            source = Path(f"{self.path}{suffix}")
            if source.exists():
                os.replace(source, Path(f"{aside}{suffix}"))
        return aside

    def _recover(self, error: sqlite3.DatabaseError) -> None:
        """Rebuild after corruption found while in use; re-raise any other database error."""
        if not _is_corruption(error):
            raise error
        self._connection.close()
        self._connection = self._rebuild(f"{type(error).__name__}: {error}")

    # -- reading and writing ------------------------------------------------------------------

    def get_many(self, model: str, texts: Sequence[str]) -> list[FloatVector | None]:
        """Return the cached vector of each text, or ``None`` for a miss.

        Args:
            model: The embedder's ``model_name``.
            texts: The texts to look up.

        Returns:
            One entry per text, in order; repeated texts get the same vector.
        """
        keys = [text_key(text) for text in texts]
        unique = list(dict.fromkeys(keys))
        with self._lock:
            try:
                found = self._select(model, unique)
            except sqlite3.DatabaseError as error:
                self._recover(error)
                found = {}
        return [found.get(key) for key in keys]

    def _select(self, model: str, keys: list[str]) -> dict[str, FloatVector]:
        found: dict[str, FloatVector] = {}
        damaged: list[str] = []
        for start in range(0, len(keys), _LOOKUP_CHUNK):
            chunk = keys[start : start + _LOOKUP_CHUNK]
            marks = ",".join("?" * len(chunk))
            rows = self._connection.execute(
                "SELECT text_sha256, dim, data, crc32 FROM vectors "  # noqa: S608 - only '?' marks
                f"WHERE model = ? AND text_sha256 IN ({marks})",
                [model, *chunk],
            ).fetchall()
            for key, dim, data, checksum in rows:
                vector = _decode(dim, data, checksum)
                if vector is None:
                    damaged.append(key)
                else:
                    found[key] = vector
        if damaged:
            with self._connection:
                self._connection.executemany(
                    "DELETE FROM vectors WHERE model = ? AND text_sha256 = ?",
                    [(model, key) for key in damaged],
                )
            self.dropped_rows += len(damaged)
            logger.warning(
                "vector cache %s: dropped %d damaged row(s) of model %r (length or checksum "
                "mismatch); they will be recomputed",
                self.path,
                len(damaged),
                model,
            )
        return found

    def put_many(self, model: str, texts: Sequence[str], vectors: npt.ArrayLike) -> None:
        """Store one vector per text, replacing any earlier vector of the same text.

        Rows with NaN or infinite values are not stored (they will be recomputed next time).

        Args:
            model: The embedder's ``model_name``.
            texts: The texts.
            vectors: A ``(len(texts), d)`` array.

        Raises:
            InvalidVectorError: If ``vectors`` does not have one row per text.
        """
        matrix = np.asarray(vectors, dtype="<f4")
        if matrix.ndim != 2 or matrix.shape[0] != len(texts) or matrix.shape[1] == 0:
            raise InvalidVectorError(
                f"got vectors of shape {matrix.shape} for {len(texts)} texts; expected "
                f"({len(texts)}, dimension) with dimension > 0."
            )
        finite = np.isfinite(matrix).all(axis=1)
        rows = []
        for text, row, ok in zip(texts, matrix, finite, strict=True):
            if not ok:
                continue
            data = row.tobytes()
            rows.append((model, text_key(text), int(row.shape[0]), data, zlib.crc32(data)))
        if not rows:
            return
        with self._lock:
            for attempt in range(2):
                try:
                    with self._connection:
                        self._connection.executemany(
                            "INSERT OR REPLACE INTO vectors (model, text_sha256, dim, data, crc32) "
                            "VALUES (?, ?, ?, ?, ?)",
                            rows,
                        )
                    return
                except sqlite3.DatabaseError as error:
                    if attempt == 1:
                        raise
                    self._recover(error)

    def __len__(self) -> int:
        with self._lock:
            try:
                return int(self._connection.execute("SELECT count(*) FROM vectors").fetchone()[0])
            except sqlite3.DatabaseError as error:
                self._recover(error)
                return 0

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._connection.close()

    def __enter__(self) -> VectorCache:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"VectorCache({str(self.path)!r})"


def _decode(dim: object, data: object, checksum: object) -> FloatVector | None:
    """Return a row's vector, or ``None`` if its length or checksum is wrong."""
    if not isinstance(dim, int) or dim < 1 or not isinstance(data, bytes):
        return None
    if len(data) != 4 * dim or zlib.crc32(data) != checksum:
        return None
    return np.frombuffer(data, dtype="<f4").astype(np.float32)


class _VectorStore(Protocol):
    def get_many(self, model: str, texts: Sequence[str]) -> list[FloatVector | None]: ...

    def put_many(self, model: str, texts: Sequence[str], vectors: npt.ArrayLike) -> None: ...


class _MemoryStore:
    """The store of a :class:`CachedEmbedder` without a file: a dict behind a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._vectors: dict[tuple[str, str], FloatVector] = {}

    def get_many(self, model: str, texts: Sequence[str]) -> list[FloatVector | None]:
        with self._lock:
            return [self._vectors.get((model, text_key(text))) for text in texts]

    def put_many(self, model: str, texts: Sequence[str], vectors: npt.ArrayLike) -> None:
        matrix = np.asarray(vectors, dtype=np.float32)
        with self._lock:
            for text, row in zip(texts, matrix, strict=True):
                if np.isfinite(row).all():
                    self._vectors[(model, text_key(text))] = row.copy()


class CachedEmbedder:
    """An :class:`~scar_core.embedders.base.Embedder` that embeds each text only once.

    Document vectors are cached under the inner embedder's ``model_name``; query vectors under
    ``model_name + "|query"`` (query prompts may make them differ from document vectors of the
    same text).

    Args:
        embedder: The embedder that computes missing vectors.
        cache: A persistent :class:`VectorCache`; without one, vectors are kept in memory for the
            life of this object.

    Attributes:
        embedded_texts: How many texts (documents and queries) were actually sent to ``embedder``.

    Example:
        >>> cached = CachedEmbedder(SomeEmbedder())  # doctest: +SKIP
        >>> cached.embed_documents(["a", "b", "a"]); cached.embedded_texts  # doctest: +SKIP
        2
    """

    def __init__(self, embedder: Embedder, cache: VectorCache | None = None) -> None:
        self.embedder = embedder
        self.cache = cache
        self._store: _VectorStore = cache if cache is not None else _MemoryStore()
        self._count_lock = threading.Lock()
        self.embedded_texts = 0

    @property
    def model_name(self) -> str:
        """The inner embedder's name: caching does not change the vectors."""
        return self.embedder.model_name

    def _count(self, sent: int) -> None:
        with self._count_lock:
            self.embedded_texts += sent

    def _lookup(self, texts: list[str]) -> tuple[list[FloatVector | None], list[str]]:
        found = self._store.get_many(self.model_name, texts)
        misses = list(dict.fromkeys(t for t, v in zip(texts, found, strict=True) if v is None))
        return found, misses

    def _fill(
        self,
        texts: list[str],
        found: list[FloatVector | None],
        misses: list[str],
        computed: npt.ArrayLike,
    ) -> FloatMatrix:
        if misses:
            matrix = as_float32_matrix(computed, len(misses), "the inner embedder")
            self._store.put_many(self.model_name, misses, matrix)
            self._count(len(misses))
            fresh = dict(zip(misses, matrix, strict=True))
            found = [fresh[t] if v is None else v for t, v in zip(texts, found, strict=True)]
        widths = {len(v) for v in found if v is not None}
        if len(widths) > 1:
            raise EmbeddingError(
                f"cached and new vectors of model {self.model_name!r} differ in dimension "
                f"({sorted(widths)}); the model name must change whenever the vectors do."
            )
        return np.stack([v for v in found if v is not None]).astype(np.float32, copy=False)

    def embed_documents(self, texts: Sequence[str]) -> FloatMatrix:
        """Return cached vectors, embedding only the texts not cached yet, in one batch."""
        checked = check_texts(texts)
        if not checked:
            return self.embedder.embed_documents([])
        found, misses = self._lookup(checked)
        computed = self.embedder.embed_documents(misses) if misses else np.zeros((0, 0))
        return self._fill(checked, found, misses, computed)

    async def aembed_documents(self, texts: Sequence[str]) -> FloatMatrix:
        """Async form of :meth:`embed_documents` (the cache itself is read synchronously)."""
        checked = check_texts(texts)
        if not checked:
            return await self.embedder.aembed_documents([])
        found, misses = self._lookup(checked)
        computed = await self.embedder.aembed_documents(misses) if misses else np.zeros((0, 0))
        return self._fill(checked, found, misses, computed)

    def embed_query(self, text: str) -> FloatVector:
        """Return the cached query vector, or embed and cache it."""
        key = self.model_name + QUERY_NAMESPACE
        cached = self._store.get_many(key, [check_query_text(text)])[0]
        if cached is not None:
            return cached
        vector = np.asarray(self.embedder.embed_query(text), dtype=np.float32)
        self._store.put_many(key, [text], vector[None, :])
        self._count(1)
        return vector

    async def aembed_query(self, text: str) -> FloatVector:
        """Async form of :meth:`embed_query`."""
        key = self.model_name + QUERY_NAMESPACE
        cached = self._store.get_many(key, [check_query_text(text)])[0]
        if cached is not None:
            return cached
        vector = np.asarray(await self.embedder.aembed_query(text), dtype=np.float32)
        self._store.put_many(key, [text], vector[None, :])
        self._count(1)
        return vector

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.embedder!r}, cache={self.cache!r})"
