"""Write the quickstart notebooks from the README's code, so the two never drift apart.

Run ``python tools/make_notebooks.py`` after editing a README quickstart; ``tests/test_notebooks.py``
fails while a notebook differs from what this script would write.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
TITLES = {
    "langchain_quickstart.ipynb": (
        '# SCAR with LangChain\n\nThe drop-in swap: `vs.as_retriever(search_kwargs={"k": 4})` becomes '
        "`SCARRetriever(vectorstore=vs, k=4)`: the same four chunks' worth of context, spent on "
        "the evidence. Runs offline with the bundled MiniLM and sample."
    ),
    "llamaindex_quickstart.ipynb": (
        "# SCAR with LlamaIndex\n\n`SCARNodePostprocessor` returns as many nodes as it receives, "
        "chosen better. Runs offline with the bundled MiniLM and sample."
    ),
}


def notebooks() -> dict[str, nbformat.NotebookNode]:
    """Return each notebook's name and content, built from the README's Python blocks."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)
    built = {}
    for (name, title), code in zip(TITLES.items(), blocks, strict=True):
        notebook = nbformat.v4.new_notebook()
        notebook.cells = [
            nbformat.v4.new_markdown_cell(title),
            nbformat.v4.new_code_cell(code.strip()),
        ]
        notebook.metadata["kernelspec"] = {
            "name": "python3",
            "display_name": "Python 3",
            "language": "python",
        }
        built[name] = notebook
    return built


def main() -> None:
    """Write the notebooks into ``notebooks/``."""
    for name, notebook in notebooks().items():
        nbformat.write(notebook, ROOT / "notebooks" / name)


if __name__ == "__main__":
    main()
