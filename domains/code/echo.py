"""The prompt's example, echoed back: which hidden tests a candidate passes by returning the example's answer for every
call, found on the host from the tests alone (no candidate runs). The train split scores only the hidden tests that
echo fails, and a task it would pass whole leaves the training set (issue 50; figures in the README, "Scoring")."""

from __future__ import annotations

import ast
import json
from typing import Any, Mapping, Sequence

from c3_sandbox.assertions import CheckError
from c3_sandbox.cases import Test

from .data import decode_tests

# the values an echo may return besides a value test's expected one: an assertion's comparands, and the bare truths
# of ``assert f(x)`` / ``assert not f(x)``
BARE = (True, False, None)


def _reported(value: Any, mode: str) -> Any:
    """What the runner reports for a probe in ``mode`` when the candidate's call returns the plain ``value``."""
    if mode == "truth":
        return bool(value)
    if mode == "callable":
        return False  # plain data is never callable
    if mode == "present":
        return value if type(value) is bool else value is not None
    return value


def _modes(test: Test) -> list[str]:
    return [p.mode for p in test.assertion.probes] if test.assertion is not None else [test.mode]


def passes_with(test: Test, value: Any) -> bool:
    """Whether ``test`` passes when every call the candidate makes returns ``value`` (judged as the host judges)."""
    try:
        return bool(test.judge([_reported(value, m) for m in _modes(test)]))
    except (CheckError, ValueError, TypeError, ArithmeticError, RecursionError):
        return False


def _literals(check: str) -> list[Any]:
    """Every literal in an assertion's check (``_p0 == [1, 2]`` -> ``[1, 2]``, ``1``, ``2``), outermost first."""
    out = []
    for node in ast.walk(ast.parse(check, mode="eval")):
        if isinstance(node, (ast.Constant, ast.Tuple, ast.List, ast.Set, ast.Dict, ast.UnaryOp)):
            try:
                out.append(ast.literal_eval(node))
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                pass
    return out


def echo_answer(example: Test) -> tuple[bool, Any]:
    """(found, value): the constant answer that passes the prompt's example, when one does (tried: a value test's
    expected value; an assertion's comparands, its literals, then the bare truths)."""
    if example.assertion is None:
        candidates = [example.expected]
    else:
        candidates = [*example.assertion.consts, *_literals(example.assertion.check), *BARE]
    for value in candidates:
        if passes_with(example, value):
            return True, value
    return False, None


def echoed(row: Mapping[str, Any]) -> list[bool]:
    """Per hidden test of ``row`` (its ``tests``), whether the echo of its example (``visible_tests``) passes it."""
    visible, hidden = decode_tests(row["visible_tests"]), decode_tests(row["tests"])
    if not visible:
        return [False] * len(hidden)
    found, value = echo_answer(visible[0])
    return [found and passes_with(t, value) for t in hidden]


def drop_echoed(rows: Sequence[dict]) -> tuple[list[dict], dict[str, Any]]:
    """The rows with only the hidden tests the echo fails (``echo_dropped``: how many each lost); a row left with no
    hidden test is dropped. Returns (rows, figures: tasks, dropped tests, tasks left out, hidden tests per task)."""
    kept, dropped_tests, left_out, per_task = [], 0, [], {}
    for row in rows:
        specs = json.loads(row["tests"])
        echo = echoed(row)
        keep = [s for s, e in zip(specs, echo) if not e]
        dropped_tests += len(specs) - len(keep)
        if not keep:
            left_out.append(row["id"])
            continue
        kept.append(dict(row, tests=json.dumps(keep), echo_dropped=len(specs) - len(keep)))
        per_task[len(keep)] = per_task.get(len(keep), 0) + 1
    return kept, {"tasks": len(rows), "dropped_tests": dropped_tests, "left_out": left_out,
                  "hidden_tests_per_task": dict(sorted(per_task.items()))}


def echo_reward(rows: Sequence[Mapping[str, Any]]) -> list[float]:
    """Per row, the reward (pass rate on its hidden tests) the echo of its example earns."""
    out = []
    for row in rows:
        echo = echoed(row)
        out.append(sum(echo) / len(echo) if echo else 0.0)
    return out
