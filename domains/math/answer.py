"""The math reward's answer check: the box a reader reads (the last box opener decides), read whole by the answer
language (:mod:`answer_language`: a box scores only when all of it parses into one reading) and judged against the
gold's reading, the clean values compared by math-verify's LaTeX extraction with numbers exact, in a worker process
(:class:`answer_language.client.Checker`) under one wall-clock bound per answer. What the answer language refuses
that plain math-verify accepts, and why: ``answer_language/README.md``.

:func:`score_lenient` is the paper-style check published numbers use (plain math-verify, default extraction,
on the last box, else the text after ``####``, else after "final answer", else the last line), logged beside
the strict reward as ``accuracy_lenient`` and never used as a training reward.
"""

from __future__ import annotations

import re
from typing import Sequence

from answer_language import last_box, read
from answer_language.client import DEFAULT_TIMEOUT_S, PYTHON_ENV, WORKER, MathCheckerError
from answer_language.client import Checker as _Checker

__all__ = ["DEFAULT_TIMEOUT_S", "PYTHON_ENV", "WORKER", "MathCheckerError", "last_boxed", "lenient_answer", "score",
           "score_batch", "score_lenient"]


def last_boxed(text: str) -> str | None:
    """The content of the box a reader reads (:func:`answer_language.last_box`): the last box opener decides,
    the outermost box around it is read, and an unbraced or unclosed last box means no answer (None)."""
    return last_box(text)


def _normalise(s: str) -> str:
    return re.sub(r"\s+", "", s).strip("$").rstrip(".")


def _verbatim(s: str) -> str:
    """``s`` with its outer spaces, ``$`` and a final period dropped, nothing inside touched."""
    return s.strip().strip("$").strip().rstrip(".").strip()


_CHECKER = _Checker()


def score(completion: str, gold: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> float:
    """1.0 if the box a reader reads in ``completion`` says the gold, else 0.0.

    An answer that is the gold character for character (outer spaces, ``$`` and a final period aside: never the
    spaces inside, where ``4 2`` is no 42) scores 1.0 at once; one outside the answer language
    (:func:`answer_language.read`) scores 0.0 at once; any other goes to the worker, which reads answer and gold
    with the answer language and judges the readings
    (:func:`answer_language.judge`), all within ``timeout_s``. Never raises on model
    output (an answer whose check overruns ``timeout_s``
    scores 0.0); raises :class:`MathCheckerError` when the checker process cannot start or answer."""
    try:
        answer = last_boxed(completion)
        if answer is None or not str(gold).strip():
            return 0.0
        if _verbatim(answer) == _verbatim(str(gold)):
            return 1.0
        if not read(answer).ok:  # outside the answer language: 0 here, in microseconds, without the worker
            return 0.0
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
