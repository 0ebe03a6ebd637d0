"""Passages: stitched in document order with overlap removed; k counts passages."""

import math
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_text_splitters import RecursiveCharacterTextSplitter
from lc_fakes import CountingEmbeddings, TableEmbeddings, chain_documents

from scar_core import NeighborGraph, expand
from scar_core.errors import InvalidSettingsError
from scar_langchain import SCARRetriever, link_chunks


class ConstantEmbeddings(CountingEmbeddings):
    """Every text has the same vector: every neighbour continues its seed."""

    def vector(self, text: str) -> list[float]:
        return [1.0, 0.0]


class CountingStore(InMemoryVectorStore):
    """Records the sizes of the searches the retriever makes."""

    def __init__(self, embedding: Any) -> None:
        super().__init__(embedding)
        self.search_sizes: list[int] = []
        self.lookups: list[list[str]] = []

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        self.lookups.append(list(ids))
        return super().get_by_ids(ids)

    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, **kwargs: Any
    ) -> list[Document]:
        self.search_sizes.append(k)
        return super().similarity_search_by_vector(embedding, k, **kwargs)


TEXT = (
    "The retransmission timer starts when a segment is sent. When it expires, the oldest "
    "unacknowledged segment is sent again and the timeout doubles. Karn's rule keeps "
    "retransmitted segments out of the round-trip estimate. The timer stops when every "
    "outstanding segment is acknowledged. A new segment restarts it with the current value."
)


@pytest.mark.parametrize("overlap", [0, 20])
def test_passages_reproduce_the_source_text_in_order(overlap: int) -> None:
    splitter = RecursiveCharacterTextSplitter(
        chunk_size=60, chunk_overlap=overlap, add_start_index=True
    )
    chunks = link_chunks(splitter.split_documents([Document(TEXT, metadata={"source": "rfc"})]))
    assert len(chunks) >= 5
    store = InMemoryVectorStore(ConstantEmbeddings())
    store.add_documents(chunks, ids=[c.id for c in chunks])

    docs = SCARRetriever(vectorstore=store, budget=None, k=1, window=2).invoke("timer")
    [passage] = docs
    ids = passage.metadata["scar_chunk_ids"]
    positions = [c.metadata["scar_position"] for c in chunks if c.id in ids]
    order = {c.id: c.metadata["scar_position"] for c in chunks}
    assert [order[i] for i in ids] == sorted(positions)
    assert len(ids) >= 3  # the seed plus neighbours on its sides
    first = next(c for c in chunks if c.id == ids[0])
    last = next(c for c in chunks if c.id == ids[-1])
    start = first.metadata["start_index"]
    end = last.metadata["start_index"] + len(last.page_content)
    # Overlap is kept once: the passage is the source span (splitters drop the spaces between
    # chunks, which assembly puts back as line breaks).
    assert passage.page_content.split() == TEXT[start:end].split()
    assert passage.metadata["start_index"] == start
    assert passage.metadata["source"] == "rfc"
    assert "scar_prev_id" not in passage.metadata


def test_overlap_without_offsets_is_removed_by_matching_text() -> None:
    texts = ["alpha beta gamma delta epsilon", "gamma delta epsilon zeta eta theta"]
    chunks = link_chunks(chain_documents("doc", texts))
    store = InMemoryVectorStore(ConstantEmbeddings())
    store.add_documents(chunks, ids=[c.id for c in chunks])
    [passage] = SCARRetriever(vectorstore=store, budget=None, k=1).invoke("q")
    assert passage.page_content == "alpha beta gamma delta epsilon zeta eta theta"


# Document "a": a0 a1 a2 a3 where a1 and a2 are the two best seeds and adjacent; documents "b"
# and "c" hold the next best seeds.
MERGING = {
    "q": [1.0, 0.0, 0.0],
    "a0": [0.0, 1.0, 0.0],
    "a1": [0.99, 0.141, 0.0],
    "a2": [0.98, 0.0, 0.199],
    "a3": [0.0, 0.0, 1.0],
    "b0": [0.7, 0.714, 0.0],
    "b1": [0.0, 1.0, 0.0],
    "c0": [0.6, 0.0, 0.8],
}


