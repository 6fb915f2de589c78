"""The answer language of the math reward: what a boxed answer may be, parsed whole into one reading.

The reward reads a box only when the **whole** box parses, by the grammar below, into one reading; anything
left over (a word, a second number, a mark, a command the grammar does not know) and the box scores 0. This
replaces a screen of refusal rules: a form nobody listed fails by construction, because only what the grammar
describes is read. The module is plain Python (no dependency); the checker worker loads it by path.

Grammar (spaces and the spacing commands ``\\, \\; \\: \\! \\quad ~`` are skipped between tokens, never inside
a number)::

    box      := wrapper* [label] body ["."]          wrapper: $..$, \\displaystyle, \\boxed{}, \\textbf{}, \\text{},
                                                       \\mathbf{}, \\boldsymbol{}, \\mbox{}, \\mathrm{} around all of it
    body     := text | label | ["\\approx"] item (sep item)*     sep: "," | \\text{ or } | \\text{ and }
    item     := side (rel side)*                      rel: = \\in < > \\le \\ge (\\approx after a name)
    side     := ["\\$"] expr [multiplier] [unit] [percent]
    expr     := the usual LaTeX arithmetic over numbers, letters, Greek, \\pi, \\infty, i, e, \\frac, \\sqrt,
                \\binom, ^, _, functions (\\sin ... \\ln, \\log_b, \\lim_{x \\to a}), brackets, tuples, intervals,
                sets, \\cup, \\pm, pmatrix/bmatrix, primes on letters, decorations (\\dot \\bar \\vec ...)

* **number**: digits with an optional decimal part; thousands written ``1,000`` (no space after the comma),
  ``1{,}000``, ``1,\\!000``, ``70\\,000`` or ``1\\ 000`` (3-digit groups only); a base subscript (``52_8``, digits
  valid in the base); a mixed number ``1\\frac{4}{5}`` is 1 + 4/5. Two numbers side by side (``12345 40``) are
  not a product: they do not parse.
* **unit**: a word or symbol of the unit vocabulary :data:`UNITS` (SI symbols with their prefixes, their names
  and the customary units, generated below; ``square``/``cubic``/``^2``/``²``, ``per`` and ``/``), in ``\\text``,
  ``\\mathrm``, ``\\mbox`` ...; ``^\\circ``, ``\\degree``, ``°`` and ``\\text{degrees}`` are degrees; ``\\$`` is the
  dollar. Never "any short word": ``\\text{ squared}``, ``\\text{ no}``, ``\\text{ vs twelve}`` do not parse.
* **multiplier**: ``thousand``, ``million``, ``billion``, ``hundred``, ``dozen``, ``k``, ``M`` (a word in text after
  a number) multiply the value: ``3 \\text{ thousand}`` is 3000.
* **percent**: ``\\%``, a final bare ``%`` or ``\\text{ percent}``, only at the end of a side: the value is
  compared as the gold means it (:func:`percent_readings`).
* **equations**: a side that is a *name* (letters, subscripts, primes, ``f(x)``, ``\\angle A``, ``\\overline{AB}``,
  a ``\\text{}`` word that is no number word, and sums or products of names: ``x_1+x_2``, ``m+n``, ``AB``) claims
  nothing; every other side is a claim that must equal the gold. ``\\pi = 3``, ``\\text{twelve} = 3`` and
  ``12345 = 40`` claim ``\\pi``, 12 and 12345.
* **text**: a ``\\text{}`` (or ``\\mathrm{}`` ...) answer of words; a choice label ``(A)``-``(E)``, alone or in
  front of the value (``\\textbf{(A) }12``).

:func:`read` returns a :class:`Reading` (``reason`` set when the box does not parse); :func:`last_box` picks the
box a reader reads (the last box opener decides). The comparison with the gold (math-verify, exact numbers)
runs in ``_checker.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_ANSWER_CHARS = 1000  # a longer boxed answer scores 0 (no gold of the bundled suites is a tenth as long)

# ----- box selection ------------------------------------------------------------------------------

# box command: the braced arguments before its content (\colorbox{colour}{...}, \fcolorbox{frame}{background}{...})
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


# ----- vocabulary ---------------------------------------------------------------------------------

GREEK = ("alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu xi rho varrho "
         "sigma tau upsilon phi varphi chi psi omega Gamma Delta Theta Lambda Xi Pi Sigma Upsilon Phi Psi "
         "Omega").split()
SYMBOLS = set(GREEK) | {"pi", "infty", "hbar", "ell", "emptyset", "varnothing", "odot", "partial"}
FUNCTIONS = set("sin cos tan cot sec csc arcsin arccos arctan sinh cosh tanh coth log ln lg exp det max min gcd lcm"
                .split())
FRACTIONS = {"frac", "dfrac", "tfrac", "cfrac"}
BINOMS = {"binom", "dbinom", "tbinom"}
DECORATIONS = {"dot", "ddot", "hat", "bar", "vec", "tilde", "overline", "widehat", "widetilde", "mathbf", "boldsymbol",
               "bm"}
# text commands (\operatorname is none: a value hidden in an operator name does not parse)
TEXT_COMMANDS = {"text", "textrm", "textnormal", "textbf", "textit", "textsf", "mbox", "mathrm", "mathit", "mathsf"}
WRAPPERS = {"boxed", "fbox", "textbf", "mathbf", "boldsymbol", "bm", "text", "textrm", "textnormal", "mbox", "mathrm",
            "displaystyle", "textstyle"}
SPACING = {",", ";", ":", "!", " ", "quad", "qquad", "thinspace", "enspace", "medspace", "thickspace", "negthinspace"}
BINARY = {"+": "+", "-": "-", "pm": "\\pm", "mp": "\\mp", "cup": "\\cup", "cap": "\\cap", "setminus": "\\setminus"}
PRODUCTS = {"*": "*", "/": "/", "cdot": "\\cdot", "times": "\\times", "div": "\\div"}
RELATIONS = {"=": "=", "in": "\\in", "<": "<", ">": ">", "le": "\\le", "leq": "\\le", "ge": "\\ge", "geq": "\\ge",
             "lt": "<", "gt": ">", "approx": "\\approx"}
MATRICES = {"pmatrix", "bmatrix", "matrix"}
CHOICES = "ABCDE"

NUMBER_WORDS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve "
                                           "thirteen fourteen fifteen sixteen seventeen eighteen nineteen "
                                           "twenty".split())}
NUMBER_WORDS.update({"thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90,
                     "hundred": 100, "thousand": 1000, "million": 10 ** 6, "billion": 10 ** 9, "half": 0.5,
                     "dozen": 12})
MULTIPLIERS = {"hundred": "100", "thousand": "1000", "million": "10^{6}", "billion": "10^{9}", "trillion": "10^{12}",
               "dozen": "12", "k": "1000", "M": "10^{6}"}  # K and B are kelvin and byte, never multipliers


def _unit_table() -> dict[str, str]:
    """Every written form of a unit -> its canonical symbol: SI symbols with the usual prefixes, their names
    (singular and plural, ``-meter`` and ``-metre``), and customary, time, currency and angle units."""
    prefixes = {"": "", "k": "kilo", "c": "centi", "m": "milli", "u": "micro", "n": "nano", "M": "mega", "G": "giga",
                "p": "pico", "d": "deci", "T": "tera", "f": "femto"}
    si = {"m": ("meter", "metre"), "g": ("gram",), "s": ("second",), "L": ("liter", "litre"), "J": ("joule",),
          "W": ("watt",), "Hz": ("hertz",), "eV": ("electronvolt", "electron-volt"), "Pa": ("pascal",),
          "N": ("newton",), "V": ("volt",), "A": ("ampere", "amp"), "C": ("coulomb",), "F": ("farad",),
          "K": ("kelvin",), "mol": ("mole",),
          "T": ("tesla",), "Wb": ("weber",), "H": ("henry",), "S": ("siemens",), "pc": ("parsec",), "bar": ("bar",),
          "cal": ("calorie",), "Wh": ("watt-hour",), "B": ("byte",), "b": ("bit",), "erg": ("erg",)}
    table: dict[str, str] = {}
    for sym, names in si.items():
        for p, pname in prefixes.items():
            if sym in ("K", "mol", "bar", "erg") and p not in ("", "k", "m"):
                continue
            key = p + sym
            table.setdefault(key, key)
            if p == "u":
                table.setdefault("\\mu " + sym, key)
            for name in names:
                word = pname + name
                table[word] = key
                table[word + ("" if word.endswith(("s", "z")) else "s")] = key
                if word.endswith("y"):
                    table[word[:-1] + "ies"] = key
    other = {
        "in": ("inch", "inches", "in."), "ft": ("foot", "feet", "ft."), "yd": ("yard", "yards"),
        "mi": ("mile", "miles"),
        "au": ("AU", "astronomical unit", "astronomical units"), "ly": ("light-year", "light-years", "light year",
                                                                       "light years"),
        "lb": ("lbs", "pound", "pounds", "lb."), "oz": ("ounce", "ounces"), "t": ("ton", "tons", "tonne", "tonnes"),
        "min": ("minute", "minutes", "mins"), "h": ("hr", "hrs", "hour", "hours"), "day": ("days", "d"),
        "week": ("weeks", "wk"), "month": ("months",), "yr": ("year", "years", "yrs"), "sec": ("secs",),
        "gal": ("gallon", "gallons"), "qt": ("quart", "quarts"), "pt": ("pint", "pints"), "cup": ("cups",),
        "tbsp": ("tablespoon", "tablespoons"), "tsp": ("teaspoon", "teaspoons"), "acre": ("acres",),
        "ha": ("hectare", "hectares"), "atm": ("atmosphere", "atmospheres"), "mph": ("miles per hour",),
        "kph": ("kilometers per hour", "kilometres per hour", "km/h", "kmh"), "rpm": ("revolutions per minute",),
        "USD": ("dollar", "dollars", "$", "\\$", "usd", "bucks"), "cent": ("cents", "c", "\u00a2"),
        "EUR": ("euro", "euros"), "GBP": ("pounds sterling",), "yuan": ("RMB", "rmb", "\u5143"), "yen": (),
        "deg": ("degree", "degrees", "deg", "\\circ", "\\degree", "^\\circ"), "rad": ("radian", "radians"),
        "sr": ("steradian", "steradians"), "arcsec": ("arcsecond", "arcseconds"), "arcmin": ("arcminute", "arcminutes"),
        "degC": ("degrees Celsius", "degree Celsius", "Celsius", "\\circ C", "^\\circ C", "\\circ\\mathrm{C}"),
        "degF": ("degrees Fahrenheit", "degree Fahrenheit", "Fahrenheit", "\\circ F", "^\\circ F"),
        "Msun": ("solar mass", "solar masses", "M_\\odot", "M_{\\odot}"), "Lsun": ("L_\\odot", "L_{\\odot}"),
        "amu": ("u_", "dalton", "daltons", "Da"), "ohm": ("ohms", "\\Omega"), "mmHg": ("mm Hg",),
        "knot": ("knots", "kn"), "nmi": ("nautical mile", "nautical miles"),
        "unit": ("units",),  # MATH's geometry answers: 12 square units
    }
    for key, forms in other.items():
        table[key] = key
        for form in forms:
            table[form] = key
    table.pop("u_", None)
    return table


UNITS = _unit_table()
_POWERS = {"square": 2, "sq": 2, "sq.": 2, "cubic": 3, "cu": 3}
_POWER_AFTER = {"squared": 2, "cubed": 3}


def unit_key(phrase: str) -> str | None:
    """The canonical form of a unit phrase (``square inches`` and ``in^2`` give ``in^2``; ``km/h`` and
    ``kilometers per hour`` give ``kph``), None when ``phrase`` is not made of units."""
    phrase = re.sub(r"\s+", " ", phrase.replace("\u00b2", "^2").replace("\u00b3", "^3")).strip()
    phrase = re.sub(r"\^\{(-?\d)\}", r"^\1", phrase)
    if not phrase:
        return None
    if phrase in UNITS:
        return UNITS[phrase]
    parts = re.split(r"\s*/\s*|\s+per\s+", phrase)
    keys = []
    for k, part in enumerate(parts):
        words = part.split()
        power = 1
        if words and words[0] in _POWERS:
            power, words = _POWERS[words[0]], words[1:]
        if words and words[-1] in _POWER_AFTER:
            power, words = _POWER_AFTER[words[-1]], words[:-1]
        text = " ".join(words)
        m = re.fullmatch(r"(.+?)\^(-?\d)", text)
        if m:
            text, power = m.group(1), power * int(m.group(2))
        if text not in UNITS:
            return None
        keys.append(f"{UNITS[text]}^{power * (-1 if k else 1)}")
    if len(keys) == 1 and keys[0].endswith("^1"):
        return keys[0][:-2]
    return "*".join(sorted(keys))


# ----- tokens -------------------------------------------------------------------------------------

# unicode read as LaTeX (or ASCII); any other non-ASCII character does not parse
UNICODE = {"\u2212": "-", "\u2013": "-", "\u00d7": "\\times ", "\u00f7": "\\div ", "\u00b7": "\\cdot ",
           "\u22c5": "\\cdot ",
           "\u03c0": "\\pi ", "\u221e": "\\infty ", "\u221a": "\\sqrt ", "\u2264": "\\le ", "\u2265": "\\ge ",
           "\u00b0": "^{\\circ}", "\u00b2": "^{2}", "\u00b3": "^{3}", "\u00a0": " ", "\u2009": "\\,", "\u202f": "\\,",
           "\u2248": "\\approx ", "\u00b1": "\\pm ",
           **{chr(0xFF10 + d): str(d) for d in range(10)}, "\uff0e": ".", "\uff0c": ",", "\uff0d": "-", "\uff0b": "+",
           "\uff0f": "/"}
_THOUSANDS = re.compile(r"(?<![\d.])(\d{1,3})((?:(?:\{,\}|,\\!\s*|\\[,; ]|\\thinspace\s*|~)\d{3}(?![\d]))+)(?!\.?\d)")
_COMMA_THOUSANDS = re.compile(r"(?<![\d.,])\d{1,3}(?:,\d{3})+(?![\d,])")


@dataclass(frozen=True)
class Tok:
    kind: str  # "cmd" (a control sequence, without its backslash), "ch" (a character), "sp" (a space or spacing)
    value: str


def _tokens(s: str) -> list[Tok]:
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


# ----- readings -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Side:
    """One side of an item: its clean LaTeX and what was written around the value."""

    latex: str
    name: bool = False  # a name (x, a_1, f(x), AB, m+n, \\angle A, \\text{Total}): it claims no value
    symbol: bool = False  # a bare one-letter-ish name (x, A, \\theta): ambiguous against a gold in letters
    unit: str | None = None  # canonical unit (UNITS), None when none was written
    percent: bool = False
    base: int | None = None  # a base subscript on the number
    has_pi: bool = False
    decimal: bool = False  # written with a decimal point
    letters: bool = False  # has a free letter (not i, e, \\pi)


@dataclass(frozen=True)
class Item:
    sides: tuple[Side, ...]
    rels: tuple[str, ...] = ()

    @property
    def latex(self) -> str:
        out = self.sides[0].latex
        for rel, side in zip(self.rels, self.sides[1:]):
            out += f" {rel} {side.latex}"
        return out


@dataclass(frozen=True)
class Reading:
    """What a box says: ``kind`` "math" (``items``), "text" (``text``, case-folded words) or "choice" (``label``);
    ``reason`` (why it does not parse) instead when it does not."""

    kind: str = "math"
    items: tuple[Item, ...] = ()
    text: str = ""
    label: str | None = None
    approx: bool = False  # written after \\approx
    reason: str | None = None
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def ok(self) -> bool:
        return self.reason is None


# ----- the parser ---------------------------------------------------------------------------------

class _Parser:
    def __init__(self, toks: list[Tok]) -> None:
        self.t = toks
        self.i = 0
        self.depth = 0

    # token helpers
    def skip(self) -> None:
        while self.i < len(self.t) and self.t[self.i].kind == "sp":
            self.i += 1

    def peek(self, k: int = 0) -> Tok | None:
        self.skip()
        j, seen = self.i, 0
        while j < len(self.t):
            if self.t[j].kind != "sp":
                if seen == k:
                    return self.t[j]
                seen += 1
            j += 1
        return None

    def at(self, kind: str, *values: str) -> bool:
        tok = self.peek()
        return tok is not None and tok.kind == kind and (not values or tok.value in values)

    def take(self) -> Tok:
        self.skip()
        if self.i >= len(self.t):
            raise ParseError("the answer ends too early")
        tok = self.t[self.i]
        self.i += 1
        return tok

    def expect(self, kind: str, value: str) -> None:
        tok = self.take()
        if tok.kind != kind or tok.value != value:
            raise ParseError(f"expected {value!r}, found {tok.value!r}")

    def done(self) -> bool:
        return self.peek() is None

    def raw_group(self) -> str:
        """The raw text of a braced group (for \\text{...}), the opening brace next."""
        self.expect("ch", "{")
        depth, out = 1, []
        while self.i < len(self.t):
            tok = self.t[self.i]
            self.i += 1
            if tok.kind == "ch" and tok.value == "{":
                depth += 1
            elif tok.kind == "ch" and tok.value == "}":
                depth -= 1
                if depth == 0:
                    return "".join(out)
            out.append(_detok(tok))
        raise ParseError("an unclosed group")

    def nest(self):
        self.depth += 1
        if self.depth > 60:
            raise ParseError("nested too deeply")

    # ----- items and sides
    def body(self) -> Reading:
        approx = False
        if self.at("cmd", "approx"):
            self.take()
            approx = True
        items = [self.item()]
        while not self.done():
            if self.at("ch", ","):
                self.take()
            elif self.at_connective():
                pass
            else:
                raise ParseError(f"{_detok(self.peek())!r} after the answer")
            items.append(self.item())
        return Reading(items=tuple(items), approx=approx)

    def at_connective(self) -> bool:
        tok = self.peek()
        if tok is None or tok.kind != "cmd" or tok.value not in TEXT_COMMANDS or not self.at_group(1):
            return False
        save = self.i
        self.take()
        words = self.raw_group().strip().casefold()
        if words in ("or", "and", ",", ", or", ", and"):
            return True
        self.i = save
        return False

    def at_group(self, k: int = 0) -> bool:
        tok = self.peek(k)
        return tok is not None and tok.kind == "ch" and tok.value == "{"

    def item(self) -> Item:
        sides = [self.side()]
        rels = []
        while True:
            tok = self.peek()
            if tok is None:
                break
            rel = None
            if (tok.kind == "ch" and tok.value in "=<>") or (tok.kind == "cmd" and tok.value in RELATIONS):
                rel = RELATIONS[tok.value]
            if rel is None:
                break
            self.take()
            rels.append(rel)
            sides.append(self.side())
        for side in sides[:-1]:
            if side.unit or side.percent:
                raise ParseError("a unit or percent before a relation")
        if "\\approx" in rels and not (len(rels) == 1 and rels[0] == "\\approx" and sides[0].name):
            raise ParseError("\\approx other than after a name")
        return Item(tuple(sides), tuple(rels))

    def side(self) -> Side:
        currency = None
        if self.at("cmd", "$"):
            self.take()
            currency = "USD"
        start = self.i
        name_only = self.name_expr()
        if name_only is not None:
            latex, symbol = name_only
            if not currency and self.at_relation():
                return Side(latex=latex, name=True, symbol=symbol)
            self.i = start
        info = _Info()
        latex = self.expr(info)
        multiplier = self.multiplier()
        if multiplier:
            latex = f"({latex}) \\cdot {multiplier}"
        unit, percent = self.unit_and_percent(info)
        if currency:
            if unit is not None:
                raise ParseError("two units")
            unit = "USD"
        return Side(latex=latex, unit=unit, percent=percent, base=info.base, has_pi=info.pi, decimal=info.decimal,
                    letters=info.letters)

    def at_relation(self) -> bool:
        tok = self.peek()
        return tok is not None and ((tok.kind == "ch" and tok.value in "=<>")
                                    or (tok.kind == "cmd" and tok.value in RELATIONS))

    # ----- names (left sides)
    def name_expr(self) -> tuple[str, bool] | None:
        """A sum or product of names (``x_1+x_2``, ``AB``, ``\\angle A``, ``f(x)``, ``\\text{Total}``), with whether it
        is a bare symbol; None (position kept) when what follows is no name."""
        save = self.i
        try:
            parts, count, sym = [], 0, False
            while True:
                atom = self.name_atom()
                if atom is None:
                    break
                parts.append(atom)
                count += 1
                sym = self._symbol
                if self.at("ch", "+", "-"):
                    parts.append(self.take().value)
                    continue
                if self.at("cmd", "cdot", "times"):
                    parts.append("\\" + self.take().value + " ")
            if not count or (parts and parts[-1] in ("+", "-")):
                self.i = save
                return None
            symbol = count == 1 and sym
            return "".join(p if isinstance(p, str) else p for p in parts), symbol
        except ParseError:
            self.i = save
            return None

    def name_atom(self) -> str | None:
        tok = self.peek()
        self._symbol = False
        if tok is None:
            return None
        if tok.kind == "cmd" and tok.value in TEXT_COMMANDS and self.at_group(1):
            save = self.i
            self.take()
            words = self.raw_group().strip()
            if not re.fullmatch(r"[A-Za-z][A-Za-z ]*", words) or words.casefold() in NUMBER_WORDS or unit_key(words):
                self.i = save
                return None
            self._symbol = False
            return f"\\text{{{words}}}"
        if tok.kind == "cmd" and tok.value in ("angle", "measuredangle", "triangle"):
            self.take()
            inner = self.name_atom()
            if inner is None:
                raise ParseError("an angle of nothing")
            self._symbol = False
            return f"\\angle {inner}"
        if tok.kind == "cmd" and tok.value in ("overline", "bar", "vec", "hat", "dot", "ddot", "tilde", "widehat"):
            self.take()
            if self.at_group():
                self.take()
                inner = "".join(self.name_atom() or "" for _ in range(8) if not self.at("ch", "}"))
                self.expect("ch", "}")
            else:
                inner = self.name_atom()
            if not inner:
                raise ParseError("a decoration of nothing")
            self._symbol = True
            return f"\\{tok.value}{{{inner}}}"
        letter = None
        if tok.kind == "ch" and re.fullmatch(r"[A-Za-z]", tok.value):
            letter = tok.value
        elif tok.kind == "cmd" and tok.value in GREEK and tok.value != "pi":
            letter = "\\" + tok.value + " "
        if letter is None:
            return None
        self.take()
        out = letter
        while self.at("ch", "'") or (self.at("ch", "^") and self._prime_next()):
            if self.at("ch", "'"):
                self.take()
                out += "'"
            else:
                self.take()
                if self.at("cmd", "prime"):
                    self.take()
                else:
                    self.expect("ch", "{")
                    self.expect("cmd", "prime")
                    self.expect("ch", "}")
                out += "'"
        if self.at("ch", "_"):
            self.take()
            out += "_{" + self.script() + "}"
        self._symbol = True
        if self.at("ch", "("):
            save = self.i
            self.take()
            info = _Info()
            try:
                arg = self.expr(info)
                self.expect("ch", ")")
                out += f"({arg})"
                self._symbol = False
            except ParseError:
                self.i = save
        return out

    def _prime_next(self) -> bool:
        """Whether ``^\\prime`` or ``^{\\prime}`` follows (the ``^`` next)."""
        prime = Tok("cmd", "prime")
        return self.peek(1) == prime or (self.peek(1) == Tok("ch", "{") and self.peek(2) == prime)

    def script(self) -> str:
        """A subscript: one token or a braced group of letters, digits, Greek, text and commas."""
        if self.at_group():
            self.take()
            parts = []
            while not self.at("ch", "}"):
                tok = self.take()
                if tok.kind == "ch" and re.fullmatch(r"[A-Za-z0-9,+\-]", tok.value):
                    parts.append(tok.value)
                elif tok.kind == "cmd" and (tok.value in SYMBOLS):
                    parts.append("\\" + tok.value + " ")
                elif tok.kind == "cmd" and tok.value in TEXT_COMMANDS:
                    parts.append("\\text{" + self.raw_group().strip() + "}")
                else:
                    raise ParseError(f"{_detok(tok)!r} in a subscript")
            self.take()
            if not parts:
                raise ParseError("an empty subscript")
            return "".join(parts)
        tok = self.take()
        if tok.kind == "ch" and re.fullmatch(r"[A-Za-z0-9]", tok.value):
            return tok.value
        if tok.kind == "cmd" and tok.value in SYMBOLS:
            return "\\" + tok.value
        raise ParseError(f"{_detok(tok)!r} as a subscript")

    # ----- multipliers, units, percent
    def multiplier(self) -> str | None:
        tok = self.peek()
        if tok is None or tok.kind != "cmd" or tok.value not in TEXT_COMMANDS or not self.at_group(1):
            return None
        save = self.i
        self.take()
        words = self.raw_group().strip().split()
        factors = []
        while words and words[0] in MULTIPLIERS:
            factors.append(MULTIPLIERS[words.pop(0)])
        if not factors:
            self.i = save
            return None
        if words:  # "thousand dollars": the rest is a unit, read by unit_and_percent
            self.t = self.t[:self.i] + [Tok("cmd", "text"), Tok("ch", "{")] + [Tok("ch", c) for c in " ".join(words)] \
                + [Tok("ch", "}")] + self.t[self.i:]
        return " \\cdot ".join(factors)

    def unit_and_percent(self, info: "_Info") -> tuple[str | None, bool]:
        unit = info.unit
        percent = False
        while not self.done():
            tok = self.peek()
            if tok.kind == "cmd" and tok.value == "%":
                self.take()
                if percent or unit:
                    raise ParseError("a percent after a unit")
                percent = True
                continue
            if tok.kind == "cmd" and tok.value in TEXT_COMMANDS and self.at_group(1):
                save = self.i
                self.take()
                words = self.raw_group().replace("~", " ").replace("\\,", " ").strip()
                power = self.unit_power()
                if words in ("%", "\\%", "percent", "per cent"):
                    if percent or unit or power:
                        raise ParseError("a percent after a unit")
                    percent = True
                    continue
                key = unit_key(words + power)
                if key is None or unit is not None or percent:
                    self.i = save
                    break
                unit = key
                continue
            if tok.kind == "cmd" and tok.value == "degree":
                self.take()
                if unit is not None or percent:
                    raise ParseError("two units")
                unit = "deg"
                continue
            break
        return unit, percent

    def unit_power(self) -> str:
        if self.at("ch", "^"):
            save = self.i
            self.take()
            if self.at_group():
                self.take()
                tok = self.take()
                self.expect("ch", "}")
            else:
                tok = self.take()
            if tok.kind == "ch" and tok.value in "23":
                return "^" + tok.value
            self.i = save
        return ""

    # ----- expressions
    def expr(self, info: "_Info") -> str:
        self.nest()
        try:
            out = ""
            if self.at_group() and self.peek(1) in (Tok("ch", "-"), Tok("ch", "+")) and self.peek(2) == Tok("ch", "}"):
                # {-}4: a sign in braces
                self.take()
                out = self.take().value
                self.take()
            elif self.at("ch", "+", "-") or self.at("cmd", "pm", "mp"):
                tok = self.take()
                out = BINARY[tok.value] if tok.kind == "cmd" else tok.value
                info.other = info.other or tok.value in ("pm", "mp")
            out += self.term(info)
            while True:
                tok = self.peek()
                if tok is None:
                    return out
                op = BINARY.get(tok.value) if (tok.kind == "ch") == (tok.value in "+-") else None
                if op is None:
                    return out
                self.take()
                info.other = True
                out += f" {op} " + self.term(info)
        finally:
            self.depth -= 1

    def term(self, info: "_Info") -> str:
        out = self.factor(info, first=True)
        while True:
            tok = self.peek()
            if tok is None:
                return out
            op = PRODUCTS.get(tok.value) if (tok.kind == "ch") == (tok.value in "*/") else None
            if op is not None:
                self.take()
                info.other = True
                out += f" {op} " + self.factor(info, first=True)
                continue
            if self.starts_implicit(tok):
                info.other = True
                out += " " + self.factor(info, first=False)
                continue
            return out

    def starts_implicit(self, tok: Tok) -> bool:
        """Whether ``tok`` starts a factor multiplied by juxtaposition (never a digit: ``12345 40`` is no product)."""
        if tok.kind == "ch":
            return bool(re.fullmatch(r"[A-Za-z(\[|]", tok.value)) or tok.value == "{"
        return tok.kind == "cmd" and (tok.value in SYMBOLS | FUNCTIONS | FRACTIONS | BINOMS
                                      or tok.value in ("sqrt", "left", "{", "lim", "begin", "lvert")
                                      or tok.value in DECORATIONS - {"mathbf", "boldsymbol", "bm"})

    def factor(self, info: "_Info", first: bool) -> str:
        out = self.atom(info, first)
        while True:
            if self.at("ch", "^") and re.fullmatch(r"[A-Za-z]|\\[a-zA-Z]+ ?", out) and self._prime_next():  # x^{\prime}
                self.take()
                if self.at("cmd", "prime"):
                    self.take()
                else:
                    self.take()
                    self.expect("cmd", "prime")
                    self.expect("ch", "}")
                out += "'"
                continue
            if self.at("ch", "^"):
                self.take()
                if self.at("cmd", "circ") or (self.at_group() and self.peek(1) == Tok("cmd", "circ")
                                              and self.peek(2) == Tok("ch", "}")):
                    if self.at_group():
                        self.take()
                        self.take()
                        self.take()
                    else:
                        self.take()
                    if info.unit is not None:
                        raise ParseError("two degree marks")
                    info.unit = "deg"
                    if not (self.done() or self.at("ch", ",") or self.at_relation() or self.at_text_unit()):
                        raise ParseError("a degree mark inside an expression")
                    return out
                out += "^{" + self.exponent(info) + "}"
            elif self.at("ch", "!") :
                self.take()
                out += "!"
            else:
                return out

    def at_text_unit(self) -> bool:
        tok = self.peek()
        return tok is not None and tok.kind == "cmd" and tok.value in TEXT_COMMANDS

    def exponent(self, info: "_Info") -> str:
        if self.at_group():
            self.take()
            out = self.expr(info)
            self.expect("ch", "}")
            return out
        tok = self.take()
        if tok.kind == "ch" and re.fullmatch(r"[A-Za-z0-9]", tok.value):
            return tok.value
        if tok.kind == "cmd" and tok.value in SYMBOLS:
            return "\\" + tok.value
        if tok.kind == "cmd" and tok.value == "prime":
            raise ParseError("a prime on a value")
        raise ParseError(f"{_detok(tok)!r} as an exponent")

    def number(self, info: "_Info") -> str:
        digits = ""
        while self.i < len(self.t) and self.t[self.i].kind == "ch" and self.t[self.i].value.isdigit():
            digits += self.t[self.i].value
            self.i += 1
        if self.i < len(self.t) and self.t[self.i].kind == "ch" and self.t[self.i].value == "." and \
                self.i + 1 < len(self.t) and self.t[self.i + 1].kind == "ch" and self.t[self.i + 1].value.isdigit():
            self.i += 1
            frac = ""
            while self.i < len(self.t) and self.t[self.i].kind == "ch" and self.t[self.i].value.isdigit():
                frac += self.t[self.i].value
                self.i += 1
            digits = (digits or "0") + "." + frac
            info.decimal = True
        if not digits:
            raise ParseError("expected a number")
        if self.i < len(self.t) and self.t[self.i].kind == "ch" and self.t[self.i].value == "_":  # a base subscript
            save = self.i
            self.i += 1
            base = self.script()
            if not base.isdigit():
                self.i = save
                raise ParseError("a subscript on a number")
            b = int(base)
            if not 2 <= b <= 36 or "." in digits or any(int(d, 36) >= b for d in digits):
                raise ParseError(f"{digits} is no number in base {base}")
            if info.base is not None:
                raise ParseError("two bases")
            info.base = b
        return digits

    def atom(self, info: "_Info", first: bool) -> str:
        tok = self.peek()
        if tok is None:
            raise ParseError("the answer ends too early")
        if tok.kind == "ch":
            c = tok.value
            if c.isdigit() or c == ".":
                if not first:
                    raise ParseError("two numbers side by side")
                self.skip()
                num = self.number(info)
                if self.at("cmd", *FRACTIONS) and re.fullmatch(r"\d+", num):  # a mixed number 1\frac{4}{5}
                    save = self.i
                    frac = self.atom(info, first=False)
                    if re.fullmatch(r"\\frac\{\d+\}\{\d+\}", frac):
                        return f"({num}+{frac})"
                    self.i = save
                    raise ParseError("a number times a fraction written side by side")
                return num
            if re.fullmatch(r"[A-Za-z]", c):
                self.take()
                out = c
                if c not in "ie":
                    info.letters = True
                while self.at("ch", "'"):
                    self.take()
                    out += "'"
                if self.at("ch", "_"):
                    self.take()
                    out += "_{" + self.script() + "}"
                return out
            if c == "(" or c == "[":
                return self.bracket(info, c)
            if c == "{":
                self.take()
                if self.at("ch", "}"):
                    raise ParseError("an empty group")
                inner = self.expr(info)
                if self.at("cmd", "over"):
                    self.take()
                    den = self.expr(info)
                    inner = f"\\frac{{{inner}}}{{{den}}}"
                self.expect("ch", "}")
                return "{" + inner + "}"
            if c == "|":
                self.take()
                inner = self.expr(info)
                self.expect("ch", "|")
                return f"\\left|{inner}\\right|"
            raise ParseError(f"{c!r} in the answer")
        name = tok.value
        if name in FRACTIONS or name in BINOMS:
            self.take()
            a = self.arg(info)
            b = self.arg(info)
            info.other = True
            return f"\\frac{{{a}}}{{{b}}}" if name in FRACTIONS else f"\\binom{{{a}}}{{{b}}}"
        if name == "sqrt":
            self.take()
            index = ""
            if self.at("ch", "["):
                self.take()
                index = "[" + self.expr(info) + "]"
                self.expect("ch", "]")
            info.other = True
            return f"\\sqrt{index}{{{self.arg(info)}}}"
        if name in SYMBOLS:
            self.take()
            if name == "pi":
                info.pi = True
            elif name != "infty":
                info.letters = True
            info.other = True
            out = "\\" + name + " "
            if self.at("ch", "_") and name not in ("pi", "infty"):
                self.take()
                out += "_{" + self.script() + "}"
            return out
        if name in FUNCTIONS:
            self.take()
            out = "\\" + name
            if self.at("ch", "_"):
                self.take()
                out += "_{" + self.arg(info) + "}"
            if self.at("ch", "^"):
                self.take()
                out += "^{" + self.exponent(info) + "}"
            info.other = True
            return out + " " + self.factor(info, first=True)
        if name == "lim":
            self.take()
            self.expect("ch", "_")
            self.expect("ch", "{")
            var = self.name_atom()
            if var is None:
                raise ParseError("a limit without a variable")
            self.expect("cmd", "to")
            point = self.expr(info)
            self.expect("ch", "}")
            info.other = True
            return f"\\lim_{{{var} \\to {point}}} " + self.factor(info, first=True)
        if name == "left":
            self.take()
            opener = _detok(self.take())
            if opener in ("|", "\\lvert"):
                inner = self.expr(info)
                self.expect("cmd", "right")
                if _detok(self.take()) not in ("|", "\\rvert"):
                    raise ParseError("\\left| closed by another")
                return f"\\left|{inner}\\right|"
            if opener not in _CLOSERS:
                raise ParseError(f"\\left{opener}")
            return self.bracket(info, opener, left=True)
        if name == "{":
            return self.bracket(info, "\\{")
        if name == "lvert":
            self.take()
            inner = self.expr(info)
            self.expect("cmd", "rvert")
            return f"\\left|{inner}\\right|"
        if name == "begin":
            return self.matrix(info)
        if name in DECORATIONS:
            self.take()
            inner = self.arg(info)
            info.other = True
            out = f"\\{name}{{{inner}}}" if name not in ("mathbf", "boldsymbol", "bm") else f"{{{inner}}}"
            if self.at("ch", "_"):  # \dot{x}_{0}
                self.take()
                out += "_{" + self.script() + "}"
            return out
        if name in ("angle",):
            raise ParseError("an angle as a value")
        raise ParseError(f"\\{name} is not in the answer language")

    def arg(self, info: "_Info") -> str:
        """A command argument: a braced expression or one token (``\\frac43``, ``\\sqrt2``)."""
        if self.at_group():
            self.take()
            out = self.expr(info)
            self.expect("ch", "}")
            return out
        self.skip()
        tok = self.take()
        if tok.kind == "ch" and tok.value.isdigit():
            return tok.value
        if tok.kind == "ch" and re.fullmatch(r"[A-Za-z]", tok.value):
            info.letters = info.letters or tok.value not in "ie"
            return tok.value
        if tok.kind == "cmd" and tok.value in SYMBOLS:
            info.pi = info.pi or tok.value == "pi"
            return "\\" + tok.value + " "
        raise ParseError(f"{_detok(tok)!r} as an argument")

    def bracket(self, info: "_Info", opener: str, left: bool = False) -> str:
        """A bracketed value or list: ``(a)``, ``(a, b)``, ``[a, b)``, ``\\{a, b\\}``; with ``\\left ... \\right``
        when ``left``."""
        if not left:
            self.take()
        parts = [self.expr(info)]
        while self.at("ch", ","):
            self.take()
            parts.append(self.expr(info))
        if left:
            self.expect("cmd", "right")
        closer = _detok(self.take())
        if closer not in _CLOSERS[opener]:
            raise ParseError(f"{opener} closed by {closer}")
        if opener in "([":
            return "\\left" + opener + ", ".join(parts) + "\\right" + closer
        return opener + ", ".join(parts) + closer

    def matrix(self, info: "_Info") -> str:
        self.expect("cmd", "begin")
        env = self.raw_group().strip()
        if env not in MATRICES:
            raise ParseError(f"the environment {env}")
        rows, row = [], [self.expr(info)]
        while True:
            if self.at("ch", "&"):
                self.take()
                row.append(self.expr(info))
            elif self.at("cmd", "\\"):
                self.take()
                rows.append(row)
                if self.at("cmd", "end"):
                    row = None
                    break
                row = [self.expr(info)]
            else:
                break
        if row is not None:
            rows.append(row)
        self.expect("cmd", "end")
        if self.raw_group().strip() != env:
            raise ParseError("an environment closed by another")
        if len({len(r) for r in rows}) != 1:
            raise ParseError("matrix rows of different lengths")
        info.other = True
        return "\\begin{pmatrix}" + " \\\\ ".join(" & ".join(r) for r in rows) + "\\end{pmatrix}"


_CLOSERS = {"(": (")", "]"), "[": ("]", ")"), "\\{": ("\\}",), "\\langle": ("\\rangle",)}  # intervals: (a, b], [a, b)


@dataclass
class _Info:
    unit: str | None = None
    base: int | None = None
    pi: bool = False
    letters: bool = False
    decimal: bool = False
    other: bool = False  # anything besides one number


def _detok(tok: Tok | None) -> str:
    if tok is None:
        return ""
    return ("\\" + tok.value) if tok.kind == "cmd" else tok.value


# ----- reading a box ------------------------------------------------------------------------------

def _prepare(s: str) -> str:
    s = "".join(UNICODE.get(ch, ch) for ch in s)
    foreign = sorted({ch for ch in s if ord(ch) > 127})
    if foreign:
        raise ParseError(f"non-ASCII character(s) {foreign}")
    s = re.sub(r"\s+", " ", s)
    s = _THOUSANDS.sub(lambda m: m.group(1) + re.sub(r"\D", "", m.group(2)), s)
    s = _COMMA_THOUSANDS.sub(lambda m: m.group().replace(",", ""), s)
    s = re.sub(r"(?<!\\)%(?=[\s}.$]*$)", r"\\%", s.rstrip())  # a bare final percent sign: the percent, not a comment
    if re.search(r"(?<!\\)%", s):
        raise ParseError("a LaTeX comment (%)")
    return s


def _unwrap(toks: list[Tok]) -> list[Tok]:
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
    toks = _unwrap(_tokens(_prepare(answer)))
    core = [t for t in toks if t.kind != "sp"]
    if not core:
        raise ParseError("an empty answer")
    # a whole-answer text: words, or a choice
    if core[0].kind == "cmd" and core[0].value in TEXT_COMMANDS and core[1:2] == [Tok("ch", "{")]:
        p = _Parser(toks)
        p.take()
        words = p.raw_group()
        if p.done():
            words = re.sub(r"\s+", " ", words.replace("~", " ")).strip().rstrip(".").strip()
            m = _CHOICE.fullmatch(words)
            if m:
                return Reading(kind="choice", label=m.group(1))
            if not re.fullmatch(r"[A-Za-z][A-Za-z' -]*", words):
                raise ParseError(f"the text {words!r} is no answer")
            return Reading(kind="text", text=words.casefold())
    # a choice label, alone or before the value: (A), \textbf{(A)}, \text{(A) }
    label, rest = _label(toks)
    if label is not None:
        if not [t for t in rest if t.kind != "sp"]:
            return Reading(kind="choice", label=label)
        toks = _unwrap(rest)
    elif len(core) == 1 and core[0].kind == "ch" and core[0].value in CHOICES:
        return Reading(kind="choice", label=core[0].value, extra={"letter": True})
    p = _Parser(toks)
    reading = p.body()
    if not p.done():
        raise ParseError("something after the answer")
    if label is not None:
        return Reading(kind="math", items=reading.items, approx=reading.approx, label=label)
    return reading


def _label(toks: list[Tok]) -> tuple[str | None, list[Tok]]:
    core = [(i, t) for i, t in enumerate(toks) if t.kind != "sp"]
    vals = [t.value for _, t in core]
    if len(vals) >= 3 and vals[0] == "(" and vals[1] in CHOICES and vals[2] == ")" and core[1][1].kind == "ch":
        return vals[1], toks[core[2][0] + 1:]
    if core and core[0][1].kind == "cmd" and core[0][1].value in TEXT_COMMANDS and len(core) > 1 and vals[1] == "{":
        p = _Parser(toks[core[0][0]:])
        p.take()
        try:
            words = p.raw_group().strip()
        except ParseError:
            return None, toks
        m = re.fullmatch(r"\(([A-E])\)\s*:?", words)
        if m:
            return m.group(1), toks[core[0][0] + p.i:]
    return None, toks


# ----- what the comparison needs ------------------------------------------------------------------

def claims(item: Item, gold_symbolic: bool) -> list[Side]:
    """The sides of ``item`` that claim a value: every side but names (against a gold in letters, a bare symbol
    such as ``A`` in ``A = m`` is no name: it might be the answer, so it must equal the gold too)."""
    out = [s for s in item.sides if not s.name or (gold_symbolic and s.symbol)]
    return out


def percent_readings(value: str, gold_value: float | None, gold_percent: bool) -> list[str]:
    """How a percent answer ``value``\\% is compared: against a percent gold, as the same number of percent; against
    a gold between -1 and 1 (a proportion), as ``value/100``; against any other number (GSM8K's "what percent ..."
    golds are written without the sign), as the number of percent."""
    if gold_percent:
        return [value]
    if gold_value is not None and abs(gold_value) < 1:
        return [f"\\frac{{{value}}}{{100}}"]
    return [value]


def _side_pairs(a: Side, g: Side, magnitude) -> list[tuple[str, str]] | None:
    """The (answer, gold) LaTeX pairs of which one must be equivalent for side ``a`` to be ``g``; None when units,
    bases or marks already tell them apart."""
    if a.base is not None and a.base != g.base:
        return None
    if a.unit is not None and g.unit is not None and a.unit != g.unit:
        return None
    if a.unit == "deg" and (a.has_pi or g.has_pi):  # (8\\pi)^\\circ: degrees for a gold in radians
        return None
    if a.percent:
        gold_value = None if g.percent else magnitude(g.latex)
        return [(r, g.latex) for r in percent_readings(a.latex, gold_value, g.percent)]
    if g.percent:  # 5 or 0.05 for 5%
        return [(a.latex, g.latex), (a.latex, f"\\frac{{{g.latex}}}{{100}}")]
    return [(a.latex, g.latex)]


def judge(a: Reading, g: Reading, equal, magnitude) -> bool:
    """Whether answer reading ``a`` says what gold reading ``g`` says. ``equal(answer_latex, gold_latex)`` is the
    equivalence of two clean values (math-verify, exact numbers: ``_checker.py``), ``magnitude(latex)`` a number's
    value (None for anything else)."""
    if not (a.ok and g.ok):
        return False
    if g.kind == "choice":  # the choice alone: a value after a label is read against a value gold only
        return a.kind == "choice" and a.label == g.label
    if g.kind == "text":
        if a.kind == "text":
            return a.text == g.text
        side = a.items[0].sides[-1] if a.kind == "math" and len(a.items) == 1 and not a.items[0].rels else None
        return side is not None and re.sub(r"\s", "", side.latex).casefold() == g.text.replace(" ", "")
    if a.kind == "text":
        return False
    if a.kind == "choice":
        if not a.extra.get("letter"):
            return False
        a = Reading(items=(Item((Side(latex=a.label, letters=True),)),))
    gold_symbolic = any(s.letters for it in g.items for s in it.sides)
    gold_claims = [c for it in g.items for c in claims(it, False)]
    if not gold_claims:
        return False
    gold_decimal = any(s.decimal for s in gold_claims)
    if (a.approx or any("\\approx" in it.rels for it in a.items)) and not gold_decimal:
        return False  # a hedge: \\approx only before a decimal, for a gold written in decimals
    if len(g.items) == 1 and g.items[0].rels:
        gold_item = g.items[0]
        if len(a.items) == 1 and a.items[0].rels and "\\approx" not in a.items[0].rels:
            if len(a.items[0].rels) == len(gold_item.rels) and equal(a.items[0].latex, gold_item.latex):
                return True  # the same equation or relation, written another way
        if not (gold_item.sides[0].name and len(gold_item.rels) == 1 and gold_item.rels[0] in ("=", "\\in")):
            return False
        return _claims_match(a, Reading(items=(Item((gold_item.sides[-1],)),)), gold_symbolic, equal, magnitude)
    return _claims_match(a, g, gold_symbolic, equal, magnitude)


def _claims_match(a: Reading, g: Reading, gold_symbolic: bool, equal, magnitude) -> bool:
    if any(set(it.rels) - {"=", "\\in", "\\approx"} for it in a.items):
        return False  # an inequality for a gold that is none
    if len(g.items) == 1 and len(a.items) > 1 and "\\pm" in g.items[0].sides[-1].latex:  # 1+\sqrt{19}, 1-\sqrt{19}
        cs = [claims(it, gold_symbolic) for it in a.items]
        return all(len(c) == 1 for c in cs) and equal(", ".join(c[0].latex for c in cs), g.items[0].sides[-1].latex)
    if len(g.items) == 1:
        if len(a.items) != 1:
            return False  # a list of candidates for one value
        cs = claims(a.items[0], gold_symbolic)
        if not cs:
            return False
        return all(any(equal(x, y) for x, y in (_side_pairs(c, g.items[0].sides[-1], magnitude) or [])) for c in cs)
    # a list gold: each answer item one claim, compared as a list (order aside: math-verify's sets)
    if len(a.items) == 1:
        cs = claims(a.items[0], gold_symbolic)
        gold_list = ", ".join(it.sides[-1].latex for it in g.items)
        return len(cs) == 1 and not cs[0].percent and equal(cs[0].latex, gold_list)
    items = []
    for it in a.items:
        cs = claims(it, gold_symbolic)
        if len(cs) != 1 or cs[0].percent:
            return False
        items.append(cs[0].latex)
    return equal(", ".join(items), ", ".join(it.sides[-1].latex for it in g.items))
