"""Does zero-label calibration land near the best continuity bonus found with labels?

For each embedding model and dev set: `scar calibrate` suggests alpha from the corpus alone; then
`scar eval` measures budgeted SCAR at B = 7, 10, 12 for a grid of alpha and for the suggestion,
on fragmented queries. Prints, per case, the recall at the suggested alpha, the best recall over
the grid (labels), the gap in points, and plain top-B.

Usage:
    python benchmarks/calibration_check.py --bench ../shared/bench --cache-dir /tmp/scar-cache \
        --model bundled --model /path/to/m2v-minilm
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

GRID = [0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4]
BUDGETS = [7, 10, 12]
SETS = {
    "ContractNLI": ("legalbench-rag/benchmarks/contractnli.json", "legalbench-rag/corpus"),
    "PrivacyQA": ("legalbench-rag/benchmarks/privacy_qa.json", "legalbench-rag/corpus"),
    "paper4_dev": ("paper4/paper4_dev.json", "paper4/corpus"),
}


def _scar(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "scar_core.cli", *args], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", type=Path, default=Path("../shared/bench"))
    parser.add_argument("--cache-dir", default="/tmp/scar-cache")
    parser.add_argument("--model", action="append", default=[], help="'bundled' or a model path")
    args = parser.parse_args()
    models = args.model or ["bundled"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in models:
            model_args = [] if model == "bundled" else ["--model", model]
            for name, (benchmark, corpus) in SETS.items():
                corpus_dir = args.bench / corpus
                files = json.loads((args.bench / benchmark).read_text(encoding="utf-8"))["tests"]
                used = sorted({s["file_path"] for t in files for s in t["snippets"]})
                calibration_corpus = Path(tmp) / f"{name}-corpus.jsonl"
                with calibration_corpus.open("w", encoding="utf-8") as out:
                    for file_path in used:
                        text = (corpus_dir / file_path).read_text(encoding="utf-8")
                        out.write(json.dumps({"id": file_path, "text": text}) + "\n")
                suggestion_file = Path(tmp) / f"{name}-calibration.json"
                with suggestion_file.open("w", encoding="utf-8") as out:
                    subprocess.run(
                        [
                            sys.executable,
                            "-m",
                            "scar_core.cli",
                            "calibrate",
                            str(calibration_corpus),
                            "--cache-dir",
                            args.cache_dir,
                            "--json",
                            "--no-progress",
                            *model_args,
                        ],
                        check=True,
                        stdout=out,
                    )
                alpha = json.loads(suggestion_file.read_text())["continuity_bonus"]
                methods = [f"top{b}" for b in BUDGETS] + [
                    f"budget{b}_a{a}" for b in BUDGETS for a in [*GRID, alpha]
                ]
                out_dir = Path(tmp) / f"{name}-eval"
                _scar(
                    "eval",
                    str(args.bench / benchmark),
                    "--corpus",
                    str(corpus_dir),
                    "--cache-dir",
                    args.cache_dir,
                    "--methods",
                    ",".join(dict.fromkeys(methods)),
                    "--reference",
                    f"top{BUDGETS[0]}",
                    "--bootstrap",
                    "200",
                    "--no-sweep",
                    "--no-plot",
                    "--no-progress",
                    "--out",
                    str(out_dir),
                    *model_args,
                )
                results = json.loads((out_dir / "results.json").read_text())["groups"][
                    "fragmented"
                ]["methods"]
                for budget in BUDGETS:
                    grid = {a: results[f"budget{budget}_a{a}"]["recall"] for a in GRID}
                    best = max(grid, key=lambda a: grid[a])
                    chosen = results[f"budget{budget}_a{alpha}"]["recall"]
                    rows.append(
                        (
                            model,
                            name,
                            budget,
                            alpha,
                            chosen,
                            best,
                            grid[best],
                            results[f"top{budget}"]["recall"],
                        )
                    )
    print(
        "| model | set | B | calibrated alpha | recall (calibrated) | best alpha (labels) | best recall | gap (pts) | top-B |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for model, name, budget, alpha, chosen, best, best_recall, top in rows:
        label = "all-MiniLM-L6-v2" if model == "bundled" else Path(model).name
        print(
            f"| {label} | {name} | {budget} | {alpha:.3f} | {chosen:.3f} | {best} | {best_recall:.3f} | {100 * (best_recall - chosen):.1f} | {top:.3f} |"
        )


if __name__ == "__main__":
    main()
