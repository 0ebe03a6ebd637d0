"""``max_tokens`` and ``tokenizer`` through both adapters, end to end (no adapter code of its own)."""

from __future__ import annotations

import asyncio
import re

import pytest

from scar_core._errors import InvalidSettingsError
from scar_core._settings import estimate_tokens
from test_adapter_core import CORPUS, lc_retriever, li_index, li_run


def uneven(text: str) -> int:
    """10, 30 or 50 tokens by the chunk's number, whatever else the text holds (metadata)."""
    match = re.search(r"chunk (\d+)", text)
    return 10 + 20 * (int(match[1]) % 3) if match else 10


def test_scar_retriever_takes_max_tokens_and_fits_them() -> None:
    retriever = lc_retriever(k=10, max_tokens=1000)
    for query in CORPUS.queries:
        documents = retriever.invoke(query)
        assert documents
        assert sum(estimate_tokens(d.page_content) for d in documents) <= 1000
        assert asyncio.run(retriever.ainvoke(query)) == documents
        tight = lc_retriever(k=10, max_tokens=40, tokenizer=uneven).invoke(query)
        assert sum(uneven(d.page_content) for d in tight) <= 40 or len(tight) == 1


def test_scar_node_postprocessor_takes_max_tokens_and_fits_them() -> None:
    index = li_index()
    for query in CORPUS.queries:
        nodes = li_run(index, query, 10, max_tokens=1000)
        assert nodes
        assert sum(estimate_tokens(n.node.get_content("embed")) for n in nodes) <= 1000
        tight = li_run(index, query, 10, max_tokens=40, tokenizer=uneven)
        assert sum(uneven(n.node.get_content()) for n in tight) <= 40 or len(tight) == 1


@pytest.mark.parametrize("limit", [30, 60, 120])
def test_both_adapters_choose_the_same_chunks_at_a_token_budget(limit: int) -> None:
    index = li_index()
    for query in CORPUS.queries:
        chosen = lc_retriever(k=8, max_tokens=limit, tokenizer=uneven).invoke(query)
        nodes = li_run(index, query, 8, max_tokens=limit, tokenizer=uneven)
        assert [d.id for d in chosen] == [n.node.node_id for n in nodes]


def test_a_token_budget_in_paper_mode_is_refused_by_both() -> None:
    with pytest.raises(InvalidSettingsError, match="applies only to mode='budget'"):
        lc_retriever(k=4, mode="paper", max_tokens=100)
    with pytest.raises(InvalidSettingsError, match="applies only to mode='budget'"):
        li_run(li_index(), next(iter(CORPUS.queries)), 4, mode="paper", max_tokens=100)
