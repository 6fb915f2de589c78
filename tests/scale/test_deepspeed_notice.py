"""DeepSpeed's "Setting accelerator to CPU" warning does not reach a user's output once the project's scale layer
(which imports deepspeed) is loaded; without it the same import prints it (the check that the warning still exists)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTICE = "Setting accelerator to CPU"


def _output(code: str) -> str:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}  # no GPU: DeepSpeed picks the CPU
    env.pop("DS_ACCELERATOR", None)
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout + done.stderr


def test_the_cpu_accelerator_warning_is_kept_out_of_user_output():
    assert NOTICE in _output("import deepspeed")
    quiet = _output("import c3_plugin.scale.distributed, deepspeed, logging\n"
                    "logging.getLogger('DeepSpeed').warning('another DeepSpeed warning')")
    assert NOTICE not in quiet and "another DeepSpeed warning" in quiet  # only that notice is filtered
