"""Running untrusted model-written code: one fresh sandbox per candidate.

Each candidate gets a fresh temporary directory (its working directory, HOME and TMPDIR),
a scrubbed environment and a closed stdin, and runs under ``runner.py``:

* isolation, where the kernel allows it (``unshare``): new mount, network and PID
  namespaces; a chroot holding only read-only system directories, the Python installation
  and the candidate's directory, so the project, the datasets and the host's ``/proc`` are
  invisible; no network interface; nothing outside the namespace to signal;
* when running as root, every test runs as an unprivileged uid (one per pool slot), so it
  cannot touch the runner, other sandboxes or root-owned files;
* resource limits per test: CPU seconds, address space, file size, open files, processes;
  a wall-clock timeout per test and per candidate; the whole namespace is killed at the end;
  test output is captured to a capped file.

Tests pass only when the runner observed the call return a value that, decoded from plain
builtin data, equals the expected value type-strictly in the host. A failure of the
machinery itself (the sandbox never became ready) raises :class:`SandboxError`: it is an
infrastructure error, never the model's failure.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .values import decode, equal

RUNNER = Path(__file__).with_name("runner.py")
BASE_UID = 61000  # unprivileged uids used for test processes when running as root (one per pool slot)
_MOUNT_SCRIPT = r"""
set -e
R="$1"; PREFIX="$2"; BOX="$3"; PY="$4"; JOB="$5"
mount --make-rprivate / 2>/dev/null || true
mount -t tmpfs -o size=16m,mode=755 none "$R"
for d in /usr /lib /lib64 /lib32 /libx32 /bin /sbin /etc; do
  if [ -L "$d" ]; then ln -s "$(readlink "$d")" "$R$d";
  elif [ -d "$d" ]; then mkdir -p "$R$d"; mount --rbind "$d" "$R$d"; mount -o remount,bind,ro "$R$d" 2>/dev/null || true; fi
