"""Construction-time validation, serialisation and the public names of scar_llamaindex."""

from __future__ import annotations

from typing import Any

import pytest
from li_support import TableEmbedding, docstore_of, linked_nodes, scored
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import QueryBundle
from llama_index.core.storage.docstore import SimpleDocumentStore

import scar_llamaindex
from scar_core.budget import BudgetSettings
from scar_core.errors import InvalidSettingsError
from scar_core.settings import ScarSettings
from scar_llamaindex import SCARNodePostprocessor, StoreNeighborSource


def test_public_names_are_pinned() -> None:
    assert sorted(scar_llamaindex.__all__) == sorted(
        [
            "TRACE_METADATA_KEYS",
            "FetchedNodes",
            "FetchedWindow",
            "MemoryTextVectorCache",
            "NeighborSource",
            "OnError",
            "PGVectorNodeSource",
            "SCARNodePostprocessor",
            "ScarEmbedding",
            "StoreNeighborSource",
            "TextVectorCache",
            "WindowNeighborSource",
            "create_node_id_index",
            "stored_embedding",
        ]
    )
    for name in scar_llamaindex.__all__:
        assert getattr(scar_llamaindex, name) is not None


def test_defaults_are_budget_mode_and_budget_none_is_the_papers_rule() -> None:
    scar = SCARNodePostprocessor(docstore=SimpleDocumentStore())
    assert isinstance(scar, BaseNodePostprocessor)
    assert (scar.budget, scar.k, scar.continuity_bonus) == (10, 3, 0.2)
    assert (scar.lambda_, scar.window, scar.direction, scar.max_tokens) == (0.1, None, "both", None)
    assert (scar.merge_passages, scar.on_error, scar.mode) == (False, "raise", "budget")
    # Every incoming node is kept: the budget grows to hold them all when more arrive.
    assert scar.budget_settings(12) == BudgetSettings(12, 0.2, 0.1, min_seeds=12)
    assert scar.budget_settings(2) == BudgetSettings(10, 0.2, 0.1, min_seeds=2)
    paper = SCARNodePostprocessor(docstore=SimpleDocumentStore(), budget=None)
    assert paper.mode == "plain"
    assert paper.settings == ScarSettings.paper()
    with pytest.raises(InvalidSettingsError, match="plain mode"):
        paper.budget_settings(3)
    assert SCARNodePostprocessor.class_name() == "SCARNodePostprocessor"


def test_settings_serialise_without_the_stores() -> None:
    scar = SCARNodePostprocessor(budget=None, docstore=SimpleDocumentStore(), gamma=0.7, window=2)
    data = scar.to_dict()
    assert data["class_name"] == "SCARNodePostprocessor"
    assert data["gamma"] == 0.7
    assert data["window"] == 2
    assert data["budget"] is None
    assert "docstore" not in data
    assert "embed_model" not in data
    assert SCARNodePostprocessor(docstore=SimpleDocumentStore()).to_dict()["budget"] == 10


def test_fields_have_descriptions() -> None:
    for name, field in SCARNodePostprocessor.model_fields.items():
        if name != "callback_manager":
            assert field.description, name


@pytest.mark.parametrize("budget", [10, None])
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
        ("k", 0, r"k=0 is not valid; it must be an integer >= 1"),
        ("continuity_bonus", -0.1, r"continuity_bonus=-0.1 is not valid; .* >= 0"),
        ("continuity_bonus", float("nan"), r"continuity_bonus=nan is not valid"),
        ("max_tokens", 0, r"max_tokens=0 is not valid; it must be an integer >= 1"),
        ("token_counter", "cl100k", r"token_counter='cl100k' is not valid"),
    ],
)
def test_bad_settings_are_rejected_at_construction(
    setting: str, value: Any, message: str, budget: int | None
) -> None:
    with pytest.raises(InvalidSettingsError, match=message):
        SCARNodePostprocessor(docstore=SimpleDocumentStore(), budget=budget, **{setting: value})


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"budget": 2}, r"budget=2 is smaller than k=3: a budget smaller than the number"),
        ({"budget": 4, "k": 5}, r"budget=4 is smaller than k=5"),
        ({"budget": 0}, r"budget=0 is not valid; it must be an integer >= 1"),
        ({"budget": 2.5}, r"budget=2.5 is not valid"),
        ({"max_tokens": 2}, r"max_tokens=2 is smaller than k=3"),
    ],
)
def test_bad_budget_settings_are_rejected_at_construction(
    settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidSettingsError, match=message):
        SCARNodePostprocessor(docstore=SimpleDocumentStore(), **settings)


@pytest.mark.parametrize(
    ("budget", "attribute", "value", "message"),
    [
        (None, "gamma", 2.0, r"gamma=2\.0"),
        (10, "gamma", 2.0, r"gamma=2\.0"),
        (10, "budget", 1, r"budget=1 is smaller than k=3"),
        (10, "continuity_bonus", -1.0, r"continuity_bonus=-1\.0"),
    ],
)
def test_a_bad_assignment_after_construction_is_caught_before_use(
    budget: int | None, attribute: str, value: Any, message: str
) -> None:
    chain = linked_nodes(["a", "b"])
    scar = SCARNodePostprocessor(
        budget=budget,
        docstore=docstore_of(chain),
        embed_model=TableEmbedding({"a": [1, 0], "b": [0, 1]}),
    )
    setattr(scar, attribute, value)
    with pytest.raises(InvalidSettingsError, match=message):
        scar.postprocess_nodes(scored([chain[0]], [1.0]), QueryBundle("q", embedding=[1, 0]))


def test_wrong_component_types_are_rejected() -> None:
    with pytest.raises(InvalidSettingsError, match="BaseDocumentStore"):
        SCARNodePostprocessor(docstore={"a": 1})  # type: ignore[arg-type]
    with pytest.raises(InvalidSettingsError, match="BaseEmbedding"):
        SCARNodePostprocessor(budget=None, docstore=SimpleDocumentStore(), embed_model="all-MiniLM")  # type: ignore[arg-type]
    with pytest.raises(InvalidSettingsError, match="fetch"):
        SCARNodePostprocessor(budget=None, neighbor_source=object())  # type: ignore[arg-type]


def test_a_custom_source_replaces_the_stores() -> None:
    source = StoreNeighborSource(docstore=SimpleDocumentStore())
    assert SCARNodePostprocessor(budget=None, neighbor_source=source).neighbor_source is source
    with pytest.raises(InvalidSettingsError, match="not both"):
        SCARNodePostprocessor(budget=None, docstore=SimpleDocumentStore(), neighbor_source=source)
