"""Issue 49, point 2: right forms a careful grader accepts score 1 (each scored 0 before), and their near misses
still score 0."""

import pytest

from domains.math.answer import score

RIGHT = [
    ("\\text{Answer: } 9", "9"), ("\\text{Final answer:} x = 3", "3"), ("\\text{The answer is} 12", "12"),
    ("\\text{nine}", "9"), ("\\text{twenty-five}", "25"), ("\\text{one hundred and five}", "105"),
    ("2.88e4", "28800"), ("1.325e-27", "1.325 \\times 10^{-27}"),
    ("0.\\overline{3}", "\\frac13"), ("0.1\\overline{6}", "\\frac16"),
    ("(52)_8", "52_8"), ("C)", "\\text{(C)}"),
    ("-2 \\le x \\le 7", "[-2, 7]"), ("x > 3", "(3, \\infty)"), ("7 \\ge x > -2", "(-2, 7]"),
    ("x < -2 \\text{ or } x > 7", "(-\\infty, -2) \\cup (7, \\infty)"),
    ("e^{-t} = x(t)", "x(t) = e^{-t}"), ("5 = x", "x = 5"),
    ("3, 2", "2, 3"), ("x = 2 \\text{ or } x = 3", "2, 3"),
    ("1.6 \\mathrm{~km} \\mathrm{~s}^{-1}", "1.6"), ("5\\,\\mu\\text{m}", "5"), ("9 \\text{ dollars}", "9"),
    ("9 dollars", "9"), ("5 cm", "5"), ("5 square feet", "5 \\text{ ft}^2"), ("\\text{\\$}9", "9"),
    ("\\approx 4.5 \\times 10^{33}", "4.5 \\times 10^{33}"),
    ("\\approx 4.5e33", "4.5 \\times 10^{33}"), ("45^\\circ", "\\frac{\\pi}{4} \\text{ rad}"),
    ("\\frac{\\pi}{4} \\text{ radians}", "45^\\circ"), ("\\approx 3 \\times 10^{8}", "3 \\times 10^{8}"),
]

NEAR_MISSES = [
    ("-2 < x \\le 7", "[-2, 7]"), ("x \\le 7", "[-2, 7]"), ("\\text{ten}", "9"), ("\\text{nine nine}", "99"),
    ("D)", "\\text{(C)}"), ("2.88e5", "28800"), ("0.\\overline{3}", "0.3"), ("e^{-t} = x(t) + 1", "x(t) = e^{-t}"),
    ("(52)_9", "52_8"), ("1.6 \\mathrm{~km} \\mathrm{~s}^{-1}", "1.7"), ("\\text{Answer: } 9, 10", "9"),
    ("2e3x", "2000"), ("45^\\circ", "\\frac{\\pi}{4}"), ("46^\\circ", "\\frac{\\pi}{4} \\text{ rad}"),
    ("\\approx 40", "40"), ("9 dogs", "9"), ("\\text{9 cm}", "9"), ("5 m", "5 \\text{ cm}"),
    ("\\approx 3 \\times 10^{9}", "3 \\times 10^{8}"),
    ("y < 3 \\text{ or } x > 7", "(-\\infty, 3) \\cup (7, \\infty)"),
]


@pytest.mark.parametrize("answer, gold", RIGHT)
def test_a_right_form_scores_one(answer, gold):
    assert score(f"so \\boxed{{{answer}}}", gold) == 1.0


@pytest.mark.parametrize("answer, gold", NEAR_MISSES)
def test_its_near_miss_scores_zero(answer, gold):
    assert score(f"so \\boxed{{{answer}}}", gold) == 0.0
