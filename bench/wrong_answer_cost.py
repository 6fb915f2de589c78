"""What a wrong answer costs the host (issue 50, point 5): the host's CPU time per candidate (this process: reading,
parsing and checking the report; and its judge processes: decoding and comparing values) for an honest candidate and
for wrong answers of every size, on MBPP-style ``assert f() == y`` tests and value tests. ``--tree PATH`` runs the same
measurement in another checkout (for example ``git worktree add /tmp/before <rev>``), so before and after are measured
by the same script, alternated.

Usage: python bench/wrong_answer_cost.py [--repeats 5] [--tree PATH ...]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# name: (candidate code, tests: "assert ..." sources or (expr, expected) value tests)
CASES = {
    "honest, 3 asserts": ("def f():\n    return [1, 2, 3]", ["assert f() == [1, 2, 3]"] * 3),
    "wrong: a 99,990-item list, 3 asserts": ("def f():\n    return list(range(99990))",
                                               ["assert f() == [1, 2, 3]"] * 3),
    "wrong: a 16 MiB report (49,990 one-item lists on 30 asserts)": (
        "def f():\n    return [[i] for i in range(49990)]", ["assert f() == [[1]]"] * 30),
    "wrong: a 99,990-item list, 3 value tests": ("def f():\n    return list(range(99990))",
                                                   [("f()", [1, 2, 3])] * 3),
}


def _judge_cpu() -> float:
    """CPU seconds of this process's live children (the judge processes), from /proc."""
    total, me = 0.0, str(os.getpid())
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me:
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def measure(repeats: int) -> dict[str, float]:
    """Median host CPU seconds per candidate of each case (this process and its judges), after one warm-up."""
    from domains.code import Sandbox, Test

    sb = Sandbox(workers=1)
    out = {}
    for name, (code, specs) in CASES.items():
        tests = [Test.from_assert(s) if isinstance(s, str) else Test(expr=s[0], expected=s[1]) for s in specs]
        for t in tests:  # a dataset's tests are built once: their caps are not a candidate's cost
            t.value_cap()
        sb.run(code, tests, timeout_s=8.0)
        costs = []
        for _ in range(repeats):
            me, judges = resource.getrusage(resource.RUSAGE_SELF), _judge_cpu()
            res = sb.run(code, tests, timeout_s=8.0)
            me2 = resource.getrusage(resource.RUSAGE_SELF)
            costs.append(me2.ru_utime + me2.ru_stime - me.ru_utime - me.ru_stime + _judge_cpu() - judges)
        out[name] = statistics.median(costs)
        print(f"  {name}: host CPU {out[name] * 1000:.1f} ms per candidate (median of {repeats}); passed "
              f"{sum(r.passed for r in res)}/{len(tests)} ({res[-1].reason[:60]})", flush=True)
    sb.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tree", action="append", default=[], help="also measure in this checkout (alternated)")
    ap.add_argument("--here", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.here or not args.tree:
        print(f"tree {os.getcwd()}:")
        measure(args.repeats)
        return
    for tree in [str(ROOT), *args.tree] * 2:  # alternated: this tree, the others, again
        subprocess.run([sys.executable, str(Path(__file__).resolve()), "--here", "--repeats", str(args.repeats)],
                       cwd=tree, env=dict(os.environ, PYTHONPATH=tree), check=True)


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    main()
