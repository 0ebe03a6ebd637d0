"""Character recall of ``budgettokT`` beside ``toptokT`` at equal token budgets (issue 45).

For each dev set and scope, ``scar eval`` runs ``toptokT`` and ``budgettokT_hH`` at T = 1000, 2000
and 4000 (cl100k_base tokens when tiktoken is installed), and this script prints the mean evidence
character recall of every cell, the difference, and the chunks and tokens each method returned.
``H``, the hits SCAR weighs (``SCARRetriever(k=H, max_tokens=T)``), grows with the budget as the
README advises: ``H = max(20, ceil(T / 100))``, 20 up to T = 2000 and 40 at T = 4000 (20 hits and
their neighbours hold too few tokens to fill 4,000 in a short document). From the repository root::

    python benchmarks/token_fairness.py --bench ../shared/bench --out /tmp/token-fairness
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from scar_tools.cli import main as scar

SETS = {  # name: (benchmark file, corpus folder), relative to --bench
    "privacy_qa": ("legalbench-rag/benchmarks/privacy_qa.json", "legalbench-rag/corpus"),
    "contractnli": ("legalbench-rag/benchmarks/contractnli.json", "legalbench-rag/corpus"),
    "paper4": ("paper4/paper4_dev.json", "paper4/corpus"),
}
BUDGETS = (1000, 2000, 4000)


def hits_for(limit: int) -> int:
    """The hits SCAR weighs at a budget of ``limit`` tokens: 20, or one per 100 tokens."""
    return max(20, -(-limit // 100))


def run(
    bench: Path, out: Path, name: str, scope: str, budgets: list[int]
) -> dict[str, dict[str, float]]:
    """One ``scar eval`` run; returns each method's means over all queries."""
    benchmark, corpus = SETS[name]
    folder = out / f"{name}_{scope}"
    methods = ",".join(f"toptok{t},budgettok{t}_h{hits_for(t)}" for t in budgets)
    code = scar(["eval", str(bench / benchmark), "--corpus", str(bench / corpus), "--scope", scope,
                 "--methods", methods, "--no-sweep", "--no-plot", "--bootstrap", "200",
                 "--no-progress", "--out", str(folder)])  # fmt: skip
    if code:
        raise SystemExit(f"scar eval failed on {name}, {scope}")
    results = json.loads((folder / "results.json").read_text())
    means: dict[str, dict[str, float]] = results["groups"]["all"]["methods"]
    return means


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bench", type=Path, default=Path("../shared/bench"))
    parser.add_argument("--out", type=Path, default=Path("/tmp/token-fairness"))
    parser.add_argument("--sets", nargs="+", choices=list(SETS), default=list(SETS))
    parser.add_argument("--scopes", nargs="+", choices=["document", "corpus"],
                        default=["document", "corpus"])  # fmt: skip
    parser.add_argument("--budgets", nargs="+", type=int, default=list(BUDGETS))
    args = parser.parse_args()
    rows = [
        "| set | scope | T | H | toptok char recall | budgettok char recall | difference | "
        "chunks (top / budget) | tokens (top / budget) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    worst = 1.0
    for name in args.sets:
        for scope in args.scopes:
            means = run(args.bench, args.out, name, scope, args.budgets)
            for t in args.budgets:
                top, budget = means[f"toptok{t}"], means[f"budgettok{t}_h{hits_for(t)}"]
                gap = budget["char_recall"] - top["char_recall"]
                worst = min(worst, gap)
                rows.append(
                    f"| {name} | {scope} | {t} | {hits_for(t)} | {top['char_recall']:.3f} | "
                    f"{budget['char_recall']:.3f} | {gap:+.3f} | {top['chunks']:.1f} / "
                    f"{budget['chunks']:.1f} | {top['tokens']:.0f} / {budget['tokens']:.0f} |"
                )
            print("\n".join(rows), flush=True)
    print(f"\nworst difference (budgettok - toptok): {worst:+.3f}")
    sys.exit(0)


if __name__ == "__main__":
    main()