def _merging_store() -> tuple[CountingStore, dict[str, str]]:
    chunks = link_chunks(
        chain_documents("a", ["a0", "a1", "a2", "a3"])
        + chain_documents("b", ["b0", "b1"])
        + chain_documents("c", ["c0"])
    )
    store = CountingStore(TableEmbeddings(MERGING))
    store.add_documents(chunks, ids=[c.id for c in chunks])
    return store, {c.page_content: c.id for c in chunks}


def test_merged_seeds_make_one_passage_and_further_seeds_fill_k() -> None:
    store, ids = _merging_store()
    docs = SCARRetriever(vectorstore=store, budget=None, k=2, fetch_k=2).invoke("q")
    assert [d.page_content for d in docs] == ["a1\na2", "b0"]
    assert docs[0].metadata["scar_chunk_ids"] == [ids["a1"], ids["a2"]]
    assert [c["origin"] for c in docs[0].metadata["scar_chunks"]] == ["seed", "seed"]
    assert [d.metadata["scar_seed_rank"] for d in docs] == [0, 2]
    # The first search (2 seeds) gave one passage, so the pool grew.
    assert store.search_sizes == [2, 4]


def test_default_pool_is_three_times_k_so_no_second_search_is_needed_here() -> None:
    store, _ = _merging_store()
    docs = SCARRetriever(vectorstore=store, budget=None, k=2).invoke("q")
    assert len(docs) == 2
    assert store.search_sizes == [6]


def test_only_the_seeds_needed_for_k_passages_are_expanded() -> None:
    """Hits a1 > a2 > b0 > d1 for k=2: a1 and a2 are adjacent (one run), so three seeds are
    needed. Only their neighbours are fetched (a0, a3, b1), not d1's, in one lookup."""
    table = {**MERGING, "d0": [0.0, 1.0, 0.0], "d1": [0.5, 0.0, 0.866], "d2": [0.0, 0.0, 1.0]}
    chunks = link_chunks(
        chain_documents("a", ["a0", "a1", "a2", "a3"])
        + chain_documents("b", ["b0", "b1"])
        + chain_documents("d", ["d0", "d1", "d2"])
    )
    store = CountingStore(TableEmbeddings(table))
    store.add_documents(chunks, ids=[c.id for c in chunks])
    ids = {c.page_content: c.id for c in chunks}
    docs = SCARRetriever(vectorstore=store, budget=None, k=2, fetch_k=4).invoke("q")
    assert [d.page_content for d in docs] == ["a1\na2", "b0"]
    assert store.search_sizes == [4]
    assert [set(lookup) for lookup in store.lookups] == [{ids["a0"], ids["a3"], ids["b1"]}]


def test_fewer_passages_than_k_when_the_store_runs_out() -> None:
    store, _ = _merging_store()
    docs = SCARRetriever(vectorstore=store, budget=None, k=10, gamma=0.1).invoke("q")
    every = [cid for d in docs for cid in d.metadata["scar_chunk_ids"]]
    assert len(every) == len(set(every)) == len(store.store)
    assert len(docs) == 3  # one passage per document: everything merged


def test_return_chunks_lists_chunks_in_document_order_grouped_by_passage() -> None:
    store, ids = _merging_store()
    docs = SCARRetriever(vectorstore=store, budget=None, k=2, fetch_k=2, return_chunks=True).invoke(
        "q"
    )
    assert [d.id for d in docs] == [ids["a1"], ids["a2"], ids["b0"]]
    assert [d.metadata["scar_passage"] for d in docs] == [0, 0, 1]
    assert [d.page_content for d in docs] == ["a1", "a2", "b0"]
    assert all(d.metadata["scar_origin"] == "seed" for d in docs)
    assert docs[0].metadata["scar_score"] == pytest.approx(0.99, abs=1e-3)


