"""Issue 46: signals beyond the cosine bid, and a selection that never drops what a smaller k had.

Measures candidate selections on the dev protocol of ``never_worse.py`` (same models, sets,
scopes, stress conditions, budgets B in {3, 5, 7, 10, 12, 15}, 500-character chunks, chunk
recall) and compares every candidate, model and condition with the default and with the hindsight
ceiling of the cosine-bid family (the best of the rules in ``results/never_worse.json``, picked
separately in every scope, set and B, as if the labels were known).

Candidates (``CANDIDATES``; all but ``agreeq``/``agreen`` are *nested*: the B-chunk selection is
a prefix of the (B+1)-chunk one, so recall is monotone in B by construction):

* ``seedrel``: the paper's rule, budgeted in seed order. Hits are walked best first; a hit takes a
  slot, then its neighbours (1 then 2 steps away, both directions) take slots while the paper's
  rule accepts them, ``S = cos(q, n) - 0.1 * b > 0.8 * cos(q, seed)``, a rejection ending the walk
  in that direction (chunks already chosen are passed through). The first B chunks of that order
  over the top-B hits are returned. ``seedrel2``: the two best hits first, then the walk;
  ``seedrel50``: gamma 0.5.
* ``seedmerge``: one chunk per step: an unchosen hit of the top t bids its cosine; a chunk next to
  a chosen one, on the walk out of seed c, bids ``S + (1 - gamma) * cos(q, c)`` (it beats its
  seed's cosine exactly when the paper's rule accepts it); gamma 0.8 (``seedmerge50``: 0.5).
* ``joint``: ``seedrel2`` with a joint embedding as the judge instead of ``S`` and ``gamma``: a
  neighbour ``n`` reached from chunk ``p`` is accepted when ``cos(q, e(p + n)) > cos(q, e(p))``,
  where ``e(p + n)`` embeds the two texts joined in document order. No weight, no threshold.
  Opt-in cost: one embedding per linked pair (query independent, cached per corpus here).
* ``nested``: the default's bids filled one chunk at a time, so the B-selection is nested in B:
  the two best hits, then at each step t the chunk with the best marginal bid (its cosine plus
  ``alpha - 0.1 b`` per linked chosen chunk; a run of two or three neighbours bids its mean per
  chunk and its first chunk is added), from the candidates of the top-t hits, with ``alpha`` the
  default's per-query bonus at t.
* ``agreeq``: the default auction with ``alpha`` times the first stage's agreement, the share of
  the two best hits' one-step neighbours that rank within the top 2B (one search of depth 2B).
* ``agreen``: the default auction where only pairs whose non-hit chunk ranks within the top 2B
  get the bonus.
* ``ship``: the default itself (``never_worse.py``'s copy of the exact DP), for per-query figures.

The embeddings come through ``never_worse.load_set`` and its cache (``--cache-dir``); the
per-query recalls go to ``--work``, one JSON per model, condition, scope and set (resumable: only
rules missing from a file are run). ``--report`` merges their means into the committed
``results/never_worse.json`` (model-condition pairs whose top-B recall differs from the committed
one, i.e. other embeddings, are left out) and prints every table. ``--ceiling FILE`` puts the
models of another ``never_worse.py --out`` table in place of the committed ones, for a model
whose embeddings changed (m2v distilled afresh: its own ceiling, from the same embeddings)::

    python benchmarks/weak_first_stage.py --models minilm --conditions base,noisy,template,hard \
        --rules ship,seedrel,seedrel2,seedrel50,seedmerge,seedmerge50,nested,agreeq,agreen,joint \
        --work /tmp/wfs/cand
    python benchmarks/weak_first_stage.py --report --work /tmp/wfs/cand \
        --ceiling benchmarks/results/never_worse_m2v_fresh.json \
        --out benchmarks/results/weak_first_stage.json
    python benchmarks/weak_first_stage.py --study minilm,base    # complete answers, signals
    python benchmarks/weak_first_stage.py --models minilm --noise-seeds 0,1,2,3
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import never_worse as nw

from scar_core import expansion_score, paper_threshold

BUDGETS = nw.BUDGETS
MAXB = max(BUDGETS)
GAMMA = 0.8
LAMBDA = nw.LAMBDA
WINDOW = nw.WINDOW
HERE = Path(__file__).resolve().parent
CEILING_FILE = HERE / "results" / "never_worse.json"


def ceiling_table(extra: Path | None = None) -> dict:
    """The committed ``never_worse.json`` table, model by model.

    Args:
        extra: Another ``never_worse.py --out`` table (e.g. one model run again with fresh
            embeddings); its models replace the committed ones.
    """
    table = json.loads(CEILING_FILE.read_text())
    if extra is not None:
        table.update(json.loads(extra.read_text()))
    return table


# --------------------------------------------------------------------------- helpers


def linked(data: nw.Prepared, a: int, b: int) -> bool:
    """Rows ``a`` and ``b`` are adjacent chunks of one document."""
    lo, hi = min(a, b), max(a, b)
    return lo >= 0 and hi < len(data.first) and hi == lo + 1 and data.first[lo] == data.first[hi]


def in_doc(data: nw.Prepared, row: int, of: int) -> bool:
    return data.first[of] <= row < data.last[of]


def prefixes(order: Sequence[int]) -> dict[int, list[int]]:
    return {b: list(order[:b]) for b in BUDGETS}


# --------------------------------------------------------------------------- seed-relative


def seed_order(data: nw.Prepared, q: int, accept: Callable[[int, int, int], bool],
               keep: int = 0, depth: int = MAXB) -> list[int]:  # fmt: skip
    """Hits best first, each followed by the neighbours its walk accepts.

    ``accept(seed, prev, n)``: whether ``n``, reached from ``prev`` on the walk out of ``seed``,
    is taken. The first ``keep`` hits are placed before any neighbour. Built over the top
    ``depth`` hits; its first B entries are the B-chunk selection, nested in B because the walk of
    hit i never looks at hits below it.
    """
    hits = data.ranked[q][:depth].tolist()
    order: list[int] = []
    chosen: set[int] = set()

    def put(r: int) -> None:
        if r not in chosen:
            chosen.add(r)
            order.append(r)

    for h in hits[:keep]:
        put(h)
    for h in hits:
        put(h)
        for direction in (-1, 1):
            prev = h
            for step in range(1, WINDOW + 1):
                n = h + direction * step
                if not in_doc(data, n, h):
                    break
                if n not in chosen:
                    if not accept(h, prev, n):
                        break
                    put(n)
                prev = n
    return order


def relevance(data: nw.Prepared, q: int, r: int) -> float:
    return float(data.vectors[r] @ data.queries[q])


def relevance_to(data: nw.Prepared, q: int) -> Callable[[int], float]:
    """``cos(q, r)`` of query ``q`` as a function of the row, each row computed once."""
    return functools.cache(functools.partial(relevance, data, q))


def paper_accept(data: nw.Prepared, q: int, gamma: float = GAMMA):
    def accept(seed: int, prev: int, n: int) -> bool:
        boundary = float(data.vectors[prev] @ data.vectors[n])
        s = expansion_score(relevance(data, q, n), boundary, LAMBDA)
        return s > paper_threshold(relevance(data, q, seed), gamma)

    return accept


def seedrel(data: nw.Prepared, q: int, keep: int = 0, gamma: float = GAMMA) -> dict:
    out = {}
    for b in BUDGETS:  # the order over the top-B hits only, so that only they are read
        out[b] = seed_order(data, q, paper_accept(data, q, gamma), keep=min(keep, b), depth=b)[:b]
    return out


def joint_accept(data: nw.Prepared, q: int, joint: np.ndarray):
    def accept(seed: int, prev: int, n: int) -> bool:
        pair = min(prev, n)  # joint[r]: the texts of rows r and r + 1 joined
        return float(joint[pair] @ data.queries[q]) > relevance(data, q, prev)

    return accept


def joint_rule(data: nw.Prepared, q: int, joint: np.ndarray, keep: int = 2) -> dict:
    out = {}
    for b in BUDGETS:
        out[b] = seed_order(data, q, joint_accept(data, q, joint), keep=min(keep, b), depth=b)[:b]
    return out


# --------------------------------------------------------------------------- nested auction


def nested_auction(data: nw.Prepared, q: int, keep: int = 2, runs: int = 3) -> dict:
    """The default's bids, filled one chunk at a time, so the B-selection is nested in B."""
    ranked = data.ranked[q][:MAXB].tolist()
    cos = relevance_to(data, q)

    chosen: list[int] = list(ranked[: min(keep, MAXB)])
    sel = set(chosen)
    out = {}
    for t in range(1, MAXB + 1):
        if t > len(chosen):
            view = nw.query_view(data, q, t)
            alpha = nw.view_bonus(view)
            pool = set(view.candidates)
            hits = set(view.hits)

            def pair(a: int, b: int, alpha: float = alpha) -> float:
                return alpha - LAMBDA * (1 - float(data.adjacent[min(a, b)]))

            best, pick = -math.inf, None
            for h in view.hits:  # a hit alone (plus its links to chosen chunks)
                if h in sel:
                    continue
                g = cos(h) + sum(
                    pair(h, y) for y in (h - 1, h + 1) if y in sel and linked(data, h, y)
                )
                if g > best:
                    best, pick = g, h
            for c in sel:  # runs growing out of a chosen chunk
                for d in (-1, 1):
                    total, prev = 0.0, c
                    for step in range(1, runs + 1):
                        x = c + d * step
                        if x in sel:
                            break
                        if x not in pool or not linked(data, prev, x):
                            break
                        total += cos(x) + pair(prev, x)
                        beyond = x + d
                        if beyond in sel and linked(data, x, beyond):
                            total += pair(x, beyond)
                        if total / step > best:  # the run's mean bid per chunk
                            best, pick = total / step, c + d
                        if x in hits:
                            break
                        prev = x
            if pick is not None:  # None: nothing left to take (a short document)
                chosen.append(pick)
                sel.add(pick)
        if t in BUDGETS:
            out[t] = list(chosen[:t])
    return out


