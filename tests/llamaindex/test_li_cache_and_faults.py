"""Embedding cache, Settings.embed_model fallback, and store/embedding faults with on_error."""

from __future__ import annotations

import asyncio
import logging
import math
from pathlib import Path
from typing import Any

import pytest
from li_support import TableEmbedding, docstore_of, ids_and_scores, linked_nodes, scored
from llama_index.core import Settings
from llama_index.core.schema import BaseNode, QueryBundle
from llama_index.core.storage.docstore import SimpleDocumentStore

from scar_core.cache import VectorCache
from scar_core.errors import EmbeddingError, NeighborFetchError
from scar_llamaindex import SCARNodePostprocessor

QUERY = "query"
ANGLES = [80.0, 30.0, 10.0, 20.0, 90.0, 15.0, 5.0]
TEXTS = [f"chunk {i}" for i in range(len(ANGLES))]
SECRET_URI = "postgresql://scar:hunter2@db.internal/rag"


def unit(degrees: float) -> list[float]:
    return [math.cos(math.radians(degrees)), math.sin(math.radians(degrees))]


def table(model_name: str = "table") -> TableEmbedding:
    return TableEmbedding(
        {t: unit(a) for t, a in zip(TEXTS, ANGLES, strict=True)},
        {QUERY: unit(0.0)},
        model_name=model_name,
    )


# -- cache ---------------------------------------------------------------------------------------


def test_each_node_is_embedded_once_across_calls() -> None:
    model = table()
    chain = linked_nodes(TEXTS)
    scar = SCARNodePostprocessor(budget=None, docstore=docstore_of(chain), embed_model=model)
    bundle = QueryBundle(QUERY, embedding=unit(0.0))
    first = scar.postprocess_nodes(scored([chain[2]], [0.5]), bundle)
    assert sorted(model.embedded_texts) == ["chunk 1", "chunk 2", "chunk 3"]
    second = scar.postprocess_nodes(scored([chain[2]], [0.5]), bundle)
    assert ids_and_scores(second) == ids_and_scores(first)
    # A different seed shares n3 with the first call: only its new texts are embedded.
    scar.postprocess_nodes(scored([chain[4]], [0.5]), bundle)
    assert sorted(model.embedded_texts) == [f"chunk {i}" for i in range(1, 6)]


async def test_the_async_path_shares_the_cache() -> None:
    model = table()
    chain = linked_nodes(TEXTS)
    scar = SCARNodePostprocessor(budget=None, docstore=docstore_of(chain), embed_model=model)
    bundle = QueryBundle(QUERY, embedding=unit(0.0))
    scar.postprocess_nodes(scored([chain[2]], [0.5]), bundle)
    embedded = len(model.embedded_texts)
    await scar.apostprocess_nodes(scored([chain[2]], [0.5]), bundle)
    assert len(model.embedded_texts) == embedded


def test_a_persistent_vector_cache_survives_the_postprocessor(tmp_path: Path) -> None:
    chain = linked_nodes(TEXTS)
    bundle = QueryBundle(QUERY, embedding=unit(0.0))
    with VectorCache(tmp_path / "vectors.sqlite") as cache:
        first_model = table()
        SCARNodePostprocessor(
            budget=None, docstore=docstore_of(chain), embed_model=first_model, vector_cache=cache
        ).postprocess_nodes(scored([chain[2]], [0.5]), bundle)
        assert len(first_model.embedded_texts) == 3
    with VectorCache(tmp_path / "vectors.sqlite") as cache:
        second_model = table()
        output = SCARNodePostprocessor(
            budget=None, docstore=docstore_of(chain), embed_model=second_model, vector_cache=cache
        ).postprocess_nodes(scored([chain[2]], [0.5]), bundle)
        assert second_model.embedded_texts == []
        assert [item.node.node_id for item in output] == ["n1", "n2", "n3"]


def test_vectors_of_one_model_are_not_reused_for_another() -> None:
    chain = linked_nodes(TEXTS)
    bundle = QueryBundle(QUERY, embedding=unit(0.0))
    shared = SCARNodePostprocessor(
        budget=None, docstore=docstore_of(chain), embed_model=table("a")
    ).vector_cache
    for name in ("a", "b"):
        model = table(name)
        SCARNodePostprocessor(
            budget=None, docstore=docstore_of(chain), embed_model=model, vector_cache=shared
        ).postprocess_nodes(scored([chain[2]], [0.5]), bundle)
        assert len(model.embedded_texts) == 3


# -- Settings.embed_model ------------------------------------------------------------------------


def test_settings_embed_model_is_the_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    model = table()
    monkeypatch.setattr(Settings, "_embed_model", model)
    chain = linked_nodes(TEXTS)
    scar = SCARNodePostprocessor(budget=None, docstore=docstore_of(chain))
    output = scar.postprocess_nodes(scored([chain[2]], [0.5]), QueryBundle(QUERY))
    assert [item.node.node_id for item in output] == ["n1", "n2", "n3"]
    assert model.embedded_queries == [QUERY]


