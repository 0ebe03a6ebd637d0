"""Shared pieces of the SCAR benchmarks: a synthetic corpus, timing, bandwidth and tables.

Not a test module. The corpus is synthetic on purpose: scale (10k, 100k chunks) and dimension
(384 .. 3072) are what these benchmarks vary; retrieval quality is measured elsewhere (scar eval).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scar_core.graph import chunk_id_for

RESULTS_DIR = Path(__file__).resolve().parent / "results"


# -- machine ---------------------------------------------------------------------------------


def machine_summary() -> str:
    """CPU model, core count and memory, for the results' header."""
    model = platform.processor() or platform.machine()
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        for line in lscpu.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    load = os.getloadavg()[0]
    return (
        f"{model}, {os.cpu_count()} logical CPUs, {memory_gib:.0f} GiB RAM, "
        f"numpy {np.__version__}, load average {load:.1f} at start"
    )


@dataclass(frozen=True)
class Bandwidth:
    """Single-thread copy bandwidth: bytes copied per second (each byte read once, written once)."""

    wall: float
    cpu: float


def copy_bandwidth(megabytes: int = 512, repeats: int = 5) -> Bandwidth:
    """Best-of-``repeats`` ``np.copyto`` of a large float32 array, in wall and CPU time."""
    source = np.ones(megabytes * 2**20 // 4, dtype=np.float32)
    target = np.empty_like(source)
    np.copyto(target, source)
    best_wall = best_cpu = float("inf")
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        np.copyto(target, source)
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    return Bandwidth(source.nbytes / best_wall, source.nbytes / max(best_cpu, 1e-9))


# -- corpus ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Corpus:
    """``n`` chunks in documents of ``chunks_per_document``, with float32 unit vectors.

    Within a document the vectors follow a stationary AR(1) walk, so adjacent chunks have cosine
    about ``rho`` and chunks ``m`` apart about ``rho**m`` (real text chunked for RAG shows 0.3 to
    0.6 between neighbours with MiniLM); chunks of different documents are unrelated.
    """

    vectors: np.ndarray  # (n, d) float32, unit rows
    links: np.ndarray  # (n, 2) previous / next row, -1 at document edges
    chunks_per_document: int
    #: Each chunk's text, or ``None`` for short labels ("doc-3 chunk 7").
    texts: list[str] | None = None

    @property
    def size(self) -> int:
        return int(self.vectors.shape[0])

    @property
    def dimension(self) -> int:
        return int(self.vectors.shape[1])

    def document_of(self, row: int) -> str:
        return f"doc-{row // self.chunks_per_document}"

    def chunk_id(self, row: int) -> str:
        return chunk_id_for(self.document_of(row), row % self.chunks_per_document)

    def chunk_ids(self) -> list[str]:
        return [self.chunk_id(row) for row in range(self.size)]

    def text(self, row: int) -> str:
        if self.texts is not None:
            return self.texts[row]
        return f"{self.document_of(row)} chunk {row % self.chunks_per_document}"


#: Chunk text of the end-to-end benchmark: what ``RecursiveCharacterTextSplitter(chunk_size=1000,
#: chunk_overlap=200)`` makes of prose (LangChain's tutorial setting), without ``start_index``, so
#: passages are stitched by finding the overlap in the text.
TEXT_CHARS = 1000
TEXT_OVERLAP = 200


def chunk_texts(
    size: int, chunks_per_document: int, chars: int, overlap: int, *, seed: int = 0
) -> list[str]:
    """Texts of ``chars`` characters cut from one word stream per document, ``overlap`` shared.

    Words are drawn from a fixed vocabulary of 2,000 pseudo-words, so every chunk is distinct
    and consecutive chunks repeat exactly ``overlap`` characters, as a splitter's do.
    """
    rng = np.random.default_rng(seed)
    letters = np.array(list("etaoinshrdlucmfwypvbgk"))
    vocabulary = [
        "".join(rng.choice(letters, size=int(length))) for length in rng.integers(2, 10, size=2000)
    ]
    step = chars - overlap
    document_chars = step * (chunks_per_document - 1) + chars
    texts: list[str] = []
    documents = -(-size // chunks_per_document)
    for document in range(documents):
        words: list[str] = [f"doc-{document}"]
        length = len(words[0])
        while length < document_chars:
            drawn = rng.integers(0, len(vocabulary), size=400)
            for index in drawn:
                words.append(vocabulary[index])
                length += len(vocabulary[index]) + 1
        stream = " ".join(words)
        for position in range(chunks_per_document):
            if len(texts) == size:
                break
            texts.append(stream[position * step : position * step + chars])
    return texts


def text_corpus(size: int, dimension: int) -> Corpus:
    """A corpus of the end-to-end benchmark: chunks of :data:`TEXT_CHARS` characters of text."""
    return make_corpus(size, dimension, text_chars=TEXT_CHARS, text_overlap=TEXT_OVERLAP)


def hnsw_latency_arguments(
    description: str, rounds: int, rounds_help: str
) -> argparse.ArgumentParser:
    """``--sizes``, ``--dimension`` and ``--rounds``, as the pgvector HNSW latency scripts take them."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument("--rounds", type=int, default=rounds, help=rounds_help)
    return parser


#: The columns of a latency table, SCAR against the plain retriever on one setup
#: (:func:`latency_cells`).
LATENCY_COLUMNS = [
    "setup",
    "SCAR",
    "plain ms (median)",
    "SCAR ms (median)",
    "added ms",
    "SCAR / plain",
    "95% interval",
]

#: The issue's target for SCAR's median latency, as a multiple of the plain retriever's.
TARGET_RATIO = 1.10


def ratio_cell(ratio: float) -> str:
    """A ratio for the table, in bold when it meets :data:`TARGET_RATIO`."""
    return f"**{ratio:.3f}x**" if ratio <= TARGET_RATIO else f"{ratio:.3f}x"


def latency_cells(
    label: str, scar: str, plain: str, samples: dict[str, list[float]]
) -> list[object]:
    """The :data:`LATENCY_COLUMNS` of contender ``scar`` against ``plain``, from their samples."""
    scar_median = statistics.median(samples[scar])
    plain_median = statistics.median(samples[plain])
    return [
        label,
        scar,
        f"{plain_median * 1e3:.2f}",
        f"{scar_median * 1e3:.2f}",
        f"{(scar_median - plain_median) * 1e3:+.2f}",
        ratio_cell(scar_median / plain_median),
        interval_cell(samples[scar], samples[plain]),
    ]


def make_corpus(
    size: int,
    dimension: int,
    *,
    chunks_per_document: int = 20,
    rho: float = 0.5,
    seed: int = 0,
    text_chars: int = 0,
    text_overlap: int = 0,
) -> Corpus:
    """Build a corpus of ``size`` chunks; see :class:`Corpus` for the vectors' structure.

    ``text_chars`` > 0 gives each chunk a text of that length (:func:`chunk_texts`); 0 keeps the
    short labels, which is all the policy benchmarks need.
    """
    rng = np.random.default_rng(seed)
    documents = -(-size // chunks_per_document)
    walk = np.empty((documents, chunks_per_document, dimension), dtype=np.float32)
    walk[:, 0] = rng.standard_normal((documents, dimension), dtype=np.float32)
    for position in range(1, chunks_per_document):
        fresh = rng.standard_normal((documents, dimension), dtype=np.float32)
        walk[:, position] = rho * walk[:, position - 1] + np.sqrt(1 - rho**2) * fresh
    vectors = walk.reshape(-1, dimension)[:size]
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    rows = np.arange(size)
    position = rows % chunks_per_document
    links = np.stack([rows - 1, rows + 1], axis=1)
    links[position == 0, 0] = -1
    links[(position == chunks_per_document - 1) | (rows == size - 1), 1] = -1
    texts = (
        chunk_texts(size, chunks_per_document, text_chars, text_overlap, seed=seed)
        if text_chars > 0
        else None
    )
    return Corpus(np.ascontiguousarray(vectors), links, chunks_per_document, texts)


def make_queries(corpus: Corpus, count: int, *, noise: float = 1.0, seed: int = 1) -> np.ndarray:
    """Query vectors near random chunks (cosine about ``1 / sqrt(1 + noise**2)``), float32."""
    rng = np.random.default_rng(seed)
    targets = rng.integers(0, corpus.size, size=count)
    noisy = corpus.vectors[targets] + rng.standard_normal(
        (count, corpus.dimension), dtype=np.float32
    ) * (noise / np.sqrt(corpus.dimension))
    return np.asarray(noisy / np.linalg.norm(noisy, axis=1, keepdims=True), dtype=np.float32)


def seeded_queries(
    corpus: Corpus, count: int, k: int, *, documents: int = 4, noise: float = 0.5, seed: int = 2
) -> tuple[np.ndarray, np.ndarray]:
    """Queries with stand-in search results, for benchmarks of the policy alone.

    Each query's ``k`` seeds are distinct chunks of ``documents`` random documents, and the query
    is their normalised mean plus noise, so the seeds are genuinely its best matches (relevance
    about ``1/sqrt(k)``) and their neighbours partly relevant: some are accepted, some not.
    Seeds come ranked by relevance, as a search would return them.

    Returns:
        ``(queries, seeds)``: ``(count, d)`` float32 and ``(count, k)`` int64 rows.
    """
    rng = np.random.default_rng(seed)
    n_documents = -(-corpus.size // corpus.chunks_per_document)
    seeds = np.empty((count, k), dtype=np.int64)
    for query in range(count):
        chosen = rng.choice(n_documents, size=documents, replace=False)
        pool = chosen[:, None] * corpus.chunks_per_document + np.arange(corpus.chunks_per_document)
        pool = pool[pool < corpus.size].ravel()
        seeds[query] = rng.choice(pool, size=k, replace=False)
    means = corpus.vectors[seeds].mean(axis=1)
    means /= np.linalg.norm(means, axis=1, keepdims=True)
    queries = means + rng.standard_normal(means.shape, dtype=np.float32) * (
        noise / np.sqrt(corpus.dimension)
    )
    queries = np.asarray(queries / np.linalg.norm(queries, axis=1, keepdims=True), np.float32)
    relevance = np.einsum("qkd,qd->qk", corpus.vectors[seeds], queries)
    order = np.argsort(-relevance, axis=1)
    return queries, np.take_along_axis(seeds, order, axis=1)


def chunk_metadata(corpus: Corpus, row: int) -> dict[str, object]:
    """The metadata ``scar_langchain.link_chunks`` would write for the chunk at ``row``."""
    position = row % corpus.chunks_per_document
    metadata: dict[str, object] = {
        "source": corpus.document_of(row),
        "scar_chunk_id": corpus.chunk_id(row),
        "scar_document_id": corpus.document_of(row),
        "scar_position": position,
    }
    if corpus.links[row, 0] >= 0:
        metadata["scar_prev_id"] = corpus.chunk_id(int(corpus.links[row, 0]))
    if corpus.links[row, 1] >= 0:
        metadata["scar_next_id"] = corpus.chunk_id(int(corpus.links[row, 1]))
    return metadata


# -- timing ----------------------------------------------------------------------------------


def interleaved_medians(
    callables: dict[str, Callable[[int], object]],
    rounds: int,
    warmup: int = 2,
    *,
    then: dict[str, Callable[[int], object]] | None = None,
) -> dict[str, float]:
    """Median wall seconds of each callable over :func:`interleaved_samples`' rounds."""
    samples = interleaved_samples(callables, rounds, warmup, then=then)
    return {name: statistics.median(values) for name, values in samples.items()}


def ratio_interval(
    numerator: Sequence[float],
    denominator: Sequence[float],
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """A bootstrap interval for ``median(numerator) / median(denominator)``.

    The two series are paired by round (round ``i`` of both ran the same query, one after the
    other), so rounds are resampled together, which keeps what a query costs both sides out of
    the interval's width.
    """
    top = np.asarray(numerator, dtype=np.float64)
    bottom = np.asarray(denominator, dtype=np.float64)
    if top.shape != bottom.shape or top.ndim != 1 or not top.size:
        raise ValueError("the two series must be non-empty and of the same length (one per round)")
    rows = np.random.default_rng(seed).integers(0, top.size, size=(resamples, top.size))
    ratios = np.median(top[rows], axis=1) / np.median(bottom[rows], axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return float(low), float(high)


def interval_cell(numerator: Sequence[float], denominator: Sequence[float]) -> str:
    """:func:`ratio_interval` as a table cell, ``"1.053-1.092x"``."""
    low, high = ratio_interval(numerator, denominator)
    return f"{low:.3f}-{high:.3f}x"


def interleaved_samples(
    callables: dict[str, Callable[[int], object]],
    rounds: int,
    warmup: int = 2,
    *,
    then: dict[str, Callable[[int], object]] | None = None,
) -> dict[str, list[float]]:
    """Wall seconds of each callable, called in turn for every round (noise is shared).

    Each callable gets the round number (which query to run). The order rotates from round to
    round, so that each callable goes first equally often: the first to run a query pays for
    bringing that query's index pages into the database's buffers, and the rest find them there.
    At 100k chunks behind HNSW that cost about 3 ms a query, so a fixed order favoured every
    contender but the first (``benchmarks/results/README.md``, section 1).

    ``then`` holds callables that run after all of ``callables`` in every round (rotated among
    themselves), so that they never warm the pages of the ones compared; their samples are
    returned too.

    Returns:
        Each callable's seconds, by round.
    """
    groups = [list(callables.items()), list((then or {}).items())]
    for index in range(warmup):
        for group in groups:
            for _, run in group:
                run(index)
    samples: dict[str, list[float]] = {name: [] for group in groups for name, _ in group}
    for index in range(rounds):
        for group in groups:
            shift = index % len(group) if group else 0
            for name, run in group[shift:] + group[:shift]:
                start = time.perf_counter()
                run(index)
                samples[name].append(time.perf_counter() - start)
    return samples


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines.extend("| " + " | ".join(str(cell) for cell in row) + " |" for row in rows)
    return "\n".join(lines)


def write_result(name: str, text: str) -> Path:
    """Write ``text`` to ``benchmarks/results/<name>`` and return the path."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / name
    path.write_text(text)
    return path
