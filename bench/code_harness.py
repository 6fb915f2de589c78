"""Harness correctness and throughput of the code sandbox (CPU).

1. Every MBPP task (the full file, 974; the sanitized file, 427; the test split 11-510 among the full
   ones) and every MBPP+ task loads: asserts compile into host checks, MBPP+ inputs keep their
   Python types; a refused assert or a dropped MBPP+ input is listed with its reason.
2. Canonical solutions pass every visible and hidden test under the time limits relative to their
   own time (``domains/code/data.py``); every failing task is listed with its reason.
3. Wrong solutions (return None; return the first argument) fail.
4. Throughput: canonical candidates evaluated per second with the pool, and the sandbox's overhead
   per candidate (a trivial candidate with one trivial test).
5. The cost of a hostile candidate (one at a time, alone): wall time, the host's own CPU time (reading and
   judging the report) and its peak memory above the baseline, and the sandbox's CPU time.

6. ``--throughput-against REF``: honest throughput (the canonical solutions of the first MBPP tasks through the pool,
   uncalibrated limits) under this runner over the runner of git revision REF, as the median of alternated pairs
   (``bench/paired_timing.py``); ``--trees-against REF``: the same for each revision's whole sandbox (its own host
   and runner, each run in its own tree), the MBPP test split's 500 candidates; ``--as-nobody`` (as root) runs the
   whole bench as ``nobody``, who has no cgroups.

Usage: python bench/code_harness.py [--data data] [--workers 2] [--limit N] [--costs-only] [--against REF]
       [--throughput-against REF [--tasks 60] [--pairs 6]] [--trees-against REF [--pairs 6]] [--as-nobody]
(``--data``: a folder with ``mbpp/full.jsonl``, ``mbpp/sanitized.jsonl`` and ``mbppplus/test.jsonl``;
default: the bundled ``data/``. The first run times the canonical solutions and computes the MBPP+
expected outputs, cached under ``$C3_CACHE``; ``--limit`` keeps the first N tasks of each file. ``--against``
swaps in another revision's runner under this host, so REF must speak the same protocol: the length-prefixed
job and the host's timing lines of issue 39; to compare across that change, run each revision's tree whole.)
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for bench.paired_timing

from bench.paired_timing import describe, paired_ratio
from c3_sandbox import launch, runner
from c3_sandbox.sandbox import Sandbox, Test, isolation_probe
from domains.code.data import MBPP_TEST_IDS, TIME_CAP_S, TIME_FACTOR, TIME_FLOOR_S, decode_tests, load_split

ROOT = Path(__file__).resolve().parents[1]


def check(sb, rows, code_of):
    jobs = [(code_of(r), decode_tests(r["visible_tests"]) + decode_tests(r["tests"]), r["setup"]) for r in rows]
    t = time.perf_counter()
    results = sb.run_many(jobs)
    return results, time.perf_counter() - t


def wrong(row, kind):
    name = row["entry_point"]
    params = re.search(rf"def\s+{re.escape(name)}\s*\(([^)]*)\)", row["canonical"] or "")
    first = (params.group(1).split(",")[0].split("=")[0].strip().lstrip("*") if params
             and params.group(1).strip() else "None") or "None"
    body = "return None" if kind == "none" else f"return {first}"
    return f"def {name}(*args, **kwargs):\n    {first} = args[0] if args else None\n    {body}\n"


def load(name, spec, sb):
    t = time.perf_counter()
    try:
        rows = load_split(spec, sandbox=sb)
    except ValueError as exc:  # CodeDatasetError: a refused assert or an unloadable file
        print(f"{name}: REFUSED at load: {exc}")
        return []
    limits = [t_.timeout_s for r in rows for t_ in decode_tests(r["visible_tests"]) + decode_tests(r["tests"])]
    above = [x for x in limits if x > TIME_FLOOR_S]
    print(f"{name}: {len(rows)} tasks, {len(limits)} tests loaded in {time.perf_counter() - t:.1f}s; time limits "
          f"{TIME_FACTOR:g} x canonical, {TIME_FLOOR_S:g}-{TIME_CAP_S:g} s: {len(above)} tests above the floor "
          f"(largest {max(limits, default=0):.1f} s)")
    return rows


def report(name, sb, rows, wrong_solutions):
    results, secs = check(sb, rows, lambda r: r["canonical"])
    failing = [(r["id"], next(x for x in res if not x.passed)) for r, res in zip(rows, results)
               if not all(x.passed for x in res)]
    tests = sum(len(res) for res in results)
    passed = sum(x.passed for res in results for x in res)
    print(f"\n{name}: canonical solutions pass {len(rows) - len(failing)}/{len(rows)} tasks, {passed}/{tests} tests, "
          f"in {secs:.1f}s ({len(rows) / max(secs, 1e-9):.1f} candidates/s, {tests / max(secs, 1e-9):.1f} tests/s)")
    for tid, res in failing:
        print(f"  FAILS {tid}: {res.status}: {res.reason[:150]}")
    if wrong_solutions:
        for kind in ("none", "first-argument"):
            res_w, _ = check(sb, rows, lambda r, kind=kind: wrong(r, kind))
            passing = [r["id"] for r, res in zip(rows, res_w) if all(x.passed for x in res)]
            print(f"  wrong solution ({kind}): passes all tests on {len(passing)}/{len(rows)} tasks {passing[:5]}")
    return results, secs


HOSTILE = {
    "forged 4 MiB report (1.3 M empty lists), 1 value test": (
        "import os\ndef f():\n    os.write(3, b'{\"status\": \"value\", \"value\": [' + b','.join([b'[]'] * 1300000) + "
        "b']}')\n    os._exit(0)", 1, "f()", None),
    "[[i] for i in range(49990)], 30 tests": ("def f():\n    return [[i] for i in range(49990)]", 30, "f()",
                                              [[i] for i in range(49990)]),
    # (setsid is refused, EPERM: a child that called it bare died of the exception instead of spinning)
    "20 spinning processes, 1 test (8 s limit)": ("import os, time\ndef f():\n    for _ in range(20):\n        if "
                                                  "os.fork() == 0:\n            while True:\n "
                                                  "               pass\n    time.sleep(30)", 1, "f()", 1),
    "sleeps past every limit, 3 tests": ("import time\ndef f():\n    time.sleep(60)", 3, "f()", 1),
}


def _peak_reset() -> int:
    """Reset this process's peak resident memory (Linux ``clear_refs`` 5); returns the current resident KiB."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    return _status_kib("VmRSS")


