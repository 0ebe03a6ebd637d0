"""Hypothesis over the core (expand, expand_batch, select_within_budget) with hostile inputs.

Every generated case mixes the bad inputs SCAR must survive: links that are missing, dangling,
self-referencing, cyclic, cross-document or of the wrong type; duplicate and unknown seed ids;
empty retrieval; neighbour vectors that are NaN, infinite, zero, of another dimension, of huge or
tiny scale, non-numeric or absent; and, in a minority of cases, a bad query or a bad seed vector.

For each case the oracle decides, from the documented contract alone, whether SCAR must fail.
When it must, the failure has to be the documented type with a message; when it must not, the
output keeps every seed, holds no duplicate, stays inside what the links reach, contains only
chunks with usable vectors, never crosses documents and is the same on a second run.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rel_support import (
    ANY_VECTOR_KINDS,
    SEED_VECTOR_KINDS,
    chain_link,
    check_documented_failure,
    count_case,
    link_target,
    make_topic,
    make_vector,
    pick,
    reachable,
    recorded_logs,
    run_counted,
    usable_vector,
)

from scar_core import NeighborGraph, ScarPolicy, ScarSettings, expand, expand_batch
from scar_core.budget import BudgetSettings, select_within_budget
from scar_core.errors import (
    InvalidSettingsError,
    InvalidVectorError,
    LinkError,
    MissingVectorError,
    ScarError,
)

EXPAND_CASES = 3600
BATCH_CASES = 1000
BUDGET_CASES = 3000

DIRECTIONS = ("both", "previous", "next")
DOCUMENT_IDS = ("doc-a", "doc-b", "doc-c")

# --------------------------------------------------------------------------------------------
# Generated corpora


@dataclass
class Corpus:
    """A generated corpus: raw links, documents, vectors, a query and retrieved seeds."""

    ids: list[str]
    dimension: int
    links: dict[Any, Any]
    documents: dict[str, str]
    vectors: dict[str, Any]
    query: Any
    seeds: list[Any]
    graph_form: str
    malformed_link: bool = False
    duplicate_sequence: bool = False
    tokens: dict[str, int] = field(default_factory=dict)
    knobs: dict[str, Any] = field(default_factory=dict)

    def usable(self, chunk_id: Any) -> bool:
        return (
            isinstance(chunk_id, str)
            and chunk_id in self.vectors
            and usable_vector(self.vectors[chunk_id], self.dimension)
        )


def random_corpus(
    rng: np.random.Generator, prefix: str, *, bad_query: bool, odd_seeds: bool
) -> Corpus:
    """One hostile corpus; see the module docstring for what it may hold."""
    ids = [f"{prefix}{i}" for i in range(int(rng.integers(1, 13)))]
    dimension = int(rng.integers(1, 7))
    links: dict[Any, Any] = {}
    for index, chunk_id in enumerate(ids):
        if rng.random() < 0.15:
            continue  # a chunk without link metadata
        links[chunk_id] = (chain_link(rng, ids, index, 0), chain_link(rng, ids, index, 1))
    malformed_link = rng.random() < 0.025
    if malformed_link:
        links[pick(rng, ids)] = pick(rng, [("a",), ("a", "b", "c"), "ab", None, 7])
    if rng.random() < 0.03:
        links[3] = (None, ids[0])  # a non-string key: never reached, never a crash
    documents = {c: pick(rng, DOCUMENT_IDS) for c in ids if rng.random() < 0.75}
    pool = [*ids, "unknown-seed"]
    seeds: list[Any] = [
        "unknown-seed" if rng.random() < 0.04 else pick(rng, ids)
        for _ in range(int(rng.integers(0, 7)))
    ]
    if odd_seeds and seeds and rng.random() < 0.025:
        seeds.insert(int(rng.integers(len(seeds) + 1)), pick(rng, [7, None, 2.5]))
    seed_set = {s for s in seeds if isinstance(s, str)}
    topic = make_topic(rng, dimension)
    bad_seeds = rng.random() < 0.2
    vectors: dict[str, Any] = {}
    for chunk_id in ids:
        if chunk_id in seed_set:
            kind = pick(rng, SEED_VECTOR_KINDS) if bad_seeds else "good"
        else:
            kind = pick(rng, ANY_VECTOR_KINDS)
        value = make_vector(rng, dimension, kind, topic=topic)
        if value is not None:
            vectors[chunk_id] = value
    if rng.random() < 0.5:
        vectors["unknown-seed"] = make_vector(rng, dimension, "good", topic=topic)
    query_kinds = ("good",) * 74 + ("nan", "inf", "zero", "matrix", "empty", "garbage")
    query_kind = pick(rng, query_kinds) if bad_query else "good"
    query = (
        np.zeros(0)
        if query_kind == "empty"
        else make_vector(rng, dimension, query_kind, topic=topic)
    )
    graph_form = pick(rng, ["mapping", "graph", "graph_with_documents", "sequences"])
    duplicate_sequence = graph_form == "sequences" and rng.random() < 0.15
    tokens = {chunk_id: int(rng.integers(1, 21)) for chunk_id in pool}
    knobs = {
        # Plain SCAR; gamma in (0, 1], lambda_ often at the paper's 0.1 or the ablation's 0.
        "lambda_": pick(rng, [0.0, 0.1, float(rng.uniform(0.0, 3.0))]),
        "gamma": pick(rng, [0.8, 1.0, 1.0 - float(rng.random())]),
        "window": int(rng.integers(1, 5)),
        "direction": pick(rng, DIRECTIONS),
        "as_lookup": bool(rng.random() < 0.5),
        # Budgeted selection.
        "max_chunks": int(rng.integers(1, 11)),
        "min_seeds": int(rng.integers(1, 5)),
        "bonus": pick(rng, [0.0, 0.2, float(rng.uniform(0.0, 1.0))]),
        "budget_window": pick(rng, [None, 1, 2, 3]),
        "max_tokens": pick(rng, [None, int(rng.integers(1, 61))]),
        "lazy": bool(rng.random() < 0.5),
    }
    return Corpus(
        ids,
        dimension,
        links,
        documents,
        vectors,
        query,
        seeds,
        graph_form,
        malformed_link,
        duplicate_sequence,
        tokens,
        knobs,
    )


@st.composite
def corpora(draw: st.DrawFn, *, bad_query: bool = True, odd_seeds: bool = True) -> Corpus:
    prefix = draw(st.text(max_size=3))
    rng = np.random.default_rng(draw(st.integers(0, 2**64 - 1)))
    return random_corpus(rng, prefix, bad_query=bad_query, odd_seeds=odd_seeds)


def build_neighbors(corpus: Corpus) -> Any:
    """The corpus's links in the generated form (the raising forms raise here)."""
    if corpus.graph_form == "mapping":
        return corpus.links
    if corpus.graph_form == "graph":
        return NeighborGraph(corpus.links)
    if corpus.graph_form == "graph_with_documents":
        return NeighborGraph(corpus.links, corpus.documents)
    # Reading-order sequences: one per document; a duplicate id is ambiguous and refused.
    sequences: dict[str, list[str]] = {}
    for chunk_id in corpus.ids:
        sequences.setdefault(corpus.documents.get(chunk_id, "doc-none"), []).append(chunk_id)
    if corpus.duplicate_sequence:
        first = next(iter(sequences))
        sequences.setdefault("doc-dup", []).append(sequences[first][0])
    return NeighborGraph.from_sequences(sequences)


