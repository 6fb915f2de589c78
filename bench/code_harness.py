"""Harness correctness and throughput of the code sandbox (CPU).

1. Canonical solutions of all 500 MBPP test tasks (visible + hidden tests) and of all MBPP+
   tasks must pass; every failing upstream task is listed with its reason.
2. Wrong solutions (return None; return the first argument) must fail.
3. Throughput: MBPP canonical candidates evaluated per second with the pool, and the
   sandbox's overhead per candidate (a trivial candidate with one trivial test).

Usage: python bench/code_harness.py [--data data] [--workers 2] [--limit N]
(``--data``: a folder with ``mbpp/test.jsonl`` and ``mbppplus/test.jsonl``; default: the bundled ``data/``)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import time
from pathlib import Path

from domains.code.data import decode_tests, load_split
from domains.code.sandbox import Sandbox, Test, namespaces_available

ROOT = Path(__file__).resolve().parents[1]


def check(sb, rows, code_of):
    jobs = [(code_of(r), decode_tests(r["visible_tests"]) + decode_tests(r["tests"]), r["setup"]) for r in rows]
    t = time.perf_counter()
    results = sb.run_many(jobs)
    return results, time.perf_counter() - t


def wrong(row, kind):
    name = row["entry_point"]
    params = re.search(rf"def\s+{re.escape(name)}\s*\(([^)]*)\)", row["canonical"] or "")
    first = (params.group(1).split(",")[0].split("=")[0].strip().lstrip("*") if params and params.group(1).strip() else "None") or "None"
    body = "return None" if kind == "none" else f"return {first}"
    return f"def {name}(*args, **kwargs):\n    {first} = args[0] if args else None\n    {body}\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(ROOT / "data"))
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--limit", type=int, default=None)
    args = ap.parse_args()
    sb = Sandbox(workers=args.workers)
    print(f"sandbox isolation: {'namespaces + chroot + unprivileged uid' if namespaces_available() else 'rlimits only'}; "
          f"{args.workers} workers")
    t = time.perf_counter()
    mbpp = load_split({"name": "mbpp", "source": f"{args.data}/mbpp/test.jsonl", "limit": args.limit}, sandbox=sb)
    plus = load_split({"name": "mbppplus", "source": f"{args.data}/mbppplus/test.jsonl", "limit": args.limit}, sandbox=sb)
    print(f"loaded {len(mbpp)} MBPP and {len(plus)} MBPP+ tasks in {time.perf_counter() - t:.1f}s "
          f"(MBPP+ expected outputs from the canonical solutions; inputs the reference itself rejects: "
          f"{sum(r['dropped_inputs'] for r in plus)} of {sum(r['dropped_inputs'] + len(json.loads(r['tests'])) + 1 for r in plus)})")
    rows_out = []
    for name, rows in (("MBPP test (11-510)", mbpp), ("MBPP+ v0.1.0", plus)):
        results, secs = check(sb, rows, lambda r: r["canonical"])
        failing = [(r["id"], next(x for x in res if not x.passed)) for r, res in zip(rows, results) if not all(x.passed for x in res)]
        tests = sum(len(res) for res in results)
        rows_out.append((name, len(rows), len(rows) - len(failing), tests, secs))
        print(f"\n{name}: canonical solutions pass {len(rows) - len(failing)}/{len(rows)} tasks ({tests} tests) in {secs:.1f}s")
        for tid, res in failing:
            print(f"  FAILS {tid}: {res.status}: {res.reason[:150]}")
        for kind in ("none", "first-argument"):
            res_w, _ = check(sb, rows, lambda r: wrong(r, kind))
            passing = [r["id"] for r, res in zip(rows, res_w) if all(x.passed for x in res)]
            print(f"  wrong solution ({kind}): passes all tests on {len(passing)}/{len(rows)} tasks {passing[:5]}")
    name, n, _, tests, secs = rows_out[0]
    print(f"\nthroughput: {n / secs:.1f} MBPP candidates/s ({tests / secs:.1f} tests/s) with {args.workers} workers")
    trivial = [sb.raw("x = 1", [{"index": 0, "expr": "x"}], "", 5.0) for _ in range(3)]
    per = []
    for _ in range(10):
        t = time.perf_counter()
        sb.run("def f():\n    return 1", [Test(expected=1, expr="f()")])
        per.append(time.perf_counter() - t)
    test_s = statistics.median(r[0]["seconds"] for r in trivial)
    print(f"sandbox overhead per candidate: {statistics.median(per) * 1000:.0f} ms wall for a trivial candidate "
          f"(of which the forked test itself {test_s * 1000:.1f} ms)")
    sb.close()


if __name__ == "__main__":
    main()
