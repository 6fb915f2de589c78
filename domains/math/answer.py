"""Answer extraction and checking for math: the last balanced ``\\boxed{}`` / ``\\fbox{}``,
compared with the gold answer by math-verify in a worker process under a wall-clock bound."""

from __future__ import annotations

import atexit
import multiprocessing as mp
import re
import threading
from typing import Sequence

_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BRACE = re.compile(r"[{}]")
DEFAULT_TIMEOUT_S = 5.0


def last_boxed(text: str) -> str | None:
    """Content of the last balanced ``\\boxed{...}`` or ``\\fbox{...}``; None if there is none.

    Linear in the text: one pass over its braces pairs every ``{`` with its ``}``."""
    if not isinstance(text, str):
        return None
    opens = [m.end() - 1 for m in _BOX.finditer(text)]
    if not opens:
        return None
    close_of: dict[int, int] = {}
    stack: list[int] = []
    for m in _BRACE.finditer(text):
        if m.group() == "{":
            stack.append(m.start())
        elif stack:
            close_of[stack.pop()] = m.start()
    for start in reversed(opens):
        if start in close_of:
            return text[start + 1:close_of[start]]
    return None


def _normalise(s: str) -> str:
    return re.sub(r"\s+", "", s).strip("$").rstrip(".")


def _verify_worker(conn) -> None:  # runs in the child process
    from math_verify import parse, verify

    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        answer, gold = job
        try:
            g = parse(f"${gold}$")
            a = parse(f"${answer}$")
            ok = bool(g) and bool(a) and bool(verify(g, a))
        except Exception:  # noqa: BLE001 - model output must never crash the checker
            ok = False
        conn.send(ok)


class _Checker:
    """One persistent math-verify worker process; killed and restarted when a call overruns."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc = None
        self._conn = None
        atexit.register(self.close)

    def _start(self) -> None:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        self._proc = ctx.Process(target=_verify_worker, args=(child,), daemon=True)
        self._proc.start()
        self._conn = parent

    def close(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(timeout=5)
        self._proc = self._conn = None

    def equivalent(self, answer: str, gold: str, timeout_s: float) -> bool:
        with self._lock:
            if self._proc is None or not self._proc.is_alive():
                self._start()
            try:
                self._conn.send((answer, gold))
                if self._conn.poll(timeout_s + (10.0 if not getattr(self, "_warm", False) else 0.0)):
                    self._warm = True
                    return bool(self._conn.recv())
            except (OSError, EOFError, BrokenPipeError):
                pass
            self.close()  # overran or died: never leave a hung verifier behind
            return False


_CHECKER = _Checker()


def score(completion: str, gold: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> float:
    """1.0 if the last balanced box of ``completion`` is equivalent to ``gold``, else 0.0. Never raises."""
    try:
        answer = last_boxed(completion)
        if answer is None or not str(gold).strip():
            return 0.0
        if _normalise(answer) == _normalise(str(gold)):
            return 1.0
        return 1.0 if _CHECKER.equivalent(answer, str(gold), timeout_s) else 0.0
    except Exception:  # noqa: BLE001
        return 0.0


def score_batch(completions: Sequence[str], golds: Sequence[str], timeout_s: float = DEFAULT_TIMEOUT_S) -> list[float]:
    return [score(c, g, timeout_s) for c, g in zip(completions, golds)]
