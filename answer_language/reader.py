"""Reading a box: wrappers, a whole-answer text or choice label, then the parser over the rest."""

from __future__ import annotations

import re

from answer_language.parser import Parser
from answer_language.readings import Item, Reading, Side
from answer_language.tokens import ParseError, Tok, prepare, tokenize
from answer_language.vocabulary import CHOICES, TEXT_COMMANDS, WRAPPERS, number_phrase

MAX_ANSWER_CHARS = 1000  # a longer boxed answer scores 0 (no gold of the bundled suites is a tenth as long)


def _unwrap(toks: list[Tok], texts: list | None = None) -> list[Tok]:
    """The tokens inside the wrappers around the whole answer ($...$, \\displaystyle, \\boxed{}, \\textbf{}, ...)."""
    for _ in range(50):
        core = [t for t in toks if t.kind != "sp"]
        if core and core[-1] == Tok("ch", "."):
            toks = toks[:len(toks) - 1 - next(i for i, t in enumerate(reversed(toks)) if t.kind != "sp")]
            continue
        if len(core) >= 2 and core[0] == Tok("ch", "$") and core[-1] == Tok("ch", "$"):
            first = toks.index(core[0])
            last = len(toks) - 1 - toks[::-1].index(core[-1])
            toks = toks[first + 1:last]
            continue
        if core and core[0].kind == "cmd" and core[0].value in ("displaystyle", "textstyle"):
            toks = toks[toks.index(core[0]) + 1:]
            continue
        if len(core) >= 3 and core[0].kind == "cmd" and core[0].value in WRAPPERS and core[1] == Tok("ch", "{") \
                and core[-1] == Tok("ch", "}"):
            start = toks.index(core[0])
            # the group opened after the command must close at the very end
            depth, close = 0, None
            for j in range(start + 1, len(toks)):
                if toks[j] == Tok("ch", "{"):
                    depth += 1
                elif toks[j] == Tok("ch", "}"):
                    depth -= 1
                    if depth == 0:
                        close = j
                        break
            end = len(toks) - 1 - next(i for i, t in enumerate(reversed(toks)) if t.kind != "sp")
            if close == end:
                inner = toks[toks.index(core[1], start) + 1:close]
                if core[0].value in ("text", "textrm", "textnormal", "mbox", "mathrm") and \
                        not _math_inside(inner):
                    return toks  # a text answer: read as text
                if texts is not None and core[0].value in ("text", "textrm", "textnormal", "mbox", "mathrm"):
                    texts.append(core[0].value)  # math inside a text command: no bare unit there
                toks = inner
                continue
        return toks
    return toks


def _math_inside(inner: list[Tok]) -> bool:
    """Whether the content of a whole-answer ``\\text{}`` is math rather than words: it has a digit or a command
    (``\\text{40}``, ``\\textbf{5 \\text{ cm}}``, ``\\textbf{\\text{even}}``); ``\\text{East}`` and ``\\text{(C)}`` are
    words."""
    return any(t.kind == "cmd" or (t.kind == "ch" and (t.value.isdigit() or t.value == "$")) for t in inner)


_CHOICE = re.compile(r"\(?([A-E])\)?")


def read(answer: str) -> Reading:
    """The reading of one boxed answer (never raises): ``reason`` says why it does not parse."""
    try:
        return _read(str(answer))
    except ParseError as exc:
        return Reading(reason=str(exc))
    except RecursionError:
        return Reading(reason="nested too deeply")
    except Exception as exc:  # noqa: BLE001 - model output never crashes the reward
        return Reading(reason=f"unreadable ({type(exc).__name__})")


def _read(answer: str) -> Reading:
    if len(answer) > MAX_ANSWER_CHARS:
        raise ParseError(f"an answer longer than {MAX_ANSWER_CHARS} characters")
    texts: list[str] = []
    toks = _answer_prefix(_unwrap(tokenize(prepare(answer)), texts))
    core = [t for t in toks if t.kind != "sp"]
    if not core:
        raise ParseError("an empty answer")
    # a whole-answer text: words, or a choice
    if core[0].kind == "cmd" and core[0].value in TEXT_COMMANDS and core[1:2] == [Tok("ch", "{")]:
        p = Parser(toks)
        p.take()
        words = p.raw_group()
        if p.done():
            words = re.sub(r"\s+", " ", words.replace("~", " ")).strip().rstrip(".").strip()
            m = _CHOICE.fullmatch(words)
            if m:
                return Reading(kind="choice", label=m.group(1))
            if not re.fullmatch(r"[A-Za-z][A-Za-z' -]*", words):
                raise ParseError(f"the text {words!r} is no answer")
            value = number_phrase(words)
            if value is not None:  # \text{nine}, \text{twenty-five}: the number it names
                return Reading(items=(Item((Side(latex=str(value)),)),))
            return Reading(kind="text", text=words.casefold())
    if len(core) == 2 and core[0].kind == "ch" and core[0].value in CHOICES and core[1] == Tok("ch", ")"):
        return Reading(kind="choice", label=core[0].value)  # C)
    # a choice label, alone or before the value: (A), \textbf{(A)}, \text{(A) }
    label, rest = _label(toks)
    if label is not None:
        if not [t for t in rest if t.kind != "sp"]:
            return Reading(kind="choice", label=label)
        toks = _unwrap(rest)
    elif len(core) == 1 and core[0].kind == "ch" and core[0].value in CHOICES:
        return Reading(kind="choice", label=core[0].value, extra={"letter": True})
    p = Parser(toks)
    p.bare_units = not texts  # \\text{9 cm}: letters inside text are no math-mode unit
    reading = p.body()
    if not p.done():
        raise ParseError("something after the answer")
    if label is not None:
        return Reading(kind="math", items=reading.items, approx=reading.approx, label=label)
    return reading


_ANSWER = re.compile(r"(?:the\s+)?(?:final\s+)?answer\s*(?::|\s+is\s*:?)", re.I)  # a colon or "is": no name


def _answer_prefix(toks: list[Tok]) -> list[Tok]:
    """The tokens after a leading ``\\text{Answer: }`` (or "Final answer:", "The answer is"), unwrapped; all of
    them when there is none. The prefix names the answer; it gives no value."""
    core = [(i, t) for i, t in enumerate(toks) if t.kind != "sp"]
    if len(core) < 3 or core[0][1].kind != "cmd" or core[0][1].value not in TEXT_COMMANDS \
            or core[1][1] != Tok("ch", "{"):
        return toks
    p = Parser(toks[core[0][0]:])
    p.take()
    try:
        words = p.raw_group().strip()
    except ParseError:
        return toks
    if not _ANSWER.fullmatch(words) or p.done():
        return toks
    return _unwrap(toks[core[0][0] + p.i:])


def _label(toks: list[Tok]) -> tuple[str | None, list[Tok]]:
    core = [(i, t) for i, t in enumerate(toks) if t.kind != "sp"]
    vals = [t.value for _, t in core]
    if len(vals) >= 3 and vals[0] == "(" and vals[1] in CHOICES and vals[2] == ")" and core[1][1].kind == "ch":
        return vals[1], toks[core[2][0] + 1:]
    if core and core[0][1].kind == "cmd" and core[0][1].value in TEXT_COMMANDS and len(core) > 1 and vals[1] == "{":
        p = Parser(toks[core[0][0]:])
        p.take()
        try:
            words = p.raw_group().strip()
        except ParseError:
            return None, toks
        m = re.fullmatch(r"\(([A-E])\)\s*:?", words)
        if m:
            return m.group(1), toks[core[0][0] + p.i:]
    return None, toks

