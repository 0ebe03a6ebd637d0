"""One adapter core: both frameworks give the same trace, errors and counters, and the glue's
old defects stay fixed (each test here failed before the core was shared)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import warnings
from typing import Any

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore
from llama_index.core import VectorStoreIndex
from llama_index.core.schema import NodeRelationship, QueryBundle, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores import SimpleVectorStore
from pydantic import Field

from lc_stores import CountingEmbeddings, make_corpus
from li_support import WordHashEmbedding
from scar_core._errors import InvalidSettingsError, MissingQueryError
from scar_langchain import SCARRetriever, link_chunks
from scar_langchain._links import NEXT_ID_KEY, PREVIOUS_ID_KEY
from scar_llamaindex import SCARNodePostprocessor

CORPUS = make_corpus()
#: Settings that both adapters take by the same name, with the budget as ``k``.
SETTINGS: list[dict[str, Any]] = [
    {"k": 4}, {"k": 6, "keep": 1}, {"k": 5, "continuity_bonus": 0.1, "lambda_": 0.3},
    {"k": 3, "mode": "paper"}, {"k": 3, "mode": "paper", "window": 2, "gamma": 0.6},
]  # fmt: skip


def lc_retriever(**settings: Any) -> SCARRetriever:
    store = InMemoryVectorStore(CountingEmbeddings(CORPUS))
    store.add_documents(CORPUS.linked, ids=CORPUS.ids)
    return SCARRetriever(vectorstore=store, **settings)


def li_index() -> VectorStoreIndex:
    """The same chunks, ids, links and vectors as the LangChain store, as linked TextNodes."""
    nodes = []
    for chunk in CORPUS.linked:
        relations = {
            relation: RelatedNodeInfo(node_id=chunk.metadata[key])
            for relation, key in ((NodeRelationship.PREVIOUS, PREVIOUS_ID_KEY),
                                  (NodeRelationship.NEXT, NEXT_ID_KEY))
            if key in chunk.metadata
        }  # fmt: skip
        nodes.append(
            TextNode(
                id_=chunk.id, text=chunk.page_content, metadata=dict(chunk.metadata),
                relationships=relations, embedding=CORPUS.vectors[chunk.page_content],
            )
        )  # fmt: skip
    table = CORPUS.vectors | CORPUS.queries
    return VectorStoreIndex(nodes, embed_model=WordHashEmbedding(table))


def li_run(index: VectorStoreIndex, query: str, k: int, **settings: Any) -> list[Any]:
    hits = index.as_retriever(similarity_top_k=k).retrieve(query)
    return SCARNodePostprocessor.from_index(
        index, filters=None, top_n=k, **settings
    ).postprocess_nodes(hits, query_str=query)


def traces(items: list[tuple[str | None, dict[str, Any]]]) -> list[tuple[Any, ...]]:
    keys = ("scar_passage", "scar_origin", "scar_seed_id", "scar_expanded", "scar_embedded")
    return [(i, *(m[key] for key in keys), round(m["scar_score"], 5),
             tuple(round(v, 5) for v in m.get("scar_decision", {}).values()))
            for i, m in items]  # fmt: skip


@pytest.mark.parametrize("settings", SETTINGS, ids=str)
def test_both_adapters_give_the_same_trace_and_counters(settings: dict[str, Any]) -> None:
    index, compared = li_index(), 0
    retriever = lc_retriever(**settings)
    for query in CORPUS.queries:
        lc = retriever.invoke(query)
        rest = {n: v for n, v in settings.items() if n != "k"}
        li = li_run(index, query, settings["k"], **rest)
        assert traces([(d.id, d.metadata) for d in lc]) == traces(
            [(n.node.node_id, n.node.metadata) for n in li]
        ), (settings, query)
        compared += sum(d.metadata["scar_origin"] == "neighbor" for d in lc)
    assert compared > 0


@pytest.mark.parametrize(
    "settings",
    [{"gamma": 0.5}, {"mode": "paper", "keep": 2}, {"lambda_": -1.0}, {"continuity_bonnus": 0.9},
     {"keep": 4, "k": 3}, {"mode": "rerank"}, {"direction": "up", "mode": "paper"}],
    ids=str,
)  # fmt: skip
def test_both_adapters_refuse_the_same_bad_settings_the_same_way(settings: dict[str, Any]) -> None:
    with pytest.raises(InvalidSettingsError) as on_langchain:
        lc_retriever(**settings)
    li_settings = {("top_n" if n == "k" else n): v for n, v in settings.items()}
    with pytest.raises(InvalidSettingsError) as on_llamaindex:
        SCARNodePostprocessor.from_index(li_index(), filters=None, **li_settings)
    # The same message, but for each adapter's own name (SCARRetriever's k is top_n there).
    normalise = {"SCARNodePostprocessor": "SCARRetriever", "top_n": "k"}
    message = str(on_llamaindex.value)
    for theirs, ours in normalise.items():
        message = message.replace(theirs, ours)
    assert str(on_langchain.value) == message


@pytest.mark.parametrize(
    ("name", "hint"),
    [("continuity_bonnus", "did you mean continuity_bonus"), ("search_type", "pass that retriever as retriever="),
     ("top_k", "budget is k=")],
)  # fmt: skip
def test_langchain_refuses_unknown_and_foreign_settings(name: str, hint: str) -> None:
    with pytest.raises(InvalidSettingsError, match=f"unknown setting {name}=.*{hint}"):
        lc_retriever(**{name: 1})


def test_a_missing_query_is_scars_own_error() -> None:
    index = li_index()
    hits = index.as_retriever(similarity_top_k=3).retrieve(next(iter(CORPUS.queries)))
    with pytest.raises(MissingQueryError, match="needs the query"):
        SCARNodePostprocessor.from_index(index, filters=None).postprocess_nodes(hits)


class VectorlessStore(InMemoryVectorStore):
    """A store SCAR has no reader for: chunks by id, without vectors."""


class ThreadRecordingEmbeddings(Embeddings):
    def __init__(self) -> None:
        self.inner = CountingEmbeddings(CORPUS)
        self.threads: set[int] = set()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.threads.add(threading.get_ident())
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)


def vectorless() -> tuple[SCARRetriever, ThreadRecordingEmbeddings]:
    embeddings = ThreadRecordingEmbeddings()
    store = VectorlessStore(embeddings)
    store.add_documents(CORPUS.linked, ids=CORPUS.ids)
    embeddings.threads.clear()
    return SCARRetriever(vectorstore=store, k=5), embeddings


def test_langchain_async_embeds_off_the_event_loop() -> None:
    retriever, embeddings = vectorless()

    async def run() -> int:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "embedded at query time": expected
            await retriever.ainvoke(next(iter(CORPUS.queries)))
        return threading.get_ident()

    loop_thread = asyncio.run(run())
    assert embeddings.threads
    assert loop_thread not in embeddings.threads


def test_langchain_embeds_each_text_once_in_memory_and_writes_nothing(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCAR_CACHE_DIR", str(tmp_path / "scar"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    retriever, _embeddings = vectorless()
    query = next(iter(CORPUS.queries))
    with pytest.warns(UserWarning, match="VectorlessStore gave SCAR no stored vectors"):
        first = retriever.invoke(query)
    second = retriever.invoke(query)
    assert first[0].metadata["scar_embedded"] > 0
    assert second[0].metadata["scar_embedded"] == 0  # every text was kept in memory
    assert [d.id for d in first] == [d.id for d in second]
    assert not list(tmp_path.rglob("*"))


def test_the_query_path_imports_no_cache_and_no_tooling() -> None:
    code = (
        "import sys, scar_core, scar_langchain, scar_llamaindex\n"
        "loaded = [m for m in sys.modules if m.startswith('scar_core.')]\n"
        "banned = ('cache', 'eval', 'cli', 'demo')\n"
        "assert not [m for m in loaded if m.split('.')[1] in banned], loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_one_chunk_documents_linked_by_link_chunks_do_not_warn() -> None:
    faq = link_chunks(
        [Document(f"Answer {n}: word{n}.", metadata={"source": f"faq-{n}"}) for n in range(5)]
    )
    store = InMemoryVectorStore(CountingEmbeddings(CORPUS))
    embeddings = WordHashEmbedding()
    store = InMemoryVectorStore(LangChainWordHash(embeddings))
    store.add_documents(faq, ids=[c.id for c in faq])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        docs = SCARRetriever(vectorstore=store, k=3).invoke("word2")
    assert len(docs) == 3


class LangChainWordHash(Embeddings):
    def __init__(self, model: WordHashEmbedding) -> None:
        self.model = model

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.model.vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.model.vector(text)


def test_llamaindex_with_a_query_of_another_dimension_warns_and_does_not_expand() -> None:
    index = li_index()
    query = next(iter(CORPUS.queries))
    hits = index.as_retriever(similarity_top_k=4).retrieve(query)
    scar = SCARNodePostprocessor.from_index(index, filters=None)
    wrong = QueryBundle(query, embedding=list(np.ones(CORPUS.dimension * 2)))
    with pytest.warns(UserWarning, match="no usable embedding.*dimension other than the query's"):
        output = scar.postprocess_nodes(hits, wrong)
    assert [n.node.node_id for n in output] == [n.node.node_id for n in hits]
    assert {n.node.metadata["scar_expanded"] for n in output} == {False}


def test_llamaindex_embeds_a_repeated_query_once() -> None:
    index = li_index()
    query = next(iter(CORPUS.queries))
    hits = index.as_retriever(similarity_top_k=4).retrieve(query)
    model = WordHashEmbedding(CORPUS.vectors | CORPUS.queries)
    scar = SCARNodePostprocessor.from_index(index, filters=None, embed_model=model)
    first = scar.postprocess_nodes(hits, query_str=query)
    second = scar.postprocess_nodes(hits, query_str=query)
    assert model.queries_embedded == 1
    assert first == second


class FlakyAsyncStore(SimpleVectorStore):
    """Keeps text and answers ``aget_nodes``, which fails once with a time-out."""

    stores_text: bool = True
    served: dict[str, Any] = Field(default_factory=dict, exclude=True)
    calls: int = 0
    failures: int = 1

    def get_nodes(self, node_ids: list[str] | None = None, **kwargs: Any) -> list[Any]:
        return [self.served[i] for i in node_ids or [] if i in self.served]

    async def aget_nodes(self, node_ids: list[str] | None = None, **kwargs: Any) -> list[Any]:
        self.calls += 1
        if self.failures:
            self.failures -= 1
            raise TimeoutError("the store took too long")
        return self.get_nodes(node_ids)


def test_one_failed_aget_nodes_does_not_switch_to_sync_reads_for_good() -> None:
    index = li_index()
    nodes = [
        n.model_copy(update={"embedding": CORPUS.vectors[n.get_content()]})
        for n in index.docstore.docs.values()
    ]
    store = FlakyAsyncStore(served={n.node_id: n for n in nodes})
    scar = SCARNodePostprocessor(vector_store=store, filters=None, embed_model=WordHashEmbedding())
    query = next(iter(CORPUS.queries))
    hits = index.as_retriever(similarity_top_k=4).retrieve(query)
    bundle = QueryBundle(query, embedding=CORPUS.queries[query])
    with pytest.warns(UserWarning, match="aget_nodes failed.*TimeoutError"):
        first = asyncio.run(scar.apostprocess_nodes(hits, bundle))
    calls = store.calls
    assert asyncio.run(scar.apostprocess_nodes(hits, bundle)) == first
    assert store.calls > calls  # the async read is tried again, and works


def test_langchain_faiss_over_an_ivf_index_falls_back_and_says_how_to_fix_it() -> None:
    import faiss
    from langchain_community.docstore.in_memory import InMemoryDocstore
    from langchain_community.vectorstores import FAISS

    embeddings = CountingEmbeddings(CORPUS)
    vectors = np.array([CORPUS.vectors[c.page_content] for c in CORPUS.linked], dtype=np.float32)
    quantizer = faiss.IndexFlatL2(CORPUS.dimension)
    index = faiss.IndexIVFFlat(quantizer, CORPUS.dimension, 2)
    index.train(vectors)
    store = FAISS(embeddings, index, InMemoryDocstore(), {})
    store.add_embeddings(
        [(c.page_content, v.tolist()) for c, v in zip(CORPUS.linked, vectors, strict=True)],
        metadatas=[c.metadata for c in CORPUS.linked],
        ids=CORPUS.ids,
    )
    retriever = SCARRetriever(vectorstore=store, k=5)
    with pytest.warns(UserWarning, match=r"make_direct_map\(\)"):
        docs = retriever.invoke(next(iter(CORPUS.queries)))
    assert len(docs) == 5
    assert docs[0].metadata["scar_embedded"] > 0


def test_both_adapters_give_the_settings_descriptions_and_bounds_in_their_json_schema() -> None:
    from pydantic import TypeAdapter

    langchain, llamaindex = (
        TypeAdapter(adapter.model_fields["settings"].annotation).json_schema()
        for adapter in (SCARRetriever, SCARNodePostprocessor)
    )
    assert llamaindex == langchain  # one declaration, seen alike by both frameworks
    for schema in (langchain, llamaindex):
        settings = schema["properties"]
        assert settings["k"]["minimum"] == 1
        assert settings["keep"]["minimum"] == 1
        assert settings["lambda_"]["minimum"] == 0.0
        assert settings["gamma"]["exclusiveMinimum"] == 0.0
        assert settings["gamma"]["maximum"] == 1.0
        assert "boundary penalty" in settings["lambda_"]["description"]
        assert "left out when serialised" in " ".join(settings["tokenizer"]["description"].split())
        assert all(p.get("description") for p in settings.values())


def test_both_adapters_serialise_with_a_tokenizer_and_a_neighbor_filter() -> None:
    functions = {"tokenizer": len, "neighbor_filter": lambda metadata: True}
    retriever = lc_retriever(k=5, max_tokens=200, **functions)
    dumped = retriever.model_dump()["settings"]
    assert dumped["max_tokens"] == 200
    assert "tokenizer" not in dumped
    assert "neighbor_filter" not in dumped
    assert '"max_tokens":200' in retriever.model_dump_json(exclude={"vectorstore"})
    postprocessor = SCARNodePostprocessor.from_index(
        li_index(), filters=None, top_n=5, max_tokens=200, **functions
    )
    as_json = postprocessor.to_json()
    assert '"max_tokens": 200' in as_json
    assert "tokenizer" not in as_json
    assert postprocessor.to_dict()["settings"]["max_tokens"] == 200
    assert "neighbor_filter" not in postprocessor.model_dump()["settings"]
