"""Retrieval methods for the evaluation, and the registry that builds them from names.

A method sees one query at a time through a :class:`QueryContext` (the query vector, every chunk
of the query's scope ranked by cosine, the neighbour graph, the chunk vectors and texts, ``k`` and
a token counter) and returns a :class:`~scar_core.policy.ExpansionResult`. A method is either a
plain function ``QueryContext -> ExpansionResult`` or an :class:`EvalMethod`, which may also
override :meth:`EvalMethod.select_batch` to handle all queries at once.

Names are turned into methods by a :class:`MethodRegistry`: exact names (``"topk"``) and
parametrised names matched by a regular expression (``"top10"``, ``"scar1_g0.5"``). Built in:

========================  ==================================================================
``topk``                  the ``k`` best chunks of the scope
``topB``                  the ``B`` best chunks, e.g. ``top10``
``staticW``               ``topk`` plus every chunk up to ``W`` steps from a seed, e.g. ``static1``
``scarW``                 SCAR with window ``W`` (λ 0.1, γ 0.8), e.g. ``scar1``, ``scar2``
``scarW_gG_lL``           SCAR with γ ``G`` and/or λ ``L``: ``scar1_g0.5``, ``scar1_lambda0``
``parent``                each seed with its 2,000-character parent block; ``parentN``: N chars
``rerank``                cross-encoder re-ranking; unavailable when no cross-encoder is offline
``topk_matched``          per query, the top ``k'`` chunks, ``k'`` = chunks ``scar1`` returned
``topk_matched_NAME``     the same, matched to method ``NAME`` (e.g. ``topk_matched_default``)
``budgetB``               budgeted SCAR at ``B`` chunks; ``budgetB_aA_sS``: bonus ``A``, ``S`` seeds
``default``               the adapters' shipped configuration (budgeted SCAR, 10 chunks, 3 seeds)
========================  ==================================================================

Add your own with :func:`register_method` or :func:`register_method_pattern`::

    register_method("scar_tight", lambda: ScarMethod(ScarSettings(gamma=0.9)), "SCAR at γ 0.9")
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from scar_core.assembly import ChunkRecord
from scar_core.baselines import static_window, top_k
from scar_core.budget import (
    DEFAULT_CONTINUITY_BONUS,
    BudgetSettings,
    default_budget_settings,
    select_within_budget,
)
from scar_core.errors import InvalidSettingsError, ScarError
from scar_core.eval.data import EvalQuery
from scar_core.graph import NeighborGraph
from scar_core.policy import ExpansionResult, ScarPolicy
from scar_core.settings import (
    DEFAULT_GAMMA,
    DEFAULT_LAMBDA,
    ScarSettings,
    validate_k,
    validate_window,
)
from scar_core.tokens import TokenCounter

__all__ = [
    "DEFAULT_REGISTRY",
    "EvalMethod",
    "FunctionMethod",
    "MatchedTopK",
    "MethodLike",
    "MethodRegistry",
    "MethodUnavailableError",
    "QueryContext",
    "RankedCandidates",
    "ScarMethod",
    "SelectFunction",
    "StaticWindowMethod",
    "TopKMethod",
    "create_method",
    "register_method",
    "register_method_pattern",
    "top_result",
]

FloatVector = npt.NDArray[np.float64]


class MethodUnavailableError(ScarError, RuntimeError):
    """A method cannot run here (e.g. no cross-encoder offline). The evaluation skips it."""


class RankedCandidates(Sequence[str]):
    """The chunks of a query's scope, best first, with their cosines to the query.

    Args:
        ids: Chunk ids of the whole corpus, by row.
        order: Rows of the scope's chunks, best first.
        scores: Cosines of those rows to the query, in the same order.
    """

    def __init__(
        self, ids: Sequence[str], order: npt.NDArray[np.int64], scores: npt.NDArray[np.float64]
    ) -> None:
        self._ids = ids
        self.order = order
        self.scores = scores

    def __len__(self) -> int:
        return int(self.order.shape[0])

    def __getitem__(self, index: int | slice) -> str | list[str]:  # type: ignore[override]
        if isinstance(index, slice):
            return [self._ids[row] for row in self.order[index].tolist()]
        return self._ids[int(self.order[index])]

    def __iter__(self) -> Iterator[str]:
        return (self._ids[row] for row in self.order.tolist())

    def head(self, depth: int) -> list[str]:
        """The ``depth`` best chunk ids (fewer when the scope is smaller)."""
        return [self._ids[row] for row in self.order[:depth].tolist()]


@dataclass(frozen=True)
class QueryContext:
    """Everything a method may use to select chunks for one query.

    Attributes:
        query: The query (its text and gold spans; methods must not look at the spans).
        vector: The query embedding, unit length.
        candidates: Every chunk of the query's scope, ranked by cosine, best first.
        k: The retrieval depth of the run.
        graph: Previous/next links of every chunk.
        vectors: ``chunk id -> unit embedding``.
        texts: ``chunk id -> text``.
        records: ``chunk id -> ChunkRecord`` (text, document, position, start offset).
        count_tokens: The run's token counter.
    """

    query: EvalQuery
    vector: FloatVector
    candidates: RankedCandidates
    k: int
    graph: NeighborGraph
    vectors: Mapping[str, FloatVector]
    texts: Mapping[str, str]
    records: Mapping[str, ChunkRecord]
    count_tokens: TokenCounter

    @property
    def seeds(self) -> list[str]:
        """The ``k`` best chunks of the scope: what every seed-based method starts from."""
        return self.candidates.head(self.k)


def top_result(context: QueryContext, depth: int) -> ExpansionResult:
    """Return the ``depth`` best chunks of the scope (:func:`scar_core.baselines.top_k`)."""
    return top_k(context.vector, context.candidates.head(depth), context.graph, context.vectors)


class EvalMethod(ABC):
    """A method that selects chunks for each query.

    Override :meth:`select`, and optionally :meth:`select_batch` when the whole batch can be
    handled at once.
    """

    @abstractmethod
    def select(self, context: QueryContext) -> ExpansionResult:
        """Select the chunks of one query."""

    def select_batch(self, contexts: Sequence[QueryContext]) -> list[ExpansionResult]:
        """Select the chunks of many queries (by default one :meth:`select` per query)."""
        return [self.select(context) for context in contexts]


#: A method written as a plain function.
SelectFunction = Callable[[QueryContext], ExpansionResult]
#: What a registry factory may return.
MethodLike = EvalMethod | SelectFunction


class FunctionMethod(EvalMethod):
    """Wrap a :data:`SelectFunction` as an :class:`EvalMethod`."""

    def __init__(self, function: SelectFunction) -> None:
        self.function = function

    def select(self, context: QueryContext) -> ExpansionResult:
        """Call the wrapped function."""
        return self.function(context)


class TopKMethod(EvalMethod):
    """Plain top-k: the ``depth`` best chunks (the run's ``k`` when ``depth`` is ``None``)."""

    def __init__(self, depth: int | None = None) -> None:
        if depth is not None:
            validate_k(depth, "depth")
        self.depth = depth

    def select(self, context: QueryContext) -> ExpansionResult:
        """Return the best chunks of the scope."""
        return top_result(context, context.k if self.depth is None else self.depth)


def _shared(contexts: Sequence[QueryContext]) -> bool:
    """Whether every context shares one graph and one vector table (so one batch call fits)."""
    return all(c.graph is contexts[0].graph and c.vectors is contexts[0].vectors for c in contexts)


class ScarMethod(EvalMethod):
    """SCAR on the ``k`` best chunks with the given settings, all queries in one batch."""

    def __init__(self, settings: ScarSettings | None = None) -> None:
        self.policy = ScarPolicy(settings)

    def select(self, context: QueryContext) -> ExpansionResult:
        """Expand one query's seeds."""
        return self.policy.expand(context.vector, context.seeds, context.graph, context.vectors)

    def select_batch(self, contexts: Sequence[QueryContext]) -> list[ExpansionResult]:
        """Expand every query's seeds with one call of :meth:`ScarPolicy.expand_batch`."""
        if not contexts:
            return []
        if not _shared(contexts):
            return super().select_batch(contexts)
        queries = np.vstack([context.vector for context in contexts])
        return self.policy.expand_batch(
            queries, [c.seeds for c in contexts], contexts[0].graph, contexts[0].vectors
        )


class StaticWindowMethod(EvalMethod):
    """The static-window baseline: ``topk`` plus every chunk up to ``window`` steps away."""

    def __init__(self, window: int) -> None:
        validate_window(window)
        self.window = window

    def select(self, context: QueryContext) -> ExpansionResult:
        """Add every neighbour in the window (scored with SCAR's S, all accepted)."""
        return static_window(
            context.vector, context.seeds, context.graph, context.vectors, self.window
        )


class BudgetMethod(EvalMethod):
    """Budgeted SCAR (:mod:`scar_core.budget`): expansion competes with further hits per slot."""

    def __init__(self, settings: BudgetSettings) -> None:
        self.settings = settings

    def select(self, context: QueryContext) -> ExpansionResult:
        """Fill the budget for one query from the ranking and the graph."""
        return select_within_budget(
            context.vector,
            context.candidates.head(self.settings.max_chunks),
            context.graph,
            context.vectors,
            self.settings,
        )


def _budget_from_match(match: re.Match[str]) -> BudgetMethod:
    bonus = float(match[2]) if match[2] is not None else DEFAULT_CONTINUITY_BONUS
    seeds = int(match[3]) if match[3] is not None else 1
    return BudgetMethod(
        BudgetSettings(max_chunks=int(match[1]), continuity_bonus=bonus, min_seeds=seeds)
    )


class MatchedTopK(EvalMethod):
    """Top-k' with, per query, ``k'`` equal to the number of chunks ``reference`` returned.

    This is the comparison the paper left out: plain retrieval given the same chunk budget.
    """

    def __init__(self, reference: EvalMethod) -> None:
        self.reference = reference

    def select(self, context: QueryContext) -> ExpansionResult:
        """Match one query's budget."""
        return self.select_batch([context])[0]

    def select_batch(self, contexts: Sequence[QueryContext]) -> list[ExpansionResult]:
        """Run the reference on every query, then take as many top chunks as it returned."""
        references = self.reference.select_batch(contexts)
        return [
            top_result(context, max(1, len(reference.chunk_ids)))
            for context, reference in zip(contexts, references, strict=True)
        ]


def as_method(method: MethodLike) -> EvalMethod:
    """Return ``method`` as an :class:`EvalMethod`, wrapping a plain function."""
    if isinstance(method, EvalMethod):
        return method
    if callable(method):
        return FunctionMethod(method)
    raise InvalidSettingsError(
        f"{method!r} is not a method; give an EvalMethod or a function QueryContext -> "
        "ExpansionResult."
    )


@dataclass(frozen=True)
class _Pattern:
    regex: re.Pattern[str]
    factory: Callable[[re.Match[str]], MethodLike]
    example: str
    description: str


class MethodRegistry:
    r"""Names of methods and the factories that build them.

    Exact names are looked up first; then patterns, most recently registered first, must match
    the whole name.

    Example:
        >>> registry = MethodRegistry()
        >>> registry.register_pattern(r"top(\d+)", lambda m: TopKMethod(int(m[1])), "top10", "")
        >>> registry.create("top7").depth
        7
    """

    def __init__(self) -> None:
        self._exact: dict[str, tuple[Callable[[], MethodLike], str]] = {}
        self._patterns: list[_Pattern] = []

    def register(
        self,
        name: str,
        factory: Callable[[], MethodLike],
        description: str = "",
        *,
        replace: bool = False,
    ) -> None:
        """Register an exact name.

        Args:
            name: The method's name.
            factory: Builds the method; may raise :class:`MethodUnavailableError`.
            description: One line for ``--help`` and the report.
            replace: Allow replacing an existing registration.
        """
        if not name or not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
            raise InvalidSettingsError(
                f"method name {name!r} is not valid; use letters, digits, '_', '.' and '-'."
            )
        if name in self._exact and not replace:
            raise InvalidSettingsError(
                f"method {name!r} is already registered; pass replace=True to replace it."
            )
        self._exact[name] = (factory, description)

    def register_pattern(
        self,
        pattern: str,
        factory: Callable[[re.Match[str]], MethodLike],
        example: str,
        description: str = "",
    ) -> None:
        r"""Register parametrised names: ``pattern`` must match a whole name.

        Args:
            pattern: A regular expression with groups for the parameters, e.g. ``r"top(\d+)"``.
            factory: Builds the method from the match; may raise :class:`MethodUnavailableError`
                or :class:`~scar_core.errors.InvalidSettingsError`.
            example: A name the pattern matches, shown in help texts.
            description: One line for ``--help`` and the report.
        """
        self._patterns.insert(0, _Pattern(re.compile(pattern), factory, example, description))

    def create(self, name: str) -> EvalMethod:
        """Build the method called ``name``.

        Raises:
            InvalidSettingsError: If no registration matches the name.
            MethodUnavailableError: If the method cannot run here.
        """
        if name in self._exact:
            return as_method(self._exact[name][0]())
        for pattern in self._patterns:
            match = pattern.regex.fullmatch(name)
            if match is not None:
                return as_method(pattern.factory(match))
        raise InvalidSettingsError(
            f"method {name!r} is not known; use one of: {', '.join(self.names())}."
        )

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (
            name in self._exact or any(p.regex.fullmatch(name) for p in self._patterns)
        )

    def names(self) -> list[str]:
        """Exact names, then one example per pattern."""
        return [*self._exact, *(pattern.example for pattern in reversed(self._patterns))]

    def describe(self) -> list[tuple[str, str]]:
        """``(name or example, description)`` for every registration."""
        return [
            *((name, description) for name, (_, description) in self._exact.items()),
            *((p.example, p.description) for p in reversed(self._patterns)),
        ]


# --------------------------------------------------------------------------------------------
# Built-in registrations

_NUMBER = r"(\d+(?:\.\d+)?)"


def _scar_from_match(match: re.Match[str]) -> EvalMethod:
    window = int(match[1])
    gamma = float(match[2]) if match[2] is not None else DEFAULT_GAMMA
    lambda_ = float(match[3]) if match[3] is not None else DEFAULT_LAMBDA
    return ScarMethod(ScarSettings(lambda_=lambda_, gamma=gamma, window=window))


def _parent(size: int | None = None) -> MethodLike:
    from scar_core.eval.baseline_methods import DEFAULT_PARENT_SIZE, ParentMethod

    return ParentMethod(size or DEFAULT_PARENT_SIZE)


def _rerank() -> MethodLike:
    from scar_core.eval.baseline_methods import RerankMethod

    return RerankMethod.offline_default()


def register_builtins(registry: MethodRegistry) -> None:
    """Register the built-in methods (see the module docstring) on ``registry``."""
    registry.register("topk", TopKMethod, "the k best chunks of the scope")
    registry.register(
        "topk_matched",
        lambda: MatchedTopK(registry.create("scar1")),
        "per query, top-k' with k' = the chunks scar1 returned",
    )
    registry.register(
        "parent", _parent, "each of the k best chunks with its 2,000-character parent block"
    )
    registry.register("rerank", _rerank, "cross-encoder re-ranking of the best candidates")
    registry.register_pattern(
        r"top(\d+)", lambda m: TopKMethod(int(m[1])), "top10", "the B best chunks of the scope"
    )
    registry.register_pattern(
        r"static(\d+)",
        lambda m: StaticWindowMethod(int(m[1])),
        "static1",
        "topk plus every chunk up to W steps from a seed",
    )
    registry.register_pattern(
        r"parent(\d+)",
        lambda m: _parent(int(m[1])),
        "parent4000",
        "each of the k best chunks with its parent block of N characters",
    )
    registry.register_pattern(
        rf"scar(\d+)(?:_g{_NUMBER})?(?:_(?:l|lambda){_NUMBER})?",
        _scar_from_match,
        "scar1_g0.5_l0.1",
        "SCAR with window W, gamma G (default 0.8) and lambda L (default 0.1)",
    )
    registry.register(
        "default",
        lambda: BudgetMethod(default_budget_settings()),
        "the adapters' shipped configuration (budgeted SCAR, 10 chunks, 3 kept seeds, bonus 0.2)",
    )
    registry.register_pattern(
        rf"budget(\d+)(?:_a{_NUMBER})?(?:_s(\d+))?",
        _budget_from_match,
        "budget10_a0.2_s1",
        "budgeted SCAR at B chunks, continuity bonus A (default 0.2), S kept seeds (default 1)",
    )
    registry.register_pattern(
        r"topk_matched_(.+)",
        lambda m: MatchedTopK(registry.create(m[1])),
        "topk_matched_scar2",
        "per query, top-k' with k' = the chunks method NAME returned",
    )


#: The registry ``scar eval`` and :func:`create_method` use.
DEFAULT_REGISTRY = MethodRegistry()
register_builtins(DEFAULT_REGISTRY)


def register_method(
    name: str, factory: Callable[[], MethodLike], description: str = "", *, replace: bool = False
) -> None:
    """Register an exact method name on :data:`DEFAULT_REGISTRY`. See :meth:`MethodRegistry.register`."""
    DEFAULT_REGISTRY.register(name, factory, description, replace=replace)


def register_method_pattern(
    pattern: str,
    factory: Callable[[re.Match[str]], MethodLike],
    example: str,
    description: str = "",
) -> None:
    """Register parametrised names on :data:`DEFAULT_REGISTRY`. See :meth:`MethodRegistry.register_pattern`."""
    DEFAULT_REGISTRY.register_pattern(pattern, factory, example, description)


def create_method(name: str) -> EvalMethod:
    """Build a method by name from :data:`DEFAULT_REGISTRY`."""
    return DEFAULT_REGISTRY.create(name)
