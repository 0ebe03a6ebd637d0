"""A tokenizer that is not a function, or that fails, gets SCAR's own error naming it."""

from __future__ import annotations

import numpy as np
import pytest

from scar_core._chunks import Chunk
from scar_core._driver import QueryDriver
from scar_core._errors import InvalidSettingsError
from scar_core._settings import ScarSettings


def test_a_tokenizer_named_by_its_encoding_is_told_to_be_a_function() -> None:
    with pytest.raises(InvalidSettingsError, match="tokenizer='cl100k_base' is a str, not a func"):
        ScarSettings(max_tokens=1000, tokenizer="cl100k_base")  # type: ignore[arg-type]


def test_a_tokenizer_without_a_token_budget_is_told_to_add_one() -> None:
    with pytest.raises(InvalidSettingsError, match="pass max_tokens too"):
        ScarSettings(tokenizer=len)


def _failing_tokenizer(text: str) -> int:
    raise UnicodeError("cannot encode this text")


def test_a_tokenizer_that_raises_is_wrapped_and_named() -> None:
    hits = [
        Chunk("a", np.array([1.0, 0.0]), None, "b", True, "first"),
        Chunk("b", np.array([0.9, 0.1]), "a", None, True, "second"),
    ]
    settings = ScarSettings(max_tokens=10, tokenizer=_failing_tokenizer)
    query = QueryDriver.for_adapter([1.0, 0.0], hits, settings, 2)
    while query.wanted():
        query.receive([])
    with pytest.raises(
        InvalidSettingsError, match=r"_failing_tokenizer.*raised UnicodeError"
    ) as info:
        query.returned()
    assert isinstance(info.value.__cause__, UnicodeError)
