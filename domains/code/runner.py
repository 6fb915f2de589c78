"""The in-sandbox test runner (stdlib only; started as ``python -B -S runner.py JOB`` with a scrubbed environment inside the sandbox).

It never runs candidate code itself: each test runs in a forked child that drops to an
unprivileged uid (when the runner may), applies resource limits, redirects its output to
a size-capped file, executes the setup and candidate code in a fresh namespace, evaluates
the test's call, and sends back the *value*, encoded as plain builtin data. Only builtin
types encode (exact type checks, so a subclass or an object with a rigged ``__eq__`` is
rejected); the expected values never enter the sandbox, and the comparison happens in the
host. A child that exits early, raises, times out or is killed sends no value and passes
nothing. The runner prints ``READY`` before any candidate code runs, then one JSON line
of results.
"""

import base64
import collections
import json
import os
import resource
import select
import signal
import sys
import time

MAX_DEPTH = 64
MAX_ITEMS = 100000


class Unsupported(Exception):
    pass


# Standard-library containers accepted as plain data, captured before any candidate code runs.
TRUSTED = {collections.Counter: "dict", collections.OrderedDict: "dict", collections.defaultdict: "dict", collections.deque: "list"}


def encode(value, depth=0, budget=None):
    """Builtin data -> JSON-able tagged tree; anything else raises Unsupported."""
    if budget is None:
        budget = [MAX_ITEMS]
    budget[0] -= 1
    if depth > MAX_DEPTH or budget[0] < 0:
        raise Unsupported("result too deep or too large")
    t = type(value)
    if value is None:
        return ["none"]
    if t is bool:
        return ["bool", value]
    if t is int:
        return ["int", str(value)]
    if t is float:
        return ["float", repr(value)]
    if t is complex:
        return ["complex", repr(value.real), repr(value.imag)]
    if t is str:
        return ["str", value]
    if t is bytes:
        return ["bytes", base64.b64encode(value).decode()]
    kind = TRUSTED.get(t)
    if kind == "dict":
        return ["dict", [[encode(k, depth + 1, budget), encode(v, depth + 1, budget)] for k, v in dict.items(value)]]
    if kind == "list":
        return ["list", [encode(v, depth + 1, budget) for v in list(value)]]
    if t in (list, tuple, set, frozenset):
        items = [encode(v, depth + 1, budget) for v in value]
        if t in (set, frozenset):
            items.sort(key=lambda x: json.dumps(x))
        return [t.__name__, items]
    if t is dict:
        return ["dict", [[encode(k, depth + 1, budget), encode(v, depth + 1, budget)] for k, v in value.items()]]
    raise Unsupported("result of type %s.%s is not plain builtin data" % (t.__module__, t.__qualname__))


def limit(limits):
    for name, value in limits.items():
        res = getattr(resource, name)
        resource.setrlimit(res, (value, value))


def run_test(job, test, uid):
    """Fork one test child; return its result dict."""
    read_fd, write_fd = os.pipe()
    out_path = "/sandbox/out-%d.txt" % test["index"] if os.path.isdir("/sandbox") else os.path.join(os.getcwd(), "out-%d.txt" % test["index"])
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # test child
        try:
            os.close(read_fd)
            os.setpgid(0, 0)
            out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            if uid is not None:
                os.fchown(out, uid, uid)
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out, 1)
            os.dup2(out, 2)
            os.closerange(3, write_fd)
            os.closerange(write_fd + 1, 1024)
            limit(job["limits"])
            env = {"__name__": "__candidate__", "__builtins__": __builtins__}
            try:
                exec(compile(job["code"], "<candidate>", "exec"), env)
                if job.get("setup"):  # MBPP's test setup runs after the code it tests (it may use its classes)
                    exec(compile(job["setup"], "<setup>", "exec"), env)
                if "expr" in test:
                    value = eval(compile(test["expr"], "<test>", "eval"), env)
                else:
                    fn = env.get(test["entry_point"])
                    if not callable(fn):
                        raise NameError("function %r is not defined" % test["entry_point"])
                    value = fn(*test["args"])
                msg = {"status": "value", "value": encode(value)}
            except Unsupported as exc:
                msg = {"status": "error", "reason": "unsupported result: %s" % exc}
            except BaseException as exc:  # SystemExit and KeyboardInterrupt included: no value, no pass
                msg = {"status": "error", "reason": "%s: %s" % (type(exc).__name__, str(exc)[:300])}
            data = json.dumps(msg).encode()
            view = memoryview(data)
            while view:
                view = view[os.write(write_fd, view):]
        finally:
            os._exit(0)
    os.close(write_fd)
    chunks, deadline, status = [], start + job["timeout_s"], None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            status = "timeout"
            break
        ready, _, _ = select.select([read_fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(read_fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
        if sum(len(c) for c in chunks) > job["max_result_bytes"]:
            status = "result_too_large"
            break
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    _, wstatus = os.waitpid(pid, 0)
    os.close(read_fd)
    seconds = time.monotonic() - start
    try:
        with open(out_path, "rb") as fh:
            output = fh.read(job["max_output_bytes"]).decode("utf-8", "replace")
        os.unlink(out_path)
    except OSError:
        output = ""
    if status == "timeout":
        return {"status": "timeout", "reason": "exceeded %.1fs wall clock" % job["timeout_s"], "seconds": seconds, "output": output}
    if status == "result_too_large":
        return {"status": "error", "reason": "result larger than %d bytes" % job["max_result_bytes"], "seconds": seconds, "output": output}
    try:
        msg = json.loads(b"".join(chunks).decode()) if chunks else None
    except ValueError:
        msg = None
    if not isinstance(msg, dict) or msg.get("status") not in ("value", "error"):
        if os.WIFSIGNALED(wstatus):
            sig = os.WTERMSIG(wstatus)
            names = {signal.SIGXCPU: "CPU time limit", signal.SIGXFSZ: "output size limit", signal.SIGKILL: "killed",
                     signal.SIGSEGV: "segmentation fault"}
            reason = "terminated by signal %d (%s)" % (sig, names.get(sig, signal.Signals(sig).name))
        else:
            reason = "exited (code %d) without reporting a result" % os.WEXITSTATUS(wstatus)
        return {"status": "error", "reason": reason, "seconds": seconds, "output": output}
    msg.update(seconds=seconds, output=output)
    return msg


def main():
    with open(sys.argv[1]) as fh:
        job = json.load(fh)
    uid = job.get("uid")
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    results = []
    deadline = time.monotonic() + job["candidate_timeout_s"]
    for test in job["tests"]:
        if time.monotonic() > deadline:
            results.append({"status": "timeout", "reason": "candidate wall-clock budget exhausted", "seconds": 0.0, "output": ""})
            continue
        results.append(run_test(job, test, uid))
    sys.stdout.write(json.dumps(results) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
