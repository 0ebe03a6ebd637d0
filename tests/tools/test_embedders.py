"""Embedders: the bundled sentence-transformers model, and OpenAI at the HTTP boundary.

The OpenAI tests run the real ``openai`` client, retries included, against an in-process HTTP
transport (``MockTransport`` of the HTTP library the client is built on), so nothing leaves the
machine and nothing of ours is mocked.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from scar_core._errors import (
    DataFormatError,
    EmbeddingError,
    InvalidSettingsError,
    MissingDependencyError,
)
from scar_tools.cache import CachedEmbedder, EmbeddingCache
from scar_tools.embedders import (
    Embedder,
    OpenAIEmbedder,
    SentenceTransformerEmbedder,
    default_embedder,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO_ROOT = Path(__file__).resolve().parents[2]
OPTIONAL = ("sentence_transformers", "torch", "transformers", "openai", "httpx", "httpx2")
# A skip that does not import sentence-transformers (and torch) into the test process.
needs_sentence_transformers = pytest.mark.skipif(
    importlib.util.find_spec("sentence_transformers") is None,
    reason="the sentence-transformers extra is not installed",
)


def run_python(code: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_scar_core_imports_without_any_optional_package() -> None:
    loaded = run_python(
        "import sys, scar_core, scar_tools.embedders, scar_tools.cache\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {OPTIONAL!r}))"
    )
    assert loaded.strip() == "[]"


@needs_sentence_transformers
def test_sentence_transformer_embedder_loads_its_model_lazily() -> None:
    printed = run_python(
        "import sys\n"
        "from scar_tools.embedders import SentenceTransformerEmbedder, default_embedder\n"
        "embedder = SentenceTransformerEmbedder(batch_size=8)\n"
        "assert default_embedder() is default_embedder()\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {OPTIONAL!r}))\n"
        "print(embedder.model_name)"
    )
    assert printed.split("\n")[:2] == ["[]", "sentence-transformers/all-MiniLM-L6-v2"]


def test_missing_packages_name_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(MissingDependencyError, match=r"scar-retrieval\[sentence-transformers\]"):
        SentenceTransformerEmbedder()
    with pytest.raises(MissingDependencyError, match=r"scar-retrieval\[openai\]"):
        OpenAIEmbedder(api_key="sk-test")


@needs_sentence_transformers
@pytest.mark.parametrize("batch_size", [0, -1, 1.5, True])
def test_bad_batch_size_is_refused(batch_size: Any) -> None:
    with pytest.raises(InvalidSettingsError, match=f"batch_size={batch_size!r}"):
        SentenceTransformerEmbedder(batch_size=batch_size)


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(device="cpu", batch_size=4)


@pytest.mark.model
def test_minilm_shapes_and_dtype(minilm: SentenceTransformerEmbedder) -> None:
    texts = ["TCP keeps a connection open.", "A half-open connection.", "Bananas.", "x", "y"]
    matrix = minilm.embed_documents(texts)
    assert matrix.shape == (5, 384)
    assert matrix.dtype == np.float32
    assert minilm.embed_query("what is a half-open connection?").shape == (384,)
    assert minilm.embed_documents([]).shape == (0, 384)
    assert isinstance(minilm, Embedder)
    with pytest.raises(DataFormatError, match="list of texts"):
        minilm.embed_documents("one text")


@pytest.mark.model
def test_minilm_query_equals_document_of_the_same_text(minilm: SentenceTransformerEmbedder) -> None:
    texts = ["short", "a much longer text, so that the batch is padded around the short one"]
    documents = minilm.embed_documents(texts)
    for text, row in zip(texts, documents, strict=True):
        np.testing.assert_allclose(minilm.embed_query(text), row, atol=1e-5)
    similar = documents @ minilm.embed_query("a rather long text with padding in the batch")
    assert similar[1] > similar[0]


@pytest.mark.model
def test_minilm_through_the_cache(minilm: SentenceTransformerEmbedder, tmp_path: Path) -> None:
    texts = ["first chunk", "second chunk", "first chunk"]
    cached = CachedEmbedder(minilm, EmbeddingCache(tmp_path))
    fresh = cached.embed_documents(texts)
    again = CachedEmbedder(minilm, EmbeddingCache(tmp_path))
    np.testing.assert_array_equal(again.embed_documents(texts), fresh)
    assert (cached.computed, again.computed) == (2, 0)
    np.testing.assert_allclose(fresh, minilm.embed_documents(texts), atol=1e-5)


@pytest.mark.model
def test_default_embedder_is_the_bundled_model() -> None:
    embedder = default_embedder()
    assert embedder is default_embedder()
    assert embedder.model_name == "sentence-transformers/all-MiniLM-L6-v2"
    assert embedder.embed_query("hello").shape == (384,)


@pytest.mark.model
def test_unknown_model_folder_raises_embedding_error(tmp_path: Path) -> None:
    embedder = SentenceTransformerEmbedder(str(tmp_path / "no-such-model"))
    with pytest.raises(EmbeddingError, match="no-such-model"):
        embedder.embed_query("x")


# -- OpenAI ------------------------------------------------------------------------------------

KEY = "sk-test-SECRET-0123456789abcdef"
BASE_URL = "http://fake/v1"


def http_library() -> Any:
    """The HTTP library the installed openai client is built on (httpx, or httpx2 from 3.x)."""
    import openai

    base = next(c for c in openai.DefaultHttpxClient.__mro__ if c.__name__ == "Client")
    return importlib.import_module(base.__module__.split(".")[0])


def vector_of(text: str) -> list[float]:
    return [float(len(text)), float(ord(text[0])), 1.0]


class FakeServer:
    """The embeddings endpoint: answers in reversed order, after ``failures`` failed answers."""

    def __init__(self, failures: list[tuple[int, dict[str, Any]]] | None = None) -> None:
        self.failures = list(failures or [])
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: Any) -> Any:
        http = http_library()
        assert request.url.path == "/v1/embeddings"
        assert request.headers["authorization"] == f"Bearer {KEY}"
        body = json.loads(request.content)
        self.requests.append(body)
        if self.failures:
            status, payload = self.failures.pop(0)
            return http.Response(status, json=payload, headers={"retry-after-ms": "1"})
        data = [
            {"object": "embedding", "index": index, "embedding": vector_of(text)}
            for index, text in enumerate(body["input"])
        ]
        usage = {"prompt_tokens": 1, "total_tokens": 1}
        answer = {"object": "list", "data": data[::-1], "model": body["model"], "usage": usage}
        return http.Response(200, json=answer)


def openai_embedder(
    server: Callable[[Any], Any], *, max_retries: int = 2, **options: Any
) -> OpenAIEmbedder:
    import openai

    http = http_library()
    client = openai.OpenAI(
        api_key=KEY,
        base_url=BASE_URL,
        max_retries=max_retries,
        timeout=5.0,
        http_client=http.Client(transport=http.MockTransport(server)),
    )
    return OpenAIEmbedder(client=client, **options)


def error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "server_error", "code": None, "param": None}}


def test_openai_batches_and_restores_order_by_index() -> None:
    server = FakeServer()
    embedder = openai_embedder(server, batch_size=2)
    texts = ["a", "bb", "ccc"]
    matrix = embedder.embed_documents(texts)
    assert [request["input"] for request in server.requests] == [["a", "bb"], ["ccc"]]
    assert all(request["model"] == "text-embedding-3-small" for request in server.requests)
    np.testing.assert_array_equal(matrix, np.array([vector_of(t) for t in texts], np.float32))
    assert matrix.dtype == np.float32
    np.testing.assert_array_equal(embedder.embed_query("dddd"), vector_of("dddd"))
    assert embedder.model_name == "openai/text-embedding-3-small"
    assert isinstance(embedder, Embedder)


def test_openai_dimensions_are_sent_and_named() -> None:
    server = FakeServer()
    embedder = openai_embedder(server, model="text-embedding-3-large", dimensions=3)
    embedder.embed_documents(["x"])
    assert server.requests[0]["dimensions"] == 3
    assert embedder.model_name == "openai/text-embedding-3-large:dimensions=3"
    assert embedder.embed_documents([]).shape == (0, 3)
    assert len(server.requests) == 1


@pytest.mark.parametrize("status", [429, 500])
def test_openai_retries_through_the_client(status: int) -> None:
    server = FakeServer([(status, error("slow down"))])
    embedder = openai_embedder(server, max_retries=2)
    np.testing.assert_array_equal(embedder.embed_documents(["hello"]), [vector_of("hello")])
    assert len(server.requests) == 2


def test_openai_error_after_retries_names_the_model_and_hides_the_key() -> None:
    server = FakeServer([(500, error(f"internal error for key {KEY}"))] * 2)
    embedder = openai_embedder(server, max_retries=1, model="my-embedding-model")
    with pytest.raises(EmbeddingError, match="my-embedding-model") as caught:
        embedder.embed_documents(["hello"])
    assert len(server.requests) == 2
    assert "500" in str(caught.value)
    assert KEY not in str(caught.value)
    assert KEY not in repr(embedder)


def test_openai_auth_error_is_not_retried_and_hides_the_key() -> None:
    server = FakeServer([(401, error(f"Incorrect API key provided: {KEY[:-4]}"))])
    embedder = openai_embedder(server, max_retries=2)
    with pytest.raises(EmbeddingError, match="401") as caught:
        embedder.embed_query("hello")
    assert len(server.requests) == 1
    assert "SECRET" not in str(caught.value)


def test_openai_rejects_empty_texts_before_any_request() -> None:
    server = FakeServer()
    embedder = openai_embedder(server)
    with pytest.raises(DataFormatError, match="text 1 is empty"):
        embedder.embed_documents(["fine", ""])
    assert server.requests == []


def test_openai_builds_its_client_from_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    embedder = OpenAIEmbedder(api_key=KEY, base_url=BASE_URL, max_retries=3)
    assert embedder.client.max_retries == 3
    assert str(embedder.client.base_url).rstrip("/") == BASE_URL
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(InvalidSettingsError, match="OPENAI_API_KEY"):
        OpenAIEmbedder()
    with pytest.raises(InvalidSettingsError, match="max_retries=-1"):
        OpenAIEmbedder(api_key=KEY, max_retries=-1)
