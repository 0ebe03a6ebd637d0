"""Zero-label calibration: statistics derived by hand, errors, and the command end to end."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from scar_core import InvalidSettingsError
from scar_core.calibrate import BONUS_PER_SIGNAL, calibrate
from scar_core.calibrate_command import read_corpus
from scar_core.cli import main
from scar_core.errors import DataFormatError


def test_statistics_match_a_hand_derivation() -> None:
    # Three unit vectors at 0, 53.13 and 90 degrees: cos(e0, e1) = 0.6, cos(e1, e2) = 0.8,
    # cos(e0, e2) = 0. Adjacent mean = 0.7; background (all pairs) = (0.6 + 0 + 0.8) / 3.
    # Scaling a vector changes no cosine.
    document = np.array([[2.0, 0.0], [0.6, 0.8], [0.0, 5.0]])
    result = calibrate({"doc": document}, model_name="m")
    background = 1.4 / 3
    assert result.adjacent_cosine == pytest.approx(0.7)
    assert result.background_cosine == pytest.approx(background)
    assert result.continuity_signal == pytest.approx(0.7 - background)
    assert result.continuity_bonus == pytest.approx(round(BONUS_PER_SIGNAL * (0.7 - background), 4))
    # Non-adjacent pairs: only (e0, e2), cosine 0, so the typical relevance is 0 and gamma is 1.
    assert result.typical_relevance == pytest.approx(0.0)
    assert result.gamma == 1.0
    assert (result.documents, result.chunks, result.model_name) == (1, 3, "m")


def test_gamma_is_derived_from_the_bonus_and_the_typical_relevance() -> None:
    rng = np.random.default_rng(3)
    base = rng.normal(size=16)
    # A slowly drifting document: neighbours are more alike than distant chunks.
    document = np.array([base + 0.3 * i * rng.normal(size=16) for i in range(12)])
    result = calibrate({"d": document})
    expected_gamma = min(1.0, max(0.05, 1 - result.continuity_bonus / result.typical_relevance))
    assert result.gamma == pytest.approx(round(expected_gamma, 3), abs=1e-3)
    assert result.continuity_signal >= 0
    assert math.isfinite(result.continuity_bonus)


def test_documents_too_short_are_an_error_naming_the_fix() -> None:
    with pytest.raises(InvalidSettingsError, match="at least 3 chunks"):
        calibrate({"a": np.eye(2), "b": np.eye(2)[:1]})


def test_read_corpus_folder_and_jsonl(tmp_path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("alpha", encoding="utf-8")
    (tmp_path / "docs" / "skip.bin").write_bytes(b"\x00")
    assert read_corpus(tmp_path / "docs") == {"a.txt": "alpha"}
    jsonl = tmp_path / "corpus.jsonl"
    jsonl.write_text('{"id": "x", "text": "one"}\n\n{"id": "y", "text": "two"}\n', encoding="utf-8")
    assert read_corpus(jsonl) == {"x": "one", "y": "two"}
    jsonl.write_text('{"id": 3, "text": "one"}\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"corpus\.jsonl:1"):
        read_corpus(jsonl)
    with pytest.raises(DataFormatError, match="does not exist"):
        read_corpus(tmp_path / "missing")


@pytest.mark.model
def test_the_command_calibrates_the_bundled_sample(tmp_path, capsys) -> None:
    from scar_core.demo.sample import sample_corpus_dir

    status = main(
        [
            "calibrate",
            str(sample_corpus_dir()),
            "--cache-dir",
            str(tmp_path),
            "--json",
            "--no-progress",
        ]
    )
    assert status == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["documents"] == 3
    assert payload["continuity_bonus"] == pytest.approx(
        round(BONUS_PER_SIGNAL * payload["continuity_signal"], 4)
    )
    assert 0 < payload["gamma"] <= 1


def test_the_command_reports_a_bad_corpus(tmp_path, capsys) -> None:
    assert main(["calibrate", str(tmp_path / "nope"), "--cache-dir", str(tmp_path)]) == 2
    assert "does not exist" in capsys.readouterr().err
