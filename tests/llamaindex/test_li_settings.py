"""Construction-time validation, serialisation and the public names of scar_llamaindex."""

from __future__ import annotations

from typing import Any

import pytest
from li_support import TableEmbedding, docstore_of, linked_nodes, scored
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import QueryBundle
from llama_index.core.storage.docstore import SimpleDocumentStore

import scar_llamaindex
from scar_core.errors import InvalidSettingsError
from scar_llamaindex import SCARNodePostprocessor, StoreNeighborSource


def test_public_names_are_pinned() -> None:
    assert sorted(scar_llamaindex.__all__) == sorted(
        [
            "TRACE_METADATA_KEYS",
            "FetchedNodes",
            "MemoryTextVectorCache",
            "NeighborSource",
            "OnError",
            "PGVectorNodeSource",
            "SCARNodePostprocessor",
            "ScarEmbedding",
            "StoreNeighborSource",
            "TextVectorCache",
            "create_node_id_index",
            "stored_embedding",
        ]
    )
    for name in scar_llamaindex.__all__:
        assert getattr(scar_llamaindex, name) is not None


def test_defaults_are_the_papers() -> None:
    scar = SCARNodePostprocessor(docstore=SimpleDocumentStore())
    assert isinstance(scar, BaseNodePostprocessor)
    assert (scar.lambda_, scar.gamma, scar.window, scar.direction) == (0.1, 0.8, 1, "both")
    assert (scar.merge_passages, scar.on_error) == (False, "raise")
    assert SCARNodePostprocessor.class_name() == "SCARNodePostprocessor"


def test_settings_serialise_without_the_stores() -> None:
    scar = SCARNodePostprocessor(docstore=SimpleDocumentStore(), gamma=0.7, window=2)
    data = scar.to_dict()
    assert data["class_name"] == "SCARNodePostprocessor"
    assert data["gamma"] == 0.7
    assert data["window"] == 2
    assert "docstore" not in data
    assert "embed_model" not in data


def test_fields_have_descriptions() -> None:
    for name, field in SCARNodePostprocessor.model_fields.items():
        if name != "callback_manager":
            assert field.description, name


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("lambda_", -0.1, r"lambda_=-0.1 is not valid; it must be a finite number >= 0"),
        ("lambda_", float("nan"), r"lambda_=nan is not valid"),
        ("gamma", 0.0, r"gamma=0.0 is not valid; it must lie in \(0, 1\]"),
        ("gamma", 1.5, r"gamma=1.5 is not valid"),
        ("window", 0, r"window=0 is not valid; it must be an integer >= 1"),
        ("window", 1.5, r"window=1.5 is not valid"),
        ("window", True, r"window=True is not valid"),
        ("direction", "forward", r"direction='forward' is not valid; use one of both"),
        ("on_error", "ignore", r"on_error='ignore' is not valid; use 'raise'"),
        ("merge_passages", "yes", r"merge_passages='yes' is not valid"),
        ("previous_id_key", "", r"previous_id_key='' is not valid"),
        ("next_id_key", 3, r"next_id_key=3 is not valid"),
    ],
)
def test_bad_settings_are_rejected_at_construction(setting: str, value: Any, message: str) -> None:
    with pytest.raises(InvalidSettingsError, match=message):
        SCARNodePostprocessor(docstore=SimpleDocumentStore(), **{setting: value})


def test_a_bad_assignment_after_construction_is_caught_before_use() -> None:
    chain = linked_nodes(["a", "b"])
    scar = SCARNodePostprocessor(
        docstore=docstore_of(chain), embed_model=TableEmbedding({"a": [1, 0], "b": [0, 1]})
    )
    scar.gamma = 2.0
    with pytest.raises(InvalidSettingsError, match=r"gamma=2\.0"):
        scar.postprocess_nodes(scored([chain[0]], [1.0]), QueryBundle("q", embedding=[1, 0]))


def test_wrong_component_types_are_rejected() -> None:
    with pytest.raises(InvalidSettingsError, match="BaseDocumentStore"):
        SCARNodePostprocessor(docstore={"a": 1})  # type: ignore[arg-type]
    with pytest.raises(InvalidSettingsError, match="BaseEmbedding"):
        SCARNodePostprocessor(docstore=SimpleDocumentStore(), embed_model="all-MiniLM")  # type: ignore[arg-type]
    with pytest.raises(InvalidSettingsError, match="fetch"):
        SCARNodePostprocessor(neighbor_source=object())  # type: ignore[arg-type]


def test_a_custom_source_replaces_the_stores() -> None:
    source = StoreNeighborSource(docstore=SimpleDocumentStore())
    assert SCARNodePostprocessor(neighbor_source=source).neighbor_source is source
    with pytest.raises(InvalidSettingsError, match="not both"):
        SCARNodePostprocessor(docstore=SimpleDocumentStore(), neighbor_source=source)
