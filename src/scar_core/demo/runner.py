"""What ``scar demo`` computes: chunk the sample, embed it, retrieve, expand, and score.

Protocol (the same as ``scar eval``'s, at the demo's settings):

1. Each document is split on its own with LangChain's
   ``RecursiveCharacterTextSplitter(chunk_size, chunk_overlap=0, add_start_index=True)``, and the
   chunks of a document are linked previous/next in reading order.
2. A question's gold chunks are every chunk holding at least one character of its evidence; a
   question is *fragmented* when it has two or more.
3. Chunks and questions are embedded; the ``k`` chunks of the question's document closest by cosine
   are the seeds.
4. Four selections are compared: the seeds alone (``topk``), the best ``n`` chunks where ``n`` is
   what SCAR returned for that question (``topk_matched``, top-k at SCAR's budget), the static
   window (``static``: every neighbour within ``window`` steps) and SCAR (``scar``).
5. Each selection is scored by chunk recall (share of gold chunks selected), evidence-character
   recall (share of the evidence characters inside the selected chunks, as LegalBench-RAG scores;
   the whitespace the splitter drops between chunks is never inside a chunk), unique chunks, and
   cl100k_base tokens of the context an LLM would read (the selected chunks joined into contiguous
   passages by :func:`scar_core.assembly.assemble_passages`, each passage's tokens summed).
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from scar_core.assembly import ChunkRecord, assemble_passages
from scar_core.baselines import static_window, top_k
from scar_core.demo.sample import Sample, SampleQuestion, load_sample
from scar_core.embedders.base import Embedder
from scar_core.errors import DataFormatError, InvalidSettingsError, missing_dependency
from scar_core.graph import NeighborGraph, chunk_id_for, link_sequence
from scar_core.policy import ExpansionResult, ScarPolicy
from scar_core.scoring import as_unit_matrix, as_unit_vector
from scar_core.settings import ScarSettings, validate_k
from scar_core.tokens import TokenCounter, tiktoken_counter

__all__ = [
    "DEMO_DEFAULTS",
    "METHODS",
    "DemoChunk",
    "DemoResult",
    "DemoSettings",
    "MethodMeans",
    "MethodOutcome",
    "NeighborDecision",
    "QuestionOutcome",
    "default_embedder",
    "fragmented_questions",
    "gold_positions",
    "run_demo",
    "split_documents",
]

MethodName = Literal["topk", "topk_matched", "static", "scar"]
Group = Literal["all", "fragmented", "atomic"]

#: The selections compared, in display order.
METHODS: tuple[MethodName, ...] = ("topk", "topk_matched", "static", "scar")
GROUPS: tuple[Group, ...] = ("all", "fragmented", "atomic")

#: Chunks sent to the embedder per call: one step of the progress bar.
EMBED_BATCH = 16


@dataclass(frozen=True)
class DemoSettings:
    """Chunking, retrieval and SCAR settings of one demo run.

    Attributes:
        chunk_size: Maximum characters per chunk (no overlap).
        k: Chunks retrieved per question, within its document.
        lambda_: SCAR's boundary-penalty weight.
        gamma: SCAR's relative threshold.
        window: Steps from a seed that SCAR and the static window consider.
    """

    chunk_size: int
    k: int
    lambda_: float
    gamma: float
    window: int

    def __post_init__(self) -> None:
        if (
            not isinstance(self.chunk_size, int)
            or isinstance(self.chunk_size, bool)
            or self.chunk_size < 1
        ):
            raise InvalidSettingsError(
                f"chunk_size={self.chunk_size!r} is not valid; it must be an integer >= 1 "
                "(characters; the demo's default is 300)."
            )
        validate_k(self.k)
        self.scar_settings()  # validates lambda_, gamma and window

    def scar_settings(self) -> ScarSettings:
        """The SCAR rule's settings (both directions)."""
        return ScarSettings(lambda_=self.lambda_, gamma=self.gamma, window=self.window)

    def as_dict(self) -> dict[str, float | int]:
        """The settings as a JSON-ready dict."""
        return {
            "chunk_size": self.chunk_size,
            "chunk_overlap": 0,
            "k": self.k,
            "lambda": self.lambda_,
            "gamma": self.gamma,
            "window": self.window,
        }


