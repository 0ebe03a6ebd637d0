"""The demo's retrieval, expansion and scoring, checked against naive recomputation.

A hashing bag-of-words embedder stands in for the model, so every number can be recomputed here
from the vectors, the chunking and the gold spans.
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest

from scar_core.demo import (
    DEMO_DEFAULTS,
    METHODS,
    DemoSettings,
    format_report,
    load_sample,
    run_demo,
    split_documents,
)
from scar_core.demo.report import WIDTH
from scar_core.tokens import whitespace_counter

pytest.importorskip("langchain_text_splitters")

SETTINGS = [
    DEMO_DEFAULTS,
    DemoSettings(chunk_size=400, k=2, lambda_=0.0, gamma=0.3, window=2),
]


@pytest.fixture(params=SETTINGS, ids=["defaults", "window2"])
def run(request, hashing_embedder):
    settings = request.param
    result = run_demo(settings, embedder=hashing_embedder, count_tokens=whitespace_counter)
    return settings, result


def unit(vector: np.ndarray) -> np.ndarray:
    return vector / np.linalg.norm(vector)


def test_seeds_are_the_k_nearest_chunks_of_the_document(run, hashing_embedder) -> None:
    settings, result = run
    sample = load_sample()
    chunked = split_documents(sample.documents, settings.chunk_size)
    for question, outcome in zip(sample.questions, result.questions, strict=True):
        chunks = chunked[question.document]
        q = unit(hashing_embedder.embed_query(question.query).astype(np.float64))
        cosines = [
            float(unit(hashing_embedder._vector(c.text).astype(np.float64)) @ q) for c in chunks
        ]
        # Naive: sort by (-cosine, position).
        order = sorted(range(len(chunks)), key=lambda i: (-cosines[i], i))
        assert [p for p, _ in outcome.seeds] == order[: settings.k]
        for position, cosine in outcome.seeds:
            assert cosine == pytest.approx(cosines[position], abs=1e-6)
        assert outcome.methods["topk"].positions == tuple(sorted(order[: settings.k]))
        matched = outcome.methods["topk_matched"].positions
        assert matched == tuple(sorted(order[: outcome.methods["scar"].chunks]))


def test_recall_and_characters_match_naive_counts(run) -> None:
    settings, result = run
    sample = load_sample()
    chunked = split_documents(sample.documents, settings.chunk_size)
    for question, outcome in zip(sample.questions, result.questions, strict=True):
        chunks = chunked[question.document]
        evidence = {i for span in question.spans for i in range(span.start, span.end)}
        gold = {c.position for c in chunks if evidence & set(range(c.start, c.end))}
        assert set(outcome.gold) == gold
        for method in METHODS:
            scores = outcome.methods[method]
            chosen = set(scores.positions)
            assert scores.recall == pytest.approx(len(gold & chosen) / len(gold))
            covered = {i for c in chunks if c.position in chosen for i in range(c.start, c.end)}
            assert scores.char_recall == pytest.approx(len(evidence & covered) / len(evidence))


def test_tokens_count_each_contiguous_passage_once(run) -> None:
    settings, result = run
    sample = load_sample()
    chunked = split_documents(sample.documents, settings.chunk_size)
    for question, outcome in zip(sample.questions, result.questions, strict=True):
        text = sample.documents[question.document]
        chunks = chunked[question.document]
        for method in METHODS:
            positions = outcome.methods[method].positions
            # Runs of consecutive positions read as one slice of the document.
            runs: list[list[int]] = []
            for p in positions:
                if runs and runs[-1][-1] == p - 1:
                    runs[-1].append(p)
                else:
                    runs.append([p])
            expected = sum(
                whitespace_counter(text[chunks[r[0]].start : chunks[r[-1]].end]) for r in runs
            )
            assert outcome.methods[method].tokens == expected


def test_scar_only_adds_and_stays_within_the_static_window(run) -> None:
    settings, result = run
    for outcome in result.questions:
        topk = set(outcome.methods["topk"].positions)
        scar = set(outcome.methods["scar"].positions)
        static = set(outcome.methods["static"].positions)
        assert topk <= scar <= static
        accepted = {d.neighbor for d in outcome.decisions if d.accepted}
        assert scar == topk | accepted
        assert len(outcome.methods["topk_matched"].positions) == len(scar)
        # The static window is every chunk within `window` steps of a seed, inside the document.
        n_chunks = result.chunk_counts[outcome.document]
        expected_static = {
            p + step
            for p in topk
            for step in range(-settings.window, settings.window + 1)
            if 0 <= p + step < n_chunks
        }
        assert static == expected_static


def test_every_decision_follows_the_rule_from_the_vectors(run, hashing_embedder) -> None:
    settings, result = run
    sample = load_sample()
    chunked = split_documents(sample.documents, settings.chunk_size)
    for question, outcome in zip(sample.questions, result.questions, strict=True):
        chunks = chunked[question.document]
        q = unit(hashing_embedder.embed_query(question.query).astype(np.float64))

        def vec(position: int, chunks=chunks) -> np.ndarray:
            return unit(hashing_embedder._vector(chunks[position].text).astype(np.float64))

        for d in outcome.decisions:
            step = 1 if d.direction == "next" else -1
            via = d.neighbor - step  # the chunk just before the neighbour on the walk
            assert abs(d.neighbor - d.seed) == d.distance <= settings.window
            relevance = float(vec(d.neighbor) @ q)
            penalty = 1.0 - float(vec(via) @ vec(d.neighbor))
            threshold = settings.gamma * float(vec(d.seed) @ q)
            assert d.relevance == pytest.approx(relevance, abs=1e-6)
            assert d.boundary_penalty == pytest.approx(penalty, abs=1e-6)
            assert d.score == pytest.approx(relevance - settings.lambda_ * penalty, abs=1e-6)
            assert d.threshold == pytest.approx(threshold, abs=1e-6)
            assert d.accepted == (d.score > d.threshold)
            assert d.gold == (d.neighbor in outcome.gold)


def test_means_are_plain_averages_per_group(run) -> None:
    _, result = run
    fragmented = [q for q in result.questions if len(q.gold) >= 2]
    atomic = [q for q in result.questions if len(q.gold) == 1]
    for method in METHODS:
        for group, members in (
            ("all", result.questions),
            ("fragmented", fragmented),
            ("atomic", atomic),
        ):
            means = result.means(method, group)
            if not members:
                assert math.isnan(means.recall)
                continue
            assert means.recall == pytest.approx(
                np.mean([q.methods[method].recall for q in members])
            )
            assert means.chunks == pytest.approx(
                np.mean([q.methods[method].chunks for q in members])
            )
            assert means.tokens == pytest.approx(
                np.mean([q.methods[method].tokens for q in members])
            )


def test_as_dict_survives_json(run) -> None:
    settings, result = run
    payload = result.as_dict()
    again = json.loads(json.dumps(payload))
    assert again == payload
    assert again["settings"]["gamma"] == settings.gamma
    assert again["summary"]["all"]["n"] == len(result.questions)
    first = result.questions[0]
    assert again["questions"][0]["methods"]["scar"]["chunks"] == list(
        first.methods["scar"].positions
    )


def test_report_fits_100_columns_and_shows_every_decision(run) -> None:
    _, result = run
    report = format_report(result)
    assert max(len(line) for line in report.splitlines()) <= WIDTH
    for outcome in result.questions:
        assert f"Q{outcome.index + 1}  " in report
    n_decisions = sum(len(q.decisions) for q in result.questions)
    assert report.count(" accepted") + report.count(" refused") == n_decisions
    assert "Summary" in report


def test_progress_goes_to_stderr_and_is_silently_absent_without_tqdm(
    capsys, monkeypatch, hashing_embedder
) -> None:
    pytest.importorskip("tqdm")
    with_bar = run_demo(embedder=hashing_embedder, count_tokens=whitespace_counter, progress=True)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "embedding" in captured.err
    assert "101/101" in captured.err  # 86 chunks + 15 questions at the default chunk size

    monkeypatch.setitem(sys.modules, "tqdm", None)  # `import tqdm` now raises ImportError
    without_bar = run_demo(
        embedder=hashing_embedder, count_tokens=whitespace_counter, progress=True
    )
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ""
    assert without_bar.as_dict() == with_bar.as_dict()
