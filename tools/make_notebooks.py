"""Write the quickstart notebooks (outputs empty; CI executes them)."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parents[1] / "notebooks"

SETUP = """import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the bundled MiniLM needs no download

from scar_core.demo.sample import sample_corpus_dir

texts = {path.name: path.read_text(encoding="utf-8") for path in sorted(sample_corpus_dir().iterdir())}
question = "How many times is a failed webhook delivery retried, and how far apart?"
print(list(texts))"""

LANGCHAIN = [
    new_markdown_cell(
        "# SCAR with LangChain: quickstart\n\n"
        "`SCARRetriever` replaces `vectorstore.as_retriever()`. It retrieves seed chunks, then "
        "adds a seed's neighbours only when they continue its evidence. Everything here runs "
        "offline with the bundled all-MiniLM-L6-v2 model and the sample documents that ship "
        "with the package."
    ),
    new_code_cell(SETUP),
    new_markdown_cell(
        "## 1. Split, link, store\n\n`link_chunks` gives every chunk a stable id and its "
        "previous/next ids in metadata; the store needs nothing else."
    ),
    new_code_cell(
        """from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_text_splitters import RecursiveCharacterTextSplitter

from scar_langchain import ScarEmbeddings, link_chunks

docs = [Document(page_content=text, metadata={"source": name}) for name, text in texts.items()]
splitter = RecursiveCharacterTextSplitter(chunk_size=300, chunk_overlap=0, add_start_index=True)
chunks = link_chunks(splitter.split_documents(docs))
vectorstore = InMemoryVectorStore(ScarEmbeddings())
vectorstore.add_documents(chunks, ids=[chunk.id for chunk in chunks])
print(len(chunks), "chunks;", "first chunk's links:",
      {key: value for key, value in chunks[0].metadata.items() if key.startswith("scar_")})"""
    ),
    new_markdown_cell(
        "## 2. Retrieve with the shipped defaults\n\nThe default is *budgeted* SCAR: 10 chunks, "
        "where extending a passage competes with further search hits for every slot."
    ),
    new_code_cell(
        """from scar_langchain import SCARRetriever

retriever = SCARRetriever(vectorstore=vectorstore)
passages = retriever.invoke(question)
for passage in passages:
    print(passage.metadata["scar_chunk_ids"].__len__(), "chunk(s):", passage.page_content[:160].replace("\\n", " "), "...")"""
    ),
    new_markdown_cell("Each passage says which chunks it holds and why each neighbour was added."),
    new_code_cell(
        """for entry in passages[0].metadata["scar_chunks"]:
    print(entry)"""
    ),
    new_markdown_cell(
        "## 3. The paper's settings are one argument away\n\n`budget=None` gives plain SCAR "
        "(λ = 0.1, γ = 0.8, window ±1): each neighbour is judged against its own seed."
    ),
    new_code_cell(
        """paper = SCARRetriever(vectorstore=vectorstore, budget=None, k=3, lambda_=0.1, gamma=0.8, window=1)
for passage in paper.invoke(question):
    print(passage.metadata["scar_chunk_ids"].__len__(), "chunk(s), seed score", round(passage.metadata["scar_score"], 3))"""
    ),
    new_markdown_cell("## 4. In a chain\n\nA fake chat model keeps this offline; swap in any LLM."),
    new_code_cell(
        """from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough

prompt = ChatPromptTemplate.from_template("Context:\\n{context}\\n\\nQuestion: {question}")
llm = FakeListChatModel(responses=["(the model's answer)"])
chain = (
    {"context": retriever | (lambda docs: "\\n\\n".join(d.page_content for d in docs)), "question": RunnablePassthrough()}
    | prompt
    | llm
    | StrOutputParser()
)
print(chain.invoke(question))"""
    ),
    new_markdown_cell("## 5. With OpenAI embeddings (skipped without an API key)"),
    new_code_cell(
        """if os.environ.get("OPENAI_API_KEY"):
    from scar_core.embedders import OpenAIEmbedder

    openai_store = InMemoryVectorStore(ScarEmbeddings(OpenAIEmbedder("text-embedding-3-small")))
    openai_store.add_documents(chunks, ids=[chunk.id for chunk in chunks])
    print(SCARRetriever(vectorstore=openai_store).invoke(question)[0].page_content[:200])
else:
    print("OPENAI_API_KEY is not set: skipped.")"""
    ),
]

LLAMAINDEX = [
    new_markdown_cell(
        "# SCAR with LlamaIndex: quickstart\n\n`SCARNodePostprocessor` goes into any query "
        "engine. It reads neighbours from the PREVIOUS/NEXT relationships every node parser sets, "
        "and their vectors from the index's stores. Offline, with the bundled MiniLM."
    ),
    new_code_cell(SETUP),
    new_code_cell(
        """from llama_index.core import Document, VectorStoreIndex
from llama_index.core.llms import MockLLM
from llama_index.core.node_parser import SentenceSplitter

from scar_llamaindex import SCARNodePostprocessor, ScarEmbedding

embed_model = ScarEmbedding()
documents = [Document(text=text, metadata={"source": name}) for name, text in texts.items()]
index = VectorStoreIndex.from_documents(
    documents, transformations=[SentenceSplitter(chunk_size=96, chunk_overlap=0)], embed_model=embed_model
)
print(len(index.docstore.docs), "nodes")"""
    ),
    new_markdown_cell("## Query engine with SCAR (shipped defaults: budgeted selection)"),
    new_code_cell(
        """postprocessor = SCARNodePostprocessor.from_index(index)
engine = index.as_query_engine(similarity_top_k=3, node_postprocessors=[postprocessor], llm=MockLLM())
response = engine.query(question)
for node in response.source_nodes:
    print(f"{node.score:.3f}", node.node.metadata.get("scar_origin"), node.node.get_content()[:100].replace("\\n", " "))"""
    ),
    new_markdown_cell("## The paper's settings, and one node per passage"),
    new_code_cell(
        """paper = SCARNodePostprocessor.from_index(index, budget=None, lambda_=0.1, gamma=0.8, window=1, merge_passages=True)
engine = index.as_query_engine(similarity_top_k=3, node_postprocessors=[paper], llm=MockLLM())
for node in engine.query(question).source_nodes:
    print(f"{node.score:.3f}", node.node.get_content()[:200].replace("\\n", " "))"""
    ),
    new_markdown_cell("## Async works natively"),
    new_code_cell(
        """response = await index.as_query_engine(
    similarity_top_k=3, node_postprocessors=[postprocessor], llm=MockLLM()
).aquery(question)
print(len(response.source_nodes), "nodes")"""
    ),
]


def main() -> None:
    """Write both notebooks."""
    for name, cells in (("langchain_quickstart", LANGCHAIN), ("llamaindex_quickstart", LLAMAINDEX)):
        notebook = new_notebook(cells=cells)
        notebook.metadata["kernelspec"] = {
            "name": "python3",
            "display_name": "Python 3",
            "language": "python",
        }
        nbformat.write(notebook, ROOT / f"{name}.ipynb")


if __name__ == "__main__":
    main()
