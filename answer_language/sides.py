"""Items and sides: relations, names before them, multipliers, units and percent after a value."""

from __future__ import annotations

from answer_language.readings import Info, Item, Reading, Side
from answer_language.tokens import ParseError, Tok, detok
from answer_language.vocabulary import MULTIPLIERS, RELATIONS, TEXT_COMMANDS, unit_key


class Sides:
    bare_units = True  # a unit may be written in math mode (9 dollars); False inside a whole-answer \\text{}

    def bare_unit(self) -> tuple[str, int] | None:
        """A unit written in math mode up to the end of the side (``dollars``, ``cm``, ``square feet``,
        ``km/h``): its key and where it ends; None for one letter (``5m`` stays 5·m) or any other letters."""
        self.skip()
        j, phrase = self.i, ""
        while j < len(self.t) and (self.t[j].kind == "sp" or (self.t[j].kind == "ch" and (
                self.t[j].value.isalpha() or self.t[j].value == "/"))):
            phrase += self.t[j].value
            j += 1
        k = j
        while k < len(self.t) and self.t[k].kind == "sp":
            k += 1
        ends = k == len(self.t) or self.t[k] in (Tok("ch", ","), Tok("ch", "="), Tok("cmd", "%"))
        letters = sum(c.isalpha() for c in phrase)
        key = unit_key(phrase.strip()) if ends and letters >= 2 else None
        return None if key is None else (key, j)

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
                raise ParseError(f"{detok(self.peek())!r} after the answer")
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
        elif self.at_text_dollar():
            currency = "USD"
        start = self.i
        name_only = self.name_expr()
        name_end = None
        if name_only is not None:
            latex, symbol = name_only
            if not currency and self.at_relation():
                return Side(latex=latex, name=True, symbol=symbol)
            name_end = self.i
            self.i = start
        info = Info()
        latex = self.expr(info)
        as_name = name_only[0] if name_only is not None and self.i == name_end and self.done() else None
        multiplier = self.multiplier()
        if multiplier:
            latex = f"({latex}) \\cdot {multiplier}"
        unit, percent = self.unit_and_percent(info)
        if currency:
            if unit is not None:
                raise ParseError("two units")
            unit = "USD"
        return Side(latex=latex, unit=unit, percent=percent, base=info.base, has_pi=info.pi, decimal=info.decimal,
                    letters=info.letters, as_name=as_name)

    def at_text_dollar(self) -> bool:
        """Whether ``\\text{\\$}`` is next (taken when it is)."""
        tok = self.peek()
        if tok is None or tok.kind != "cmd" or tok.value not in TEXT_COMMANDS or not self.at_group(1):
            return False
        save = self.i
        self.take()
        if self.raw_group().strip() in ("\\$", "$"):
            return True
        self.i = save
        return False

    def at_relation(self) -> bool:
        tok = self.peek()
        return tok is not None and ((tok.kind == "ch" and tok.value in "=<>")
                                    or (tok.kind == "cmd" and tok.value in RELATIONS))

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

    def unit_and_percent(self, info: Info) -> tuple[str | None, bool]:
        """The unit (one, or a product of units written one after another: ``\\mathrm{~km} \\mathrm{~s}^{-1}``) and
        the percent after a value."""
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
            micro = tok.kind == "cmd" and tok.value == "mu" and self.peek(1) is not None \
                and self.peek(1).kind == "cmd" and self.peek(1).value in TEXT_COMMANDS and self.at_group(2)
            if (tok.kind == "cmd" and tok.value in TEXT_COMMANDS and self.at_group(1)) or micro:
                save = self.i
                if micro:  # \mu\text{m}: micro-
                    self.take()
                self.take()
                words = ("u" if micro else "") + self.raw_group().replace("~", " ").replace("\\,", " ").strip()
                power = self.unit_power()
                if words in ("%", "\\%", "percent", "per cent"):
                    if percent or unit or power:
                        raise ParseError("a percent after a unit")
                    percent = True
                    continue
                key = unit_key(words + power)
                if key is None or percent or (unit is not None and (unit == "deg" or key == "deg")):
                    self.i = save
                    break
                unit = key if unit is None else "*".join(sorted([unit, key]))
                continue
            bare = self.bare_unit() if self.bare_units and unit is None and not percent else None
            if bare is not None:
                unit, self.i = bare
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
        """A unit's power: ``^2``, ``^{3}``, ``^{-1}``; "" (position kept) when none follows."""
        if self.at("ch", "^"):
            save = self.i
            self.take()
            sign = ""
            if self.at_group():
                self.take()
                if self.at("ch", "-"):
                    sign = self.take().value
                tok = self.take()
                if not self.at("ch", "}"):
                    self.i = save
                    return ""
                self.take()
            else:
                tok = self.take()
            if tok.kind == "ch" and tok.value in "123" and (sign or tok.value != "1"):
                return "^" + sign + tok.value
            self.i = save
        return ""

