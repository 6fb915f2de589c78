"""Whether an answer's reading says what the gold's reading says."""

from __future__ import annotations

import re

from answer_language.readings import Item, Reading, Side


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
    if {a.unit, g.unit} == {"deg", "rad"}:  # the gold's unit says which: 45^\\circ for \\frac{\\pi}{4} \\text{ rad}
        to = "\\frac{{({}) \\pi}}{{180}}" if a.unit == "deg" else "\\frac{{180 ({})}}{{\\pi}}"
        return [(to.format(a.latex), g.latex)]
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
    equivalence of two clean values (math-verify, exact numbers: :mod:`answer_language.compare`),
    ``magnitude(latex)`` a number's value (None for anything else)."""
    if not (a.ok and g.ok):
        return False
    if g.kind == "choice":  # the choice alone: a value after a label is read against a value gold only
        return a.kind == "choice" and a.label == g.label
    if g.kind == "text":
        if a.kind == "text":
            return a.text == g.text
        side = a.items[0].sides[-1] if a.kind == "math" and len(a.items) == 1 and not a.items[0].rels else None
        return side is not None and re.sub(r"\\cdot|\s", "", side.latex).casefold() == g.text.replace(" ", "")
    if a.kind == "text":
        return False
    if a.kind == "choice":
        if not a.extra.get("letter"):
            return False
        a = Reading(items=(Item((Side(latex=a.label, letters=True),)),))
    interval = _as_interval(a) if _is_interval(g) else None
    if interval is not None:  # -2 \\le x \\le 7 for [-2, 7]
        return equal(interval, g.items[0].sides[0].latex)
    gold_symbolic = any(s.letters for it in g.items for s in it.sides)
    gold_claims = [c for it in g.items for c in claims(it, False)]
    if not gold_claims:
        return False
    # a gold in decimals or in scientific notation (Minerva's 3 \\times 10^{8}) is a measured value: \\approx may stand
    gold_decimal = any(s.decimal or re.search(r"\\times 10\^", s.latex) for s in gold_claims)
    if (a.approx or any("\\approx" in it.rels for it in a.items)) and not gold_decimal:
        return False  # a hedge: \\approx only before a decimal, for a gold written in decimals
    if len(g.items) == 1 and g.items[0].rels:
        gold_item = g.items[0]
        if len(a.items) == 1 and a.items[0].rels and "\\approx" not in a.items[0].rels:
            ai = a.items[0]
            if len(ai.rels) == len(gold_item.rels) and (equal(ai.latex, gold_item.latex) or (
                    ai.rels == ("=",) and equal(_swapped(ai).latex, gold_item.latex))):
                return True  # the same equation or relation, written another way (or with its sides swapped)
        if not (gold_item.sides[0].name and len(gold_item.rels) == 1 and gold_item.rels[0] in ("=", "\\in")):
            return False
        return _claims_match(a, Reading(items=(Item((gold_item.sides[-1],)),)), gold_symbolic, equal, magnitude)
    return _claims_match(a, g, gold_symbolic, equal, magnitude)


def _swapped(item: Item) -> Item:
    """``value = name`` as ``name = value`` (a last side that reads as a name, ``x(t)``, read as one)."""
    last = item.sides[-1]
    return Item((Side(latex=last.as_name or last.latex), item.sides[0]), item.rels)


_LOWER = {"<": "(", "\\le": "["}
_UPPER = {"<": ")", "\\le": "]"}
_FLIP = {">": "<", "\\ge": "\\le"}


def _is_interval(g: Reading) -> bool:
    """A gold that is one interval or a union of intervals (``[-2, 7]``, ``(-\\infty, 3) \\cup (5, \\infty)``)."""
    if g.kind != "math" or len(g.items) != 1 or g.items[0].rels:
        return False
    return re.fullmatch(r"\\left[\[(].*,.*\\right[\])]", g.items[0].sides[0].latex) is not None


def _interval(item: Item) -> str | None:
    """The interval an inequality in one variable writes (``a < x \\le b``, ``x \\ge a``, ``a > x``), None for
    anything else."""
    sides, rels = list(item.sides), list(item.rels)
    if all(r in _FLIP for r in rels):  # b > x > a: read right to left
        sides, rels = sides[::-1], [_FLIP[r] for r in rels[::-1]]
    if any(r not in _LOWER for r in rels):
        return None
    var = [k for k, side in enumerate(sides) if re.fullmatch(r"[A-Za-z]", side.latex)]
    if len(var) != 1 or any(side.unit or side.percent for side in sides):
        return None
    k = var[0]
    if len(sides) == 3 and k == 1:
        return f"\\left{_LOWER[rels[0]]}{sides[0].latex}, {sides[2].latex}\\right{_UPPER[rels[1]]}"
    if len(sides) == 2 and k == 0:
        return f"\\left(-\\infty, {sides[1].latex}\\right{_UPPER[rels[0]]}"
    if len(sides) == 2 and k == 1:
        return f"\\left{_LOWER[rels[0]]}{sides[0].latex}, \\infty\\right)"
    return None


