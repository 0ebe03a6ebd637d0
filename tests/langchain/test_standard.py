"""LangChain's standard retriever suite, unmodified: default settings, and the paper's rule."""

from __future__ import annotations

import warnings
from typing import Any

from langchain_tests.integration_tests import RetrieversIntegrationTests
from lc_support import linked_store

from scar_langchain import SCARRetriever


class TestSCARRetrieverStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[SCARRetriever]:
        return SCARRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"vectorstore": linked_store(), "k": 3}

    @property
    def retriever_query_example(self) -> str:
        return "What does part 2 of the topic3 document cover?"


class TestSCARRetrieverPaperStandard(RetrieversIntegrationTests):
    """Paper mode returns a varying count; at gamma 1 a neighbour that ranked below every seed can
    never pass (its S is below its seed's cosine), so exact search gives exactly k chunks."""

    @property
    def retriever_constructor(self) -> type[SCARRetriever]:
        return SCARRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"vectorstore": linked_store(), "k": 3, "mode": "paper", "gamma": 1.0}

    @property
    def retriever_query_example(self) -> str:
        return "What does part 2 of the topic3 document cover?"


class TestSCARRetrieverAfterAFirstStageStandard(RetrieversIntegrationTests):
    """SCAR after a hybrid first stage: BM25 and the store, in LangChain's EnsembleRetriever.

    BM25 has no filter SCAR can see, so ``search_kwargs={}`` states that it searches without one.
    """

    @property
    def retriever_constructor(self) -> type[SCARRetriever]:
        return SCARRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        store = linked_store()
        chunks = list(store.get_by_ids(list(store.store)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # langchain-community is sunset
            from langchain_classic.retrievers import EnsembleRetriever
            from langchain_community.retrievers import BM25Retriever
        hybrid = EnsembleRetriever(
            retrievers=[BM25Retriever.from_documents(chunks), store.as_retriever()]
        )
        return {"vectorstore": store, "retriever": hybrid, "search_kwargs": {}, "k": 3}

    @property
    def retriever_query_example(self) -> str:
        return "What does part 2 of the topic3 document cover?"
