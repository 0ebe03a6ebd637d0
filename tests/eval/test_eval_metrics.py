"""Metrics on hand-built cases: every expected number is derived by hand in the comments."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from scar_core.errors import InvalidSettingsError
from scar_core.eval import (
    EvalConfig,
    EvalResults,
    chunk_corpus,
    chunk_recall,
    evidence_character_recall,
    run_evaluation,
)
from scar_core.eval.metrics import QueryScores, covered_characters, merge_intervals, summarize

# ---------------------------------------------------------------------------------------------
# Interval arithmetic


def test_merge_intervals_joins_overlapping_and_touching_ranges_per_document() -> None:
    # [0,5) and [3,8) overlap -> [0,8); [8,10) touches it -> [0,10); [12,12) is empty and dropped;
    # the same offsets in another document stay apart.
    merged = merge_intervals([("d", 3, 8), ("d", 0, 5), ("d", 8, 10), ("d", 12, 12), ("e", 0, 4)])
    assert merged == [("d", 0, 10), ("e", 0, 4)]


def test_character_recall_counts_the_union_of_spans_once() -> None:
    # Evidence [10,20) and [15,30) -> union [10,30), 20 characters.
    # Cover [0,12) holds 10,11 (2 chars); cover [25,40) holds 25..29 (5 chars) -> 7 / 20 = 0.35.
    evidence = [("d", 10, 20), ("d", 15, 30)]
    cover = [("d", 0, 12), ("d", 25, 40)]
    assert evidence_character_recall(evidence, cover) == pytest.approx(0.35)


def test_character_recall_ignores_cover_in_another_document() -> None:
    # Same offsets, other document: nothing covered.
    assert evidence_character_recall([("d", 0, 10)], [("e", 0, 10)]) == 0.0


def test_chunk_recall_is_the_share_of_gold_chunks_selected() -> None:
    # Gold {g1, g2, g3}; selected g1, g3 and a non-gold chunk -> 2 / 3.
    assert chunk_recall(["g1", "x", "g3"], {"g1", "g2", "g3"}) == pytest.approx(2 / 3)


def test_summary_efficiency_is_mean_recall_over_mean_chunks() -> None:
    # Recalls 1 and 0.5 -> mean 0.75; chunks 2 and 4 -> mean 3; efficiency 0.75 / 3 = 0.25
    # (not the mean of per-query ratios, which would be (0.5 + 0.125) / 2 = 0.3125).
    scores = QueryScores(np.array([1.0, 0.5]), np.array([1.0, 0.2]), np.array([2.0, 4.0]))
    summary = summarize(scores)
    assert summary.recall == 0.75
    assert summary.char_recall == pytest.approx(0.6)
    assert summary.chunks == 3.0
    assert summary.efficiency == 0.25
    assert summary.tokens is None


intervals = st.lists(
    st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 60), st.integers(0, 60)).map(
        lambda t: (t[0], min(t[1], t[2]), max(t[1], t[2]))
    ),
    max_size=8,
)


@given(evidence=intervals, cover=intervals)
def test_covered_characters_matches_a_set_of_characters(
    evidence: list[tuple[str, int, int]], cover: list[tuple[str, int, int]]
) -> None:
    def characters(ranges: list[tuple[str, int, int]]) -> set[tuple[str, int]]:
        return {(doc, i) for doc, start, end in ranges for i in range(start, end)}

    expected = len(characters(evidence) & characters(cover))
    assert covered_characters(merge_intervals(evidence), merge_intervals(cover)) == expected


# ---------------------------------------------------------------------------------------------
# The hand-built benchmark (see tests/eval/conftest.py)
#
# Document "doc" = a[0,5) b[5,10) c[10,15) d[15,20) at 0°, 30°, 50°, 90°; "other" = e[0,5) at 36.5°.
# q0 at 36.5°, evidence [7,12) -> gold {b, c} (fragmented), 5 evidence characters.
#   cosines: a cos36.5=0.8039, b cos6.5=0.9936, c cos13.5=0.9724, d cos53.5=0.5948 -> b, c, a, d.
# q1 at 88°, evidence [16,18) -> gold {d} (atomic), 2 evidence characters.
#   cosines: a 0.0349, b cos58=0.5299, c cos38=0.7880, d cos2=0.9994 -> d, c, b, a.
# k = 1.  Tokens are counted as characters of the assembled passage (contiguous chunks join with
# nothing in between), so a passage of n chunks is 5n tokens.
#
# SCAR ±1 (λ 0.1, γ 0.8):
#   q0 seed b, threshold 0.8 * 0.9936 = 0.7949.
#     a: penalty 1 - cos30 = 0.1340, S = 0.8039 - 0.0134 = 0.7905 < 0.7949 -> rejected
#     c: penalty 1 - cos20 = 0.0603, S = 0.9724 - 0.0060 = 0.9663 > 0.7949 -> accepted
#   q1 seed d, threshold 0.8 * 0.9994 = 0.7995.
#     c: penalty 1 - cos40 = 0.2340, S = 0.7880 - 0.0234 = 0.7646 < 0.7995 -> rejected
# SCAR ±1, λ 0: q0 a: S = 0.8039 > 0.7949 -> accepted, c accepted; q1 c: 0.7880 < 0.7995 -> no.
# SCAR ±2: q0 as ±1, then d via c: S = 0.5948 - 0.1 * (1 - cos40) = 0.5714 < 0.7949 -> {b, c}.
#
# Selections and per-query (recall, char recall, chunks, tokens):
#   method         q0                               q1
#   topk           {b}      1/2, 3/5 ([7,10)), 1, 5  {d}       1, 1, 1, 5
#   static1        {a,b,c}  1, 1, 3, 15              {c,d}     1, 1, 2, 10
#   static2        {a,b,c,d} 1, 1, 4, 20             {b,c,d}   1, 1, 3, 15
#   scar1          {b,c}    1, 1, 2, 10              {d}       1, 1, 1, 5
#   scar2          {b,c}    1, 1, 2, 10              {d}       1, 1, 1, 5
#   scar1_lambda0  {a,b,c}  1, 1, 3, 15              {d}       1, 1, 1, 5
#   topk_matched   k'=2 {b,c} 1, 1, 2, 10            k'=1 {d}  1, 1, 1, 5
#   top3           {b,c,a}  1, 1, 3, 15              {d,c,b}   1, 1, 3, 15

HAND_EXPECTED_ALL = {
    # method: (recall, char_recall, chunks, efficiency, tokens), means over q0 and q1
    "topk": (0.75, 0.8, 1.0, 0.75, 5.0),
    "static1": (1.0, 1.0, 2.5, 0.4, 12.5),
    "static2": (1.0, 1.0, 3.5, 1 / 3.5, 17.5),
    "scar1": (1.0, 1.0, 1.5, 1 / 1.5, 7.5),
    "scar2": (1.0, 1.0, 1.5, 1 / 1.5, 7.5),
    "scar1_lambda0": (1.0, 1.0, 2.0, 0.5, 10.0),
    "topk_matched": (1.0, 1.0, 1.5, 1 / 1.5, 7.5),
    "top3": (1.0, 1.0, 3.0, 1 / 3, 15.0),
}
HAND_EXPECTED_FRAGMENTED = {
    # q0 alone
    "topk": (0.5, 0.6, 1.0, 0.5, 5.0),
    "static1": (1.0, 1.0, 3.0, 1 / 3, 15.0),
    "scar1": (1.0, 1.0, 2.0, 0.5, 10.0),
    "scar1_lambda0": (1.0, 1.0, 3.0, 1 / 3, 15.0),
}


def _run_hand(hand_case, scope: str = "document", n_resamples: int = 500) -> EvalResults:
    config = EvalConfig(
        scope=scope,
        k=1,
        methods=tuple(HAND_EXPECTED_ALL),
        n_resamples=n_resamples,
        sweep=False,
    )
    return run_evaluation(
        hand_case.benchmark,
        hand_case.embedder,
        config,
        count_tokens=len,
        splitter=hand_case.splitter,
        show_progress=False,
    )


def test_hand_case_chunks_and_groups(hand_case) -> None:
    corpus = chunk_corpus(hand_case.benchmark.documents, splitter=hand_case.splitter)
    assert [(c.document_id, c.start, c.text) for c in corpus.chunks] == [
        ("doc", 0, "aaaaa"),
        ("doc", 5, "bbbbb"),
        ("doc", 10, "ccccc"),
        ("doc", 15, "ddddd"),
        ("other", 0, "eeeee"),
    ]
    results = _run_hand(hand_case)
    assert results.group_sizes() == {"fragmented": 1, "atomic": 1, "all": 2}


@pytest.mark.parametrize("method", list(HAND_EXPECTED_ALL))
def test_hand_case_means_over_all_queries(hand_case, method: str) -> None:
    summary = _run_hand(hand_case).summary("all")[method]
    got = (summary.recall, summary.char_recall, summary.chunks, summary.efficiency, summary.tokens)
    assert got == pytest.approx(HAND_EXPECTED_ALL[method])


@pytest.mark.parametrize("method", list(HAND_EXPECTED_FRAGMENTED))
def test_hand_case_means_over_fragmented_queries(hand_case, method: str) -> None:
    summary = _run_hand(hand_case).summary("fragmented")[method]
    got = (summary.recall, summary.char_recall, summary.chunks, summary.efficiency, summary.tokens)
    assert got == pytest.approx(HAND_EXPECTED_FRAGMENTED[method])


def test_hand_case_corpus_scope_lets_the_other_document_win(hand_case) -> None:
    # In corpus scope q0's best chunk is e (cos 0 degrees = 1.0), which is not gold: top-1 recall 0
    # and character recall 0 for q0; q1 still gets d (0.9994 > cos51.5 = 0.6225): recall 1.
    # Means: recall (0 + 1) / 2 = 0.5, char recall 0.5, chunks 1.
    summary = _run_hand(hand_case, scope="corpus").summary("all")["topk"]
    assert (summary.recall, summary.char_recall, summary.chunks) == pytest.approx((0.5, 0.5, 1.0))
    # e has no neighbour, so SCAR keeps it alone for q0: scar1 recall is 0.5 as well.
    assert _run_hand(hand_case, scope="corpus").summary("all")["scar1"].recall == 0.5


def test_hand_case_bootstrap_difference_and_effect_size(hand_case) -> None:
    # scar1 minus topk, chunks, all queries: q0 2 - 1 = 1, q1 1 - 1 = 0 -> mean 0.5;
    # sd of [1, 0] (ddof 1) = sqrt(0.5) -> Cohen's d_z = 0.5 / 0.7071 = 0.7071.
    # Every resample mean is 0, 0.5 or 1, so the interval lies within [0, 1].
    results = _run_hand(hand_case)
    assert results.bootstrap is not None
    entry = results.bootstrap["groups"]["all"]["topk"]["chunks"]
    assert entry["mean_difference"] == 0.5
    assert entry["cohens_d"] == pytest.approx(0.5 / math.sqrt(0.5))
    assert 0.0 <= entry["ci_low"] <= 0.5 <= entry["ci_high"] <= 1.0
    # scar1 minus scar2 differs on no query: difference 0, p-value 1, d undefined.
    same = results.bootstrap["groups"]["all"]["scar2"]["recall"]
    assert (same["mean_difference"], same["p_value"], same["cohens_d"]) == (0.0, 1.0, None)


def test_results_json_shape(hand_case) -> None:
    payload = _run_hand(hand_case).to_dict()
    assert set(payload["groups"]) == {"atomic", "fragmented", "all"}
    assert payload["groups"]["atomic"]["n"] == 1
    row = payload["groups"]["atomic"]["methods"]["static1"]
    # q1 alone under static1: recall 1, char recall 1, chunks 2, efficiency 0.5, tokens 10.
    assert row == {
        "recall": 1.0,
        "char_recall": 1.0,
        "chunks": 2.0,
        "efficiency": 0.5,
        "tokens": 10.0,
    }


def test_hand_case_sweep_points(hand_case) -> None:
    # Built-in curves at k = 1, plus a custom curve of top1 and top2.
    # top-k curve, k = 3 -> the top3 row above: recall 1, chunks 3 (all queries).
    # static curve w = 0 is topk: recall 0.75, chunks 1; w = 1 is static1: 1, 2.5.
    # SCAR ±1 λ 0.1 at γ 0.8 is scar1: recall 1, chunks 1.5.
    # custom top2: q0 {b, c} recall 1, q1 {d, c} recall 1 -> 1.0 at 2 chunks; value 2 from the name.
    config = EvalConfig(
        k=1,
        methods=("topk",),
        n_resamples=10,
        sweep_depths=(1, 3),
        sweep_windows=(1,),
        sweep_gammas=(0.8,),
        sweep_lambdas=(0.1,),
        sweep_curves=(("tops", ("top1", "top2")),),
    )
    results = run_evaluation(
        hand_case.benchmark,
        hand_case.embedder,
        config,
        count_tokens=len,
        splitter=hand_case.splitter,
        show_progress=False,
    )
    assert results.sweep is not None
    curves = {curve["label"]: curve for curve in results.sweep}

    def point(label: str, index: int) -> tuple[float, float, float]:
        entry = curves[label]["points"][index]
        return entry["value"], entry["groups"]["all"]["recall"], entry["groups"]["all"]["chunks"]

    assert point("top-k", 1) == (3.0, 1.0, 3.0)
    assert point("static ±w (k=1)", 0) == (0.0, 0.75, 1.0)
    assert point("static ±w (k=1)", 1) == (1.0, 1.0, 2.5)
    assert point("SCAR ±1, λ=0.1", 0) == (0.8, 1.0, 1.5)
    assert point("tops", 1) == (2.0, 1.0, 2.0)
    assert curves["tops"]["family"] == "custom"


def test_unknown_sweep_curve_method_fails_before_embedding(hand_case) -> None:
    config = EvalConfig(methods=("topk",), sweep_curves=(("bad", ("nope",)),))
    with pytest.raises(InvalidSettingsError, match="method 'nope' is not known"):
        run_evaluation(hand_case.benchmark, hand_case.embedder, config, show_progress=False)
    assert hand_case.embedder.calls == 0


def test_progress_bars_go_to_stderr(hand_case, capsys: pytest.CaptureFixture[str]) -> None:
    config = EvalConfig(k=1, methods=("topk", "scar1"), n_resamples=10, sweep_gammas=(0.8,))
    run_evaluation(
        hand_case.benchmark,
        hand_case.embedder,
        config,
        count_tokens=len,
        splitter=hand_case.splitter,
        show_progress=True,
    )
    captured = capsys.readouterr()
    for stage in ("embedding chunks", "embedding queries", "evaluating methods", "sweep"):
        assert stage in captured.err
    assert captured.out == ""
