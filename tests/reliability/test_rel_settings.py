"""Bad settings are refused when built, naming the value and the valid range; empty inputs.

Generated bad values of every rule setting (k, lambda_, gamma, window, budget and the continuity
bonus, plus a budget smaller than the number of seeds) go to the core's settings and to both
adapters' constructors. Each must raise :class:`InvalidSettingsError` whose message holds
``name=<repr of the value>`` and the range it should lie in.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.vectorstores import InMemoryVectorStore
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.core.storage.docstore import SimpleDocumentStore
from rel_support import HashEmbedder, count_case, run_counted

from scar_core import ScarSettings, expand
from scar_core.budget import BudgetSettings, select_within_budget
from scar_core.errors import InvalidSettingsError, InvalidTextError
from scar_langchain import ScarEmbeddings, SCARRetriever
from scar_llamaindex import ScarEmbedding, SCARNodePostprocessor

CASES_PER_TARGET = 200

not_a_number = st.one_of(st.text(max_size=3), st.booleans(), st.just([1]), st.none())
not_finite = st.sampled_from([math.nan, math.inf, -math.inf])
not_an_integer = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).filter(lambda x: not x.is_integer()),
    st.sampled_from([2.0, 1.0, math.nan]),
    st.text(max_size=2),
    st.booleans(),
)

#: For each setting: generated bad values and a pattern of the valid range its message names.
BAD_VALUES: dict[str, tuple[st.SearchStrategy[Any], str]] = {
    "k": (st.one_of(st.integers(max_value=0), not_an_integer, st.none()), r"integer >= 1"),
    "lambda_": (
        st.one_of(st.floats(max_value=-1e-300), not_finite, not_a_number),
        r"finite number >= 0",
    ),
    "gamma": (
        st.one_of(
            st.floats(max_value=0.0),
            st.floats(min_value=1.0, exclude_min=True),
            not_finite,
            not_a_number,
        ),
        re.escape("(0, 1]"),
    ),
    "window": (st.one_of(st.integers(max_value=0), not_an_integer), r"integer >= 1"),
    "budget": (st.one_of(st.integers(max_value=0), not_an_integer), r"integer >= 1"),
    "continuity_bonus": (
        st.one_of(st.floats(max_value=-1e-300), not_finite, not_a_number),
        r"finite number >= 0",
    ),
}

#: The core names two of them differently.
CORE_NAMES = {"k": "min_seeds", "budget": "max_chunks"}


@st.composite
def bad_settings(draw: st.DrawFn) -> tuple[str, Any, str, dict[str, Any]]:
    """One bad setting (or a budget below k), the name its message uses, and the settings."""
    if draw(st.integers(0, 6)) == 0:
        k = draw(st.integers(2, 8))
        budget = draw(st.integers(1, k - 1))
        return "budget", budget, "smaller than", {"k": k, "budget": budget}
    name = draw(st.sampled_from(sorted(BAD_VALUES)))
    strategy, valid_range = BAD_VALUES[name]
    value = draw(strategy)
    return name, value, valid_range, {name: value}


def assert_refused(error: InvalidSettingsError, name: str, value: Any, valid_range: str) -> None:
    message = str(error)
    assert f"{name}={value!r}" in message, message
    assert re.search(valid_range, message), message


def core_settings(given_settings: dict[str, Any]) -> None:
    """Build the core's settings: plain SCAR's, then budgeted selection's."""
    ScarSettings(**{k: v for k, v in given_settings.items() if k in ("lambda_", "gamma", "window")})
    budget = {"max_chunks": 10}
    for name in ("k", "budget", "continuity_bonus", "lambda_", "window"):
        if name in given_settings:
            budget[CORE_NAMES.get(name, name)] = given_settings[name]
    BudgetSettings(**budget)


def langchain_settings(given_settings: dict[str, Any]) -> None:
    store = InMemoryVectorStore(ScarEmbeddings(HashEmbedder()))
    SCARRetriever(vectorstore=store, **given_settings)


def llamaindex_settings(given_settings: dict[str, Any]) -> None:
    SCARNodePostprocessor(docstore=SimpleDocumentStore(), **given_settings)


