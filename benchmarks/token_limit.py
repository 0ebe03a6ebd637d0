"""One token-budget selection at the hit limit: its time and peak memory, whatever ``max_tokens``.

``budget_select`` at k = 100 (``MAX_TOKEN_AUCTION_HITS``) on synthetic documents, for four
layouts of the hits (the best by cosine among random chunks; chunks whose cosines are all nearly
equal, so that every chunk bids about the same per token; one run of 100 chunks; every fourth
chunk of one document), three ranges of chunk lengths and budgets from 1,000 to 400,000 tokens.
Prints every case and the slowest and largest; peak memory is tracemalloc's. From the repository
root::

    python benchmarks/token_limit.py
"""

from __future__ import annotations

import time
import tracemalloc

import numpy as np

from scar_core import BudgetSettings, Chunk, budget_select, link_sequence
from scar_core._settings import MAX_TOKEN_AUCTION_HITS

LAYOUTS = ("random", "near-equal", "one run", "every fourth")
LENGTHS = ((100, 500), (1, 20), (400, 4000))
BUDGETS = (1_000, 4_000, 4_096, 5_000, 16_000, 64_000, 128_000, 400_000)


def layout(name: str, k: int = MAX_TOKEN_AUCTION_HITS, dim: int = 16):
    """The query, the k hits best first, and the chunks of ``name``'s documents."""
    rng = np.random.default_rng(0)
    documents, length = (k // 4 + 1, 40) if name in ("random", "near-equal") else (1, 4 * k + 8)
    query = rng.normal(size=dim)
    chunks: dict[str, Chunk] = {}
    for d in range(documents):
        for link in link_sequence(f"d{d}", [f"d{d}-{p}" for p in range(length)]):
            noise = rng.normal(size=dim)
            vector = query + 0.05 * noise if name == "near-equal" else noise
            chunks[link.chunk_id] = Chunk(link.chunk_id, vector, link.previous_id, link.next_id)
    ids = list(chunks)
    if name == "one run":
        ranked = ids[4 : 4 + k]
    elif name == "every fourth":
        ranked = ids[::4][:k]
    else:
        ranked = sorted(ids, key=lambda c: -float(np.dot(chunks[c].vector, query)))[:k]
    return query, ranked, chunks


def main() -> None:
    """Time every layout, length range and budget; print each and the worst."""
    slowest = largest = (0.0, "")
    print(
        "| layout | tokens per chunk | max_tokens | seconds | peak MiB |\n|---|---|---:|---:|---:|"
    )
    for name in LAYOUTS:
        query, ranked, chunks = layout(name)
        for low, high in LENGTHS:
            rng = np.random.default_rng(1)
            tokens = {c: int(rng.integers(low, high + 1)) for c in chunks}
            for limit in BUDGETS:
                settings = BudgetSettings(k=MAX_TOKEN_AUCTION_HITS, max_tokens=limit)
                tracemalloc.start()
                start = time.perf_counter()
                selection = budget_select(query, ranked, chunks, settings, tokens)
                seconds = time.perf_counter() - start
                peak = tracemalloc.get_traced_memory()[1] / 2**20
                tracemalloc.stop()
                spent = sum(tokens[c] for c in selection.chunk_ids)
                assert spent <= limit or len(selection.chunk_ids) == 1, (name, limit, spent)
                case = f"{name}, {low}-{high} tokens, max_tokens={limit:,}"
                slowest, largest = max(slowest, (seconds, case)), max(largest, (peak, case))
                print(f"| {name} | {low}-{high} | {limit:,} | {seconds:.3f} | {peak:.0f} |")
    print(f"\nslowest: {slowest[0]:.2f} s ({slowest[1]}); largest: {largest[0]:.0f} MiB "
          f"({largest[1]})")  # fmt: skip


if __name__ == "__main__":
    main()
