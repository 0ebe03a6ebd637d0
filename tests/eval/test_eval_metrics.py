"""Metrics, runs and the bootstrap against values worked out by hand."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
import pytest

from scar_core._errors import InvalidSettingsError
from scar_tools.eval import EvalConfig, paired_bootstrap, run_evaluation
from scar_tools.eval.data import Benchmark, EvalQuery, EvidenceSpan
from scar_tools.eval.embedding import token_counter
from scar_tools.eval.metrics import (
    QueryScores,
    chunk_recall,
    evidence_character_recall,
    merge_intervals,
    summarize,
)
from scar_tools.eval.stats import paired_bootstrap_many


def test_merge_intervals_joins_overlapping_and_touching_ranges_per_document() -> None:
    merged = merge_intervals([("d", 5, 9), ("d", 0, 5), ("e", 1, 2), ("d", 12, 12), ("d", 8, 10)])
    assert merged == [("d", 0, 10), ("e", 1, 2)]


def test_character_recall_counts_the_union_of_evidence_inside_the_cover() -> None:
    evidence = [("d", 7, 12), ("d", 10, 14)]  # 7 characters: [7, 14)
    cover = [("d", 5, 10), ("d", 13, 20), ("e", 0, 100)]  # holds 7, 8, 9 and 13
    assert evidence_character_recall(evidence, cover) == pytest.approx(4 / 7)
    assert evidence_character_recall([], cover) == 0.0


def test_chunk_recall_and_summary_use_ratio_of_means() -> None:
    assert chunk_recall(["a", "b", "x"], ["a", "b", "c", "d"]) == 0.5
    assert chunk_recall(["a"], []) == 0.0
    scores = QueryScores(np.array([0.5, 1.0]), np.array([0.6, 1.0]), np.array([1.0, 3.0]))
    summary = summarize(scores)
    assert (summary.recall, summary.char_recall, summary.chunks) == (0.75, 0.8, 2.0)
    assert summary.efficiency == 0.375  # 0.75 / 2, not mean(0.5, 1/3)
    assert summary.tokens is None
    empty = summarize(scores.subset(np.array([False, False])))
    assert math.isnan(empty.recall)
    assert empty.as_dict()["recall"] is None


class TableEmbedder:
    """Vectors at fixed angles: every cosine is the cosine of a difference of angles."""

    model_name = "table"
    angles: ClassVar[dict[str, float]] = {
        "aaaaa": 0.0,
        "bbbbb": 30.0,
        "ccccc": 50.0,
        "ddddd": 90.0,
        "eeeee": 36.5,
    }
    angles |= {"q zero": 36.5, "q one": 88.0}

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return np.array([self.embed_query(t) for t in texts])

    def embed_query(self, text: str) -> np.ndarray:
        radians = math.radians(self.angles[text])
        return np.array([math.cos(radians), math.sin(radians)])


def _five(text: str) -> list[tuple[int, str]]:
    return [(start, text[start : start + 5]) for start in range(0, len(text), 5)]


def test_a_hand_worked_run() -> None:
    """Doc "aaaaabbbbbcccccddddd" in 5-character chunks a b c d; "q zero" at 36.5° has evidence
    [7, 12) (chunks b and c: fragmented), "q one" at 88° has [16, 18) (chunk d: atomic).
    q zero ranks b (cos 6.5°), c (13.5°), a, d; q one ranks d, c, b, a. So top1 returns b for
    q zero (recall 1/2; evidence characters 7, 8, 9 of 5: 0.6) and d for q one (1 and 1)."""
    documents = {"doc": "aaaaabbbbbcccccddddd", "other": "eeeee"}
    queries = (
        EvalQuery(0, "q zero", (EvidenceSpan("doc", 7, 12),)),
        EvalQuery(1, "q one", (EvidenceSpan("doc", 16, 18),)),
    )
    config = EvalConfig(k=2, methods=("top1", "topk", "static1"), n_resamples=0, sweep=False)
    results = run_evaluation(
        Benchmark("hand", documents, queries), TableEmbedder(), config, splitter=_five,
        show_progress=False,
    )  # fmt: skip
    top1, top2, static = (results.runs[n][1] for n in ("top1", "topk", "static1"))
    assert top1.recall.tolist() == [0.5, 1.0]
    assert top1.char_recall.tolist() == pytest.approx([0.6, 1.0])
    assert top2.recall.tolist() == [1.0, 1.0]
    assert static.chunks.tolist() == [4, 3]  # b, c and their neighbours a, d / d, c and b
    count = token_counter()
    assert top2.tokens is not None
    assert top2.tokens[0] == count("bbbbbccccc")  # one passage, stitched without a gap
    assert results.prepared.fragmented.tolist() == [True, False]
    summary = results.summary("all")["top1"]
    assert (summary.recall, summary.char_recall, summary.chunks) == pytest.approx((0.75, 0.8, 1))
    rows = results.per_query_rows()
    assert rows[0]["group"] == "fragmented"
    assert rows[0]["methods"]["top1"]["chunks"] == 1


def test_bootstrap_of_a_constant_difference_is_that_difference() -> None:
    result = paired_bootstrap([3.0, 4.0, 5.0], [1.0, 2.0, 3.0], n_resamples=200)
    assert (result.mean_difference, result.ci_low, result.ci_high) == (2.0, 2.0, 2.0)
    assert result.cohens_d is None  # every difference equal
    assert result.p_value == pytest.approx(1 / 201)


def test_bootstrap_of_no_difference_has_p_one_and_hand_cohens_d() -> None:
    same = paired_bootstrap([1.0, 0.0, 1.0], [1.0, 0.0, 1.0], n_resamples=100)
    assert same.p_value == 1.0
    result = paired_bootstrap([1.0, 1.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0], n_resamples=100)
    assert result.cohens_d == pytest.approx(0.75 / 0.5)  # mean 0.75, sd(ddof=1) 0.5


def test_bootstrap_is_reproducible_and_shares_resamples() -> None:
    rng = np.random.default_rng(1)
    reference, baseline = rng.random(50), rng.random(50)
    first = paired_bootstrap_many(reference, {"a": baseline, "b": baseline + 0.1}, seed=3)
    again = paired_bootstrap(reference, baseline, seed=3)
    assert first["a"].as_dict() == pytest.approx(again.as_dict())
    assert first["b"].ci_low == pytest.approx(first["a"].ci_low - 0.1)
    assert first["a"].ci_low < first["a"].mean_difference < first["a"].ci_high


def test_bootstrap_refusals() -> None:
    with pytest.raises(InvalidSettingsError, match="same queries"):
        paired_bootstrap([1.0, 2.0], [1.0])
    with pytest.raises(InvalidSettingsError, match="n_resamples=0"):
        paired_bootstrap([1.0], [1.0], n_resamples=0)
    with pytest.raises(InvalidSettingsError, match="confidence=1"):
        paired_bootstrap([1.0], [1.0], confidence=1)
