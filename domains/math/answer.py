"""Answer extraction and checking for math: the box a reader reads (the last box opener decides,
:func:`domains.math.grammar.last_box`), read whole by the answer grammar (:mod:`domains.math.grammar`: a box
scores only when all of it parses into one reading) and judged against the gold, the clean values compared by
math-verify's LaTeX extraction with numbers exact, in a worker process under one wall-clock bound per answer.
What the grammar refuses that plain math-verify accepts, and why: ``domains/math/README.md``.

:func:`score_lenient` is the paper-style check published numbers use (plain math-verify, default extraction,
on the last box, else the text after ``####``, else after "final answer", else the last line), logged beside
the strict reward as ``accuracy_lenient`` and never used as a training reward.

The worker (``_checker.py``) is a plain subprocess speaking one JSON line per request over
pipes, so checking works the same from a guarded or unguarded script, a notebook or a REPL
(nothing re-imports the caller's ``__main__``). Its interpreter is ``sys.executable``, or
the one named by the environment variable ``C3_MATH_CHECKER_PYTHON``.

Failures are split the way the code sandbox splits them: an answer whose check overruns the
bound (or kills the worker) scores 0 and the worker is restarted; a worker that cannot
start, or cannot check ``1 == 1`` at start, raises :class:`MathCheckerError`, because an
infrastructure failure must never pass for a wrong answer.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Sequence

from .grammar import last_box

DEFAULT_TIMEOUT_S = 5.0
START_TIMEOUT_S = 120.0  # import math-verify and check 1 == 1 (seconds on a loaded machine; generous)
PROBE_TIMEOUT_S = 5.0  # after an overrun, a fresh worker must check 1 == 1 within max(timeout, this)
PYTHON_ENV = "C3_MATH_CHECKER_PYTHON"  # interpreter for the checker worker (default: sys.executable)
WORKER = Path(__file__).with_name("_checker.py")


class MathCheckerError(RuntimeError):
    """The math-verify checker process could not start or answer: an infrastructure error, not a wrong answer."""


def last_boxed(text: str) -> str | None:
    """The content of the box a reader reads (:func:`domains.math.grammar.last_box`): the last box opener decides,
    the outermost box around it is read, and an unbraced or unclosed last box means no answer (None)."""
    return last_box(text)


def _normalise(s: str) -> str:
    return re.sub(r"\s+", "", s).strip("$").rstrip(".")


class _Checker:
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


_CHECKER = _Checker()


def score(completion: str, gold: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> float:
    """1.0 if the box a reader reads in ``completion`` says the gold, else 0.0.

    An answer identical to the gold (spaces, ``$`` and a final period aside) scores 1.0 at once; any
    other goes to the worker, which reads answer and gold with the answer grammar (:func:`domains.math.grammar.read`)
    and judges the readings (:func:`domains.math.grammar.judge`), all within ``timeout_s``. Never raises on model
    output (an answer whose check overruns ``timeout_s``
    scores 0.0); raises :class:`MathCheckerError` when the checker process cannot start or answer."""
    try:
        answer = last_boxed(completion)
        if answer is None or not str(gold).strip():
            return 0.0
        if _normalise(answer) == _normalise(str(gold)):
            return 1.0
    except Exception:  # noqa: BLE001 - malformed model output scores 0
        return 0.0
    return 1.0 if _CHECKER.equivalent(answer, str(gold), timeout_s) else 0.0


_HASHES = re.compile(r"####\s*(.+)")
_FINAL = re.compile(r"final answer\s*(?:is)?\s*[:：]?\s*(.+)", re.IGNORECASE)


def lenient_answer(completion: str) -> str | None:
    """The paper-style final answer of ``completion`` (the C3 reference code's order): the box read,
    else what follows the last ``####``, else what follows the last "final answer", else the last non-empty line."""
    if not isinstance(completion, str) or not completion.strip():
        return None
    boxed = last_boxed(completion)
    if boxed is not None:
        return boxed
    for pattern in (_HASHES, _FINAL):
        found = pattern.findall(completion)
        if found:
            return found[-1].strip()
    return [line for line in completion.splitlines() if line.strip()][-1].strip()


def score_lenient(completion: str, gold: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> float:
    """1.0 if plain math-verify (default extraction, number fallback included, no screen) finds
    :func:`lenient_answer` equivalent to ``gold``: how published tables score, for comparison only."""
    try:
        answer = lenient_answer(completion)
        if answer is None or not str(gold).strip():
            return 0.0
    except Exception:  # noqa: BLE001
        return 0.0
    return 1.0 if _CHECKER.equivalent(answer, str(gold), timeout_s, mode="lenient") else 0.0


def score_batch(completions: Sequence[str], golds: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S) -> list[float]:
    return [score(c, g, timeout_s) for c, g in zip(completions, golds)]