TARGETS = {
    "core": core_settings,
    "langchain": langchain_settings,
    "llamaindex": llamaindex_settings,
}


def refusal_property(target: str) -> Any:
    @settings(
        max_examples=CASES_PER_TARGET,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(case=bad_settings())
    def refused(case: tuple[str, Any, str, dict[str, Any]]) -> None:
        count_case(f"settings: {target}")
        name, value, valid_range, given_settings = case
        with pytest.raises(InvalidSettingsError) as raised:
            TARGETS[target](given_settings)
        shown = CORE_NAMES.get(name, name) if target == "core" else name
        assert_refused(raised.value, shown, value, valid_range)

    return refused


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_bad_settings_are_refused_naming_value_and_range(target: str) -> None:
    run_counted(f"settings: {target}", refusal_property(target), CASES_PER_TARGET)


# --------------------------------------------------------------------------------------------
# Empty inputs


def test_the_core_returns_nothing_for_empty_retrieval() -> None:
    vectors = {"a": [1.0, 0.0]}
    assert expand([1.0, 0.0], [], {"a": (None, None)}, vectors).selected == ()
    picked = select_within_budget([1.0, 0.0], [], {}, vectors, BudgetSettings(max_chunks=3))
    assert picked.selected == ()


@pytest.mark.parametrize("budget", [None, 5])
async def test_the_retriever_returns_nothing_for_an_empty_store(budget: int | None) -> None:
    embedder = HashEmbedder()
    retriever = SCARRetriever(
        vectorstore=InMemoryVectorStore(ScarEmbeddings(embedder)), budget=budget, k=2
    )
    assert retriever.invoke("a question") == []
    assert await retriever.ainvoke("a question") == []


@pytest.mark.parametrize("query", ["", "   ", "\n\t"])
@pytest.mark.parametrize("budget", [None, 5])
async def test_the_retriever_refuses_an_empty_query_before_embedding_it(
    query: str, budget: int | None
) -> None:
    embedder = HashEmbedder()
    store = InMemoryVectorStore(ScarEmbeddings(embedder))
    store.add_texts(["some text"], ids=["a"])
    retriever = SCARRetriever(vectorstore=store, budget=budget, k=1)
    with pytest.raises(InvalidTextError, match="empty"):
        retriever.invoke(query)
    with pytest.raises(InvalidTextError, match="empty"):
        await retriever.ainvoke(query)
    assert embedder.query_texts == 0


def _nodes() -> list[NodeWithScore]:
    return [
        NodeWithScore(node=TextNode(id_="a", text="some text", embedding=[1.0, 0.0]), score=1.0)
    ]


@pytest.mark.parametrize("budget", [None, 5])
async def test_the_postprocessor_returns_nothing_for_empty_retrieval(budget: int | None) -> None:
    scar = SCARNodePostprocessor(docstore=SimpleDocumentStore(), budget=budget, k=1)
    assert scar.postprocess_nodes([], QueryBundle("q")) == []
    assert await scar.apostprocess_nodes([], QueryBundle("q")) == []


@pytest.mark.parametrize("budget", [None, 5])
async def test_the_postprocessor_refuses_an_empty_query_it_would_have_to_embed(
    budget: int | None,
) -> None:
    embedder = HashEmbedder(dimension=2)
    scar = SCARNodePostprocessor(
        docstore=SimpleDocumentStore(), embed_model=ScarEmbedding(embedder), budget=budget, k=1
    )
    with pytest.raises(InvalidTextError, match="empty"):
        scar.postprocess_nodes(_nodes(), QueryBundle("  "))
    with pytest.raises(InvalidTextError, match="empty"):
        await scar.apostprocess_nodes(_nodes(), QueryBundle(""))
    assert embedder.query_texts == 0
    # With its embedding given, the query's text is not needed: the documented way to pass one.
    output = scar.postprocess_nodes(_nodes(), QueryBundle("", embedding=[1.0, 0.0]))
    assert [item.node.node_id for item in output] == ["a"]
