"""Chunk ids: the same for the same content, and bad arguments refused by name."""

from __future__ import annotations

import pytest

from scar_core import chunk_id_for


def test_the_same_content_gives_the_same_id_and_any_other_another() -> None:
    assert chunk_id_for("a.txt", "text", {"page": 1}) == chunk_id_for("a.txt", "text", {"page": 1})
    assert chunk_id_for("a.txt", "text", {"page": 1}) != chunk_id_for(
        "a.txt", "text", {"page": "1"}
    )
    assert chunk_id_for("a.txt", "text") != chunk_id_for("a.txt", "text", occurrence=1)


@pytest.mark.parametrize(("argument", "value"), [("occurrence", -1), ("occurrence", True)])
def test_an_occurrence_that_is_not_an_integer_of_zero_or_more_is_refused(
    argument: str, value: object
) -> None:
    with pytest.raises(ValueError, match=rf"{argument}={value!r} .*integer >= 0"):
        chunk_id_for("a.txt", "text", occurrence=value)  # type: ignore[arg-type]


def test_an_empty_document_id_is_refused() -> None:
    with pytest.raises(ValueError, match="document_id='' must be a non-empty string"):
        chunk_id_for("", "text")
