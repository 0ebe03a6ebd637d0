"""The paper-reproduction notebook runs top to bottom on paper4_dev, and is kept without outputs."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "paper_reproduction.ipynb"


def test_notebook_is_committed_without_outputs() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == []
            assert cell.execution_count is None


@pytest.mark.bench
@pytest.mark.model
@pytest.mark.slow
def test_notebook_reproduces_the_analysis_on_paper4_dev(
    bench_dir: Path, eval_cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nbclient import NotebookClient

    monkeypatch.setenv("SCAR_BENCH_DIR", str(bench_dir))
    monkeypatch.setenv("SCAR_CACHE_DIR", str(eval_cache_dir))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=900,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    )
    client.execute()
    outputs = [
        output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
    ]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "\n".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "paper4_dev: 160 questions over 4 documents" in text
    markdown = "\n".join(
        o["data"].get("text/markdown", "") for o in outputs if o.output_type == "display_data"
    )
    assert "## Fragmented queries" in markdown
    assert "| scar1 minus |" in markdown
    assert any("image/png" in o.get("data", {}) for o in outputs)
