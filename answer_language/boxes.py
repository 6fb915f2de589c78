"""Which box a reader reads: the last box opener decides."""

from __future__ import annotations

import re

BOX_COMMANDS = {"boxed": 0, "fbox": 0, "framebox": 0, "colorbox": 1, "fcolorbox": 2, "bbox": 0}
_BOX_OPENER = re.compile(r"\\(%s)(?![a-zA-Z])" % "|".join(sorted(BOX_COMMANDS, key=len, reverse=True)))


def _braces(text: str) -> dict[int, int]:
    """Every unescaped ``{`` of ``text`` paired with its ``}`` (unclosed ones absent); linear in the text."""
    close_of: dict[int, int] = {}
    stack: list[int] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            close_of[stack.pop()] = i
        i += 1
    return close_of


def _box_span(text: str, m: re.Match, close_of: dict[int, int]) -> tuple[int, int, bool]:
    """(content start, content end, closed) of the box opened at ``m``; an unbraced or unclosed box is not closed
    and runs to the end of the text."""
    i, n = m.end(), len(text)
    args = BOX_COMMANDS[m.group(1)]

    def skip_space(j: int) -> int:
        while j < n and text[j].isspace():
            j += 1
        return j

    i = skip_space(i)
    while i < n and text[i] == "[":  # \bbox[options], \framebox[width][pos]
        j = text.find("]", i)
        if j < 0:
            return i, n, False
        i = skip_space(j + 1)
    for _ in range(args):  # \colorbox{colour}, \fcolorbox{frame}{background}
        if i >= n or text[i] != "{" or i not in close_of:
            return i, n, False
        i = skip_space(close_of[i] + 1)
    if i >= n or text[i] != "{" or i not in close_of:
        return i, n, False
    return i + 1, close_of[i], True


def last_box(text: str) -> str | None:
    """The content of the box a reader reads: the **last** box opener (``\\boxed``, ``\\fbox``, ``\\framebox``,
    ``\\colorbox``, ``\\fcolorbox``, ``\\bbox``, braced or not) decides. When it lies inside an earlier box, the
    outermost box around it is read (``\\boxed{\\boxed{40} 12345}`` gives ``\\boxed{40} 12345``, which does not
    parse); when the box read is unbraced or never closed, there is no answer (None): an earlier box never counts
    once a later one is opened."""
    if not isinstance(text, str):
        return None
    openers = list(_BOX_OPENER.finditer(text))
    if not openers:
        return None
    close_of = _braces(text)
    spans = [(m.start(), *_box_span(text, m, close_of)) for m in openers]
    last = spans[-1][0]
    # the first (outermost) box that holds the last opener
    outer = next(s for s in spans if s[0] <= last <= s[2] or s[0] == last)
    start, end, closed = outer[1], outer[2], outer[3]
    return text[start:end] if closed else None


