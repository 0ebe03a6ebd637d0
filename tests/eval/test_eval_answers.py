"""``scar eval --answers``: answers and grades through a local fake OpenAI-compatible server.

The server is a real HTTP server on 127.0.0.1 (``http.server`` in a thread) that serves
``/v1/chat/completions`` deterministically from the prompt, with usage counts; the real ``openai``
client talks to it, retries included. Nothing of ours is mocked, and no key or network is needed.
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import socket
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from eval_support import QUERIES, HashEmbedder, write_legalbench

from scar_core._errors import MissingDependencyError
from scar_tools.cli import main
from scar_tools.eval import EvalConfig, load_benchmark, run_evaluation
from scar_tools.eval.answers import Answering, ChatModel, judge

KEY = "sk-secret-test"
FAKE = ["--model", "py:eval_support:HashEmbedder", "--no-progress"]
#: The README's "Answer quality" command; the test runs it with the fixture's paths.
README_COMMAND = (
    "scar eval queries.json --corpus docs/ --answers openai:gpt-4o-mini --answers-limit 50"
)
ROOT = Path(__file__).resolve().parents[2]


def sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=\.)\s+", " ".join(text.split())) if s.strip()]


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


class FakeLLM(BaseHTTPRequestHandler):
    """A chat-completions endpoint: answers with the context sentence closest to the question, and
    judges by exact sentence containment. ``server.plan`` holds statuses to send before answering;
    a prompt containing ``server.broken`` always gets a 500."""

    server: Any

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        state = self.server
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        prompt = body["messages"][-1]["content"]
        with state.lock:
            state.requests.append({"auth": self.headers.get("authorization"), "body": body})
            status = state.plan.pop(0) if state.plan else 200
        if state.broken and state.broken in prompt:
            status = 500
        if self.path != "/v1/chat/completions" or status != 200:
            return self.reply(status, {"error": {"message": f"failure {status}", "type": "x"}})
        if prompt.startswith("You grade"):
            kind, content = "judge", self.grade(prompt)
        else:
            kind, content = "answer", self.answer(prompt)
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": len(content.split())}
        with state.lock:
            state.served.append({"kind": kind, "prompt": prompt, **usage})
        choice = {"index": 0, "finish_reason": "stop",
                  "message": {"role": "assistant", "content": content}}  # fmt: skip
        self.reply(200, {"id": "x", "object": "chat.completion", "created": 0,
                         "model": body["model"], "choices": [choice],
                         "usage": {**usage, "total_tokens": sum(usage.values())}})  # fmt: skip

    def answer(self, prompt: str) -> str:
        context, question = prompt.split("\n\nContext:\n")[1].split("\n\nQuestion: ")
        candidates = sentences(re.sub(r"\[\d+\] ", "", context))
        return max(candidates, key=lambda s: len(words(s) & words(question)))

    def grade(self, prompt: str) -> str:
        parts = re.split(r"\n\n(?:QUESTION|CONTEXT|REFERENCE|ANSWER):\n", prompt)
        _, _, context, reference, answer = (" ".join(p.split()) for p in parts)
        context = re.sub(r"\[\d+\] ", "", context)
        claims = [{"claim": c, "context": c in context, "reference": c in reference}
                  for c in sentences(answer)]  # fmt: skip
        facts = [{"fact": f, "answered": f in answer} for f in sentences(reference)]
        return "```json\n" + json.dumps({"claims": claims, "facts": facts}) + "\n```"

    def reply(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("retry-after-ms", "1")
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def llm() -> Iterator[Any]:
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), FakeLLM)
    server.lock, server.requests, server.served, server.plan = threading.Lock(), [], [], []
    server.broken = None
    server.url = f"http://127.0.0.1:{server.server_port}/v1"
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    return write_legalbench(tmp_path / "data")


def evaluate(data: tuple[Path, Path], llm: Any, tmp_path: Path, out: str, *extra: str) -> int:
    benchmark, corpus = data
    return main(["eval", str(benchmark), "--corpus", str(corpus), "--chunk-size", "60", "--k", "2",
                 "--methods", "topk,default", "--bootstrap", "200", "--no-sweep",
                 "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / out),
                 "--answers", "openai:fake", "--base-url", llm.url, *FAKE, *extra])  # fmt: skip


def every_file(root: Path) -> Iterator[Path]:
    return (p for p in root.rglob("*") if p.is_file())


def test_pipeline_tokens_cache_and_the_key(
    data: tuple[Path, Path], llm: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert evaluate(data, llm, tmp_path, "out") == 0
    first = capsys.readouterr()
    payload = json.loads((tmp_path / "out" / "results.json").read_text())
    answers = payload["answers"]
    # An answer and a judgement per query and method; identical prompts (two methods that selected
    # the same chunks) are asked once.
    calls = 2 * 3 * len(QUERIES)
    made, distinct = answers["calls"]["made"], {json.dumps(r["body"]) for r in llm.requests}
    assert len(llm.requests) == len(distinct) == made < calls
    assert answers["calls"] == {"made": made, "cached": calls - made}
    assert {r["auth"] for r in llm.requests} == {f"Bearer {KEY}"}
    assert "answers: 15 answers (5 queries x 3 methods)" in first.out
    assert f"{calls - made} calls cached, {made} to make" in first.out
    assert list(answers["methods"]) == ["top2", "static1", "default"]  # topB at B = --k
    assert answers["reference"] == "default"
    assert set(answers["bootstrap"]) == {"top2", "static1"}
    assert set(answers["bootstrap"]["top2"]) == {"faithfulness", "correctness", "prompt_tokens",
                                                 "completion_tokens"}  # fmt: skip
    assert answers["failed"] == {"count": 0, "items": []}
    for summary in answers["methods"].values():
        assert summary["answered"] == len(QUERIES)
        assert summary["faithfulness"] == 1.0  # the fake answers with a sentence of the context
        assert 0 < summary["correctness"] <= 1
    # Token accounting: the API's usage, per query and in total.
    rows = [json.loads(x) for x in (tmp_path / "out" / "per_query.jsonl").read_text().splitlines()]
    served = {kind: [s for s in llm.served if s["kind"] == kind] for kind in ("answer", "judge")}
    records = [r for row in rows for r in row["answers"].values()]
    assert len(records) == calls // 2
    pairs = {(s["prompt_tokens"], s["completion_tokens"]) for s in served["answer"]}
    assert {(r["prompt_tokens"], r["completion_tokens"]) for r in records} == pairs
    for field, kind, prefix in [("prompt_tokens", "answer", ""), ("completion_tokens", "answer", ""),
                                ("prompt_tokens", "judge", "judge_"),
                                ("completion_tokens", "judge", "judge_")]:  # fmt: skip
        usage = {s["prompt"]: s[field] for s in served[kind]}  # a repeated prompt: same usage
        assert sum(usage.values()) == sum(s[field] for s in served[kind])
        recorded = sum(r[prefix + field] for r in records)
        assert recorded == answers["tokens"][prefix + field] >= sum(usage.values())
    for name, summary in answers["methods"].items():
        tokens = [row["answers"][name]["prompt_tokens"] for row in rows]
        assert summary["prompt_tokens"] == pytest.approx(sum(tokens) / len(tokens))
    assert rows[0]["answers"]["default"]["answer"]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Answer quality: `openai:fake` on the first 5 queries" in report
    assert "| default minus |" in report
    # A rerun makes no call and gives the same answers.
    assert evaluate(data, llm, tmp_path, "again") == 0
    second = capsys.readouterr()
    assert len(llm.requests) == made
    assert f"{calls} calls cached, 0 to make" in second.out
    again = json.loads((tmp_path / "again" / "results.json").read_text())["answers"]
    assert again["calls"] == {"made": 0, "cached": calls}
    assert again["methods"] == answers["methods"]
    assert (tmp_path / "cache" / "answers" / "replies.jsonl").is_file()
    # The key is in no output and no file.
    for text in (first.out, first.err, second.out, second.err):
        assert KEY not in text
    for path in every_file(tmp_path):
        assert KEY.encode() not in path.read_bytes(), path


@pytest.mark.parametrize("statuses", [[429, 429], [500, 503]])
def test_rate_limits_and_server_errors_are_retried(
    data: tuple[Path, Path], llm: Any, tmp_path: Path, statuses: list[int]
) -> None:
    llm.plan = list(statuses)
    extra = ["--answers-limit", "1", "--answers-methods", "top3"]
    assert evaluate(data, llm, tmp_path, "out", *extra) == 0
    assert len(llm.requests) == 2 + len(statuses)  # an answer, a judgement and the retries
    answers = json.loads((tmp_path / "out" / "results.json").read_text())["answers"]
    assert answers["failed"]["count"] == 0
    assert answers["calls"]["made"] == 2
    assert list(answers["methods"]) == ["top3"]
    answer, judgement = llm.served  # the usage the API reported is what is recorded
    row = json.loads((tmp_path / "out" / "per_query.jsonl").read_text().splitlines()[0])
    record = row["answers"]["top3"]
    assert (record["prompt_tokens"], record["completion_tokens"]) == (
        answer["prompt_tokens"], answer["completion_tokens"])  # fmt: skip
    assert (record["judge_prompt_tokens"], record["judge_completion_tokens"]) == (
        judgement["prompt_tokens"], judgement["completion_tokens"])  # fmt: skip
    assert answers["methods"]["top3"]["prompt_tokens"] == answer["prompt_tokens"]
    assert answers["bootstrap"] is None  # one method: nothing to compare


def test_a_failing_query_is_reported_and_retried_next_time(
    data: tuple[Path, Path], llm: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    llm.broken = "CCTV"  # query 2's answer calls fail after the client's retries
    assert evaluate(data, llm, tmp_path, "out") == 0
    printed = capsys.readouterr()
    answers = json.loads((tmp_path / "out" / "results.json").read_text())["answers"]
    assert answers["failed"]["count"] == 3
    assert {(f["index"], f["method"]) for f in answers["failed"]["items"]} == {
        (2, "top2"), (2, "static1"), (2, "default")
    }  # fmt: skip
    assert all("InternalServerError" in f["error"] for f in answers["failed"]["items"])
    assert all(s["answered"] == len(QUERIES) - 1 for s in answers["methods"].values())
    assert "Failed answers: 3:" in printed.out
    assert "- query 2 (static1): InternalServerError" in printed.out
    report = (tmp_path / "out" / "report.md").read_text()
    assert "- query 2 (default): InternalServerError" in report
    rows = [json.loads(x) for x in (tmp_path / "out" / "per_query.jsonl").read_text().splitlines()]
    assert rows[2]["answers"]["top2"]["answer"] is None
    assert rows[2]["answers"]["top2"]["error"].startswith("InternalServerError")
    llm.broken = None  # the server recovers: the rerun asks only for what failed
    before = len(llm.requests)
    assert evaluate(data, llm, tmp_path, "again") == 0
    asked = llm.requests[before:]
    assert asked
    assert all("CCTV" in r["body"]["messages"][0]["content"] for r in asked)
    assert f"{30 - len(asked)} calls cached, {len(asked)} to make" in capsys.readouterr().out
    again = json.loads((tmp_path / "again" / "results.json").read_text())["answers"]
    assert again["failed"]["count"] == 0
    assert again["calls"]["made"] == len(asked)


def test_estimate_comes_before_the_first_call_and_the_api_works_from_python(
    data: tuple[Path, Path], llm: Any, tmp_path: Path
) -> None:
    results = run_evaluation(load_benchmark(*data), HashEmbedder(),
                             EvalConfig(k=2, chunk_size=60, methods=("topk",), n_resamples=0,
                                        sweep=False), show_progress=False)  # fmt: skip
    said: list[tuple[int, str]] = []
    model = ChatModel("openai:fake", base_url=llm.url, cache_path=tmp_path / "replies.jsonl")
    Answering(model, 2, ("topk", "budget3"), limit=2).run(
        results, lambda text: said.append((len(llm.requests), text))
    )
    assert said[0][0] == 0
    assert said[0][1].startswith("answers: 4 answers (2 queries x 2 methods)")
    assert "0 calls cached, 8 to make, about " in said[0][1]
    assert "cl100k_base tokens" in said[0][1]
    assert len(llm.requests) == 8
    assert results.answers is not None
    assert results.answers["bootstrap"] is None  # n_resamples=0
    assert set(results.answer_rows) == {0, 1}


def test_refused_key_stops_at_the_first_call(
    data: tuple[Path, Path], llm: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    llm.plan = [401] * 10
    assert evaluate(data, llm, tmp_path, "out") == 2
    error = capsys.readouterr().err
    assert "AuthenticationError" in error
    assert KEY not in error
    assert len(llm.requests) == 1  # a 401 is not retried, and no other call is made
    assert not (tmp_path / "out").exists()


def test_judge_scores_follow_ragas_definitions() -> None:
    reply = json.dumps({
        "claims": [{"claim": "a", "context": True, "reference": True},
                   {"claim": "b", "context": True, "reference": False},
                   {"claim": "c", "context": False, "reference": False}],
        "facts": [{"fact": "a", "answered": True}, {"fact": "d", "answered": False}],
    })  # fmt: skip
    faithful, correct, parsed = judge(f"Here it is: {reply} done")
    assert faithful == pytest.approx(2 / 3)
    assert correct == pytest.approx(1 / (1 + (2 + 1) / 2))  # TP 1, FP 2, FN 1
    assert parsed["facts"][1]["fact"] == "d"
    assert judge('{"claims": [], "facts": [{"fact": "x", "answered": false}]}')[:2] == (None, 0.0)
    assert judge('{"claims": [], "facts": []}')[:2] == (None, None)
    for bad in ("no json", '{"claims": [{"claim": "a"}], "facts": []}',
                '{"claims": [], "facts": [{"fact": "a", "answered": "yes"}]}'):  # fmt: skip
        with pytest.raises(ValueError, match="not the JSON asked for"):
            judge(bad)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--answers", "gpt-4o"], "write openai:MODEL"),
        (["--answers", "openai:x", "--answers-methods", "topk,bogus"], "method 'bogus'"),
        (["--answers-limit", "3"], "need --answers openai:MODEL"),
        (["--base-url", "http://127.0.0.1:9/v1"], "need --answers openai:MODEL"),
        (["--answers", "openai:x"], "set OPENAI_API_KEY, or give --base-url"),
    ],
)
def test_bad_answer_settings_fail_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    extra: list[str], message: str,
) -> None:  # fmt: skip
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    if "--base-url" not in extra and extra[-1] != "openai:x":
        extra = [*extra, "--base-url", "http://127.0.0.1:9/v1"]
    benchmark, corpus = write_legalbench(tmp_path)
    out = tmp_path / "out"
    assert main(["eval", str(benchmark), "--corpus", str(corpus), "--out", str(out), *FAKE,
                 *extra]) == 2  # fmt: skip
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_missing_openai_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(MissingDependencyError, match=r"scar-retrieval\[answers\]"):
        ChatModel("openai:x", base_url="http://127.0.0.1:9/v1")


def test_the_readme_command(
    data: tuple[Path, Path], llm: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    if "## Answer quality" in readme:
        assert README_COMMAND in readme
    benchmark, corpus = data
    words_ = shlex.split(README_COMMAND)
    assert words_[:2] == ["scar", "eval"]
    arguments = [str(benchmark) if w == "queries.json" else str(corpus) if w == "docs/" else w
                 for w in words_[1:]]  # fmt: skip
    status = main([*arguments, "--base-url", llm.url, "--out", str(tmp_path / "out"),
                   "--cache-dir", str(tmp_path / "cache"), "--bootstrap", "100", "--no-plot",
                   *FAKE])  # fmt: skip
    assert status == 0
    assert "answers: 15 answers (5 queries x 3 methods)" in capsys.readouterr().out
    assert {r["body"]["model"] for r in llm.requests} == {"gpt-4o-mini"}
    answers = json.loads((tmp_path / "out" / "results.json").read_text())["answers"]
    assert list(answers["methods"]) == ["top5", "static1", "default"]


def test_an_unreachable_server_stops_the_run_at_the_first_call(
    data: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server that drops every connection: one attempt, no retries, exit 2 with the fix."""
    listener = socket.create_server(("127.0.0.1", 0))
    attempts: list[int] = []

    def drop_connections() -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _ = listener.accept()
                attempts.append(1)
                connection.close()

    threading.Thread(target=drop_connections, daemon=True).start()
    dead = SimpleNamespace(url=f"http://127.0.0.1:{listener.getsockname()[1]}/v1")
    try:
        assert evaluate(data, dead, tmp_path, "out") == 2
    finally:
        listener.close()
    error = capsys.readouterr().err
    assert "APIConnectionError" in error
    assert "Check that the server is running and reachable (--base-url)" in error
    assert len(attempts) == 1
    assert not (tmp_path / "out").exists()
