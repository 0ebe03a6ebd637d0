"""A first stage's hits keep distinct identities, whatever ids they carry."""

from __future__ import annotations

import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

from scar_langchain import SCARRetriever
from tests.langchain.lc_support import WordHashEmbeddings, linked_store


class _Listed(BaseRetriever):
    """A first stage that returns fixed documents (a reranker's output, say)."""

    documents: list[Document]

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return list(self.documents)


@pytest.mark.parametrize("mode", ["budget", "paper"])
def test_a_first_stage_hit_with_id_scar_hit_1_keeps_an_id_less_hit(mode: str) -> None:
    store = linked_store(WordHashEmbeddings())
    first_stage = _Listed(
        documents=[
            Document("Document 1 is about topic1, with an odd id.", id="scar-hit-1"),
            Document("Document 2 is about topic2, with no id at all."),
            Document("Document 3 is about topic3, from another source.", id="elsewhere"),
        ]
    )
    retriever = SCARRetriever(
        vectorstore=store, retriever=first_stage, k=3, mode=mode, search_kwargs={}
    )
    with pytest.warns(UserWarning, match="was linked"):  # none of these hits is linked
        texts = [d.page_content for d in retriever.invoke("topic1 topic2 topic3")]
    assert sorted(texts) == sorted(d.page_content for d in first_stage.documents)
