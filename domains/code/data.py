"""MBPP and MBPP+ by Hugging Face name or local JSONL, normalised for the code domain.

Every row: ``id``, ``datasource``, ``question``/``prompt`` (the task text, the function name
and signature, and one visible example assert), ``entry_point``, ``setup``, ``example``,
``visible_tests`` and ``tests`` (JSON lists of test specs, read by :func:`decode_tests`). The
reward uses only ``tests``, which never appear in a prompt; the multi-turn workflow's
environment runs ``visible_tests`` (the example shown in the prompt).

MBPP: the example is the first assert of ``test_list``; hidden tests are the other asserts plus
``challenge_test_list``. Each assert is compiled into sandbox probes and a host check
(``assertions.py``); a form the host cannot judge is refused here, naming the task.
MBPP+: the example is the first base input; hidden tests are the other base inputs and all plus
inputs, read with the Python types the JSON file lost (tuples, complex numbers, sets), their
expected outputs from running the canonical solution in the sandbox, as EvalPlus does.

Time limits are relative to the canonical solution, as in EvalPlus: every test's limit is
``TIME_FACTOR`` times the canonical solution's own time on it, at least ``TIME_FLOOR_S`` and at
most ``TIME_CAP_S``. The canonical times (and MBPP+ expected outputs) are measured once per
machine and cached by content hash under ``$C3_CACHE`` (default ``~/.cache/comlrl-c3``).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from c3_plugin.core.cache import cache_path, cached_json, is_cached
from c3_plugin.core.hub import offline_mode
from c3_plugin.core.sources import local_path, where
from c3_sandbox.assertions import Assertion, AssertionFormError, compile_assertion, defined_names, parse_module
from c3_sandbox.runner import encode
from c3_sandbox.sandbox import Sandbox, SandboxError, Test, default_sandbox
from c3_sandbox.values import decode

HF = {"mbpp": ("google-research-datasets/mbpp", "full", "test"),
      "mbpp_sanitized": ("google-research-datasets/mbpp", "sanitized", "test"),
      "mbppplus": ("evalplus/mbppplus", None, "test")}
MBPP_TEST_IDS = range(11, 511)  # the standard MBPP test split
HARNESS_VERSION = 3  # part of the cache keys; bump when the runner's encoding or the test payloads change
TIME_FACTOR = 4.0  # a test's limit is this many times the canonical solution's time on it (EvalPlus: 4)...
# ...at least this (forking a test and loading the code take ~10 ms; the rest is headroom for a busy machine)...
TIME_FLOOR_S = 2.0
TIME_CAP_S = 30.0  # ...and at most this (the slowest canonical test, mbpp-123, takes about 6 s)
CONSTANT_TIMEOUT_S = 10.0  # evaluating an assertion's constants (no candidate code involved)


class CodeDatasetError(ValueError):
    pass


def time_limit(seconds: float | None) -> float:
    """The (CPU-time) limit of a test whose canonical solution took ``seconds`` (None: unknown)."""
    if seconds is None:
        return TIME_CAP_S
    return float(min(TIME_CAP_S, max(TIME_FLOOR_S, TIME_FACTOR * float(seconds))))


def _signature(code: str, name: str) -> str:
    try:
        for node in parse_module(code).body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return f"{name}({ast.unparse(node.args)})"
    except (SyntaxError, ValueError):
        pass
    return f"{name}(...)"


def _entry_point(code: str, asserts: Sequence[Assertion]) -> str:
    """The function the tests call: the first name called in a probe that the reference defines at
    its top level (``math.isclose(volume_sphere(10), ...)`` -> ``volume_sphere``), else the first called name."""
    try:
        tops = [n.name for n in parse_module(code).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    except (SyntaxError, ValueError):
        tops = []
    called = [n.func.id for a in asserts for p in a.probes for n in ast.walk(ast.parse(p.source, mode="eval"))
              if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    return next((c for c in called if c in tops), None) or next(iter(called), None) or next(iter(tops), "")


def _raw_results(sandbox: Sandbox, jobs: list[tuple[str, list[dict], str]],
                 desc: str | None = None) -> list[list[dict]]:
    """Run trusted code (canonical solutions, constants) on payloads: the runner's result dicts per job.
    With ``desc``, a progress bar over the jobs on stderr (``TQDM_DISABLE=1`` hides it)."""
    futures = [sandbox._pool.submit(sandbox.raw, code, payloads, setup,
                                    max([5.0] + [p.get("timeout_s", 5.0) for p in payloads]))
               for code, payloads, setup in jobs]
    if desc is not None:
        from tqdm import tqdm

        futures = tqdm(futures, desc=desc, unit="task")
    out = []
    for f in futures:
        raw = f.result()
        if isinstance(raw, str):
            raise SandboxError(f"reference code killed its sandbox: {raw}")
        out.append(raw)
    return out


def _first_value(result: dict) -> Any:
    """The single probe value of a result (encoded), or None when the code raised or timed out."""
    if result.get("status") != "value":
        return None
    node = result["value"]
    return node[1][0] if node[0] == "tuple" and len(node[1]) == 1 else None


def evaluate_constants(sandbox: Sandbox, assertions: Sequence[Assertion], labels: Sequence[str]) -> None:
    """Evaluate the pending constants of ``assertions`` (``sys.getsizeof((1, 2))``...) in a sandbox that runs
    no candidate code (the standard-library modules they name are imported first); raises
    CodeDatasetError, naming ``labels[i]``, for a constant that does not evaluate to plain data."""
    todo = [(a, label) for a, label in zip(assertions, labels) if a.pending]
    jobs = [("\n".join(f"import {m}" for m in a.modules),
             [{"index": i, "probes": [{"expr": src, "mode": "value"}], "timeout_s": CONSTANT_TIMEOUT_S}
              for i, src in enumerate(a.pending)], a.setup)  # the setup: only for constants that use its names
            for a, _ in todo]
    for (a, label), results in zip(todo, _raw_results(sandbox, jobs) if jobs else []):
        values = [_first_value(r) for r in results]
        for src, v, r in zip(a.pending, values, results):
            if v is None:
                raise CodeDatasetError(f"{label}: the constant {src!r} of {a.source!r} cannot be evaluated: "
                                       f"{r.get('reason') or 'not plain data'}")
        a.consts, a.pending = [decode(v) for v in values], []


def _cache(kind: str, key: Any) -> Path:
    return cache_path(kind, [HARNESS_VERSION, key])


def _read(source: str, hf_key: str, split: str | None, base_dir: str | None, config: str | None = None) -> list[dict]:
    path = local_path(source, base_dir)
    if path is not None:
        if not path.exists():
            raise CodeDatasetError(f"local file {source} does not exist ({where(source, base_dir)})")
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    import datasets

    name, default_config, default_split = HF[hf_key]
    offline = offline_mode()  # offline: the cache only, failing at once instead of retrying
    try:
        ds = datasets.load_dataset(source or name, config or default_config, split=split or default_split)
    except Exception as exc:  # noqa: BLE001
        why = f"offline ({offline}) and not in the local datasets cache" if offline else f"{type(exc).__name__}: {exc}"
        raise CodeDatasetError(f"cannot load '{source or name}': {why}. Use a local JSONL path; bundled: "
                               "data/mbpp/*.jsonl and data/mbppplus/*.jsonl (data/README.md)") from exc
    return [dict(r) for r in ds]


# ---------------------------------------------------------------------------------------------- MBPP


def mbpp_rows(rows: Sequence[Mapping[str, Any]], name: str, sandbox: Sandbox | None = None, test_split: bool = True,
              calibrate: bool = True, measure: bool = True) -> list[dict]:
    """Normalise MBPP rows (full or sanitized); ``test_split`` keeps task ids 11-510. ``calibrate``: time
    each test's canonical solution (once, cached) and give the test its relative limit. ``measure=False`` (the
    dry-run): times not yet cached are left to the run and listed in :data:`PENDING`."""
    rows = [r for r in rows if not test_split or int(r["task_id"]) in MBPP_TEST_IDS]
    out = []
    for r in rows:
        asserts = list(r.get("test_list") or []) + list(r.get("challenge_test_list") or [])
        if not asserts:
            raise CodeDatasetError(f"{name}: task {r['task_id']} has no test")
        code = r.get("code") or ""
        setup = "\n".join(list(r.get("test_imports") or []) + [r.get("test_setup_code") or ""]).strip()
        try:
            compiled = [compile_assertion(a, defined_names(code) | defined_names(setup), setup,
                                          defined_names(setup) - defined_names(code)) for a in asserts]
        except AssertionFormError as exc:
            raise CodeDatasetError(f"{name}: task {r['task_id']}: refused: {exc}") from None
        entry_point = _entry_point(code, compiled)
        out.append({"id": f"{name}-{r['task_id']}", "task_id": str(r["task_id"]), "datasource": name,
                    "entry_point": entry_point, "setup": setup, "example": asserts[0],
                    "text": r.get("text") or r.get("prompt") or "",
                    "signature": _signature(code, entry_point), "canonical": code, "_asserts": compiled})
    sb = sandbox or default_sandbox()
    evaluate_constants(sb, [a for row in out for a in row["_asserts"]],
                       [f"{name}: task {row['task_id']}" for row in out for _ in row["_asserts"]])
    seconds = _mbpp_seconds(sb, out, name, measure) if calibrate and out else None
    for i, row in enumerate(out):
        secs = seconds[i] if seconds is not None else [None] * len(row["_asserts"])
        specs = [dict(a.to_json(encode), **({"timeout_s": time_limit(s)} if seconds is not None else {}))
                 for a, s in zip(row.pop("_asserts"), secs)]
        row["visible_tests"] = json.dumps(specs[:1])
        row["tests"] = json.dumps(specs[1:])
        _finish(row)
    return out


def _mbpp_seconds(sandbox: Sandbox, rows: Sequence[Mapping[str, Any]], name: str,
                  measure: bool = True) -> list[list[float]] | None:
    """The canonical solution's time on each test of each row (sandbox runs, cached by content); None when
    ``measure`` is off and they are not cached yet (the dry-run: listed in :data:`PENDING`)."""
    key = [(r["task_id"], r["canonical"], r["setup"], [a.source for a in r["_asserts"]]) for r in rows]
    path = _cache("mbpp-seconds", key)
    if not measure and not is_cached(path):
        _pending(name, "times", len(rows), sum(len(r["_asserts"]) for r in rows))
        return None

    def compute():
        jobs = [(r["canonical"], [Test(assertion=a).payload(i, TIME_CAP_S) for i, a in enumerate(r["_asserts"])],
                 r["setup"]) for r in rows]
        results = _raw_results(sandbox, jobs, desc=f"{name}: timing {len(jobs)} reference solutions (once; cached)")
        return [[float(x.get("seconds", TIME_CAP_S)) for x in res] for res in results]

    return cached_json(path, compute)


# ---------------------------------------------------------------------------------------------- MBPP+

# MBPP+'s JSON file turned the tuples, complex numbers and sets of its inputs into lists and
# strings. These converters give them back, per task and argument, as EvalPlus does when it loads
# the file (``mbpp_deserialize_inputs``); tests/domains/test_code_scoring.py checks that every task's base
# inputs then equal, type for type, the arguments of the original asserts in its ``assertion`` field
# (except the tasks listed there, whose canonical solutions take lists where MBPP wrote tuples).


def _tuple(x: Any) -> tuple:
    return tuple(x)


def _list_of_tuples(x: Any) -> list:
    return [tuple(v) for v in x]


def _tuple_of_tuples(x: Any) -> tuple:
    return tuple(tuple(v) for v in x)


def _tuple_of_items(x: Any) -> tuple:
    return tuple(tuple(v) if isinstance(v, list) else v for v in x)


def _all_tuples(x: Any) -> Any:
    return tuple(_all_tuples(v) for v in x) if isinstance(x, list) else x


def _dict_of_tuples(x: Any) -> dict:
    return {k: tuple(v) for k, v in x.items()}


def _sets_and_dicts(x: Any) -> list:
    # [{1, 2}, {}, {}] was written [[1, 2], [], []]: a non-empty list was a set, an empty one the dict {}.
    # (EvalPlus also turns the plus inputs' real dicts into {}; they are kept here.)
    return [(set(v) if v else {}) if isinstance(v, list) else v for v in x]


def _number(x: Any) -> Any:
    """The number whose ``str`` a string is ('0' -> 0, '1e-100' -> 1e-100, '(-0-1j)' -> complex(-0.0, -1.0));
    EvalPlus reads them with float() and complex(), which turns MBPP's ints 0 and 1 into 0.0 and (1+0j)."""
    if not isinstance(x, str):
        return x
    for kind in (int, float, complex):
        try:
            return kind(x)
        except ValueError:
            pass
    raise ValueError(f"not a number: {x!r}")


