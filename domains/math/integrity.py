"""The integrity screen in front of math-verify: a boxed answer that holds the gold next to anything that
could be a second answer, a contradiction or a hidden comment scores 0, whatever math-verify would say.

math-verify is built to be lenient with format, and an RL policy exploits every leniency that lets a
wrong value sit beside the right one: it takes the right-hand side of ``12345 = 40``, drops what follows
``\\approx``, reads the inner box of ``\\boxed{\\boxed{40} 12345}``, drops ``\\text{}`` (digits included),
ignores commands it does not know (``\\cancel{12345} 40``, ``\\tag``, ``\\label``, ``\\to``), divides
``1800\\%`` by 100, drops base subscripts and units, and accepts decimals within 1e-6. :func:`screen`
reads the answer (and, the same way, the gold) before the checker and either rejects it with a reason or
returns the claims that must each be equivalent to the gold. The rules, strictest reading first:

* one answer per box: no nested ``\\boxed``/``\\fbox``, no ``$`` inside (``12345 $ or $ 40``), no line
  break ``\\\\``, no ``;``, ``&``, ``?``, ``:``, ``#``, ``"`` or bare ``%`` (a LaTeX comment), no ``...`` -
  unless the gold itself has them;
* every command must be a known-safe one (fractions, roots, functions, Greek letters, spacing,
  ``\\left``/``\\right``, ``\\cdot``, ``\\pi``, ``\\infty``, ``\\cup``, ...) or appear in the gold:
  ``\\approx``, ``\\to``, ``\\implies``, ``\\pm``, ``\\dots``, ``\\cancel``, ``\\tag``, ``\\label``,
  ``\\lim`` ... are refused otherwise; ``<``, ``>``, ``\\le``, ``\\ge``, ``\\in`` only when the gold is a
  relation or an interval;
* text (``\\text``, ``\\mathrm``, ``\\mbox``, ``\\textbf``, ...): when the gold has text, the answer's text
  must be the same (case and spacing aside), so ``5 \\text{ m}`` fails for ``5 \\text{ cm}``; when the gold
  has none, answer text may only be a short unit-like phrase of letters (``\\text{ dollars}``), never
  digits, punctuation or a connective (``or``, ``not``, ``actually``, ``answer`` ...). Connectives written
  as bare letters (``40 or 12345``) are refused too;
* equations: ``=`` inside brackets (``-(x=5)``) is refused unless the gold has one there too. When the
  gold is not an equation, every side of the answer's ``=`` chain that is not a variable (``x``, ``a_1``,
  ``f(x)``, ``\\theta``) is a claim that must equal the gold, so ``x = 5`` and ``\\frac{10}{2} = 5`` pass
  for 5 and ``12345 = 40`` fails for 40; when the gold is an equation the answer may not have more ``=``;
* numeric subscripts (bases): each must be one of the gold's (or ``10``): ``52_80`` fails for ``52_8``;
* ``\\%`` is dropped from answer and gold alike, so ``18\\%`` passes for 18 and ``1800\\%`` does not;
* characters: a short list of unicode signs is read as their LaTeX (``−`` ``×`` ``÷`` ``·`` ``π`` ``∞`` ``√``
  ``≤`` ``≥`` ``°``, and a full-width digit or sign as its ASCII form); any other non-ASCII character the gold
  does not have is refused (``12345 → 40``, ``40 或 12345``, a zero-width space, a Cyrillic ``о``), and so is
  an answer longer than :data:`MAX_ANSWER_CHARS`, which keeps the screen's cost bounded;
* the worker (``_checker.py``) parses with math-verify's LaTeX extraction only: its fallback that reads a bare
  number out of unparseable text (``12345 ( 40`` read as 40, ``45²`` as 45) is never used;
* the worker (``_checker.py``) adds the last rule: a decimal answer to a gold written without decimals
  must be *exactly* equal (``0.5`` for ``\\frac12``, ``\\$18.00`` for 18), never merely within
  math-verify's 6-digit rounding (``3.14159265`` for ``\\pi``, ``0.333333`` for ``\\frac13``).

Leniencies kept (MATH's own grading conventions, documented here on purpose): a variable assignment
``x = g`` for ``g``; the bare right-hand side ``5`` for gold ``x = 5``; units omitted (``5`` for
``5 \\text{ cm}``) or added as a word (``18 \\text{ dollars}``); ``g\\%`` for ``g`` and ``g`` for
``g\\%``; ``\\$``; ``\\dfrac``/``\\tfrac``; thousands written ``1,000``, ``1{,}000`` or ``70\\,000``; a
base subscript omitted (``52`` for ``52_8``); a whole-answer wrapper (``\\textbf{40}``, ``\\text{40}``,
``$40$``, ``\\displaystyle``); brackets around a single value (``(40)``, ``\\{40\\}``); any expression
math-verify proves equal (``\\sqrt{1600}`` for 40); units in LaTeX style (``9 \\mathrm{~cm}``); a bare
trailing ``%`` (``10%``); a descriptive left side without digits (``m+n = 204``, ``AB = 5``,
``\\text{Total} = 18``); ``{a \\over b}``; ``\\mathrm{}`` for ``\\text{}`` and the case of a text answer
(``\\text{East}`` for ``\\text{east}``); thousands written ``11,\\! 111,\\! 100`` or ``11,111,100``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GREEK = ("alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu xi rho sigma "
         "tau upsilon phi varphi chi psi omega Gamma Delta Theta Lambda Xi Pi Sigma Phi Psi Omega").split()
SAFE = set(GREEK) | set(
    "frac dfrac tfrac cfrac sqrt cdot times div pi infty cup cap emptyset varnothing left right big Big bigg Bigg "
    "bigl bigr Bigl Bigr sin cos tan cot sec csc arcsin arccos arctan sinh cosh tanh log ln exp binom dbinom tbinom "
    "circ degree prime quad qquad displaystyle textstyle".split()) | {",", ";", ":", "!", " ", "%", "$", "{", "}"}
TEXT = ("text", "textrm", "textbf", "textit", "textnormal", "textsf", "mbox", "mathrm", "mathit", "mathbf", "mathsf")
INEQUALITY = {"le", "leq", "ge", "geq", "lt", "gt", "in"}
BOXES = {"boxed", "fbox"}
WRAPPERS = ("boxed", "fbox", "textbf", "mathbf", "text", "textrm", "mbox", "textnormal")
CONNECTIVES = set("or and not nor but either neither wrong actually maybe perhaps possibly else instead also than "
                  "is are equals equal approx approximately about roughly nearly around answer final correct incorrect "
                  "false true otherwise alternatively".split())
FORBIDDEN_CHARS = ";&?:#\"%@"
MAX_ANSWER_CHARS = 1000  # a longer boxed answer scores 0 (no gold of the bundled suites is a tenth as long)
# unicode read as LaTeX (or ASCII); any other non-ASCII character in an answer must be in the gold
UNICODE = {"\u2212": "-", "\u2013": "-", "\u00d7": "\\times ", "\u00f7": "\\div ", "\u00b7": "\\cdot ", "\u22c5": "\\cdot ",
           "\u03c0": "\\pi ", "\u221e": "\\infty ", "\u221a": "\\sqrt ", "\u2264": "\\le ", "\u2265": "\\ge ",
           "\u00b0": "^{\\circ}", **{chr(0xFF10 + d): str(d) for d in range(10)}, "\uff0e": ".", "\uff0c": ",", "\uff0d": "-",
           "\uff0b": "+", "\uff0f": "/"}
VARIABLE = re.compile(r"(?:[A-Za-z]|\\(?:%s))(?:_\{?[A-Za-z0-9]+\}?)?(?:'|\^\{?\\prime\}?)*(?:\([A-Za-z0-9, ]*\))?" % "|".join(GREEK))
_COMMAND = re.compile(r"\\([a-zA-Z]+|.)")
_TEXT = re.compile(r"\\(%s)\s*\{" % "|".join(TEXT))
_THOUSANDS = re.compile(r"(?<=\d)(?:\\[,;: ]|~|\\thinspace\s*)(?=\d{3}(?!\d))")
_SUBSCRIPT = re.compile(r"_\s*\{?\s*(\d+)")
_COMMA_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\s*\d{3})+(?:\.\d+)?")
_OVER = re.compile(r"\{([^{}]*)\\over(?![a-zA-Z])([^{}]*)\}")


@dataclass(frozen=True)
class Screen:
    """The screen's verdict: ``reason`` (why the answer scores 0) or the ``claims`` that must each be
    equivalent to ``gold`` (both as they go to the checker)."""

    claims: tuple[str, ...] = ()
    gold: str = ""
    reason: str | None = None
    same: bool = False  # the answer is the gold written another way (text case, \\mathrm for \\text, spacing): no check needed


def _close(s: str, i: int) -> int:
    """Index of the ``}`` closing the ``{`` at ``i`` (-1 when unbalanced)."""
    depth = 0
    for j in range(i, len(s)):
        if s[j] == "{" and (j == 0 or s[j - 1] != "\\"):
            depth += 1
        elif s[j] == "}" and (j == 0 or s[j - 1] != "\\"):
            depth -= 1
            if depth == 0:
                return j
    return -1


def _unwrap(s: str) -> str:
    """Strip what wraps the whole answer: spaces, ``$...$``, ``\\displaystyle``, ``\\boxed{}``/``\\textbf{}``/``\\text{}``..."""
    while True:
        s = s.strip().rstrip(".").strip()
        if len(s) > 1 and s[0] == s[-1] == "$" and "$" not in s[1:-1].replace("\\$", ""):
            s = s[1:-1]
            continue
        m = re.match(r"\\(?:displaystyle|textstyle)(?![a-zA-Z])", s)
        if m:
            s = s[m.end():]
            continue
        m = re.match(r"\\(%s)\s*\{" % "|".join(WRAPPERS), s)
        if m and _close(s, m.end() - 1) == len(s) - 1:
            s = s[m.end():-1]
            continue
        return s


def _prepare(s: str) -> str:
    s = _unwrap(s).replace("\\!", "")
    s = re.sub(r"(?<!\\)%\s*$", r"\\%", s)  # a bare trailing percent sign: the percent, not a comment
    for _ in range(8):  # {a \over b}: \frac{a}{b}, innermost first
        s, n = _OVER.subn(r"\\frac{\1}{\2}", s)
        if not n:
            break
    s = "=".join(re.sub(r",\s*", "", side) if _COMMA_THOUSANDS.fullmatch(side.strip()) else side for side in s.split("="))
    return _THOUSANDS.sub("", s)


def _unicode(s: str) -> str:
    return "".join(UNICODE.get(ch, ch) for ch in s)


def _canonical(s: str) -> str:
    """``s`` with text commands spelled ``\\text``, their contents case-folded, and no spacing: two answers with
    the same canonical form are the same answer."""
    s = re.sub(r"\\(%s)\s*\{" % "|".join(TEXT), r"\\text{", s)
    s = re.sub(r"\\text\{([^{}]*)\}", lambda m: "\\text{" + re.sub(r"[\s~]+", "", m.group(1)).casefold() + "}", s)
    return re.sub(r"\s+|\\[,;: ]", "", s)


def _texts(s: str) -> tuple[list[str], str]:
    """The contents of the text commands of ``s`` (normalised) and ``s`` without them."""
    texts, rest, pos = [], [], 0
    for m in _TEXT.finditer(s):
        if m.start() < pos:
            continue
        end = _close(s, m.end() - 1)
        if end < 0:
            break
        texts.append(re.sub(r"[\s~]+", " ", s[m.end():end]).strip().casefold())
        rest.append(s[pos:m.start()])
        pos = end + 1
    rest.append(s[pos:])
    return [t for t in texts if t], " ".join(rest)


def _commands(s: str) -> set[str]:
    return {m.group(1) for m in _COMMAND.finditer(s)}


def _bare(s: str) -> str:
    """``s`` without commands (``\\frac``, ``\\,``, ``\\%``): its plain characters."""
    return _COMMAND.sub(" ", s)


def _split_top(s: str, sep: str = "=") -> tuple[list[str], bool]:
    """``s`` split at ``sep`` outside brackets, and whether ``sep`` also occurs inside brackets."""
    parts, depth, start, nested = [], 0, 0, False
    for i, ch in enumerate(s):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif ch == sep:
            if depth:
                nested = True
            else:
                parts.append(s[start:i])
                start = i + 1
    parts.append(s[start:])
    return parts, nested


def _interval_like(g: str) -> bool:
    return bool(re.search(r"\\infty|\\cup|\\cap", g)) or bool(re.fullmatch(r"\s*(?:\\left)?[\[(].*,.*(?:\\right)?[\])]\s*", g))


def _unit_like(text: str) -> bool:
    words = text.split()
    return bool(re.fullmatch(r"[a-z][a-z .'/-]*", text)) and len(words) <= 3 and not (set(words) & CONNECTIVES)


def screen(answer: str, gold: str) -> Screen:
    """Read a boxed ``answer`` against ``gold`` (see the module docstring); never raises on model output."""
    answer, gold = _unicode(str(answer)), _unicode(str(gold))
    if len(answer) > MAX_ANSWER_CHARS:
        return Screen(reason=f"an answer longer than {MAX_ANSWER_CHARS} characters")
    foreign = sorted({ch for ch in answer if ord(ch) > 127} - set(gold))
    if foreign:
        return Screen(reason=f"non-ASCII character(s) {foreign} not in the gold")
    answer, gold = re.sub(r"\s+", " ", answer), re.sub(r"\s+", " ", gold)  # a line break is a space (LaTeX's reading), never a separator the parser skips
    a, g = _prepare(answer), _prepare(gold)
    if not a:
        return Screen(reason="empty answer")
    if (_canonical(a) == _canonical(g) or _canonical(answer.strip().rstrip(".")) == _canonical(gold.strip().rstrip("."))) \
            and not _commands(a) & BOXES:
        return Screen(claims=(a,), gold=g, same=True)
    g_cmds = _commands(g)
    a_texts, a_rest = _texts(a)
    g_texts, g_rest = _texts(g)
    # one answer per box
    if _commands(a) & BOXES:
        return Screen(reason="a box inside the box")
    if re.search(r"(?<!\\)\$", a) and not re.search(r"(?<!\\)\$", g):
        return Screen(reason="$ inside the box")
    bare_a, bare_g = _bare(a_rest), _bare(g_rest)
    relation_ok = _interval_like(g) or bool(re.search(r"[<>]", bare_g) or g_cmds & INEQUALITY)
    for ch in FORBIDDEN_CHARS + "<>":
        if ch in bare_a and ch not in bare_g and not (ch in "<>" and relation_ok):
            return Screen(reason=f"{ch!r} in the answer, not in the gold")
    if "..." in bare_a and "..." not in bare_g:
        return Screen(reason="an ellipsis")
    if len(_split_top(a_rest, ",")[0]) > 1 and "," not in g_rest:
        return Screen(reason="a list (a top-level ',') for a gold that is one value")
    # commands
    for name in _commands(a_rest):
        if name in SAFE or name in g_cmds or (name in INEQUALITY and relation_ok):
            continue
        return Screen(reason=f"command \\{name} (not known to be safe, not in the gold)")
    # text and words
    if a_texts:
        if g_texts:
            if sorted(a_texts) != sorted(g_texts):
                return Screen(reason=f"text {a_texts} differs from the gold's {g_texts}")
        elif not all(_unit_like(t) for t in a_texts):
            return Screen(reason=f"text {a_texts} is not a unit")
    g_words = {w.casefold() for w in re.findall(r"[A-Za-z]+", g)}
    for word in re.findall(r"[A-Za-z]+", bare_a):
        if word.casefold() in CONNECTIVES and word.casefold() not in g_words:
            return Screen(reason=f"the word {word!r}")
    # equations
    a_sides, a_nested = _split_top(a_rest)
    g_sides, g_nested = _split_top(g_rest)
    if a_nested and not g_nested:
        return Screen(reason="'=' inside brackets")
    if len(g_sides) == 1 and len(a_sides) > 1:
        sides = _split_top(a)[0]
        if any(not s.strip() for s in sides):
            return Screen(reason="an empty side of '='")
        # a side that is a variable, or (before the last) a description without digits (m+n, AB, \text{Total}), claims nothing
        claims = [s.strip() for k, s in enumerate(sides) if not (VARIABLE.fullmatch(s.strip())
                                                                 or (k < len(sides) - 1 and not re.search(r"\d", s)))]
        if not claims and VARIABLE.fullmatch(g.strip()):  # a variable gold (x = m for m): its side is the claim
            claims = [sides[-1].strip()]
        if not claims:
            return Screen(reason="only variables")
    elif len(a_sides) > len(g_sides):
        return Screen(reason="more '=' than the gold")
    else:
        claims = [a]
    # base subscripts
    allowed = set(_SUBSCRIPT.findall(g_rest)) | {"10"}
    for c in claims:
        extra = set(_SUBSCRIPT.findall(_texts(c)[1])) - allowed
        if extra:
            return Screen(reason=f"subscript {sorted(extra)} not in the gold")

    def strip_percent(s: str) -> str:
        s = re.sub(r"\\%", "", s).strip()
        return re.sub(r",\s*", "", s) if _COMMA_THOUSANDS.fullmatch(s) else s  # a side written 11,111,100

    return Screen(claims=tuple(strip_percent(c) for c in claims), gold=strip_percent(g))
