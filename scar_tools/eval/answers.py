"""Answer quality: does a method's context give better answers, with the user's own LLM?

Per query and method, the selected chunks (stitched passage by passage) and the question go to a
chat model; a second call grades the answer in one JSON reply (:data:`JUDGE_PROMPT`; why not RAGAS:
docs/answers.md). **Faithfulness**: share of the answer's claims the context supports.
**Correctness**: F1 of the claims against the gold evidence text, ``TP / (TP + (FP + FN) / 2)``.
Replies are cached in JSONL keyed by a SHA-256 of model, base URL, messages and settings (never the
key). The ``openai`` client (extra ``answers``) retries 429 and transient errors; a query that still
fails is counted and listed, never dropped.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from scar_core._errors import InvalidSettingsError, MissingDependencyError, missing_dependency
from scar_core._passages import stitch
from scar_tools.embedders import scrub_secrets
from scar_tools.eval.embedding import progress, token_counter
from scar_tools.eval.methods import REGISTRY
from scar_tools.eval.stats import paired_bootstrap

if TYPE_CHECKING:
    from scar_tools.eval.runner import EvalResults

__all__ = ["ANSWER_PROMPT", "JUDGE_PROMPT", "Answering", "ChatModel", "answering_from_args",
           "judge", "render_answers"]  # fmt: skip

ANSWER_PROMPT = """Answer the question using only the context below. If the context does not hold \
the answer, say so. Be brief.\n\nContext:\n{context}\n\nQuestion: {question}"""
JUDGE_PROMPT = """You grade an ANSWER to a QUESTION. The CONTEXT is what the answer was written \
from; the REFERENCE is the gold evidence for the question.\n1. Split the ANSWER into atomic claims \
(short statements, no pronouns). Leave out statements that only say the context lacks the \
information.\n2. For each claim: "context" is true when the CONTEXT directly supports it; \
"reference" is true when the REFERENCE directly supports it.\n3. List the facts of the REFERENCE \
that answer the QUESTION; for each: "answered" is true when the ANSWER states it.\nReply with JSON \
only, in this shape:\n{{"claims": [{{"claim": "...", "context": true, "reference": false}}], \
"facts": [{{"fact": "...", "answered": true}}]}}\n\n\
QUESTION:\n{question}\n\nCONTEXT:\n{context}\n\nREFERENCE:\n{reference}\n\nANSWER:\n{answer}"""
#: Completion limits of an answer and of a judgement.
ANSWER_TOKENS, JUDGE_TOKENS = 512, 1024
METRICS = ("faithfulness", "correctness", "prompt_tokens", "completion_tokens")
#: Errors after which no other call can succeed: the run stops with the message (exit 2).
_ABORT = ("AuthenticationError", "PermissionDeniedError", "NotFoundError", "APIConnectionError",
          "APITimeoutError")  # fmt: skip
Task = tuple[int, str, str, str, str]  # query index, method, question, context, reference


def _ask(task: Task) -> list[dict[str, str]]:
    return [{"role": "user", "content": ANSWER_PROMPT.format(question=task[2], context=task[3])}]


def _grade(task: Task, answer: str) -> list[dict[str, str]]:
    fields = {"question": task[2], "context": task[3], "reference": task[4], "answer": answer}
    return [{"role": "user", "content": JUDGE_PROMPT.format(**fields)}]


class ChatModel:
    """``openai:NAME`` through the ``openai`` client (``max_retries`` retries), replies cached.

    ``base_url``: any OpenAI-compatible server (a placeholder key if ``OPENAI_API_KEY`` is unset).
    ``cache_path``: the JSONL cache or ``None``. Raises ``InvalidSettingsError`` or ``ImportError``.
    """

    def __init__(self, spec: str, *, base_url: str | None = None,
                 cache_path: Path | None = None, max_retries: int = 5) -> None:  # fmt: skip
        kind, _, self.name = spec.partition(":")
        if kind != "openai" or not self.name:
            raise InvalidSettingsError(f"--answers {spec!r} is not valid; write openai:MODEL.")
        try:
            import openai
        except ImportError as exc:
            raise missing_dependency("openai", "answers") from exc
        self.key = os.environ.get("OPENAI_API_KEY") or ("no-key" if base_url else "")
        if not self.key:
            raise InvalidSettingsError("set OPENAI_API_KEY, or give --base-url of a local server.")
        self.openai, self.spec = openai, spec
        self.client = openai.OpenAI(api_key=self.key, base_url=base_url, max_retries=max_retries)
        self.base_url = scrub_secrets(str(self.client.base_url), self.key)
        self.cache_path, self.cache, self.made, self.cached = cache_path, dict[str, Any](), 0, 0
        saved = cache_path.read_text("utf-8") if cache_path and cache_path.is_file() else ""
        for line in saved.splitlines():
            with contextlib.suppress(ValueError, KeyError, TypeError):  # a line cut short: redo
                self.cache.update({(record := json.loads(line))["key"]: record})

    def key_of(self, messages: list[dict[str, str]], max_tokens: int) -> str:
        """The cache key: model, base URL, messages and settings; never the API key."""
        settings = {"temperature": 0, "max_tokens": max_tokens}
        blob = json.dumps([self.name, self.base_url, messages, settings], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()

    def complete(self, messages: list[dict[str, str]], max_tokens: int) -> dict[str, Any]:
        """Return the cached reply ``{content, prompt_tokens, completion_tokens}``, else ask."""
        key = self.key_of(messages, max_tokens)
        record = self.cache.get(key)
        self.cached += record is not None
        if record is None:
            response = self._create(messages, max_tokens)
            usage = response.usage
            record = {"key": key, "content": response.choices[0].message.content or "",
                      "prompt_tokens": usage.prompt_tokens if usage else 0,
                      "completion_tokens": usage.completion_tokens if usage else 0}  # fmt: skip
            self.made, self.cache[key] = self.made + 1, record
            if self.cache_path is not None:
                self.cache_path.parent.mkdir(parents=True, exist_ok=True)
                with self.cache_path.open("a", encoding="utf-8") as handle:
                    handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        return record

    def _create(self, messages: list[dict[str, str]], max_tokens: int) -> Any:
        """One chat completion; until one has gone through, an unreachable server fails at once.

        The client retries connection errors too, about 13 s a call; before the first reply,
        only errors the server itself answered (429, 5xx) are retried.
        """
        settings = {"model": self.name, "messages": cast(Any, messages), "temperature": 0,
                    "max_tokens": max_tokens}  # fmt: skip
        if self.made:
            return self.client.chat.completions.create(**settings)
        try:
            return self.client.with_options(max_retries=0).chat.completions.create(**settings)
        except self.openai.APIStatusError as exc:
            if exc.status_code not in (408, 409, 429) and exc.status_code < 500:
                raise  # what the client would not retry either
            return self.client.chat.completions.create(**settings)


def judge(reply: str) -> tuple[float | None, float | None, dict[str, Any]]:
    """Score a judge's reply: ``(faithfulness, correctness, its JSON)``, ``None`` if undefined.

    Raises ``ValueError`` if the reply holds no JSON object of the asked shape.
    """
    start, end = reply.find("{"), reply.rfind("}")
    found: Any = json.loads(reply[start : end + 1]) if 0 <= start < end else {}
    claims, facts = found.get("claims"), found.get("facts")
    try:
        flags = [c[k] for c in claims for k in ("context", "reference")] + [
            f["answered"] for f in facts
        ]
        if not all(isinstance(v, bool) for v in flags):
            raise TypeError("a verdict is not true or false")
    except (KeyError, TypeError) as exc:
        raise ValueError(f"the judge's reply is not the JSON asked for: {reply[:80]!r}") from exc
    supported, hits = sum(c["context"] for c in claims), sum(c["reference"] for c in claims)
    wrong = len(claims) - hits + sum(not f["answered"] for f in facts)
    faithful = supported / len(claims) if claims else None
    return faithful, hits / (hits + wrong / 2) if hits + wrong else None, found


@dataclass
class Answering:
    """``model`` answers the first ``limit`` queries with ``methods`` (topB, B = k; static1...)."""

    model: ChatModel
    k: int
    methods: tuple[str, ...] = ()
    limit: int | None = None

    def __post_init__(self) -> None:
        self.methods = self.methods or (f"top{self.k}", "static1", "default")
        for name in self.methods:
            REGISTRY.create(name, self.k)  # an unknown name fails before any call
        if self.limit is not None and self.limit < 1:
            raise InvalidSettingsError(f"--answers-limit {self.limit} must be >= 1.")

    def run(self, results: EvalResults, say: Callable[[str], object] = print, *,
            show_progress: bool = False) -> None:  # fmt: skip
        """Answer, grade, set ``results.answers`` and ``.answer_rows``; a refused key raises."""
        from scar_tools.eval.runner import run_methods

        prepared, model = results.prepared, self.model
        missing = {n: REGISTRY.create(n, self.k) for n in self.methods if n not in results.runs}
        runs = {**results.runs, **run_methods(prepared, missing, self.k, count_tokens=False)}
        corpus, docs = prepared.corpus, prepared.benchmark.documents
        tasks: list[Task] = []
        for i, query in enumerate(queries := prepared.queries[: self.limit]):
            reference = "\n".join(docs[d][a:b] for d, a, b in prepared.evidence[i])
            for name in self.methods:
                passages = runs[name][0][i].passages
                rows = [[corpus.chunks[corpus.row_of[c]] for c in p] for p in passages]
                texts = [stitch([c.text for c in p], [c.start for c in p]) for p in rows]
                context = "\n\n".join(f"[{n}] {t}" for n, t in enumerate(texts, 1))
                tasks.append((query.index, name, query.text, context, reference))
        say(self._estimate(tasks))
        records: dict[tuple[int, str], dict[str, Any]] = {}
        for task in progress(tasks, total=len(tasks), description="answers", enabled=show_progress):
            record = dict.fromkeys(("answer", "faithfulness", "correctness", "judgement", "error"))
            try:
                reply = model.complete(_ask(task), ANSWER_TOKENS)
                record.update({t: reply[t] for t in METRICS[2:]}, answer=reply["content"])
                graded = model.complete(_grade(task, reply["content"]), JUDGE_TOKENS)
                record.update({f"judge_{t}": graded[t] for t in METRICS[2:]})
                faithful, correct, judgement = judge(graded["content"])
                record.update(faithfulness=faithful, correctness=correct, judgement=judgement)
            except (model.openai.OpenAIError, ValueError) as exc:
                why = scrub_secrets(f"{type(exc).__name__}: {exc}", model.key)
                if type(exc).__name__ in _ABORT:
                    raise InvalidSettingsError(
                        f"{model.spec} at {model.base_url}: {why}. Check that the server is "
                        "running and reachable (--base-url), and the model name and key."
                    ) from exc
                record["error"] = why
            records[task[0], task[1]] = record
        indices = [q.index for q in queries]
        results.answer_rows = {i: {n: records[i, n] for n in self.methods} for i in indices}
        results.answers = self._summary(results.config, records, indices)
        say("\n".join(render_answers(results.answers)))

    def _estimate(self, tasks: list[Task]) -> str:
        """The calls and tokens still to spend, counting what the cache already holds."""
        try:
            count, unit = token_counter(), "cl100k_base tokens"
        except MissingDependencyError:
            count, unit = (lambda text: len(text) // 4), "characters / 4, tiktoken is missing"
        model, pending = self.model, dict[object, int]()  # call -> its prompt tokens
        for task in tasks:
            known = model.cache.get(key := model.key_of(asked := _ask(task), ANSWER_TOKENS))
            if known is None:
                pending[key] = count(asked[0]["content"])
            graded = _grade(task, known["content"] if known else "")  # same answer, same judgement
            judged = model.key_of(graded, JUDGE_TOKENS) if known else (key, task[4])
            if judged not in model.cache:
                pending[judged] = count(graded[0]["content"])
        return (f"answers: {len(tasks)} answers ({len(tasks) // len(self.methods)} queries x "
                f"{len(self.methods)} methods) and as many judgements by {model.spec}: "
                f"{2 * len(tasks) - len(pending)} calls cached, {len(pending)} to make, about "
                f"{sum(pending.values()):,} prompt tokens ({unit}; judgements counted without "
                f"their answer), at most {len(pending) * JUDGE_TOKENS:,} completion tokens")  # fmt: skip

    def _summary(self, config: dict[str, Any], records: dict[tuple[int, str], dict[str, Any]],
                 indices: list[int]) -> dict[str, Any]:  # fmt: skip
        """Means per method, paired bootstrap against ``default`` (else the first), failures."""

        def series(name: str, metric: str) -> np.ndarray:  # None becomes NaN
            return np.array([records[i, name].get(metric) for i in indices], dtype=float)

        names, summary, boot = self.methods, dict[str, Any](), dict[str, Any]()
        reference = "default" if "default" in names else names[0]
        for name in names:
            summary[name] = {"answered": sum(records[i, name]["error"] is None for i in indices)}
            for m in METRICS:
                finite = (s := series(name, m))[np.isfinite(s)]
                summary[name][m] = float(finite.mean()) if finite.size else None
            if name == reference or not config.get("n_resamples"):
                continue
            boot[name] = {}
            for metric in METRICS:
                ref, other = series(reference, metric), series(name, metric)
                both = np.isfinite(ref) & np.isfinite(other)
                boot[name][metric] = None if not both.any() else paired_bootstrap(
                    ref[both], other[both], n_resamples=config["n_resamples"], seed=config["seed"]
                ).as_dict()  # fmt: skip
        failed = [{"index": i, "method": n, "error": records[i, n]["error"]}
                  for i in indices for n in names if records[i, n]["error"]]  # fmt: skip
        usage = (
            "prompt_tokens",
            "completion_tokens",
            "judge_prompt_tokens",
            "judge_completion_tokens",
        )
        totals = {t: sum(r.get(t) or 0 for r in records.values()) for t in usage}
        return {"model": self.model.spec, "base_url": self.model.base_url,
                "judge": "JUDGE_PROMPT of scar_tools/eval/answers.py (docs/answers.md)",
                "queries": len(indices), "methods": summary, "reference": reference,
                "bootstrap": boot or None, "failed": {"count": len(failed), "items": failed},
                "calls": {"made": self.model.made, "cached": self.model.cached},
                "tokens": totals}  # fmt: skip


def answering_from_args(args: Any, cache_dir: str | Path | None) -> Answering | None:
    """What the ``--answers*`` flags ask (``None``: no ``--answers``), cached in ``cache_dir``."""
    if not args.answers:
        if args.base_url or args.answers_limit is not None or args.answers_methods:
            raise InvalidSettingsError("--base-url and --answers-* need --answers openai:MODEL.")
        return None
    path = None if cache_dir is None else Path(cache_dir) / "answers" / "replies.jsonl"
    model = ChatModel(args.answers, base_url=args.base_url, cache_path=path)
    methods = tuple(m.strip() for m in (args.answers_methods or "").split(",") if m.strip())
    return Answering(model, args.k, methods, args.answers_limit)


def render_answers(section: dict[str, Any]) -> list[str]:
    """The answers section of ``report.md``: means, paired bootstrap, calls and failures."""
    lines = [f"## Answer quality: `{section['model']}` on the first {section['queries']} queries",
             "", "Faithfulness: share of the answer's claims the context supports; correctness: F1 "
             "of its claims against the gold evidence (docs/answers.md); tokens: the answer's.", "",
             "| method | answered | faithfulness | correctness | tokens in | tokens out |",
             "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for name, s in section["methods"].items():
        cells = ["–" if (v := s[m]) is None else f"{v:.{d}f}"
                 for m, d in zip(METRICS, (3, 3, 0, 0), strict=True)]  # fmt: skip
        lines.append(f"| {name} | {s['answered']} | {' | '.join(cells)} |")
    if section["bootstrap"]:
        lines += ["", f"| {section['reference']} minus | Δ faithfulness [95% CI] (p, n) | "
                  "Δ correctness [95% CI] (p, n) | Δ prompt tokens [95% CI] (p, n) |",
                  "|---|---:|---:|---:|"]  # fmt: skip
        for name, table in section["bootstrap"].items():
            cells = ["–" if (c := table[m]) is None else f"{c['mean_difference']:+.3f} "
                     f"[{c['ci_low']:+.3f}, {c['ci_high']:+.3f}] ({c['p_value']:.3g}, {c['n']})"
                     for m in ("faithfulness", "correctness", "prompt_tokens")]  # fmt: skip
            lines.append(f"| {name} | {' | '.join(cells)} |")
    failed, calls = section["failed"], section["calls"]
    lines += ["", f"Calls made {calls['made']}, cached {calls['cached']}. Failed answers: "
              f"{failed['count']}" + (":" if failed["count"] else ".")]  # fmt: skip
    lines += [f"- query {f['index']} ({f['method']}): {f['error']}" for f in failed["items"]]
    return [*lines, ""]
