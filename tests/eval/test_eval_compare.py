"""The competitors at the same budget (dsRAG's RSE, LlamaIndex's prev/next) and the budget sweep."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from eval_support import HashEmbedder, write_legalbench

from scar_core._errors import InvalidSettingsError
from scar_tools.cli import build_parser, main
from scar_tools.eval import PreparedBenchmark, create_method, load_benchmark, prepare_benchmark
from scar_tools.eval.budgets import BUDGETS, budget_methods
from scar_tools.eval.methods import REGISTRY

FAKE = ["--model", "py:eval_support:HashEmbedder", "--no-progress"]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> PreparedBenchmark:
    benchmark = load_benchmark(*write_legalbench(tmp_path_factory.mktemp("compare")))
    return prepare_benchmark(benchmark, HashEmbedder(), chunk_size=60, show_progress=False)


@pytest.mark.parametrize(
    "name",
    ["rse4", "rse4_precision_h200", "rse5_find_all", "rse3_p0.05_d20_m0", "rse3_p0.05_d20_h9"],
)
def test_rse_is_dsrags_segments_filled_to_exactly_b(prepared: PreparedBenchmark, name: str) -> None:
    rse = pytest.importorskip("dsrag.rse", reason="dsRAG is not installed (extra 'compare')")
    budget = int(name[3])
    depth = int(name.split("_h")[1]) if "_h" in name else budget  # the hits budget mode sees
    preset = next((p for p in rse.RSE_PARAMS_PRESETS if p in name), "balanced")
    params = rse.RSE_PARAMS_PRESETS[preset] | (
        {"irrelevant_chunk_penalty": 0.05, "decay_rate": 20} if "_p0" in name else {}
    ) | ({"minimum_value": 0} if "_m0" in name else {}
    )  # fmt: skip
    method, corpus = create_method(name, 5), prepared.corpus
    segmented = 0
    for position in range(len(prepared.queries)):
        context = prepared.context(position, 5)
        (document,) = {corpus.chunks[r].document_id for r in context.ranked.tolist()}
        first = corpus.rows_of_document[document][0]
        results = [{"similarity": float(prepared.nodes[r].vector @ context.vector),  # type: ignore[operator]
                    "metadata": {"doc_id": document, "chunk_index": r - first, "chunk_text": "x"}}
                   for r in context.ranked[:depth].tolist()]  # fmt: skip
        length = 1 + max(r["metadata"]["chunk_index"] for r in results)  # up to the last hit
        values = rse.get_relevance_values([results], length, {document: 0}, [document],
                                          params["irrelevant_chunk_penalty"], params["decay_rate"])  # fmt: skip
        segments, _ = rse.get_best_segments(values, [length], params["max_length"], budget,
                                            params["minimum_value"])  # fmt: skip
        expected = [corpus.chunks[first + i].chunk_id for a, b in segments for i in range(a, b)]
        segmented += len(expected)
        got = method(context).chunk_ids
        assert len(got) == min(budget, len(context.ranked))
        assert set(expected) <= set(got)  # the segments, then the best other chunks
        assert set(got) - set(expected) <= set(context.head(max(depth, budget)))
    if "_p0" in name:
        assert segmented > 0


@pytest.mark.parametrize("budget", [1, 2, 3, 4, 5, 7])
def test_prev_next_is_llamaindex_prev_next_postprocessor_cut_to_b(
    prepared: PreparedBenchmark, budget: int
) -> None:
    from llama_index.core.postprocessor import PrevNextNodePostprocessor
    from llama_index.core.schema import NodeRelationship, NodeWithScore, RelatedNodeInfo, TextNode
    from llama_index.core.storage.docstore import SimpleDocumentStore

    nodes = {}
    for chunk in prepared.corpus.chunks:
        node = TextNode(id_=chunk.chunk_id, text=chunk.text)
        for relation, other in ((NodeRelationship.PREVIOUS, chunk.previous_id),
                                (NodeRelationship.NEXT, chunk.next_id)):  # fmt: skip
            if other:
                node.relationships[relation] = RelatedNodeInfo(node_id=other)
        nodes[chunk.chunk_id] = node
    docstore = SimpleDocumentStore()
    docstore.add_documents(list(nodes.values()))
    postprocessor = PrevNextNodePostprocessor(docstore=docstore, num_nodes=1, mode="both")
    method = create_method(f"prevnext{budget}", 5)
    for position in range(len(prepared.queries)):
        context = prepared.context(position, 5)
        seeds = [NodeWithScore(node=nodes[i]) for i in context.head(-(-budget // 3))]
        expected = [n.node.node_id for n in postprocessor.postprocess_nodes(seeds)][:budget]
        got = method(context)
        assert sorted(got.chunk_ids) == sorted(expected)
        assert [c for p in got.passages for c in p] == got.chunk_ids


def test_budget_sweep_writes_a_table_and_a_plot(tmp_path: Path) -> None:
    benchmark, corpus = write_legalbench(tmp_path / "data")
    out = tmp_path / "out"
    templates = "topB,budgetB,prevnextB,budgetB_a0.5"
    arguments = ["eval", str(benchmark), "--corpus", str(corpus), "--chunk-size", "60",
                 "--methods", "topk,default", "--bootstrap", "0", "--no-sweep", "--budgets", "2,4",
                 "--budget-methods", templates, "--no-cache", "--out", str(out)]  # fmt: skip
    assert main([*arguments, *FAKE]) == 0
    section = json.loads((out / "results.json").read_text())["budgets"]
    assert section["budgets"] == [2, 4]
    assert list(section["curves"]) == templates.split(",")
    assert section["curves"]["topB"]["4"]["all"]["chunks"] == 4.0
    report = (out / "report.md").read_text()
    assert "## Recall against the budget B" in report
    assert "| B | topB | budgetB | prevnextB | budgetB_a0.5 |" in report
    top4 = section["curves"]["topB"]["4"]["all"]
    all_rows = report.split("all queries:")[1].splitlines()
    row = next(line for line in all_rows if line.startswith("| 4 | "))
    want = f"{top4['recall']:.3f} / {top4['char_recall']:.3f} / {top4['tokens']:.0f}"
    assert row.split(" | ")[1] == want  # chunk recall, character recall and tokens side by side
    assert (out / "budgets.png").stat().st_size > 0
    assert build_parser().parse_args(["eval", "--budgets"]).budgets == BUDGETS


@pytest.mark.parametrize(("budgets", "templates"), [([0], ["topB"]), ([3], ["top5"])])
def test_budget_sweep_refuses_bad_budgets_and_templates(
    budgets: list[int], templates: list[str]
) -> None:
    with pytest.raises(InvalidSettingsError, match="must be integers >= 1"):
        budget_methods(budgets, templates, REGISTRY)


def test_budget_sweep_says_where_scar_is_ahead_of_what_you_have(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    benchmark, corpus = write_legalbench(tmp_path / "data")
    out = tmp_path / "out"
    arguments = ["eval", str(benchmark), "--corpus", str(corpus), "--chunk-size", "60",
                 "--methods", "topk", "--bootstrap", "0", "--no-sweep", "--budgets", "2,4",
                 "--budget-methods", "topB,budgetB,prevnextB", "--no-cache", "--no-plot",
                 "--out", str(out)]  # fmt: skip
    assert main([*arguments, *FAKE]) == 0
    section = json.loads((out / "results.json").read_text())["budgets"]
    report = (out / "report.md").read_text()
    queries = len(load_benchmark(benchmark, corpus).queries)
    for b in ("2", "4"):
        means = {t: section["curves"][t][b]["all"]["recall"] for t in ("topB", "prevnextB")}
        best = max(means, key=lambda t: means[t])
        row = section["verdict"][b]
        assert row["against"] == best
        assert row["gap"] == pytest.approx(
            section["curves"]["budgetB"][b]["all"]["recall"] - means[best]
        )
        assert row["won"] + row["lost"] <= row["n"] == queries
        assert f"| {b} | {best} | {100 * row['gap']:+.1f} " in report
        assert "ci" not in row  # --bootstrap 0
    assert "SCAR minus the better of topB and prevnextB" in capsys.readouterr().out


def test_verdict_counts_queries_won_and_lost_and_flags_a_loss() -> None:
    from scar_tools.eval.budgets import against_what_you_have, render_verdict
    from scar_tools.eval.stats import paired_bootstrap

    recalls = {
        "budgetB": {3: np.array([1.0, 0.0, 0.5, 0.5])},
        "topB": {3: np.array([0.5, 0.5, 0.5, 0.5])},
        "prevnextB": {3: np.array([1.0, 1.0, 0.0, 0.5])},
    }
    # means: budget 0.5, top 0.5, prev/next 0.625 -> against prevnextB, gap -0.125;
    # per query 1 vs 1, 0 vs 1, 0.5 vs 0, 0.5 vs 0.5: won 1, lost 1.
    verdict = against_what_you_have(recalls)
    assert verdict == {"3": {"against": "prevnextB", "gap": -0.125, "won": 1, "lost": 1, "n": 4}}
    lines = "\n".join(render_verdict(verdict))
    assert "| 3 | prevnextB | -12.5 **behind** | 1 | 1 |" in lines
    assert "SCAR is behind at B = 3" in lines
    assert against_what_you_have({"topB": recalls["topB"]}) == {}
    resampled = against_what_you_have(recalls, n_resamples=500, seed=3)["3"]
    expected = paired_bootstrap(recalls["budgetB"][3], recalls["prevnextB"][3], n_resamples=500,
                                seed=3)  # fmt: skip
    assert resampled["ci"] == [expected.ci_low, expected.ci_high]
    interval = f"-12.5 [{100 * expected.ci_low:+.1f}, {100 * expected.ci_high:+.1f}] **behind**"
    assert interval in "\n".join(render_verdict({"3": resampled}))