done
mkdir -p "$R$PREFIX"; mount --bind "$PREFIX" "$R$PREFIX"; mount -o remount,bind,ro "$R$PREFIX" 2>/dev/null || true
mkdir -p "$R/sandbox" "$R/tmp" "$R/dev"; chmod 1777 "$R/tmp"
mount --bind "$BOX" "$R/sandbox"
for n in null zero urandom random; do touch "$R/dev/$n"; mount --bind "/dev/$n" "$R/dev/$n"; done
cd /
exec chroot "$R" "$PY" -B -S /sandbox/runner.py "/sandbox/$JOB"
"""


class SandboxError(RuntimeError):
    """The sandbox machinery failed (not the candidate): an infrastructure error."""


@dataclass
class Limits:
    cpu_s: int = 5  # RLIMIT_CPU per test process
    memory_mb: int = 1024  # RLIMIT_AS per test process
    file_mb: int = 8  # RLIMIT_FSIZE: largest file (and captured output) a test may write
    open_files: int = 64  # RLIMIT_NOFILE
    processes: int = 32  # RLIMIT_NPROC for the test's uid
    max_output_bytes: int = 2000  # captured test output kept for the report
    max_result_bytes: int = 4 << 20  # largest encoded return value accepted


@dataclass
class TestResult:
    passed: bool
    status: str  # "passed", "failed" (wrong value), "error", "timeout", "infra"
    reason: str = ""
    seconds: float = 0.0
    output: str = ""


@dataclass
class Test:
    """One hidden test: evaluate ``expr`` (or call ``entry_point(*args)``) and compare with ``expected``."""

    __test__ = False  # not a pytest class
    expected: Any  # decoded builtin data (never sent into the sandbox)
    expr: str | None = None
    entry_point: str | None = None
    args: list = field(default_factory=list)
    atol: float = 0.0  # absolute tolerance for floats (MBPP+); 0: exact
    truthy: bool = False  # assert-style test: the value only has to be truthy

    def payload(self, index: int) -> dict:
        if self.expr is not None:
            return {"index": index, "expr": self.expr}
        return {"index": index, "entry_point": self.entry_point, "args": self.args}


def namespaces_available() -> bool:
    """Whether this kernel lets us build the isolated view (checked once)."""
    global _NS
    if _NS is None:
        cmd = ["unshare", "--mount", "--net", "--pid", "--fork", "--kill-child"]
        if os.geteuid() != 0:
            cmd[1:1] = ["--user", "--map-root-user"]
        try:
            _NS = subprocess.run(cmd + ["true"], capture_output=True, timeout=10).returncode == 0
        except (OSError, subprocess.SubprocessError):
            _NS = False
    return _NS


_NS: bool | None = None


class Sandbox:
    """A pool that evaluates many candidates at once, each in its own sandbox."""

    def __init__(self, workers: int | None = None, limits: Limits | None = None, isolate: bool | None = None):
        self.workers = workers or max(1, os.cpu_count() or 1)
        self.limits = limits or Limits()
        self.isolate = namespaces_available() if isolate is None else isolate
        self._slots: queue.Queue[int] = queue.Queue()
        for s in range(self.workers):
            self._slots.put(s)
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="sandbox")
        self.python = os.path.realpath(sys.executable)
        self.prefix = os.path.realpath(sys.base_prefix)

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def run_many(self, jobs: Sequence[tuple[str, Sequence[Test], str]], timeout_s: float = 5.0) -> list[list[TestResult]]:
        """``jobs``: (code, tests, setup) triples; returns per-test results for each, in order."""
        futures = [self._pool.submit(self.run, code, tests, setup, timeout_s) for code, tests, setup in jobs]
        return [f.result() for f in futures]

    def run(self, code: str, tests: Sequence[Test], setup: str = "", timeout_s: float = 5.0) -> list[TestResult]:
        """Judge ``code`` on ``tests``: one result per test."""
        raw = self.raw(code, [t.payload(i) for i, t in enumerate(tests)], setup, timeout_s)
        if isinstance(raw, str):
            return [TestResult(False, "timeout" if "budget" in raw else "error", raw) for _ in tests]
        return [self._judge(t, r) for t, r in zip(tests, raw)]

    def raw(self, code: str, payloads: Sequence[dict], setup: str = "", timeout_s: float = 5.0) -> list[dict] | str:
        """The runner's unjudged results (encoded values) for test payloads, or a reason string
        when the candidate killed its own sandbox. Raises SandboxError on infrastructure failure."""
        if not payloads:
            return []
        slot = self._slots.get()
        try:
            return self._run(slot, code, payloads, setup, timeout_s)
        finally:
            self._slots.put(slot)

    def _run(self, slot: int, code: str, payloads: Sequence[dict], setup: str, timeout_s: float) -> list[dict] | str:
        box = Path(tempfile.mkdtemp(prefix="c3sbx-"))
        root = Path(tempfile.mkdtemp(prefix="c3sbx-root-"))
        as_root = os.geteuid() == 0
        uid = BASE_UID + slot if as_root else None
        lim = self.limits
        job = {"code": str(code), "setup": setup or "", "tests": list(payloads), "uid": uid,
               "timeout_s": float(timeout_s), "candidate_timeout_s": float(timeout_s) * len(payloads) + 2.0,
               "max_output_bytes": lim.max_output_bytes, "max_result_bytes": lim.max_result_bytes,
               "limits": {"RLIMIT_CPU": lim.cpu_s, "RLIMIT_AS": lim.memory_mb << 20, "RLIMIT_FSIZE": lim.file_mb << 20,
                          "RLIMIT_NOFILE": lim.open_files, "RLIMIT_NPROC": lim.processes}}
        try:
            (box / "job.json").write_text(json.dumps(job))
            shutil.copy(RUNNER, box / "runner.py")
            if uid is not None:
                os.chown(box, uid, uid)
            os.chmod(box, 0o755 if uid is None else 0o700)
            env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/sandbox" if self.isolate else str(box), "LANG": "C.UTF-8",
                   "TMPDIR": "/sandbox" if self.isolate else str(box), "PYTHONHASHSEED": "0",
                   "PYTHONNOUSERSITE": "1"}  # a fixed hash seed: set and dict orders repeat between reference and candidate
            if self.isolate:
                ns = ["unshare", "--mount", "--net", "--pid", "--fork", "--kill-child"]
                if not as_root:
                    ns[1:1] = ["--user", "--map-root-user"]
                cmd = ns + ["/bin/sh", "-c", _MOUNT_SCRIPT, "sandbox", str(root), self.prefix, str(box), self.python, "job.json"]
            else:
                cmd = [self.python, "-B", "-S", str(box / "runner.py"), str(box / "job.json")]
            proc = subprocess.Popen(cmd, cwd=str(box), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, start_new_session=True)
            try:
                out, err = proc.communicate(timeout=job["candidate_timeout_s"] + 10.0)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                out, err = proc.communicate()
                return "candidate exceeded its wall-clock budget"
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
            lines = out.decode("utf-8", "replace").splitlines()
            if not lines or lines[0] != "READY":
                raise SandboxError(f"sandbox did not start (exit {proc.returncode}): {err.decode('utf-8', 'replace')[-500:]}")
            if len(lines) < 2:
                return f"sandbox runner terminated (exit {proc.returncode}) before reporting"
            return json.loads(lines[1])
        finally:
            shutil.rmtree(box, ignore_errors=True)
            shutil.rmtree(root, ignore_errors=True)

    @staticmethod
    def _judge(test: Test, r: dict) -> TestResult:
        common = {"seconds": float(r.get("seconds", 0.0)), "output": str(r.get("output", ""))}
        if r.get("status") != "value":
            return TestResult(False, "timeout" if r.get("status") == "timeout" else "error", str(r.get("reason", "")), **common)
        try:
            value = decode(r["value"])
        except (ValueError, TypeError, KeyError) as exc:
            return TestResult(False, "error", f"undecodable result: {exc}", **common)
        ok = bool(value) if test.truthy and type(value) in (bool, int) else equal(value, test.expected, test.atol)
        return TestResult(ok, "passed" if ok else "failed", "" if ok else f"got {_short(value)}", **common)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) < 120 else text[:117] + "..."


_DEFAULT: Sandbox | None = None
_LOCK = threading.Lock()


def default_sandbox() -> Sandbox:
    global _DEFAULT
    with _LOCK:
        if _DEFAULT is None:
            _DEFAULT = Sandbox()
        return _DEFAULT