def test_k_can_be_overridden_per_call() -> None:
    store, _ = _merging_store()
    retriever = SCARRetriever(vectorstore=store, budget=None, k=1)
    assert len(retriever.invoke("q")) == 1
    assert len(retriever.invoke("q", k=3)) == 3
    assert retriever.k == 1
    with pytest.raises(InvalidSettingsError, match="k=0"):
        retriever.invoke("q", k=0)


def test_settings_checked_once_are_still_checked_when_they_change() -> None:
    store, _ = _merging_store()
    retriever = SCARRetriever(vectorstore=store, budget=None, k=1)
    assert len(retriever.invoke("q")) == 1
    assert len(retriever.invoke("q")) == 1  # the validated settings are reused
    retriever.gamma = 1.5  # reassigned after a call: checked again on the next one
    with pytest.raises(InvalidSettingsError, match=r"gamma=1\.5"):
        retriever.invoke("q")
    retriever.gamma = 0.8
    with pytest.raises(InvalidSettingsError, match="k=True"):
        retriever.invoke("q", k=True)  # equal to 1 as a key, but a bool is refused
    with pytest.raises(InvalidSettingsError, match=r"k=\[1\]"):
        retriever.invoke("q", k=[1])  # unhashable: validated, not looked up
    assert len(retriever.invoke("q", k=2)) == 2


def test_metadata_is_plain_json_and_the_store_is_not_modified() -> None:
    import json

    store, _ids = _merging_store()
    before = {key: dict(value["metadata"]) for key, value in store.store.items()}
    for return_chunks in (False, True):
        docs = SCARRetriever(
            vectorstore=store, budget=None, k=3, return_chunks=return_chunks
        ).invoke("q")
        json.dumps([d.metadata for d in docs])
        for doc in docs:
            assert doc.metadata["scar_score"] is not None
    assert {key: value["metadata"] for key, value in store.store.items()} == before


def test_token_budget_drops_neighbours_not_seeds() -> None:
    chunks = link_chunks(chain_documents("doc", [f"w{i} " * 10 for i in range(5)]))
    store = InMemoryVectorStore(ConstantEmbeddings())
    store.add_documents(chunks, ids=[c.id for c in chunks])
    words = lambda text: len(text.split())  # noqa: E731
    full = SCARRetriever(vectorstore=store, budget=None, k=1, window=2).invoke("q")
    assert sum(words(d.page_content) for d in full) > 25  # at least three chunks of 10 words
    budget = SCARRetriever(
        vectorstore=store, budget=None, k=1, window=2, max_tokens=25, token_counter=words
    ).invoke("q")
    [passage] = budget
    assert words(passage.page_content) <= 25
    assert passage.metadata["scar_seed_id"] in passage.metadata["scar_chunk_ids"]
    tiny = SCARRetriever(
        vectorstore=store, budget=None, k=1, window=2, max_tokens=1, token_counter=words
    )
    [seed_only] = tiny.invoke("q")
    assert seed_only.metadata["scar_chunk_ids"] == [seed_only.metadata["scar_seed_id"]]


def test_tiktoken_is_the_default_token_counter() -> None:
    from scar_core.tokens import tiktoken_counter

    chunks = link_chunks(chain_documents("doc", [f"w{i} " * 10 for i in range(5)]))
    store = InMemoryVectorStore(ConstantEmbeddings())
    store.add_documents(chunks, ids=[c.id for c in chunks])
    count = tiktoken_counter()
    [passage] = SCARRetriever(vectorstore=store, budget=None, k=1, window=2, max_tokens=40).invoke(
        "q"
    )
    assert count(passage.page_content) <= 40
    assert len(passage.metadata["scar_chunk_ids"]) >= 1