def effective_links(corpus: Corpus) -> dict[Any, Any]:
    """The links the chosen graph form actually holds (sequences replace the raw links)."""
    if corpus.graph_form != "sequences":
        return corpus.links
    sequences: dict[str, list[str]] = {}
    for chunk_id in corpus.ids:
        sequences.setdefault(corpus.documents.get(chunk_id, "doc-none"), []).append(chunk_id)
    links: dict[str, tuple[str | None, str | None]] = {}
    for ids in sequences.values():
        for position, chunk_id in enumerate(ids):
            links[chunk_id] = (
                ids[position - 1] if position else None,
                ids[position + 1] if position + 1 < len(ids) else None,
            )
    return links


def documents_known(corpus: Corpus) -> dict[str, str]:
    if corpus.graph_form == "graph_with_documents":
        return corpus.documents
    if corpus.graph_form == "sequences":
        return {c: corpus.documents.get(c, "doc-none") for c in corpus.ids}
    return {}


class DictLookup:
    """A :class:`scar_core.vectors.VectorLookup` over a dict, counting its calls."""

    def __init__(self, vectors: dict[str, Any]) -> None:
        self.vectors = vectors
        self.calls = 0

    def get_vectors(self, chunk_ids: Sequence[str]) -> dict[str, Any]:
        self.calls += 1
        return {c: self.vectors[c] for c in chunk_ids if c in self.vectors}


def vector_source(corpus: Corpus, as_lookup: bool) -> Any:
    return DictLookup(corpus.vectors) if as_lookup else corpus.vectors


