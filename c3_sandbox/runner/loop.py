"""The test loop: each test in a forked child, the host's control lines, the job, and ``main`` (the last part of the
runner program: ``c3_sandbox/runner/__init__.py``)."""

import errno
import json
import os
import signal
import sys
import time

from .accounting import cpu_of, wait_result
from .build import (
    _OWN_PROC,
    CLONE_NEWIPC,
    PR_SET_CHILD_SUBREAPER,
    PR_SET_DUMPABLE,
    PR_SET_NO_NEW_PRIVS,
    _call,
    build_root,
    drop_bounding_set,
    drop_privileges,
    drop_to_lease,
    enter_namespaces,
    fresh_box,
    leave_session_keyring,
    libc,
    limit,
    limit_runner,
    prctl,
    raise_oom_score,
)
from .seccomp import SECCOMP, job_filter, load_filter
from .wire import CONTROL, NOT_RUN, SetupError, evaluate, parse_message, say, send


def child(job, test, out, result_fd, box):
    """The test child: never returns."""
    try:
        forget_earlier()  # first: nothing of an earlier test outlives this line here
        os.setpgid(0, 0)
        try:  # fails closed: a test that could take the runner down with it does not run
            raise_oom_score()
            refused = None
        except OSError as exc:
            refused = "sandbox: this test's OOM score cannot be raised (%s)" % exc
        os.dup2(out, 1)  # first: ``out`` may be fd 3
        os.dup2(out, 2)
        if result_fd != 3:
            os.dup2(result_fd, 3)
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        # the runner's pipes to the host and its /proc included (close_range(2) where Python has it)
        os.closerange(4, 1 << 20)
        if refused:
            send({"status": "error", "reason": refused})
            return
        os.chdir(box)
        # RLIMIT_CPU: the host's ceiling for every test (the test's own limit is the host's, outside); RLIMIT_CORE 1:
        # the kernel's "no pipe helper" value, and less than any core file, for what this child may exec;
        # RLIMIT_NICE 0: no nice value below the runner's, so a test that the runner moves to SCHED_IDLE stays there
        limit(dict(job["limits"], RLIMIT_CORE=1, RLIMIT_NICE=0))
        drop_privileges()
        # last: no call of the candidate's runs unfiltered (a failure ends the test: fail closed)
        load_filter(SECCOMP[0])
        msg = evaluate(job, test)
        for stream in (sys.stdout, sys.stderr):  # what the candidate printed, into the output file
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001
                pass
        send(msg)
    finally:
        os._exit(0)


def end_test(pid, isolated, leased, reaped, used):
    """Kill everything the test started and reap it; returns the test child's wait status (or None). Adds to
    ``used[0]`` the CPU time of every process reaped here (each one's own and its reaped children's)."""
    status = reaped[0] if reaped else None
    for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
        try:
            target()
        except OSError:
            pass
    if isolated or leased:  # every other process of the PID namespace, or of the leased uid, but this one
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
    give_up = time.monotonic() + (3600.0 if isolated or leased else 2.0)  # all are dead then: waiting ends
    while time.monotonic() < give_up:
        if not (isolated or leased):
            _kill_children()
        try:
            got, st, ru = os.wait4(-1, 0 if isolated or leased else os.WNOHANG)
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        if got:
            used[0] += cpu_of(ru)
        if got == pid:
            status = st
        elif got == 0:
            time.sleep(0.01)
    return status


def clear_ipc():
    """A new IPC namespace for the runner (and so the next test), after a test's processes are dead: the last
    test's System V shared memory segments, semaphore sets and message queues die with its namespace, and System
    V ids restart, so nothing carries to the next test."""
    for attempt in range(200):  # the namespaces of earlier tests are freed asynchronously: their count drops soon
        try:
            return _call("unshare IPC", libc().unshare(CLONE_NEWIPC))
        except OSError as exc:
            if exc.errno != errno.ENOSPC or attempt == 199:
                raise
            time.sleep(0.005)


def _kill_children():
    """Unisolated and unprivileged: kill the orphans this subreaper adopted (best effort)."""
    me = str(os.getpid())
    try:
        names = os.listdir("/proc")
    except OSError:
        return
    for name in names:
        try:
            with open("/proc/%s/stat" % name, "rb") as fh:
                if fh.read().rsplit(b")", 1)[1].split()[1].decode() == me:
                    os.kill(int(name), signal.SIGKILL)
        except (OSError, IndexError, ValueError):
            continue


def describe_death(wstatus):
    if wstatus is not None and os.WIFSIGNALED(wstatus):
        sig = os.WTERMSIG(wstatus)
        names = {signal.SIGXCPU: "CPU time limit", signal.SIGXFSZ: "output size limit", signal.SIGKILL: "killed",
                 signal.SIGSEGV: "segmentation fault"}
        try:
            name = names.get(sig) or signal.Signals(sig).name
        except ValueError:
            name = "signal %d" % sig
        return "terminated by signal %d (%s)" % (sig, name)
    if wstatus is not None and os.WIFEXITED(wstatus):
        return "exited (code %d) without reporting a result" % os.WEXITSTATUS(wstatus)
    return "ended without reporting a result"


