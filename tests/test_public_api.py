"""The public API is what each package's ``__all__`` names, pinned here; the rest is private."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

PUBLIC = {
    "scar_core": [
        "BudgetSettings", "Chunk", "ChunkLinks", "DataFormatError", "Decision", "EmbeddingError",
        "InvalidSettingsError", "InvalidVectorError", "MissingDependencyError",
        "MissingQueryError", "NeighborFetchError", "PaperSettings", "QueryDriver", "ScarError",
        "ScarSettings", "Selected", "Selection", "VectorMemory", "__version__",
        "boundary_penalty", "budget_select", "chunk_id_for", "default_keep", "distinct_ids",
        "expansion_score", "link_sequence", "paper_expand", "paper_threshold", "select", "stitch",
    ],
    "scar_langchain": [
        "LinkReport", "SCARRetriever", "link_chunks", "link_store", "replace_documents",
    ],
    "scar_llamaindex": ["SCARNodePostprocessor"],
}  # fmt: skip


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_all_names_exactly_the_public_api(package: str) -> None:
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(PUBLIC[package])
    assert all(hasattr(module, name) for name in module.__all__)


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_every_module_but_the_package_is_private(package: str) -> None:
    module = importlib.import_module(package)
    public = [m.name for m in pkgutil.iter_modules(module.__path__) if not m.name.startswith("_")]
    assert public == []
