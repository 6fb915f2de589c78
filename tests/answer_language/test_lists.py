"""Issue 49, point 2: a list gold (a collection of solutions) matches its values in any order and written as
``x = a \\text{ or } x = b``, for numbers, expressions and bare names such as Minerva's ``E_{1},E_{2}``; an extra,
missing or repeated value, an answer with two readings, and a reordered tuple or interval still score 0."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domains.math.answer import score

MINERVA = "E_{1},E_{2}"

RIGHT = [
    ("E_{2}, E_{1}", MINERVA), ("E_2, E_1", MINERVA), ("x = E_{1} \\text{ or } x = E_{2}", MINERVA),
    ("x = E_{2} \\text{ or } x = E_{1}", MINERVA), ("E = E_{2}, E = E_{1}", MINERVA),
    ("E_{2} \\text{ and } E_{1}", MINERVA),
    ("-2, 1", "1,-2"), ("x = -2 \\text{ or } x = 1", "1,-2"), ("x=1, x=-2", "1,-2"), ("7, 3, 5", "3, 5, 7"),
    ("5, 7, 3", "3, 5, 7"), ("2\\sqrt{2}, -2", "-2, \\sqrt{8}"), ("x = 5 \\text{ or } x = 3", "x = 3, x = 5"),
    ("(3, 4), (1, 2)", "(1, 2), (3, 4)"), ("5 \\text{ cm}, 3 \\text{ cm}", "3 \\text{ cm}, 5 \\text{ cm}"),
]

WRONG = [
    # an extra, a missing, a repeated value
    ("E_{1}, E_{2}, E_{3}", MINERVA), ("E_{1}", MINERVA), ("E_{1}, E_{1}", MINERVA), ("E_{2}, E_{3}", MINERVA),
    ("1, -2, 1", "1,-2"), ("-2, 1, -2", "1,-2"), ("1, 1", "1,-2"), ("1", "1,-2"), ("3, 5, 7, 7", "3, 5, 7"),
    ("5, 5, 3", "3, 5, 7"), ("3, 5, 8", "3, 5, 7"), ("x = 1.0000001 \\text{ or } x = -2", "1,-2"),
    # two readings: a name left of = that is a gold value, or a different name in each item
    ("E_{1} = E_{2} \\text{ or } E_{1} = E_{1}", MINERVA), ("x = E_{1} \\text{ or } y = E_{2}", MINERVA),
    ("E_{1} = x \\text{ or } E_{2} = x", MINERVA), ("A = E_{1},E_{2}", MINERVA),
    ("x = E_{1} \\text{ or } E_{2}", MINERVA), ("x = E_{1} \\text{ or } x = E_{3}", MINERVA),
    # order that matters: a tuple, an interval, a point's coordinates, items naming different unknowns
    ("(2, 1)", "(1, 2)"), ("[7, -2]", "[-2, 7]"), ("(2, 1), (4, 3)", "(1, 2), (3, 4)"), ("5, 3", "a = 3, b = 5"),
    ("3 \\text{ cm}, 5 \\text{ m}", "5 \\text{ cm}, 3 \\text{ cm}"), ("3\\%, 5", "3, 5"),
]


@pytest.mark.parametrize("answer, gold", RIGHT)
def test_a_list_in_another_order_or_as_assignments_scores_one(answer, gold):
    assert score(f"so \\boxed{{{answer}}}", gold) == 1.0


@pytest.mark.parametrize("answer, gold", WRONG)
def test_a_list_with_a_value_wrong_or_two_readings_scores_zero(answer, gold):
    assert score(f"so \\boxed{{{answer}}}", gold) == 0.0


SETTINGS = settings(max_examples=20, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
KINDS = ("{}", "\\frac{{{}}}{{43}}", "E_{{{}}}", "{}\\sqrt{{2}}")  # distinct k: distinct values, kinds mixed
SEPARATORS = (", ", " \\text{ or } ", " \\text{ and } ")


@st.composite
def solution_lists(draw):
    ks = draw(st.lists(st.integers(1, 40), min_size=2, max_size=5, unique=True))
    kinds = draw(st.lists(st.sampled_from(KINDS), min_size=len(ks), max_size=len(ks)))
    return [(kind, k) for kind, k in zip(kinds, ks)]


def _answer(values: list[str], sep: str, assign: bool) -> str:
    return sep.join(f"x = {v}" if assign else v for v in values)


@SETTINGS
@given(items=solution_lists(), data=st.data(), sep=st.sampled_from(SEPARATORS), assign=st.booleans())
def test_any_permutation_of_a_solution_list_scores_one(items, data, sep, assign):
    values = [kind.format(k) for kind, k in items]
    shuffled = data.draw(st.permutations(values))
    assert score(f"\\boxed{{{_answer(shuffled, sep, assign)}}}", ", ".join(values)) == 1.0


@SETTINGS
@given(items=solution_lists(), data=st.data(), sep=st.sampled_from(SEPARATORS), assign=st.booleans(),
       repeat=st.booleans())
def test_a_solution_list_with_one_value_changed_scores_zero(items, data, sep, assign, repeat):
    values = [kind.format(k) for kind, k in items]
    i = data.draw(st.integers(0, len(values) - 1))
    changed = list(values)
    # another value (k = 41 is in no list) or a repeat of another item standing for the one left out
    changed[i] = values[(i + 1) % len(values)] if repeat else items[i][0].format(41)
    shuffled = data.draw(st.permutations(changed))
    assert score(f"\\boxed{{{_answer(shuffled, sep, assign)}}}", ", ".join(values)) == 0.0