#: The demo's defaults, in one place. Chunks of 300 characters cut 13 of the 15 sample questions'
#: evidence. γ is 0.5, not the paper's 0.8: with a small local model such as all-MiniLM-L6-v2,
#: cosines between related texts are lower and flatter than with the paper's large models, and at
#: γ = 0.8 SCAR barely expands; around 0.5 the paper's recall-versus-chunks tradeoff reappears.
DEMO_DEFAULTS = DemoSettings(chunk_size=300, k=3, lambda_=0.1, gamma=0.5, window=1)


# --------------------------------------------------------------------------------------------
# Chunking and gold chunks


@dataclass(frozen=True)
class DemoChunk:
    """One chunk of one document.

    Attributes:
        chunk_id: ``chunk_id_for(document, position)``.
        document: The document's file path.
        position: Zero-based index within the document.
        start: Offset of its first character in the document.
        text: Its text, equal to ``document_text[start:start + len(text)]``.
    """

    chunk_id: str
    document: str
    position: int
    start: int
    text: str

    @property
    def end(self) -> int:
        """Offset one past its last character."""
        return self.start + len(self.text)


def split_documents(
    documents: Mapping[str, str], chunk_size: int
) -> dict[str, tuple[DemoChunk, ...]]:
    """Split each document with LangChain's recursive splitter (no overlap, with start offsets).

    Args:
        documents: ``document -> text``.
        chunk_size: Maximum characters per chunk.

    Returns:
        ``document -> its chunks in reading order``.

    Raises:
        MissingDependencyError: If ``langchain-text-splitters`` is not installed (extra ``eval``).
        DataFormatError: If a chunk's start offset does not point at its text.
    """
    try:
        from langchain_text_splitters import RecursiveCharacterTextSplitter
    except ImportError as exc:
        raise missing_dependency("langchain_text_splitters", "eval") from exc
    splitter = RecursiveCharacterTextSplitter(
        chunk_size=chunk_size, chunk_overlap=0, add_start_index=True
    )
    chunked: dict[str, tuple[DemoChunk, ...]] = {}
    for document, text in documents.items():
        chunks = []
        for position, piece in enumerate(splitter.create_documents([text])):
            start = int(piece.metadata["start_index"])
            if text[start : start + len(piece.page_content)] != piece.page_content:
                raise DataFormatError(
                    f"chunk {position} of {document!r} does not match the text at its start "
                    f"offset {start}; the splitter's start_index cannot be trusted here."
                )
            chunks.append(
                DemoChunk(
                    chunk_id=chunk_id_for(document, position),
                    document=document,
                    position=position,
                    start=start,
                    text=piece.page_content,
                )
            )
        chunked[document] = tuple(chunks)
    return chunked


def gold_positions(question: SampleQuestion, chunks: Sequence[DemoChunk]) -> tuple[int, ...]:
    """Return the positions of the chunks holding at least one character of the evidence."""
    return tuple(
        chunk.position
        for chunk in chunks
        if any(chunk.start < span.end and span.start < chunk.end for span in question.spans)
    )


def fragmented_questions(sample: Sample, chunk_size: int) -> list[int]:
    """Return the indices of the questions whose evidence falls in two or more chunks.

    This needs only the splitter, not the model.
    """
    chunked = split_documents(sample.documents, chunk_size)
    return [
        question.index
        for question in sample.questions
        if len(gold_positions(question, chunked[question.document])) >= 2
    ]


# --------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class NeighborDecision:
    """SCAR's decision on one neighbour, in chunk positions.

    Attributes:
        seed: Position of the seed whose walk considered the neighbour.
        neighbor: Position of the neighbour.
        direction: ``"previous"`` or ``"next"``.
        distance: Steps from the seed.
        relevance: ``cos(q, n)``.
        boundary_penalty: ``b = 1 - cos(v, n)`` across the boundary the neighbour would cross.
        score: ``S = relevance - λ·b``.
        threshold: ``γ·cos(q, seed)``.
        accepted: ``S > threshold``.
        gold: Whether the neighbour holds evidence.
    """

    seed: int
    neighbor: int
    direction: str
    distance: int
    relevance: float
    boundary_penalty: float
    score: float
    threshold: float
    accepted: bool
    gold: bool


