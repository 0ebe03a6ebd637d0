"""OpenAIEmbedder against a fake OpenAI API at the HTTP boundary (respx), never a mock of our code.

The official client is given a legacy ``httpx`` client, which respx intercepts, so every request
goes through the real ``openai`` client code: serialisation, status-code handling and exceptions.
"""

from __future__ import annotations

import json
import logging
import random
import sys
import time
from typing import Any

import httpx
import numpy as np
import pytest
import respx

openai = pytest.importorskip("openai")

from scar_core.embedders.base import Embedder  # noqa: E402
from scar_core.embedders.openai import (  # noqa: E402
    MAX_BACKOFF_SECONDS,
    OpenAIEmbedder,
    backoff_delay,
)
from scar_core.errors import (  # noqa: E402
    EmbeddingError,
    InvalidSettingsError,
    InvalidTextError,
    MissingDependencyError,
)

BASE_URL = "https://api.openai.com/v1"
SECRET_KEY = "sk-test-SECRET-0123456789abcdef"


def fake_vector(text: str, width: int) -> list[float]:
    """A deterministic vector that identifies its text: [len(text), ord(first char), 1, 1, ...]."""
    return [float(len(text)), float(ord(text[0])), *([1.0] * (width - 2))]


def embeddings_response(request: httpx.Request, width: int = 4) -> httpx.Response:
    """Answer like the API does, but list the embeddings in reverse order (index says which)."""
    body = json.loads(request.content)
    width = body.get("dimensions", width)
    data = [
        {"object": "embedding", "index": index, "embedding": fake_vector(text, width)}
        for index, text in enumerate(body["input"])
    ]
    return httpx.Response(
        200,
        json={
            "object": "list",
            "data": data[::-1],
            "model": body["model"],
            "usage": {"prompt_tokens": 1, "total_tokens": 1},
        },
    )


