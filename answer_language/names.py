"""Names: what may stand left of ``=`` and claim no value."""

from __future__ import annotations

import re

from answer_language.readings import Info
from answer_language.tokens import ParseError, Tok, detok
from answer_language.vocabulary import GREEK, SYMBOLS, TEXT_COMMANDS, VALUE_WORDS, is_label


def _spells_a_value(parts: list[str]) -> bool:
    """Whether single letters written side by side spell a word that gives a value or a negation (``no``, ``pi``,
    ``not``): such a left side is no name."""
    letters = "".join(p for p in parts if re.fullmatch(r"[A-Za-z]", p))
    return len(letters) > 1 and len(letters) == len(parts) and letters.casefold() in VALUE_WORDS


class Names:
    def name_expr(self) -> tuple[str, bool] | None:
        """A sum or product of names (``x_1+x_2``, ``AB``, ``\\angle A``, ``f(x)``, ``\\text{Total}``), with whether it
        is a bare symbol; None (position kept) when what follows is no name."""
        save = self.i
        try:
            parts, count, sym, label = [], 0, False, False
            while True:
                atom = self.name_atom(label=True)
                if atom is None:
                    break
                parts.append(atom)
                count += 1
                sym = self._symbol
                label = label or self._label
                if self.at("ch", "+", "-"):
                    parts.append(self.take().value)
                    continue
                if self.at("cmd", "cdot", "times"):
                    parts.append("\\" + self.take().value + " ")
                elif self.space_before_letter():
                    raise ParseError("two names side by side (words: 'not x')")
            if not count or (parts and parts[-1] in ("+", "-")) or _spells_a_value(parts) or (label and count > 1):
                self.i = save
                return None
            symbol = count == 1 and sym
            return "".join(p if isinstance(p, str) else p for p in parts), symbol
        except ParseError:
            self.i = save
            return None

    def space_before_letter(self) -> bool:
        """Whether a letter follows a letter after a space (``not x``: two words, not the product ``AB``)."""
        tok = self.peek()
        k = self.i
        return tok is not None and tok.kind == "ch" and tok.value.isalpha() and k >= 2 \
            and self.t[k - 1].kind == "sp" and self.t[k - 2].kind == "ch" and self.t[k - 2].value.isalpha()

    def name_atom(self, label: bool = False) -> str | None:
        """One letter (with primes, a subscript, an argument), Greek, an angle or a decoration; with ``label``, also
        a ``\\text{}`` label, which :meth:`name_expr` takes only as the whole side (``\\text{speed}``, never
        ``x\\text{ so }``: a word beside a letter is no name)."""
        tok = self.peek()
        self._symbol = self._label = False
        if tok is None:
            return None
        if tok.kind == "cmd" and tok.value in TEXT_COMMANDS and self.at_group(1):
            if not label:
                return None
            save = self.i
            self.take()
            words = self.raw_group().strip()
            if not is_label(words):
                self.i = save
                return None
            self._label = True
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
            info = Info()
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
                    parts.append(re.sub(r"[^A-Za-z0-9]", "", self.raw_group()))  # \\text{red}: the letters
                else:
                    raise ParseError(f"{detok(tok)!r} in a subscript")
            self.take()
            if not parts:
                raise ParseError("an empty subscript")
            return "".join(parts)
        tok = self.take()
        if tok.kind == "ch" and re.fullmatch(r"[A-Za-z0-9]", tok.value):
            return tok.value
        if tok.kind == "cmd" and tok.value in SYMBOLS:
            return "\\" + tok.value
        raise ParseError(f"{detok(tok)!r} as a subscript")