def test_no_embed_model_anywhere_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Settings, "_embed_model", None)
    chain = linked_nodes(TEXTS)
    scar = SCARNodePostprocessor(budget=None, docstore=docstore_of(chain))
    with pytest.raises(EmbeddingError, match="Pass embed_model="):
        scar.postprocess_nodes(scored([chain[2]], [0.5]), QueryBundle(QUERY))


# -- faults --------------------------------------------------------------------------------------


class BrokenDocstore(SimpleDocumentStore):
    """A docstore whose reads fail like a database that went away."""

    def get_nodes(self, node_ids: list[str], raise_error: bool = True) -> list[BaseNode]:
        raise ConnectionError(f"could not connect to {SECRET_URI}")

    async def aget_nodes(self, node_ids: list[str], raise_error: bool = True) -> list[BaseNode]:
        raise ConnectionError(f"could not connect to {SECRET_URI}")


class BrokenEmbedding(TableEmbedding):
    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        raise TimeoutError("the embedding service did not answer")

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        raise TimeoutError("the embedding service did not answer")


def broken_store_postprocessor(on_error: Any) -> tuple[SCARNodePostprocessor, list]:
    chain = linked_nodes(TEXTS, vectors=[unit(a) for a in ANGLES])
    scar = SCARNodePostprocessor(
        budget=None, docstore=BrokenDocstore(), embed_model=table(), on_error=on_error
    )
    return scar, scored([chain[2], chain[6]], [0.5, 0.4])


def broken_model_postprocessor(on_error: Any) -> tuple[SCARNodePostprocessor, list]:
    chain = linked_nodes(TEXTS)
    model = BrokenEmbedding(
        {t: unit(a) for t, a in zip(TEXTS, ANGLES, strict=True)}, {QUERY: unit(0.0)}
    )
    scar = SCARNodePostprocessor(
        budget=None, docstore=docstore_of(chain), embed_model=model, on_error=on_error
    )
    return scar, scored([chain[2], chain[6]], [0.5, 0.4])


async def _as_awaitable(scar: SCARNodePostprocessor, seeds: list, bundle: QueryBundle) -> list:
    return scar.postprocess_nodes(seeds, bundle)


@pytest.mark.parametrize(
    ("build", "error", "cause"),
    [
        (broken_store_postprocessor, NeighborFetchError, ConnectionError),
        (broken_model_postprocessor, EmbeddingError, TimeoutError),
    ],
)
@pytest.mark.parametrize("use_async", [False, True])
async def test_on_error_raise_chains_the_cause_without_leaking_its_message(
    build: Any, error: type[Exception], cause: type[Exception], use_async: bool
) -> None:
    scar, seeds = build("raise")
    bundle = QueryBundle(QUERY, embedding=unit(0.0))
    call = (
        scar.apostprocess_nodes(seeds, bundle) if use_async else _as_awaitable(scar, seeds, bundle)
    )
    with pytest.raises(error) as raised:
        await call
    assert isinstance(raised.value.__cause__, cause)
    assert "hunter2" not in str(raised.value)


@pytest.mark.parametrize(
    ("build", "error_name"),
    [
        (broken_store_postprocessor, "NeighborFetchError"),
        (broken_model_postprocessor, "EmbeddingError"),
    ],
)
@pytest.mark.parametrize("use_async", [False, True])
async def test_on_error_return_seeds_returns_every_seed_marked_unexpanded(
    build: Any, error_name: str, use_async: bool, caplog: pytest.LogCaptureFixture
) -> None:
    scar, seeds = build("return_seeds")
    bundle = QueryBundle(QUERY, embedding=unit(0.0))
    with caplog.at_level(logging.WARNING, logger="scar_llamaindex"):
        if use_async:
            output = await scar.apostprocess_nodes(seeds, bundle)
        else:
            output = scar.postprocess_nodes(seeds, bundle)
    assert ids_and_scores(output) == [("n2", 0.5), ("n6", 0.4)]
    for item in output:
        assert item.node.metadata["scar_expanded"] is False
        assert item.node.metadata["scar_error"] == error_name
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "hunter2" not in caplog.text


class SlowQueryEmbedding(TableEmbedding):
    async def _aget_query_embedding(self, query: str) -> list[float]:
        await asyncio.sleep(5)
        return self._get_query_embedding(query)


async def test_a_failed_async_fetch_leaves_no_query_embedding_running() -> None:
    chain = linked_nodes(TEXTS, vectors=[unit(a) for a in ANGLES])
    model = SlowQueryEmbedding({}, {QUERY: unit(0.0)})
    scar = SCARNodePostprocessor(budget=None, docstore=BrokenDocstore(), embed_model=model)
    with pytest.raises(NeighborFetchError):
        await scar.apostprocess_nodes(scored([chain[2]], [0.5]), QueryBundle(QUERY))
    others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    assert all(task.done() for task in others)
    assert model.embedded_queries == []
