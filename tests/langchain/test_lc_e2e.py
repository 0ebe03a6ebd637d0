"""End to end: a real splitter, InMemoryVectorStore, the bundled MiniLM and a fake chat model."""

import json

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_text_splitters import RecursiveCharacterTextSplitter

from scar_core import expand
from scar_langchain import ScarEmbeddings, SCARRetriever, link_chunks

pytestmark = pytest.mark.model

TCP = (
    "TCP keeps a retransmission timer for every connection. When a segment is sent, the timer "
    "is started if it is not already running. If the timer expires before the segment is "
    "acknowledged, the sender retransmits the earliest unacknowledged segment, doubles the "
    "retransmission timeout, and restarts the timer. The retransmission timeout is computed "
    "from the smoothed round-trip time and its variance, and it never falls below one second. "
    "Karn's algorithm excludes retransmitted segments from round-trip time samples, because "
    "their acknowledgements are ambiguous. When all outstanding data has been acknowledged, "
    "the timer is turned off."
)
GDPR = (
    "Under the GDPR, the data subject has the right to obtain from the controller the erasure "
    "of personal data without undue delay. The controller must erase the data when it is no "
    "longer necessary for the purposes for which it was collected, or when the data subject "
    "withdraws consent and there is no other legal ground for the processing. Where the "
    "controller has made the personal data public, it must take reasonable steps to inform "
    "other controllers that the data subject has requested the erasure of any links to, or "
    "copies of, that personal data."
)
BREAD = (
    "To bake a simple loaf, mix flour, water, salt and yeast, and knead the dough for ten "
    "minutes until it is smooth and elastic. Let it rise in a warm place until it doubles in "
    "size, which takes about an hour. Shape the loaf, let it rise again, and bake it in a hot "
    "oven for thirty to forty minutes, until the crust is brown and the bottom sounds hollow."
)
QUESTIONS = [
    "What happens when the retransmission timer expires?",
    "When must a controller erase personal data?",
    "How long should bread dough rise?",
]


@pytest.fixture(scope="module")
def setup(minilm_embedder: object) -> tuple[InMemoryVectorStore, list[Document], ScarEmbeddings]:
    sources = {"rfc9293.txt": TCP, "gdpr.txt": GDPR, "bread.txt": BREAD}
    splitter = RecursiveCharacterTextSplitter(
        chunk_size=160, chunk_overlap=30, add_start_index=True
    )
    documents = [Document(text, metadata={"source": name}) for name, text in sources.items()]
    chunks = link_chunks(splitter.split_documents(documents))
    embeddings = ScarEmbeddings(minilm_embedder)  # type: ignore[arg-type]
    store = InMemoryVectorStore(embeddings)
    store.add_documents(chunks, ids=[c.id for c in chunks])
    return store, chunks, embeddings


def test_chain_answers_from_scar_passages(
    setup: tuple[InMemoryVectorStore, list[Document], ScarEmbeddings],
) -> None:
    store, chunks, embeddings = setup
    by_id = {c.id: c for c in chunks}
    source_text = {"rfc9293.txt": TCP, "gdpr.txt": GDPR, "bread.txt": BREAD}
    retriever = SCARRetriever(vectorstore=store, budget=None, k=2)

    seen_prompts: list[str] = []

    def record(prompt_value: object) -> object:
        seen_prompts.append(str(prompt_value))
        return prompt_value

    prompt = ChatPromptTemplate.from_template("Context:\n{context}\n\nQuestion: {question}")
    chain = (
        {
            "context": retriever | (lambda docs: "\n\n".join(d.page_content for d in docs)),
            "question": RunnablePassthrough(),
        }
        | prompt
        | RunnableLambda(record)
        | FakeListChatModel(responses=["answer"] * len(QUESTIONS))
        | StrOutputParser()
    )
    assert chain.batch(QUESTIONS) == ["answer"] * len(QUESTIONS)
    assert len(seen_prompts) == len(QUESTIONS)

    links = {c.id: (c.metadata.get("scar_prev_id"), c.metadata.get("scar_next_id")) for c in chunks}
    vectors = {cid: np.asarray(entry["vector"]) for cid, entry in store.store.items()}
    for question in QUESTIONS:
        # batch runs the questions in threads: find each one's prompt by its question.
        [prompt_text] = [p for p in seen_prompts if f"Question: {question}" in p]
        docs = retriever.invoke(question)
        assert len(docs) == 2
        json.dumps([d.metadata for d in docs])
        for doc in docs:
            # Each passage is a contiguous span of its source, overlap kept once.
            ids = doc.metadata["scar_chunk_ids"]
            first, last = by_id[ids[0]], by_id[ids[-1]]
            start = first.metadata["start_index"]
            end = last.metadata["start_index"] + len(last.page_content)
            text = source_text[first.metadata["source"]]
            assert doc.page_content.split() == text[start:end].split()
            assert " ".join(doc.page_content.split()) in " ".join(prompt_text.split())
        # Decisions are scar_core's, on the MiniLM vectors the store holds.
        seeds = [
            c["chunk_id"]
            for doc in docs
            for c in doc.metadata["scar_chunks"]
            if c["origin"] == "seed"
        ]
        seeds.sort(
            key=lambda cid: next(
                c["seed_rank"]
                for d in docs
                for c in d.metadata["scar_chunks"]
                if c["chunk_id"] == cid
            )
        )
        query = np.asarray(embeddings.embed_query(question))
        expected = expand(query, seeds, links, vectors)
        returned = [cid for doc in docs for cid in doc.metadata["scar_chunk_ids"]]
        assert sorted(returned) == sorted(expected.chunk_ids)
    # The top passage of each question comes from the right document.
    tops = [retriever.invoke(q)[0].metadata["source"] for q in QUESTIONS]
    assert tops == ["rfc9293.txt", "gdpr.txt", "bread.txt"]


def test_the_default_budget_mode_on_minilm_selects_what_the_core_selects(
    setup: tuple[InMemoryVectorStore, list[Document], ScarEmbeddings],
) -> None:
    from scar_core.budget import default_budget_settings, select_within_budget

    store, chunks, embeddings = setup
    retriever = SCARRetriever(vectorstore=store)
    links = {c.id: (c.metadata.get("scar_prev_id"), c.metadata.get("scar_next_id")) for c in chunks}
    vectors = {cid: np.asarray(entry["vector"]) for cid, entry in store.store.items()}
    for question in QUESTIONS:
        docs = retriever.invoke(question)
        query = np.asarray(embeddings.embed_query(question))
        hits = store.similarity_search_by_vector(query.tolist(), k=10)
        expected = select_within_budget(
            query, [d.id for d in hits], links, vectors, default_budget_settings()
        )
        returned = [cid for doc in docs for cid in doc.metadata["scar_chunk_ids"]]
        assert sorted(returned) == sorted(expected.chunk_ids)
        assert len(returned) == min(10, len(chunks))
        assert docs[0].metadata["scar_mode"] == "budget"
