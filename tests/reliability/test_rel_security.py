"""Security: no unsafe loading in the source, API keys never leak, metadata is only ever data.

* The source tree is scanned token by token (so prose such as "evaluation" or "never
  unpickled" in docstrings does not count) for pickle-family modules, ``eval``/``exec``/
  ``__import__`` calls, ``allow_pickle=True``, ``torch.load`` without ``weights_only=True`` and
  ``yaml.load`` without a loader. The scanner itself is shown to catch each of them.
* A recognisable fake OpenAI key goes through ``OpenAIEmbedder`` into both adapters and into
  ``scar eval``; it must not appear in any log record (every logger, DEBUG and up), repr,
  serialisation, callback payload, result, metadata, error message or report, including on the
  error paths where the API answers 401 quoting the key.
* Chunk ids, document ids, texts and metadata values holding format strings and code
  (``%s``, ``{0}``, ``{__import__('os')...}``) go through both adapters with bad links and bad
  vectors, so that warnings name them. Every log record must format (a payload used as a format
  string would raise), every payload shown must be shown verbatim, and nothing is executed.
"""

from __future__ import annotations

import io
import logging
import tokenize
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import numpy as np
import pytest
import respx
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.load import dumps
from langchain_core.vectorstores import InMemoryVectorStore
from llama_index.core.schema import (
    MetadataMode,
    NodeRelationship,
    NodeWithScore,
    QueryBundle,
    RelatedNodeInfo,
    TextNode,
)
from llama_index.core.storage.docstore import SimpleDocumentStore
from rel_support import (
    FAKE_API_KEY,
    OPENAI_BASE_URL,
    FakeEmbeddingsAPI,
    HashEmbedder,
    RecordingHandler,
    openai_embedder,
)

from scar_core.cache import CachedEmbedder
from scar_core.errors import EmbeddingError
from scar_core.eval import Benchmark, EvalConfig, EvalQuery, EvidenceSpan, run_evaluation
from scar_core.eval.report import write_outputs
from scar_langchain import EmbeddingVectors, ScarEmbeddings, SCARRetriever
from scar_llamaindex import ScarEmbedding, SCARNodePostprocessor

SRC = Path(__file__).resolve().parents[2] / "src"

# --------------------------------------------------------------------------------------------
# No unsafe loading anywhere in the source

UNSAFE_MODULES = {"pickle", "cPickle", "_pickle", "dill", "cloudpickle", "marshal", "shelve"}
UNSAFE_CALLS = {"eval", "exec", "__import__"}


def unsafe_uses(source: str) -> list[str]:
    """Every unsafe use in Python ``source``, as ``"line N: what"``; strings and comments skipped."""
    tokens = [
        t
        for t in tokenize.generate_tokens(io.StringIO(source).readline)
        if t.type in (tokenize.NAME, tokenize.OP)
    ]
    found: list[str] = []
    for index, token in enumerate(tokens):
        before = tokens[index - 1].string if index else ""
        after = tokens[index + 1].string if index + 1 < len(tokens) else ""
        line = token.start[0]
        if token.type != tokenize.NAME:
            continue
        if token.string in UNSAFE_MODULES and before != ".":
            found.append(f"line {line}: {token.string}")
        elif token.string == "joblib" and after == ".":
            found.append(f"line {line}: joblib")
        elif token.string in UNSAFE_CALLS and after == "(" and before != ".":
            found.append(f"line {line}: {token.string}(")
        elif token.string == "allow_pickle" and after == "=":
            value = tokens[index + 2].string if index + 2 < len(tokens) else ""
            if value != "False":
                found.append(f"line {line}: allow_pickle={value}")
        elif token.string == "load" and before == "." and after == "(" and index >= 2:
            owner = tokens[index - 2].string
            arguments = _call_arguments(tokens, index + 1)
            if owner == "torch" and "weights_only=True" not in arguments:
                found.append(f"line {line}: torch.load without weights_only=True")
            if owner == "yaml" and "Loader=" not in arguments:
                found.append(f"line {line}: yaml.load without a safe Loader")
        elif token.string == "unsafe_load" and before == ".":
            found.append(f"line {line}: unsafe_load")
    return found


def _call_arguments(tokens: list[tokenize.TokenInfo], open_index: int) -> str:
    """The tokens of a call's arguments, joined without spaces."""
    depth = 0
    parts: list[str] = []
    for token in tokens[open_index:]:
        if token.string == "(":
            depth += 1
        elif token.string == ")":
            depth -= 1
            if depth == 0:
                break
        parts.append(token.string)
    return "".join(parts[1:])


