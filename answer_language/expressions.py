"""Values: LaTeX arithmetic over numbers, letters and the commands of the vocabulary."""

from __future__ import annotations

import re

from answer_language.readings import Info
from answer_language.tokens import ParseError, Tok, detok
from answer_language.vocabulary import (
    BINARY,
    BINOMS,
    DECORATIONS,
    FRACTIONS,
    FUNCTIONS,
    MATRICES,
    PRODUCTS,
    SYMBOLS,
    TEXT_COMMANDS,
)

CLOSERS = {"(": (")", "]"), "[": ("]", ")"), "\\{": ("\\}",), "\\langle": ("\\rangle",)}  # intervals: (a, b], [a, b)



MAX_EXPONENT = 10_000  # a larger number as an exponent does not parse (10^{10^{10}} would take the checker minutes)
MAX_FACTORIAL = 1_000  # n! only for a written integer up to this, or an expression with a letter
MAX_BINOMIAL = 10_000  # \\binom{n}{k} only for written integers up to this


def has_letter(latex: str) -> bool:
    """Whether clean LaTeX holds a free letter (commands such as ``\\left`` or ``\\pi`` aside)."""
    return re.search(r"[A-Za-z]", re.sub(r"\\[A-Za-z]+", "", latex)) is not None


def bounded_power(base: str, exponent: str) -> str:
    """``exponent``, when ``base^{exponent}`` costs the checker little: a numeric exponent is a written number up to
    :data:`MAX_EXPONENT` (a sign, digits, a decimal or fraction), never a power or factorial of numbers, and a
    numeric base holding a power takes no exponent over 100 (``(10^{100})^{1000}``); letters keep it symbolic."""
    if has_letter(exponent) and "!" not in exponent:
        return exponent
    numbers = [float(n) for n in re.findall(r"\d+(?:\.\d+)?", exponent)]
    if "^" in exponent or "!" in exponent or any(n > MAX_EXPONENT for n in numbers):
        raise ParseError(f"the exponent {exponent!r} is too large to check")
    if "^" in base and not has_letter(base) and any(n > 100 for n in numbers):
        raise ParseError(f"a power of {base!r} too large to check")
    return exponent


def bounded_factorial(value: str) -> str:
    """``value``, when ``value!`` costs the checker little: a written integer up to :data:`MAX_FACTORIAL`, or an
    expression with a letter (``n!``, ``(n+1)!``)."""
    if re.fullmatch(r"\d+", value):
        if int(value) > MAX_FACTORIAL:
            raise ParseError(f"{value}! is too large to check")
        return value
    if not has_letter(value) or "!" in value:
        raise ParseError(f"the factorial of {value!r}: only a written integer up to {MAX_FACTORIAL} or a letter")
    return value


def bounded_binomial(value: str) -> str:
    """A binomial's argument: a letter expression, or numbers (no power, no factorial) none above
    :data:`MAX_BINOMIAL`."""
    numbers = [float(n) for n in re.findall(r"\d+(?:\.\d+)?", value)]
    if not has_letter(value) and ("^" in value or "!" in value or any(n > MAX_BINOMIAL for n in numbers)):
        raise ParseError(f"the binomial argument {value!r} is too large to check")
    return value


