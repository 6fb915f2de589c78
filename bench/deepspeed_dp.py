"""DeepSpeed ZeRO data parallelism on CPU: 2 gloo processes against one process, same PPO updates.

Three PPO updates (2 epochs each, micro-batches of 2, token-mean, clip 1.0, AdamW at the paper's learning
rate 1e-6) of SmolLM2-135M (the demo model) on 16 fixed messages of 96-192 tokens: one process with torch AdamW on all
16; 2 torchrun ranks under ZeRO-2 (and ZeRO-3) with 8 each. Prints the largest parameter difference and the wall seconds
per update (the same 2 cores serve both: one process uses 2 threads, each rank 1).

    make bench-deepspeed        (python bench/deepspeed_dp.py)
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "distributed" / "update_equivalence.py"


def run(out: Path, stage: int, world: int) -> dict:
    env = {**os.environ, "C3_MODEL": "smollm2", "C3_LR": "1e-6", "PYTHONPATH": str(ROOT),
           "OMP_NUM_THREADS": str(max(1, 2 // world))}
    if world == 1:
        cmd = [sys.executable, str(WORKER), str(out)] + ([str(stage)] if stage else [])
    else:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(world), "--master_addr",
               "127.0.0.1", "--master_port", str(port), str(WORKER), str(out), str(stage)]
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True)
    return torch.load(out)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        one = run(Path(tmp) / "one.pt", 0, 1)
        rows = {"one_process": {"update_s": round(one["update_s"], 2)}}
        for stage in (2, 3):
            two = run(Path(tmp) / f"zero{stage}.pt", stage, 2)
            diff = max(float((one["state"][k] - two["state"][k]).abs().max()) for k in one["state"])
            rows[f"zero{stage}_2_ranks"] = {"update_s": round(two["update_s"], 2), "max_param_diff": diff,
                                            "speedup": round(one["update_s"] / two["update_s"], 2),
                                            "loss_diff": abs(one["stats"][-1]["loss"] - two["stats"][-1]["loss"])}
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