def _as_interval(a: Reading) -> str | None:
    """The interval (or union) an answer of inequalities writes, None when it is not all inequalities in one
    variable."""
    if a.kind != "math" or not a.items or not all(it.rels for it in a.items):
        return None
    parts = [_interval(it) for it in a.items]
    names = {re.sub(r"[^A-Za-z]", "", s.latex) for it in a.items for s in it.sides
             if re.fullmatch(r"[A-Za-z]", s.latex)}
    return None if None in parts or len(names) != 1 else " \\cup ".join(parts)


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
    # a list gold: each answer item one claim, the values paired off one to one with the gold's
    if len(a.items) == 1:
        cs = claims(a.items[0], gold_symbolic)
        gold_list = ", ".join(it.sides[-1].latex for it in g.items)
        return len(cs) == 1 and not cs[0].percent and equal(cs[0].latex, gold_list)
    return _list_match(a, g, gold_symbolic, equal, magnitude)


MAX_REORDERED = 12  # a longer list is compared in the order written (pairing off n values costs up to n^2 checks)


def _list_values(a: Reading, g: Reading, gold_symbolic: bool, equal) -> list[Side] | None:
    """The one value each item of list answer ``a`` gives, None when an item gives none, several or a percent.
    In ``x = a \\text{ or } x = b`` the name left of ``=`` in every item names the unknown and claims nothing,
    even against a gold in letters (``E_{1}, E_{2}``: there every item must be ``x = value``, the same ``x``); a
    name that is one of the gold's values (``E_{1} = E_{2}``) may be the answer itself: two readings, 0."""
    lefts = {it.sides[0].latex for it in a.items if it.rels and it.sides[0].name}
    if gold_symbolic and any(equal(name, it.sides[-1].latex) for name in lefts for it in g.items):
        return None
    unknown = None
    if gold_symbolic and len(lefts) == 1 and all(it.rels == ("=",) and it.sides[0].name for it in a.items):
        unknown = next(iter(lefts))  # every item x = value: not A = E_{1}, E_{2}, where A may be one of the values
    out = []
    for it in a.items:
        item = Item(it.sides[1:], it.rels[1:]) if it.rels and it.sides[0].latex == unknown else it
        cs = claims(item, gold_symbolic)
        if len(cs) != 1 or cs[0].percent:
            return None
        out.append(cs[0])
    return out


def _list_match(a: Reading, g: Reading, gold_symbolic: bool, equal, magnitude) -> bool:
    """A list gold against a list answer. A gold that is a comma list of values (``1,-2``, ``E_{1},E_{2}``; items
    with no name, or one shared name: ``x = 1, x = -2``) is a collection of solutions: the answer scores when its
    values pair off one to one with the gold's, in any order (a value repeated for a missing one, an extra or a
    missing value: 0). A gold whose items name different unknowns (``a = 3, b = 5``) is compared in order. A tuple,
    point or interval is one value (``(1, 2)``), never reordered: math-verify compares it in order."""
    values = _list_values(a, g, gold_symbolic, equal)
    if values is None or len(values) != len(g.items):
        return False
    gold = [it.sides[-1] for it in g.items]
    names = {it.sides[0].latex for it in g.items if it.rels}
    n = len(gold)
    memo: dict[tuple[int, int], bool] = {}

    def same(i: int, j: int) -> bool:
        if (i, j) not in memo:
            memo[(i, j)] = any(equal(x, y) for x, y in (_side_pairs(values[i], gold[j], magnitude) or []))
        return memo[(i, j)]

    if all(same(i, i) for i in range(n)):
        return True  # in the order written: n checks
    if len(names) > 1 or n > MAX_REORDERED:
        return False
    owner: list[int | None] = [None] * n  # gold value j -> the answer value paired with it

    def place(i: int, seen: set[int]) -> bool:  # an augmenting path (Kuhn's matching), the written order first
        for j in sorted(range(n), key=lambda j: j != i):
            if j not in seen and same(i, j):
                seen.add(j)
                if owner[j] is None or place(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    return all(place(i, set()) for i in range(n))
