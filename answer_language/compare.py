"""The comparison of two clean values, in the worker process only (it imports math-verify and sympy).

Numbers are compared **exactly**: decimals are read as the fractions they write (``0.5`` is 1/2, ``4.5000004``
is not 4.5) and two numbers are equal when they agree to 45 significant digits (a symbolic identity such as
``\\sqrt{8} = 2\\sqrt{2}`` holds; a near miss, however small, does not). math-verify alone rounds numbers to 6
decimal places, so ``4.500000400`` would pass for 4.5, ``3.14159265`` for ``\\pi`` and ``10^{-20}`` for
``1.325 \\times 10^{-27}``. Inside sets, tuples, intervals and matrices math-verify compares with 10-place rounding.
Two equations agree when one's ``lhs - rhs`` is a nonzero constant times the other's.

Only the grammar's clean LaTeX reaches math-verify (:func:`strict`): the answer as written never does. The gold's
parse is kept per worker (:func:`gold_value`) and the tests run cheapest deciding test first (:func:`agree`), with the
verdicts of the tests run in turn (:func:`equivalent_plain`, the reference ``bench/answer_cost.py --same`` checks).
"""

from __future__ import annotations

from math_verify import LatexExtractionConfig, parse, verify
from sympy import Derivative, Eq, Expr, Float, N, Rational, Symbol, simplify

from answer_language.judge import judge
from answer_language.reader import read
from answer_language.readings import Reading

LATEX_ONLY = [LatexExtractionConfig()]
_GOLDS: dict[str, Reading] = {}  # gold -> its reading (a gold is read once per worker)
_GOLD_VALUES: dict[str, list] = {}  # gold-side clean LaTeX -> math-verify's parse of it (:func:`gold_value`)
GOLD_VALUES_KEPT = 8192  # parses kept per worker, then forgotten all at once (each bundled gold gives one or a few)


def freeze(x):
    """Derivatives as plain symbols: sympy takes d\\omega/dt of a bare symbol for 0, so without this any
    coefficient in front of a derivative would pass."""
    if not hasattr(x, "atoms"):
        return x
    return x.xreplace({d: Symbol(f"_d[{d}]") for d in x.atoms(Derivative)})


def rational(x):
    return x.xreplace({f: Rational(str(f)) for f in x.atoms(Float)}) if hasattr(x, "atoms") else x


def exact(a, g) -> bool:
    """Two numbers (decimals as exact fractions) agree to 45 significant digits; symbolic values with a decimal
    or a derivative in them must simplify to the same; other values keep math-verify's verdict."""
    if not (isinstance(a, Expr) and isinstance(g, Expr)):
        return True
    has_float = bool(a.atoms(Float) or g.atoms(Float) or a.atoms(Derivative) or g.atoms(Derivative))
    a, g = rational(freeze(a)), rational(freeze(g))
    if a.is_number and g.is_number:
        try:
            gv = complex(N(g, 60))
            return abs(complex(N(a - g, 60))) <= 1e-45 * max(1.0, abs(gv))
        except (TypeError, ValueError):
            return False
    if has_float:
        try:
            return simplify(a - g) == 0
        except Exception:  # noqa: BLE001
            return False
    return True


def same_equation(a, g) -> bool:
    """Two equations agree when one's ``lhs - rhs`` is a nonzero constant times the other's (math-verify alone
    lets ``12345 I + x = T`` pass for ``I + x = T``); anything else: math-verify's verdict stands."""
    if not (isinstance(a, Eq) and isinstance(g, Eq)):
        return True
    a, g = freeze(a), freeze(g)
    try:
        ratio = simplify((a.lhs - a.rhs) / (g.lhs - g.rhs))
    except Exception:  # noqa: BLE001
        return True
    return bool(ratio.is_number and ratio != 0)


def gold_value(gold: str) -> list:
    """math-verify's parse of a gold-side clean value (LaTeX extraction only), kept per worker: a gold is compared
    with many answers. An empty parse (nothing read, or a parse cut by its timeout) is not kept."""
    value = _GOLD_VALUES.get(gold)
    if value is None:
        value = parse(f"${gold}$", extraction_config=LATEX_ONLY)
        if value:
            if len(_GOLD_VALUES) >= GOLD_VALUES_KEPT:
                _GOLD_VALUES.clear()
            _GOLD_VALUES[gold] = value
    return value


