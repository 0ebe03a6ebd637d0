"""Distinct retrieved chunks keep distinct identities, whatever ids the first stage gives them."""

from __future__ import annotations

import numpy as np

from scar_core._chunks import Chunk
from scar_core._driver import QueryDriver, distinct_ids
from scar_core._settings import BudgetSettings, ScarSettings


def test_a_real_id_shaped_like_a_made_up_one_swallows_no_hit() -> None:
    hits = [("scar-hit-1", "a"), (None, "b"), ("x", "c"), ("x", "d")]
    ids = distinct_ids(hits)
    assert len(set(ids)) == 4
    assert ids[0] == "scar-hit-1"
    assert ids[2] == "x"


def test_made_up_ids_are_never_read_but_real_ids_with_the_prefix_are() -> None:
    query = np.array([1.0, 0.0])
    real = Chunk("scar-hit-7", None, None, "n")  # a real chunk whose id has SCAR's prefix
    made_up = Chunk("", None, None, None)  # no id: the driver makes one up, and never reads it
    driver = QueryDriver(query, [real, made_up], BudgetSettings(k=2))
    assert driver.wanted() == ["scar-hit-7", "n"]


def test_three_distinct_hits_come_back_three() -> None:
    vectors = [np.array([1.0, 0.1 * i]) for i in range(3)]
    hits = [
        Chunk("scar-hit-1", vectors[0], None, "n1", True, "first text", item="first"),
        Chunk("", vectors[1], text="second text", item="second"),
        Chunk("c", vectors[2], text="third text", item="third"),
    ]
    query = QueryDriver.for_adapter([1.0, 0.0], hits, ScarSettings(), 3)
    while query.wanted():
        query.receive([])  # the neighbour n1 is missing from the store
    assert sorted(c.item for c, _ in query.returned()) == ["first", "second", "third"]
