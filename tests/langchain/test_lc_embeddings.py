"""ScarEmbeddings: a scar_core Embedder (cached or not) as a LangChain Embeddings."""

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from langchain_core.stores import InMemoryStore
from langchain_core.vectorstores import InMemoryVectorStore
from lc_fakes import HashingEmbeddings, chain_documents

from scar_core.cache import CachedEmbedder
from scar_core.embedders.base import Embedder
from scar_langchain import ScarEmbeddings, SCARRetriever, link_chunks


class HashingEmbedder:
    """A scar_core Embedder over the test's hashing vectors, counting texts embedded."""

    model_name = "test-hashing-64"

    def __init__(self) -> None:
        self._hashing = HashingEmbeddings()
        self.texts: list[str] = []

    def embed_documents(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.texts.extend(texts)
        return np.asarray([self._hashing.vector(t) for t in texts], dtype=np.float32)

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        return np.asarray(self._hashing.vector(text), dtype=np.float32)

    async def aembed_documents(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return self.embed_documents(texts)

    async def aembed_query(self, text: str) -> npt.NDArray[np.float32]:
        return self.embed_query(text)


def test_the_fake_is_an_embedder() -> None:
    assert isinstance(HashingEmbedder(), Embedder)


async def test_vectors_are_plain_float_lists_sync_and_async() -> None:
    inner = HashingEmbedder()
    embeddings = ScarEmbeddings(inner)
    documents = embeddings.embed_documents(["alpha beta", "gamma"])
    assert isinstance(documents[0], list)
    assert isinstance(documents[0][0], float)
    assert np.allclose(documents, inner.embed_documents(["alpha beta", "gamma"]))
    assert np.allclose(await embeddings.aembed_documents(["gamma"]), [documents[1]])
    query = embeddings.embed_query("alpha")
    assert np.allclose(query, await embeddings.aembed_query("alpha"))
    assert embeddings.model == "test-hashing-64"


def test_cached_embedder_behind_scar_embeddings_embeds_each_chunk_once() -> None:
    docs = []
    for d in range(3):
        docs += chain_documents(f"doc{d}", [f"doc {d} topic{d} part {i} word{i}" for i in range(4)])
    chunks = link_chunks(docs)
    search = InMemoryVectorStore(HashingEmbeddings())
    search.add_documents(chunks, ids=[c.id for c in chunks])
    docstore = InMemoryStore()
    docstore.mset([(c.id, c) for c in chunks])

    inner = HashingEmbedder()
    retriever = SCARRetriever(
        base_retriever=search.as_retriever(),
        docstore=docstore,
        embeddings=ScarEmbeddings(CachedEmbedder(inner)),
        k=2,
        gamma=0.5,
    )
    queries = ["topic1 word2", "topic0 word0", "topic2"]
    first = [[d.page_content for d in retriever.invoke(q)] for q in queries]
    embedded = list(inner.texts)
    assert embedded
    assert len(embedded) == len(set(embedded))
    second = [[d.page_content for d in retriever.invoke(q)] for q in queries]
    assert inner.texts == embedded
    assert second == first
    params = retriever._get_ls_params()
    assert params["ls_embedding_provider"] == "ScarEmbeddings"
    assert params["ls_embedding_model"] == "test-hashing-64"