def agree(a: list, g: list) -> bool:
    """``verify(g, a) and exact(a, g) and same_equation(a, g)`` on two parses (decimals retried as the fractions
    they write), its cheapest deciding test first: a conjunction of the same tests, so the verdict is
    :func:`equivalent_plain`'s (``tests/answer_language/test_cost_path.py``), and a wrong answer stops at the first
    test it fails (math-verify's solve of an equation takes seconds where the proportion test takes milliseconds)."""
    x, y = a[0], g[0]
    if isinstance(x, Expr) and isinstance(y, Expr):
        if not exact(x, y):  # numbers: a 60-digit evaluation; exact symbolic values: True at once
            return False
        if verify(g, a):
            return True
        # decimals as the fractions they write (math-verify misses 17.5/100 = 7/40 with the float); without a
        # decimal the fractions are the values already compared
        return bool((x.atoms(Float) or y.atoms(Float)) and verify([rational(y)], [rational(x)]))
    # sets, tuples, intervals, matrices, equations: their numbers to 10 places (exact() holds for all of them)
    return same_equation(x, y) and bool(verify(g, a, float_rounding=10))


def equivalent(answer: str, gold: str) -> bool:
    """Two clean values, LaTeX extraction only, numbers exact (the gold's parse kept: :func:`gold_value`)."""
    try:
        g = gold_value(gold)
        a = parse(f"${answer}$", extraction_config=LATEX_ONLY)
        return bool(g and a) and agree(a, g)
    except Exception:  # noqa: BLE001 - model output must never end the worker
        return False


def equivalent_plain(answer: str, gold: str) -> bool:
    """:func:`equivalent` as first written, both values parsed and every test run in turn: the reference the
    reward's cost path is checked against (``bench/answer_cost.py --same``), never used to score."""
    try:
        g = parse(f"${gold}$", extraction_config=LATEX_ONLY)
        a = parse(f"${answer}$", extraction_config=LATEX_ONLY)
        if not (g and a):
            return False
        if isinstance(a[0], Expr) and isinstance(g[0], Expr):
            ok = verify(g, a) or verify([rational(g[0])], [rational(a[0])])
        else:
            ok = verify(g, a, float_rounding=10)
        return bool(ok) and exact(a[0], g[0]) and same_equation(a[0], g[0])
    except Exception:  # noqa: BLE001
        return False


def magnitude(latex: str):
    """A real number's value as a float, None for anything else."""
    try:
        value = gold_value(latex)[0]  # only ever asked of a gold's value
        return float(value) if isinstance(value, Expr) and value.is_number and value.is_real else None
    except Exception:  # noqa: BLE001
        return None


def magnitude_plain(latex: str):
    """:func:`magnitude` as first written (the value parsed each time): for :func:`strict`'s reference path."""
    try:
        value = parse(f"${latex}$", extraction_config=LATEX_ONLY)[0]
        return float(value) if isinstance(value, Expr) and value.is_number and value.is_real else None
    except Exception:  # noqa: BLE001
        return None


def strict(answer: str, gold: str, reference: bool = False) -> bool:
    """The reward's check: the answer and the gold read by the grammar, the readings judged. ``reference``: the
    clean values compared as first written (:func:`equivalent_plain`, :func:`magnitude_plain`), the same verdicts
    at a higher cost, to check the cost path against (``bench/answer_cost.py --same``)."""
    equivalent_, magnitude_ = (equivalent_plain, magnitude_plain) if reference else (equivalent, magnitude)
    try:
        a = read(answer)
        if not a.ok:
            return False
        if gold not in _GOLDS:
            _GOLDS[gold] = read(gold)
        g = _GOLDS[gold]
        if g.ok:
            return judge(a, g, equivalent_, magnitude_)
        # a gold outside the answer language (np.arcsin(10/13), a stray $ $): one plain value against it as written
        if a.kind != "math" or a.label or a.approx or len(a.items) != 1 or a.items[0].rels:
            return False
        side = a.items[0].sides[0]
        return not (side.unit or side.percent or side.base) and equivalent_(side.latex, gold)
    except Exception:  # noqa: BLE001
        return False


def lenient(answer: str, gold: str) -> bool:
    """Plain math-verify, default extraction, no grammar (how published tables score)."""
    try:
        return bool(verify(parse(f"${gold}$"), parse(answer)))
    except Exception:  # noqa: BLE001
        return False
