"""Test-wide settings: the tiny CPU models of these tests run fastest on one intra-op thread (thread
start-up dominates their matrix products, and two threads on two shared cores can be many times slower), in this
process and every process a test starts;
and no test reaches the Hugging Face Hub: ``HF_HUB_OFFLINE`` is set for every test (and the subprocesses it
starts), so a dry-run's hub checks give the same answer on any machine."""

import os

# Under pytest-xdist (make test: one worker per core), one compute thread in every process a test starts too (training
# subprocesses, engines): a process with a thread per core beside the other workers makes OpenMP threads spin against
# each other (a 26 s torchrun test took 245 s beside another worker). Set before torch is imported. A run on one
# worker (the vLLM tests) keeps the machine's threads for the processes it starts.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from c3_plugin.core.hub import offline_reason  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def hub_offline(monkeypatch):
    """Every test runs as offline as CI's machine is, whatever the machine it runs on."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")  # and restored after the test, also when hub.offline_mode set it
    offline_reason.cache_clear()
    yield
    offline_reason.cache_clear()


@pytest.fixture
def entry_point(capsys, monkeypatch):
    """Run an entry point in this process as ``python SCRIPT ARGS`` (``single_turn/train_c3.py`` and the like, relative
    to the repository) or ``python -m MODULE ARGS`` (``entry_point("-m", "c3_plugin", "compare", ...)``) run it from the
    repository root, without paying for a new interpreter and its imports: ``(exit code, stdout, stderr)``. An
    exception the entry point lets escape (a traceback) fails the test."""
    import runpy
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]

    def run(script: str, *args: str) -> tuple[int, str, str]:
        monkeypatch.chdir(root)
        monkeypatch.setattr(sys, "path", list(sys.path))  # a script puts the repository first; undone after the test
        capsys.readouterr()
        try:
            if script == "-m":
                monkeypatch.setattr(sys, "argv", [args[0], *args[1:]])
                runpy.run_module(args[0], run_name="__main__", alter_sys=True)
            else:
                monkeypatch.setattr(sys, "argv", [str(root / script), *args])
                runpy.run_path(str(root / script), run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out = capsys.readouterr()
        return code, out.out, out.err

    return run