def _status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def hostile(sb) -> None:
    print("\nhostile candidates (one at a time): wall, host CPU (reading and judging its report), host peak memory "
          "above the resident baseline, sandbox CPU")
    for name, (code, n, expr, expected) in HOSTILE.items():
        tests = [Test(expected=expected, expr=expr) for _ in range(n)]
        for t in tests:  # a dataset's tests are built once: their value caps are not a candidate's cost
            t.value_cap()
        base = _peak_reset()
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        res = sb.run(code, tests, timeout_s=8.0)
        wall = time.perf_counter() - t
        me2, kids2 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        host = me2.ru_utime + me2.ru_stime - me.ru_utime - me.ru_stime
        box = kids2.ru_utime + kids2.ru_stime - kids.ru_utime - kids.ru_stime
        print(f"  {name}: {wall:.2f} s wall, host CPU {host:.2f} s, host peak "
              f"+{(_status_kib('VmHWM') - base) / 1024:.0f} MiB, sandbox CPU {box:.2f} s; passed "
              f"{sum(r.passed for r in res)}/{n} ({res[-1].reason[:70]})")


def overhead(sb) -> None:
    """The sandbox's cost per trivial candidate (one trivial test), median of 10 after a warm-up."""
    for _ in range(3):  # warm up
        sb.raw("x = 1", [{"index": 0, "expr": "x"}], "", 5.0)
    per, test_s = [], []
    for _ in range(10):
        t = time.perf_counter()
        res = sb.run("def f():\n    return 1", [Test(expected=1, expr="f()")])
        per.append(time.perf_counter() - t)
        test_s.append(res[0].seconds)
    print(f"\nsandbox overhead per candidate: {statistics.median(per) * 1000:.0f} ms wall for a trivial candidate "
          f"(of which the forked test itself {statistics.median(test_s) * 1000:.1f} ms)")


def against(sb, ref: str) -> None:
    """The sandbox's cost per trivial candidate and per extra test under this runner and under the runner of the
    git revision ``ref``, interleaved in one run (medians of 20 after 4 warm-ups each)."""
    sources = {f"runner of {ref}": ref_runner(ref), "this runner": runner.source()}
    one, twenty = {k: [] for k in sources}, {k: [] for k in sources}
    for i in range(24):
        for name, src in sources.items():
            launch._SOURCE[:] = [src]
            for tests, out in (([Test(expected=1, expr="f()")], one), ([Test(expected=1, expr="f()")] * 20, twenty)):
                t = time.perf_counter()
                assert all(r.passed for r in sb.run("def f():\n    return 1", tests))
                if i >= 4:
                    out[name].append(time.perf_counter() - t)
    launch._SOURCE[:] = [sources["this runner"]]
    for name in sources:
        a, b = statistics.median(one[name]), statistics.median(twenty[name])
        print(f"  {name}: {a * 1000:.0f} ms per trivial candidate, {(b - a) / 19 * 1000:.1f} ms per further test")