def _every(conv) -> tuple:
    return ("*", conv)


_ARGS: dict[int, tuple] = {
    **dict.fromkeys((2, 116, 132, 143, 222, 261, 273, 394, 399, 421, 424, 429, 470, 560, 579, 616, 630, 726, 740, 744,
                     809),
                    _every(_tuple)),
    **dict.fromkeys((63, 64, 70, 94, 120, 237, 272, 299, 400, 409, 417, 438, 473, 614, 780), _every(_list_of_tuples)),
    **dict.fromkeys((75, 413, 444, 753), (_list_of_tuples, None)),
    **dict.fromkeys((106, 750), (None, _tuple)),
    115: (_sets_and_dicts,),
    124: (_number, _number),
    **dict.fromkeys((250, 405, 446, 617, 720, 763, 808), (_tuple, None)),
    **dict.fromkeys((259, 401, 445), _every(_tuple_of_tuples)),
    278: (_tuple_of_items,),
    307: (_tuple, None, None),
    722: (_dict_of_tuples, None, None),
    252: (_number,),
    **dict.fromkeys((580, 596, 615, 791), _every(_all_tuples)),  # 596: EvalPlus leaves the inner tuples lists
}
PRESENT_TASKS = (737, 787, 794)  # the reference returns a match object or None: EvalPlus checks `out is not None`


