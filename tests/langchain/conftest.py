"""Fixtures of the LangChain tests."""

from __future__ import annotations

import pytest
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import linked_store


@pytest.fixture
def store() -> InMemoryVectorStore:
    return linked_store()
