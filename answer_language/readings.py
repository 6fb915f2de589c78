"""What a box says: a :class:`Reading` of :class:`Item` s of :class:`Side` s."""

from __future__ import annotations

from dataclasses import dataclass, field


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
    as_name: str | None = None  # a last side that also reads as a name (x(t)): that reading, for an equation swapped

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

@dataclass
class Info:
    """What a value was written with, gathered while it is parsed."""

    unit: str | None = None
    base: int | None = None
    pi: bool = False
    letters: bool = False
    decimal: bool = False
    other: bool = False  # anything besides one number