BAD_SNIPPETS = {
    "import pickle\n": "pickle",
    "from pickle import loads\n": "pickle",
    "import dill as d\n": "dill",
    "import marshal\n": "marshal",
    "import shelve\n": "shelve",
    "x = joblib.load(p)\n": "joblib",
    "value = eval(text)\n": "eval(",
    "exec(code, {})\n": "exec(",
    "module = __import__(name)\n": "__import__(",
    "np.load(path, allow_pickle=True)\n": "allow_pickle=True",
    "state = torch.load(path)\n": "torch.load without weights_only=True",
    "state = torch.load(path, weights_only=False)\n": "torch.load without weights_only=True",
    "config = yaml.load(stream)\n": "yaml.load without a safe Loader",
    "config = yaml.unsafe_load(stream)\n": "unsafe_load",
}
SAFE_SNIPPET = '''
"""Evaluation helpers: the cache is never unpickled; pickle is not used; see `scar eval`."""
import ast
model.eval()  # a torch module's evaluation mode, not the builtin
value = ast.literal_eval(text)
array = np.load(path, allow_pickle=False)
state = torch.load(path, weights_only=True, map_location="cpu")
config = yaml.load(stream, Loader=yaml.SafeLoader)
message = "do not eval( this" + 'or exec(' # pickle in a comment
'''


@pytest.mark.parametrize(("snippet", "finding"), list(BAD_SNIPPETS.items()))
def test_the_scanner_catches_each_unsafe_use(snippet: str, finding: str) -> None:
    assert [use.split(": ", 1)[1] for use in unsafe_uses(snippet)] == [finding]


def test_the_scanner_ignores_prose_methods_and_safe_forms() -> None:
    assert unsafe_uses(SAFE_SNIPPET) == []


def test_no_source_file_loads_anything_unsafely() -> None:
    files = sorted(SRC.rglob("*.py"))
    assert len(files) > 30  # the whole tree, not an empty folder
    problems = {
        str(path.relative_to(SRC)): uses
        for path in files
        if (uses := unsafe_uses(path.read_text(encoding="utf-8")))
    }
    assert problems == {}


# --------------------------------------------------------------------------------------------
# The API key never leaks

QUERY = "how does the retransmission timer back off"
TEXTS = [
    "the sender starts the retransmission timer",
    "when the timer expires the segment is sent again",
    "each expiry doubles the timeout",
    "window scaling is negotiated during the handshake",
]


@pytest.fixture
def api() -> Iterator[FakeEmbeddingsAPI]:
    fake = FakeEmbeddingsAPI(8, query=QUERY)
    with respx.mock(base_url=OPENAI_BASE_URL, assert_all_called=False) as router:
        router.post("/embeddings").mock(side_effect=fake)
        yield fake


@pytest.fixture
def every_log() -> Iterator[RecordingHandler]:
    """Every record of every logger (openai's and httpx's included), at DEBUG and up."""
    handler = RecordingHandler()
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


