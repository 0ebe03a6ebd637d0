"""Fixtures of the evaluation tests: a table embedder with hand-chosen vectors, fixture paths."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from scar_core.eval import Benchmark, EvalQuery, EvidenceSpan

FIXTURES = Path(__file__).parent / "fixtures"


def unit_at(degrees: float) -> list[float]:
    """The 2-D unit vector at ``degrees``: the cosine of two such vectors is cos(angle between)."""
    radians = math.radians(degrees)
    return [math.cos(radians), math.sin(radians)]


class TableEmbedder:
    """An embedder that looks vectors up in fixed tables (unknown text: an error)."""

    def __init__(
        self, documents: Mapping[str, Sequence[float]], queries: Mapping[str, Sequence[float]]
    ) -> None:
        self.documents = dict(documents)
        self.queries = dict(queries)
        self.calls = 0

    @property
    def model_name(self) -> str:
        return "table-embedder"

    def embed_documents(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls += 1
        return np.array([self.documents[t] for t in texts], dtype=np.float32)

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        self.calls += 1
        return np.array(self.queries[text], dtype=np.float32)

    async def aembed_documents(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return self.embed_documents(texts)

    async def aembed_query(self, text: str) -> npt.NDArray[np.float32]:
        return self.embed_query(text)


#: The hand-built case. Document "doc" is four 5-character chunks; document "other" is one.
#: Chunk vectors sit at angles (degrees) so that every cosine is cos(difference of angles).
HAND_DOCUMENTS = {"doc": "aaaaabbbbbcccccddddd", "other": "eeeee"}
HAND_CHUNK_ANGLES = {"aaaaa": 0.0, "bbbbb": 30.0, "ccccc": 50.0, "ddddd": 90.0, "eeeee": 36.5}
HAND_QUERY_ANGLES = {"q zero": 36.5, "q one": 88.0}


def fixed_width_splitter(text: str) -> list[tuple[int, str]]:
    """Split into 5-character chunks with their offsets."""
    return [(start, text[start : start + 5]) for start in range(0, len(text), 5)]


@dataclass(frozen=True)
class HandCase:
    benchmark: Benchmark
    embedder: TableEmbedder
    splitter: Callable[[str], list[tuple[int, str]]]


@pytest.fixture
def hand_case() -> HandCase:
    """Two queries over "doc" (see test_eval_metrics.py for every number derived from it).

    q0 ("q zero", at 36.5°) has evidence [7, 12): chunks b (5-10) and c (10-15), fragmented.
    q1 ("q one", at 88°) has evidence [16, 18): chunk d only, atomic.
    """
    queries = (
        EvalQuery(0, "q zero", (EvidenceSpan("doc", 7, 12),)),
        EvalQuery(1, "q one", (EvidenceSpan("doc", 16, 18),)),
    )
    embedder = TableEmbedder(
        {text: unit_at(angle) for text, angle in HAND_CHUNK_ANGLES.items()},
        {text: unit_at(angle) for text, angle in HAND_QUERY_ANGLES.items()},
    )
    return HandCase(Benchmark("hand", HAND_DOCUMENTS, queries), embedder, fixed_width_splitter)


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def eval_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One vector cache for the model-backed tests of a session, so each text is embedded once.

    Set ``SCAR_TEST_CACHE_DIR`` to reuse a warm cache across sessions (paper4_dev takes minutes to
    embed on two cores); by default the cache is a fresh temporary folder.
    """
    configured = os.environ.get("SCAR_TEST_CACHE_DIR")
    if configured:
        return Path(configured)
    return tmp_path_factory.mktemp("scar-eval-cache")
