"""Embeddings from the OpenAI API through the official ``openai`` client.

Retries are ours, not the client's: the client is always used with ``max_retries=0`` and this
module retries rate limits (429), server errors (5xx), request timeouts (408) and
timeouts/connection errors with exponential backoff and jitter, so the behaviour is explicit and
tested. Any other error, or the last failed attempt, raises :class:`~scar_core.errors.EmbeddingError`
with the client's exception chained. The API key is never logged, put in a message or shown by
``repr``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import threading
import time
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, cast

import numpy as np

from scar_core.embedders.base import (
    FloatMatrix,
    FloatVector,
    as_float32_matrix,
    check_query_text,
    check_texts,
)
from scar_core.errors import (
    EmbeddingError,
    InvalidSettingsError,
    InvalidTextError,
    missing_dependency,
)

if TYPE_CHECKING:
    from openai import AsyncOpenAI, OpenAI
    from openai.types import CreateEmbeddingResponse

__all__ = ["MAX_BACKOFF_SECONDS", "MAX_BATCH_SIZE", "OpenAIEmbedder", "backoff_delay"]

logger = logging.getLogger(__name__)

#: The API accepts at most this many inputs per request.
MAX_BATCH_SIZE = 2048
#: Upper bound of one backoff sleep, however many attempts have failed.
MAX_BACKOFF_SECONDS = 30.0
#: Status codes worth retrying: request timeout, rate limit, and every 5xx.
_RETRY_STATUS = frozenset({408, 429})
#: Native output sizes, used only to shape the result of embedding zero texts.
_NATIVE_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}


def backoff_delay(
    attempt: int,
    base_seconds: float,
    rng: random.Random,
    retry_after: float | None = None,
) -> float:
    """Return how long to wait before retry number ``attempt + 1``.

    The delay doubles with each failed attempt (``base * 2**attempt``, capped at
    :data:`MAX_BACKOFF_SECONDS`) and is jittered to between half and all of that, so clients that
    failed together do not retry together. A server's ``Retry-After`` is honoured as a minimum.

    Args:
        attempt: Zero-based number of the attempt that just failed.
        base_seconds: The first delay before jitter.
        rng: Source of the jitter.
        retry_after: Seconds the server asked to wait, if it said.

    Returns:
        The delay in seconds.
    """
    ceiling = min(MAX_BACKOFF_SECONDS, base_seconds * 2.0**attempt)
    delay = ceiling / 2.0 + rng.uniform(0.0, ceiling / 2.0)
    if retry_after is not None:
        delay = max(delay, min(retry_after, MAX_BACKOFF_SECONDS))
    return delay


def _import_openai() -> ModuleType:
    try:
        import openai
    except ImportError as exc:
        raise missing_dependency("openai", "openai") from exc
    return openai


def _positive_int(name: str, value: object, upper: int | None = None) -> None:
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or value < 1
        or (upper is not None and value > upper)
    ):
        valid = f"an integer in [1, {upper}]" if upper is not None else "an integer >= 1"
        raise InvalidSettingsError(f"{name}={value!r} is not valid; it must be {valid}.")


def _non_negative_number(name: str, value: object, *, strictly_positive: bool = False) -> None:
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if (
        not is_number
        or not math.isfinite(value)  # type: ignore[arg-type]
        or value < 0  # type: ignore[operator]
        or (strictly_positive and value == 0)
    ):
        valid = "a finite number > 0" if strictly_positive else "a finite number >= 0"
        raise InvalidSettingsError(f"{name}={value!r} is not valid; it must be {valid}.")


def _retry_after_seconds(error: BaseException) -> float | None:
    response = getattr(error, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    for header, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(header)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            continue
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    return None


def _describe(error: BaseException) -> str:
    """Describe a client error without its message, which may quote part of the API key."""
    status = getattr(error, "status_code", None)
    code = getattr(error, "code", None)
    parts = [type(error).__name__]
    if status is not None:
        parts.append(f"HTTP {status}")
    if isinstance(code, str) and code:
        parts.append(f"code {code!r}")
    return ", ".join(parts)


class OpenAIEmbedder:
    """Embed texts with an OpenAI embedding model, in batches, with explicit retries.

    Setup:
        ``pip install 'scar-retrieval[openai]'`` and set ``OPENAI_API_KEY`` (or pass ``api_key``).

    Key init args:
        model: ``"text-embedding-3-small"`` (default), ``"text-embedding-3-large"``, or any
            embedding model the endpoint serves.
        dimensions: Shorten the vectors to this many dimensions (text-embedding-3 models).
        batch_size: Texts per request, at most 2048.
        max_retries: Retries after the first attempt of each request.
        backoff_seconds: First backoff delay; it doubles per retry (with jitter).
        timeout_seconds: Timeout of each request.
        api_key: The API key; ``None`` reads ``OPENAI_API_KEY``. Never logged or shown.
        base_url: Another endpoint that speaks the OpenAI API.
        client: A ready ``openai.OpenAI`` client; it is used with ``max_retries=0``.
        async_client: A ready ``openai.AsyncOpenAI`` client, likewise.

    Instantiate:
        >>> embedder = OpenAIEmbedder("text-embedding-3-large", dimensions=1024)  # doctest: +SKIP
        >>> embedder.embed_query("what is a TCP half-open connection?").shape  # doctest: +SKIP
        (1024,)

    Raises:
        MissingDependencyError: If the ``openai`` package is not installed.
        InvalidSettingsError: If a setting is out of range.
    """

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        *,
        dimensions: int | None = None,
        batch_size: int = 256,
        max_retries: int = 5,
        backoff_seconds: float = 0.5,
        timeout_seconds: float = 30.0,
        api_key: str | None = None,
        base_url: str | None = None,
        client: OpenAI | None = None,
        async_client: AsyncOpenAI | None = None,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise InvalidSettingsError(f"model={model!r} is not valid; name an embedding model.")
        if dimensions is not None:
            _positive_int("dimensions", dimensions)
        _positive_int("batch_size", batch_size, MAX_BATCH_SIZE)
        if not isinstance(max_retries, int) or isinstance(max_retries, bool) or max_retries < 0:
            raise InvalidSettingsError(
                f"max_retries={max_retries!r} is not valid; it must be an integer >= 0."
            )
        _non_negative_number("backoff_seconds", backoff_seconds)
        _non_negative_number("timeout_seconds", timeout_seconds, strictly_positive=True)
        self.model = model
        self.dimensions = dimensions
        self.batch_size = batch_size
        self.max_retries = max_retries
        self.backoff_seconds = float(backoff_seconds)
        self.timeout_seconds = float(timeout_seconds)
        self.base_url = base_url
        self.__api_key = api_key
        self._given_client = client
        self._given_async_client = async_client
        self._client: OpenAI | None = None
        self._async_client: AsyncOpenAI | None = None
        self._client_lock = threading.Lock()
        self._rng = random.Random()  # noqa: S311 - jitter, not cryptography

    @property
    def model_name(self) -> str:
        """``openai:<model>``, plus the output dimensions when they are shortened."""
        if self.dimensions is None:
            return f"openai:{self.model}"
        return f"openai:{self.model}|dimensions={self.dimensions}"

    def __repr__(self) -> str:
        return (
            f"OpenAIEmbedder(model={self.model!r}, dimensions={self.dimensions!r}, "
            f"batch_size={self.batch_size}, max_retries={self.max_retries}, "
            f"base_url={self.base_url!r})"
        )

    # -- clients ------------------------------------------------------------------------------

    def _sync_client(self) -> OpenAI:
        if self._client is None:
            with self._client_lock:
                if self._client is None:
                    self._client = cast("OpenAI", self._build_client(asynchronous=False))
        assert self._client is not None
        return self._client

    def _async_openai(self) -> AsyncOpenAI:
        if self._async_client is None:
            with self._client_lock:
                if self._async_client is None:
                    self._async_client = cast("AsyncOpenAI", self._build_client(asynchronous=True))
        assert self._async_client is not None
        return self._async_client

    def _build_client(self, *, asynchronous: bool) -> OpenAI | AsyncOpenAI:
        _import_openai()  # a missing package raises the error that names the extra
        from openai import AsyncOpenAI, OpenAI, OpenAIError

        given = self._given_async_client if asynchronous else self._given_client
        if given is not None:
            return given.with_options(max_retries=0, timeout=self.timeout_seconds)
        client_class = AsyncOpenAI if asynchronous else OpenAI
        try:
            return client_class(
                api_key=self.__api_key,
                base_url=self.base_url,
                max_retries=0,
                timeout=self.timeout_seconds,
            )
        except OpenAIError as exc:
            raise InvalidSettingsError(
                "could not create the OpenAI client: no API key was given. Pass api_key=... or "
                "set the OPENAI_API_KEY environment variable."
            ) from exc

    # -- requests -----------------------------------------------------------------------------

    def _batches(self, texts: list[str]) -> list[list[str]]:
        for index, text in enumerate(texts):
            if not text:
                raise InvalidTextError(
                    f"text {index} is empty; the OpenAI API rejects empty inputs. "
                    "Drop empty chunks before embedding."
                )
        return [texts[i : i + self.batch_size] for i in range(0, len(texts), self.batch_size)]

    def _empty(self) -> FloatMatrix:
        width = self.dimensions or _NATIVE_DIMENSIONS.get(self.model, 0)
        return np.zeros((0, width), dtype=np.float32)

    def _to_matrix(self, response: CreateEmbeddingResponse, batch: list[str]) -> FloatMatrix:
        items = sorted(response.data, key=lambda item: item.index)
        if [item.index for item in items] != list(range(len(batch))):
            raise EmbeddingError(
                f"the API returned {len(items)} embeddings with indices "
                f"{[item.index for item in items][:10]} for a batch of {len(batch)} texts."
            )
        return as_float32_matrix([item.embedding for item in items], len(batch), "OpenAI")

    def _should_retry(self, error: BaseException, attempt: int) -> bool:
        openai = _import_openai()

        if attempt >= self.max_retries:
            return False
        if isinstance(error, openai.APIConnectionError):  # includes APITimeoutError
            return True
        if isinstance(error, openai.APIStatusError):
            return error.status_code in _RETRY_STATUS or error.status_code >= 500
        return False

    def _next_delay(self, error: BaseException, attempt: int) -> float:
        delay = backoff_delay(attempt, self.backoff_seconds, self._rng, _retry_after_seconds(error))
        logger.warning(
            "OpenAI embeddings request failed (%s); retry %d of %d in %.3f s",
            _describe(error),
            attempt + 1,
            self.max_retries,
            delay,
        )
        return delay

    def _give_up(self, error: BaseException, attempts: int) -> EmbeddingError:
        return EmbeddingError(
            f"OpenAI embeddings request for model {self.model!r} failed after {attempts} "
            f"attempt(s): {_describe(error)}."
        )

    def _request(self, batch: list[str]) -> FloatMatrix:
        client = self._sync_client()
        openai = _import_openai()
        attempt = 0
        while True:
            try:
                if self.dimensions is None:
                    response = client.embeddings.create(
                        input=batch, model=self.model, encoding_format="float"
                    )
                else:
                    response = client.embeddings.create(
                        input=batch,
                        model=self.model,
                        dimensions=self.dimensions,
                        encoding_format="float",
                    )
            except openai.OpenAIError as error:
                if not self._should_retry(error, attempt):
                    raise self._give_up(error, attempt + 1) from error
                time.sleep(self._next_delay(error, attempt))
                attempt += 1
                continue
            return self._to_matrix(response, batch)

    async def _arequest(self, batch: list[str]) -> FloatMatrix:
        client = self._async_openai()
        openai = _import_openai()
        attempt = 0
        while True:
            try:
                if self.dimensions is None:
                    response = await client.embeddings.create(
                        input=batch, model=self.model, encoding_format="float"
                    )
                else:
                    response = await client.embeddings.create(
                        input=batch,
                        model=self.model,
                        dimensions=self.dimensions,
                        encoding_format="float",
                    )
            except openai.OpenAIError as error:
                if not self._should_retry(error, attempt):
                    raise self._give_up(error, attempt + 1) from error
                await asyncio.sleep(self._next_delay(error, attempt))
                attempt += 1
                continue
            return self._to_matrix(response, batch)

    # -- the Embedder protocol ----------------------------------------------------------------

    def embed_documents(self, texts: Sequence[str]) -> FloatMatrix:
        """Embed document chunks, ``batch_size`` texts per request.

        Raises:
            InvalidTextError: If a text is empty (the API rejects it).
            EmbeddingError: If a request still fails after the retries.
        """
        batches = self._batches(check_texts(texts))
        if not batches:
            return self._empty()
        return np.concatenate([self._request(batch) for batch in batches], axis=0)

    def embed_query(self, text: str) -> FloatVector:
        """Embed one query.

        Raises:
            InvalidTextError: If the query is empty or whitespace only.
            EmbeddingError: If the request still fails after the retries.
        """
        vector: FloatVector = self._request([check_query_text(text)])[0]
        return vector

    async def aembed_documents(self, texts: Sequence[str]) -> FloatMatrix:
        """Async form of :meth:`embed_documents`; batches are sent one after another."""
        batches = self._batches(check_texts(texts))
        if not batches:
            return self._empty()
        return np.concatenate([await self._arequest(batch) for batch in batches], axis=0)

    async def aembed_query(self, text: str) -> FloatVector:
        """Async form of :meth:`embed_query`."""
        vector: FloatVector = (await self._arequest([check_query_text(text)]))[0]
        return vector
