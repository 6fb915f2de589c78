"""MBPP and MBPP+ by Hugging Face name or local JSONL, normalised for the code domain.

Every row: ``id``, ``datasource``, ``question``/``prompt`` (the task text, the function name
and signature, and one visible example assert), ``entry_point``, ``setup``, ``example``,
``visible_tests`` and ``tests`` (JSON lists of test specs with *encoded* expected values).
The reward uses only ``tests``, which never appear in a prompt; the multi-turn workflow's
environment runs ``visible_tests`` (the example shown in the prompt).

MBPP: the example is the first assert of ``test_list``; hidden tests are the other asserts
plus ``challenge_test_list``. Expected values are the asserts' right-hand sides (literals
decoded on the host, other expressions evaluated in the sandbox). MBPP+: the example is the
first base input; hidden tests are the other base inputs and all plus inputs, whose
expected outputs come from running the canonical solution in the sandbox, as EvalPlus does
(cached on disk by content hash).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from domains.math.data import local_path, where

from .runner import Unsupported, encode
from .sandbox import Sandbox, SandboxError, default_sandbox

HF = {"mbpp": ("google-research-datasets/mbpp", "full", "test"), "mbpp_sanitized": ("google-research-datasets/mbpp", "sanitized", "test"),
      "mbppplus": ("evalplus/mbppplus", None, "test")}
MBPP_TEST_IDS = range(11, 511)  # the standard MBPP test split
HARNESS_VERSION = 2  # part of the MBPP+ expected-output cache key; bump when the runner's encoding changes


class CodeDatasetError(ValueError):
    pass


def _signature(code: str, name: str) -> str:
    m = re.search(rf"def\s+{re.escape(name)}\s*\(([^)]*)\)", code or "")
    return f"{name}({m.group(1).strip()})" if m else f"{name}(...)"


def split_assert(line: str) -> tuple[str, str] | None:
    """``assert lhs == rhs`` -> (lhs source, rhs source); None for other forms."""
    try:
        node = ast.parse(line.strip()).body[0]
    except (SyntaxError, IndexError):
        return None
    if not isinstance(node, ast.Assert):
        return None
    t = node.test
    if isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq):
        return ast.unparse(t.left), ast.unparse(t.comparators[0])
    return ast.unparse(t), "True"


def _encoded_literals(exprs: Sequence[str]) -> list[Any | None]:
    out = []
    for e in exprs:
        try:
            out.append(encode(ast.literal_eval(e)))
        except (ValueError, SyntaxError, TypeError, Unsupported, MemoryError, RecursionError):
            out.append(None)
    return out


def _sandbox_values(sandbox: Sandbox, jobs: list[tuple[str, list[dict], str]], desc: str | None = None) -> list[list[Any | None]]:
    """Run trusted code (canonical solutions, expected expressions); encoded values or None per payload.
    With ``desc``, a progress bar over the jobs on stderr (``TQDM_DISABLE=1`` hides it)."""
    futures = [sandbox._pool.submit(sandbox.raw, code, payloads, setup, 10.0) for code, payloads, setup in jobs]
    if desc is not None:
        from tqdm import tqdm

        futures = tqdm(futures, desc=desc, unit="task")
    out = []
    for f in futures:
        raw = f.result()
        if isinstance(raw, str):
            raise SandboxError(f"reference code killed its sandbox: {raw}")
        out.append([r["value"] if r.get("status") == "value" else None for r in raw])
    return out


def _read(source: str, hf_key: str, split: str | None, base_dir: str | None, config: str | None = None) -> list[dict]:
    path = local_path(source, base_dir)
    if path is not None:
        if not path.exists():
            raise CodeDatasetError(f"local file {source} does not exist ({where(source, base_dir)})")
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    import datasets

    name, default_config, default_split = HF[hf_key]
    try:
        ds = datasets.load_dataset(source or name, config or default_config, split=split or default_split)
    except Exception as exc:  # noqa: BLE001
        raise CodeDatasetError(f"cannot load '{source or name}': {type(exc).__name__}: {exc}. Offline? Use a local JSONL path.") from exc
    return [dict(r) for r in ds]


def mbpp_rows(rows: Sequence[Mapping[str, Any]], name: str, sandbox: Sandbox | None = None, test_split: bool = True) -> list[dict]:
    """Normalise MBPP rows (full or sanitized); ``test_split`` keeps task ids 11-510."""
    rows = [r for r in rows if not test_split or int(r["task_id"]) in MBPP_TEST_IDS]
    out, pending = [], []
    for r in rows:
        asserts = list(r.get("test_list") or []) + list(r.get("challenge_test_list") or [])
        parts = [split_assert(a) for a in asserts]
        if not parts or any(p is None for p in parts):
            raise CodeDatasetError(f"{name}: task {r['task_id']} has a test that is not an assert")
        entry = re.match(r"\s*([A-Za-z_]\w*)\s*\(", parts[0][0])
        entry_point = entry.group(1) if entry else parts[0][0]
        setup = "\n".join(list(r.get("test_imports") or []) + [r.get("test_setup_code") or ""]).strip()
        expected = _encoded_literals([p[1] for p in parts])
        pending.extend((len(out), k, parts[k][1], setup) for k, e in enumerate(expected) if e is None)
        code = r.get("code") or ""
        text = r.get("text") or r.get("prompt") or ""
        out.append({"id": f"{name}-{r['task_id']}", "task_id": str(r["task_id"]), "datasource": name, "entry_point": entry_point,
                    "setup": setup, "example": asserts[0], "text": text, "signature": _signature(code, entry_point),
                    "canonical": code, "_parts": parts, "_expected": expected})
    if pending:
        values = _sandbox_values(sandbox or default_sandbox(), [("", [{"index": 0, "expr": rhs}], setup) for _, _, rhs, setup in pending])
        for (row, k, _, _), v in zip(pending, values):
            out[row]["_expected"][k] = v[0]
    for row in out:
        tests = [{"expr": lhs, "expected": exp} for (lhs, _), exp in zip(row.pop("_parts"), row.pop("_expected"))]
        if any(t["expected"] is None for t in tests):
            raise CodeDatasetError(f"{name}: task {row['task_id']}: an expected value could not be evaluated")
        row["visible_tests"] = json.dumps(tests[:1])
        row["tests"] = json.dumps(tests[1:])
        _finish(row)
    return out


def _cache_path(rows: Sequence[Mapping[str, Any]]) -> Path:
    digest = hashlib.sha256(json.dumps([HARNESS_VERSION] + [(r["task_id"], r["canonical_solution"], r.get("plus_input")) for r in rows],
                                       sort_keys=True).encode()).hexdigest()[:16]
    base = Path(os.environ.get("C3_CACHE", Path.home() / ".cache" / "comlrl-c3"))
    return base / f"mbppplus-expected-{digest}.json"


def mbppplus_rows(rows: Sequence[Mapping[str, Any]], name: str, sandbox: Sandbox | None = None) -> list[dict]:
    """Normalise MBPP+ rows; expected outputs by running each canonical solution in the sandbox."""
    cache = _cache_path(rows)
    expected = json.loads(cache.read_text()) if cache.exists() else None
    inputs = [list(r.get("base_input") or []) + list(r.get("plus_input") or []) for r in rows]
    if expected is None:
        jobs = [(r["canonical_solution"], [{"index": i, "entry_point": r["entry_point"], "args": a} for i, a in enumerate(inp)], "")
                for r, inp in zip(rows, inputs)]
        expected = _sandbox_values(sandbox or default_sandbox(), jobs,
                                   desc=f"{name}: expected outputs of {len(jobs)} reference solutions (once; cached)")
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(expected))
    out = []
    for r, inp, exp in zip(rows, inputs, expected):
        tests = [{"entry_point": r["entry_point"], "args": a, "expected": e, "atol": float(r.get("atol") or 0.0)}
                 for a, e in zip(inp, exp) if e is not None]  # inputs the reference itself rejects are dropped
        prompt = str(r.get("prompt") or "")
        example = next((line.strip() for line in prompt.splitlines() if line.strip().startswith("assert")), "")
        row = {"id": f"{name}-{r['task_id']}", "task_id": str(r["task_id"]), "datasource": name, "entry_point": r["entry_point"],
               "setup": "", "example": example, "text": prompt.replace(example, "").strip().strip('"').strip(),
               "signature": _signature(r["canonical_solution"], r["entry_point"]), "canonical": r["canonical_solution"],
               "visible_tests": json.dumps(tests[:1]), "tests": json.dumps(tests[1:]), "dropped_inputs": len(inp) - len(tests)}
        _finish(row)
        if len(tests) > 1:  # a task with no hidden test left cannot be scored
            out.append(row)
    return out


def _finish(row: dict) -> None:
    q = (f"{row['text'].strip()}\nWrite a Python function `{row['signature']}`.\nExample: {row['example'].strip()}")
    row["question"] = row["prompt"] = q


def load_split(spec: Mapping[str, Any], base_dir: str | None = None, sandbox: Sandbox | None = None) -> list[dict]:
    """One dataset spec: ``{name, source, kind: mbpp|mbpp_sanitized|mbppplus, split, limit, test_split, id_range}``
    (``id_range: [601, 974]`` keeps MBPP task ids in that closed range, e.g. the train split)."""
    spec = dict(spec)
    name = spec.get("name", "mbpp")
    kind = spec.get("kind") or ("mbppplus" if "plus" in name else "mbpp_sanitized" if "sanitized" in name else "mbpp")
    if kind not in HF:
        raise CodeDatasetError(f"{name}: unknown kind '{kind}'; use mbpp, mbpp_sanitized or mbppplus")
    rows = _read(spec.get("source") or HF[kind][0], kind, spec.get("split"), base_dir, spec.get("config"))
    if spec.get("id_range"):
        lo, hi = spec["id_range"]
        rows = [r for r in rows if lo <= int(str(r["task_id"]).split("/")[-1]) <= hi]
    limit = spec.get("limit")
    if kind == "mbppplus":
        if spec.get("v0_2_0_only"):
            rows = [r for r in rows if r.get("in_v0_2_0", True)]
        return mbppplus_rows(rows[:limit] if limit else rows, name, sandbox)
    rows = mbpp_rows(rows, name, sandbox, test_split=bool(spec.get("test_split", kind == "mbpp" and not spec.get("id_range"))))
    return rows[:limit] if limit else rows


def decode_tests(text: str):
    """Row JSON -> sandbox ``Test`` objects (expected values decoded)."""
    from .sandbox import Test
    from .values import decode

    return [Test(expected=decode(t["expected"]), expr=t.get("expr"), entry_point=t.get("entry_point"), args=t.get("args") or [],
                 atol=float(t.get("atol", 0.0))) for t in json.loads(text)]
