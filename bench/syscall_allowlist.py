"""The sandbox's system-call allow-list against honest code (CPU).

The test children's filter (``c3_sandbox/runner/seccomp.py``: ``ALLOWED_SYSCALLS`` and the rules of ``syscall_filter``)
answers ENOSYS to any call it does not allow, which honest code may survive without anyone noticing. This bench runs
the canonical solutions of every MBPP file and MBPP+ under the same filter with a **kill** as that default instead:
a test that makes one call off the list dies by SIGSYS and fails. Every task passing means no canonical solution
needs a call the list lacks (calibration of the time limits runs under the kill filter too).

Usage: python bench/syscall_allowlist.py [--data data] [--workers 2] [--limit N]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for bench.code_harness

from bench.code_harness import check, load
from c3_sandbox import launch
from c3_sandbox.runner import seccomp
from c3_sandbox.sandbox import Sandbox

ROOT = Path(__file__).resolve().parents[1]
SIGSYS = "signal 31"


def kill_by_default() -> None:
    """From now on, this process's sandboxes load the filter with a kill as its default (the host compiles the filter
    and sends it in every job: ``launch.FILTER_DEFAULT``)."""
    launch.FILTER_DEFAULT = seccomp.SCMP_ACT_KILL_PROCESS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT / "data"))
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--limit", type=int, default=None)
    args = ap.parse_args()
    kill_by_default()
    sb = Sandbox(workers=args.workers)
    print(f"system-call filter default: kill; sandbox isolation {sb.isolation}, {args.workers} workers")
    specs = [("MBPP full", {"name": "mbpp", "kind": "mbpp", "source": f"{args.data}/mbpp/full.jsonl",
                            "test_split": False, "limit": args.limit}),
             ("MBPP sanitized", {"name": "mbpp_sanitized", "source": f"{args.data}/mbpp/sanitized.jsonl",
                                 "limit": args.limit}),
             ("MBPP+ v0.1.0", {"name": "mbppplus", "source": f"{args.data}/mbppplus/test.jsonl", "limit": args.limit})]
    for name, spec in specs:
        rows = load(name, spec, sb)
        results, secs = check(sb, rows, lambda r: r["canonical"])
        failing = [(r["id"], next(x for x in res if not x.passed)) for r, res in zip(rows, results)
                   if not all(x.passed for x in res)]
        killed = sum(SIGSYS in x.reason for res in results for x in res)
        print(f"{name}: {len(rows) - len(failing)}/{len(rows)} tasks pass under the kill-default filter "
              f"({sum(len(res) for res in results)} tests, {secs:.1f}s); tests killed by SIGSYS: {killed}")
        for tid, res in failing:
            print(f"  FAILS {tid}: {res.status}: {res.reason[:150]}")
    sb.close()


if __name__ == "__main__":
    main()
