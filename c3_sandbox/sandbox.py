"""Running untrusted model-written code: one fresh sandbox per candidate.

The threat model and what is and is not guaranteed: ``c3_sandbox/README.md``. In short, each
candidate runs under ``runner.py`` (started isolated, fed its job on stdin):

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

import base64
import contextlib
import json
import logging
import math
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from . import cgroups, image, runner, uids
from .assertions import Assertion, CheckError, compile_assertion
from .judge import JUDGE_CANDIDATE_S, JudgeError, JudgePool
from .runner import MAX_REASON, NOT_RUN, encode
from .values import equal

RUNNER = Path(__file__).with_name("runner.py")
# what a test's payload may hold (the candidate's inputs): a test's time limit and value cap stay in the host
PAYLOAD_KEYS = ("index", "probes", "expr", "entry_point", "args")
# A running test whose CPU time the runner has not reported for this long is killed: the runner reports at least
# every runner.REPORT_EVERY_S (0.5 s) on its own clock, so silence means it cannot look (issue 39)
REPORT_GAP_S = 2.0
CPU_CEILING_S = 32  # every test process's RLIMIT_CPU, at least (data.TIME_CAP_S + 2; a test's own limit is the host's)
ISOLATIONS = ("namespaces", "none")
LOG = logging.getLogger(__name__)
UNSAFE = ("isolation: none: model-written code runs WITHOUT namespaces, with resource limits only; it can read "
          "and write whatever the host user can (a root host drops it to a leased uid first)")


class SandboxError(RuntimeError):
    """The sandbox machinery failed (not the candidate): an infrastructure error."""


@dataclass
class Limits:
    cpu_s: int = 5  # RLIMIT_CPU per test process
    memory_mb: int = 1024  # RLIMIT_AS per test process
    file_mb: int = 8  # RLIMIT_FSIZE: largest file (and captured output) a test may write
    open_files: int = 64  # RLIMIT_NOFILE
    processes: int = 32  # RLIMIT_NPROC for the sandbox's uid
    max_output_bytes: int = 2000  # captured test output kept for the report
    max_result_bytes: int = 4 << 20  # largest encoded return value accepted
    max_report_bytes: int = 16 << 20  # all of a candidate's encoded values together (what the host reads and decodes)
    box_memory_mb: int = 1536  # the whole sandbox's memory, its tmpfs included (cgroup memory.max, where available)
    box_processes: int = 128  # the whole sandbox's processes and threads (cgroup pids.max, where available)
    disk_mb: int = 64  # size of the tmpfs a test may write (/sandbox, /tmp)
    # a test's limit is CPU time (all its processes and threads); its wall clock may run this many times longer (a
    # test that sleeps ends there), so a busy machine or a hostile neighbour cannot time out an honest test
    wall_factor: float = 3.0


@dataclass
class TestResult:
    passed: bool
    status: str  # "passed", "failed" (wrong value), "error", "timeout", "infra"
    reason: str = ""
    seconds: float = 0.0
    output: str = ""

    def __post_init__(self) -> None:
        # candidate-derived text (an exception message, its output) goes into feedback prompts and logs: a lone
        # surrogate (raise ValueError(chr(0xD800))) would make the next tokenizer call raise, so it becomes '?'
        self.reason, self.output = printable(self.reason), printable(self.output)


def printable(text: Any) -> str:
    """``text`` as a string that encodes to UTF-8: lone surrogates and other unencodable code points replaced."""
    return str(text).encode("utf-8", "replace").decode("utf-8") if text else ""


@dataclass
class Test:
    """One hidden test, judged in the host. Either an assertion (``assertion``: its probes run in the
    sandbox, its check here) or a value test: evaluate ``expr`` (or call ``entry_point(*args)``) in the
    sandbox, report it in ``mode`` and compare it with ``expected`` type-strictly (floats within
    ``atol + rtol * |expected|``). ``expected`` never enters the sandbox."""

    __test__ = False  # not a pytest class
    expected: Any = None  # decoded builtin data
    expr: str | None = None
    entry_point: str | None = None
    args: list = field(default_factory=list)
    atol: float = 0.0  # absolute tolerance for floats (MBPP+); 0: exact
    rtol: float = 0.0  # relative tolerance for floats (MBPP+, as EvalPlus)
    mode: str = "value"  # how the sandbox reports a value test's value (see assertions.MODES)
    assertion: Assertion | None = None
    timeout_s: float | None = None  # this test's CPU-time limit (wall: wall_factor x); None: the run's
    _cap: int | None = field(default=None, repr=False, compare=False)  # value_cap(), computed once

    @classmethod
    def from_assert(cls, source: str, defined: Sequence[str] = (), timeout_s: float | None = None) -> "Test":
        """A test from an ``assert`` statement whose constants the host evaluates itself (raises
        AssertionFormError otherwise; see ``domains.code.execute`` for the general case)."""
        assertion = compile_assertion(source, defined)
        if assertion.pending:
            raise ValueError(f"{source!r}: constants {assertion.pending} need a sandbox to evaluate")
        return cls(assertion=assertion, timeout_s=timeout_s)

    @property
    def source(self) -> str:
        """The test as a line of Python (for feedback and reports)."""
        if self.assertion is not None:
            return self.assertion.source
        return self.expr or f"{self.entry_point}(*{self.args!r})"

    def probes(self) -> list[dict]:
        if self.assertion is not None:
            return [{"expr": p.source, "mode": p.mode} for p in self.assertion.probes]
        if self.expr is not None:
            return [{"expr": self.expr, "mode": self.mode}]
        return [{"call": self.entry_point, "args": encode(list(self.args), 0, [1 << 22]), "mode": self.mode}]

    def payload(self, index: int, timeout_s: float = 5.0, judged: bool = True) -> dict:
        """The probes (the candidate's inputs, all the sandbox gets: :data:`PAYLOAD_KEYS`) and this test's time limit
        (``timeout_s``, kept and enforced by the host; a value test's cap, :meth:`value_cap`, is checked by the host
        too). ``judged``: kept for callers; a reference run has no cap, since only :meth:`Sandbox.run` judges."""
        return {"index": index, "probes": self.probes(), "timeout_s": float(self.timeout_s or timeout_s)}

    def value_cap(self) -> int | None:
        """A value test's cap on the candidate's encoded value: 8 x its expected value's encoding + 4 KiB (a value
        equal to it, floats within tolerance included, encodes to at most about twice as many bytes), so a wrong
        answer of any size is never decoded or judged. Checked by the host (:meth:`Sandbox._judge`): the sandbox
        never learns it. None for assertion tests (their probes' honest sizes are not known here: the report's
        whole cap bounds them)."""
        if self.assertion is not None:
            return None
        if self._cap is None:
            try:
                self._cap = 8 * len(json.dumps(encode(self.expected))) + 4096
            except Exception:  # noqa: BLE001 - not plain data (no candidate can equal it): no cap of its own
                self._cap = 0
        return self._cap or None

    def judge(self, values: Sequence[Any]) -> bool:
        """Whether the probe values the sandbox returned pass this test (host-side, plain data only)."""
        if self.assertion is not None:
            return self.assertion.judge(values)
        if len(values) != 1:
            raise CheckError(f"expected one value, got {len(values)}")
        return equal(values[0], self.expected, self.atol, self.rtol)


_PROBE: dict | None = None
_PROBE_LOCK = threading.Lock()
_SOURCE: list[str] = []


def _runner_source() -> str:
    if not _SOURCE:
        _SOURCE.append(RUNNER.read_text())
    return _SOURCE[0]


def isolation_probe() -> dict:
    """What this host can build, found once by starting a runner in probe mode:
    ``{"namespaces": bool, "reason": str, "proc": bool, "box_limits": "cgroup v1" | "cgroup v2" | "rlimits only"}``."""
    global _PROBE
    with _PROBE_LOCK:
        if _PROBE is None:
            report = {"namespaces": False, "reason": "", "proc": False,
                      "box_limits": cgroups.available() or "rlimits only"}
            prefix, python = _installation()
            job = {"probe": True, "isolation": "namespaces", "prefix": prefix, "tests": [], "limits": {}}
            try:
                job["image"] = _image()
                out, err, rc, _ = _launch(python, job, 20.0)
                lines = out.split(b"\n")
                if lines[0] == b"READY":
                    report.update(namespaces=True, proc=bool(json.loads(lines[1]).get("proc")))
                else:
                    report["reason"] = err.decode("utf-8", "replace").strip()[-300:] or f"runner exited with {rc}"
            except (OSError, ValueError, IndexError, subprocess.SubprocessError, uids.LeaseError,
                    image.ImageError) as exc:
                report["reason"] = f"{type(exc).__name__}: {exc}"
            _PROBE = report
    return dict(_PROBE)


# what a call off the system-call filter's allow-list gets (``runner.FILTER_DEFAULT``, ENOSYS; a kill in
# bench/syscall_allowlist.py); the filter is compiled here once per value and sent in every job (``runner.job_filter``)
FILTER_DEFAULT = runner.FILTER_DEFAULT
_FILTERS: dict[int, str] = {}
_FILTER_LOCK = threading.Lock()


def _filter_program() -> str | None:
    """The test children's system-call filter as a base64 BPF program, compiled once per process; None where this
    process cannot load libseccomp (the runner then tries, and fails closed with the reason)."""
    with _FILTER_LOCK:
        if FILTER_DEFAULT not in _FILTERS:
            try:
                program = runner.syscall_filter(FILTER_DEFAULT)[0]
            except OSError:
                return None
            _FILTERS[FILTER_DEFAULT] = base64.b64encode(program).decode()
        return _FILTERS[FILTER_DEFAULT]


def _installation() -> tuple[str, str]:
    """(prefix, interpreter) of this Python: what the runner runs and the image copies."""
    return os.path.realpath(sys.base_prefix), os.path.realpath(sys.executable)


def _image() -> str:
    """The box's own copy of this Python installation and what it loads (``image.py``), made once per process."""
    return image.image_for(*_installation())