# --------------------------------------------------------------------------------------------
# The oracle for plain SCAR


def construction_error(corpus: Corpus) -> type[ScarError] | None:
    """The error building the links must raise, if any."""
    if corpus.malformed_link and corpus.graph_form != "sequences":
        return LinkError
    if corpus.duplicate_sequence:
        return LinkError
    return None


def query_is_bad(corpus: Corpus) -> bool:
    try:
        array = np.asarray(corpus.query, dtype=np.float64)
    except (TypeError, ValueError):
        return True
    return not (
        array.ndim == 1
        and array.shape[0] > 0
        and bool(np.isfinite(array).all())
        and bool(np.any(array != 0))
    )


def seed_error(corpus: Corpus, seeds: Sequence[Any]) -> set[type[ScarError]]:
    """The errors a bad seed may raise (any one of them is acceptable), or an empty set."""
    errors: set[type[ScarError]] = set()
    for seed in seeds:
        if not isinstance(seed, str):
            errors.add(InvalidVectorError)
        elif seed not in corpus.vectors:
            errors.add(MissingVectorError)
        elif not usable_vector(corpus.vectors[seed], corpus.dimension):
            errors.add(InvalidVectorError)
    return errors


def assert_plain_invariants(
    corpus: Corpus, seeds: Sequence[str], result: Any, window: int, direction: str
) -> None:
    """Every seed kept, in order; no duplicate; inside the links' reach; usable; one document."""
    unique_seeds = list(dict.fromkeys(seeds))
    assert result.seed_ids == unique_seeds
    output = result.chunk_ids
    assert len(output) == len(set(output))
    links = effective_links(corpus)
    assert set(output) <= reachable(unique_seeds, links, window, direction)
    documents = documents_known(corpus)
    for chunk in result.selected:
        assert math.isfinite(chunk.score), chunk
        if chunk.origin == "seed":
            continue
        decision = chunk.decision
        assert decision is not None
        assert decision.accepted
        assert decision.score > decision.threshold
        assert 1 <= decision.distance <= window
        assert corpus.usable(chunk.chunk_id)
        pair = links.get(decision.via_id)
        side = 0 if decision.direction == "previous" else 1
        assert link_target(pair[side], decision.via_id) == chunk.chunk_id
        via_document = documents.get(decision.via_id)
        own_document = documents.get(chunk.chunk_id)
        assert via_document is None or own_document is None or via_document == own_document
    for decision in result.decisions:
        assert math.isfinite(decision.score)
        assert math.isfinite(decision.threshold)
    for skipped in result.skipped:
        assert not corpus.usable(skipped.neighbor_id)


def expected_errors(corpus: Corpus, seeds: Sequence[Any]) -> set[type[ScarError]]:
    """Every error SCAR may raise for this case (several problems: any of theirs), or none."""
    errors: set[type[ScarError]] = set()
    construction = construction_error(corpus)
    if construction is not None:
        errors.add(construction)
    if query_is_bad(corpus):
        errors.add(InvalidVectorError)
    elif not errors:
        errors |= seed_error(corpus, seeds)
    return errors


def plain_settings(corpus: Corpus) -> tuple[ScarSettings, bool]:
    knob = corpus.knobs
    settings = ScarSettings(
        lambda_=knob["lambda_"],
        gamma=knob["gamma"],
        window=knob["window"],
        direction=knob["direction"],
    )
    return settings, knob["as_lookup"]


def expand_or_error(corpus: Corpus, settings: ScarSettings, as_lookup: bool) -> Any:
    try:
        neighbors = build_neighbors(corpus)
        return ScarPolicy(settings).expand(
            corpus.query, corpus.seeds, neighbors, vector_source(corpus, as_lookup)
        )
    except Exception as error:
        return error


# --------------------------------------------------------------------------------------------
# expand


