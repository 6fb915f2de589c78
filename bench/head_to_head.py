"""A small head-to-head on the CPU demo task: C3 vs MAGRPO (and optionally MAPPO), same seed,
same data, same env-step budget; greedy accuracy before and after, wall time and peak memory.
This is also the demo's profile (the C3 row is `make demo`).

Usage: python bench/head_to_head.py [--algorithms c3 magrpo] [--seed 0] [--config configs/math/demo_cpu.yaml]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--algorithms", nargs="+", default=["c3", "magrpo"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--config", default=str(ROOT / "configs/math/demo_cpu.yaml"))
    ap.add_argument("--out", default=str(ROOT / "outputs/head_to_head"))
    args = ap.parse_args()
    rows = []
    for algo in args.algorithms:
        run_name = f"{algo}-s{args.seed}"
        cmd = [sys.executable, str(ROOT / f"single_turn/train_{algo}.py"), "--config", args.config,
               "--override", f"algorithm={algo}", "--override", f"seed={args.seed}", "--override",
               f"output.base_dir={args.out}", "--override", f"output.run_name={run_name}", "--override",
               "output.save_model=false"]
        log = Path(args.out) / f"{run_name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        with log.open("w") as fh:
            proc = subprocess.Popen(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT)
            _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak resident memory
        wall = time.perf_counter() - t
        if os.waitstatus_to_exitcode(status) != 0:
            print(log.read_text()[-3000:])
            raise SystemExit(f"{algo} failed; log: {log}")
        s = json.loads((Path(args.out) / run_name / "summary.json").read_text())
        acc = [k for k in s["eval_after"] if k.endswith("/accuracy")][0]
        rows.append({"algorithm": algo, "before": s["eval_before"][acc], "after": s["eval_after"][acc],
                     "env_steps": s["env_steps"], "messages": s["totals"]["messages"],
                     "tokens": s["totals"]["tokens_generated"], "wall_s": wall, "peak_rss_gb": usage.ru_maxrss / 1e6,
                     "metric": acc})
    print(f"== head-to-head on the demo task (seed {args.seed}); greedy {rows[0]['metric']} ==")
    print(f"{'algorithm':<10}{'before':>8}{'after':>8}{'env steps':>11}{'messages':>10}{'tokens':>9}{'wall s':>9}"
          f"{'peak GB':>9}")
    for r in rows:
        print(f"{r['algorithm']:<10}{r['before']:>8.3f}{r['after']:>8.3f}{r['env_steps']:>11}{r['messages']:>10}{r['tokens']:>9}"
              f"{r['wall_s']:>9.0f}{r['peak_rss_gb']:>9.2f}")


if __name__ == "__main__":
    main()
