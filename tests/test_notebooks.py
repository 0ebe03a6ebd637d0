"""The quickstart notebooks are the README's code, and they run from top to bottom."""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from make_notebooks import notebooks  # noqa: E402


@pytest.mark.parametrize("name", sorted(notebooks()))
def test_each_notebook_is_what_the_readme_says(name: str) -> None:
    stored = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    built = notebooks()[name]
    assert [c.source for c in stored.cells] == [c.source for c in built.cells], (
        "run python tools/make_notebooks.py"
    )


@pytest.mark.model
@pytest.mark.parametrize("name", sorted(notebooks()))
def test_each_notebook_runs_and_shows_the_same_number_of_chunks(name: str) -> None:
    notebook = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    ).execute()
    output = "".join(
        o.get("text", "")
        for c in notebook.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.get("name") == "stdout"
    )
    if name.startswith("langchain"):
        plain, scar = output.split("== SCAR")
        assert plain.count("|") == scar.count("|") == 4
        assert "neighbor" in scar
        assert "neighbor" not in plain
    else:
        assert output.count("|") == 4
