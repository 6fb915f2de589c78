"""The parser's cursor over the tokens: peek, take, expect, raw groups."""

from __future__ import annotations

from answer_language.tokens import ParseError, Tok, detok


class Cursor:
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
            out.append(detok(tok))
        raise ParseError("an unclosed group")

    def nest(self):
        self.depth += 1
        if self.depth > 60:
            raise ParseError("nested too deeply")

    def at_group(self, k: int = 0) -> bool:
        tok = self.peek(k)
        return tok is not None and tok.kind == "ch" and tok.value == "{"

