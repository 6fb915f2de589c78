"""A hostile candidate cannot change a concurrent candidate's result (issue 41).

An honest candidate (three CPU-bound tests, about 0.3 s of CPU each) runs once alone and then beside each hostile
neighbour in the same pool; its pass/fail must be the same. Each neighbour runs about 30 tasks, each process in a
session of its own, until the honest candidate is done: processes that spin (the issue's attack), threads that spin
outside the GIL, processes forked up to the box's limit that keep replacing themselves, busy file I/O, memory-bandwidth
floods, and processes that sleep first and spin when the honest candidate runs. Under a per-thread (or per-session)
fair scheduler each of them leaves the honest tests about a sixteenth of a core (on two cores), so with wall-clock
limits alone they time out.

The module runs as whoever runs the suite (root: with cgroup CPU weights where the host has them) and, when that is
root, once more as ``nobody``, who has no cgroups ("rlimits only": the runner's CPU-time limits and scheduling).
"""

import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from c3_sandbox.sandbox import Test
from tests.sandbox.test_sandbox_adversarial import REPO, ROOT, _sandboxed_processes, pool, run_as_nobody

HOSTILE_S = 60.0  # how long a neighbour would keep its tasks busy: until the test ends its sandbox
HONEST = "def g(n):\n    return sum(i * i for i in range(n))"
N = 6_000_000
LIMIT_S = 1.5  # each honest test's limit: several times its CPU time alone, well below its time beside a neighbour
TASKS = 28  # a neighbour's processes or threads (the box allows 32 tasks, its runner and test child included)

_HEAD = f'''
import ctypes, os, signal, threading, time, zlib
END = time.time() + {HOSTILE_S}
def new_session():  # a session of its own: a scheduling autogroup of its own, where the kernel has them
    try:
        os.setsid()
    except OSError:
        pass
def spin():
    while time.time() < END:
        pass
def processes(work, n={TASKS}):
    for _ in range(n):
        try:
            if os.fork() == 0:
                try:
                    new_session()
                    work()
                finally:
                    os._exit(0)
        except OSError:
            break
    time.sleep(max(0.0, END - time.time()))
    return 1
def threads(work, n):
    threading.stack_size(1 << 18)  # their stacks fit in the box's address space
    ts = [threading.Thread(target=work, daemon=True) for _ in range(n - 1)]
    for t in ts:
        t.start()
    work()
def threaded(work):  # 14 processes (sessions) of 2 busy threads
    return processes(lambda: threads(work, 2), n=14)
'''

HOSTILE = {
    # the attack: a process per core and many more, each in a session of its own
    "spinning processes": "def f():\n    return processes(spin)",
    # a checksum of a large buffer releases the GIL: every thread runs at once
    "spinning threads": '''
def f():
    data = b"x" * (1 << 20)
    def work():
        while time.time() < END:
            zlib.crc32(data)
    return threaded(work)''',
    # forked until the box refuses more; each process spins 20 ms, forks its replacement and exits, unreaped
    "forks to the limit": '''
def f():
    try:  # children reaped by the kernel, counted nowhere: refused since round six (EPERM), tried anyway
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    except OSError:
        pass
    def work():
        while time.time() < END:
            stop = time.time() + 0.02
            while time.time() < stop:
                pass
            try:
                if os.fork():
                    os._exit(0)
                new_session()
            except OSError:
                pass
    return processes(work, n=64)''',
    # writes, syncs, reads back and truncates a file of its own in the box, as fast as it can
    "busy I/O": '''
def f():
    def work():
        fd = os.open("/tmp/io-%d" % os.getpid(), os.O_RDWR | os.O_CREAT, 0o600)
        block = os.urandom(256 << 10)
        while time.time() < END:
            os.pwrite(fd, block, 0)
            os.fsync(fd)
            os.pread(fd, len(block), 0)
            os.ftruncate(fd, 0)
    return processes(work)''',
    # each thread copies 16 MiB of its own back and forth (ctypes releases the GIL): the memory bus is saturated
    "memory bandwidth": '''
def f():
    size = 16 << 20
    def work():
        a, b = ctypes.create_string_buffer(size), ctypes.create_string_buffer(size)
        while time.time() < END:
            ctypes.memmove(a, b, size)
            ctypes.memmove(b, a, size)
    return threaded(work)''',
    # quiet until the honest candidate is running, then spinning
    "sleeping then spinning": "def f():\n    return processes(lambda: (time.sleep(0.8), spin()))",
}


def honest_results(sb):
    tests = [Test(expected=sum(i * i for i in range(N)), expr=f"g({N})") for _ in range(3)]
    return [(r.passed, r.status) for r in sb.run(HONEST, tests, timeout_s=LIMIT_S)]


def wait_for_tasks(n, within_s=30.0):
    """Until the sandboxes this process runs hold ``n`` tasks (processes and threads) or more."""
    give_up = time.monotonic() + within_s
    while time.monotonic() < give_up:
        tasks = 0
        for pid in _sandboxed_processes().values():
            try:
                tasks += len(os.listdir(f"/proc/{pid}/task"))
            except OSError:
                pass
        if tasks >= n:
            return
        time.sleep(0.02)
    raise AssertionError(f"the neighbour never ran {n} tasks")


def end_sandboxes():
    """Kill every sandbox this process runs (its runner is its PID namespace's init: the kernel kills the rest)."""
    for inner, pid in _sandboxed_processes().items():
        if inner == "1":
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


@pytest.fixture(scope="module")
def sandbox_pool():
    sb = pool(workers=2)
    yield sb
    if sb is not None:
        sb.close()


@pytest.fixture(scope="module")
def alone(sandbox_pool):
    """The honest candidate's results alone (None where this host refuses to run candidates)."""
    if sandbox_pool is None:
        return None
    results = honest_results(sandbox_pool)
    assert results == [(True, "passed")] * 3, results
    return results


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_neighbour_does_not_change_an_honest_candidate_s_result(sandbox_pool, alone, name):
    sb = sandbox_pool
    if sb is None:  # this host refuses to run candidates (asserted by pool())
        return
    hostile = {}
    neighbour = threading.Thread(target=lambda: hostile.setdefault(
        "r", sb.run(_HEAD + HOSTILE[name], [Test(expected=1, expr="f()")], timeout_s=HOSTILE_S)))
    neighbour.start()
    wait_for_tasks(TASKS)  # its tasks are running (or, the sleeper's, waiting)
    beside = honest_results(sb)
    end_sandboxes()  # the neighbour's, the only one left
    neighbour.join()
    assert beside == alone, (name, beside, hostile["r"][0].reason)


def test_the_neighbours_cannot_change_a_result_as_an_unprivileged_user_either():
    """Run as root, this re-runs the module as ``nobody`` (no cgroups: the runner's own limits and scheduling)."""
    if not ROOT:
        return  # this run is the unprivileged one
    run = run_as_nobody(f"-m pytest -q -p no:cacheprovider -k 'not unprivileged_user' "
                        f"{Path(__file__).relative_to(REPO)}", timeout=600)
    tail = (run.stdout + run.stderr)[-3000:]
    assert run.returncode == 0, tail
    passed = re.search(r"(\d+) passed", run.stdout)
    assert passed and int(passed.group(1)) == len(HOSTILE) and "failed" not in run.stdout, tail
