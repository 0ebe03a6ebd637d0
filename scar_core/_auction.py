"""The exact solver of the budget auction: one dynamic programme over the candidates.

:func:`scar_core._selection.budget_select` lays the candidates end to end, chain after chain, as a
:class:`Line` (each chunk's bid, its pair bid with the chunk before it, its weight, whether it is a
hit and whether it must be taken), and :class:`CountAuction` (a budget in chunks) or
:class:`TokenAuction` (a budget in tokens) finds the set with the highest total bid.

The programme walks the candidates chain after chain; each chunk ``x`` is in one
of three states, reached from the state of the chunk before it (``pair`` is ``alpha - lambda_ * b``
with it, counted only inside a chain; at a chain's start, "from" means "after closing the run"):

============  ===============================  =============================================
state         meaning                          from, adding
============  ===============================  =============================================
``OUT``       not taken                        ``OUT`` or ``ANCHORED``, 0 (never ``OPEN``: a
                                               run must hold a hit; a forced hit is never OUT)
``OPEN``      taken, its run holds no hit yet  ``OUT``: ``v(x)``; ``OPEN``: ``v(x) + pair``
                                               (only if ``x`` is not a hit)
``ANCHORED``  taken, its run holds a hit       ``OUT``: ``v(x)`` if ``x`` is a hit; ``OPEN``:
                                               ``v(x) + pair`` if it is; ``ANCHORED``:
                                               ``v(x) + pair``
============  ===============================  =============================================

Each state's best total is kept for every weight taken so far (a chunk weighs 1, or its tokens),
as a numpy vector; the answer is the best ``OUT`` or ``ANCHORED`` total at weight ``k`` (or at
most ``max_tokens``). A second pass from the other end gives each decision's flip threshold.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

_NONE = -math.inf
#: What a neighbour taken on a tie clears its bar by.
_TIE = 1e-12
#: Along the candidates: the chunk is not taken / taken in a run without a hit yet / taken, in a
#: run that holds one.
_OUT, _OPEN, _ANCHORED = 0, 1, 2
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Line:
    """The candidates as one line, chain after chain, with what the auction needs of each.

    ``joins[p]`` is the pair bid between chunk ``p - 1`` and chunk ``p`` (0 where ``p`` starts a
    chain: a run never crosses a chain's edge); ``weights`` are 1 (a budget in chunks) or tokens.
    """

    ids: list[str]
    values: list[float]
    joins: list[float]
    weights: list[int]
    hits: list[bool]
    forced: list[bool]
    starts: list[bool]

    def reversed(self) -> Line:
        """The same line read from its end: chains and runs are the same, joins move by one."""
        n = len(self.ids)
        ends = self.ends()
        joins = [0.0 if ends[p] else self.joins[p + 1] for p in range(n)]
        return Line(self.ids[::-1], self.values[::-1], joins[::-1], self.weights[::-1],
                     self.hits[::-1], self.forced[::-1], ends[::-1])  # fmt: skip

    def ends(self) -> list[bool]:
        """Whether each chunk ends its chain."""
        n = len(self.ids)
        return [p == n - 1 or self.starts[p + 1] for p in range(n)]

    def bids(self) -> FloatArray:
        """``bids[p][before][after]``: what chunk ``p`` adds, by the states before it and its own.

        ``-inf`` where the move is not allowed.
        Leaving it closes the run before, which must then hold a hit; taking it joins the run
        before unless ``p`` starts a chain (then the run before closes, and it opens one); a run
        that takes a hit holds one from then on. A forced chunk cannot be left.
        """
        value = np.asarray(self.values, dtype=np.float64)
        joined = value + np.asarray(self.joins, dtype=np.float64)
        start = np.asarray(self.starts, dtype=bool)
        hit = np.asarray(self.hits, dtype=bool)
        leave = np.where(np.asarray(self.forced, dtype=bool), _NONE, 0.0)
        after_open = np.where(start, _NONE, joined)
        after_held = np.where(start, value, joined)
        anchors = hit | ~start
        table = np.full((len(value), 3, 3), _NONE)
        table[:, _OUT, _OUT] = leave
        table[:, _OUT, _OPEN] = np.where(hit, _NONE, value)
        table[:, _OUT, _ANCHORED] = np.where(hit, value, _NONE)
        table[:, _OPEN, _OPEN] = np.where(hit, _NONE, after_open)
        table[:, _OPEN, _ANCHORED] = np.where(hit, after_open, _NONE)
        table[:, _ANCHORED, _OUT] = leave
        table[:, _ANCHORED, _OPEN] = np.where(anchors, _NONE, value)
        table[:, _ANCHORED, _ANCHORED] = np.where(anchors, after_held, _NONE)
        return table


def flip_gains(auction: CountAuction | TokenAuction, line: Line) -> dict[str, float]:
    """What taking each neighbour is worth to the best total: > 0 if taken, <= 0 if not.

    It is the best total less the best total with the verdict reversed (taken: without it; left:
    with it), signed, so that ``S > S - gain`` exactly when the neighbour is taken.
    """
    flipped = auction.flipped()
    gains: dict[str, float] = {}
    for p, best in flipped.items():
        loss = max(auction.total - best, 0.0)  # the best total is the best: never < 0
        chunk_id = line.ids[p]
        if chunk_id in auction.picked:  # a tie keeps it: it must clear its bar, if only just
            gains[chunk_id] = loss or _TIE
        else:
            gains[chunk_id] = -loss
    return gains


class CountAuction:
    """The best set of exactly as many candidates as can be taken, up to ``capacity``.

    The line and its reverse (for the flip thresholds) are swept in one pass, each step a handful
    of numpy calls on arrays of ``2 x 3 x 3 x (capacity + 1)``.
    """

    def __init__(self, line: Line, capacity: int) -> None:
        self.line, n, size = line, len(line.ids), capacity + 1
        bids = np.stack([line.bids(), line.reversed().bids()], axis=1)  # (n, 2, 3, 3)
        stay, take = bids[:, :, :, :1, None], bids[:, :, :, 1:, None]  # to OUT; to OPEN, ANCHORED
        # Column c holds count c - 1; column 0 is always -inf, so reading one column to the left
        # is taking a chunk.
        totals = np.full((n + 1, 2, 3, 1, size + 1), _NONE)
        totals[0, :, _OUT, 0, 1] = 0.0
        staying, taking = np.empty((2, 3, 1, size)), np.empty((2, 3, 2, size))
        biggest = np.maximum.reduce
        for p in range(n):
            np.add(totals[p, :, :, :, 1:], stay[p], out=staying)
            np.add(totals[p, :, :, :, :-1], take[p], out=taking)
            following = totals[p + 1]
            biggest(staying, axis=1, out=following[:, 0, :, 1:])
            biggest(taking, axis=1, out=following[:, 1:, 0, 1:])
        totals = totals[:, :, :, 0, 1:]
        self.forward, self.backward, self.bids = totals[:, 0], totals[:, 1], bids[:, 0]
        final = np.maximum(self.forward[n, _OUT], self.forward[n, _ANCHORED])
        #: The count of the best set: the most that can be taken.
        self.target = int(np.flatnonzero(final > _NONE)[-1])
        self.total = float(final[self.target])
        self.picked = self._trace(n)

    def _trace(self, n: int) -> set[str]:
        """Walk the best way back; ties go to the state first in ``OUT, OPEN, ANCHORED``."""
        count, forward, picked = self.target, self.forward, set()
        state = _ANCHORED if forward[n, _ANCHORED, count] > forward[n, _OUT, count] else _OUT
        # The additions are the sweep's, in plain floats: the same sums to the last bit. Only
        # the cells on the way back are read (a whole table as lists would grow as k squared).
        for p in range(n - 1, -1, -1):
            before = count - (state != _OUT)
            reached = float(forward[p + 1, state, count])
            if state != _OUT:
                picked.add(self.line.ids[p])
            row, bid = forward[p, :, before].tolist(), self.bids[p, :, state].tolist()
            state = next(b for b in range(3) if row[b] + bid[b] == reached)
            count = before
        return picked

    def flipped(self) -> dict[int, float]:
        """For each neighbour's position, the best total with its verdict reversed.

        Neighbours are taken in blocks, so that the arrays stay small whatever ``k``.
        """
        line, n = self.line, len(self.line.ids)
        at = np.array([p for p in range(n) if not line.hits[p]], dtype=np.int64)
        starts = np.asarray(line.starts, dtype=bool)
        ends = np.asarray(line.ends(), dtype=bool)
        joins = np.asarray([*line.joins, 0.0], dtype=np.float64)
        values = np.asarray(line.values, dtype=np.float64)
        taken = np.array([line.ids[p] in self.picked for p in at.tolist()], dtype=bool)
        size, flipped = self.target + 1, dict[int, float]()
        for block in range(0, at.size, _BLOCK):
            part, full = at[block : block + _BLOCK], taken[block : block + _BLOCK]
            left, right = self.forward[part, :, :size], self.backward[n - 1 - part, :, :size]
            first, last = starts[part, None], ends[part, None]
            join, join_after = joins[part, None], joins[part + 1, None]
            closed_left = np.maximum(left[:, _OUT], left[:, _ANCHORED])
            closed_right = np.maximum(right[:, _OUT], right[:, _ANCHORED])
            opens = np.where(first, _NONE, left[:, _OPEN] + join)
            holds = np.where(first, _NONE, left[:, _ANCHORED] + join)
            goes_on = np.where(last, _NONE, right[:, _OPEN] + join_after)
            holds_after = np.where(last, _NONE, right[:, _ANCHORED] + join_after)
            fresh = np.where(first, closed_left, left[:, _OUT])
            stops = np.where(last, closed_right, right[:, _OUT])
            without = _diagonal_max(closed_left, closed_right, full)
            with_it = values[part] + np.maximum(
                _diagonal_max(holds, np.maximum(np.maximum(stops, goes_on), holds_after), full),
                _diagonal_max(np.maximum(fresh, opens), holds_after, full),
            )
            found = np.where(full, without, with_it)
            flipped.update(zip(part.tolist(), found.tolist(), strict=True))
        return flipped


#: Neighbours whose flipped totals are worked out together.
_BLOCK = 128


def _diagonal_max(left: FloatArray, right: FloatArray, full: npt.NDArray[np.bool_]) -> FloatArray:
    """Row by row, the best ``left[i, a] + right[i, room - a]``.

    ``room`` is the last column where ``full[i]``, else the one before it (``-inf`` where no
    column is left).
    """
    backwards = right[:, ::-1]
    sums = np.where(full[:, None], left + backwards, _NONE)
    if left.shape[1] > 1:  # room one less: right's columns one further along
        short = left[:, :-1] + backwards[:, 1:]
        sums[:, :-1] = np.where(full[:, None], sums[:, :-1], short)
    result: FloatArray = sums.max(axis=1)
    return result


class _Front(NamedTuple):
    """The Pareto front of one state: weights never falling, totals strictly rising with them."""

    weights: IntArray
    totals: FloatArray


class _Fronts(NamedTuple):
    """The six fronts after one step, end to end: forward ``OUT, OPEN, ANCHORED``, then backward.

    ``bounds[g]:bounds[g + 1]`` is front ``g`` (``3 * direction + state``); ``origin`` is each
    point's index in the step before, which the forward trace follows back.
    """

    weights: IntArray
    totals: FloatArray
    bounds: IntArray
    origin: IntArray

    def front(self, direction: int, state: int) -> _Front:
        low, high = self.bounds[3 * direction + state : 3 * direction + state + 2].tolist()
        return _Front(self.weights[low:high], self.totals[low:high])


# Step by step, each of the 18 moves is (direction, state after, state before), in that order:
# the moves into one front come in the order of the states they leave.
_MOVES = np.arange(18)
_FROM = _MOVES // 9 * 3 + _MOVES % 3  # the front a move leaves
_INTO = _MOVES // 3  # the front it reaches
_TAKES = (_MOVES // 3) % 3 != _OUT  # whether it takes the chunk (adds its weight)


def _sweep(bids: FloatArray, weights: IntArray, capacity: int) -> list[_Fronts]:
    """Both directions' fronts after every step: ``bids`` is ``(n, 2, 3, 3)``, ``weights`` ``(n, 2)``.

    One step is one batch of numpy calls for all six fronts: every allowed move from every
    point, sorted by front then weight (stably, so a tie keeps the order of the states left), and
    in each front only the points that beat every lighter one, the best of each weight: at most
    ``capacity + 1``.
    """
    n, size = len(bids), capacity + 1
    move_bids = bids.transpose(0, 1, 3, 2).reshape(n, 18)  # [p, move]
    allowed = move_bids > _NONE
    added = np.where(_TAKES, weights[:, _INTO // 3], 0)  # [p, move]
    ceiling = 6 * size  # a key past every front: points over the capacity sort last
    steps = [_Fronts(np.zeros(2, dtype=np.int64), np.zeros(2), np.array([0, 1, 1, 1, 2, 2, 2]),
                     np.zeros(2, dtype=np.int64))]  # fmt: skip
    for p in range(n):
        before = steps[-1]
        counts = np.where(allowed[p], np.diff(before.bounds)[_FROM], 0)
        ends = np.cumsum(counts)
        origin = np.repeat(before.bounds[_FROM] - ends + counts, counts) + np.arange(ends[-1])
        weight = before.weights[origin] + np.repeat(added[p], counts)
        total = before.totals[origin] + np.repeat(move_bids[p], counts)
        key = np.where(weight < size, np.repeat(_INTO * size, counts) + weight, ceiling)
        order = np.argsort(key, kind="stable")
        key = key[order]
        bounds = np.searchsorted(key, np.arange(7) * size)
        order = order[: bounds[-1]]
        total = total[order]
        best = np.empty_like(total)
        for low, high in itertools.pairwise(bounds.tolist()):
            if high > low:
                np.maximum.accumulate(total[low:high], out=best[low:high])
        rises = np.empty(total.size, dtype=bool)
        np.greater(best[1:], best[:-1], out=rises[1:])
        rises[bounds[:-1][bounds[:-1] < total.size]] = True
        kept = np.flatnonzero(rises)
        last = np.ones(kept.size, dtype=bool)  # of the points kept at one weight, the best
        np.not_equal(key[kept[1:]], key[kept[:-1]], out=last[:-1])
        kept = kept[last]
        steps.append(_Fronts(weight[order[kept]], total[kept], np.searchsorted(kept, bounds),
                             origin[order[kept]]))  # fmt: skip
    return steps


class TokenAuction:
    """The best set of candidates whose weights (tokens) fit ``capacity``.

    The same programme as :class:`CountAuction`, but each state keeps only its Pareto front of
    (tokens taken, best total): a lighter way to a state that is no worse makes a heavier one
    useless, whatever follows. A front holds at most one point a weight, ``capacity + 1`` at
    most, and :func:`scar_core._selection.budget_select` keeps ``capacity`` within
    ``TOKEN_GRID`` by weighing tokens in units past it. The line and its reverse (for the flip
    thresholds) are swept together, one batch of numpy calls a step.
    """

    def __init__(self, line: Line, capacity: int) -> None:
        self.line, self.capacity, n = line, capacity, len(line.ids)
        bids = np.stack([line.bids(), line.reversed().bids()], axis=1)
        weights = np.asarray(line.weights, dtype=np.int64).reshape(n, 1)
        self._steps = _sweep(bids, np.hstack([weights, weights[::-1]]), capacity)
        ends = [self._steps[n].front(0, s) for s in (_OUT, _ANCHORED)]
        best = [(float(f.totals[-1]), -int(f.weights[-1]), -s) if f.weights.size else
                (_NONE, 0, -s) for s, f in zip((_OUT, _ANCHORED), ends, strict=True)]  # fmt: skip
        self.total, _, negated = max(best)
        at = int(self._steps[n].bounds[1 - negated]) - 1  # the best end state's last point
        self.picked: set[str] = set()
        for p in range(n, 0, -1):
            fronts = self._steps[p]
            if int(np.searchsorted(fronts.bounds, at, side="right")) - 1 != _OUT:
                self.picked.add(line.ids[p - 1])
            at = int(fronts.origin[at])

    def flipped(self) -> dict[int, float]:
        """For each neighbour's position, the best total with its verdict reversed."""
        line, n, result = self.line, len(self.line.ids), {}
        ends = line.ends()
        for p in (p for p in range(n) if not line.hits[p]):
            left = [self._steps[p].front(0, s) for s in range(3)]
            right = [self._steps[n - 1 - p].front(1, s) for s in range(3)]
            after = 0.0 if ends[p] else line.joins[p + 1]
            closed_left = [(left[_OUT], 0.0), (left[_ANCHORED], 0.0)]
            closed_right = [(right[_OUT], 0.0), (right[_ANCHORED], 0.0)]
            if line.ids[p] in self.picked:
                result[p] = _front_max(closed_left, closed_right, self.capacity)
                continue
            holds = [] if line.starts[p] else [(left[_ANCHORED], line.joins[p])]
            opens = [] if line.starts[p] else [(left[_OPEN], line.joins[p])]
            fresh = closed_left if line.starts[p] else [(left[_OUT], 0.0)]
            stops = closed_right if ends[p] else [(right[_OUT], 0.0)]
            holds_after = [] if ends[p] else [(right[_ANCHORED], after)]
            goes_on = [] if ends[p] else [(right[_OPEN], after)]
            room = self.capacity - line.weights[p]
            result[p] = line.values[p] + max(
                _front_max(holds, stops + goes_on + holds_after, room),
                _front_max(fresh + opens, holds_after, room),
            )
        return result


def _front_max(
    left: Sequence[tuple[_Front, float]], right: Sequence[tuple[_Front, float]], room: int
) -> float:
    """The best ``a + x + b + y``, ``a`` of a left front, ``b`` of a right one, weights <= ``room``.

    ``x`` and ``y`` are what each front's points are raised by.
    """
    best = _NONE
    if room < 0:
        return best
    for front, extra in left:
        if not front.weights.size:
            continue
        for other, more in right:
            if not other.weights.size:
                continue
            at = np.searchsorted(other.weights, room - front.weights, side="right") - 1
            fits = at >= 0
            if fits.any():
                sums = (front.totals[fits] + extra) + (other.totals[at[fits]] + more)
                best = max(best, float(sums.max()))
    return best
