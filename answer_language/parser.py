"""The parser: a cursor over the tokens with the rules for items and sides, names, and values."""

from __future__ import annotations

from answer_language.cursor import Cursor
from answer_language.expressions import Expressions
from answer_language.names import Names
from answer_language.sides import Sides


class Parser(Sides, Names, Expressions, Cursor):
    """One box's tokens, read by the rules of the answer language (the README's grammar)."""