@dataclass(frozen=True)
class MethodOutcome:
    """What one selection returned for one question, and its scores.

    Attributes:
        positions: Selected chunk positions, in document order.
        tokens: cl100k_base tokens of the assembled passages.
        recall: Share of gold chunks selected.
        char_recall: Share of evidence characters inside selected chunks.
    """

    positions: tuple[int, ...]
    tokens: int
    recall: float
    char_recall: float

    @property
    def chunks(self) -> int:
        """Number of unique chunks selected."""
        return len(self.positions)


@dataclass(frozen=True)
class QuestionOutcome:
    """Everything the demo shows for one question.

    Attributes:
        index: Zero-based index in the benchmark.
        query: The question.
        document: The document retrieved from.
        gold: Positions of the gold chunks.
        seeds: ``(position, cos(q, chunk))`` of the retrieved chunks, best first.
        methods: The outcome of every method in :data:`METHODS`.
        decisions: SCAR's decisions, in the order it made them.
    """

    index: int
    query: str
    document: str
    gold: tuple[int, ...]
    seeds: tuple[tuple[int, float], ...]
    methods: Mapping[MethodName, MethodOutcome]
    decisions: tuple[NeighborDecision, ...]

    @property
    def fragmented(self) -> bool:
        """Whether the evidence falls in two or more chunks."""
        return len(self.gold) >= 2


@dataclass(frozen=True)
class MethodMeans:
    """Means of one method's scores over a group of questions (NaN for an empty group)."""

    recall: float
    char_recall: float
    chunks: float
    tokens: float


@dataclass(frozen=True)
class DemoResult:
    """The outcome of one demo run.

    Attributes:
        settings: The settings used.
        model_name: The embedder's name.
        chunk_counts: ``document -> number of chunks``.
        questions: One outcome per question.
    """

    settings: DemoSettings
    model_name: str
    chunk_counts: Mapping[str, int]
    questions: tuple[QuestionOutcome, ...]

    def group(self, group: Group) -> list[QuestionOutcome]:
        """Return the questions of a group: ``all``, ``fragmented`` or ``atomic``."""
        if group == "all":
            return list(self.questions)
        wanted = group == "fragmented"
        return [question for question in self.questions if question.fragmented == wanted]

    def means(self, method: MethodName, group: Group = "all") -> MethodMeans:
        """Mean recall, character recall, chunks and tokens of ``method`` over ``group``."""
        outcomes = [question.methods[method] for question in self.group(group)]
        if not outcomes:
            nan = math.nan
            return MethodMeans(nan, nan, nan, nan)
        return MethodMeans(
            recall=float(np.mean([o.recall for o in outcomes])),
            char_recall=float(np.mean([o.char_recall for o in outcomes])),
            chunks=float(np.mean([o.chunks for o in outcomes])),
            tokens=float(np.mean([o.tokens for o in outcomes])),
        )

    def as_dict(self) -> dict[str, Any]:
        """The whole result as a JSON-ready dict (NaN means become ``None``)."""

        def number(value: float) -> float | None:
            return None if math.isnan(value) else value

        return {
            "settings": self.settings.as_dict(),
            "model": self.model_name,
            "documents": dict(self.chunk_counts),
            "questions": [
                {
                    "index": q.index,
                    "query": q.query,
                    "document": q.document,
                    "gold_chunks": list(q.gold),
                    "fragmented": q.fragmented,
                    "seeds": [{"chunk": p, "cosine": c} for p, c in q.seeds],
                    "methods": {
                        name: {
                            "chunks": list(o.positions),
                            "n_chunks": o.chunks,
                            "tokens": o.tokens,
                            "recall": o.recall,
                            "char_recall": o.char_recall,
                        }
                        for name, o in q.methods.items()
                    },
                    "decisions": [
                        {
                            "seed": d.seed,
                            "neighbor": d.neighbor,
                            "direction": d.direction,
                            "distance": d.distance,
                            "relevance": d.relevance,
                            "boundary_penalty": d.boundary_penalty,
                            "score": d.score,
                            "threshold": d.threshold,
                            "accepted": d.accepted,
                            "gold": d.gold,
                        }
                        for d in q.decisions
                    ],
                }
                for q in self.questions
            ],
            "summary": {
                group: {
                    "n": len(self.group(group)),
                    "methods": {
                        method: {
                            key: number(value)
                            for key, value in vars(self.means(method, group)).items()
                        }
                        for method in METHODS
                    },
                }
                for group in GROUPS
            },
        }