# --------------------------------------------------------------------------- seed merge


def seed_merge(data: nw.Prepared, q: int, gamma: float = GAMMA, keep: int = 2) -> dict:
    """One chunk per step, nested in B: an unchosen hit of the top t bids its cosine; a chunk
    next to a chosen one, on the walk out of seed c (within ``WINDOW`` of it), bids
    ``S + (1 - gamma) * cos(q, c)``, which beats its seed's own cosine exactly when the paper's
    rule accepts it (so accepted neighbours come right after their seed, and the others compete
    with the deeper hits)."""
    ranked = data.ranked[q][:MAXB].tolist()
    rel = relevance_to(data, q)

    chosen = list(ranked[: min(keep, MAXB)])
    seed_of = {h: h for h in chosen}
    out = {}
    for t in range(1, MAXB + 1):
        if t > len(chosen):
            best, pick, pick_seed = -math.inf, None, None
            for h in ranked[:t]:
                if h not in seed_of and rel(h) > best:
                    best, pick, pick_seed = rel(h), h, h
            for p in list(seed_of):
                c = seed_of[p]
                for n in (p - 1, p + 1):
                    if n in seed_of or abs(n - c) > WINDOW or not linked(data, p, n):
                        continue
                    bid = expansion_score(rel(n), float(data.adjacent[min(p, n)]), LAMBDA) + (
                        1 - gamma
                    ) * rel(c)
                    if bid > best:
                        best, pick, pick_seed = bid, n, c
            if pick is not None:
                chosen.append(pick)
                seed_of[pick] = pick_seed
        if t in BUDGETS:
            out[t] = list(chosen[:t])
    return out


