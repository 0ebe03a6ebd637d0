"""SCARNodePostprocessor's settings: applied where they belong, refused clearly elsewhere."""

from __future__ import annotations

from typing import Any

import pytest
from llama_index.core.schema import QueryBundle
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.vector_stores import SimpleVectorStore

from li_support import (
    WordHashEmbedding,
    angle,
    docstore_of,
    hash_index,
    linked_nodes,
    scored,
)
from scar_core._errors import InvalidSettingsError
from scar_llamaindex import SCARNodePostprocessor

BUDGET_ONLY = {"keep": 1, "continuity_bonus": 0.0}
PAPER_ONLY = {"gamma": 0.5, "window": 2, "direction": "next"}


def make(**settings: Any) -> SCARNodePostprocessor:
    return SCARNodePostprocessor(filters=None, docstore=SimpleDocumentStore(), **settings)


@pytest.mark.parametrize(("name", "value"), PAPER_ONLY.items())
@pytest.mark.parametrize("mode", [{}, {"mode": "budget"}])
def test_paper_settings_are_refused_in_budget_mode(mode: Any, name: str, value: Any) -> None:
    with pytest.raises(InvalidSettingsError) as raised:
        make(**mode, **{name: value})
    message = str(raised.value)
    assert f"{name}={value!r}" in message
    assert "applies only to mode='paper'" in message
    assert "mode='budget'" in message
    assert f"pass mode='paper' or drop {name}" in message


@pytest.mark.parametrize(("name", "value"), BUDGET_ONLY.items())
def test_budget_settings_are_refused_in_paper_mode(name: str, value: Any) -> None:
    with pytest.raises(InvalidSettingsError, match=rf"{name}={value!r} does not apply to "
                       rf"mode='paper'.*pass mode='budget' or drop {name}"):  # fmt: skip
        make(mode="paper", **{name: value})


@pytest.mark.parametrize(
    ("mode", "settings"),
    [
        ("budget", BUDGET_ONLY | {"lambda_": 0.0, "top_n": 3}),
        ("paper", PAPER_ONLY | {"lambda_": 0.3, "top_n": 3}),
    ],
)
def test_settings_of_the_mode_are_accepted(mode: str, settings: dict[str, Any]) -> None:
    scar = make(mode=mode, **settings)
    assert scar.top_n == settings.pop("top_n")
    assert all(getattr(scar.settings, name) == value for name, value in settings.items())


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"mode": "rerank"}, "mode"),
        ({"top_n": 0}, "top_n"),
        ({"keep": 0}, "keep"),
        ({"lambda_": -0.1}, "lambda_"),
        ({"lambda_": float("nan")}, "lambda_"),
        ({"continuity_bonus": -1.0}, "continuity_bonus"),
        ({"mode": "paper", "gamma": 0.0}, "gamma"),
        ({"mode": "paper", "gamma": 1.5}, "gamma"),
        ({"mode": "paper", "window": 0}, "window"),
        ({"mode": "paper", "direction": "up"}, "direction"),
    ],
)
def test_values_out_of_range_are_refused_naming_the_field(
    settings: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidSettingsError, match=rf"{field}=.* is not valid"):
        make(**settings)


def test_keep_above_top_n_is_refused() -> None:
    with pytest.raises(InvalidSettingsError, match=r"keep=4 is larger than top_n=3; .*lower keep"):
        make(keep=4, top_n=3)


def test_keep_above_the_nodes_received_keeps_them_all() -> None:
    nodes = linked_nodes("a", [angle(d) for d in (5, 60, 10)])
    scar = SCARNodePostprocessor(filters=None, docstore=docstore_of(nodes), keep=3)
    output = scar.postprocess_nodes(
        scored([nodes[1], nodes[0]], [0.5, 0.4]), QueryBundle("q", embedding=angle(0))
    )
    assert [n.node.node_id for n in output] == ["a0", "a1"]


def test_a_store_to_read_from_is_required() -> None:
    with pytest.raises(InvalidSettingsError, match=r"no docstore.*from_index\(index, filters="):
        SCARNodePostprocessor(filters=None)
    with pytest.raises(InvalidSettingsError, match=r"stores_text=False.*docstore=index\.docstore"):
        SCARNodePostprocessor(vector_store=SimpleVectorStore(), filters=None)


def test_from_index_takes_the_stores_and_the_embed_model() -> None:
    embed_model = WordHashEmbedding()
    index = hash_index(embed_model)
    scar = SCARNodePostprocessor.from_index(index, filters=None, mode="paper", gamma=0.7)
    assert scar.docstore is index.docstore
    assert scar.vector_store is index.vector_store
    assert scar.embed_model is embed_model
    assert (scar.settings.mode, scar.settings.gamma) == ("paper", 0.7)


def test_it_is_a_llamaindex_component() -> None:
    scar = make(top_n=3)
    assert SCARNodePostprocessor.class_name() == "SCARNodePostprocessor"
    data = scar.to_dict()
    assert data["class_name"] == "SCARNodePostprocessor"
    assert data["top_n"] == 3
    assert (data["settings"]["mode"], data["settings"]["gamma"]) == ("budget", None)
    assert "docstore" not in data
    description = SCARNodePostprocessor.model_fields["top_n"].description
    assert description is not None
    assert "Nodes returned" in description


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"continuity_bonnus": 0.9}, "continuity_bonnus=0.9; did you mean continuity_bonus"),
        ({"k": 3}, "count is top_n"),
        ({"similarity_top_k": 3}, "that is the retriever's"),
    ],
)
def test_unknown_or_foreign_settings_are_refused(given: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidSettingsError, match=named):
        make(**given)
    with pytest.raises(InvalidSettingsError, match=named):
        SCARNodePostprocessor.from_index(hash_index(WordHashEmbedding()), filters=None, **given)