# --------------------------------------------------------------------------------------------
# Running


@functools.lru_cache(maxsize=1)
def default_embedder() -> Embedder:
    """Return the bundled all-MiniLM-L6-v2 embedder, loaded once per process.

    Raises:
        MissingDependencyError: If sentence-transformers is not installed (extra
            ``sentence-transformers``).
    """
    from scar_core.embedders.sentence_transformers import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder()


class _Progress(Protocol):
    def update(self, n: int) -> object: ...


class _NoProgress:
    def update(self, n: int) -> object:
        return None


@contextmanager
def _progress_bar(total: int, description: str, enabled: bool) -> Iterator[_Progress]:
    """A tqdm bar on stderr when tqdm is installed and ``enabled``; otherwise nothing."""
    if enabled:
        try:
            from tqdm import tqdm
        except ImportError:
            enabled = False
    if not enabled:
        yield _NoProgress()
        return
    with tqdm(total=total, desc=description, unit="text", file=sys.stderr) as bar:
        yield bar


def _embed(
    embedder: Embedder,
    chunk_texts: Sequence[str],
    queries: Sequence[str],
    progress: bool,
    status: Callable[[str], None] | None,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Embed queries and chunks (in batches), returning unit-length rows.

    The first query is embedded before the progress bar starts, so that loading the model (the
    slow part of a cold start) is announced rather than counted as embedding.
    """
    if status is not None:
        status(f"loading {embedder.model_name}")
    query_rows = [embedder.embed_query(queries[0])]
    if status is not None:
        status(f"embedding {len(chunk_texts)} chunks and {len(queries)} questions")
    batches: list[npt.NDArray[np.float32]] = []
    with _progress_bar(len(chunk_texts) + len(queries), "embedding", progress) as bar:
        bar.update(1)
        for query in queries[1:]:
            query_rows.append(embedder.embed_query(query))
            bar.update(1)
        for start in range(0, len(chunk_texts), EMBED_BATCH):
            batch = chunk_texts[start : start + EMBED_BATCH]
            batches.append(embedder.embed_documents(batch))
            bar.update(len(batch))
    return as_unit_matrix(np.concatenate(batches)), as_unit_matrix(np.stack(query_rows))


def _covered_characters(question: SampleQuestion, chunks: Sequence[DemoChunk]) -> float:
    """Share of the evidence's characters (union of its spans) inside the given chunks."""
    evidence: set[int] = set()
    for span in question.spans:
        evidence.update(range(span.start, span.end))
    inside = sum(1 for offset in evidence if any(c.start <= offset < c.end for c in chunks))
    return inside / len(evidence)


@dataclass
class _Scorer:
    """Scores a selection for one question."""

    question: SampleQuestion
    chunks: Sequence[DemoChunk]
    gold: tuple[int, ...]
    records: Mapping[str, ChunkRecord]
    graph: NeighborGraph
    count_tokens: TokenCounter

    def __call__(self, result: ExpansionResult) -> MethodOutcome:
        by_id = {chunk.chunk_id: chunk for chunk in self.chunks}
        selected = [by_id[chunk_id] for chunk_id in dict.fromkeys(result.chunk_ids)]
        positions = tuple(sorted(chunk.position for chunk in selected))
        passages = assemble_passages(result, self.records, self.graph)
        gold = set(self.gold)
        return MethodOutcome(
            positions=positions,
            tokens=sum(self.count_tokens(passage.text) for passage in passages),
            recall=len(gold.intersection(positions)) / len(gold) if gold else 0.0,
            char_recall=_covered_characters(self.question, selected),
        )


def run_demo(
    settings: DemoSettings = DEMO_DEFAULTS,
    *,
    embedder: Embedder | None = None,
    sample: Sample | None = None,
    count_tokens: TokenCounter | None = None,
    progress: bool = False,
    status: Callable[[str], None] | None = None,
) -> DemoResult:
    """Run the demo: chunk, embed, retrieve top-k per question, expand, and score.

    Args:
        settings: Chunking, retrieval and SCAR settings.
        embedder: The embedder; the bundled all-MiniLM-L6-v2 when omitted (offline).
        sample: The documents and questions; the bundled sample when omitted.
        count_tokens: Token counter; tiktoken's cl100k_base when omitted.
        progress: Show a progress bar on stderr while embedding (needs tqdm).
        status: Called with one-line messages about what the run is doing.

    Returns:
        Every question's outcome; :meth:`DemoResult.means` summarises them.

    Raises:
        MissingDependencyError: If sentence-transformers, langchain-text-splitters or tiktoken is
            missing (extras ``sentence-transformers`` and ``eval``).
        DataFormatError: If the sample is malformed.
    """
    sample = sample or load_sample()
    if not sample.questions:
        raise DataFormatError("the sample has no questions; give at least one.")
    counter = count_tokens or tiktoken_counter()
    chunked = split_documents(sample.documents, settings.chunk_size)
    if embedder is None:
        embedder = default_embedder()
    all_chunks = [chunk for chunks in chunked.values() for chunk in chunks]
    chunk_matrix, query_matrix = _embed(
        embedder,
        [chunk.text for chunk in all_chunks],
        [question.query for question in sample.questions],
        progress,
        status,
    )
    vectors = {chunk.chunk_id: chunk_matrix[row] for row, chunk in enumerate(all_chunks)}
    linked = [
        link for document in chunked for link in link_sequence(document, len(chunked[document]))
    ]
    graph = NeighborGraph.from_linked_chunks(linked)
    records = {
        chunk.chunk_id: ChunkRecord(
            chunk_id=chunk.chunk_id,
            text=chunk.text,
            document_id=chunk.document,
            position=chunk.position,
            start_index=chunk.start,
        )
        for chunk in all_chunks
    }
    policy = ScarPolicy(settings.scar_settings())
    outcomes = []
    for question, query_vector in zip(sample.questions, query_matrix, strict=True):
        chunks = chunked[question.document]
        matrix = np.stack([vectors[chunk.chunk_id] for chunk in chunks])
        similarities = matrix @ as_unit_vector(query_vector)
        ranking = np.argsort(-similarities, kind="stable")
        seed_rows = ranking[: min(settings.k, len(chunks))]
        seeds = [chunks[row].chunk_id for row in seed_rows]
        gold = gold_positions(question, chunks)
        score = _Scorer(question, chunks, gold, records, graph, counter)
        scar = policy.expand(query_vector, seeds, graph, vectors)
        ranked_ids = [chunks[row].chunk_id for row in ranking]
        selections: dict[MethodName, ExpansionResult] = {
            "topk": top_k(query_vector, seeds, graph, vectors),
            "topk_matched": top_k(query_vector, ranked_ids, graph, vectors, k=len(scar.chunk_ids)),
            "static": static_window(
                query_vector,
                seeds,
                graph,
                vectors,
                window=settings.window,
                lambda_=settings.lambda_,
                gamma=settings.gamma,
            ),
            "scar": scar,
        }
        position = {chunk.chunk_id: chunk.position for chunk in chunks}
        outcomes.append(
            QuestionOutcome(
                index=question.index,
                query=question.query,
                document=question.document,
                gold=gold,
                seeds=tuple((chunks[row].position, float(similarities[row])) for row in seed_rows),
                methods={name: score(result) for name, result in selections.items()},
                decisions=tuple(
                    NeighborDecision(
                        seed=position[d.seed_id],
                        neighbor=position[d.neighbor_id],
                        direction=d.direction,
                        distance=d.distance,
                        relevance=d.relevance,
                        boundary_penalty=d.boundary_penalty,
                        score=d.score,
                        threshold=d.threshold,
                        accepted=d.accepted,
                        gold=position[d.neighbor_id] in gold,
                    )
                    for d in scar.decisions
                ),
            )
        )
    return DemoResult(
        settings=settings,
        model_name=embedder.model_name,
        chunk_counts={document: len(chunks) for document, chunks in chunked.items()},
        questions=tuple(outcomes),
    )