def error_response(status: int, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(
        status,
        headers=headers,
        json={"error": {"message": f"fake error {status}", "type": "fake", "code": "fake_code"}},
    )


def sync_embedder(**settings: Any) -> OpenAIEmbedder:
    client = openai.OpenAI(api_key=SECRET_KEY, base_url=BASE_URL, http_client=httpx.Client())
    settings.setdefault("backoff_seconds", 0.001)
    return OpenAIEmbedder(client=client, **settings)


def async_embedder(**settings: Any) -> OpenAIEmbedder:
    client = openai.AsyncOpenAI(
        api_key=SECRET_KEY, base_url=BASE_URL, http_client=httpx.AsyncClient()
    )
    settings.setdefault("backoff_seconds", 0.001)
    return OpenAIEmbedder(async_client=client, **settings)


def sent_bodies(route: respx.Route) -> list[dict[str, Any]]:
    return [json.loads(call.request.content) for call in route.calls]


@pytest.fixture
def api() -> Any:
    with respx.mock(base_url=BASE_URL, assert_all_called=False) as router:
        yield router


def test_it_is_an_embedder() -> None:
    assert isinstance(OpenAIEmbedder(api_key=SECRET_KEY), Embedder)


def test_batches_requests_and_orders_rows_by_index(api: Any) -> None:
    route = api.post("/embeddings").mock(side_effect=embeddings_response)
    texts = ["a", "bb", "ccc", "dddd", "eeeee"]
    vectors = sync_embedder(batch_size=2).embed_documents(texts)
    assert route.call_count == 3
    assert [body["input"] for body in sent_bodies(route)] == [
        ["a", "bb"],
        ["ccc", "dddd"],
        ["eeeee"],
    ]
    assert vectors.dtype == np.float32
    assert vectors.shape == (5, 4)
    np.testing.assert_array_equal(vectors[:, 0], [1, 2, 3, 4, 5])
    np.testing.assert_array_equal(vectors[:, 1], [ord(t[0]) for t in texts])


def test_request_names_the_model_and_asks_for_floats_without_dimensions(api: Any) -> None:
    route = api.post("/embeddings").mock(side_effect=embeddings_response)
    embedder = sync_embedder(model="text-embedding-3-large")
    embedder.embed_documents(["x"])
    (body,) = sent_bodies(route)
    assert body["model"] == "text-embedding-3-large"
    assert body["encoding_format"] == "float"
    assert "dimensions" not in body
    assert embedder.model_name == "openai:text-embedding-3-large"


def test_dimensions_are_passed_through_and_name_the_vectors(api: Any) -> None:
    route = api.post("/embeddings").mock(side_effect=embeddings_response)
    embedder = sync_embedder(dimensions=256)
    vectors = embedder.embed_documents(["x", "yy"])
    assert [body["dimensions"] for body in sent_bodies(route)] == [256]
    assert vectors.shape == (2, 256)
    assert embedder.model_name == "openai:text-embedding-3-small|dimensions=256"


def test_query_vector_is_one_dimensional(api: Any) -> None:
    route = api.post("/embeddings").mock(side_effect=embeddings_response)
    vector = sync_embedder().embed_query("hello")
    assert vector.shape == (4,)
    assert vector[0] == 5.0
    assert sent_bodies(route)[0]["input"] == ["hello"]


def test_retries_a_rate_limit_then_succeeds(api: Any, caplog: pytest.LogCaptureFixture) -> None:
    route = api.post("/embeddings").mock(
        side_effect=[error_response(429), embeddings_response]  # type: ignore[list-item]
    )
    with caplog.at_level(logging.WARNING, logger="scar_core"):
        vectors = sync_embedder().embed_documents(["abc"])
    assert route.call_count == 2
    assert vectors[0, 0] == 3.0
    assert "HTTP 429" in caplog.text
    assert "retry 1 of 5" in caplog.text


def test_honours_retry_after_as_a_minimum(api: Any) -> None:
    route = api.post("/embeddings").mock(
        side_effect=[error_response(429, {"retry-after-ms": "150"}), embeddings_response]  # type: ignore[list-item]
    )
    started = time.monotonic()
    sync_embedder(backoff_seconds=0.0).embed_documents(["abc"])
    assert route.call_count == 2
    assert time.monotonic() - started >= 0.15


def test_retries_a_server_error(api: Any) -> None:
    route = api.post("/embeddings").mock(
        side_effect=[error_response(500), error_response(502), embeddings_response]  # type: ignore[list-item]
    )
    assert sync_embedder().embed_documents(["abc"]).shape == (1, 4)
    assert route.call_count == 3


def test_retries_timeouts_and_connection_errors(api: Any) -> None:
    route = api.post("/embeddings").mock(
        side_effect=[
            httpx.ReadTimeout("slow"),
            httpx.ConnectError("refused"),
            embeddings_response,  # type: ignore[list-item]
        ]
    )
    assert sync_embedder().embed_documents(["abc"]).shape == (1, 4)
    assert route.call_count == 3


def test_gives_up_after_max_retries_with_the_cause_chained(api: Any) -> None:
    route = api.post("/embeddings").mock(return_value=error_response(503))
    with pytest.raises(EmbeddingError, match=r"failed after 3 attempt\(s\).*HTTP 503") as raised:
        sync_embedder(max_retries=2).embed_documents(["abc"])
    assert route.call_count == 3
    assert isinstance(raised.value.__cause__, openai.APIStatusError)
    assert raised.value.__cause__.status_code == 503


def test_gives_up_after_repeated_timeouts(api: Any) -> None:
    route = api.post("/embeddings").mock(side_effect=httpx.ReadTimeout("slow"))
    with pytest.raises(EmbeddingError, match="APITimeoutError") as raised:
        sync_embedder(max_retries=1).embed_documents(["abc"])
    assert route.call_count == 2
    assert isinstance(raised.value.__cause__, openai.APITimeoutError)


def test_does_not_retry_a_bad_request(api: Any) -> None:
    route = api.post("/embeddings").mock(return_value=error_response(400))
    with pytest.raises(EmbeddingError, match=r"after 1 attempt\(s\).*HTTP 400"):
        sync_embedder().embed_documents(["abc"])
    assert route.call_count == 1


def test_a_given_client_does_not_retry_on_its_own(api: Any) -> None:
    route = api.post("/embeddings").mock(return_value=error_response(500))
    client = openai.OpenAI(
        api_key=SECRET_KEY, base_url=BASE_URL, max_retries=4, http_client=httpx.Client()
    )
    with pytest.raises(EmbeddingError):
        OpenAIEmbedder(client=client, max_retries=0).embed_documents(["abc"])
    assert route.call_count == 1


async def test_async_path_batches_and_retries(api: Any) -> None:
    route = api.post("/embeddings").mock(
        side_effect=[error_response(429), embeddings_response, embeddings_response]  # type: ignore[list-item]
    )
    embedder = async_embedder(batch_size=2)
    vectors = await embedder.aembed_documents(["a", "bb", "ccc"])
    assert route.call_count == 3
    np.testing.assert_array_equal(vectors[:, 0], [1, 2, 3])
    route.side_effect = embeddings_response
    query = await embedder.aembed_query("four")
    assert query.shape == (4,)
    assert query[0] == 4.0


async def test_async_path_gives_up(api: Any) -> None:
    route = api.post("/embeddings").mock(return_value=error_response(500))
    with pytest.raises(EmbeddingError):
        await async_embedder(max_retries=1).aembed_query("abc")
    assert route.call_count == 2


def test_the_api_key_never_reaches_logs_messages_or_repr(
    api: Any, caplog: pytest.LogCaptureFixture
) -> None:
    attempts: list[httpx.Request] = []

    def unauthorised_after_a_retry(request: httpx.Request) -> httpx.Response:
        # A real 401 quotes part of the key; a careless error message would pass it on.
        attempts.append(request)
        if len(attempts) == 1:
            return error_response(500)
        return httpx.Response(
            401, json={"error": {"message": f"Incorrect API key provided: {SECRET_KEY}"}}
        )

    route = api.post("/embeddings").mock(side_effect=unauthorised_after_a_retry)
    embedder = sync_embedder()
    with caplog.at_level(logging.DEBUG), pytest.raises(EmbeddingError) as raised:
        embedder.embed_documents(["abc"])
    assert route.call_count == 2
    assert "HTTP 401" in str(raised.value)
    assert SECRET_KEY not in str(raised.value)
    assert SECRET_KEY not in caplog.text
    for embedder_with_key in (embedder, OpenAIEmbedder(api_key=SECRET_KEY)):
        assert SECRET_KEY not in repr(embedder_with_key)
        assert SECRET_KEY not in str(embedder_with_key)


def test_no_key_anywhere_is_a_clear_settings_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(InvalidSettingsError, match="OPENAI_API_KEY"):
        OpenAIEmbedder().embed_query("hello")


def test_empty_texts_are_refused_before_any_request(api: Any) -> None:
    route = api.post("/embeddings").mock(side_effect=embeddings_response)
    embedder = sync_embedder()
    with pytest.raises(InvalidTextError, match="text 1 is empty"):
        embedder.embed_documents(["fine", ""])
    with pytest.raises(InvalidTextError, match="empty"):
        embedder.embed_query("   ")
    with pytest.raises(InvalidTextError, match="not one str"):
        embedder.embed_documents("a single string")  # type: ignore[arg-type]
    assert route.call_count == 0
    assert embedder.embed_documents([]).shape == (0, 1536)
    assert sync_embedder(dimensions=8).embed_documents([]).shape == (0, 8)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"batch_size": 0}, r"batch_size=0 .* \[1, 2048\]"),
        ({"batch_size": 4096}, r"batch_size=4096 .* \[1, 2048\]"),
        ({"batch_size": True}, r"batch_size=True"),
        ({"dimensions": 0}, r"dimensions=0 .* >= 1"),
        ({"max_retries": -1}, r"max_retries=-1 .* >= 0"),
        ({"backoff_seconds": float("nan")}, r"backoff_seconds=nan .* >= 0"),
        ({"timeout_seconds": 0}, r"timeout_seconds=0 .* > 0"),
        ({"model": ""}, r"model=''"),
    ],
)
def test_settings_are_validated(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidSettingsError, match=message):
        OpenAIEmbedder(**settings)


def test_backoff_doubles_is_jittered_capped_and_respects_retry_after() -> None:
    rng = random.Random(7)
    for attempt in range(12):
        ceiling = min(MAX_BACKOFF_SECONDS, 0.5 * 2**attempt)
        delays = [backoff_delay(attempt, 0.5, rng) for _ in range(50)]
        assert all(ceiling / 2 <= delay <= ceiling for delay in delays)
        assert len(set(delays)) > 1  # jittered
    assert backoff_delay(0, 0.5, rng, retry_after=3.0) == 3.0
    assert backoff_delay(0, 0.5, rng, retry_after=10_000.0) == MAX_BACKOFF_SECONDS


def test_missing_openai_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(MissingDependencyError, match=r"scar-retrieval\[openai\]"):
        OpenAIEmbedder(api_key=SECRET_KEY).embed_query("hello")
