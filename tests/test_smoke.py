import numpy as np

from scar_core import expand


def test_expand_accepts_a_continuing_neighbour_and_refuses_an_unrelated_one() -> None:
    vectors = {"a": np.array([1.0, 0.0]), "b": np.array([0.9, 0.1]), "c": np.array([0.0, 1.0])}
    result = expand(
        np.array([1.0, 0.0]), ["a"], {"a": (None, "b"), "b": ("a", "c")}, vectors, window=2
    )
    assert result.chunk_ids == ["a", "b"]
    assert [d.neighbor_id for d in result.decisions] == ["b", "c"]