def _task_number(task_id: Any) -> int:
    try:
        return int(str(task_id).split("/")[-1])
    except ValueError:
        return -1


def mbppplus_inputs(row: Mapping[str, Any]) -> list[list]:
    """A MBPP+ row's base then plus inputs (argument lists) with their Python types restored."""
    inputs = [list(a) for a in list(row.get("base_input") or []) + list(row.get("plus_input") or [])]
    spec = _ARGS.get(_task_number(row["task_id"]))
    if spec is None:
        return inputs
    if spec[0] == "*":
        return [[spec[1](x) for x in args] for args in inputs]
    return [[conv(x) if conv is not None else x for conv, x in zip(spec, args)] + args[len(spec):] for args in inputs]


def _is_floats(x: Any) -> bool:
    """EvalPlus's test for outputs compared with a tolerance: a float, or a non-empty list/tuple of floats."""
    return type(x) is float or (type(x) in (list, tuple) and bool(x) and all(type(v) is float for v in x))


def mbppplus_rows(rows: Sequence[Mapping[str, Any]], name: str, sandbox: Sandbox | None = None, calibrate: bool = True,
                  measure: bool = True) -> list[dict]:
    """Normalise MBPP+ rows; expected outputs (and times) by running each canonical solution in the sandbox.
    ``measure=False`` (the dry-run): the rows come without tests; when the outputs are not cached yet, every task
    with two inputs or more (those whose reference fails on all but one are dropped when measured), and the
    measurement is listed in :data:`PENDING` for the run."""
    inputs = [mbppplus_inputs(r) for r in rows]
    modes = ["present" if _task_number(r["task_id"]) in PRESENT_TASKS else "value" for r in rows]
    key = [(r["task_id"], r["canonical_solution"], r.get("base_input"), r.get("plus_input")) for r in rows]
    path = _cache("mbppplus-expected", key)
    if not measure:  # the dry-run: the tasks that can be scored, counted, without their tests
        if is_cached(path):
            keep = [sum(x[0] is not None for x in res) > 1 for res in cached_json(path, list)]
        else:
            _pending(name, "expected outputs and times", len(rows), sum(len(i) for i in inputs))
            keep = [len(inp) > 1 for inp in inputs]
        return [_plus_row(r, name, [], []) for r, k in zip(rows, keep) if k]

    def compute():
        jobs = [(r["canonical_solution"],
                 [Test(entry_point=r["entry_point"], args=a, mode=m).payload(i, TIME_CAP_S, judged=False)
                  for i, a in enumerate(inp)], "") for r, inp, m in zip(rows, inputs, modes)]
        results = _raw_results(sandbox or default_sandbox(), jobs,
                               desc=f"{name}: expected outputs of {len(jobs)} reference solutions (once; cached)")
        return [[[_first_value(x), float(x.get("seconds", TIME_CAP_S)),
                  "" if _first_value(x) is not None else str(x.get("reason", ""))]
                 for x in res] for res in results]

    measured = cached_json(path, compute)
    out = []
    for r, inp, mode, res in zip(rows, inputs, modes, measured):
        tests, dropped = [], []
        for i, (args, (expected, seconds, reason)) in enumerate(zip(inp, res)):
            if expected is None:  # the reference itself fails on this input: it cannot be scored
                dropped.append(f"input {i}: {reason}")
                continue
            value = decode(expected)
            # EvalPlus: floats always get a tolerance
            atol = float(r.get("atol") or 0.0) or (1e-6 if _is_floats(value) else 0.0)
            spec = {"call": r["entry_point"], "args": encode(args, 0, [1 << 22]), "expected": expected, "atol": atol,
                    "rtol": 1e-7 if atol else 0.0, "mode": mode}
            if calibrate:
                spec["timeout_s"] = time_limit(seconds)
            tests.append(spec)
        if len(tests) > 1:  # a task with no hidden test left cannot be scored
            out.append(_plus_row(r, name, tests, dropped))
    return out


