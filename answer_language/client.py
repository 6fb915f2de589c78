"""The driver of the math-verify worker (:mod:`answer_language.worker`): one persistent plain subprocess speaking one
JSON line per request over pipes, so checking works the same from a guarded or unguarded script, a notebook or a
REPL (nothing re-imports the caller's ``__main__``). Its interpreter is ``sys.executable``, or the one named by
the environment variable ``C3_MATH_CHECKER_PYTHON``.

Failures are split the way the code sandbox splits them: an answer whose check overruns the bound (or kills the
worker) scores 0 and the worker is restarted; a worker that cannot start, or cannot check ``1 == 1`` at start,
raises :class:`MathCheckerError`, because an infrastructure failure must never pass for a wrong answer.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

DEFAULT_TIMEOUT_S = 5.0
START_TIMEOUT_S = 120.0  # import math-verify and check 1 == 1 (seconds on a loaded machine; generous)
PROBE_TIMEOUT_S = 5.0  # after an overrun, a fresh worker must check 1 == 1 within max(timeout, this)
PYTHON_ENV = "C3_MATH_CHECKER_PYTHON"  # interpreter for the checker worker (default: sys.executable)
WORKER = Path(__file__).with_name("worker.py")


class MathCheckerError(RuntimeError):
    """The math-verify checker process could not start or answer: an infrastructure error, not a wrong answer."""


class Checker:
    """One persistent math-verify worker process, killed and replaced when a check overruns or kills it.

    ``python``: the worker's interpreter (default: ``$C3_MATH_CHECKER_PYTHON``, else ``sys.executable``);
    ``start_timeout_s``: how long a new worker may take to report ready; ``probe_timeout_s``: the least
    time a fresh worker gets to check ``1 == 1`` after an overrun."""

    def __init__(self, python: str | None = None, start_timeout_s: float = START_TIMEOUT_S,
                 probe_timeout_s: float = PROBE_TIMEOUT_S) -> None:
        self.python = python
        self.start_timeout_s = start_timeout_s
        self.probe_timeout_s = probe_timeout_s
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._err = None  # the worker's stderr, a temporary file read only to explain a failure
        self._buf = b""
        self._owner = os.getpid()  # a forked child must not talk to its parent's worker
        atexit.register(self.close)

    def interpreter(self) -> str:
        return self.python or os.environ.get(PYTHON_ENV) or sys.executable

    def _start(self) -> None:
        python = self.interpreter()
        fix = (f"set {PYTHON_ENV} to a Python interpreter that has math-verify installed "
               f"(pip install 'math-verify>=0.7')")
        if not python:
            raise MathCheckerError(f"math checker: no Python interpreter to run {WORKER.name} "
                                   f"(sys.executable is empty); {fix}")
        self._err = tempfile.TemporaryFile()
        self._buf = b""
        try:
            self._proc = subprocess.Popen([python, "-u", str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=self._err, close_fds=True, start_new_session=True)
        except OSError as exc:
            self.close()
            raise MathCheckerError(f"math checker: cannot run {python!r}: {exc}; {fix}") from exc
        self._owner = os.getpid()
        reply = self._read(self.start_timeout_s)
        if reply != "READY":
            why = (f"did not report ready within {self.start_timeout_s:g} s" if reply is None
                   else f"stopped before reporting ready (exit {self._exit_code()})" if reply is EOFError
                   else f"sent {reply!r} instead of READY")
            detail = self._stderr_tail()
            self.close()
            raise MathCheckerError(f"math checker ({python} {WORKER.name}) {why}"
                                   f"{': ' + detail if detail else ''}; {fix}")

    def _read(self, timeout_s: float):
        """The next JSON value from the worker; None on timeout, ``EOFError`` (the class) when it is gone."""
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return EOFError
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            return json.loads(line)
        except ValueError:
            return line.decode("utf-8", "replace")

    def _exit_code(self) -> int | None:
        """The exit code of a worker that closed its output (it has a moment to exit)."""
        try:
            return self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return None

    def _stderr_tail(self, limit: int = 800) -> str:
        if self._err is None:
            return ""
        try:
            self._err.seek(0)
            text = self._err.read().decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""
        return text[-limit:]

    def close(self) -> None:
        proc, err = self._proc, self._err
        self._proc = self._err = None
        self._buf = b""
        if proc is not None and self._owner == os.getpid() and proc.returncode is None:  # never a fork parent's worker
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the worker leads its own session: take anything it started too
            except OSError:
                proc.kill()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        for stream in (proc.stdin, proc.stdout) if proc is not None else ():
            try:
                stream.close()
            except OSError:
                pass
        if err is not None:
            err.close()

    def _ask(self, answer: str, gold: str, timeout_s: float, mode: str = "strict"):
        """Send one request and read its reply (see :meth:`_read`); ``BrokenPipeError`` (the class) when
        the request could not even be sent."""
        try:
            self._proc.stdin.write((json.dumps([mode, answer, gold]) + "\n").encode())
            self._proc.stdin.flush()
        except OSError:
            return BrokenPipeError
        return self._read(timeout_s)

    def equivalent(self, answer: str, gold: str, timeout_s: float, mode: str = "strict") -> bool:
        """Whether ``answer`` parses whole and says ``gold`` (``mode`` "strict"; "lenient": plain math-verify
        on the text); False when the check overruns ``timeout_s`` or kills
        the worker. Raises :class:`MathCheckerError` when no worker can start, or a
        fresh one cannot check ``1 == 1`` in time after such a failure (the checker itself does not answer)."""
        with self._lock:
            # inherited through fork: let go of the parent's worker
            if self._proc is not None and self._owner != os.getpid():
                self.close()
            if self._proc is None or self._proc.poll() is not None:
                self.close()
                self._start()
            reply = self._ask(answer, gold, timeout_s, mode)
            if reply is BrokenPipeError:  # the idle worker had gone: one new worker, one resend
                self.close()
                self._start()
                reply = self._ask(answer, gold, timeout_s, mode)
            if isinstance(reply, bool):
                return reply
            if reply not in (None, EOFError, BrokenPipeError):
                detail = self._stderr_tail()
                self.close()
                raise MathCheckerError(f"math checker sent {reply!r} instead of "
                                       f"true/false{': ' + detail if detail else ''}")
            # this answer overran (None) or killed the worker: it scores 0, once a fresh worker shows it answers
            self.close()
            self._start()
            bound = max(timeout_s, self.probe_timeout_s)
            probe = self._ask("1", "1", bound)
            if probe is not True:
                detail = self._stderr_tail()
                self.close()
                raise MathCheckerError("math checker does not answer: a fresh worker did not confirm 1 == 1 within "
                                       f"{bound:g} s (reply {probe!r}){': ' + detail if detail else ''}; the machine "
                                       f"may be overloaded, or math-verify broken in {self.interpreter()}")
            return False
