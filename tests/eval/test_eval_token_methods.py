"""``toptokT`` and ``budgettokT``: the selections they claim, at equal tokens."""

from __future__ import annotations

import pytest
from eval_support import HashEmbedder, write_legalbench

from scar_core._errors import InvalidSettingsError
from scar_core._selection import select
from scar_core._settings import BudgetSettings
from scar_tools.eval import PreparedBenchmark, create_method, load_benchmark, prepare_benchmark
from scar_tools.eval.embedding import token_counter
from scar_tools.eval.methods import TOKEN_HITS, ChunkTokens, top
from scar_tools.eval.runner import run_methods


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> PreparedBenchmark:
    benchmark = load_benchmark(*write_legalbench(tmp_path_factory.mktemp("tokens")))
    return prepare_benchmark(benchmark, HashEmbedder(), chunk_size=60, show_progress=False)


def _tokens(prepared: PreparedBenchmark, ids: list[str]) -> list[int]:
    count = token_counter()  # the report's counter: cl100k_base
    return [count(prepared.corpus.chunks[prepared.corpus.row_of[c]].text) for c in ids]


@pytest.mark.parametrize("limit", [1, 30, 60, 200])
def test_toptok_fills_the_best_chunks_until_the_next_does_not_fit(
    prepared: PreparedBenchmark, limit: int
) -> None:
    method = create_method(f"toptok{limit}", 5)
    for position in range(len(prepared.queries)):
        context = prepared.context(position, 5)
        got = method(context).chunk_ids
        ranked = context.head(len(context.ranked))
        counts = _tokens(prepared, ranked)
        n = len(got)
        assert sorted(got) == sorted(ranked[:n])
        assert n == 1 or sum(counts[:n]) <= limit
        assert n == len(ranked) or sum(counts[: n + 1]) > limit
        assert got == top(n)(context).chunk_ids


@pytest.mark.parametrize(("name", "depth", "limit"), [("budgettok60", TOKEN_HITS, 60),
                                                      ("budgettok120_h4", 4, 120)])  # fmt: skip
def test_budgettok_is_select_with_max_tokens_over_the_best_hits(
    prepared: PreparedBenchmark, name: str, depth: int, limit: int
) -> None:
    method = create_method(name, 5)
    everything = {node.id: node for node in prepared.nodes}
    counts = dict(zip(everything, _tokens(prepared, list(everything)), strict=True))
    settings = BudgetSettings(k=depth, max_tokens=limit)
    for position in range(len(prepared.queries)):
        context = prepared.context(position, 5)
        got = method(context)
        expected = select(context.vector, context.head(depth), everything, settings, counts)
        assert got.passages == expected.passages
        spent = sum(counts[c] for c in got.chunk_ids)
        assert spent <= limit or got.chunk_ids == context.head(1)


def test_both_run_in_the_runner_and_report_tokens(prepared: PreparedBenchmark) -> None:
    names = ["toptok80", "budgettok80"]
    runs = run_methods(prepared, {n: create_method(n, 5) for n in names}, 5)
    for name in names:
        tokens = runs[name][1].tokens
        assert tokens is not None
        assert len(tokens) == len(prepared.queries)


def test_chunk_tokens_count_each_chunk_once(prepared: PreparedBenchmark) -> None:
    count = ChunkTokens()
    chunk = prepared.corpus.chunks[0]
    assert count(prepared.corpus, chunk.chunk_id) == token_counter()(chunk.text)
    assert list(count.memo) == [chunk.chunk_id]


@pytest.mark.parametrize("name", ["toptok0", "budgettok0", "budgettok100_h0"])
def test_bad_token_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidSettingsError, match="=0"):
        create_method(name, 5)
