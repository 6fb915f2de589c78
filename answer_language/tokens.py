"""Characters to tokens: the unicode read as LaTeX, thousands separators, the token type and the parse error."""

from __future__ import annotations

import re
from dataclasses import dataclass

from answer_language.vocabulary import SPACING

# unicode read as LaTeX (or ASCII); any other non-ASCII character does not parse
UNICODE = {"\u2212": "-", "\u00d7": "\\times ", "\u00f7": "\\div ", "\u00b7": "\\cdot ",
           "\u22c5": "\\cdot ",
           "\u03c0": "\\pi ", "\u221e": "\\infty ", "\u221a": "\\sqrt ", "\u2264": "\\le ", "\u2265": "\\ge ",
           "\u00b0": "^{\\circ}", "\u00b2": "^{2}", "\u00b3": "^{3}", "\u00a0": " ", "\u2009": "\\,", "\u202f": "\\,",
           "\u2248": "\\approx ", "\u00b1": "\\pm ",
           **{chr(0xFF10 + d): str(d) for d in range(10)}, "\uff0e": ".", "\uff0c": ",", "\uff0d": "-", "\uff0b": "+",
           "\uff0f": "/"}
THOUSANDS = re.compile(r"(?<![\d.])([1-9]\d{0,2})((?:(?:\{,\}|,\\!\s*|\\[,; ]|\\thinspace\s*|~)\d{3}(?!\d))+)(?!\.?\d)")
COMMA_THOUSANDS = re.compile(r"(?<![\d.,])[1-9]\d{0,2}(?:,\d{3})+(?![\d,])")


@dataclass(frozen=True)
class Tok:
    kind: str  # "cmd" (a control sequence, without its backslash), "ch" (a character), "sp" (a space or spacing)
    value: str


def tokenize(s: str) -> list[Tok]:
    out: list[Tok] = []
    i, n = 0, len(s)
    while i < n:
        ch = s[i]
        if ch == "\\":
            m = re.match(r"[a-zA-Z]+", s[i + 1:])
            name = m.group() if m else s[i + 1:i + 2]
            i += 1 + max(len(name), 1)
            if not name:
                raise ParseError("a lone backslash")
            if name in SPACING:
                out.append(Tok("sp", " "))
            else:
                out.append(Tok("cmd", name))
        elif ch.isspace():
            out.append(Tok("sp", " "))
            i += 1
        elif ch == "~":
            out.append(Tok("sp", " "))
            i += 1
        else:
            out.append(Tok("ch", ch))
            i += 1
    return out


class ParseError(ValueError):
    """The box does not parse: why, in words."""




def detok(tok: Tok | None) -> str:
    if tok is None:
        return ""
    return ("\\" + tok.value) if tok.kind == "cmd" else tok.value


# ----- reading a box ------------------------------------------------------------------------------

def prepare(s: str) -> str:
    """The answer with its unicode read as LaTeX and its thousands separators dropped; raises :class:`ParseError`
    for a character with two readings (the en dash of a range ``1–51``, a middle dot between digits ``1·9``, a
    decimal point in some hands) or any other non-ASCII character. A thousands group never follows a leading 0:
    ``0{,}284`` and ``0,284`` are a decimal comma or a list, not 284."""
    if re.search(r"\d\s*\u00b7\s*\d", s):
        raise ParseError("a middle dot between digits (a product or a decimal point)")
    s = "".join(UNICODE.get(ch, ch) for ch in s)
    foreign = sorted({ch for ch in s if ord(ch) > 127})
    if foreign:
        raise ParseError(f"non-ASCII character(s) {foreign}")
    s = re.sub(r"\s+", " ", s)
    s = re.sub(r"\(\s*(\d+)\s*\)(?=_)", r"\1", s)  # (52)_8: a base subscript on a bracketed number
    s = THOUSANDS.sub(lambda m: m.group(1) + re.sub(r"\D", "", m.group(2)), s)
    s = COMMA_THOUSANDS.sub(lambda m: m.group().replace(",", ""), s)
    s = re.sub(r"(?<!\\)%(?=[\s}.$]*$)", r"\\%", s.rstrip())  # a bare final percent sign: the percent, not a comment
    if re.search(r"(?<!\\)%", s):
        raise ParseError("a LaTeX comment (%)")
    return s
