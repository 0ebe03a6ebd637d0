"""The method registry: names, patterns, custom methods and methods that cannot run here."""

from __future__ import annotations

import pytest

from scar_core.errors import InvalidSettingsError
from scar_core.eval import (
    EvalConfig,
    MatchedTopK,
    MethodRegistry,
    MethodUnavailableError,
    QueryContext,
    ScarMethod,
    StaticWindowMethod,
    TopKMethod,
    create_method,
    run_evaluation,
    top_result,
)
from scar_core.eval.baseline_methods import ParentMethod, parent_blocks
from scar_core.eval.methods import DEFAULT_REGISTRY, register_builtins
from scar_core.policy import ExpansionResult


@pytest.mark.parametrize(
    ("name", "window", "gamma", "lambda_"),
    [
        ("scar1", 1, 0.8, 0.1),
        ("scar2", 2, 0.8, 0.1),
        ("scar1_lambda0", 1, 0.8, 0.0),
        ("scar1_g0.5", 1, 0.5, 0.1),
        ("scar2_g0.65_l0.25", 2, 0.65, 0.25),
        ("scar1_l0", 1, 0.8, 0.0),
    ],
)
def test_scar_names_parse_their_settings(
    name: str, window: int, gamma: float, lambda_: float
) -> None:
    method = create_method(name)
    assert isinstance(method, ScarMethod)
    settings = method.policy.settings
    assert (settings.window, settings.gamma, settings.lambda_) == (window, gamma, lambda_)


def test_parametrised_baseline_names() -> None:
    top = create_method("top10")
    assert isinstance(top, TopKMethod)
    assert top.depth == 10
    assert create_method("topk").depth is None  # type: ignore[attr-defined]
    static = create_method("static3")
    assert isinstance(static, StaticWindowMethod)
    assert static.window == 3
    parent = create_method("parent4000")
    assert isinstance(parent, ParentMethod)
    assert parent.parent_size == 4000
    matched = create_method("topk_matched")
    assert isinstance(matched, MatchedTopK)
    assert isinstance(matched.reference, ScarMethod)
    nested = create_method("topk_matched_scar2_g0.5")
    assert isinstance(nested, MatchedTopK)
    assert nested.reference.policy.settings.gamma == 0.5  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("nonsense", "method 'nonsense' is not known; use one of: topk"),
        ("scar0", "window=0 is not valid"),
        ("scar1_g1.5", "gamma=1.5 is not valid"),
        ("top0", "depth=0 is not valid"),
        ("static0", "window=0 is not valid"),
    ],
)
def test_bad_names_are_refused_with_the_fix(name: str, message: str) -> None:
    with pytest.raises(InvalidSettingsError, match=message):
        create_method(name)


def test_a_custom_function_and_pattern_run_in_an_evaluation(hand_case) -> None:
    registry = MethodRegistry()
    register_builtins(registry)

    def second_best_only(context: QueryContext) -> ExpansionResult:
        # The second-ranked chunk alone: in the hand case q0 -> c (recall 1/2), q1 -> c (recall 0).
        return ExpansionResult(top_result(context, 2).selected[1:])

    registry.register("second", lambda: second_best_only, "the runner-up")
    registry.register_pattern(r"first(\d+)", lambda m: TopKMethod(int(m[1])), "first3")
    assert "second" in registry
    assert "first7" in registry
    assert "other" not in registry
    with pytest.raises(InvalidSettingsError, match="already registered"):
        registry.register("second", lambda: second_best_only)
    results = run_evaluation(
        hand_case.benchmark,
        hand_case.embedder,
        EvalConfig(k=1, methods=("second", "first2"), sweep=False, reference="second"),
        registry=registry,
        count_tokens=len,
        splitter=hand_case.splitter,
        show_progress=False,
    )
    # q0 ranking b, c, a, d; q1 ranking d, c, b, a.  "second": q0 {c} 1/2, q1 {c} 0 -> 0.25.
    # "first2": q0 {b, c} 1, q1 {d, c} 1 -> 1.
    assert results.summary("all")["second"].recall == 0.25
    assert results.summary("all")["first2"].recall == 1.0


def test_an_unavailable_method_is_skipped_with_its_reason(hand_case) -> None:
    registry = MethodRegistry()
    register_builtins(registry)

    def unavailable() -> TopKMethod:
        raise MethodUnavailableError("needs a GPU")

    class FailsWhenRun(TopKMethod):
        def select(self, context: QueryContext) -> ExpansionResult:
            raise MethodUnavailableError("the model vanished")

    registry.register("gpu_only", unavailable)
    registry.register("flaky", FailsWhenRun)
    results = run_evaluation(
        hand_case.benchmark,
        hand_case.embedder,
        EvalConfig(k=1, methods=("topk", "gpu_only", "flaky"), sweep=False),
        registry=registry,
        count_tokens=len,
        splitter=hand_case.splitter,
        show_progress=False,
    )
    assert set(results.scores) == {"topk"}
    assert results.skipped["gpu_only"] == "needs a GPU"
    assert results.skipped["flaky"] == "the model vanished"
    assert "scar1" in results.skipped["bootstrap"]
    payload = results.to_dict()
    assert payload["bootstrap"] is None
    assert "gpu_only" in payload["skipped"]


def test_rerank_is_skipped_when_no_cross_encoder_is_offline(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    monkeypatch.setenv("SCAR_CROSS_ENCODER", str(tmp_path / "no-model-here"))
    with pytest.raises(MethodUnavailableError, match="no cross-encoder is available offline"):
        DEFAULT_REGISTRY.create("rerank")


def test_parent_blocks_pack_chunks_up_to_the_size(hand_case) -> None:
    # "doc" chunks span [0,5) [5,10) [10,15) [15,20): with 10 characters, blocks {a,b}, {c,d};
    # with 12, a+b span 10 <= 12, adding c would span 15 > 12 -> same blocks; with 15, {a,b,c}, {d}.
    from scar_core.eval import chunk_corpus

    corpus = chunk_corpus(hand_case.benchmark.documents, splitter=hand_case.splitter)
    ids = corpus.ids

    def blocks(size: int) -> list[list[int]]:
        mapping = parent_blocks(corpus.records, size)
        groups: dict[str, list[int]] = {}
        for row, chunk_id in enumerate(ids):
            groups.setdefault(mapping[chunk_id], []).append(row)
        return sorted(groups.values())

    assert blocks(10) == [[0, 1], [2, 3], [4]]
    assert blocks(12) == [[0, 1], [2, 3], [4]]
    assert blocks(15) == [[0, 1, 2], [3], [4]]
    assert blocks(3) == [[0], [1], [2], [3], [4]]


def test_parent_selects_each_seeds_block(hand_case) -> None:
    # parent10: q0's seed b lies in block {a, b}: recall 1/2 (c missed), 2 chunks;
    # q1's seed d lies in block {c, d}: recall 1, 2 chunks.
    from scar_core.eval.methods import register_builtins as builtins

    registry = MethodRegistry()
    builtins(registry)
    results = run_evaluation(
        hand_case.benchmark,
        hand_case.embedder,
        EvalConfig(k=1, methods=("parent10",), sweep=False),
        registry=registry,
        count_tokens=len,
        splitter=hand_case.splitter,
        show_progress=False,
    )
    summary = results.summary("all")["parent10"]
    assert (summary.recall, summary.chunks) == (0.75, 2.0)
