"""``import scar_core`` needs numpy only; heavy backends load when first used, never before."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import scar_core

HEAVY = (
    "torch",
    "transformers",
    "sentence_transformers",
    "openai",
    "httpx",
    "huggingface_hub",
    "tiktoken",
    "langchain_core",
    "llama_index",
)


def run_python(code: str, prelude: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(prelude) + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def run_with_heavy_packages_blocked(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` where any attempt to import a heavy package raises (even a lookup)."""
    prelude = f"""
        import importlib.abc, sys
        BLOCKED = {HEAVY!r}
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ImportError(f"{{name}} is blocked in this test")
                return None
        sys.meta_path.insert(0, Block())
        """
    return run_python(code, prelude)


def run_with_heavy_packages_absent(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` as if the heavy packages were not installed."""
    prelude = f"""
        import sys
        for name in {HEAVY!r}:
            sys.modules[name] = None
        """
    return run_python(code, prelude)


def test_the_core_imports_and_runs_without_any_heavy_package(tmp_path: object) -> None:
    completed = run_with_heavy_packages_blocked(
        f"""
        import numpy as np, scar_core
        from scar_core import (
            CachedEmbedder, VectorCache, expand, parent_retrieval, static_window, top_k,
        )
        from scar_core.embedders import Embedder, OpenAIEmbedder, SentenceTransformerEmbedder
        vectors = {{"a": np.array([1.0, 0.0]), "b": np.array([0.9, 0.1])}}
        links = {{"a": (None, "b"), "b": ("a", None)}}
        assert expand(np.array([1.0, 0.0]), ["a"], links, vectors).chunk_ids == ["a", "b"]
        assert top_k(np.array([1.0, 0.0]), ["a"], links, vectors).chunk_ids == ["a"]
        with VectorCache({str(tmp_path)!r} + "/v.sqlite") as cache:
            cache.put_many("m", ["t"], np.ones((1, 2)))
        loaded = [m for m in {HEAVY!r} if m in sys.modules]
        assert not loaded, loaded
        print("ok")
        """
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "ok"


def test_asking_for_a_missing_backend_names_its_extra() -> None:
    completed = run_with_heavy_packages_absent(
        """
        from scar_core import MissingDependencyError, OpenAIEmbedder, SentenceTransformerEmbedder
        from scar_core.baselines import CrossEncoderReranker
        for make in (
            lambda: SentenceTransformerEmbedder(),
            lambda: CrossEncoderReranker("x"),
            lambda: OpenAIEmbedder(api_key="k").embed_query("q"),
        ):
            try:
                make()
            except MissingDependencyError as error:
                print(error)
        """
    )
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.strip().splitlines()
    assert len(lines) == 3
    assert "scar-retrieval[sentence-transformers]" in lines[0]
    assert "scar-retrieval[sentence-transformers]" in lines[1]
    assert "scar-retrieval[openai]" in lines[2]


def test_the_new_public_names_are_exported() -> None:
    expected = {
        "CachedEmbedder",
        "CrossEncoderReranker",
        "Embedder",
        "InvalidTextError",
        "OpenAIEmbedder",
        "SentenceTransformerEmbedder",
        "VectorCache",
        "available_offline_cross_encoder",
        "parent_retrieval",
        "static_window",
        "top_k",
    }
    assert expected <= set(scar_core.__all__)
    for name in expected:
        assert getattr(scar_core, name) is not None
    import scar_core.embedders as embedders

    assert set(embedders.__all__) == {
        "CachedEmbedder",
        "Embedder",
        "OpenAIEmbedder",
        "SentenceTransformerEmbedder",
    }
    assert embedders.CachedEmbedder is scar_core.CachedEmbedder
