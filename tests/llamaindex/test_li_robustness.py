"""Bad vectors, concurrency, and the ScarEmbedding wrapper over a scar_core embedder."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Sequence

import numpy as np
import pytest
from li_support import TableEmbedding, docstore_of, ids_and_scores, linked_nodes, scored
from llama_index.core.schema import QueryBundle

from scar_core.errors import InvalidTextError, InvalidVectorError
from scar_llamaindex import ScarEmbedding, SCARNodePostprocessor

QUERY = "query"
ANGLES = [80.0, 30.0, 10.0, 20.0, 90.0, 15.0, 5.0, 25.0]
TEXTS = [f"chunk {i}" for i in range(len(ANGLES))]


def unit(degrees: float) -> list[float]:
    return [math.cos(math.radians(degrees)), math.sin(math.radians(degrees))]


def test_a_neighbour_with_a_nan_vector_is_skipped_with_a_warning_naming_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    vectors = [unit(a) for a in ANGLES[:5]]
    vectors[3] = [float("nan"), 1.0]
    chain = linked_nodes(TEXTS[:5], vectors=vectors)
    scar = SCARNodePostprocessor(budget=None, docstore=docstore_of(chain))
    with caplog.at_level(logging.WARNING):
        output = scar.postprocess_nodes(
            scored([chain[2]], [0.5]), QueryBundle(QUERY, embedding=unit(0))
        )
    assert [item.node.node_id for item in output] == ["n1", "n2"]
    assert any("'n3'" in r.getMessage() and "NaN" in r.getMessage() for r in caplog.records)


def test_a_neighbour_vector_of_the_wrong_dimension_is_skipped() -> None:
    vectors = [unit(a) for a in ANGLES[:5]]
    vectors[1] = [1.0, 0.0, 0.0]
    chain = linked_nodes(TEXTS[:5], vectors=vectors)
    scar = SCARNodePostprocessor(budget=None, docstore=docstore_of(chain))
    output = scar.postprocess_nodes(
        scored([chain[2]], [0.5]), QueryBundle(QUERY, embedding=unit(0))
    )
    assert [item.node.node_id for item in output] == ["n2", "n3"]


@pytest.mark.parametrize("bad", [[float("inf"), 0.0], [0.0, 0.0]])
def test_a_seed_with_an_unusable_vector_is_a_clear_error(bad: list[float]) -> None:
    vectors = [unit(a) for a in ANGLES[:5]]
    vectors[2] = bad
    chain = linked_nodes(TEXTS[:5], vectors=vectors)
    scar = SCARNodePostprocessor(budget=None, docstore=docstore_of(chain), on_error="return_seeds")
    with pytest.raises(InvalidVectorError, match="seed 'n2'"):
        scar.postprocess_nodes(scored([chain[2]], [0.5]), QueryBundle(QUERY, embedding=unit(0)))


def test_a_zero_query_vector_is_a_clear_error() -> None:
    chain = linked_nodes(TEXTS[:5], vectors=[unit(a) for a in ANGLES[:5]])
    scar = SCARNodePostprocessor(budget=None, docstore=docstore_of(chain))
    with pytest.raises(InvalidVectorError, match="zero vector"):
        scar.postprocess_nodes(scored([chain[2]], [0.5]), QueryBundle(QUERY, embedding=[0.0, 0.0]))


async def test_concurrent_async_calls_equal_sequential_calls() -> None:
    model = TableEmbedding(
        {t: unit(a) for t, a in zip(TEXTS, ANGLES, strict=True)}, {QUERY: unit(0.0)}
    )
    chain = linked_nodes(TEXTS)
    scar = SCARNodePostprocessor(
        budget=None, docstore=docstore_of(chain), embed_model=model, window=2
    )
    requests = [
        scored([chain[i % len(chain)], chain[(3 * i + 1) % len(chain)]], [0.9, 0.1])
        for i in range(200)
    ]
    sequential = [ids_and_scores(scar.postprocess_nodes(r, QueryBundle(QUERY))) for r in requests]
    fresh = SCARNodePostprocessor(
        budget=None, docstore=docstore_of(chain), embed_model=model, window=2
    )
    concurrent = await asyncio.gather(
        *(fresh.apostprocess_nodes(r, QueryBundle(QUERY)) for r in requests)
    )
    assert [ids_and_scores(c) for c in concurrent] == sequential


class FakeEmbedder:
    """A scar_core Embedder whose vectors are the character counts of a, b and c."""

    model_name = "fake-abc"

    def __init__(self) -> None:
        self.document_batches: list[list[str]] = []

    def _vector(self, text: str) -> np.ndarray:
        return np.array([text.count(c) for c in "abc"], dtype=np.float32)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.document_batches.append(list(texts))
        return np.stack([self._vector(t) for t in texts]).astype(np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        if not text.strip():
            raise InvalidTextError("empty query")
        return self._vector(text)

    async def aembed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_documents(texts)

    async def aembed_query(self, text: str) -> np.ndarray:
        return self.embed_query(text)


async def test_scar_embedding_wraps_a_scar_core_embedder() -> None:
    embedder = FakeEmbedder()
    model = ScarEmbedding(embedder, embed_batch_size=2)
    assert model.model_name == "fake-abc"
    assert model.embedder is embedder
    assert model.get_query_embedding("abcc") == [1.0, 1.0, 2.0]
    assert await model.aget_query_embedding("aa") == [2.0, 0.0, 0.0]
    assert model.get_text_embedding_batch(["a", "bb", "ccc"]) == [
        [1.0, 0.0, 0.0],
        [0.0, 2.0, 0.0],
        [0.0, 0.0, 3.0],
    ]
    assert embedder.document_batches == [["a", "bb"], ["ccc"]]
    assert await model.aget_text_embedding("cab") == [1.0, 1.0, 1.0]
    with pytest.raises(InvalidTextError):
        model.get_query_embedding("  ")


def test_scar_embedding_defaults_to_the_bundled_minilm_without_loading_it() -> None:
    pytest.importorskip("sentence_transformers")
    model = ScarEmbedding()
    assert "all-MiniLM-L6-v2" in model.model_name
    assert model.embedder._model is None  # loaded on first use only


def test_one_vector_cache_serves_scar_core_and_the_postprocessor(tmp_path) -> None:
    from scar_core.cache import CachedEmbedder, VectorCache

    chain = linked_nodes(["ab", "abc", "c"])
    with VectorCache(tmp_path / "shared.sqlite") as cache:
        CachedEmbedder(FakeEmbedder(), cache).embed_documents(["ab", "abc", "c"])
        fresh = FakeEmbedder()
        scar = SCARNodePostprocessor(
            budget=None,
            docstore=docstore_of(chain),
            embed_model=ScarEmbedding(fresh),
            vector_cache=cache,
        )
        output = scar.postprocess_nodes(
            scored([chain[1]], [0.5]), QueryBundle("abc", embedding=[1, 1, 1])
        )
    assert fresh.document_batches == []
    assert "n1" in [item.node.node_id for item in output]
