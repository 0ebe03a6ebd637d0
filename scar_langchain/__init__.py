"""SCAR for LangChain: a ``BaseRetriever`` that spends ``k`` chunks on better evidence.

Install with ``pip install 'scar-retrieval[langchain]'``::

    from scar_langchain import SCARRetriever, link_chunks

    chunks = link_chunks(splitter.split_documents(docs))
    vectorstore.add_documents(chunks, ids=[c.id for c in chunks])
    retriever = SCARRetriever(vectorstore=vectorstore, k=10)  # was vectorstore.as_retriever(...)
"""

from __future__ import annotations

from scar_langchain._link_store import LinkReport, link_store, replace_documents
from scar_langchain._links import link_chunks
from scar_langchain._retriever import SCARRetriever

__all__ = [
    "LinkReport",
    "SCARRetriever",
    "link_chunks",
    "link_store",
    "replace_documents",
]