# --------------------------------------------------------------------------- agreement


def agreement(view: nw.Query, deeper: set[int], data: nw.Prepared) -> float:
    """Share of the two best hits' one-step neighbours that rank within the deeper list."""
    near = [n for h in view.hits[:2] for n in (h - 1, h + 1)
            if in_doc(data, n, h) and n not in view.hits[:2]]  # fmt: skip
    return sum(n in deeper for n in near) / len(near) if near else 0.0


def agree_rule(data: nw.Prepared, q: int, per_neighbour: bool) -> dict:
    out = {}
    for b in BUDGETS:
        view = nw.query_view(data, q, b)
        deeper = set(data.ranked[q][: 2 * b].tolist())
        alpha = nw.view_bonus(view)
        if per_neighbour:
            pair = {(x, y): (alpha if (x in deeper and y in deeper) else 0.0) - LAMBDA * (1 - c)
                    for (x, y), c in view.edges.items()}  # fmt: skip
        else:
            pair = nw.pair_bids(view, alpha * agreement(view, deeper, data))

        def rule(v, budget, pair=pair):
            return dict(v.relevance), pair, min(budget, 2)

        out[b] = nw.auction(view, b, rule)
    return out


# --------------------------------------------------------------------------- joint embeddings


def joint_vectors(data: nw.Prepared, model: str, cache) -> np.ndarray:
    """``joint[r]``: the unit embedding of chunk texts r and r + 1 joined (NaN across documents)."""
    from scar_tools.eval.embedding import embed_texts

    chunks = data.prepared.corpus.chunks
    rows = [r for r in range(len(chunks) - 1) if linked(data, r, r + 1)]
    texts = [chunks[r].text + " " + chunks[r + 1].text for r in rows]
    vecs = embed_texts(nw._embedder(model), texts, cache=cache, show_progress=False)
    joint = np.full((len(chunks), vecs.shape[1]), np.nan)
    joint[rows] = vecs
    if not np.allclose(np.linalg.norm(data.vectors[:5], axis=1), 1):
        raise RuntimeError("chunk vectors are not unit")
    return joint


# --------------------------------------------------------------------------- runs


def ship_rule(data: nw.Prepared, q: int) -> dict:
    """The shipped default (``never_worse.py``'s copy of its exact DP), for per-query figures."""
    rule = nw.rules()["ship"]
    return {b: nw.auction(nw.query_view(data, q, b), b, rule) for b in BUDGETS}


CANDIDATES: dict[str, Callable] = {
    "ship": lambda d, q, j: ship_rule(d, q),
    "seedrel": lambda d, q, j: seedrel(d, q, keep=0),
    "seedrel2": lambda d, q, j: seedrel(d, q, keep=2),
    "nested": lambda d, q, j: nested_auction(d, q),
    "seedmerge": lambda d, q, j: seed_merge(d, q),
    "seedrel50": lambda d, q, j: seedrel(d, q, keep=0, gamma=0.5),
    "seedmerge50": lambda d, q, j: seed_merge(d, q, gamma=0.5),
    "agreeq": lambda d, q, j: agree_rule(d, q, per_neighbour=False),
    "agreen": lambda d, q, j: agree_rule(d, q, per_neighbour=True),
    "joint": lambda d, q, j: joint_rule(d, q, j),
}