def throughput_against(sb, ref: str, data: str, tasks: int, pairs: int) -> None:
    """Wall seconds for the canonical solutions of the first ``tasks`` MBPP tasks (every test, 5 s limits) under this
    runner over the runner of ``ref``: alternated pairs in one run, so the machine's load hits both arms alike.
    ``ref``'s runner must speak this host's protocol (issue 39's); one without ``C`` lines is only killed at its
    tests' wall-clock ceilings."""
    rows = load_split({"name": "mbpp", "kind": "mbpp", "source": f"{data}/mbpp/full.jsonl", "test_split": False,
                       "limit": tasks, "calibrate": False}, sandbox=sb)
    jobs = [(r["canonical"], decode_tests(r["visible_tests"]) + decode_tests(r["tests"]), r["setup"]) for r in rows]
    old = ref_runner(ref)
    new = runner.source()
    passed = {}

    def arm(name, src):
        def run():
            launch._SOURCE[:] = [src]
            passed.setdefault(name, []).append(sum(x.passed for res in sb.run_many(jobs) for x in res))
        return run

    result = paired_ratio(arm("this", new), arm(ref, old), pairs)
    launch._SOURCE[:] = [new]
    tests = sum(len(t) for _, t, _ in jobs)
    print(f"\nhonest throughput, {len(jobs)} canonical MBPP candidates ({tests} tests), {sb.workers} workers, box "
          f"limits {sb.box_limits}, uid {os.geteuid()}; tests passed per run: this runner "
          f"{sorted(set(passed['this']))}, {ref} {sorted(set(passed[ref]))}")
    print(describe(result, f"wall seconds, this runner over {ref}'s"))


# One tree's whole sandbox (its own host and runner) on the MBPP test split's canonical solutions, run in that tree:
# candidates per second after a warm-up of 40 (for --trees-against: a protocol change makes --throughput-against moot)
TREE_RUN = """
import os, sys, time
sys.path.insert(0, os.getcwd())
from domains.code import Sandbox
from domains.code.data import decode_tests, load_split
rows = load_split({"name": "mbpp", "kind": "mbpp", "source": "data/mbpp/full.jsonl", "calibrate": False})
jobs = [(r["canonical"], decode_tests(r["visible_tests"]) + decode_tests(r["tests"]), r["setup"]) for r in rows]
sb = Sandbox(workers=int(sys.argv[1]))
sb.run_many(jobs[:40])
t = time.perf_counter()
res = sb.run_many(jobs)
print(len(jobs) / (time.perf_counter() - t), sum(all(x.passed for x in r) for r in res), len(jobs))
"""


