"""LangChain's standard retriever suite, unmodified, offline, in both modes.

The suite asks for "the number of documents returned". In plain mode that is ``k`` (passages);
in budget mode, the default, it is ``budget`` (chunks, with ``return_chunks=True``).
"""

from typing import Any

from langchain_core.vectorstores import InMemoryVectorStore
from langchain_tests.integration_tests import RetrieversIntegrationTests
from lc_fakes import HashingEmbeddings, chain_documents

from scar_langchain import SCARRetriever, link_chunks


def _store() -> InMemoryVectorStore:
    docs = []
    for d in range(6):
        docs += chain_documents(
            f"doc{d}",
            [
                f"Document {d} is about topic{d}. Part {i} mentions word{i} and word{i + 1}."
                for i in range(4)
            ],
        )
    chunks = link_chunks(docs)
    store = InMemoryVectorStore(HashingEmbeddings())
    store.add_documents(chunks, ids=[c.id for c in chunks])
    return store


class TestSCARRetrieverStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[SCARRetriever]:
        return SCARRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"vectorstore": _store(), "budget": None, "k": 2, "gamma": 0.5}

    @property
    def retriever_query_example(self) -> str:
        return "What does part 2 of the topic3 document mention?"


class TestSCARRetrieverBudgetStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[SCARRetriever]:
        return SCARRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"vectorstore": _store(), "budget": 2, "k": 1, "return_chunks": True}

    @property
    def num_results_arg_name(self) -> str:
        return "budget"

    @property
    def retriever_query_example(self) -> str:
        return "What does part 2 of the topic3 document mention?"
