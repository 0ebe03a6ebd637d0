"""Test-wide settings: offline models, and caches kept out of the user's home."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import settings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Embeddings that tests compute with the bundled model are kept here between runs (CI sets it).
os.environ.setdefault(
    "SCAR_CACHE_DIR",
    os.environ.get("SCAR_TEST_CACHE_DIR", str(Path.home() / ".cache" / "scar-tests")),
)

#: The read-only benchmark data beside the checkout, when present (tests using it are skipped
#: otherwise).
BENCH = Path(__file__).resolve().parents[1].parent / "shared" / "bench"

# Property tests run 60 examples each here; CI's "ci" profile runs 500.
settings.register_profile("default", max_examples=60, deadline=None)
settings.register_profile("ci", max_examples=500, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
