"""CPU accounting and the wait for a test's result: the ``C`` lines the host times each test by (one part of the
runner program: ``c3_sandbox/runner/__init__.py``)."""

import os
import select
import time

from .build import _PROC
from .wire import CONTROL, read_control, say

SCHED_IDLE = getattr(os, "SCHED_IDLE", 5)
CLOCK_TICK = os.sysconf("SC_CLK_TCK")


def cpu_of(rusage):
    """A reaped process's CPU seconds from its ``wait4`` usage: its own and that of the children it reaped."""
    return rusage.ru_utime + rusage.ru_stime


class Usage:
    """What a test has used so far, read by the runner while it runs: CPU seconds (every process and thread of the
    test, the children it reaped included) and its tasks. With a ``/proc`` of the sandbox's own PID namespace (the
    runner is its init, so every process in it but this one is the test's) all of them are read; otherwise (no
    namespaces, or the host's ``/proc`` kept) only the test child's own CPU clock.

    Once a test runs more than one task (a thread or a process), every task of it runs ``SCHED_IDLE`` until it
    ends: what it runs past one task's share of a core is taken only from otherwise idle CPUs, whatever it forks.
    Children inherit the policy and none can leave it (``RLIMIT_NICE`` is 0)."""

    def __init__(self, pid, own_proc, reaped=None):
        self.pid, self.idle, self.reaped, self.gone = pid, False, reaped if reaped is not None else [], 0.0
        self.proc = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=_PROC[0]) if own_proc else None

    def reap(self):
        """Reap every ended process this runner is the parent of (the test child, and, as the PID namespace's
        init, the test's orphans), adding what each used (its own CPU time and that of the children it reaped) to
        :attr:`gone`: a process counted nowhere else once it is reaped. The test child's wait status goes into
        ``reaped``."""
        while True:
            try:
                got, st, ru = os.wait4(-1, os.WNOHANG)
            except (ChildProcessError, InterruptedError):
                return
            if got == 0:
                return
            self.gone += cpu_of(ru)
            if got == self.pid:
                self.reaped.append(st)

    def close(self):
        if self.proc is not None:
            os.close(self.proc)

    def cpu_seconds(self):
        if self.proc is None:
            try:  # the process-wide CPU clock of the test child (CPUCLOCK_SCHED of its pid)
                return time.clock_gettime((~self.pid << 3) | 2)
            except OSError:
                return 0.0
        self.reap()
        ticks, tids = 0, []
        for name in os.listdir(self.proc):
            if not name.isdigit() or name == "1":
                continue
            try:
                fd = os.open(name + "/stat", os.O_RDONLY | os.O_CLOEXEC, dir_fd=self.proc)
                try:
                    fields = os.read(fd, 4096).rsplit(b")", 1)[1].split()
                finally:
                    os.close(fd)
                ticks += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
                fd = os.open(name + "/task", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=self.proc)
                try:
                    tids.extend(int(t) for t in os.listdir(fd))
                finally:
                    os.close(fd)
            except (OSError, IndexError, ValueError):
                continue  # it just ended
        if self.idle or len(tids) > 1:
            self.idle = True
            for tid in tids:
                try:
                    os.sched_setscheduler(tid, SCHED_IDLE, os.sched_param(0))
                except OSError:
                    pass
        return ticks / CLOCK_TICK + self.gone


def poll_interval(elapsed):
    """How long the runner waits between two looks at a running test: often at first (a test that forks is
    moved to SCHED_IDLE within 20 ms), then every 100 ms (the host, told the CPU time at each look, overruns a
    limit by at most that much and a round trip)."""
    return 0.02 if elapsed < 0.2 else 0.1


REPORT_EVERY_S = 0.5  # a C line at least this often, changed or not: the host kills a test it stops hearing about


def wait_result(read_fd, pid, index, cap, reaped, own_proc=False, used=None):
    """Read the child's message until it ends (EOF or the child's exit), the host says it is out of time (its
    limits are the host's: the runner never knows them), or the size cap. The runner looks at the running test on
    the clock (see :func:`poll_interval`), whatever the test writes to its pipe meanwhile: at each look it reaps
    the test's ended orphans (the runner is their init: see :meth:`Usage.reap`) and sends the test's CPU time so
    far (see :class:`Usage`) as ``C <i> <seconds>`` when it changed or :data:`REPORT_EVERY_S` passed; the host
    kills it (``K <i>``) past its CPU-time limit, its wall-clock ceiling, or when no such line came for
    ``sandbox.REPORT_GAP_S``. Returns (bytes, status) with status None, "timeout", "budget" or
    "result_too_large". Without pidfds (Linux before 5.3) the child is polled, and its wait status, once reaped,
    goes into ``reaped``."""
    start = time.monotonic()
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    usage, reported, said = Usage(pid, own_proc, reaped), None, start
    next_look = start + poll_interval(0.0)  # most tests end before the first look: their CPU goes in the last line
    chunks, size, status = [], 0, None
    try:
        while True:
            if CONTROL["budget"] or index in CONTROL["kill"]:
                status = "budget" if CONTROL["budget"] else "timeout"
                break
            now = time.monotonic()
            if now >= next_look:
                cpu = usage.cpu_seconds()
                if cpu != reported or now - said >= REPORT_EVERY_S:
                    say("C %d %.3f" % (index, cpu))  # the host compares it with the test's limit
                    reported, said = cpu, now
                next_look = now + poll_interval(now - start)
            watch = [read_fd, 0] + ([pidfd] if pidfd is not None else [])
            ready = select.select(watch, [], [], max(0.0, next_look - time.monotonic()))[0]
            if 0 in ready:
                read_control()
                continue
            if pidfd is not None:
                exited = pidfd in ready
            else:
                if not reaped:
                    got, st, ru = os.wait4(pid, os.WNOHANG)
                    if got == pid:
                        reaped.append(st)
                        usage.gone += cpu_of(ru)
                exited = bool(reaped)
            if read_fd in ready or exited:
                if exited:
                    os.set_blocking(read_fd, False)
                try:
                    chunk = os.read(read_fd, 65536)
                except BlockingIOError:
                    chunk = b""
                if chunk:
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > cap:
                        status = "result_too_large"
                        break
                    continue
                break
    finally:
        usage.close()
        if pidfd is not None:
            os.close(pidfd)
        if used is not None:
            used[0] += usage.gone  # what the processes reaped during the test used
    return b"".join(chunks), status
