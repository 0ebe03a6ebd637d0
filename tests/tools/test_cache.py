"""EmbeddingCache and CachedEmbedder: persistence, deduplication, validation and recovery."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scar_core._errors import DataFormatError, EmbeddingError
from scar_tools.cache import MAX_SEGMENTS, CachedEmbedder, EmbeddingCache
from scar_tools.embedders import Embedder

REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL = "toy/hash-8"


def vector_of(text: str, width: int = 8) -> np.ndarray:
    """A deterministic vector per text, so that any mix-up of rows shows."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
    return np.frombuffer(digest[: 4 * width], dtype=np.uint8)[:width].astype(np.float32) - 127.5


class Recorder:
    """A compute function that records every call it gets."""

    def __init__(self, width: int = 8) -> None:
        self.width = width
        self.calls: list[list[str]] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return np.stack([vector_of(text, self.width) for text in texts])


def expected(texts: Sequence[str]) -> np.ndarray:
    return np.stack([vector_of(text) for text in texts])


def never(texts: list[str]) -> np.ndarray:
    raise AssertionError(f"compute was called with {texts!r} although everything is cached")


def shard_files(directory: Path) -> list[Path]:
    return sorted(directory.rglob("*.npy"))


def test_second_call_computes_nothing(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path)
    texts = ["alpha", "beta", "gamma"]
    first, computed = cache.embed(MODEL, texts, Recorder())
    assert computed == 3
    assert first.dtype == np.float32
    np.testing.assert_array_equal(first, expected(texts))
    again, computed = cache.embed(MODEL, texts, never)
    assert computed == 0
    np.testing.assert_array_equal(again, first)


def test_new_instance_on_the_same_directory_computes_nothing(tmp_path: Path) -> None:
    texts = [f"chunk {i}" for i in range(50)]
    EmbeddingCache(tmp_path).embed(MODEL, texts, Recorder())
    matrix, computed = EmbeddingCache(tmp_path).embed(MODEL, list(reversed(texts)), never)
    assert computed == 0
    np.testing.assert_array_equal(matrix, expected(list(reversed(texts))))


def test_duplicates_are_computed_once_and_only_missing_texts_are_computed(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path)
    compute = Recorder()
    matrix, computed = cache.embed(MODEL, ["a", "b", "a", "b", "a"], compute)
    assert (computed, compute.calls) == (2, [["a", "b"]])
    np.testing.assert_array_equal(matrix, expected(["a", "b", "a", "b", "a"]))
    matrix, computed = cache.embed(MODEL, ["c", "a", "c"], compute)
    assert (computed, compute.calls[1:]) == (1, [["c"]])
    np.testing.assert_array_equal(matrix, expected(["c", "a", "c"]))


def test_models_are_kept_apart(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path)
    cache.embed("model-a", ["text"], Recorder())
    compute = Recorder(width=3)
    matrix, computed = cache.embed("openai/model-b:dimensions=3", ["text"], compute)
    assert computed == 1
    assert matrix.shape == (1, 3)


def test_empty_input_computes_nothing(tmp_path: Path) -> None:
    matrix, computed = EmbeddingCache(tmp_path).embed(MODEL, [], never)
    assert (matrix.shape, computed) == ((0, 0), 0)
    assert not tmp_path.joinpath("x").exists()


def test_one_str_instead_of_a_list_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match="list of texts"):
        EmbeddingCache(tmp_path).embed(MODEL, "not a list", never)


def test_directory_defaults_to_env_then_home_and_is_created_on_first_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCAR_CACHE_DIR", str(tmp_path / "from-env"))
    cache = EmbeddingCache()
    assert cache.directory == tmp_path / "from-env"
    assert not cache.directory.exists()
    cache.embed(MODEL, ["x"], Recorder())
    assert cache.directory.is_dir()
    monkeypatch.delenv("SCAR_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert EmbeddingCache().directory == tmp_path / "home" / ".cache" / "scar" / "embeddings"


def write_pickle_bomb(path: Path) -> None:
    marker = path.parent / "UNPICKLED"

    class Bomb:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.mkdir, (str(marker),))

    np.save(path, np.array([Bomb()], dtype=object), allow_pickle=True)


