"""Distinct retrieved chunks keep distinct identities, whatever ids the first stage gives them."""

from __future__ import annotations

import numpy as np

from scar_core.driver import QueryDriver, distinct_ids
from scar_core.query import Found, ScarQuery
from scar_core.selection import Chunk
from scar_core.settings import BudgetSettings, ScarSettings


def test_a_real_id_shaped_like_a_made_up_one_swallows_no_hit() -> None:
    hits = [("scar-hit-1", "a"), (None, "b"), ("x", "c"), ("x", "d")]
    ids = distinct_ids(hits)
    assert len(set(ids)) == 4
    assert ids[0] == "scar-hit-1"
    assert ids[2] == "x"


def test_made_up_ids_are_never_read_but_real_ids_with_the_prefix_are() -> None:
    query = np.array([1.0, 0.0])
    real = Chunk("scar-hit-7", None, None, "n")  # a real chunk whose id has SCAR's prefix
    made_up = Chunk("scar-hit-1:made-up", None, None, None)
    driver = QueryDriver(query, [real, made_up], BudgetSettings(k=2), unstored=[made_up.id])
    assert driver.wanted() == ["scar-hit-7", "n"]


def test_three_distinct_hits_come_back_three() -> None:
    vectors = [np.array([1.0, 0.1 * i]) for i in range(3)]
    hits = [
        Found("scar-hit-1", "first", vectors[0], None, "n1", True, {}, "first text"),
        Found(None, "second", vectors[1], None, None, False, {}, "second text"),
        Found("c", "third", vectors[2], None, None, False, {}, "third text"),
    ]
    query = ScarQuery([1.0, 0.0], hits, ScarSettings(), k=3)
    while query.wanted():
        query.receive([])  # the neighbour n1 is missing from the store
    assert sorted(p.found.item for p in query.placed()) == ["first", "second", "third"]
