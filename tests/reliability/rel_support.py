"""Shared pieces of the reliability suite: the case counter, bad-input oracles and test doubles.

Everything here is written from the documented contracts, not from the code under test, so the
suite's expectations stay independent of the implementation they check.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from scar_core.errors import ScarError

# --------------------------------------------------------------------------------------------
# Counting generated cases
#
# Each hypothesis property increments its own counter once per executed example; the pytest test
# that drives the property then asserts the count reached its ``max_examples``. The session total
# is printed by this folder's conftest.

_COUNT_LOCK = threading.Lock()
CASE_COUNTS: dict[str, int] = {}
#: Throughput measured by the load tests: name -> (queries, seconds), printed by the conftest.
THROUGHPUT: dict[str, tuple[int, float]] = {}


def count_case(name: str) -> None:
    """Record one executed example of the property ``name``."""
    with _COUNT_LOCK:
        CASE_COUNTS[name] = CASE_COUNTS.get(name, 0) + 1


def run_counted(name: str, property_test: Callable[[], None], expected: int) -> int:
    """Run a ``@given`` property and check that it really executed ``expected`` examples.

    Hypothesis stops early when a strategy's space is exhausted; the strategies here are large,
    so a shortfall means a strategy shrank by mistake and the suite no longer tests what it says.
    """
    before = CASE_COUNTS.get(name, 0)
    property_test()
    ran = CASE_COUNTS.get(name, 0) - before
    assert ran >= expected, f"{name} ran {ran} examples, fewer than the {expected} it promises"
    return ran


# --------------------------------------------------------------------------------------------
# Oracles


def usable_vector(value: Any, dimension: int) -> bool:
    """Whether ``value`` is a finite, non-zero 1-D vector of ``dimension`` numbers."""
    if isinstance(value, (str, bytes)):
        return False
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return (
        array.ndim == 1
        and array.shape[0] == dimension
        and bool(np.isfinite(array).all())
        and bool(np.any(array != 0))
    )


def link_target(value: Any, chunk_id: str) -> str | None:
    """The chunk a raw link points to, or ``None`` when the link is not a usable id."""
    if isinstance(value, str) and value and value != chunk_id:
        return value
    return None


def reachable(
    seeds: Sequence[str],
    links: Mapping[str, tuple[Any, Any]],
    window: int | None,
    direction: str,
) -> set[str]:
    """Every chunk within ``window`` link steps of a seed, following raw string links naively.

    A superset of what SCAR may add: it ignores document boundaries and vectors.
    """
    steps = {"both": (0, 1), "previous": (0,), "next": (1,)}[direction]
    found = set(seeds)
    frontier = list(seeds)
    depth = 0
    while frontier and (window is None or depth < window):
        following: list[str] = []
        for chunk_id in frontier:
            pair = links.get(chunk_id)
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                continue
            for side in steps:
                target = link_target(pair[side], chunk_id)
                if target is not None and target not in found:
                    found.add(target)
                    following.append(target)
        frontier = following
        depth += 1
    return found


def check_documented_failure(error: BaseException) -> None:
    """Assert a failure is one of SCAR's documented error types and says what went wrong."""
    assert isinstance(error, ScarError), f"undocumented failure {type(error).__name__}: {error}"
    assert str(error).strip(), f"{type(error).__name__} carries no message"


class RecordingHandler(logging.Handler):
    """Collects log records, formatting each so that a bad format string fails loudly."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        # getMessage applies ``msg % args``: a payload used as a format string raises here.
        self.messages.append(record.getMessage())

    def handleError(self, record: logging.LogRecord) -> None:  # pragma: no cover - re-raise
        raise


@contextmanager
def recorded_logs(*names: str, level: int = logging.WARNING) -> Iterator[RecordingHandler]:
    """Capture every record at ``level`` and above of the named loggers while the block runs."""
    handler = RecordingHandler()
    loggers = [logging.getLogger(name) for name in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(level)
    try:
        yield handler
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(level)


# --------------------------------------------------------------------------------------------
# A scar_core embedder whose vectors are a pure function of the text

_WORD = re.compile(r"\w+")


def hashed_vector(text: str, dimension: int) -> np.ndarray:
    """A deterministic bag-of-words vector: each word adds 1 to a hashed bucket, plus a tie-breaker."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    values = np.frombuffer(digest * (dimension // 32 + 1), dtype=np.uint8)[:dimension]
    vector = 0.01 * values.astype(np.float64) / 255.0
    for word in _WORD.findall(text.lower()):
        bucket = int.from_bytes(hashlib.sha256(word.encode("utf-8")).digest()[:4], "big")
        vector[bucket % dimension] += 1.0
    return vector / math.sqrt(float(vector @ vector))


