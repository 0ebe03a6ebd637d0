"""Links that carry the ids two steps away: one read per query, and link_store upgrades old ones."""

from __future__ import annotations

from collections import Counter
from typing import Any

from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore
from lc_support import WordHashEmbeddings, documents

from scar_langchain import SCARRetriever, link_chunks, link_store
from scar_langchain._links import NEXT2_ID_KEY, NEXT_ID_KEY, PREVIOUS2_ID_KEY, PREVIOUS_ID_KEY

QUESTIONS = ["word2x3 and topic2", "word4x1 part 1", "word0x4 topic0 word1x2"]


def test_link_chunks_names_the_chunks_two_steps_away_within_a_document() -> None:
    chunks = link_chunks(documents(count=2, length=5), trust_order=True)
    by_id = {c.id: c.metadata for c in chunks}
    for chunk in chunks:
        meta = chunk.metadata
        for one, two in ((PREVIOUS_ID_KEY, PREVIOUS2_ID_KEY), (NEXT_ID_KEY, NEXT2_ID_KEY)):
            between = meta.get(one)
            assert meta.get(two) == (by_id[between].get(one) if between else None)
    assert chunks[0].metadata.get(PREVIOUS2_ID_KEY) is None
    assert chunks[3].metadata.get(NEXT2_ID_KEY) is None  # two steps on is another document


def reads(retriever: SCARRetriever, questions: list[str]) -> tuple[list[list[str]], Counter[int]]:
    """Each question's returned ids, and how many reads each query made."""
    counts: Counter[int] = Counter()
    reader: Any = retriever._reader
    original = reader.read
    calls = [0]

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    reader.read = counted
    returned = []
    for question in questions:
        calls[0] = 0
        returned.append([d.id for d in retriever.invoke(question)])
        counts[calls[0]] += 1
    del reader.read
    return returned, counts


def test_old_links_read_twice_and_link_store_upgrades_them_to_one_read() -> None:
    chunks = link_chunks(documents(), trust_order=True)
    old = [
        Document(c.page_content, id=c.id, metadata={
            k: v for k, v in c.metadata.items() if k not in (PREVIOUS2_ID_KEY, NEXT2_ID_KEY)
        })
        for c in chunks
    ]  # fmt: skip
    store = InMemoryVectorStore(WordHashEmbeddings())
    store.add_documents(old, ids=[c.id for c in old])
    before, counts = reads(SCARRetriever(vectorstore=store, k=4), QUESTIONS)
    assert max(counts) == 2  # ring by ring (a query whose hits cover the window reads once)
    report = link_store(store, order_key="scar_position")
    assert report.changed == sum(
        1 for c in chunks if c.metadata.get(PREVIOUS2_ID_KEY) or c.metadata.get(NEXT2_ID_KEY)
    )
    assert {i: r["metadata"] for i, r in store.store.items()} == {c.id: c.metadata for c in chunks}
    after, counts = reads(SCARRetriever(vectorstore=store, k=4), QUESTIONS)
    assert counts == Counter({1: len(QUESTIONS)})
    assert after == before