CORRUPTIONS = {
    "garbage": lambda path: path.write_bytes(b"this is not a numpy file"),
    "truncated": lambda path: path.write_bytes(path.read_bytes()[:-7]),
    "empty": lambda path: path.write_bytes(b""),
    "wrong layout": lambda path: np.save(path, np.ones((3, 8))),
    "pickled objects": write_pickle_bomb,
}


@pytest.mark.parametrize("corrupt", CORRUPTIONS.values(), ids=list(CORRUPTIONS))
def test_corrupted_file_is_rebuilt_with_a_warning(tmp_path: Path, corrupt) -> None:
    first, second = [f"first {i}" for i in range(20)], [f"second {i}" for i in range(30)]
    cache = EmbeddingCache(tmp_path)
    cache.embed(MODEL, first, Recorder())
    (victim,) = shard_files(tmp_path)
    cache.embed(MODEL, second, Recorder())
    corrupt(victim)
    compute = Recorder()
    with pytest.warns(RuntimeWarning, match=f"{victim.name}.*unreadable"):
        matrix, computed = EmbeddingCache(tmp_path).embed(MODEL, second + first, compute)
    np.testing.assert_array_equal(matrix, expected(second + first))
    assert compute.calls == [first]
    assert not victim.exists()
    assert not (victim.parent / "UNPICKLED").exists()
    # Rebuilt: a fresh instance reads every file without a warning and computes nothing.
    matrix, computed = EmbeddingCache(tmp_path).embed(MODEL, first + second, never)
    assert computed == 0
    np.testing.assert_array_equal(matrix, expected(first + second))


@pytest.mark.parametrize(
    ("output", "problem"),
    [
        (np.zeros((1, 8)), "shape \\(1, 8\\) for 2 texts"),
        (np.zeros(8), "shape \\(8,\\)"),
        (np.zeros((2, 0)), "shape \\(2, 0\\)"),
        (np.zeros((2, 5)), "expected \\(2, 8\\)"),
        ([[1.0, 2.0], [3.0]], "not a \\(2, 8\\) array"),
        (np.full((2, 8), np.nan), "NaN"),
    ],
    ids=["too few rows", "one vector", "no dimension", "dimension changed", "ragged", "nan"],
)
def test_wrong_compute_output_raises_and_caches_nothing(
    tmp_path: Path, output: object, problem: str
) -> None:
    cache = EmbeddingCache(tmp_path)
    cache.embed(MODEL, ["known"], Recorder())
    with pytest.raises(EmbeddingError, match=f"{MODEL}.*{problem}"):
        cache.embed(MODEL, ["new 1", "known", "new 2"], lambda texts: output)
    matrix, computed = EmbeddingCache(tmp_path).embed(MODEL, ["new 1", "new 2"], Recorder())
    assert computed == 2
    np.testing.assert_array_equal(matrix, expected(["new 1", "new 2"]))


def test_returned_matrix_is_independent_of_the_cache(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path)
    reused = np.ones((1, 8), dtype=np.float32)
    cache.embed(MODEL, ["x"], lambda texts: reused)
    reused[:] = 7.0
    matrix, _ = cache.embed(MODEL, ["x"], never)
    matrix[:] = 9.0
    np.testing.assert_array_equal(cache.embed(MODEL, ["x"], never)[0], np.ones((1, 8)))


