"""VectorCache (SQLite, corruption-safe) and CachedEmbedder, with a counting fake embedder."""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from scar_core.cache import CachedEmbedder, VectorCache, text_key
from scar_core.embedders.base import Embedder
from scar_core.errors import (
    CacheCorruptedError,
    EmbeddingError,
    InvalidTextError,
    InvalidVectorError,
)


class CountingEmbedder:
    """A deterministic fake embedder that records every batch it is asked to embed."""

    def __init__(self, dimension: int = 8, name: str = "fake-model") -> None:
        self.dimension = dimension
        self.name = name
        self.document_batches: list[list[str]] = []
        self.queries: list[str] = []

    @property
    def model_name(self) -> str:
        return self.name

    def _vector(self, text: str) -> npt.NDArray[np.float32]:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        return np.random.default_rng(seed).standard_normal(self.dimension).astype(np.float32)

    def embed_documents(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.document_batches.append(list(texts))
        return (
            np.stack([self._vector(t) for t in texts])
            if texts
            else np.zeros((0, self.dimension), np.float32)
        )

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        self.queries.append(text)
        return self._vector("query: " + text)

    async def aembed_documents(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return self.embed_documents(texts)

    async def aembed_query(self, text: str) -> npt.NDArray[np.float32]:
        return self.embed_query(text)


@pytest.fixture
def cache_path(tmp_path: Path) -> Path:
    return tmp_path / "cache" / "vectors.sqlite"


def random_vectors(count: int, dimension: int, seed: int = 0) -> npt.NDArray[np.float32]:
    return np.random.default_rng(seed).standard_normal((count, dimension)).astype(np.float32)


# -- VectorCache --------------------------------------------------------------------------------


def test_round_trip_is_exact_and_survives_reopening(cache_path: Path) -> None:
    texts = ["alpha", "beta", "gamma"]
    vectors = random_vectors(3, 5)
    with VectorCache(cache_path) as cache:
        cache.put_many("m", texts, vectors)
        assert len(cache) == 3
    with VectorCache(cache_path) as cache:
        found = cache.get_many("m", ["gamma", "missing", "alpha", "gamma"])
        assert found[1] is None
        for index, expected in ((0, vectors[2]), (2, vectors[0]), (3, vectors[2])):
            vector = found[index]
            assert vector is not None
            assert vector.dtype == np.float32
            np.testing.assert_array_equal(vector, expected)
        assert cache.rebuilds == 0
        assert cache.dropped_rows == 0


def test_models_do_not_share_vectors(cache_path: Path) -> None:
    with VectorCache(cache_path) as cache:
        cache.put_many("model-a", ["t"], [[1.0, 2.0]])
        cache.put_many("model-b", ["t"], [[3.0, 4.0, 5.0]])
        a, b = cache.get_many("model-a", ["t"])[0], cache.get_many("model-b", ["t"])[0]
        assert a is not None
        assert b is not None
        np.testing.assert_array_equal(a, [1.0, 2.0])
        np.testing.assert_array_equal(b, [3.0, 4.0, 5.0])
        assert cache.get_many("model-c", ["t"]) == [None]


def test_put_replaces_and_skips_non_finite_rows(cache_path: Path) -> None:
    with VectorCache(cache_path) as cache:
        cache.put_many("m", ["t"], [[1.0, 1.0]])
        cache.put_many("m", ["t", "bad"], [[2.0, 2.0], [np.nan, 0.0]])
        stored = cache.get_many("m", ["t", "bad"])
        assert stored[1] is None
        assert stored[0] is not None
        np.testing.assert_array_equal(stored[0], [2.0, 2.0])


def test_put_refuses_a_shape_that_does_not_match_the_texts(cache_path: Path) -> None:
    with VectorCache(cache_path) as cache, pytest.raises(InvalidVectorError, match="for 2 texts"):
        cache.put_many("m", ["a", "b"], np.zeros((3, 4)))


def test_many_texts_are_looked_up_in_chunks(cache_path: Path) -> None:
    texts = [f"text {i}" for i in range(1234)]
    vectors = random_vectors(len(texts), 3)
    with VectorCache(cache_path) as cache:
        cache.put_many("m", texts, vectors)
        found = cache.get_many("m", texts)
    assert all(v is not None for v in found)
    np.testing.assert_array_equal(np.stack([v for v in found if v is not None]), vectors)


def test_a_file_that_is_not_a_database_is_moved_aside_and_rebuilt(
    cache_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache_path.parent.mkdir(parents=True)
    garbage = b"this is not an SQLite file " * 200
    cache_path.write_bytes(garbage)
    with caplog.at_level(logging.WARNING, logger="scar_core.cache"):
        cache = VectorCache(cache_path)
    with cache:
        assert cache.rebuilds == 1
        assert "unreadable" in caplog.text
        assert str(cache_path) in caplog.text
        (aside,) = [p for p in cache_path.parent.iterdir() if ".corrupt-" in p.name]
        assert aside.read_bytes() == garbage  # kept for inspection, never deleted
        cache.put_many("m", ["t"], [[1.0]])
        assert cache.get_many("m", ["t"])[0] is not None


def test_a_truncated_database_is_detected_and_rebuilt(
    cache_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    texts = [f"text {i}" for i in range(3000)]
    vectors = random_vectors(len(texts), 32)
    with VectorCache(cache_path) as cache:
        cache.put_many("m", texts, vectors)
    data = cache_path.read_bytes()
    cache_path.write_bytes(data[: len(data) // 2])
    with caplog.at_level(logging.WARNING, logger="scar_core.cache"):
        cache = VectorCache(cache_path)
        with cache:
            found = cache.get_many("m", texts)
            assert cache.rebuilds == 1
            assert "unreadable" in caplog.text
            # Whatever survives must be exactly right; here the rebuild leaves an empty cache.
            assert found == [None] * len(texts)
            cache.put_many("m", texts[:2], vectors[:2])
            assert len(cache) == 2


def test_a_damaged_row_is_dropped_reported_and_recomputed(
    cache_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    inner = CountingEmbedder()
    with VectorCache(cache_path) as cache:
        CachedEmbedder(inner, cache).embed_documents(["keep", "flip", "short"])
    with sqlite3.connect(cache_path) as raw:
        (data,) = raw.execute(
            "SELECT data FROM vectors WHERE text_sha256 = ?", (text_key("flip"),)
        ).fetchone()
        flipped = bytes([data[0] ^ 0xFF]) + data[1:]
        raw.execute(
            "UPDATE vectors SET data = ? WHERE text_sha256 = ?", (flipped, text_key("flip"))
        )
        short = data[:-4]  # a consistent checksum, but one float missing
        raw.execute(
            "UPDATE vectors SET data = ?, crc32 = ? WHERE text_sha256 = ?",
            (short, zlib.crc32(short), text_key("short")),
        )
    raw.close()
    with (
        caplog.at_level(logging.WARNING, logger="scar_core.cache"),
        VectorCache(cache_path) as cache,
    ):
        found = cache.get_many("fake-model", ["keep", "flip", "short"])
        assert found[0] is not None
        assert found[1] is None
        assert found[2] is None
        assert cache.dropped_rows == 2
        assert cache.rebuilds == 0
        assert "dropped 2 damaged row(s)" in caplog.text
        assert len(cache) == 1
        cached = CachedEmbedder(inner, cache)
        vectors = cached.embed_documents(["keep", "flip", "short"])
        assert cached.embedded_texts == 2
        assert inner.document_batches[-1] == ["flip", "short"]
        np.testing.assert_array_equal(vectors[1], inner._vector("flip"))


def test_a_foreign_database_is_refused_and_left_untouched(cache_path: Path) -> None:
    cache_path.parent.mkdir(parents=True)
    with sqlite3.connect(cache_path) as raw:
        raw.execute("CREATE TABLE customers (name TEXT)")
    raw.close()
    before = cache_path.read_bytes()
    with pytest.raises(CacheCorruptedError, match="not a SCAR vector cache"):
        VectorCache(cache_path)
    assert cache_path.read_bytes() == before


def test_an_unknown_layout_version_is_rebuilt(cache_path: Path) -> None:
    with VectorCache(cache_path) as cache:
        cache.put_many("m", ["t"], [[1.0]])
    with sqlite3.connect(cache_path) as raw:
        raw.execute("PRAGMA user_version = 99")
    raw.close()
    with VectorCache(cache_path) as cache:
        assert cache.rebuilds == 1
        assert cache.get_many("m", ["t"]) == [None]


def test_concurrent_reads_and_writes_from_many_threads(cache_path: Path) -> None:
    dimension = 6

    def expected(worker: int, item: int) -> npt.NDArray[np.float32]:
        return np.full(dimension, worker * 1000 + item, dtype=np.float32)

    def work(worker: int) -> int:
        checked = 0
        for item in range(40):
            text = f"w{worker}-i{item}"
            cache.put_many("m", [text], expected(worker, item)[None, :])
            vector = cache.get_many("m", [text, f"w{(worker + 1) % 8}-i{item}"])[0]
            assert vector is not None
            np.testing.assert_array_equal(vector, expected(worker, item))
            checked += 1
        return checked

    with VectorCache(cache_path) as cache:
        with ThreadPoolExecutor(max_workers=8) as pool:
            assert sum(pool.map(work, range(8))) == 320
        assert len(cache) == 320
        found = cache.get_many("m", [f"w{w}-i{i}" for w in range(8) for i in range(40)])
        for (w, i), vector in zip(
            [(w, i) for w in range(8) for i in range(40)], found, strict=True
        ):
            assert vector is not None
            np.testing.assert_array_equal(vector, expected(w, i))


# -- CachedEmbedder -----------------------------------------------------------------------------


def test_cached_embedder_is_an_embedder_and_keeps_the_model_name() -> None:
    cached = CachedEmbedder(CountingEmbedder(name="inner-name"))
    assert isinstance(cached, Embedder)
    assert cached.model_name == "inner-name"


def test_repeated_calls_embed_nothing_new() -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner)
    first = cached.embed_documents(["a", "b", "a", "c"])
    assert inner.document_batches == [["a", "b", "c"]]  # duplicates embedded once
    assert cached.embedded_texts == 3
    second = cached.embed_documents(["c", "a", "b", "a"])
    assert cached.embedded_texts == 3
    assert len(inner.document_batches) == 1
    np.testing.assert_array_equal(second, first[[3, 0, 1, 0]])
    np.testing.assert_array_equal(first[0], first[2])


def test_only_misses_are_sent_in_one_batch_in_order() -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner)
    cached.embed_documents(["b"])
    vectors = cached.embed_documents(["a", "b", "c", "d", "c"])
    assert inner.document_batches == [["b"], ["a", "c", "d"]]
    assert cached.embedded_texts == 4
    for row, text in zip(vectors, ["a", "b", "c", "d", "c"], strict=True):
        np.testing.assert_array_equal(row, inner._vector(text))


def test_vectors_persist_across_embedders_sharing_a_cache_file(cache_path: Path) -> None:
    first_inner, second_inner = CountingEmbedder(), CountingEmbedder()
    with VectorCache(cache_path) as cache:
        expected = CachedEmbedder(first_inner, cache).embed_documents(["x", "y"])
        expected_query = CachedEmbedder(first_inner, cache).embed_query("x")
    with VectorCache(cache_path) as cache:
        cached = CachedEmbedder(second_inner, cache)
        np.testing.assert_array_equal(cached.embed_documents(["y", "x"]), expected[::-1])
        np.testing.assert_array_equal(cached.embed_query("x"), expected_query)
    assert cached.embedded_texts == 0
    assert second_inner.document_batches == []
    assert second_inner.queries == []


def test_query_vectors_live_in_their_own_namespace() -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner)
    document = cached.embed_documents(["same text"])[0]
    query = cached.embed_query("same text")
    assert not np.array_equal(document, query)
    np.testing.assert_array_equal(query, inner._vector("query: same text"))
    np.testing.assert_array_equal(cached.embed_query("same text"), query)
    assert inner.queries == ["same text"]
    assert cached.embedded_texts == 2


def test_another_model_name_never_reads_these_vectors(cache_path: Path) -> None:
    with VectorCache(cache_path) as cache:
        CachedEmbedder(CountingEmbedder(name="one"), cache).embed_documents(["t"])
        other = CachedEmbedder(CountingEmbedder(name="two"), cache)
        other.embed_documents(["t"])
        assert other.embedded_texts == 1


async def test_async_calls_use_the_cache_too() -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner)
    first = await cached.aembed_documents(["a", "b"])
    second = await cached.aembed_documents(["b", "a"])
    np.testing.assert_array_equal(second, first[::-1])
    query = await cached.aembed_query("q")
    np.testing.assert_array_equal(await cached.aembed_query("q"), query)
    assert cached.embedded_texts == 3


def test_empty_inputs_and_bad_queries() -> None:
    cached = CachedEmbedder(CountingEmbedder(dimension=5))
    assert cached.embed_documents([]).shape == (0, 5)
    with pytest.raises(InvalidTextError):
        cached.embed_query(" ")
    assert cached.embedded_texts == 0


def test_an_inner_embedder_returning_the_wrong_shape_is_an_embedding_error() -> None:
    class Broken(CountingEmbedder):
        def embed_documents(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
            return np.zeros((len(texts) + 1, 3), dtype=np.float32)

    with pytest.raises(EmbeddingError, match="shape"):
        CachedEmbedder(Broken()).embed_documents(["a"])
