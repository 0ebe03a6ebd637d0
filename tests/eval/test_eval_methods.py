"""Method names, and that every method is exactly the selection it claims to be."""

from __future__ import annotations

import pytest
from eval_support import HashEmbedder, write_legalbench

from scar_core import QueryDriver
from scar_core._errors import InvalidSettingsError
from scar_core._selection import Chunk, Selection, select
from scar_core._settings import BudgetSettings, PaperSettings
from scar_tools.eval import PreparedBenchmark, create_method, load_benchmark, prepare_benchmark
from scar_tools.eval.methods import REGISTRY, MethodRegistry, top


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> PreparedBenchmark:
    benchmark = load_benchmark(*write_legalbench(tmp_path_factory.mktemp("methods")))
    return prepare_benchmark(benchmark, HashEmbedder(), chunk_size=60, show_progress=False)


def _everything(prepared: PreparedBenchmark) -> dict[str, Chunk]:
    return {node.id: node for node in prepared.nodes}


def _same(got: Selection, expected: Selection) -> bool:
    """The same chunks, passages and decisions (scores equal up to the last bits of a product)."""
    decided = [(d.neighbor_id, d.via_id, d.accepted) for d in expected.decisions]
    return (
        got.passages == expected.passages
        and [(d.neighbor_id, d.via_id, d.accepted) for d in got.decisions] == decided
        and [s.score for s in got.selected] == pytest.approx([s.score for s in expected.selected])
    )


@pytest.mark.parametrize("budget", [1, 3, 4, 7])
def test_budget_b_is_select_with_budget_settings_on_the_b_best(
    prepared: PreparedBenchmark, budget: int
) -> None:
    method = create_method(f"budget{budget}", k=5)
    for position in range(len(prepared.queries)):
        context = prepared.context(position, 5)
        expected = select(
            context.vector, context.head(budget), _everything(prepared), BudgetSettings(k=budget)
        )
        assert _same(method(context), expected)
        assert len(expected.chunk_ids) == min(budget, len(context.ranked))


def test_budget_b_is_what_the_query_driver_of_scar_retriever_returns(
    prepared: PreparedBenchmark,
) -> None:
    """SCARRetriever(k=B) runs QueryDriver on the B best hits and reads neighbours ring by ring."""
    everything = _everything(prepared)
    for position in range(len(prepared.queries)):
        context = prepared.context(position, 5)
        hits = [
            Chunk(i, None, everything[i].previous_id, everything[i].next_id)
            for i in context.head(4)
        ]
        driver = QueryDriver(context.vector, hits, BudgetSettings(k=4))
        while wanted := driver.wanted():
            driver.receive(everything[i] for i in wanted)
        assert driver.result().chunk_ids == create_method("budget4", 5)(context).chunk_ids


def test_named_variants_carry_their_settings(prepared: PreparedBenchmark) -> None:
    everything = _everything(prepared)
    cases = {
        "default": BudgetSettings(k=5),
        "budget6_a0.5_s2_w3": BudgetSettings(k=6, continuity_bonus=0.5, keep=2, _window=3),
        "budget6_s6": BudgetSettings(k=6, keep=6),
        "scar2": PaperSettings(k=5, window=2),
        "scar1_g0.5_l0.3": PaperSettings(k=5, gamma=0.5, lambda_=0.3),
        "scar1_lambda0": PaperSettings(k=5, lambda_=0.0),
    }
    for name, settings in cases.items():
        context = prepared.context(0, 5)
        expected = select(context.vector, context.head(settings.k), everything, settings)
        assert _same(create_method(name, 5)(context), expected), name


def test_top_static_parent_and_matched(prepared: PreparedBenchmark) -> None:
    corpus = prepared.corpus
    for position in range(len(prepared.queries)):
        context = prepared.context(position, 3)
        best = [corpus.chunks[r].chunk_id for r in context.ranked[:3].tolist()]
        assert (
            create_method("topk", 3)(context).chunk_ids
            == create_method("top3", 9)(context).chunk_ids
        )
        assert sorted(create_method("topk", 3)(context).chunk_ids) == sorted(best)
        for window in (1, 2):
            rows = corpus.nearby([corpus.row_of[c] for c in best], window)
            static = create_method(f"static{window}", 3)(context)
            assert sorted(static.chunk_ids) == sorted(corpus.chunks[r].chunk_id for r in rows)
        parent = create_method("parent120", 3)(context).chunk_ids
        assert set(best) <= set(parent)
        for chunk_id in parent:  # each returned chunk shares a 120-character block with a hit
            chunk = corpus.chunks[corpus.row_of[chunk_id]]
            assert any(
                corpus.chunks[corpus.row_of[b]].document_id == chunk.document_id
                and abs(corpus.chunks[corpus.row_of[b]].start - chunk.start) < 120
                for b in best
            )
        scar = create_method("scar1_g0.3", 3)(context)
        matched = create_method("topk_matched_scar1_g0.3", 3)(context)
        assert matched.chunk_ids == top(len(scar.chunk_ids))(context).chunk_ids


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("bogus", "method 'bogus' is not known"),
        ("budget0", "k=0"),
        ("budget3_s4", "keep=4 is larger than k=3"),
        ("scar1_g0", "gamma=0"),
        ("top0", "k=0"),
        ("topk_matched_nope", "method 'nope' is not known"),
    ],
)
def test_bad_names_are_refused_with_the_value_named(name: str, message: str) -> None:
    with pytest.raises(InvalidSettingsError, match=message):
        create_method(name, 5)


def test_a_registry_takes_new_names_and_every_example_builds(prepared: PreparedBenchmark) -> None:
    registry = MethodRegistry()
    registry.register(r"first(\d+)", lambda m, k: top(int(m[1])), "first3", "the B best")
    context = prepared.context(0, 5)
    assert len(registry.create("first2", 5)(context).chunk_ids) == 2
    with pytest.raises(InvalidSettingsError, match="use names like: first3"):
        registry.create("first", 5)
    for example in ("topk", "top10", "static1", "scar1_g0.8_l0.1", "budget10", "default",
                    "parent2000", "topk_matched", "topk_matched_default"):  # fmt: skip
        assert REGISTRY.create(example, 5)(context).chunk_ids
