"""SCAR's two selections over chunks in memory: the paper's rule and the budget auction.

Both take the query vector, the hit ids best first and every chunk they may look at; neither
reads from a store (:class:`scar_core._driver.QueryDriver` does the reading). docs/method.md
states both rules. A chunk without a usable vector is never scored: as a neighbour it ends the
walk and is listed in :attr:`Selection.unscored`; as a hit it keeps its rank (bidding like the
hit above it) but grows no passage.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence

import numpy.typing as npt

from scar_core._auction import CountAuction, Line, TokenAuction, flip_gains
from scar_core._chunks import (
    Chunk,
    Decision,
    Scored,
    Selected,
    Selection,
    Step,
    hit_relevance,
    passages,
    runs,
    step_out,
    steps,
)
from scar_core._errors import InvalidSettingsError
from scar_core._scoring import (
    boundary_penalty,
    expansion_score,
    paper_threshold,
    query_continuity_bonus,
    unit_vector,
)
from scar_core._settings import TOKEN_GRID, BudgetSettings, PaperSettings, auction_limit


def paper_expand(
    query: npt.ArrayLike,
    hits: Sequence[str],
    chunks: Mapping[str, Chunk],
    settings: PaperSettings,
) -> Selection:
    """Apply the paper's rule to the first ``settings.k`` hits.

    Seeds are walked best first, up to ``window`` steps in each allowed direction, passing
    through chunks already selected; a neighbour ``n`` is accepted when
    ``S > gamma * cos(q, seed)``, ``S`` measured across the boundary with the chunk before it on
    the walk, and a rejection ends the walk that way, so a passage has no holes.

    Args:
        query: The query embedding, any scale.
        hits: Retrieved chunk ids, best first.
        chunks: Every chunk the walks may reach, with vectors and links.
        settings: λ, γ, window and direction.

    Returns:
        The seeds plus the accepted neighbours, with every decision.
    """
    return _paper(Scored(unit_vector(query), chunks), hits, chunks, settings)


def _paper(
    scored: Scored, hits: Sequence[str], chunks: Mapping[str, Chunk], settings: PaperSettings
) -> Selection:
    seeds = list(dict.fromkeys(hits))[: settings.k]
    bids = hit_relevance(seeds, scored)
    selected = {s: Selected(s, "hit", s, r, bids[r]) for r, s in enumerate(seeds)}
    decisions: list[Decision] = []
    unscored: list[str] = []
    for rank, seed in enumerate(seeds):
        if seed not in scored.units:
            continue
        threshold = paper_threshold(scored.relevance[seed], settings.gamma)
        for direction in steps(settings.direction):
            via = seed
            for distance in range(1, settings.window + 1):
                candidate = chunks[via].step(direction) if via in chunks else None
                if candidate is None or candidate == seed:
                    break
                if candidate in selected:
                    via = candidate
                    continue
                if candidate not in scored.units or via not in scored.units:
                    unscored.append(candidate)
                    break
                cosine = scored.boundary_cosine(via, candidate)
                relevance = scored.relevance[candidate]
                score = expansion_score(relevance, cosine, settings.lambda_)
                decision = Decision(
                    candidate, seed, via, direction, distance, relevance,
                    boundary_penalty(cosine), score, threshold, score > threshold,
                )  # fmt: skip
                decisions.append(decision)
                if not decision.accepted:
                    break
                selected[candidate] = Selected(candidate, "neighbor", seed, rank, score, decision)
                via = candidate
    picked = tuple(selected.values())
    return Selection(picked, passages(picked, chunks), tuple(decisions), tuple(unscored))


def budget_select(
    query: npt.ArrayLike,
    hits: Sequence[str],
    chunks: Mapping[str, Chunk],
    settings: BudgetSettings,
    tokens: Mapping[str, int] | None = None,
) -> Selection:
    """Choose exactly ``settings.k`` chunks (fewer only when fewer exist) by the segment auction.

    The candidates are the first ``k`` hits and every chunk within ``window`` steps of one. Among
    the sets of ``k`` candidates that hold the best ``keep`` hits and in which every passage holds
    a hit, the one with the highest total bid wins, found exactly (:mod:`scar_core._auction`):

    ``sum of cos(q, x) over its chunks + sum of (alpha - lambda_ * b) over its linked pairs``

    So a neighbour bids ``S + alpha``, and a run of neighbours bids as a whole against single
    hits. With ``settings.max_tokens`` the set's ``tokens`` must sum to at most ``max_tokens``
    instead; the best ``keep`` hits are kept as far as they fit together, in rank order, and the
    best hit even alone over the budget, so the result is never empty. Up to
    ``TOKEN_GRID`` (4096) tokens the set is exact; past it tokens are weighed in units of
    ``u = ceil(max_tokens / 4096)``, each chunk's count rounded up: the set still fits, and its
    total bid is at least that of any set that fits ``max_tokens`` with ``u - 1`` tokens to
    spare per chunk.

    Args:
        query: The query embedding, any scale.
        hits: Retrieved chunk ids, best first; only the first ``k`` are used.
        chunks: Every chunk within ``window`` steps of the hits, with vectors and links.
        settings: Budget, kept hits, continuity bonus, λ, window, direction, ``max_tokens``.
        tokens: With ``max_tokens``: each candidate's tokens (every chunk of ``chunks`` and every
            hit); ignored otherwise.

    Returns:
        The selection, with a decision for every neighbour that was a candidate.

    Raises:
        ValueError: With ``max_tokens``, if a candidate has no token count.
    """
    return _budget(Scored(unit_vector(query), chunks), hits, chunks, settings, tokens)


def _budget(
    scored: Scored,
    hits: Sequence[str],
    chunks: Mapping[str, Chunk],
    settings: BudgetSettings,
    tokens: Mapping[str, int] | None,
) -> Selection:
    ranked = list(dict.fromkeys(hits))[: settings.k]
    if len(ranked) > (limit := auction_limit(settings.max_tokens)):
        budget = "" if settings.max_tokens is None else f" with max_tokens={settings.max_tokens}"
        raise InvalidSettingsError(
            f"{len(ranked)} retrieved chunks are more than the budget auction weighs{budget}; the "
            f"limit is k <= {limit} (its time and memory grow as k squared). Lower k."
        )
    rank_of = {chunk_id: rank for rank, chunk_id in enumerate(ranked)}
    bids = hit_relevance(ranked, scored)
    candidates, reach, unscored = _candidates(ranked, chunks, scored, settings)
    value = {c: bids[rank_of[c]] if c in rank_of else scored.relevance[c] for c in candidates}
    chains = runs(candidates, chunks, {c for c in candidates if c in scored.units and c in chunks})
    linked = {edge: scored.boundary_cosine(*edge) for c in chains for edge in itertools.pairwise(c)}
    penalty = {edge: boundary_penalty(cosine) for edge, cosine in linked.items()}
    alpha = settings.continuity_bonus
    if alpha is None:
        scored_hits = [scored.relevance[c] for c in ranked if c in scored.relevance]
        alpha = query_continuity_bonus(scored_hits, list(penalty.values()))
    pair = {edge: alpha - settings.lambda_ * b for edge, b in penalty.items()}
    kept = ranked[: settings.kept]
    weight = dict.fromkeys(candidates, 1)
    capacity = min(settings.k, len(candidates))
    scale = dict.fromkeys(candidates, 1.0)  # what a chunk's bid is multiplied by
    if settings.max_tokens is not None:
        counts, weight, kept, room = _token_weights(candidates, tokens, kept, settings.max_tokens)
        capacity = min(room, sum(weight.values()))
        scale = _length_scales(counts)
        pair = {(a, b): bid * (scale[a] + scale[b]) / 2 for (a, b), bid in pair.items()}
    line = Line(
        [c for chain in chains for c in chain],
        [value[c] * scale[c] for chain in chains for c in chain],
        [pair[(chain[p - 1], c)] if p else 0.0 for chain in chains for p, c in enumerate(chain)],
        [weight[c] for chain in chains for c in chain],
        [c in rank_of for chain in chains for c in chain],
        [c in kept for chain in chains for c in chain],
        [p == 0 for chain in chains for p in range(len(chain))],
    )
    auction = (CountAuction if settings.max_tokens is None else TokenAuction)(line, capacity)
    picked = auction.picked
    gains = flip_gains(auction, line)
    lowest = -1.0 - 2.0 * settings.lambda_  # the lowest S there is

    taken = [c for c in ranked if c in picked]
    selected = {c: Selected(c, "hit", c, rank_of[c], bids[rank_of[c]]) for c in taken}
    decisions: list[Decision] = []
    for chain in chains:
        for position, chunk_id in enumerate(chain):
            if chunk_id in rank_of:
                continue
            seed, via, direction, distance = reach[chunk_id]
            if chunk_id in picked:  # its passage's nearest hit, which may not be the walk's
                seed, via, direction, distance = _nearest_hit(chain, position, rank_of, picked)
            known = linked.get((via, chunk_id), linked.get((chunk_id, via)))
            cosine = scored.boundary_cosine(via, chunk_id) if known is None else known
            score = expansion_score(scored.relevance[chunk_id], cosine, settings.lambda_)
            threshold = _threshold(score, gains[chunk_id], scale[chunk_id], lowest)
            decision = Decision(
                chunk_id, seed, via, direction, distance, scored.relevance[chunk_id],
                boundary_penalty(cosine), score, threshold, chunk_id in picked,
            )  # fmt: skip
            decisions.append(decision)
            if decision.accepted:
                selected[chunk_id] = Selected(
                    chunk_id, "neighbor", seed, rank_of[seed], score, decision
                )
    neighbours = sorted(
        (s for s in selected.values() if s.origin == "neighbor"),
        key=lambda s: (s.seed_rank, s.decision.distance if s.decision else 0, s.chunk_id),
    )
    chosen = tuple([selected[c] for c in taken] + neighbours)
    return Selection(chosen, passages(chosen, chunks), tuple(decisions), tuple(unscored), alpha)


def fill_in_order(counts: Iterable[int], limit: int) -> int:
    """Return how many of the first ``counts`` fit ``limit`` together.

    Stops at the first that does not fit (reading no further, so ``counts`` may be lazy); at
    least 1 when there are any: the first is taken even alone over the limit.
    """
    total = taken = 0
    for taken, count in enumerate(counts, 1):
        total += count
        if total > limit:
            return max(taken - 1, 1)
    return taken


def _length_scales(weight: Mapping[str, int]) -> dict[str, float]:
    """Each candidate's tokens over the mean: a longer chunk brings more text, so bids more.

    Dividing by the mean keeps bids in a chunk budget's units, where the bonus is set.
    """
    mean = sum(weight.values()) / len(weight) if weight else 0.0
    return {c: (w / mean if mean > 0 else 1.0) for c, w in weight.items()}


def _threshold(score: float, gain: float, scale: float, lowest: float) -> float:
    """The score at which a neighbour's verdict flips, all else equal, within ``S``'s range."""
    if scale > 0:
        return min(max(score - gain / scale, lowest), 1.0)
    return lowest if gain > 0 else 1.0


def _token_weights(
    candidates: Sequence[str],
    tokens: Mapping[str, int] | None,
    kept: Sequence[str],
    limit: int,
) -> tuple[dict[str, int], dict[str, int], list[str], int]:
    """Each candidate's tokens; its weight and the room in the auction; the kept hits that fit.

    The auction weighs tokens in units of ``ceil(limit / TOKEN_GRID)`` (1 up to ``TOKEN_GRID``
    tokens), each count rounded up, so that the answer fits ``limit`` and no front outgrows the
    grid. The kept hits are kept as far as they fit, in rank order; the best hit always is, its
    weight capped at the room.
    """
    counts: dict[str, int] = {}
    for chunk_id in candidates:
        count = (tokens or {}).get(chunk_id)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ValueError(
                f"max_tokens is set, but the token count of chunk {chunk_id!r} is {count!r}; "
                "pass tokens={chunk id: integer >= 0} for every chunk within reach of the hits."
            )
        counts[chunk_id] = count
    unit = -(-limit // TOKEN_GRID)
    weight, room = {c: -(-count // unit) for c, count in counts.items()}, limit // unit
    kept = list(kept[: fill_in_order([weight[c] for c in kept], room)])
    if kept:
        counts[kept[0]], weight[kept[0]] = min(counts[kept[0]], limit), min(weight[kept[0]], room)
    return counts, weight, kept, room


#: How the walk first reached a neighbour: its retrieved chunk, the chunk beside it, the step.
_Reach = tuple[str, str, Step, int]


def _candidates(
    ranked: Sequence[str],
    chunks: Mapping[str, Chunk],
    scored: Scored,
    settings: BudgetSettings,
) -> tuple[list[str], dict[str, _Reach], list[str]]:
    """The hits, the scored chunks within ``window`` steps (with how each was reached), the rest."""
    seen = set(ranked)
    reach: dict[str, _Reach] = {}
    unscored: list[str] = []
    seed_of = {c: c for c in ranked if c in scored.units and c in chunks}
    for step in range(1, settings.window + 1):
        reached: dict[str, str] = {}
        for target, via, direction in step_out(seed_of, chunks, settings.direction, seen):
            if target not in scored.units or target not in chunks:
                unscored.append(target)
                continue
            reach[target] = (seed_of[via], via, direction, step)
            reached[target] = seed_of[via]
        seed_of = reached
    return [*ranked, *reach], reach, unscored


def _nearest_hit(
    chain: Sequence[str], position: int, rank_of: Mapping[str, int], picked: set[str]
) -> _Reach:
    """Where a chosen neighbour belongs: its passage's nearest hit (the better rank on a tie)."""
    found: list[tuple[int, int, int]] = []
    for side in (-1, 1):
        index = position + side
        while 0 <= index < len(chain) and chain[index] in picked:
            if chain[index] in rank_of:
                found.append((abs(index - position), rank_of[chain[index]], index))
                break
            index += side
    _, _, index = min(found)
    if index < position:
        return chain[index], chain[position - 1], "next", position - index
    return chain[index], chain[position + 1], "previous", index - position


def select(
    query: npt.ArrayLike,
    hits: Sequence[str],
    chunks: Mapping[str, Chunk],
    settings: BudgetSettings | PaperSettings,
    tokens: Mapping[str, int] | None = None,
) -> Selection:
    """Run the selection of ``settings``' mode: :func:`budget_select` or :func:`paper_expand`.

    ``tokens`` (each chunk's tokens) is needed by budget mode with ``max_tokens`` only.
    """
    return selected_by(Scored(unit_vector(query), chunks), hits, chunks, settings, tokens)


def selected_by(
    scored: Scored,
    hits: Sequence[str],
    chunks: Mapping[str, Chunk],
    settings: BudgetSettings | PaperSettings,
    tokens: Mapping[str, int] | None = None,
) -> Selection:
    if isinstance(settings, PaperSettings):
        return _paper(scored, hits, chunks, settings)
    return _budget(scored, hits, chunks, settings, tokens)