def test_search_kwargs_reach_the_store() -> None:
    store, ids = _merging_store()
    only_b = {"filter": lambda doc: doc.metadata["source"] == "b"}
    docs = SCARRetriever(vectorstore=store, budget=None, k=3, search_kwargs=only_b).invoke("q")
    seeds = {
        c["chunk_id"] for d in docs for c in d.metadata["scar_chunks"] if c["origin"] == "seed"
    }
    assert seeds <= {ids["b0"], ids["b1"]}
    assert seeds


@pytest.mark.parametrize("window", [1, 2, 3])
def test_neighbours_are_fetched_in_one_batch_per_step(window: int) -> None:
    chunks = link_chunks(
        [doc for d in range(4) for doc in chain_documents(f"d{d}", [f"{d}-{i}" for i in range(8)])]
    )
    store = CountingStore(ConstantEmbeddings())
    store.add_documents(chunks, ids=[c.id for c in chunks])
    SCARRetriever(vectorstore=store, budget=None, k=3, window=window).invoke("q")
    # Every neighbour of every seed is accepted here, so seeds merge and the pool may grow:
    # at most one lookup per step for each search, and no id is ever asked for twice.
    assert 1 <= len(store.lookups) <= window * len(store.search_sizes)
    requested = [cid for batch in store.lookups for cid in batch]
    assert len(requested) == len(set(requested))


@pytest.mark.parametrize("window", [1, 2])
def test_one_search_and_one_lookup_per_step_when_seeds_do_not_merge(window: int) -> None:
    table = {"q": [1.0, 0.0]}
    texts = {}
    for d in range(4):
        # Position 2 of every document is a strong seed; everything else is orthogonal.
        texts[d] = [f"{d}-{i}" for i in range(6)]
        for i, text in enumerate(texts[d]):
            table[text] = [1.0, 0.1 * d] if i == 2 else [0.0, 1.0]
    chunks = link_chunks([doc for d in range(4) for doc in chain_documents(f"d{d}", texts[d])])
    store = CountingStore(TableEmbeddings(table))
    store.add_documents(chunks, ids=[c.id for c in chunks])
    docs = SCARRetriever(vectorstore=store, budget=None, k=3, fetch_k=3, window=window).invoke("q")
    assert [d.page_content for d in docs] == ["0-2", "1-2", "2-2"]
    assert store.search_sizes == [3]
    assert len(store.lookups) == window


def _unit(degrees: float) -> list[float]:
    return [math.cos(math.radians(degrees)), math.sin(math.radians(degrees))]


@pytest.mark.parametrize("fetch_k", [1, 3, 6])
def test_a_second_ring_is_fetched_even_when_the_first_is_all_search_hits(fetch_k: int) -> None:
    """Window 2 around a2: its first ring (a1, a3) are search hits themselves once fetch_k >= 3,
    and a0, two steps away, must still be fetched and decided, as with full knowledge."""
    angles = {"a0": 20.0, "a1": 8.0, "a2": 1.0, "a3": 9.0, "a4": 80.0, "a5": 85.0}
    table = {"q": _unit(0.0), **{text: _unit(angle) for text, angle in angles.items()}}
    chunks = link_chunks(chain_documents("a", list(angles)))
    store = CountingStore(TableEmbeddings(table))
    store.add_documents(chunks, ids=[c.id for c in chunks])
    [passage] = SCARRetriever(
        vectorstore=store, budget=None, k=1, window=2, gamma=0.5, fetch_k=fetch_k
    ).invoke("q")
    graph = NeighborGraph.from_sequences({"a": [c.id for c in chunks]})
    vectors = {c.id: table[c.page_content] for c in chunks}
    best = max(chunks, key=lambda c: table[c.page_content][0])
    full = expand(table["q"], [best.id], graph, vectors, lambda_=0.1, gamma=0.5, window=2)
    assert passage.metadata["scar_chunk_ids"] == [
        c.id for c in chunks if c.id in set(full.chunk_ids)
    ]
    assert passage.page_content == "a0\na1\na2\na3"
