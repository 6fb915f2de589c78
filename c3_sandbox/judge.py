"""The host's judge: a test's verdict on a candidate's values, computed in a process of its own.

Everything the host does with what a candidate returned (decoding it with ``values.decode``, comparing it with
the expected value, evaluating the assertion's check with ``assertions.evaluate``) runs in a judge process, one
per pool worker, started once from this file (stdlib only, no project import). Each judge process has an
address-space limit (``JUDGE_MEMORY_MB``); each verdict a time limit (``JUDGE_TEST_S``) and each candidate a
budget (``JUDGE_CANDIDATE_S``) for all of its verdicts together: a judge that runs past them is killed (and a
fresh one started for the next verdict), and the test fails. So whatever operation of the check a value makes
expensive, families nobody listed included (hashing of colliding keys, a format width, a quadratic ``sum``),
the host process spends no more than the time it waits and its memory does not grow: the judge is bounded by
construction, and the evaluator's own guards (``assertions.py``) refuse the known families before they cost
anything. The host process itself parses the runner's report (capped at ``max_report_bytes``) and checks a
value test's value against its cap before sending it (issue 39).

Protocol: the host writes a 4-byte length and a pickled list of ``(spec, value)``, one per test of a candidate:
``spec`` is the test's own data (trusted: made by the host, see :func:`spec_of`), ``value`` the candidate's encoded
value as JSON text (the judge decodes it). The judge answers each in turn, as it is reached, with a 4-byte length
and JSON ``[passed, status, reason]``; the host gives each answer ``JUDGE_TEST_S`` from the one before.
"""

from __future__ import annotations

import json
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from .assertions import CheckError, evaluate, truth
from .values import decode, equal

JUDGE_MEMORY_MB = 768  # address space of a judge process (the largest honest MBPP+ value decodes in < 100 MB)
JUDGE_TEST_S = 5.0  # one verdict's wall-clock limit (an honest one takes milliseconds)
JUDGE_CANDIDATE_S = 30.0  # all of one candidate's verdicts together
_HEADER = struct.Struct("!I")

# ------------------------------------------------------------------------------ the judge process


def _verdict(spec: tuple, text: str) -> list:
    """[passed, status, reason] of one test (runs in the judge process)."""
    try:
        values = decode(json.loads(text))
        if type(values) is not tuple:
            raise ValueError("not a tuple of probe values")
    except Exception as exc:  # noqa: BLE001 - values.decode's ResultError and anything else a hostile result causes
        return [False, "error", f"undecodable result: {str(exc)[:200]}"]
    kind = spec[0]
    try:
        if kind == "assert":
            _, check, consts, sources = spec
            if len(values) != len(sources):
                raise CheckError(f"expected {len(sources)} probe values, got {len(values)}")
            env = {f"_p{i}": v for i, v in enumerate(values)}
            env.update((f"_c{j}", c) for j, c in enumerate(consts))
            ok = truth(evaluate(check, env))
        else:
            _, expected, atol, rtol, sources = spec
            if len(values) != 1:
                raise CheckError(f"expected one value, got {len(values)}")
            ok = equal(values[0], expected, atol, rtol)
    except CheckError as exc:
        return [False, "error", f"the assertion raised {exc}"]
    except Exception as exc:  # noqa: BLE001 - the host evaluator on unusual plain data: the assert did not hold
        return [False, "error", f"the assertion raised {type(exc).__name__}: {str(exc)[:200]}"]
    return [bool(ok), "passed" if ok else "failed", "" if ok else _got(kind, sources, values)]


def _got(kind: str, sources: list, values: tuple) -> str:
    return "got " + ", ".join(f"{s} = {_short(v)}" if len(values) > 1 or kind == "assert" else _short(v)
                              for s, v in zip(sources, values))


def _short(value: Any) -> str:
    try:
        text = repr(value)
    except ValueError:  # an int past the digit limit
        text = f"<int of {value.bit_length()} bits>"
    return text if len(text) < 120 else text[:117] + "..."


def _read_exact(fd: int, n: int) -> bytes:
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def serve() -> None:
    """The judge process's loop: one verdict per request, until the host closes its end."""
    import resource

    limit = JUDGE_MEMORY_MB << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the host's Ctrl-C is the host's
    os.write(1, b"R")  # started: no verdict's time is spent on starting the interpreter
    while True:
        try:
            (size,) = _HEADER.unpack(_read_exact(0, _HEADER.size))
            batch = pickle.loads(_read_exact(0, size))  # the host's own data: trusted
        except EOFError:
            return
        for spec, text in batch:  # one answer per verdict, as each is reached
            try:
                answer = _verdict(spec, text)
            except MemoryError:
                answer = [False, "error", "the host's check ran out of memory"]
            data = json.dumps(answer).encode()
            os.write(1, _HEADER.pack(len(data)) + data)


