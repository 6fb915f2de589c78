"""The reward, the execution feedback step and the eval metrics (code extraction: ``extract.py``)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Mapping, Sequence

import numpy as np

from c3_plugin.core.rewards import batched
from c3_sandbox.sandbox import Sandbox, Test, TestResult, default_sandbox
from domains.code.extract import extract_code

from .data import decode_tests


def syntax_valid(code: str) -> bool:
    """Whether the code compiles (compiling runs nothing)."""
    try:
        compile(code, "<candidate>", "exec")
        return True
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False


# the limit of a test without its own; the config's code.timeout_s sets it (configure_from)
DEFAULTS = {"timeout_s": 5.0}


def judge_batch(codes: Sequence[str], items: Sequence[Mapping[str, Any]], field: str = "tests",
                sandbox: Sandbox | None = None, timeout_s: float | None = None) -> list[list[TestResult]]:
    """Per-test results of each candidate on its item's tests (evaluated concurrently); ``timeout_s``
    (default ``DEFAULTS["timeout_s"]``) limits each test that has no limit of its own."""
    sb = sandbox or default_sandbox()
    limit = DEFAULTS["timeout_s"] if timeout_s is None else timeout_s
    return sb.run_many([(c, decode_tests(it[field]), str(it.get("setup") or "")) for c, it in zip(codes, items)], limit)


def rate(results: Sequence[TestResult]) -> float:
    return float(np.mean([r.passed for r in results])) if results else 0.0


class ResultCache:
    """The per-test results of recently judged candidates, keyed by (code, hidden tests, setup),
    least recently used dropped first: the reward fills it and the outcome extractor reads it, so
    a leaf's tests run once per rollout batch."""

    def __init__(self, size: int = 4096):
        self.size = size  # candidates kept (a rollout batch of 32 instances x 8 leaves is 256)
        self._data: OrderedDict[tuple[str, str, str], list[TestResult]] = OrderedDict()

    @staticmethod
    def key(code: str, item: Mapping[str, Any]) -> tuple[str, str, str]:
        return code, str(item["tests"]), str(item.get("setup") or "")

    def get(self, key: tuple[str, str, str]) -> list[TestResult] | None:
        if key in self._data:
            self._data.move_to_end(key)
        return self._data.get(key)

    def put(self, key: tuple[str, str, str], results: list[TestResult]) -> None:
        self._data[key] = results
        self._data.move_to_end(key)
        while len(self._data) > self.size:
            self._data.popitem(last=False)


def make_reward(timeout_s: float | None = None, sandbox: Sandbox | None = None):
    cache = ResultCache()

    def reward(*agent_completions: Sequence[str], batch_items: Sequence[Mapping[str, Any]] | None = None,
               prompts: Sequence[str] | None = None) -> list[float]:
        """Pass rate of the last agent's code on the item's hidden tests, in [0, 1]."""
        finals = agent_completions[-1]
        finals = [finals] if isinstance(finals, str) else list(finals)
        if batch_items is None or len(batch_items) != len(finals):
            raise ValueError("code reward: batch_items must give one item with 'tests' per completion")
        codes = [extract_code(c, it.get("entry_point")) for c, it in zip(finals, batch_items)]
        results = judge_batch(codes, batch_items, "tests", sandbox, timeout_s)
        for code, item, res in zip(codes, batch_items, results):
            cache.put(ResultCache.key(code, item), res)
        return [rate(r) for r in results]

    batched(reward)  # one call judges a batch's sandboxes together (c3_plugin.core.rewards)
    reward.reward_range = (0.0, 1.0)
    reward.results = cache  # the per-test results behind recent rewards (read by make_outcome)
    reward.timeout_s, reward.sandbox = timeout_s, sandbox
    return reward


def make_outcome(reward):
    """The outcome extractor of ``reward`` (from :func:`make_reward`): per leaf, the tuple of pass/fail
    of the final action's code on each hidden test. Results the reward already computed are reused;
    others are judged here (one concurrent batch) and cached."""
    cache: ResultCache = reward.results

    def outcome(leaves: Sequence[Any]) -> list[tuple[bool, ...]]:
        keys = [ResultCache.key(extract_code(leaf.action, leaf.item.get("entry_point")), leaf.item) for leaf in leaves]
        found = [cache.get(k) for k in keys]
        missing = [i for i, r in enumerate(found) if r is None]
        if missing:
            fresh = judge_batch([keys[i][0] for i in missing], [leaves[i].item for i in missing], "tests",
                                reward.sandbox, reward.timeout_s)
            for i, res in zip(missing, fresh):
                cache.put(keys[i], res)
                found[i] = res
        return [tuple(bool(r.passed) for r in res) for res in found]

    return outcome


def feedback_text(results: Sequence[TestResult], tests: Sequence[Test], example: str) -> str:
    lines = []
    for res, test in zip(results, tests):
        what = example.strip() or test.source
        if res.passed:
            lines.append(f"Example test `{what}`: passed.")
        else:
            out = f" Output: {res.output.strip()[:200]}" if res.output.strip() else ""
            lines.append(f"Example test `{what}`: {res.status} ({res.reason[:200]}).{out}")
    return "Execution feedback:\n" + "\n".join(lines)


def run_visible_tests(item: Mapping[str, Any], outputs: Mapping[str, str], sandbox: Sandbox | None = None) -> str:
    """The environment step of the multi-turn workflow: run the visible example tests on the
    latest code and write the outcome as text (recorded in the trace as its own entry)."""
    code = extract_code(next(iter(outputs.values()), ""), item.get("entry_point")) if outputs else ""
    tests = decode_tests(item["visible_tests"])
    if not syntax_valid(code):
        return "Execution feedback:\nThe code does not compile."
    results = (sandbox or default_sandbox()).run(code, tests, str(item.get("setup") or ""),
                                                 timeout_s=DEFAULTS["timeout_s"])
    return feedback_text(results, tests, str(item.get("example", "")))


def _logger(final_agent: int | None, timeout_s: float | None):
    def eval_logger(agent_completions_turns, batch_items=None, prompts=None) -> list[dict]:
        items = list(batch_items or [])
        agent = len(agent_completions_turns) - 1 if final_agent is None else final_agent
        codes = [extract_code(t[-1] if t else "", it.get("entry_point"))
                 for t, it in zip(agent_completions_turns[agent], items)]
        results = judge_batch(codes, items, "tests", None, timeout_s)
        return [{"datasource": str(it.get("datasource", "eval")), "pass@1": float(bool(r) and all(x.passed for x in r)),
                 "pass_rate": rate(r), "syntax_valid": float(syntax_valid(c)),
                 "timeout": float(any(x.status == "timeout" for x in r))}
                for it, c, r in zip(items, codes, results)]

    return eval_logger


def eval_aggregator(rows: Sequence[Mapping[str, Any]], num_turns: int = 1) -> dict[str, float]:
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["datasource"], []).append(r)
    if len(groups) > 1:
        groups["all"] = list(rows)
    out: dict[str, float] = {}
    for suite, rs in groups.items():
        for key, name in (("pass@1", "pass@1"), ("pass_rate", "test_pass_rate"), ("syntax_valid", "syntax_valid_rate"),
                          ("timeout", "timeout_rate")):
            out[f"{suite}/{name}"] = float(np.mean([r[key] for r in rs]))
        out[f"{suite}/n"] = float(len(rs))
    return out


default_eval_logger = _logger(None, None)


def make_eval_logger(workflow, timeout_s: float | None = None):
    final = workflow.final or workflow.decision_points()[-1]
    return _logger(workflow.roles[final].agent, timeout_s)