def _plus_row(r: Mapping[str, Any], name: str, tests: list[dict], dropped: list[str]) -> dict:
    """One MBPP+ task as a row: the first test visible (the example), the others hidden."""
    prompt = str(r.get("prompt") or "")
    example = next((line.strip() for line in prompt.splitlines() if line.strip().startswith("assert")), "")
    row = {"id": f"{name}-{r['task_id']}", "task_id": str(r["task_id"]), "datasource": name,
           "entry_point": r["entry_point"], "setup": "", "example": example,
           "text": prompt.replace(example, "").strip().strip('"').strip(),
           "signature": _signature(r["canonical_solution"], r["entry_point"]), "canonical": r["canonical_solution"],
           "visible_tests": json.dumps(tests[:1]), "tests": json.dumps(tests[1:]), "dropped_inputs": dropped}
    _finish(row)
    return row


# reference measurements a dry-run (measure=False) left to the run: set, what, solutions, tests
PENDING: list[dict[str, Any]] = []


def _pending(name: str, what: str, solutions: int, tests: int) -> None:
    PENDING.append({"set": name, "what": what, "solutions": solutions, "tests": tests})


def _finish(row: dict) -> None:
    q = (f"{row['text'].strip()}\nWrite a Python function `{row['signature']}`.\nExample: {row['example'].strip()}")
    row["question"] = row["prompt"] = q