# ------------------------------------------------------------------------------ the host's side

# started as a package of its own (``_c3judge``: this folder), so no project module and no __init__ is imported
_BOOT = ("import sys, types\npkg = types.ModuleType('_c3judge')\npkg.__path__ = [%r]\nsys.modules['_c3judge'] = pkg\n"
         "from _c3judge.judge import serve\nserve()\n")


def spec_of(test: Any) -> tuple:
    """The judge's view of a ``sandbox.Test`` (plain data, the host's own)."""
    if test.assertion is not None:
        a = test.assertion
        return ("assert", a.check, list(a.consts), [p.source for p in a.probes])
    return ("value", test.expected, float(test.atol), float(test.rtol), [test.expr or test.entry_point or "value"])


class JudgeError(RuntimeError):
    """A verdict that ran past its time or the candidate's budget, or a judge process that died: the test fails."""


START_S = 120.0  # a judge process that has not started by then is an infrastructure error (OSError)


class _Process:
    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _BOOT % str(Path(__file__).parent)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     cwd="/", close_fds=True, start_new_session=True)
        out = self.proc.stdout.fileno()
        if not select.select([out], [], [], START_S)[0] or os.read(out, 1) != b"R":
            self.close()
            raise OSError(f"the judge process did not start within {START_S:.0f}s")

    def send(self, payload: bytes) -> None:
        try:
            self.proc.stdin.write(_HEADER.pack(len(payload)) + payload)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise JudgeError(f"the judge process died ({type(exc).__name__})") from None

    def answer(self, limit_s: float) -> list:
        """The next verdict, within ``limit_s`` (raises JudgeError)."""
        out = self.proc.stdout.fileno()
        end = time.monotonic() + limit_s
        data = b""
        want = _HEADER.size
        size = None
        while len(data) < want:
            left = end - time.monotonic()
            if left <= 0 or not select.select([out], [], [], left)[0]:
                raise JudgeError(f"the host's check took longer than {limit_s:.1f}s")
            chunk = os.read(out, want - len(data))
            if not chunk:
                raise JudgeError("the judge process died")
            data += chunk
            if size is None and len(data) == _HEADER.size:
                (size,) = _HEADER.unpack(data)
                data, want = b"", size
        return json.loads(data)

    def close(self) -> None:
        try:
            self.proc.kill()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


class JudgePool:
    """Judge processes for one sandbox pool (at most ``size`` at once), started when first needed."""

    def __init__(self, size: int = 1) -> None:
        self._idle: list[_Process] = []
        self._slots = threading.BoundedSemaphore(max(1, size))
        self._lock = threading.Lock()
        self._closed = False

    def verdict(self, test: Any, value: Any, budget: list[float]) -> tuple[bool, str, str]:
        """(passed, status, reason) of ``test`` on the runner's encoded ``value`` (JSON text or parsed); ``budget``:
        the candidate's seconds of judging left (spent here). Raises JudgeError when it is not reached in time."""
        answer = self.verdicts([(test, value)], budget)[0]
        if isinstance(answer, JudgeError):
            raise answer
        return answer

    def verdicts(self, items: list, budget: list[float]) -> list:
        """:meth:`verdict` of each ``(test, value)``, sent to one judge process at once (one round trip per
        candidate, not per test), each within ``JUDGE_TEST_S`` of the one before; a verdict past its time is a
        JudgeError in its place, its judge is killed and the rest go to a fresh one."""
        todo = [(spec_of(t), v if isinstance(v, str) else json.dumps(v)) for t, v in items]
        out: list = []
        with self._slots:
            while len(out) < len(todo):
                if budget[0] <= 0:
                    out += [JudgeError("the candidate's judging budget is spent")] * (len(todo) - len(out))
                    break
                with self._lock:
                    proc = self._idle.pop() if self._idle else None
                proc = proc or _Process()
                batch = todo[len(out):]
                try:
                    proc.send(pickle.dumps(batch, protocol=5))
                    for _ in batch:
                        start = time.monotonic()
                        try:
                            passed, status, reason = proc.answer(min(JUDGE_TEST_S, budget[0]))
                        finally:
                            budget[0] -= time.monotonic() - start
                        out.append((bool(passed), str(status), str(reason)))
                except JudgeError as exc:
                    proc.close()  # past its time or dead: never reused
                    out.append(exc)
                    continue
                except BaseException:
                    proc.close()
                    raise
                with self._lock:
                    if self._closed:
                        proc.close()
                    else:
                        self._idle.append(proc)
        return out

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for proc in idle:
            proc.close()