class Expressions:
    def expr(self, info: Info) -> str:
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

    def term(self, info: Info) -> str:
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
                if self.bare_units and not info.letters and self.bare_unit() is not None:
                    return out  # 9 dollars, 5 cm: a unit written in math mode, read by unit_and_percent
                info.other = True
                # explicit, so math-verify drops no trailing letters; a letter before a bracket is a function: I(0)
                applied = tok == Tok("ch", "(") and re.fullmatch(r"[A-Za-z](?:_\{\w+\})?'*", out.split(" ")[-1])
                out += (" " if applied else " \\cdot ") + self.factor(info, first=False)
                continue
            return out

    def starts_implicit(self, tok: Tok) -> bool:
        """Whether ``tok`` starts a factor multiplied by juxtaposition (never a digit: ``12345 40`` is no product)."""
        if tok.kind == "ch":
            return bool(re.fullmatch(r"[A-Za-z(\[|]", tok.value)) or tok.value == "{"
        nxt = self.peek(1)
        if tok == Tok("cmd", "mu") and nxt is not None and nxt.kind == "cmd" and nxt.value in TEXT_COMMANDS:
            return False  # \mu\text{m}: a micro- unit, read after the value
        return tok.kind == "cmd" and (tok.value in SYMBOLS | FUNCTIONS | FRACTIONS | BINOMS
                                      or tok.value in ("sqrt", "left", "{", "lim", "begin", "lvert")
                                      or tok.value in DECORATIONS - {"mathbf", "boldsymbol", "bm"})

    def factor(self, info: Info, first: bool) -> str:
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
                out += "^{" + bounded_power(out, self.exponent(info)) + "}"
            elif self.at("ch", "!"):
                self.take()
                out = bounded_factorial(out) + "!"
            else:
                return out

    def at_text_unit(self) -> bool:
        tok = self.peek()
        return tok is not None and tok.kind == "cmd" and tok.value in TEXT_COMMANDS

    def exponent(self, info: Info) -> str:
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
        raise ParseError(f"{detok(tok)!r} as an exponent")

    def ch_at(self, j: int, test) -> bool:
        """Whether the raw token at ``j`` (spaces count) is a character passing ``test``."""
        return j < len(self.t) and self.t[j].kind == "ch" and bool(test(self.t[j].value))

    def digits(self) -> str:
        out = ""
        while self.ch_at(self.i, str.isdigit):
            out += self.t[self.i].value
            self.i += 1
        return out

    def number(self, info: Info) -> str:
        """Digits, a decimal part, a repeating part (``0.\\overline{3}``), e-notation (``2.88e4``) or a base."""
        digits = self.digits()
        repeating = None
        if self.ch_at(self.i, ".".__eq__) and (self.ch_at(self.i + 1, str.isdigit) or self.overline_at(self.i + 1)):
            self.i += 1
            frac = self.digits()
            if self.overline_at(self.i):
                repeating = self.repeating(digits or "0", frac)
            else:
                digits = (digits or "0") + "." + frac
                info.decimal = True
        if not digits:
            raise ParseError("expected a number")
        if repeating is not None:
            return repeating
        exponent = self.e_notation()
        if exponent is not None:
            info.decimal = info.decimal or "." in digits
            return f"{digits} \\times 10^{{{exponent}}}"
        if self.ch_at(self.i, "_".__eq__):  # a base subscript
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

    def overline_at(self, j: int) -> bool:
        return j < len(self.t) and self.t[j] == Tok("cmd", "overline")

    def repeating(self, whole: str, fixed: str) -> str:
        """``whole.fixed\\overline{rep}`` as the exact fraction it writes (the ``\\overline`` next)."""
        self.i += 1
        self.expect("ch", "{")
        rep = self.digits()
        self.expect("ch", "}")
        if not rep:
            raise ParseError("a repeating part without digits")
        num = int(whole + fixed + rep) - int(whole + fixed)
        den = (10 ** len(rep) - 1) * 10 ** len(fixed)
        return f"\\frac{{{num}}}{{{den}}}"

    def e_notation(self) -> str | None:
        """The exponent of ``2.88e4`` / ``1E-27`` written right after the digits (none: None, position kept); an
        ``e`` followed by anything else is Euler's number."""
        j = self.i
        if not self.ch_at(j, "eE".__contains__):
            return None
        j += 1
        sign = ""
        if self.ch_at(j, "+-".__contains__):
            sign = self.t[j].value.replace("+", "")
            j += 1
        start = j
        while self.ch_at(j, str.isdigit):
            j += 1
        if j == start or j - start > 4 or self.ch_at(j, str.isalpha) or self.ch_at(j, "^".__eq__):
            return None
        exponent = "".join(t.value for t in self.t[start:j])
        self.i = j
        return sign + exponent

    def atom(self, info: Info, first: bool) -> str:
        tok = self.peek()
        if tok is None:
            raise ParseError("the answer ends too early")
        if tok.kind == "ch":
            return self.char_atom(info, first, tok.value)
        name = tok.value
        if name in FRACTIONS or name in BINOMS:
            self.take()
            a = self.arg(info)
            b = self.arg(info)
            info.other = True
            if name in FRACTIONS:
                return f"\\frac{{{a}}}{{{b}}}"
            return f"\\binom{{{bounded_binomial(a)}}}{{{bounded_binomial(b)}}}"
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
            return self.symbol_atom(info, name)
        if name in FUNCTIONS:
            return self.function_atom(info, name)
        if name == "lim":
            return self.limit_atom(info)
        if name == "left":
            return self.left_atom(info)
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
            return self.decoration_atom(info, name)
        if name in ("angle",):
            raise ParseError("an angle as a value")
        raise ParseError(f"\\{name} is not in the answer language")

    def char_atom(self, info: Info, first: bool, c: str) -> str:
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

    def symbol_atom(self, info: Info, name: str) -> str:
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

    def function_atom(self, info: Info, name: str) -> str:
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

    def limit_atom(self, info: Info) -> str:
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

    def left_atom(self, info: Info) -> str:
        self.take()
        opener = detok(self.take())
        if opener in ("|", "\\lvert"):
            inner = self.expr(info)
            self.expect("cmd", "right")
            if detok(self.take()) not in ("|", "\\rvert"):
                raise ParseError("\\left| closed by another")
            return f"\\left|{inner}\\right|"
        if opener not in CLOSERS:
            raise ParseError(f"\\left{opener}")
        return self.bracket(info, opener, left=True)

    def decoration_atom(self, info: Info, name: str) -> str:
        self.take()
        inner = self.arg(info)
        info.other = True
        out = f"\\{name}{{{inner}}}" if name not in ("mathbf", "boldsymbol", "bm") else f"{{{inner}}}"
        if self.at("ch", "_"):  # \dot{x}_{0}
            self.take()
            out += "_{" + self.script() + "}"
        return out

    def arg(self, info: Info) -> str:
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
        raise ParseError(f"{detok(tok)!r} as an argument")

    def bracket(self, info: Info, opener: str, left: bool = False) -> str:
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
        closer = detok(self.take())
        if closer not in CLOSERS[opener]:
            raise ParseError(f"{opener} closed by {closer}")
        if opener in "([":
            return "\\left" + opener + ", ".join(parts) + "\\right" + closer
        return opener + ", ".join(parts) + closer

    def matrix(self, info: Info) -> str:
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