class HashEmbedder:
    """A :class:`scar_core.embedders.base.Embedder` that counts what it embeds, thread-safely."""

    def __init__(self, dimension: int = 16, name: str = "rel-hash") -> None:
        self.dimension = dimension
        self.name = name
        self._lock = threading.Lock()
        self.document_texts = 0
        self.query_texts = 0

    @property
    def model_name(self) -> str:
        return f"{self.name}-{self.dimension}"

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            self.document_texts += len(texts)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.stack([hashed_vector(t, self.dimension) for t in texts]).astype(np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        with self._lock:
            self.query_texts += 1
        return hashed_vector(text, self.dimension).astype(np.float32)

    async def aembed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_documents(texts)

    async def aembed_query(self, text: str) -> np.ndarray:
        return self.embed_query(text)


# --------------------------------------------------------------------------------------------
# Hostile data from a seeded generator
#
# Strategies draw one 64-bit seed and a few knobs; the bulk of each case (links, vectors, seeds)
# comes from numpy's generator under that seed. That keeps a case cheap to generate (thousands
# run in seconds) while the space of cases stays far larger than any run can exhaust.

#: Kinds of stored vector, good ones most likely.
ANY_VECTOR_KINDS = ("good",) * 8 + (
    "nan",
    "inf",
    "zero",
    "wrong_dim",
    "missing",
    "garbage",
    "matrix",
)
#: Kinds for a seed's vector when a bad one should be rare.
SEED_VECTOR_KINDS = ("good",) * 14 + ("nan", "inf", "zero", "wrong_dim", "missing")
#: Magnitudes a good vector may have; the extremes overflow or underflow a naive norm.
SCALES = (1.0, 1.0, 1.0, 1e-150, 1e150, 1e-300, 1e300)
#: Kinds of raw link.
LINK_KINDS = ("none", "id", "id", "id", "self", "dangling", "empty", "int", "list")


def pick(rng: np.random.Generator, items: Sequence[Any]) -> Any:
    """One item of ``items``, chosen by ``rng`` (numpy's own choice would coerce the types)."""
    return items[int(rng.integers(len(items)))]


def make_vector(
    rng: np.random.Generator,
    dimension: int,
    kind: str,
    *,
    extreme_scale: bool = True,
    topic: np.ndarray | None = None,
) -> Any:
    """A stored vector of the given kind; ``None`` stands for "no vector stored".

    With a ``topic``, a good vector is the topic plus noise of a random spread, so that cosines
    between chunks of one corpus are often high and SCAR has real decisions to make.
    """
    if kind == "missing":
        return None
    if kind == "garbage":
        return pick(rng, [["x"] * dimension, "abc", {"a": 1}])
    if kind == "matrix":
        return [[1.0] * dimension, [0.5] * dimension]
    width = dimension
    if kind == "wrong_dim":
        width = pick(rng, [dimension + 1, max(dimension - 1, 0), dimension * 2])
    if kind == "zero":
        return [0.0] * width
    noise = rng.uniform(-1.0, 1.0, size=width)
    if topic is not None and width == len(topic):
        noise = topic + float(rng.choice([0.05, 0.3, 1.0])) * noise
    values = [float(v) for v in noise]
    if rng.random() < 0.2:
        # Small integers make exact ties, identical vectors and orthogonal ones common.
        values = [float(round(v * 2)) for v in values]
    # Python float products overflow to inf and underflow to 0 quietly, unlike numpy's.
    scale = pick(rng, SCALES) if extreme_scale else 1.0
    values = [v * scale for v in values]
    if kind in ("nan", "inf") and values:
        index = int(rng.integers(len(values)))
        values[index] = math.nan if kind == "nan" else pick(rng, [math.inf, -math.inf])
    if kind == "good" and not any(values):
        values[0] = 1.0
    return np.asarray(values, dtype=np.float64) if rng.random() < 0.5 else values


def make_topic(rng: np.random.Generator, dimension: int) -> np.ndarray:
    """A random unit direction that a corpus's good vectors cluster around."""
    topic = rng.normal(size=dimension)
    return np.asarray(topic / np.linalg.norm(topic), dtype=np.float64)


def chain_link(rng: np.random.Generator, ids: Sequence[str], index: int, side: int) -> Any:
    """Mostly the true neighbour in reading order (or none at an edge); otherwise a bad link."""
    if rng.random() < 0.7:
        target = index - 1 if side == 0 else index + 1
        return ids[target] if 0 <= target < len(ids) else None
    return make_link(rng, ids, ids[index])


def make_link(rng: np.random.Generator, ids: Sequence[str], chunk_id: str) -> Any:
    """One raw link: none, a real id, itself, a dangling id, empty, or a value of the wrong type."""
    kind = pick(rng, LINK_KINDS)
    if kind == "id":
        return pick(rng, ids)
    if kind == "self":
        return chunk_id
    if kind == "dangling":
        return f"ghost-{int(rng.integers(1000))}"
    if kind == "empty":
        return ""
    if kind == "int":
        return int(rng.integers(-5, 6))
    if kind == "list":
        return [pick(rng, ids)]
    return None


# --------------------------------------------------------------------------------------------
# A fake OpenAI embeddings endpoint at the HTTP boundary (mounted with respx)

OPENAI_BASE_URL = "https://api.openai.com/v1"
#: A recognisable fake key: it must never show up in logs, messages, reprs or results.
FAKE_API_KEY = "sk-rel-FAKEKEY-7f3a9c2e1b5d4a60"


class FakeEmbeddingsAPI:
    """Answers ``POST /embeddings`` like the API, with hashed vectors and scripted failures.

    Args:
        dimension: Length of the returned vectors.

    Attributes:
        requests: The inputs of every request received, in order.
        scripted: Failures to answer once each, in order, to requests they match: pairs of
            ``(target, failure)``, ``target`` being ``"query"``, ``"documents"`` or ``"any"``
            and ``failure`` an HTTP status or ``"timeout"`` / ``"connect"``.
        persistent: A failure answered to every matching request, as ``(target, failure)``.
    """

    def __init__(self, dimension: int = 8, query: str | None = None) -> None:
        self.dimension = dimension
        self.query = query
        self.requests: list[list[str]] = []
        self.scripted: list[tuple[str, int | str]] = []
        self.persistent: tuple[str, int | str] | None = None
        self._lock = threading.Lock()

    def _matches(self, target: str, inputs: list[str]) -> bool:
        is_query = self.query is not None and inputs == [self.query]
        return target == "any" or (target == "query") == is_query

    def _failure(self, inputs: list[str]) -> int | str | None:
        with self._lock:
            for index, (target, failure) in enumerate(self.scripted):
                if self._matches(target, inputs):
                    del self.scripted[index]
                    return failure
        if self.persistent is not None and self._matches(self.persistent[0], inputs):
            return self.persistent[1]
        return None

    def __call__(self, request: Any) -> Any:
        import httpx

        body = json.loads(request.content)
        inputs = list(body["input"])
        with self._lock:
            self.requests.append(inputs)
        failure = self._failure(inputs)
        if failure == "timeout":
            raise httpx.ReadTimeout("the fake API timed out", request=request)
        if failure == "connect":
            raise httpx.ConnectError("the fake API refused the connection", request=request)
        if isinstance(failure, int):
            headers = {"retry-after-ms": "1"} if failure == 429 else None
            message = f"fake failure {failure}"
            if failure == 401:
                # A real 401 quotes the key it was given.
                message = f"Incorrect API key provided: {FAKE_API_KEY}."
            return httpx.Response(
                failure,
                headers=headers,
                json={"error": {"message": message, "type": "fake", "code": f"fake_{failure}"}},
            )
        data = [
            {
                "object": "embedding",
                "index": index,
                "embedding": hashed_vector(text, self.dimension).tolist(),
            }
            for index, text in enumerate(inputs)
        ]
        return httpx.Response(
            200,
            json={
                "object": "list",
                "data": data[::-1],
                "model": body["model"],
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            },
        )


def openai_embedder(**settings: Any) -> Any:
    """An OpenAIEmbedder whose clients use legacy httpx transports, which respx intercepts.

    (openai 3.x sends through its own httpx2 by default, out of respx's reach.)
    """
    import httpx
    import openai

    from scar_core.embedders.openai import OpenAIEmbedder

    settings.setdefault("backoff_seconds", 0.001)
    settings.setdefault("max_retries", 3)
    return OpenAIEmbedder(
        client=openai.OpenAI(
            api_key=FAKE_API_KEY, base_url=OPENAI_BASE_URL, http_client=httpx.Client()
        ),
        async_client=openai.AsyncOpenAI(
            api_key=FAKE_API_KEY, base_url=OPENAI_BASE_URL, http_client=httpx.AsyncClient()
        ),
        **settings,
    )
