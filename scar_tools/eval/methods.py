r"""Retrieval methods for the evaluation, and the registry that builds them from their names.

A method is a function ``QueryContext -> Selection``. Every method, the baselines included, selects
through :func:`scar_core._selection.select`, so no method carries a second copy of SCAR's rule:

* top-``B`` is budget mode that keeps all ``B`` hits (nothing is left to bid for);
* the static window keeps the ``k`` hits and lets every neighbour win (continuity bonus 10, which
  no hit's cosine can beat) until the window is exhausted;
* parent retrieval is the static window over links cut at the parent blocks' edges.

Names (``B``, ``W``, ``S``, ``N`` integers; ``G``, ``L``, ``A`` numbers; ``k`` is ``--k``):

=========================  ==================================================================
``topk``, ``topB``          the ``k`` (or ``B``) best chunks of the query's scope
``staticW``                 the ``k`` best chunks plus every chunk up to ``W`` steps away
``scarW``, ``scarW_gG_lL``  the paper's rule: ``PaperSettings(k, window=W, gamma=G, lambda_=L)``
                            (γ 0.8, λ 0.1 when omitted); ``_lambdaL`` is also accepted
``budgetB``                 exactly ``SCARRetriever(vectorstore=vs, k=B)``:
                            ``select(q, B best ids, chunks, BudgetSettings(k=B))``
``budgetB_aA_sS_wW_lL``     the same with continuity bonus ``A``, ``S`` kept hits, window ``W``,
                            λ ``L`` (each part optional, in this order)
``default``                 the shipped default at ``k``: ``BudgetSettings(k=k)``
``parent``, ``parentN``     each of the ``k`` best chunks with its parent block (2,000 or ``N``
                            characters of consecutive chunks)
``topk_matched``            per query, the ``k'`` best chunks, ``k'`` = chunks ``scar1`` returned
``topk_matched_NAME``       the same, matched to method ``NAME``
``rseB_PRESET_pP_dD_hH``    dsRAG's segment extraction at ``B`` chunks over the ``H`` best
                            (default ``B``) (:func:`rse`)
``prevnextB``               LlamaIndex's prev/next window over ``⌈B/3⌉`` hits (:func:`prev_next`)
``toptokT``                 the best chunks in rank order until the next one does not fit ``T``
                            tokens (the first is always taken) (:func:`top_tokens`)
``budgettokT``, ``_hH``     budget mode with ``max_tokens=T`` over the ``H`` best hits (20):
                            ``SCARRetriever(vectorstore=vs, k=H, max_tokens=T)``
=========================  ==================================================================

Both token methods count a chunk's tokens as the report's token metric does (cl100k_base when
tiktoken is installed, else :func:`scar_core._settings.estimate_tokens`), so they compare at equal
tokens.

Add your own with :func:`register_method`.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from scar_core._errors import InvalidSettingsError, MissingDependencyError, missing_dependency
from scar_core._selection import Chunk, Selection, fill_in_order, select
from scar_core._settings import (
    DEFAULT_BUDGET_WINDOW,
    DEFAULT_GAMMA,
    DEFAULT_LAMBDA,
    BudgetSettings,
    PaperSettings,
    estimate_tokens,
)
from scar_tools.eval.chunking import ChunkedCorpus
from scar_tools.eval.embedding import token_counter

__all__ = [
    "DEFAULT_PARENT_SIZE",
    "REGISTRY",
    "TOKEN_HITS",
    "ChunkTokens",
    "Method",
    "MethodRegistry",
    "QueryContext",
    "budget_tokens",
    "create_method",
    "register_method",
    "top_tokens",
]

#: Characters a parent block may span when ``parent`` gives no size (four 500-character chunks).
DEFAULT_PARENT_SIZE = PARENT = 2000
#: A bonus no hit can beat (cosines are at most 1, ``S`` at least ``-1 - 2λ``).
_ALWAYS = 10.0


@dataclass(frozen=True)
class QueryContext:
    """What a method sees of one query.

    Attributes:
        vector: The query's unit embedding.
        ranked: Rows of every chunk of the query's scope, best cosine first.
        k: The run's ``--k``.
        corpus: The chunked corpus.
        nodes: The :class:`~scar_core._selection.Chunk` of every row (unit vector and links).
    """

    vector: npt.NDArray[np.float64]
    ranked: npt.NDArray[np.int64]
    k: int
    corpus: ChunkedCorpus
    nodes: Sequence[Chunk] = field(repr=False)

    def head(self, depth: int) -> list[str]:
        """The ids of the ``depth`` best chunks (fewer when the scope is smaller)."""
        return [self.nodes[row].id for row in self.ranked[:depth].tolist()]

    def select(
        self,
        hits: Sequence[str],
        settings: BudgetSettings | PaperSettings,
        nodes: Sequence[Chunk] | None = None,
        tokens: ChunkTokens | None = None,
    ) -> Selection:
        """Run :func:`scar_core._selection.select` on ``hits`` and the chunks within reach of them.

        Args:
            hits: Retrieved chunk ids, best first.
            settings: The mode and its settings.
            nodes: Chunks by row to use instead of :attr:`nodes` (e.g. with some links cut).
            tokens: Counts the chunks' tokens, for ``max_tokens``.
        """
        table = self.nodes if nodes is None else nodes
        rows = [self.corpus.row_of[h] for h in hits]
        near = self.corpus.nearby(rows, settings.window)
        chunks = {table[r].id: table[r] for r in near}
        counts = None if tokens is None else {c: tokens(self.corpus, c) for c in chunks}
        return select(self.vector, hits, chunks, settings, counts)


class ChunkTokens:
    """Count a chunk's tokens once, as the report does: cl100k_base, else the character estimate.

    The estimate, :func:`scar_core._settings.estimate_tokens`, is used when tiktoken is missing.
    """

    def __init__(self) -> None:
        try:
            self.count = token_counter()
        except MissingDependencyError:
            self.count = estimate_tokens
        self.memo: dict[str, int] = {}

    def __call__(self, corpus: ChunkedCorpus, chunk_id: str) -> int:
        """Return the tokens of the chunk ``chunk_id`` of ``corpus``."""
        if chunk_id not in self.memo:
            self.memo[chunk_id] = self.count(corpus.chunks[corpus.row_of[chunk_id]].text)
        return self.memo[chunk_id]


#: A method: one query's context in, the selection out.
Method = Callable[[QueryContext], Selection]


def top(depth: int) -> Method:
    """Plain top-``depth``: budget mode that keeps every hit, so nothing else can bid."""
    settings = BudgetSettings(k=depth, keep=depth, _window=1)
    return lambda context: context.select(context.head(depth), settings)


def top_tokens(limit: int) -> Method:
    """The best chunks in rank order until the next one does not fit ``limit`` tokens.

    Filling stops there (no later, smaller chunk is taken past it); the first chunk is taken even
    alone over the limit. It is plain top-``n`` for that ``n``.
    """
    BudgetSettings(k=1, max_tokens=limit)  # refuses a limit that is not an integer >= 1
    count = ChunkTokens()

    def run(context: QueryContext) -> Selection:
        ids = (context.nodes[row].id for row in context.ranked)
        return top(max(1, fill_in_order((count(context.corpus, c) for c in ids), limit)))(context)

    return run


#: The hits ``budgettokT`` considers when its name gives none: enough for passages worth 4,000
#: tokens of 500-character chunks.
TOKEN_HITS = 20


def budget_tokens(limit: int, depth: int = TOKEN_HITS) -> Method:
    """Budget mode with ``max_tokens=limit`` over the ``depth`` best hits, tokens as reported."""
    settings = BudgetSettings(k=depth, max_tokens=limit)
    count = ChunkTokens()
    return lambda context: context.select(context.head(depth), settings, tokens=count)


def static(
    window: int, k: int, cut: Callable[[QueryContext], Sequence[Chunk]] | None = None
) -> Method:
    """The ``k`` best chunks and every chunk up to ``window`` steps away.

    Links follow ``cut(context)`` (chunks by row with some links removed) when it is given.
    """
    settings = BudgetSettings(k=k * (2 * window + 1), keep=k, continuity_bonus=_ALWAYS,
                              lambda_=0.0, _window=window)  # fmt: skip
    memo: list[tuple[Sequence[Chunk], Sequence[Chunk]]] = []

    def run(context: QueryContext) -> Selection:
        if cut is None:
            return context.select(context.head(k), settings)
        if not memo or memo[0][0] is not context.nodes:
            memo[:] = [(context.nodes, cut(context))]
        return context.select(context.head(k), settings, memo[0][1])

    return run


def parent_links(size: int) -> Callable[[QueryContext], list[Chunk]]:
    """Cut the links between parent blocks: runs of chunks spanning at most ``size`` characters."""

    def cut(context: QueryContext) -> list[Chunk]:
        chunks, nodes = context.corpus.chunks, context.nodes
        block = [0] * len(chunks)
        opened = chunks[0].start if chunks else 0
        for row in range(1, len(chunks)):
            same = chunks[row].document_id == chunks[row - 1].document_id
            if not same or chunks[row].end - opened > size:
                block[row], opened = block[row - 1] + 1, chunks[row].start
            else:
                block[row] = block[row - 1]
        joined = [False, *(block[r - 1] == block[r] for r in range(1, len(chunks))), False]
        return [
            Chunk(n.id, n.vector, n.previous_id if joined[r] else None,
                  n.next_id if joined[r + 1] else None)
            for r, n in enumerate(nodes)
        ]  # fmt: skip

    return cut


def scar(settings: BudgetSettings | PaperSettings) -> Method:
    """SCAR in either mode on the ``settings.k`` best chunks."""
    return lambda context: context.select(context.head(settings.k), settings)


def matched(reference: Method) -> Method:
    """Per query, the ``k'`` best chunks, ``k'`` being how many chunks ``reference`` returned."""
    return lambda context: top(max(1, len(reference(context).chunk_ids)))(context)


def prev_next(budget: int) -> Method:
    """LlamaIndex's ``PrevNextNodePostprocessor(num_nodes=1, mode="both")`` on ``⌈budget/3⌉`` hits.

    The static window ±1, cut to its first ``budget`` chunks in the postprocessor's order (each
    hit, its next, its previous, each put beside a chunk it links to); fewer if windows overlap.
    """
    seeds = -(-budget // 3)
    window = static(1, seeds)

    def run(context: QueryContext) -> Selection:
        full, order = window(context), list[str]()
        step = lambda c, d: context.nodes[context.corpus.row_of[c]].step(d)  # noqa: E731
        for chunk in (
            c for s in context.head(seeds) for c in (s, step(s, "next"), step(s, "previous"))
        ):
            if chunk is not None and chunk not in order:
                order.insert(next((i + (d == "next") for i, o in enumerate(order)
                                   for d in ("previous", "next") if step(o, d) == chunk), len(order)), chunk)  # fmt: skip
        kept = set(order[:budget])
        runs = (tuple(c for c in passage if c in kept) for passage in full.passages)
        picked = tuple(s for s in full.selected if s.chunk_id in kept)
        return Selection(picked, tuple(r for r in runs if r), full.decisions, full.unscored)

    return run


def rse(budget: int, preset: str = "balanced", depth: int | None = None, **params: float) -> Method:
    """Relevant Segment Extraction by dsRAG's own functions (extra ``compare``) at ``budget``.

    The ``depth`` best chunks (by default ``budget``: the hits budget mode sees; dsRAG itself
    searches 200), cosine as ``similarity``, go through
    ``get_meta_document``, ``get_relevance_values`` and ``get_best_segments`` (overall length
    ``budget``) with dsRAG's ``preset`` updated by ``params`` (``irrelevant_chunk_penalty`` P,
    ``decay_rate`` D, ``minimum_value`` M, in names ``rseB_PRESET_pP_dD_mM_hH`` with ``H`` the
    depth); the best other chunks fill what the segments leave.

    Raises:
        MissingDependencyError: If dsRAG is not installed (extra ``compare``).
    """
    try:
        dsrag = importlib.import_module("dsrag.rse")
    except ImportError as exc:
        raise missing_dependency("dsrag", "compare") from exc
    BudgetSettings(k=budget)  # refuses a budget that is not an integer >= 1, as budgetB does
    p = dsrag.RSE_PARAMS_PRESETS[preset] | params
    depth = budget if depth is None else depth

    def run(context: QueryContext) -> Selection:
        chunks, rows = context.corpus.chunks, context.ranked[:depth].tolist()
        cosines = np.array([context.nodes[r].vector for r in rows]) @ context.vector
        results = [{"similarity": float(c), "metadata": {"doc_id": chunks[r].document_id,
                    "chunk_index": chunks[r].position, "chunk_text": chunks[r].text}}
                   for r, c in zip(rows, cosines, strict=True)]  # fmt: skip
        splits, starts, docs = dsrag.get_meta_document([results], p["top_k_for_document_selection"])
        values = dsrag.get_relevance_values([results], splits[-1], starts, docs,
            p["irrelevant_chunk_penalty"], p["decay_rate"], p["chunk_length_adjustment"])  # fmt: skip
        segments, _ = dsrag.get_best_segments(values, splits, p["max_length"], budget,
                                              p["minimum_value"])  # fmt: skip
        meta = [context.corpus.rows_of_document[d][0] + m - starts[d]  # meta-document -> row
                for d, end in zip(docs, splits, strict=True) for m in range(starts[d], end)]  # fmt: skip
        ids = [context.nodes[meta[m]].id for a, b in segments for m in range(a, b)]
        ids = list(dict.fromkeys(ids + context.head(max(depth, budget))))[:budget]
        return context.select(ids, BudgetSettings(k=len(ids), keep=len(ids), _window=1))

    return run


#: Builds a method from the match of its name and the run's ``--k``.
Factory = Callable[[re.Match[str], int], Method]


class MethodRegistry:
    r"""Method names (regular expressions matched against the whole name) and their factories.

    Example:
        >>> registry = MethodRegistry()
        >>> registry.register(r"top(\d+)", lambda m, k: top(int(m[1])), "top10", "B best chunks")
        >>> method = registry.create("top7", k=5)
    """

    def __init__(self) -> None:
        self._entries: list[tuple[re.Pattern[str], Factory, str, str]] = []

    def register(self, pattern: str, factory: Factory, example: str, description: str = "") -> None:
        """Register names: ``factory(match, k)`` builds the method for a name ``pattern`` matches.

        A later registration wins over an earlier one that matches the same name.
        """
        self._entries.insert(0, (re.compile(pattern), factory, example, description))

    def create(self, name: str, k: int) -> Method:
        """Build the method called ``name`` for a run at ``--k`` = ``k``.

        Raises:
            InvalidSettingsError: If no registration matches ``name``, or its settings are invalid.
        """
        for pattern, factory, _, _ in self._entries:
            if match := pattern.fullmatch(name):
                return factory(match, k)
        examples = ", ".join(e[2] for e in reversed(self._entries))
        raise InvalidSettingsError(f"method {name!r} is not known; use names like: {examples}.")


_NUMBER = r"(\d+(?:\.\d+)?)"


def _budget(match: re.Match[str], k: int) -> Method:
    return scar(
        BudgetSettings(
            k=int(match[1]),
            continuity_bonus=float(match[2]) if match[2] else None,
            keep=int(match[3]) if match[3] else None,
            _window=int(match[4]) if match[4] else DEFAULT_BUDGET_WINDOW,
            lambda_=float(match[5]) if match[5] else DEFAULT_LAMBDA,
        )
    )


def _paper(match: re.Match[str], k: int) -> Method:
    gamma = float(match[2]) if match[2] else DEFAULT_GAMMA
    lambda_ = float(match[3]) if match[3] else DEFAULT_LAMBDA
    return scar(PaperSettings(k=k, window=int(match[1]), gamma=gamma, lambda_=lambda_))


def _rse(match: re.Match[str], k: int) -> Method:
    keys = ("irrelevant_chunk_penalty", "decay_rate", "minimum_value")
    params = {key: float(v) for key, v in zip(keys, match.group(3, 4, 5), strict=True) if v}
    return rse(int(match[1]), match[2] or "balanced", int(match[6]) if match[6] else None, **params)


def _builtins(registry: MethodRegistry) -> None:
    add = registry.register
    add(r"topk", lambda m, k: top(k), "topk", "the k best chunks of the scope")
    add(r"top(\d+)", lambda m, k: top(int(m[1])), "top10", "the B best chunks of the scope")
    add(r"static(\d+)", lambda m, k: static(int(m[1]), k), "static1", "topk, and W steps around")
    add(rf"scar(\d+)(?:_g{_NUMBER})?(?:_(?:l|lambda){_NUMBER})?", _paper, "scar1_g0.8_l0.1",
        "the paper's rule, window W, gamma G (0.8), lambda L (0.1), k seeds")  # fmt: skip
    add(rf"budget(\d+)(?:_a{_NUMBER})?(?:_s(\d+))?(?:_w(\d+))?(?:_l{_NUMBER})?", _budget,
        "budget10", "exactly SCARRetriever(k=B); _aA bonus, _sS kept, _wW window, _lL lambda")  # fmt: skip
    add(r"default", lambda m, k: scar(BudgetSettings(k=k)), "default",
        "the shipped default at --k: budget mode, BudgetSettings(k=k)")  # fmt: skip
    add(r"parent(\d+)?", lambda m, k: static(1 << 20, k, parent_links(int(m[1] or PARENT))),
        "parent2000", "each of the k best chunks with its parent block of N chars")  # fmt: skip
    add(r"topk_matched", lambda m, k: matched(registry.create("scar1", k)), "topk_matched",
        "per query, top-k' with k' = the chunks scar1 returned")  # fmt: skip
    add(r"topk_matched_(.+)", lambda m, k: matched(registry.create(m[1], k)),
        "topk_matched_default", "per query, top-k' with k' = the chunks NAME returned")  # fmt: skip
    add(rf"rse(\d+)(?:_(balanced|precision|find_all))?(?:_p{_NUMBER})?(?:_d{_NUMBER})?"
        rf"(?:_m{_NUMBER})?(?:_h(\d+))?", _rse, "rse10_precision", "dsRAG's RSE")  # fmt: skip
    add(r"prevnext(\d+)", lambda m, k: prev_next(int(m[1])), "prevnext9", "LlamaIndex's ±1")
    add(r"toptok(\d+)", lambda m, k: top_tokens(int(m[1])), "toptok1000",
        "the best chunks in rank order until the next one does not fit T tokens")  # fmt: skip
    add(r"budgettok(\d+)(?:_h(\d+))?",
        lambda m, k: budget_tokens(int(m[1]), int(m[2]) if m[2] else TOKEN_HITS), "budgettok1000",
        "budget mode with max_tokens=T over the H (20) best hits")  # fmt: skip


#: The registry ``scar eval`` uses.
REGISTRY = MethodRegistry()
_builtins(REGISTRY)


def register_method(pattern: str, factory: Factory, example: str, description: str = "") -> None:
    """Register a method name on :data:`REGISTRY` (see :meth:`MethodRegistry.register`)."""
    REGISTRY.register(pattern, factory, example, description)


def create_method(name: str, k: int) -> Method:
    """Build a method of :data:`REGISTRY` by name for a run at ``--k`` = ``k``."""
    return REGISTRY.create(name, k)
