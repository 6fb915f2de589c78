"""The reward's cost path (issue 49): the gold's parse kept, the cheapest deciding test first, math-verify's decimal
retry only where there is a decimal. Same verdicts as the path as first written (``strict(..., reference=True)``);
over every answer of ``bench/answer_cost.py`` and reward_hunt's families: ``bench/answer_cost.py --same``."""

import pytest

from answer_language import compare

# (answer, gold) clean values through every branch of compare.agree
PAIRS = [
    ("5", "5"), ("12345", "5"), ("0.5", "\\frac{1}{2}"), ("\\frac{17.5}{100}", "\\frac{7}{40}"),
    ("4.500000400", "4.5"), ("1.00000000000000000000000000000000000000000000000001", "1"),
    ("\\frac{10000001}{10000000}", "1"), ("3.14159265", "\\pi"), ("\\sqrt{8}", "2 \\sqrt{2}"),
    ("1.25 \\cdot P", "\\frac{5}{4} \\cdot P"), ("1.25 \\cdot P", "\\frac{5}{3} \\cdot P"), ("12345", "x + 1"),
    ("x^{2} - 1", "\\left(x - 1\\right) \\cdot \\left(x + 1\\right)"), ("2 \\cdot y = 4 \\cdot x", "y = 2 \\cdot x"),
    ("12345 \\cdot I + x = T", "I + x = T"), ("y = 3 \\cdot x", "y = 2 \\cdot x"), ("3, 1, 2", "1, 2, 3"),
    ("\\left(1, 2\\right)", "\\left(2, 1\\right)"), ("\\left[-2, 7\\right]", "\\left[-2, 7\\right]"),
    ("\\left(0.5, 2\\right)", "\\left(\\frac{1}{2}, 2\\right)"), ("\\frac{a}{b}", "\\frac{b}{a}"), ("", "5"),
    ("\\frac{", "5"), ("5", "\\frac{"),
]

# golds of each kind, each with answer_cost's five forms (the gold, x = g, \text{Answer: } g, a wrong value, g dogs)
GOLDS = ["18", "\\frac{3}{4}", "0.25", "2 \\sqrt{2}", "50\\%", "[-2, 7]", "(1, 2)", "1, 3", "x^2 - 1",
         "y = -2x", "12.5 \\text{ cm}", "\\text{(C)}", "\\text{East}", "4.5 \\times 10^{33}", "1 \\pm \\sqrt{19}"]


@pytest.mark.parametrize("answer, gold", PAIRS)
def test_the_cost_path_keeps_every_verdict(answer, gold):
    assert compare.equivalent(answer, gold) == compare.equivalent_plain(answer, gold)


def test_the_cost_path_keeps_the_rewards_verdicts():
    forms = [(content, gold) for gold in GOLDS for content in
             (gold, f"x = {gold}", f"\\text{{Answer: }} {gold}", "12345", f"{gold} dogs", f"{gold}.0", f"{gold} + 1")]
    verdicts = [(a, g, compare.strict(a, g), compare.strict(a, g, reference=True)) for a, g in forms]
    assert [v for v in verdicts if v[2] != v[3]] == []
    assert sum(v[2] for v in verdicts) >= 3 * len(GOLDS) - 3  # the right forms still score (not all False)


@pytest.fixture
def calls(monkeypatch):
    """How often math-verify's parse and verify run (the real functions, counted)."""
    seen = {"parse": [], "verify": 0}
    parse, verify = compare.parse, compare.verify

    def counted_parse(text, **kw):
        seen["parse"].append(text)
        return parse(text, **kw)

    def counted_verify(*args, **kw):
        seen["verify"] += 1
        return verify(*args, **kw)

    monkeypatch.setattr(compare, "parse", counted_parse)
    monkeypatch.setattr(compare, "verify", counted_verify)
    monkeypatch.setattr(compare, "_GOLD_VALUES", {})
    return seen


def test_a_gold_is_parsed_once_for_many_answers(calls):
    for answer in ("\\frac{7}{8}", "0.875", "12345", "\\frac{14}{16}"):
        compare.equivalent(answer, "\\frac{7}{8}")
    assert calls["parse"].count("$\\frac{7}{8}$") == 2  # once as the gold, once as an answer


def test_a_wrong_equation_stops_before_math_verifys_solve(calls):
    # the swapped reading of `... = f(t) cos theta(t) dogs` cost math-verify's solve 5 s (its timeout), and the
    # worker a restart; the proportion test refuses it first
    answer = ("f \\left(t\\right) \\cdot \\cos \\theta  \\cdot \\left(t\\right) \\cdot d \\cdot o \\cdot g \\cdot s"
              " = m \\cdot l \\cdot \\ddot{\\theta } \\cdot \\left(t\\right) - m \\cdot g \\cdot \\sin \\theta  \\cdot"
              " \\left(t\\right)")
    gold = ("m \\cdot l \\cdot \\ddot{\\theta } \\cdot \\left(t\\right) - m \\cdot g \\cdot \\sin \\theta  \\cdot "
            "\\left(t\\right) = f \\left(t\\right) \\cdot \\cos \\theta  \\cdot \\left(t\\right)")
    assert compare.equivalent(answer, gold) is False
    assert calls["verify"] == 0


def test_a_wrong_number_stops_before_math_verify(calls):
    assert compare.equivalent("4.500000400", "4.5") is False
    assert compare.equivalent("12345", "5") is False
    assert calls["verify"] == 0
    assert compare.equivalent("0.5", "\\frac{1}{2}") is True
    assert calls["verify"] == 1


def test_the_decimal_retry_runs_only_with_a_decimal(calls):
    assert compare.equivalent("12345", "x + 1") is False
    assert calls["verify"] == 1  # no decimal: the retry would compare the same values again
    assert compare.equivalent("1.25 \\cdot P", "\\frac{5}{3} \\cdot P") is False
    assert compare.equivalent("\\frac{17.5}{100}", "\\frac{7}{40}") is True
