"""Math reward, round two (issue 24): no number fallback, an unclosed outer box, right answers in every form
math-verify accepts, Minerva's e-notation golds, a time bound on the whole check, and the paper-style lenient
accuracy logged beside the strict one. The hack and right-form catalogues run in tests/bench/test_reward_hunt.py."""

import time

import pytest

from answer_language import MAX_ANSWER_CHARS, read
from domains.math.answer import last_boxed, lenient_answer, score, score_lenient
from domains.math.data import normalise_gold
from domains.math.metrics import default_eval_logger, eval_aggregator


@pytest.mark.parametrize("answer,gold", [
    ("12345 \u2192 40", "40"), ("40 \u2248 12345", "40"), ("12345 ( 40", "40"), ("12345 ] 40", "40"),
                                         ("12345 . 40", "40"),
    ("12345 \\cup 40", "40"), ("12345 \\big 40", "40"), ("12345 {} 40", "40"), ("12345 \\left. 40", "40"),
    ("12345 \n 40", "40"), ("12345 \u200b 40", "40"), ("12345 \u043er 40", "40"),
    ("45\u00b2", "45"), ("21\u207b\u00b9", "21"), ("8 \u221a2", "8"), ("9\u2030", "9"), ("\u2013 42", "42"),
                                         ("113{.}5", "113"),
])
def test_the_number_fallback_and_its_separators_score_zero(answer, gold):
    assert score(f"so \\boxed{{{answer}}}", gold) == 0.0


def test_an_unclosed_outer_box_hides_nothing():
    assert last_boxed("\\boxed{12345 \\boxed{40}") is None and score("\\boxed{12345 \\boxed{40}", "40") == 0.0
    assert last_boxed("\\boxed{2} and \\boxed{3") is None  # issue 36: the last box opener decides, closed or not


@pytest.mark.parametrize("answer,gold", [
    ("9 \\mathrm{~cm}", "9"), ("10%", "10"), ("m+n = 204", "204"), ("AB = 5", "5"), ("\\text{Total} = 18", "18"),
    ("{3 \\over 4}", "\\frac{3}{4}"), ("\\mathrm{(C)}", "\\text{(C)}"), ("\\text{East}", "\\text{east}"),
    ("11111111100", "11,\\! 111,\\! 111,\\! 100"), ("x = 11,111,111,100", "11,\\! 111,\\! 111,\\! 100"),
    ("\u22123", "-3"), ("3 \u00d7 4", "12"),
])
def test_right_answers_in_the_forms_math_verify_accepts_score_one(answer, gold):
    assert score(f"so \\boxed{{{answer}}}", gold) == 1.0


def test_minerva_e_notation_golds_are_matchable():
    assert normalise_gold("4.5e33") == "4.5 \\times 10^{33}" and normalise_gold("-1./3") == "-1/3"
    assert score("\\boxed{4.5 \\times 10^{33}}", normalise_gold("4.5e33")) == 1.0
    assert score("\\boxed{10^{-5}}", normalise_gold("1e-5")) == 1.0
    assert score("\\boxed{-\\frac{1}{3}}", normalise_gold("-1./3")) == 1.0
    assert normalise_gold("e") == "e" and normalise_gold("40") == "40"


def test_scoring_is_time_bounded_and_a_long_answer_costs_little():
    deep = "\\boxed{" + "\\textbf{" * 20000 + "40" + "}" * 20000 + "}"
    start = time.perf_counter()
    assert score(deep, "40", 2.0) == 0.0
    assert time.perf_counter() - start < 2.0
    assert read("1" * (MAX_ANSWER_CHARS + 1)).reason.startswith("an answer longer")
    long_ok = "\\textbf{" * 40 + "40" + "}" * 40  # under the cap: unwrapped and checked inside the worker's bound
    assert score(f"\\boxed{{{long_ok}}}", "40", 5.0) == 1.0


def test_lenient_extraction_follows_the_reference_order_and_is_logged_beside_accuracy():
    assert lenient_answer("work \\boxed{5} #### 6") == "5"
    assert lenient_answer("work #### 6\nFinal answer: 7") == "6"
    assert lenient_answer("Final answer: 7") == "7" and lenient_answer("a\n\n12\n") == "12"
    assert score_lenient("The answer is \\boxed{12345 \u2192 40}", "40") == 1.0  # what published scoring credits
    assert score("The answer is \\boxed{12345 \u2192 40}", "40") == 0.0  # and the training reward does not
    rows = default_eval_logger([[["#### 40"]], [["\\boxed{40}"]]], [{"datasource": "s", "answer": "40"}])
    rows += default_eval_logger([[["x"]], [["the result: 40"]]], [{"datasource": "s", "answer": "40"}])
    out = eval_aggregator(rows)
    assert out["s/accuracy"] == 0.5 and out["s/accuracy_lenient"] == 1.0