def test_many_small_writes_are_merged_into_few_files(tmp_path: Path) -> None:
    texts = [f"passage number {i}" for i in range(10_000)]
    cache = EmbeddingCache(tmp_path)
    for start in range(0, len(texts), 100):
        cache.embed(MODEL, texts[start : start + 100], Recorder())
    assert len(shard_files(tmp_path)) <= MAX_SEGMENTS
    matrix, computed = EmbeddingCache(tmp_path).embed(MODEL, texts, never)
    assert computed == 0
    np.testing.assert_array_equal(matrix[::997], expected(texts[::997]))


WRITER = textwrap.dedent(
    """
    import hashlib, sys
    import numpy as np
    from scar_tools.cache import EmbeddingCache

    def vector_of(text):
        digest = hashlib.sha256(text.encode()).digest()
        return np.frombuffer(digest[:8], dtype=np.uint8).astype(np.float32) - 127.5

    cache = EmbeddingCache(sys.argv[1])
    for batch in range(100):
        texts = [f"text {batch}-{i}-{sys.argv[2]}" for i in range(10)] + [f"shared {batch}"]
        cache.embed("toy/hash-8", texts, lambda ts: np.stack([vector_of(t) for t in ts]))
    """
)


def test_two_processes_writing_at_once_leave_no_corruption(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), name], env=env)
        for name in ("p", "q")
    ]
    assert [writer.wait(timeout=120) for writer in writers] == [0, 0]
    texts = [f"text {b}-{i}-{n}" for b in range(100) for i in range(10) for n in "pq"]
    texts += [f"shared {b}" for b in range(100)]
    matrix, computed = EmbeddingCache(tmp_path).embed(MODEL, texts, never)  # and no warning
    assert computed == 0
    np.testing.assert_array_equal(matrix, expected(texts))
    assert len(shard_files(tmp_path)) <= MAX_SEGMENTS + 1
    assert not list(tmp_path.rglob("*.tmp"))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(st.characters(exclude_categories=()), max_size=30), max_size=12))
def test_cached_rows_equal_computed_rows(texts: list[str]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        fresh, computed = EmbeddingCache(directory).embed(MODEL, texts, Recorder())
        assert computed == len(set(texts))
        cached, computed = EmbeddingCache(directory).embed(MODEL, texts, never)
    assert computed == 0
    assert fresh.shape == cached.shape == ((len(texts), 8) if texts else (0, 0))
    if texts:
        np.testing.assert_array_equal(fresh, expected(texts))
        np.testing.assert_array_equal(cached, fresh)


class ToyEmbedder:
    """A small real Embedder: hashes texts into vectors and counts what it embeds."""

    model_name = MODEL

    def __init__(self) -> None:
        self.embedded: list[str] = []

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.embedded.extend(texts)
        return np.stack([vector_of(text) for text in texts]) if texts else np.zeros((0, 8))

    def embed_query(self, text: str) -> np.ndarray:
        return vector_of(text) + 1.0


def test_cached_embedder_embeds_each_document_once(tmp_path: Path) -> None:
    inner = ToyEmbedder()
    cached = CachedEmbedder(inner, EmbeddingCache(tmp_path))
    assert isinstance(cached, Embedder)
    assert cached.model_name == MODEL
    np.testing.assert_array_equal(cached.embed_documents(["a", "b", "a"]), expected("aba"))
    np.testing.assert_array_equal(cached.embed_documents(["b", "c"]), expected("bc"))
    assert (cached.computed, inner.embedded) == (3, ["a", "b", "c"])
    again = CachedEmbedder(ToyEmbedder(), EmbeddingCache(tmp_path))
    again.embed_documents(["c", "b", "a"])
    assert again.computed == 0
    np.testing.assert_array_equal(cached.embed_query("a"), vector_of("a") + 1.0)
    assert cached.computed == 3


def test_cached_embedder_uses_the_default_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCAR_CACHE_DIR", str(tmp_path))
    cached = CachedEmbedder(ToyEmbedder())
    assert cached.cache.directory == tmp_path
    cached.embed_documents(["x"])
    assert shard_files(tmp_path)