def trees_against(ref: str, pairs: int, workers: int) -> None:
    """Honest throughput of this tree's whole sandbox over that of git revision ``ref`` (checked out in a temporary
    worktree): the MBPP test split's 500 canonical candidates, alternated ``ref``, this, ``ref``, this ... in one
    sitting, each run in a fresh process of its own tree (:data:`TREE_RUN`)."""
    with tempfile.TemporaryDirectory(prefix="c3-tree-") as tmp:
        other = os.path.join(tmp, "tree")
        subprocess.run(["git", "worktree", "add", "--detach", other, ref], cwd=ROOT, check=True, capture_output=True)
        rates = {ref: [], "this": []}
        try:
            for _ in range(pairs):
                for name, tree in ((ref, other), ("this", str(ROOT))):
                    run = subprocess.run([sys.executable, "-c", TREE_RUN, str(workers)], cwd=tree, check=True,
                                         capture_output=True, text=True)
                    rate, passed, total = run.stdout.split()[-3:]
                    rates[name].append(float(rate))
                    print(f"  {name}: {float(rate):.1f} candidates/s ({passed}/{total} pass)", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", other], cwd=ROOT, capture_output=True)
    ratios = [a / b for a, b in zip(rates["this"], rates[ref])]
    print(f"honest throughput, whole trees, {workers} workers: this tree over {ref}: median ratio "
          f"{statistics.median(ratios):.3f} over {pairs} pairs (range {min(ratios):.3f}-{max(ratios):.3f}); "
          f"medians {statistics.median(rates['this']):.1f} vs {statistics.median(rates[ref]):.1f} candidates/s")


def ref_runner(ref: str) -> str:
    """The runner of git revision ``ref`` (read before ``--as-nobody`` drops to a user git may refuse)."""
    given = os.environ.get("C3_BENCH_REF_RUNNER")
    if given:
        return Path(given).read_text()
    def show(path):
        return subprocess.run(["git", "show", f"{ref}:{path}"], cwd=ROOT, check=True, capture_output=True,
                              text=True).stdout

    try:  # the runner as one file (before the sandbox became a package), or its parts joined
        return show("domains/code/runner.py")
    except subprocess.CalledProcessError:
        return runner.source(lambda part: show(f"c3_sandbox/runner/{part}.py"))


def as_nobody(ref: str | None) -> int:
    """Re-run this bench (without ``--as-nobody``) as ``nobody`` in a private mount namespace where the repository and
    the Python installation are reachable (the suite's way: ``tests/sandbox/test_sandbox_adversarial.py``)."""
    from tests.sandbox.test_sandbox_adversarial import run_as_nobody

    env = f"PYTHONPATH={ROOT} "
    if ref:
        fd, path = tempfile.mkstemp(prefix="c3-ref-runner-", suffix=".py")
        os.write(fd, ref_runner(ref).encode())
        os.close(fd)
        os.chmod(path, 0o644)
        env += f"C3_BENCH_REF_RUNNER={path} "
    argv = " ".join(f"'{a}'" for a in sys.argv[1:] if a != "--as-nobody")
    return run_as_nobody(f"{Path(__file__).resolve()} {argv}", env=env, capture=False).returncode


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(ROOT / "data"))
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--costs-only", action="store_true", help="only the per-candidate overhead and part 5")
    ap.add_argument("--against", default=None, metavar="REF",
                    help="also time the runner of git revision REF, interleaved")
    ap.add_argument("--throughput-against", default=None, metavar="REF",
                    help="only honest throughput under this runner over the runner of git revision REF (paired)")
    ap.add_argument("--trees-against", default=None, metavar="REF",
                    help="honest throughput of this whole tree (host and runner) over revision REF's")
    ap.add_argument("--tasks", type=int, default=60, help="MBPP tasks for --throughput-against")
    ap.add_argument("--pairs", type=int, default=6, help="alternated pairs for --throughput-against")
    ap.add_argument("--as-nobody", action="store_true", help="(as root) run this bench as nobody: no cgroups")
    args = ap.parse_args()
    if args.as_nobody and os.geteuid() == 0:
        raise SystemExit(as_nobody(args.throughput_against or args.against))
    if args.trees_against:
        trees_against(args.trees_against, args.pairs, args.workers)
        return
    sb = Sandbox(workers=args.workers)
    if args.throughput_against:
        throughput_against(sb, args.throughput_against, args.data, args.tasks, args.pairs)
        return
    if args.against:
        print(f"\nsandbox overhead against {args.against}:")
        against(sb, args.against)
    if args.costs_only:
        overhead(sb)
        hostile(sb)
        return
    probe = isolation_probe()
    print(f"sandbox isolation: {sb.isolation} ({'available' if probe['namespaces'] else probe['reason']}); "
          f"box limits: {probe['box_limits']}; {args.workers} workers")
    full = load("MBPP full", {"name": "mbpp", "kind": "mbpp", "source": f"{args.data}/mbpp/full.jsonl",
                              "test_split": False, "limit": args.limit}, sb)
    sanitized = load("MBPP sanitized", {"name": "mbpp_sanitized", "source": f"{args.data}/mbpp/sanitized.jsonl",
                                        "limit": args.limit}, sb)
    plus = load("MBPP+ v0.1.0", {"name": "mbppplus", "source": f"{args.data}/mbppplus/test.jsonl", "limit": args.limit},
                sb)
    inputs = sum(len(decode_tests(r["visible_tests"])) + len(decode_tests(r["tests"]))
                 + len(r["dropped_inputs"]) for r in plus)
    dropped = [(r["id"], d) for r in plus for d in r["dropped_inputs"]]
    print(f"MBPP+ inputs the reference itself fails on (dropped): {len(dropped)} of {inputs}")
    for tid, why in dropped[:20]:
        print(f"  DROPPED {tid} {why[:150]}")

    test_split = [r for r in full if int(r["task_id"]) in MBPP_TEST_IDS]
    results, _ = report("MBPP full (1-974)", sb, full, wrong_solutions=False)
    by_id = dict(zip((r["id"] for r in full), results))
    test_results = [by_id[r["id"]] for r in test_split]
    ok = sum(all(x.passed for x in res) for res in test_results)
    print(f"  of which the test split (11-510): {ok}/{len(test_split)} tasks, "
          f"{sum(len(res) for res in test_results)} tests")
    report("MBPP test (11-510)", sb, test_split, wrong_solutions=True)
    report("MBPP sanitized", sb, sanitized, wrong_solutions=False)
    report("MBPP+ v0.1.0", sb, plus, wrong_solutions=True)

    overhead(sb)
    hostile(sb)
    sb.close()


if __name__ == "__main__":
    main()