def run_test(job, test, index, isolated, leased, box):
    """Fork one test child; return its result dict (the host adds its time)."""
    if isolated:
        fresh_box(job)
    out = os.memfd_create("output", os.MFD_CLOEXEC)
    read_fd, write_fd = os.pipe()
    say("S %d" % index)  # the host starts this test's clock
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        child(job, test, out, write_fd, box)
    os.close(write_fd)
    reaped, used = [], [0.0]
    cap = int(job["max_result_bytes"])  # the same for every test: a value test's own cap is checked by the host
    try:
        data, status = wait_result(read_fd, pid, index, cap, reaped, isolated and _OWN_PROC[0], used)
    finally:
        wstatus = end_test(pid, isolated, leased, reaped, used)
        # the test's whole CPU time, every process of it reaped: what it used after the last look counts too (the
        # host judges the test on this line, before its end)
        say("C %d %.3f" % (index, used[0]))
        say("E %d" % index)  # the host stops this test's clock
        os.close(read_fd)
        if isolated:
            clear_ipc()
    try:
        output = os.pread(out, int(job["max_output_bytes"]), 0).decode("utf-8", "replace")
    except OSError:
        output = ""
    os.close(out)
    common = {"output": output}
    if status in ("timeout", "budget"):
        return dict(common, status="timeout", reason="exceeded its time limit" if status == "timeout"
                    else "candidate wall-clock budget exhausted")
    if status == "result_too_large":
        return dict(common, status="error", reason="result larger than %d bytes" % cap)
    msg = parse_message(data) if data else None
    if msg is None:
        reason = describe_death(wstatus) if not data else "malformed result message"
        return dict(common, status="error", reason=reason)
    return dict(msg, **common)




# What the runner holds of the tests run so far (their results, the report's room left, the test the host killed): kept
# here, so that no frame of the loop holds any of it, and dropped by each test child before candidate code runs
# (:func:`forget_earlier`), as it drops the other tests' payloads (issue 50: each test stands alone)
EARLIER = {"results": [], "left": 0, "killed": None}


def forget_earlier():
    """In a test child, before any candidate code: nothing of an earlier test stays reachable from it (its value,
    output and reason, the report's room left, what the host said about it)."""
    del EARLIER["results"][:]
    EARLIER["left"], EARLIER["killed"] = 0, None
    CONTROL["kill"].clear()
    CONTROL["buffer"] = b""


def run_tests(job, isolated, leased, box):
    """Every test's result, in order, until the host kills one at its limit: the tests after it are not run
    (:data:`NOT_RUN`), so no candidate code ever runs knowing that an earlier test was killed (a limit carries
    information about the reference's time). The values forwarded to the host are capped together
    (``max_report_bytes``), so a candidate's whole report costs the host at most that much to read, whatever each test
    returns."""
    EARLIER.update(results=[], left=int(job.get("max_report_bytes", job["max_result_bytes"])), killed=None)
    for index, test in enumerate(job["tests"]):
        EARLIER["results"].append(next_result(job, test, index, isolated, leased, box))
    return EARLIER["results"]


def next_result(job, test, index, isolated, leased, box):
    """Test ``index``'s result (run, or not run after a kill or with the budget spent), its value counted against the
    report's room (:data:`EARLIER`)."""
    if CONTROL["budget"]:
        return {"status": "timeout", "reason": "candidate wall-clock budget exhausted", "output": ""}
    if EARLIER["killed"] is not None:  # no later test may learn that an earlier one ran out of time (one bit)
        return {"status": "error", "reason": NOT_RUN % EARLIER["killed"], "output": ""}
    try:
        result = run_test(job, test, index, isolated, leased, box)
    except Exception as exc:  # noqa: BLE001 - a test that breaks the runner's bookkeeping fails alone
        result = {"status": "error", "reason": "runner: %s: %s" % (type(exc).__name__, str(exc)[:200]), "output": ""}
    if index in CONTROL["kill"]:  # killed by the host, whatever the result says (a runner error included)
        EARLIER["killed"] = index
    if result.get("status") == "value":
        size = len(json.dumps(result["value"]))
        if size > EARLIER["left"]:
            result = dict(result, status="error", reason="the candidate's results together are larger than %d bytes"
                          % job["max_report_bytes"])
            del result["value"]
        else:
            EARLIER["left"] -= size
    return result


def read_job():
    """The job from stdin: a line with its length, then that many bytes (read unbuffered: what follows on stdin is
    the host's control lines, read by :func:`read_control`)."""
    head = b""
    while not head.endswith(b"\n"):
        byte = os.read(0, 1)
        if not byte or len(head) > 20:
            raise SetupError("no job on stdin")
        head += byte
    size, chunks = int(head), []
    while size:
        chunk = os.read(0, min(size, 1 << 20))
        if not chunk:
            raise SetupError("the job on stdin is cut short")
        chunks.append(chunk)
        size -= len(chunk)
    return json.loads(b"".join(chunks).decode("utf-8"))


def main():
    # as the PID namespace's init: no handler, so nothing inside can signal it
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    job = read_job()
    isolated = job.get("isolation") == "namespaces"
    leased = job.get("uid") is not None
    try:
        SECCOMP.append(job_filter(job))  # libseccomp (if needed) is loaded while the host's tree is the root
        if isolated:
            sources = enter_namespaces(job)
            report = build_root(job, sources)
            box = "/sandbox"
        else:
            drop_to_lease(job)
            prctl(PR_SET_NO_NEW_PRIVS, 1)
            prctl(PR_SET_CHILD_SUBREAPER, 1)
            report, box = {}, job["box"]
            os.chdir(box)
        limit_runner(job)
        leave_session_keyring()
        drop_bounding_set()
        prctl(PR_SET_DUMPABLE, 0)  # nothing inside may trace this process or read its /proc files
    except BaseException as exc:  # noqa: BLE001
        sys.stderr.write("sandbox setup failed: %s: %s\n" % (type(exc).__name__, exc))
        sys.stderr.flush()
        os._exit(3)
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    if job.get("probe"):
        sys.stdout.write(json.dumps(report) + "\n")
    else:  # one line per test: the host measures each before it parses any (issue 50)
        sys.stdout.write("".join(json.dumps(r) + "\n" for r in run_tests(job, isolated, leased, box)))
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
