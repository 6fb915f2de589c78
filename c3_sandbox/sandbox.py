"""Running untrusted model-written code: one fresh sandbox per candidate.

The threat model and what is and is not guaranteed: ``c3_sandbox/README.md``. In short, each
candidate runs under the runner (``runner/``: started isolated, fed its job on stdin by ``launch.py``):

* isolation (``isolation: namespaces``, the default): new user, mount, PID, network, IPC, UTS
  and cgroup namespaces; the candidate is uid 1000 with no capability and ``no_new_privs``,
  mapped to the host user or, on a root host, to a uid leased for this sandbox alone
  (``uids.py``); its root is a ``pivot_root``-ed read-only overlay of its own over the pool's image
  (``image.py``: a tmpfs copy of the Python installation, never the host's folders), and a
  size-capped tmpfs box, new for every test;
  no network interface; nothing outside to signal, trace or escape to. When the kernel cannot
  build this the pool refuses to run candidates, unless ``isolation: none`` was asked for
  explicitly (then it warns loudly and uses resource limits only);
* limits on the whole sandbox (``cgroups.py``: memory and process count, where the host offers
  cgroups) and per test (the CPU time of all its processes and threads, with a wall-clock ceiling
  of ``Limits.wall_factor`` times that; address space, file size, open files, processes), and a cap
  on the result and the captured output; a test that runs more than one task runs ``SCHED_IDLE``,
  so no neighbour's test loses its CPU to it, with or without cgroups;
* nothing of the sandbox is on the host's disk (``isolation: none``: a private folder, removed
  without following links), so there is nothing for the host to clean up but the cgroup.

Tests pass only when the host, from plain builtin data the runner returned (decoded with
bounds, :func:`values.decode`), finds the test's assertion true (``assertions.py``): the sandbox
computes values, never verdicts, and never sees an expected value, nor anything computed from one or
from the reference (each test's time limit and value cap stay here: :class:`_Conversation` times the
tests and tells the runner when to kill one); every verdict is reached in a judge process with a time
and a memory limit (``judge.py``); any decoding or evaluation error fails that test. A failure of
the machinery itself (the sandbox never became ready) raises :class:`SandboxError`: an infrastructure error, never the
model's failure.
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import tempfile
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

from . import cgroups, image, uids
from .cases import PAYLOAD_KEYS, Limits, SandboxError, Test, TestResult
from .judge import JUDGE_CANDIDATE_S, JudgeError, JudgePool
from .launch import (
    CPU_CEILING_S,
    _filter_program,
    _image,
    _installation,
    _launch,
    _leased_image,
    isolation_probe,
    namespaces_available,
    remove_tree,
)
from .runner import MAX_REASON, NOT_RUN

ISOLATIONS = ("namespaces", "none")
LOG = logging.getLogger(__name__)
UNSAFE = ("isolation: none: model-written code runs WITHOUT namespaces, with resource limits only; it can read "
          "and write whatever the host user can (a root host drops it to a leased uid first)")


_ISOLATION = ["namespaces"]  # what default_sandbox() builds; configure() sets it from the config


def configure(isolation: str) -> None:
    """The isolation of the default sandbox (the config's ``code.isolation``)."""
    global _DEFAULT
    if isolation not in ISOLATIONS:
        raise ValueError(f"code.isolation must be one of {', '.join(ISOLATIONS)}, not {isolation!r}")
    with _LOCK:
        _ISOLATION[0] = isolation
        if _DEFAULT is not None and _DEFAULT.isolation != isolation:
            _DEFAULT.close()
            _DEFAULT = None


def _report_cap(lim: Limits, tests: int) -> int:
    """The most bytes a runner's report can hold: the values (``max_report_bytes``) and, per test, its output and
    reason as JSON escapes them (6 bytes an output byte, 12 a reason character) and the fixed fields."""
    return lim.max_report_bytes + tests * (6 * lim.max_output_bytes + 12 * MAX_REASON + 256)


def _parse_report(report: bytes, payloads: Sequence[dict], lim: Limits) -> list[dict] | str:
    """The runner's report, one JSON line per test: a line longer than its test's value cap (``max_bytes``) allows
    is refused unparsed (the value it holds would be refused anyway: a wrong answer's size costs the host a length,
    not a parse: issue 50); a malformed report is the reason string."""
    parts = report.split(b"\n")
    if parts and not parts[-1]:
        parts.pop()
    if len(parts) != len(payloads):
        return "sandbox runner sent a malformed report"
    results = []
    for line, p in zip(parts, payloads):
        cap = p.get("max_bytes")
        if cap and len(line) > cap + 6 * lim.max_output_bytes + 12 * MAX_REASON + 256:
            results.append({"status": "error", "reason": f"result larger than {cap} bytes", "output": ""})
            continue
        try:
            r = json.loads(line)
        except (ValueError, RecursionError):
            return "sandbox runner sent a malformed report"
        if type(r) is not dict:
            return "sandbox runner sent a malformed report"
        results.append(r)
    return results


class Sandbox:
    """A pool that evaluates many candidates at once, each in its own sandbox.

    ``isolation``: ``"namespaces"`` (refuses, with :class:`SandboxError`, where the host cannot
    build them) or ``"none"`` (explicit; unsafe; warned about loudly); None: the configured default."""

    def __init__(self, workers: int | None = None, limits: Limits | None = None, isolation: str | None = None):
        self.workers = workers or max(1, os.cpu_count() or 1)
        self.limits = limits or Limits()
        self.isolation = isolation or _ISOLATION[0]
        if not self.limits.wall_factor >= 1.0:
            raise ValueError(f"Limits.wall_factor must be at least 1 (a test's wall clock may not be shorter than its "
                             f"CPU time limit), not {self.limits.wall_factor!r}")
        if self.isolation not in ISOLATIONS:
            raise ValueError(f"isolation must be one of {', '.join(ISOLATIONS)}, not {self.isolation!r}")
        probe = isolation_probe()
        if self.isolation == "namespaces" and not probe["namespaces"]:
            raise SandboxError("refusing to run model-written code: this host cannot build the sandbox's namespaces "
                               f"({probe['reason'] or 'unknown reason'}). Enable user namespaces, or set "
                               "`code: {isolation: none}` in the config to run candidates with resource "
                               "limits only (unsafe).")
        if self.isolation == "none":
            warnings.warn(UNSAFE, RuntimeWarning, stacklevel=2)
            LOG.warning("code sandbox: %s", UNSAFE)
        self.box_limits = probe["box_limits"]  # "cgroup v1", "cgroup v2" or "rlimits only"
        self._slots = threading.BoundedSemaphore(self.workers)
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="sandbox")
        self._judges = JudgePool(self.workers)  # the host's verdicts, each bounded in time and memory (judge.py)
        self.prefix, self.python = _installation()
        # what every box of this pool reads (its own overlay over it): not the host's folders
        self.image = _image() if self.isolation == "namespaces" else None

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._judges.close()

    def run_many(self, jobs: Sequence[tuple[str, Sequence[Test], str]],
                 timeout_s: float = 5.0) -> list[list[TestResult]]:
        """``jobs``: (code, tests, setup) triples; returns per-test results for each, in order."""
        futures = [self._pool.submit(self.run, code, tests, setup, timeout_s) for code, tests, setup in jobs]
        return [f.result() for f in futures]

    def run(self, code: str, tests: Sequence[Test], setup: str = "", timeout_s: float = 5.0) -> list[TestResult]:
        """Judge ``code`` on ``tests``: one result per test. ``timeout_s``: the CPU-time limit of each
        test that has none of its own."""
        raw = self.raw(code, [t.payload(i, timeout_s) for i, t in enumerate(tests)], setup, timeout_s)
        if not isinstance(raw, str) and (type(raw) is not list or len(raw) != len(tests)):
            raw = "sandbox runner sent a malformed report"  # one result per test, or none counts
        if isinstance(raw, str):
            return [TestResult(False, "timeout" if "budget" in raw else "error", raw) for _ in tests]
        return _judge_all(tests, raw, self._judges)

    def raw(self, code: str, payloads: Sequence[dict], setup: str = "", timeout_s: float = 5.0) -> list[dict] | str:
        """The runner's unjudged results (encoded values) for test payloads, one per payload, or a reason
        string when the candidate killed its own sandbox or its report is unusable. Raises SandboxError
        on infrastructure failure."""
        if not payloads:
            return []
        with self._slots:
            return self._run(code, payloads, setup, timeout_s)

    def _run(self, code: str, payloads: Sequence[dict], setup: str, timeout_s: float) -> list[dict] | str:
        lim = self.limits
        limits = [float(p.get("timeout_s", timeout_s)) for p in payloads]  # kept here: the runner never sees them
        # the candidate's wall clock: each test may sleep to its ceiling (issue 41)
        budget = lim.wall_factor * sum(limits) + 2.0
        # every test's CPU limit: one ceiling, whatever the test (a longer one only for limits beyond any dataset's)
        cpu = max(lim.cpu_s, math.ceil(max([float(timeout_s), CPU_CEILING_S - 2] + limits)) + 2)
        job = {"code": str(code), "setup": setup or "", "tests": [{k: p[k] for k in PAYLOAD_KEYS if k in p}
                                                                  for p in payloads],
               "isolation": self.isolation, "prefix": self.prefix, "image": self.image, "seccomp": _filter_program(),
               "disk_mb": lim.disk_mb, "max_output_bytes": lim.max_output_bytes,
               "max_result_bytes": lim.max_result_bytes, "max_report_bytes": lim.max_report_bytes,
               "limits": {"RLIMIT_CPU": cpu, "RLIMIT_AS": lim.memory_mb << 20, "RLIMIT_FSIZE": lim.file_mb << 20,
                          "RLIMIT_NOFILE": lim.open_files, "RLIMIT_NPROC": lim.processes}}
        outer = None
        try:
            # the box in a folder of the host's, so the candidate cannot rename or replace it
            if self.isolation == "none":
                outer = tempfile.mkdtemp(prefix="c3sbx-")
                os.chmod(outer, 0o711)
                job["box"] = os.path.join(outer, "box")
                # the runner makes it its leased uid's (root host) before any candidate code
                os.mkdir(job["box"], 0o700)
            home = job.get("box") or "/sandbox"
            env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8",
                   # a fixed hash seed: set and dict orders repeat between reference and candidate
                   "PYTHONHASHSEED": "0"}
            try:
                with _leased_image(job):  # a copy of the image no concurrent sandbox reads
                    cgroup = cgroups.BoxCgroup.create(lim.box_memory_mb << 20, lim.box_processes)
                    out, err, rc, talk = _launch(self.python, job, budget + 10.0, cgroup, env, limits, budget,
                                                lim.wall_factor)
            except (OSError, subprocess.SubprocessError, uids.LeaseError, image.ImageError) as exc:
                raise SandboxError(f"sandbox did not start: {type(exc).__name__}: {exc}") from exc
            if rc is None:
                return "candidate exceeded its wall-clock budget"
            lines = out.split(b"\n", 1)
            if lines[0] != b"READY":
                raise SandboxError(f"sandbox did not start (exit {rc}): {err.decode('utf-8', 'replace')[-500:]}")
            if len(lines) < 2 or not lines[1]:
                return f"sandbox runner terminated (exit {rc}) before reporting"
            if len(lines[1]) > _report_cap(lim, len(payloads)):  # the runner caps it; never parse more than that
                return "sandbox runner sent an oversized report"
            results = _parse_report(lines[1], payloads, lim)
            if isinstance(results, str):
                return results
            killed = min(talk.why, default=None)  # the first test this host decided was out of time
            for i, r in enumerate(results):
                r["seconds"] = talk.seconds.get(i, 0.0)  # timed here, from the runner's S/E lines
                if killed is not None and i > killed:  # whatever the runner ran after it (its kill in flight): dropped
                    results[i] = r = {"status": "error", "reason": NOT_RUN % killed, "output": "", "seconds": 0.0}
                elif i == killed or (r.get("status") == "timeout" and "its time limit" in str(r.get("reason", ""))):
                    # the host's decision stands, whatever the test sent before the kill reached it (issue 39)
                    results[i] = r = {"status": "timeout", "output": r.get("output", ""), "seconds": r["seconds"],
                                      "reason": talk.why.get(i, f"exceeded {limits[i]:.1f}s of CPU time")}
            return results
        finally:
            if outer is not None:
                remove_tree(outer)

    @staticmethod
    def _judge(test: Test, r: dict, judges: JudgePool | None = None, budget: list[float] | None = None) -> TestResult:
        """A test's result from the runner's report. Anything the candidate sent that is not plain data
        of the right shape, over its test's value cap, or on which the assertion cannot be evaluated (in the judge
        process, within its time and memory: ``judge.py``), fails the test; nothing raises."""
        first = _prejudge(test, r)
        if isinstance(first, TestResult):
            return first
        text, common = first
        try:
            ok, status, reason = (judges or _default_judges()).verdict(
                test, text, budget if budget is not None else [JUDGE_CANDIDATE_S])
        except JudgeError as exc:
            return TestResult(False, "error", str(exc), **common)
        except OSError as exc:  # no judge process could be started: the machinery, not the candidate
            raise SandboxError(f"the judge process did not start: {exc}") from exc
        return TestResult(ok, status, reason, **common)