@contextlib.contextmanager
def _leased_image(job: dict):
    """``job["image"]`` set, for this run, to a copy of the image no other running sandbox reads (``image.lease``:
    kernel state keyed by a mapped file's inode, a shared futex, is then the box's own); nothing with no image."""
    if not job.get("image"):
        yield
        return
    with image.lease(*_installation()) as root:
        job["image"] = root
        yield


def namespaces_available() -> bool:
    """Whether this host can build the isolated sandbox (checked once)."""
    return isolation_probe()["namespaces"]


def _launch(python: str, job: dict, timeout_s: float, cgroup: "cgroups.BoxCgroup | None" = None,
            env: dict | None = None, limits: Sequence[float] = (), budget_s: float | None = None,
            wall_factor: float = 1.0) -> tuple[bytes, bytes, int | None, "_Conversation"]:
    """Start a runner (a root host: with a uid leased for it), give it ``job``, keep its tests' time: (stdout,
    stderr, exit code, the conversation: its ``seconds`` and ``why``); exit code None when it ran out of
    ``timeout_s`` and was killed. ``limits``: each test's CPU-time limit (its wall-clock ceiling: ``wall_factor``
    times that), ``budget_s``: the candidate's, all enforced here (the runner is told when to kill, never how long
    a test may take: issue 39; it reports each test's CPU time: issue 41)."""
    lease = proc = None
    try:
        lease = uids.lease_uid() if os.geteuid() == 0 else None
        job = dict(job, uid=lease.uid if lease else None)
        env = env or {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"}
        proc = subprocess.Popen([python, "-P", "-s", "-S", "-B", "-c", _runner_source()], cwd="/", env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        if cgroup is not None:
            cgroup.add(proc.pid)  # before the runner has its job, so before it starts anything
        talk = _Conversation(proc, list(limits), budget_s, time.monotonic() + timeout_s, wall_factor)
        data = json.dumps(job).encode()
        if not talk.send(b"%d\n" % len(data) + data):
            talk.closed = True
        out, err, done = talk.run()
        if not done:
            _kill(proc, cgroup, lease)
            proc.wait()
            return out, err, None, talk
        return out, err, proc.wait(), talk
    finally:
        if proc is not None and proc.poll() is None:
            _kill(proc, cgroup, lease)
            proc.wait()
        if cgroup is not None:
            cgroup.remove()
        if lease is not None:
            lease.release()


class _Conversation:
    """The host's side of a runner's run: reads its stdout (``READY``, ``S <i>``, ``C <i> <cpu seconds>``,
    ``E <i>``, the report) and stderr, times each test and tells the runner on its stdin when a test (``K <i>``) or
    the candidate (``B``) is out of time: a test once the CPU time the runner reports passes its limit, or its wall
    clock passes ``wall_factor`` times that limit (issue 41: a busy machine or a neighbour cannot time it out)."""

    def __init__(self, proc: subprocess.Popen, limits: list[float], budget_s: float | None, give_up: float,
                 wall_factor: float = 1.0):
        self.proc, self.limits, self.budget_s, self.give_up = proc, limits, budget_s, give_up
        self.wall_factor = wall_factor
        self.lines: list[bytes] = []
        self.partial, self.err = bytearray(), bytearray()
        self.seconds: dict[int, float] = {}
        self.why: dict[int, str] = {}  # test index: the reason it was killed
        self.current: tuple[int, float] | None = None  # (index, start) of the running test
        self.heard = 0.0  # when the running test's CPU time was last reported (or it started)
        self.budget_end: float | None = None
        self.told: set = set()
        self.closed = False

    def send(self, data: bytes) -> bool:
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    def tell(self, what: bytes) -> None:
        if what not in self.told and not self.closed:
            self.told.add(what)
            self.send(what + b"\n")

    def line(self, line: bytes) -> None:
        now = time.monotonic()
        if line == b"READY" and self.budget_s is not None:
            self.budget_end = now + self.budget_s
        if line[:2] == b"S " and line[2:].isdigit():
            self.current, self.heard = (int(line[2:]), now), now
            return
        if line[:2] == b"C ":
            self.cpu(line[2:])
            return
        if line[:2] == b"E " and line[2:].isdigit():
            if self.current is not None and self.current[0] == int(line[2:]):
                self.seconds[self.current[0]] = now - self.current[1]
            self.current = None
            return
        self.lines.append(line)

    def cpu(self, text: bytes) -> None:
        """A running test's CPU time so far (``<i> <seconds>``): past its limit, it is killed."""
        try:
            index, seconds = text.split(b" ")
            index, used = int(index), float(seconds)
        except ValueError:
            return  # not the runner's line: ignored, as any other stray line
        if self.current is None or self.current[0] != index or index >= len(self.limits):
            return
        self.heard = time.monotonic()
        if used > self.limits[index] and b"K %d" % index not in self.told:
            self.why[index] = f"exceeded {self.limits[index]:.1f}s of CPU time"
            self.tell(b"K %d" % index)

    def deadline(self) -> float:
        """The next moment something must be said (or the runner given up on)."""
        ends = [self.give_up]
        if self.current is not None:
            index, start = self.current
            if index < len(self.limits) and b"K %d" % index not in self.told:
                ends.append(min(start + self.wall_factor * self.limits[index], self.heard + REPORT_GAP_S))
            if self.budget_end is not None and b"B" not in self.told:
                ends.append(self.budget_end)
        return min(ends)

    def act(self) -> None:
        now = time.monotonic()
        if self.current is None:
            return
        index, start = self.current
        if self.budget_end is not None and now >= self.budget_end:
            self.tell(b"B")
        elif index < len(self.limits) and b"K %d" % index not in self.told:
            if now >= start + self.wall_factor * self.limits[index]:
                self.why[index] = f"exceeded {self.wall_factor * self.limits[index]:.1f}s wall clock"
                self.tell(b"K %d" % index)
            elif now >= self.heard + REPORT_GAP_S:
                self.why[index] = f"its CPU time went unreported for {REPORT_GAP_S:.1f}s"
                self.tell(b"K %d" % index)

    def run(self) -> tuple[bytes, bytes, bool]:
        """Until the runner closes its output: (stdout's lines but the timing ones, stderr, whether it finished)."""
        streams = {self.proc.stdout.fileno(): "out", self.proc.stderr.fileno(): "err"}
        while streams:
            # what is already written is read before anything is decided: a host that was slow to look does not
            # kill a test for silence the runner did not keep
            ready = select.select(list(streams), [], [], max(self.deadline() - time.monotonic(), 0.0))[0]
            for fd in ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    del streams[fd]
                    continue
                if streams[fd] == "err":
                    self.err += chunk
                    del self.err[:-65536]
                    continue
                start = len(self.partial)
                self.partial += chunk
                cut = self.partial.find(b"\n", start)
                while cut >= 0:
                    self.line(bytes(self.partial[:cut]))
                    del self.partial[:cut + 1]
                    cut = self.partial.find(b"\n")
            if time.monotonic() >= self.deadline():
                self.act()
                if time.monotonic() >= self.give_up:
                    return b"\n".join(self.lines), bytes(self.err), False
        if self.partial:
            self.lines.append(bytes(self.partial))
        self.closed = True
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        return b"\n".join(self.lines), bytes(self.err), True


def _kill(proc: subprocess.Popen, cgroup: "cgroups.BoxCgroup | None", lease: "uids.UidLease | None") -> None:
    """Kill a runner and everything it started: its process group (whose PID namespace init dies with
    it, taking the namespace down), its cgroup, and (a root host) every process of its leased uid."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    if cgroup is not None:
        cgroup.remove()
    if lease is not None:  # kill(-1) as the leased uid: every process that uid runs (none but the sandbox's)
        subprocess.run(["/bin/sh", "-c", "kill -9 -1"], user=lease.uid, group=lease.uid, extra_groups=[],
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=10, check=False)


_MAX_OPEN = 64  # descriptors remove_tree keeps open at once


def remove_tree(path: str) -> None:
    """Remove a folder a candidate wrote into (``isolation: none``), as the host, never raising: every
    step is relative to a descriptor opened with ``O_NOFOLLOW`` (no link is ever followed), there is
    no recursion (an explicit stack of at most ``_MAX_OPEN`` descriptors; deeper folders are first
    moved up to the top) and a budget of steps ends it whatever the tree holds."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        top = os.open(path, flags)
    except OSError:
        return
    stack, steps, moved, given_up = [(top, "")], 0, 0, set()
    try:
        while stack and steps < 10_000_000:
            fd = stack[-1][0]
            deeper = None
            with os.scandir(fd) as entries:
                for entry in entries:
                    steps += 1
                    try:
                        if not entry.is_dir(follow_symlinks=False):
                            os.unlink(entry.name, dir_fd=fd)
                            continue
                        key = entry.inode()
                        if key in given_up:
                            continue
                        if len(stack) >= _MAX_OPEN:
                            os.rename(entry.name, f".flat-{moved}", src_dir_fd=fd, dst_dir_fd=top)
                            moved += 1
                            continue
                        try:
                            sub = os.open(entry.name, flags, dir_fd=fd)
                        except PermissionError:
                            os.chmod(entry.name, 0o700, dir_fd=fd)
                            sub = os.open(entry.name, flags, dir_fd=fd)
                        deeper = (sub, entry.name, key)
                        break
                    except OSError:
                        given_up.add(entry.inode() if entry.is_dir(follow_symlinks=False) else None)
            if deeper is not None:
                stack.append(deeper[:2])
                given_up.add(deeper[2])  # removed below, or left: either way never entered twice
                continue
            fd, name = stack.pop()
            os.close(fd)
            if stack:
                try:
                    os.rmdir(name, dir_fd=stack[-1][0])
                except OSError:
                    pass
        try:
            os.rmdir(path)
        except OSError:
            pass
    except OSError:
        pass
    finally:
        for fd, _ in stack:
            try:
                os.close(fd)
            except OSError:
                pass


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
            lines = out.split(b"\n", 2)
            if lines[0] != b"READY":
                raise SandboxError(f"sandbox did not start (exit {rc}): {err.decode('utf-8', 'replace')[-500:]}")
            if len(lines) < 2 or not lines[1]:
                return f"sandbox runner terminated (exit {rc}) before reporting"
            if len(lines[1]) > _report_cap(lim, len(payloads)):  # the runner caps it; never parse more than that
                return "sandbox runner sent an oversized report"
            try:
                results = json.loads(lines[1])
            except (ValueError, RecursionError):
                return "sandbox runner sent a malformed report"
            if type(results) is not list or len(results) != len(payloads) or any(type(r) is not dict for r in results):
                return "sandbox runner sent a malformed report"
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