def load_split(spec: Mapping[str, Any], base_dir: str | None = None, sandbox: Sandbox | None = None,
               measure: bool = True) -> list[dict]:
    """One dataset spec: ``{name, source, kind: mbpp|mbpp_sanitized|mbppplus, split, limit, test_split, id_range,
    calibrate}`` (``id_range: [601, 974]`` keeps MBPP task ids in that closed range, e.g. the train split;
    ``calibrate: false`` skips timing the canonical solutions: tests then take the limit the reward is given).
    ``measure=False``: reference runs not cached yet are left to the run (:data:`PENDING`)."""
    spec = dict(spec)
    name = spec.get("name", "mbpp")
    kind = spec.get("kind") or ("mbppplus" if "plus" in name else "mbpp_sanitized" if "sanitized" in name else "mbpp")
    if kind not in HF:
        raise CodeDatasetError(f"{name}: unknown kind '{kind}'; use mbpp, mbpp_sanitized or mbppplus")
    rows = _read(spec.get("source") or HF[kind][0], kind, spec.get("split"), base_dir, spec.get("config"))
    if spec.get("id_range"):
        lo, hi = spec["id_range"]
        rows = [r for r in rows if lo <= _task_number(r["task_id"]) <= hi]
    limit = spec.get("limit")
    calibrate = bool(spec.get("calibrate", True))
    if kind == "mbppplus":
        if spec.get("v0_2_0_only"):
            rows = [r for r in rows if r.get("in_v0_2_0", True)]
        return mbppplus_rows(rows[:limit] if limit else rows, name, sandbox, calibrate, measure)
    test_split = bool(spec.get("test_split", kind == "mbpp" and not spec.get("id_range")))
    if limit:
        rows = [r for r in rows if not test_split or int(r["task_id"]) in MBPP_TEST_IDS][:limit]
    return mbpp_rows(rows, name, sandbox, test_split=test_split, calibrate=calibrate, measure=measure)


def decode_tests(text: str) -> list[Test]:
    """Row JSON -> sandbox ``Test`` objects. Specs: an assertion (``assert``, ``check``, ``probes``,
    ``consts``), a call (``call``, encoded ``args``, ``expected``) or an expression (``expr``,
    ``expected``); ``entry_point`` with JSON ``args`` is read too. Optional: ``atol``, ``rtol``,
    ``mode``, ``timeout_s``."""
    out = []
    for t in json.loads(text):
        common = {"timeout_s": float(t["timeout_s"]) if t.get("timeout_s") is not None else None}
        if "check" in t:
            out.append(Test(assertion=Assertion.from_json(t, decode), **common))
            continue
        value = {"expected": decode(t["expected"]), "atol": float(t.get("atol", 0.0)),
                 "rtol": float(t.get("rtol", 0.0)), "mode": str(t.get("mode", "value")), **common}
        if "call" in t:
            out.append(Test(entry_point=str(t["call"]), args=list(decode(t["args"])), **value))
        else:
            out.append(Test(expr=t.get("expr"), entry_point=t.get("entry_point"), args=list(t.get("args") or []),
                            **value))
    return out
