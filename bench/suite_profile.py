"""The test suite's time, phase by phase, and its slowest tests: what ``make test`` spends (``bench/RESULTS.md``,
"Test suite time").

    python bench/suite_profile.py            # the three phases of make test, environments already made
    python bench/suite_profile.py --fresh    # the environments made anew first (make clean; make envs)
    python bench/suite_profile.py --junit a.xml [b.xml ...]   # only the table of tests already run with --junitxml

Each phase runs as ``make test`` runs it (the Makefile's commands), with ``--junitxml`` added; the figures are wall
seconds on this machine, one run, and the slowest tests are read from the JUnit files (setup, call and teardown of a
test summed, as pytest's ``--durations`` lists them apart).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAIN = "not gpu and not vllm"
PHASES = [  # (name, command) as the Makefile's test recipe runs them
    ("main suite, every core (-n auto)", [".venv/bin/python", "-m", "pytest", "-q", "-n", "auto", "--dist", "loadgroup",
                                          "-m", f"{MAIN} and not torchrun"]),
    ("torchrun tests, one at a time", [".venv/bin/python", "-m", "pytest", "-q", "-m", f"{MAIN} and torchrun"]),
    ("vLLM tests (.venv-vllm)", [".venv-vllm/bin/python", "-m", "pytest", "-q", "-m", "vllm",
                                 "tests/generation/test_vllm_backend.py"]),
]


def tests_of(junit: Path) -> list[tuple[str, float, str]]:
    """(test id, seconds, outcome) of every test case in a JUnit XML file."""
    out = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome = "failed" if case.find("failure") is not None or case.find("error") is not None else \
            "skipped" if case.find("skipped") is not None else "passed"
        out.append((f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}",
                    float(case.get("time", 0.0)), outcome))
    return out


def table(cases: list[tuple[str, float, str]], top: int = 30) -> str:
    rows = ["| seconds | test |", "| ---: | --- |"]
    rows += [f"| {s:.1f} | `{name}` |" for name, s, _ in sorted(cases, key=lambda c: -c[1])[:top]]
    return "\n".join(rows)


def run(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int]:
    start = time.perf_counter()
    code = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **(env or {})}).returncode
    return time.perf_counter() - start, code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fresh", action="store_true", help="make clean, then time make envs (both environments)")
    parser.add_argument("--junit", nargs="+", default=None, help="only print the table of these JUnit XML files")
    parser.add_argument("--top", type=int, default=30, help="slowest tests listed")
    args = parser.parse_args(argv)
    if args.junit:
        cases = [c for f in args.junit for c in tests_of(Path(f))]
        print(f"{len(cases)} tests, {sum(c[1] for c in cases):.0f} s summed\n\n{table(cases, args.top)}")
        return 0
    lines, cases, failed = [], [], 0
    if args.fresh:
        subprocess.run(["make", "clean"], cwd=ROOT, check=True)
        seconds, code = run(["make", "envs"])
        lines.append(f"| both environments (make envs) | {seconds:.0f} | |")
        if code:
            print("make envs failed", file=sys.stderr)
            return code
    with tempfile.TemporaryDirectory() as tmp:
        for k, (name, cmd) in enumerate(PHASES):
            junit = Path(tmp) / f"phase{k}.xml"
            seconds, code = run(cmd + [f"--junitxml={junit}"], env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
                                if "vllm" in name.lower() else None)
            phase = tests_of(junit) if junit.exists() else []
            failed += sum(c[2] == "failed" for c in phase) + (1 if code and not phase else 0)
            cases += phase
            lines.append(f"| {name} | {seconds:.0f} | {len(phase)} |")
    total = sum(float(line.split("|")[2]) for line in lines)
    print("| phase | wall s | tests |\n| --- | ---: | ---: |\n" + "\n".join(lines)
          + f"\n| **total** | **{total:.0f}** | **{len(cases)}** |")
    print(f"\nslowest {args.top} of {len(cases)} tests ({failed} failed):\n\n{table(cases, args.top)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