def _judge_all(tests: Sequence[Test], raw: Sequence[dict], judges: JudgePool) -> list[TestResult]:
    """Every test's result, the verdicts of one candidate asked of one judge process at once (one round trip)."""
    firsts = []
    for t, r in zip(tests, raw):
        try:
            firsts.append(_prejudge(t, r))
        except Exception as exc:  # noqa: BLE001 - a hostile result must never make a reward call fail
            firsts.append(TestResult(False, "error", f"result could not be judged: {type(exc).__name__}"))
    asked = [(t, f[0]) for t, f in zip(tests, firsts) if not isinstance(f, TestResult)]
    try:
        answers = iter(judges.verdicts(asked, [JUDGE_CANDIDATE_S]) if asked else [])
    except OSError as exc:
        raise SandboxError(f"the judge process did not start: {exc}") from exc
    out = []
    for f in firsts:
        if isinstance(f, TestResult):
            out.append(f)
            continue
        answer = next(answers)
        if isinstance(answer, JudgeError):
            out.append(TestResult(False, "error", str(answer), **f[1]))
        else:
            out.append(TestResult(answer[0], answer[1], answer[2], **f[1]))
    return out


def _prejudge(test: Test, r: dict) -> "TestResult | tuple[str, dict]":
    """What the host decides before a verdict: a failed TestResult (no value, a malformed report, a value over its
    test's cap), or the value's JSON text for the judge and the result's common fields."""
    try:
        common = {"seconds": float(r.get("seconds", 0.0)), "output": str(r.get("output", ""))}
        if r.get("status") != "value":
            return TestResult(False, "timeout" if r.get("status") == "timeout" else "error",
                              str(r.get("reason", "")), **common)
    except Exception as exc:  # noqa: BLE001 - a malformed report is a failed test
        return TestResult(False, "error", f"malformed result: {type(exc).__name__}")
    try:
        text = json.dumps(r["value"])
    except Exception as exc:  # noqa: BLE001
        return TestResult(False, "error", f"undecodable result: {type(exc).__name__}", **common)
    cap = test.value_cap()
    if cap is not None and len(text) > cap:  # checked here: the sandbox never knows an expected value's size
        return TestResult(False, "error", f"result larger than {cap} bytes", **common)
    return text, common


_JUDGES: list[JudgePool] = []


def _default_judges() -> JudgePool:
    with _LOCK:
        if not _JUDGES:
            _JUDGES.append(JudgePool(1))
        return _JUDGES[0]


_DEFAULT: Sandbox | None = None
_LOCK = threading.Lock()


def default_sandbox() -> Sandbox:
    global _DEFAULT
    with _LOCK:
        if _DEFAULT is None:
            _DEFAULT = Sandbox(isolation=_ISOLATION[0])
        return _DEFAULT


# what callers and tests reach through this module (the pool's parts live in cases.py and launch.py)
__all__ = ["Limits", "Sandbox", "SandboxError", "Test", "TestResult", "UNSAFE", "_image", "_launch", "configure",
           "default_sandbox", "isolation_probe", "namespaces_available", "remove_tree"]