def measure(data: nw.Prepared, names: Sequence[str], joint: np.ndarray | None) -> dict:
    """``B -> name -> per-query recall`` and, for the case study, ``_sel``: ``name -> B -> rows``."""
    out: dict = {str(b): {} for b in BUDGETS}
    for name in names:
        started = time.perf_counter()
        per_b = {b: [] for b in BUDGETS}
        for q in range(len(data.gold)):
            sel = CANDIDATES[name](data, q, joint)
            for b in BUDGETS:
                per_b[b].append(round(nw.recall(sel[b], data.gold[q]), 6))
        for b in BUDGETS:
            out[str(b)][name] = per_b[b]
        out.setdefault("_seconds", {})[name] = round(time.perf_counter() - started, 2)
    return out


# --------------------------------------------------------------------------- case study


def _spearman(x: Sequence[float], y: Sequence[float]) -> float:
    rx = np.argsort(np.argsort(x)).astype(float)
    ry = np.argsort(np.argsort(y)).astype(float)
    if rx.std() == 0 or ry.std() == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def study(args, spec: str) -> None:
    """Complete answers the default breaks, and what per-query signals say about its gain."""
    from scar_tools.cache import EmbeddingCache

    model, cond = spec.split(",")
    cache = EmbeddingCache(args.cache_dir)
    rule = nw.rules()["ship"]
    print(f"# {model}, {cond}: complete answers (all gold in top-B) that the default breaks\n")
    print(
        "| scope | set | B | complete | broken | gold hits lost | lost at rank (mean) "
        "| lost hit next to a kept chunk | cos(lost hit) - cos(weakest neighbour taken), mean "
        "| neighbours taken (none can hold gold: all of it was in the hits) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    signals = {"spread/bbar": [], "agreement": [], "flat": [], "d": [], "B": []}
    for scope in args.scopes.split(","):
        for name in args.sets.split(","):
            data = nw.load_set(args.bench, name, model, scope, cond, cache)
            for b in (3, 4, 5, 10):
                complete = broken = lost = nxt = 0
                ranks, gaps = [], []
                taken = 0
                for q, gold in enumerate(data.gold):
                    view = nw.query_view(data, q, b)
                    chosen = set(nw.auction(view, b, rule))
                    hits = view.hits
                    d = nw.recall(chosen, gold) - nw.recall(hits, gold)
                    if b in (5, 10):
                        s = view.scores
                        bbar = nw.unit_of(view, "bbar")
                        deeper = set(data.ranked[q][: 2 * b].tolist())
                        signals["spread/bbar"].append((s[0] - s[-1]) / (b - 1) / max(bbar, 1e-9))
                        signals["agreement"].append(agreement(view, deeper, data))
                        signals["flat"].append(s[-1] / s[0] if s[0] > 0 else 0.0)
                        signals["d"].append(d)
                        signals["B"].append(b)
                    if not gold <= set(hits):
                        continue
                    complete += 1
                    if gold <= chosen:
                        continue
                    broken += 1
                    gone = [h for h in hits if h in gold and h not in chosen]
                    neighbours = [x for x in chosen if x not in hits]
                    taken += len(neighbours)
                    for h in gone:
                        lost += 1
                        ranks.append(hits.index(h) + 1)
                        nxt += any(linked(data, h, x) for x in chosen)
                        if neighbours:
                            gaps.append(
                                view.relevance[h] - min(view.relevance[x] for x in neighbours)
                            )
                print(
                    f"| {scope} | {name} | {b} | {complete} | {broken} | {lost} | "
                    f"{np.mean(ranks) if ranks else float('nan'):.1f} | "
                    f"{nxt}/{lost} | {np.mean(gaps) if gaps else float('nan'):+.3f} | "
                    f"{taken} |"
                )
    print("\n# Per-query signals against the default's gain over top-B (Spearman, B = 5 and 10)\n")
    d = np.array(signals["d"])
    bs = np.array(signals["B"])
    for key in ("spread/bbar", "agreement", "flat"):
        x = np.array(signals[key])
        cors = [f"B={b}: {_spearman(x[bs == b], d[bs == b]):+.2f}" for b in (5, 10)]
        print(f"* {key}: " + ", ".join(cors))
    for b in (5, 10):
        x, y = np.array(signals["agreement"])[bs == b], d[bs == b]
        zero = x == 0
        print(
            f"* B={b}: default minus top-B, mean over queries with agreement 0: "
            f"{100 * y[zero].mean():+.1f} points ({zero.sum()} queries); with agreement > 0: "
            f"{100 * y[~zero].mean():+.1f} ({(~zero).sum()})"
        )


# --------------------------------------------------------------------------- joint latency


def joint_latency(args, model: str) -> None:
    """What the joint test costs a query: one batch of pair texts, against one query embedding."""
    import statistics

    from scar_tools.cache import EmbeddingCache

    data = nw.load_set(args.bench, "privacy_qa", model, "document", "base",
                       EmbeddingCache(args.cache_dir))  # fmt: skip
    chunks = data.prepared.corpus.chunks
    embedder = nw._embedder(model)
    for pairs in (4, 10, 20):
        texts = [chunks[r].text + " " + chunks[r + 1].text for r in range(100, 100 + pairs)]
        embedder.embed_documents(texts)
        batch, query = [], []
        for _ in range(7):
            started = time.perf_counter()
            embedder.embed_documents(texts)
            batch.append(time.perf_counter() - started)
            started = time.perf_counter()
            embedder.embed_query("What data does the app share with third parties?")
            query.append(time.perf_counter() - started)
        print(f"{pairs} pair texts in one batch: median {1000 * statistics.median(batch):.0f} ms; "
              f"one query embedding: {1000 * statistics.median(query):.0f} ms")  # fmt: skip


# --------------------------------------------------------------------------- noise draws


def noise_draws(args, model: str, seeds: Sequence[int]) -> None:
    """The default's worst never-worse gap under ``noisy`` with other draws of the noise."""
    import dataclasses

    from scar_tools.cache import EmbeddingCache

    cache = EmbeddingCache(args.cache_dir)
    rule = nw.rules()["ship"]
    print(f"# {model}, noisy: the default's never-worse gap under other noise draws (points)\n")
    print("| seed | worst gap | where | gap at corpus paper4_dev B=5 |")
    print("|---:|---:|---|---:|")
    for seed in seeds:
        worst, where, at = math.inf, "", float("nan")
        for scope in args.scopes.split(","):
            for name in args.sets.split(","):
                base = nw.load_set(args.bench, name, model, scope, "base", cache)
                data = nw.add_noise(base, target=0.10, seed=seed)
                data.prepared = dataclasses.replace(base.prepared, query_units=data.queries,
                                                    ranked=data.ranked)  # fmt: skip
                for b in BUDGETS:
                    top = nw.run_top(data, b).mean()
                    pn = nw.run_method(data, "prevnext", b).mean()
                    ship = np.mean([nw.recall(nw.auction(nw.query_view(data, q, b), b, rule), g)
                                    for q, g in enumerate(data.gold)])  # fmt: skip
                    gap = 100 * (ship - max(top, pn))
                    if gap < worst:
                        worst, where = gap, f"{scope} {name} B={b}"
                    if (scope, name, b) == ("corpus", "paper4_dev", 5):
                        at = gap
        print(f"| {seed} | {worst:+.1f} | {where} | {at:+.1f} |", flush=True)


# --------------------------------------------------------------------------- report


def load_work(work: Path) -> dict:
    """``model -> condition -> scope -> set -> B -> method -> group -> mean`` of the candidates."""
    table: dict = {}
    for f in sorted(work.glob("*__*__*__*.json")):
        model, cond, scope, name = f.stem.split("__")
        raw = json.loads(f.read_text())
        frag = raw["_fragmented"]
        cells = {b: nw.means(raw[b] | {"_mytop": raw["_top"][b]}, frag) for b in map(str, BUDGETS)}
        table.setdefault(model, {}).setdefault(cond, {}).setdefault(scope, {})[name] = cells
    return table


#: Cells left out because this run's embeddings are not the committed ones (first of each).
MISMATCH: list[str] = []


def merged(work: Path, ceiling: Path | None = None) -> tuple[dict, dict, list[str]]:
    """The committed table with the candidates' means added where every set and scope is
    measured; the ceiling's own rules per model and condition; the candidate names.

    Args:
        work: The folder of per-query recalls.
        ceiling: A ``never_worse.py --out`` table whose models replace the committed ones.
    """
    base = ceiling_table(ceiling)
    mine = load_work(work)
    table: dict = {}
    ceiling_rules: dict = {}
    names: set[str] = set()
    for model, conds in mine.items():
        for cond, scopes in conds.items():
            if cond not in base.get(model, {}):
                continue  # no ceiling measured for it
            old = {sc: nw.strip(sets) for sc, sets in base[model][cond].items()}
            if set(scopes) != set(old) or any(set(scopes[sc]) != set(old[sc]) for sc in old):
                continue  # not complete yet
            ceiling_rules[(model, cond)] = nw.measured_everywhere(old)
            tab = json.loads(json.dumps(old))
            for sc, sets in scopes.items():
                for s, cells in sets.items():
                    for b, cell in cells.items():
                        top_mine, top_old = cell.pop("_mytop")["all"], tab[sc][s][b]["top"]["all"]
                        if abs(top_mine - top_old) > 5e-4:
                            MISMATCH.append(
                                f"{model} {cond} {sc} {s} B={b}: top recall "
                                f"{top_mine:.4f} here, {top_old:.4f} committed"
                            )
                        for m, v in cell.items():
                            tab[sc][s][b][m if m != "ship" else "ship_here"] = v
                            names.add(m)
            if MISMATCH and MISMATCH[-1].startswith(f"{model} {cond} "):
                continue  # another model than the committed one: its baselines do not apply
            table.setdefault(model, {})[cond] = tab
    return table, ceiling_rules, sorted(names - {"ship"}) + (["ship"] if "ship" in names else [])


def partial_cells(work: Path, table: Mapping, ceiling: Path | None = None) -> list[str]:
    base = ceiling_table(ceiling)
    lines = []
    for f in sorted(work.glob("*__*__*__*.json")):
        model, cond, scope, name = f.stem.split("__")
        if cond in table.get(model, {}) or cond not in base.get(model, {}):
            continue
        raw = json.loads(f.read_text())
        cells = base[model][cond][scope][name]
        if abs(np.mean(raw["_top"]["5"]) - cells["5"]["top"]["all"]) > 5e-4:
            continue  # other embeddings than the committed run's
        methods = ["budget", *sorted(m for m in raw["3"] if m != "ship")]
        gaps = {m: [] for m in methods}
        for b in map(str, BUDGETS):
            best = max(cells[b]["top"]["all"], cells[b]["prevnext"]["all"])
            for m in methods:
                v = cells[b]["budget"]["all"] if m == "budget" else np.mean(raw[b][m])
                gaps[m].append(100 * (v - best))
        lines.append(f"* {model} {cond} {scope} {name}: " + "; ".join(
            f"{m} {min(g):+.1f} (" + " ".join(f"{x:+.1f}" for x in g) + ")"
            for m, g in gaps.items()))  # fmt: skip
        if "nested" in raw["3"] and "ship" in raw["3"]:
            diff = [100 * (np.mean(raw[b]["nested"]) - np.mean(raw[b]["ship"]))
                    for b in map(str, BUDGETS)]  # fmt: skip
            lines.append(f"  nested minus the exact DP: mean {np.mean(diff):+.2f}, "
                         f"worst {min(diff):+.2f}")  # fmt: skip
    return lines


def per_query_drops(work: Path) -> dict:
    out: dict = {}
    for f in sorted(work.glob("*__*__*__*.json")):
        raw = json.loads(f.read_text())
        frag = np.array(raw["_fragmented"], dtype=bool)
        methods = set(raw["3"]) | {"top"}
        for m in methods:
            try:
                series = np.array(
                    [raw["_top"][str(b)] if m == "top" else raw[str(b)][m] for b in BUDGETS]
                )  # B x queries; fmt: skip
            except KeyError:
                continue
            steps = np.diff(series, axis=0)
            worst = min(
                100 * np.diff(series.mean(axis=1)).min(),
                100 * np.diff(series[:, frag].mean(axis=1)).min() if frag.any() else 0.0,
            )
            n, fell, w = out.get(m, (0, 0, math.inf))
            out[m] = (n + steps.size, fell + int((steps < -1e-9).sum()), min(w, worst))
    return out


def complete_broken(work: Path, budgets: Sequence[int] = (3, 5, 10)) -> dict:
    out: dict = {}
    for f in sorted(work.glob("*__*__*__*.json")):
        model, cond, _scope, _name = f.stem.split("__")
        raw = json.loads(f.read_text())
        for b in map(str, budgets):
            top = np.array(raw["_top"][b])
            full = top >= 1 - 1e-9
            v = out.setdefault((model, cond, int(b)), {"_n": 0})
            v["_n"] += int(full.sum())
            for m, rec in raw[b].items():
                v[m] = v.get(m, 0) + int((np.array(rec)[full] < 1 - 1e-9).sum())
    return out


def paired_noise(work: Path, table: Mapping) -> list[tuple]:
    rows = []
    for model, conds in table.items():
        for cond, tab in conds.items():
            where = nw.goals(tab, "budget")["never_worse_at"]
            scope, name, b = where.split()
            f = work / f"{model}__{cond}__{scope}__{name}.json"
            raw = json.loads(f.read_text())
            b = b.removeprefix("B=")
            if "ship" not in raw[b]:
                continue
            d = 100 * (np.array(raw[b]["ship"]) - np.array(raw["_top"][b]))
            rows.append(
                (
                    model,
                    cond,
                    where,
                    len(d),
                    f"{d.mean():+.2f}",
                    f"{d.std(ddof=1) / math.sqrt(len(d)):.2f}",
                )
            )
    return rows


def report(work: Path, out: Path | None, ceiling: Path | None = None) -> None:
    table, ceiling_rules, names = merged(work, ceiling)
    shown = [n for n in names if n != "ship"]
    for line in dict.fromkeys(m.split(" B=")[0].rsplit(" ", 2)[0] for m in MISMATCH):
        first = next(m for m in MISMATCH if m.startswith(line))
        print(f"left out (embeddings differ from the committed run): {first}\n")
    print(
        "# Candidates against the default and the cosine-bid ceiling "
        "(worst never-worse gap / worst fragmented gain, points)\n"
    )
    print(
        "| model | condition | default | ceiling (hindsight, per cell) | "
        + " | ".join(shown)
        + " |"
    )
    print("|---|---|---|---|" + "---|" * len(shown))
    summary: dict = {}
    beats = {n: 0 for n in shown}
    met = {n: 0 for n in [*shown, "budget"]}
    for model, conds in table.items():
        for cond, tab in conds.items():
            ceil = nw.hindsight(tab, ceiling_rules[(model, cond)])
            d = nw.goals(tab, "budget")
            row = [f"{d['never_worse']:+.1f} / {d['fragmented_gain']:+.1f}",
                   f"{ceil['never_worse']:+.1f} / {ceil['fragmented_gain']:+.1f}"]  # fmt: skip
            met["budget"] += d["never_worse"] >= -0.5
            entry = {
                "default": d,
                "ceiling": {k: ceil[k] for k in ("never_worse", "fragmented_gain")},
            }
            present = set(nw.measured_everywhere(tab))
            for n in shown:
                if n not in present:
                    row.append("-")
                    continue
                g = nw.goals(tab, n)
                entry[n] = g
                mark = ""
                if g["never_worse"] > ceil["never_worse"] + 1e-9:
                    beats[n] += 1
                    mark = " **>c**"
                met[n] += g["never_worse"] >= -0.5
                row.append(
                    f"{g['never_worse']:+.1f} / {g['fragmented_gain']:+.1f} "
                    f"(m {g['monotone']:+.1f}){mark}"
                )
            summary[f"{model}/{cond}"] = entry
            print(f"| {model} | {cond} | " + " | ".join(row) + " |")
    print(
        "\n# The hindsight ceiling with the candidates added to the cosine-bid rules "
        "(never worse / fragmented gain)\n"
    )
    print("| model | condition | cosine-bid rules | with the candidates |")
    print("|---|---|---|---|")
    for model, conds in table.items():
        for cond, tab in conds.items():
            old = nw.hindsight(tab, ceiling_rules[(model, cond)])
            both = nw.hindsight(
                tab,
                sorted(
                    set(ceiling_rules[(model, cond)])
                    | (set(nw.measured_everywhere(tab)) - {"ship_here"})
                ),
            )
            print(
                f"| {model} | {cond} | {old['never_worse']:+.1f} / {old['fragmented_gain']:+.1f}"
                f" | {both['never_worse']:+.1f} / {both['fragmented_gain']:+.1f} |"
            )
    print(
        "\n`**>c**`: worst never-worse gap above the hindsight ceiling's; `m`: worst step of "
        "recall as B grows (monotone >= 0).\n"
    )
    print("| rule | cells above the ceiling (never worse) | cells meeting never worse >= -0.5 |")
    print("|---|---:|---:|")
    print(f"| budget (default) | 0 | {met['budget']} |")
    for n in shown:
        print(f"| {n} | {beats[n]} | {met[n]} |")
    print("\n# Where each candidate's worst never-worse gap lies\n")
    for key, entry in summary.items():
        print(
            f"* {key}: default {entry['default']['never_worse_at']}; "
            + "; ".join(
                f"{n} {entry[n]['never_worse']:+.1f} at {entry[n]['never_worse_at']}"
                for n in shown
                if n in entry
            )
        )
    # nested versus the exact DP, per model, and the default's identity
    diffs: dict[str, tuple[list[float], list[float]]] = {}
    same = []
    for model, conds in table.items():
        for tab in conds.values():
            for sets in tab.values():
                for cells in sets.values():
                    for cell in cells.values():
                        if "ship_here" in cell:
                            same.append(abs(cell["ship_here"]["all"] - cell["budget"]["all"]))
                        if "nested" in cell:
                            every, frag = diffs.setdefault(model, ([], []))
                            every.append(100 * (cell["nested"]["all"] - cell["budget"]["all"]))
                            frag.append(
                                100 * (cell["nested"]["fragmented"] - cell["budget"]["fragmented"])
                            )
    if diffs:
        print("\n# Nested greedy against the exact DP (default bids), cells = condition x scope x "
              "set x B\n")  # fmt: skip
        for model, (every, frag) in diffs.items():
            print(
                f"* {model}, {len(every)} cells: all queries: mean {np.mean(every):+.2f} points, "
                f"worst {min(every):+.2f}, best {max(every):+.2f}; fragmented: mean "
                f"{np.mean(frag):+.2f}, worst {min(frag):+.2f}"
            )
    if same:
        print(f"\ndefault recomputed here vs committed: largest difference {max(same):.4f}")
    partial = partial_cells(work, table, ceiling)
    if partial:
        print(
            "\n# Model-condition pairs measured in part: never-worse gap per set, scope and B "
            "(points; the worst over B in brackets), and nested minus the exact DP\n"
        )
        for line in partial:
            print(line)
    drops = per_query_drops(work)
    if drops:
        print(
            "\n# Monotone in B, query by query: share of (query, B to the next B) steps where "
            "recall falls, and the worst set-level step (points), over every file measured\n"
        )
        print("| method | steps | steps where recall falls | worst set-level step |")
        print("|---|---:|---:|---:|")
        for m, (n, fell, worst) in sorted(drops.items()):
            print(f"| {m} | {n} | {fell / n:.2%} | {worst:+.1f} |")
    broken = complete_broken(work)
    if broken:
        print(
            "\n# Complete answers kept: of the queries whose gold chunks are all in the top B, "
            "the share each method's B chunks no longer hold in full (both scopes, three sets)\n"
        )
        methods = sorted({m for v in broken.values() for m in v if m != "_n"})
        print("| model | condition | B | complete | " + " | ".join(methods) + " |")
        print("|---|---|---:|---:|" + "---:|" * len(methods))
        for (model, cond, b), v in sorted(broken.items()):
            print(
                f"| {model} | {cond} | {b} | {v['_n']} | "
                + " | ".join(f"{v[m] / v['_n']:.1%}" if m in v else "-" for m in methods)
                + " |"
            )
    noise = paired_noise(work, table)
    if noise:
        print(
            "\n# How large a gap the sets can tell from zero: the default minus top-B, "
            "per query, at the default's worst never-worse cell\n"
        )
        print("| model | condition | cell | queries | mean (points) | standard error (points) |")
        print("|---|---|---|---:|---:|---:|")
        for row in noise:
            print("| " + " | ".join(str(x) for x in row) + " |")
    if out:
        keep = {*names, "ship_here", "top", "prevnext", "rse", "budget"}
        means = {
            model: {cond: {sc: {s: {b: {m: v for m, v in cell.items() if m in keep}
                                    for b, cell in cells.items()}
                                for s, cells in sets.items()}
                           for sc, sets in tab.items()}
                    for cond, tab in conds.items()}
            for model, conds in table.items()
        }  # fmt: skip
        out.write_text(
            json.dumps(nw.rounded({"summary": summary, "means": means}), default=float) + "\n"
        )


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--bench", type=Path, default=Path("/work/shared/bench"))
    p.add_argument("--cache-dir", type=Path, default=Path("/root/.cache/scar-dev"))
    p.add_argument("--models", default="minilm")
    p.add_argument("--conditions", default="base,noisy,template,hard")
    p.add_argument("--scopes", default=",".join(nw.SCOPES))
    p.add_argument("--sets", default=",".join(nw.SET_NAMES))
    p.add_argument("--rules", default="seedrel,seedrel2,nested,agreeq,agreen")
    p.add_argument("--work", type=Path, default=Path("/tmp/wfs/cand"))
    p.add_argument(
        "--study",
        metavar="MODEL,CONDITION",
        help="measure nothing new: the case "
        "study of complete answers and the per-query signals, on every set and scope",
    )
    p.add_argument("--report", action="store_true")
    p.add_argument(
        "--joint-latency",
        action="store_true",
        help="measure nothing new: time the "
        "joint test's embedding batch against one query embedding (first --models)",
    )
    p.add_argument(
        "--noise-seeds",
        help="measure nothing new: the default under these draws of "
        "the noisy condition's noise, e.g. 0,1,2,3 (0 is never_worse.py's)",
    )
    p.add_argument("--out", type=Path)
    p.add_argument(
        "--ceiling",
        type=Path,
        help="with --report: a never_worse.py --out table whose models replace those of the "
        "committed results/never_worse.json (e.g. a model re-run with fresh embeddings)",
    )
    args = p.parse_args()
    if args.report:
        report(args.work, args.out, args.ceiling)
        return
    if args.study:
        study(args, args.study)
        return
    if args.joint_latency:
        joint_latency(args, args.models.split(",")[0])
        return
    if args.noise_seeds:
        noise_draws(args, args.models.split(",")[0], [int(x) for x in args.noise_seeds.split(",")])
        return
    from scar_tools.cache import EmbeddingCache

    cache = EmbeddingCache(args.cache_dir)
    names = [r for r in args.rules.split(",") if r]
    args.work.mkdir(parents=True, exist_ok=True)
    for model in args.models.split(","):
        for cond in args.conditions.split(","):
            for scope in args.scopes.split(","):
                for name in args.sets.split(","):
                    f = args.work / f"{model}__{cond}__{scope}__{name}.json"
                    known = json.loads(f.read_text()) if f.exists() else {}
                    todo = [r for r in names if r not in known.get("3", {})]
                    if not todo:
                        continue
                    started = time.perf_counter()
                    data = nw.load_set(args.bench, name, model, scope, cond, cache)
                    joint = joint_vectors(data, model, cache) if "joint" in todo else None
                    res = measure(data, todo, joint)
                    for b, row in res.items():
                        known.setdefault(b, {}).update(row)
                    known["_fragmented"] = data.fragmented.tolist()
                    known["_top"] = {str(b): nw.run_top(data, b).round(6).tolist() for b in BUDGETS}
                    f.write_text(json.dumps(known))
                    print(f"{model} {cond} {scope} {name} {todo}: "
                          f"{time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