@settings(
    max_examples=EXPAND_CASES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(corpus=corpora())
def expand_property(corpus: Corpus) -> None:
    count_case("core expand")
    settings, as_lookup = plain_settings(corpus)
    window, direction = settings.window, settings.direction
    with recorded_logs("scar_core") as logs:
        outcome = expand_or_error(corpus, settings, as_lookup)
    expected = expected_errors(corpus, corpus.seeds)
    if expected:
        assert isinstance(outcome, BaseException), f"must raise one of {expected}"
        check_documented_failure(outcome)
        assert type(outcome) in expected, (outcome, expected)
        return
    if isinstance(outcome, BaseException):
        raise outcome
    assert_plain_invariants(corpus, corpus.seeds, outcome, window, direction)
    # A neighbour with an unusable vector is skipped with a warning that names it.
    for skipped in outcome.skipped:
        if skipped.reason == "invalid_vector":
            assert any(
                repr(skipped.neighbor_id) in message and record.levelno == logging.WARNING
                for record, message in zip(logs.records, logs.messages, strict=True)
            ), skipped
    again = expand_or_error(corpus, settings, as_lookup)
    assert again == outcome


@pytest.mark.slow
def test_expand_survives_hostile_inputs() -> None:
    run_counted("core expand", expand_property, EXPAND_CASES)


def test_the_functional_form_agrees_with_the_policy() -> None:
    vectors = {"a": [1.0, 0.0], "b": [0.9, 0.1], "c": [math.nan, 1.0]}
    links = {"a": ("c", "b"), "b": ("a", "b"), "c": (None, "a")}
    by_function = expand([1.0, 0.0], ["a", "a"], links, vectors, 0.1, 0.8, 2)
    by_policy = ScarPolicy(ScarSettings(0.1, 0.8, 2)).expand([1.0, 0.0], ["a"], links, vectors)
    assert by_function == by_policy
    assert by_function.chunk_ids == ["a", "b"]
    assert [s.neighbor_id for s in by_function.skipped] == ["c"]


# --------------------------------------------------------------------------------------------
# expand_batch


@st.composite
def batches(draw: st.DrawFn) -> tuple[Corpus, list[Any], list[list[Any]]]:
    corpus = draw(corpora())
    rng = np.random.default_rng(draw(st.integers(0, 2**64 - 1)))
    queries = [corpus.query]
    seed_lists = [corpus.seeds]
    for _ in range(draw(st.integers(0, 3))):
        kind = pick(rng, ("good",) * 20 + ("nan", "zero"))
        queries.append(make_vector(rng, corpus.dimension, kind))
        pool = [*corpus.ids, "unknown-seed"]
        seed_lists.append([pick(rng, pool) for _ in range(int(rng.integers(0, 6)))])
    return corpus, queries, seed_lists


@settings(
    max_examples=BATCH_CASES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(batch=batches())
def expand_batch_property(batch: tuple[Corpus, list[Any], list[list[Any]]]) -> None:
    count_case("core expand_batch")
    corpus, queries, seed_lists = batch
    settings, as_lookup = plain_settings(corpus)
    window, direction = settings.window, settings.direction
    try:
        outcome: Any = expand_batch(
            queries, seed_lists, build_neighbors(corpus), vector_source(corpus, as_lookup), settings
        )
    except Exception as error:
        outcome = error
    # One expand per query gives the reference: the batch must fail exactly when one of them
    # fails, and otherwise give the same results.
    singles: list[Any] = []
    for query, seeds in zip(queries, seed_lists, strict=True):
        single = Corpus(**{**corpus.__dict__, "query": query, "seeds": seeds})
        singles.append(expand_or_error(single, settings, as_lookup))
    if any(isinstance(single, BaseException) for single in singles):
        assert isinstance(outcome, BaseException), "the batch hid a failing query"
        check_documented_failure(outcome)
        return
    if isinstance(outcome, BaseException):
        raise outcome
    assert outcome == singles
    for single_corpus_seeds, result in zip(seed_lists, outcome, strict=True):
        assert_plain_invariants(corpus, single_corpus_seeds, result, window, direction)


@pytest.mark.slow
def test_expand_batch_equals_one_expand_per_query() -> None:
    run_counted("core expand_batch", expand_batch_property, BATCH_CASES)


# --------------------------------------------------------------------------------------------
# select_within_budget


class LazyLinks:
    """A :class:`scar_core.graph.LinkLookup` that answers from a NeighborGraph, one step at a time."""

    def __init__(self, graph: NeighborGraph) -> None:
        self.graph = graph
        self.steps = 0

    def step(self, chunk_id: str, direction: Any) -> str | None:
        self.steps += 1
        return self.graph.step(chunk_id, direction)


@settings(
    max_examples=BUDGET_CASES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(corpus=corpora(odd_seeds=False))
def budget_property(corpus: Corpus) -> None:
    count_case("core select_within_budget")
    knob = corpus.knobs
    max_chunks, min_seeds, window = knob["max_chunks"], knob["min_seeds"], knob["budget_window"]
    max_tokens, use_tokens = knob["max_tokens"], knob["max_tokens"] is not None
    lazy, as_lookup = knob["lazy"], knob["as_lookup"]
    knobs = {
        "continuity_bonus": knob["bonus"],
        "lambda_": knob["lambda_"],
        "min_seeds": min_seeds,
        "window": window,
        "direction": knob["direction"],
        "max_tokens": max_tokens,
    }
    # A budget smaller than the seeds always kept is refused when the settings are built.
    if max_chunks < min_seeds:
        with pytest.raises(InvalidSettingsError, match=f"max_chunks={max_chunks} is smaller"):
            BudgetSettings(max_chunks=max_chunks, **knobs)
        return
    budget = BudgetSettings(max_chunks=max_chunks, **knobs)

    def run() -> Any:
        try:
            graph = build_neighbors(corpus)
            neighbors = LazyLinks(graph) if lazy and isinstance(graph, NeighborGraph) else graph
            return select_within_budget(
                corpus.query,
                corpus.seeds,
                neighbors,
                vector_source(corpus, as_lookup),
                budget,
                token_counts=corpus.tokens if use_tokens else None,
            )
        except Exception as error:
            return error

    outcome = run()
    ranked = list(dict.fromkeys(corpus.seeds))
    forced = ranked[:min_seeds]
    expected = expected_errors(corpus, forced)
    if expected:
        assert isinstance(outcome, BaseException), f"must raise one of {expected}"
        check_documented_failure(outcome)
        assert type(outcome) in expected, (outcome, expected)
        return
    if isinstance(outcome, BaseException):
        raise outcome
    output = outcome.chunk_ids
    # The budget holds, the kept seeds are all there, nothing twice, every chunk usable.
    assert len(output) <= max_chunks
    assert len(output) == len(set(output))
    assert outcome.seed_ids[: len(forced)] == forced
    assert set(outcome.seed_ids) <= set(ranked)
    for chunk_id in output:
        assert corpus.usable(chunk_id), chunk_id
    links = effective_links(corpus)
    documents = documents_known(corpus)
    selected_before: set[str] = set(forced)
    for chunk in outcome.selected:
        assert math.isfinite(chunk.score)
        if chunk.origin == "seed":
            selected_before.add(chunk.chunk_id)
            continue
        decision = chunk.decision
        assert decision is not None
        assert decision.accepted
        assert decision.via_id in selected_before
        pair = links.get(decision.via_id)
        side = 0 if decision.direction == "previous" else 1
        assert link_target(pair[side], decision.via_id) == chunk.chunk_id
        assert window is None or decision.distance <= window
        via_document = documents.get(decision.via_id)
        own_document = documents.get(chunk.chunk_id)
        assert via_document is None or own_document is None or via_document == own_document
        selected_before.add(chunk.chunk_id)
    if use_tokens:
        spent = sum(corpus.tokens[c] for c in output)
        forced_tokens = sum(corpus.tokens[c] for c in forced)
        if forced_tokens <= max_tokens:
            assert spent <= max_tokens
        else:
            assert output == forced
    elif len(output) < max_chunks:
        # A slot was left empty only because no usable retrieved chunk was left to fill it.
        assert all(c in output for c in ranked if corpus.usable(c))
    again = run()
    assert again == outcome


@pytest.mark.slow
def test_budgeted_selection_survives_hostile_inputs() -> None:
    run_counted("core select_within_budget", budget_property, BUDGET_CASES)


@pytest.mark.parametrize("scale", [1e-200, 1e-20, 1e20, 1e200])
def test_vectors_of_any_finite_scale_give_the_same_decisions(scale: float) -> None:
    # The contract says "any scale": a huge or tiny but finite vector is a valid vector.
    vectors = {"a": np.array([1.0, 0.2]), "b": np.array([0.9, 0.3]), "c": np.array([-1.0, 0.5])}
    links = {"a": ("c", "b")}
    reference = expand([1.0, 0.0], ["a"], links, vectors, 0.1, 0.5)
    scaled = {chunk_id: v * scale for chunk_id, v in vectors.items()}
    result = expand(np.array([1.0, 0.0]) * scale, ["a"], links, scaled, 0.1, 0.5)
    assert result.chunk_ids == reference.chunk_ids == ["a", "b"]
    np.testing.assert_allclose(
        [d.score for d in result.decisions], [d.score for d in reference.decisions]
    )
    budget = BudgetSettings(max_chunks=2, continuity_bonus=0.2)
    picked = select_within_budget(np.array([1.0, 0.0]) * scale, ["a"], links, scaled, budget)
    assert picked.chunk_ids == ["a", "b"]