class Recorder(BaseCallbackHandler):
    """Keeps the text of everything LangChain's callbacks hand over."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def on_retriever_start(
        self, serialized: dict[str, Any], query: str, *, run_id: UUID, **kwargs: Any
    ) -> None:
        self.seen.append(repr((serialized, query, kwargs)))

    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.seen.append(repr((documents, kwargs)))

    def on_retriever_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self.seen.append(repr((str(error), kwargs)))


def lc_setup(on_error: str) -> SCARRetriever:
    documents = [
        Document(
            text,
            id=f"c{i}",
            metadata={
                "scar_chunk_id": f"c{i}",
                "scar_document_id": "rfc",
                **({"scar_prev_id": f"c{i - 1}"} if i else {}),
                **({"scar_next_id": f"c{i + 1}"} if i + 1 < len(TEXTS) else {}),
            },
        )
        for i, text in enumerate(TEXTS)
    ]
    store = InMemoryVectorStore(ScarEmbeddings(HashEmbedder(8)))
    store.add_documents(documents, ids=[d.id for d in documents])
    embeddings = ScarEmbeddings(CachedEmbedder(openai_embedder()))
    return SCARRetriever(
        vectorstore=store,
        embeddings=embeddings,
        vector_source=EmbeddingVectors(embeddings),
        budget=None,
        k=2,
        gamma=0.5,
        on_error=on_error,
    )


def li_setup(on_error: str) -> tuple[SCARNodePostprocessor, list[NodeWithScore]]:
    nodes = [TextNode(id_=f"n{i}", text=text) for i, text in enumerate(TEXTS)]
    for i, node in enumerate(nodes):
        if i:
            node.relationships[NodeRelationship.PREVIOUS] = RelatedNodeInfo(node_id=f"n{i - 1}")
        if i + 1 < len(nodes):
            node.relationships[NodeRelationship.NEXT] = RelatedNodeInfo(node_id=f"n{i + 1}")
    docstore = SimpleDocumentStore()
    docstore.add_documents(nodes)
    scar = SCARNodePostprocessor(
        docstore=docstore,
        embed_model=ScarEmbedding(openai_embedder()),
        budget=None,
        gamma=0.5,
        on_error=on_error,
    )
    return scar, [NodeWithScore(node=nodes[1], score=0.8)]


def assert_no_key(*texts: str) -> None:
    for text in texts:
        assert FAKE_API_KEY not in text
        # Nor a recognisable part of it (a 401 body quotes a shortened key).
        assert FAKE_API_KEY[8:24] not in text


@pytest.mark.parametrize("failure", [None, 401, 503])
@pytest.mark.parametrize("on_error", ["raise", "return_seeds"])
async def test_the_key_never_leaks_from_the_langchain_retriever(
    api: FakeEmbeddingsAPI, every_log: RecordingHandler, failure: int | None, on_error: str
) -> None:
    retriever = lc_setup(on_error)
    if failure is not None:
        api.persistent = ("documents", failure)
    recorder = Recorder()
    outputs: list[str] = []
    causes: list[str] = []
    for call in (retriever.invoke, retriever.ainvoke):
        try:
            result = call(QUERY, config={"callbacks": [recorder]})
            if not isinstance(result, list):
                result = await result
            outputs.append(repr(result))
        except EmbeddingError as error:
            assert failure is not None
            assert on_error == "raise"
            outputs.append(f"{error!r} {error}")
            causes.append(str(error.__cause__))
    # The provider's own exception, chained, does quote the key: SCAR's must not.
    assert any(FAKE_API_KEY in cause for cause in causes) == (
        failure == 401 and on_error == "raise"
    )
    assert api.requests  # the key really was used
    assert_no_key(
        *outputs,
        *every_log.messages,
        *recorder.seen,
        repr(retriever),
        str(retriever.model_dump()),
        dumps(retriever),
        repr(retriever._get_ls_params()),
    )


@pytest.mark.parametrize("failure", [None, 401, 503])
@pytest.mark.parametrize("on_error", ["raise", "return_seeds"])
async def test_the_key_never_leaks_from_the_llamaindex_postprocessor(
    api: FakeEmbeddingsAPI, every_log: RecordingHandler, failure: int | None, on_error: str
) -> None:
    scar, incoming = li_setup(on_error)
    if failure is not None:
        api.persistent = ("any", failure)
    outputs: list[str] = []
    causes: list[str] = []
    for use_async in (False, True):
        try:
            bundle = QueryBundle(QUERY)
            output = (
                await scar.apostprocess_nodes(incoming, bundle)
                if use_async
                else scar.postprocess_nodes(incoming, bundle)
            )
            outputs.extend([repr(output)] + [n.node.get_content(MetadataMode.ALL) for n in output])
        except EmbeddingError as error:
            assert failure is not None
            assert on_error == "raise"
            outputs.append(f"{error!r} {error}")
            causes.append(str(error.__cause__))
    assert any(FAKE_API_KEY in cause for cause in causes) == (
        failure == 401 and on_error == "raise"
    )
    assert api.requests
    assert_no_key(
        *outputs,
        *every_log.messages,
        repr(scar),
        scar.to_json(),
        repr(scar.neighbor_source),
        repr(scar._embed_model),
    )


def test_the_key_never_reaches_an_evaluation_report(
    api: FakeEmbeddingsAPI, every_log: RecordingHandler, tmp_path: Path
) -> None:
    documents = {"doc": "".join(TEXTS), "other": "an unrelated document about ports"}
    queries = (EvalQuery(0, QUERY, (EvidenceSpan("doc", 0, 40),)),)
    embedder = CachedEmbedder(openai_embedder())
    results = run_evaluation(
        Benchmark("tiny", documents, queries),
        embedder,
        EvalConfig(k=1, chunk_size=40, methods=("topk", "scar1"), sweep=False, n_resamples=20),
        count_tokens=len,
        show_progress=False,
    )
    written = write_outputs(results, tmp_path / "out", plot=False)
    assert api.requests
    assert written
    assert_no_key(
        *(path.read_text(encoding="utf-8") for path in written.values()), *every_log.messages
    )


# --------------------------------------------------------------------------------------------
# Metadata is data

PAYLOADS = [
    "%s %d %(name)s",
    "{0} {1!r} {name}",
    "{0.__class__.__mro__}",
    "{__import__('os').system('touch PWNED_MARKER')}",
    "${HOME} $(touch PWNED_MARKER) `id`",
]


def payload_ids() -> list[str]:
    return [f"{payload} #{i}" for i, payload in enumerate(PAYLOADS)]


def assert_verbatim(messages: list[str], texts: list[str]) -> None:
    """Every payload a message or output shows appears whole, never formatted or half-eaten."""
    for text in messages + texts:
        for payload in PAYLOADS:
            head = payload[:6]
            if head in text:
                assert payload in text or repr(payload)[1:-1] in text, (payload, text)


@pytest.mark.parametrize("budget", [None, 4])
@pytest.mark.parametrize("return_chunks", [False, True])
async def test_langchain_treats_payloads_as_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: int | None, return_chunks: bool
) -> None:
    monkeypatch.chdir(tmp_path)
    ids = payload_ids()
    documents = []
    for i, chunk_id in enumerate(ids):
        metadata: dict[str, Any] = {
            "scar_chunk_id": chunk_id,
            "scar_document_id": PAYLOADS[3],
            "note": PAYLOADS[i],
            "scar_prev_id": ids[i - 1] if i else PAYLOADS[0],  # the first links nowhere real
            "scar_next_id": ids[i + 1] if i + 1 < len(ids) else 17,  # a link of the wrong type
        }
        documents.append(Document(f"text {i}: {PAYLOADS[i]}", id=chunk_id, metadata=metadata))
    embedder = HashEmbedder(8)
    store = InMemoryVectorStore(ScarEmbeddings(embedder))
    store.add_documents(documents, ids=ids)
    store.store[ids[2]]["vector"] = [float("nan")] * 8  # a neighbour skipped with a warning
    hits = {ids[1], ids[3]}
    retriever = SCARRetriever(
        vectorstore=store,
        budget=budget,
        k=2,
        gamma=0.1,
        window=2,
        return_chunks=return_chunks,
        search_kwargs={"filter": lambda d: d.id in hits},
    )
    handler = RecordingHandler()
    logging.getLogger().addHandler(handler)
    try:
        sync = retriever.invoke(PAYLOADS[1])
        asynchronous = await retriever.ainvoke(PAYLOADS[1])
    finally:
        logging.getLogger().removeHandler(handler)
    assert sync == asynchronous
    texts = [d.page_content for d in sync] + [repr(d.metadata) for d in sync]
    assert any("skipped" in m and repr(ids[2]) in m for m in handler.messages)
    assert_verbatim(handler.messages, texts)
    chunk_ids = [c for d in sync for c in d.metadata.get("scar_chunk_ids", [d.id])]
    assert {ids[1], ids[3]} <= set(chunk_ids)
    assert all(c in ids for c in chunk_ids)
    assert not any(Path(tmp_path).iterdir())  # nothing ran: no marker file


@pytest.mark.parametrize("budget", [None, 4])
@pytest.mark.parametrize("merge_passages", [False, True])
async def test_llamaindex_treats_payloads_as_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: int | None, merge_passages: bool
) -> None:
    monkeypatch.chdir(tmp_path)
    ids = payload_ids()
    embedder = HashEmbedder(8)
    nodes = []
    for i, node_id in enumerate(ids):
        node = TextNode(
            id_=node_id,
            text=f"text {i}: {PAYLOADS[i]}",
            metadata={"note": PAYLOADS[i], "prev": ids[i - 1] if i else 3, "doc": PAYLOADS[3]},
            embedding=embedder.embed_documents([PAYLOADS[i]])[0].tolist(),
        )
        if i + 1 < len(ids):
            node.relationships[NodeRelationship.NEXT] = RelatedNodeInfo(node_id=ids[i + 1])
        nodes.append(node)
    nodes[2].embedding = [float("inf")] * 8  # a neighbour skipped with a warning
    docstore = SimpleDocumentStore()
    docstore.add_documents(nodes)
    scar = SCARNodePostprocessor(
        docstore=docstore,
        budget=budget,
        k=2,
        gamma=0.1,
        window=2,
        previous_id_key="prev",
        document_id_key="doc",
        merge_passages=merge_passages,
        embed_model=ScarEmbedding(embedder),
    )
    incoming = [NodeWithScore(node=nodes[1], score=0.9), NodeWithScore(node=nodes[3], score=0.5)]
    bundle = QueryBundle(PAYLOADS[2], embedding=embedder.embed_query(PAYLOADS[1]).tolist())
    handler = RecordingHandler()
    logging.getLogger().addHandler(handler)
    try:
        sync = scar.postprocess_nodes(incoming, bundle)
        asynchronous = await scar.apostprocess_nodes(incoming, bundle)
    finally:
        logging.getLogger().removeHandler(handler)
    assert [n.node.node_id for n in sync] == [n.node.node_id for n in asynchronous]
    texts = [n.node.get_content(MetadataMode.LLM) for n in sync]
    texts += [repr(n.node.metadata) for n in sync]
    assert any(repr(ids[2]) in m for m in handler.messages)  # the skipped neighbour, named
    assert_verbatim(handler.messages, texts)
    for item in sync:
        for i, payload in enumerate(PAYLOADS):
            if f"text {i}:" in item.node.get_content():
                assert f"text {i}: {payload}" in item.node.get_content()
    assert not any(Path(tmp_path).iterdir())
    assert np.isfinite([n.score for n in sync if n.score is not None]).all()
