"""The job protocol, the host's side: what this host can build (``isolation_probe``), the filter and image a job
carries, starting a runner (``_launch``) and the conversation with it (``_Conversation``: the ``S``/``C``/``E``
lines in, ``K``/``B`` out, each test timed here), killing it, and removing an unisolated box's folder."""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Sequence

from . import cgroups, image, runner, uids
from .runner import seccomp

# A running test whose CPU time the runner has not reported for this long is killed: the runner reports at least
# every runner.REPORT_EVERY_S (0.5 s) on its own clock, so silence means it cannot look (issue 39)
REPORT_GAP_S = 2.0
CPU_CEILING_S = 32  # every test process's RLIMIT_CPU, at least (data.TIME_CAP_S + 2; a test's own limit is the host's)
LOG = logging.getLogger(__name__)

_PROBE: dict | None = None
_PROBE_LOCK = threading.Lock()
_SOURCE: list[str] = []


def _runner_source() -> str:
    if not _SOURCE:
        _SOURCE.append(runner.source())
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


# what a call off the system-call filter's allow-list gets (``seccomp.FILTER_DEFAULT``, ENOSYS; a kill in
# bench/syscall_allowlist.py); the filter is compiled here once per value and sent in every job (``seccomp.job_filter``)
FILTER_DEFAULT = seccomp.FILTER_DEFAULT
_FILTERS: dict[int, str] = {}
_FILTER_LOCK = threading.Lock()


def _filter_program() -> str | None:
    """The test children's system-call filter as a base64 BPF program, compiled once per process; None where this
    process cannot load libseccomp (the runner then tries, and fails closed with the reason)."""
    with _FILTER_LOCK:
        if FILTER_DEFAULT not in _FILTERS:
            try:
                program = seccomp.syscall_filter(FILTER_DEFAULT)[0]
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
