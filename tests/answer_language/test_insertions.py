"""Issue 49, point 5: families generated from the grammar. Into a right answer (a gold in a wrapper), insert a
word, a digit, a separator or a second value anywhere; each must score 0 unless it keeps one reading equal to the
gold (a thousands separator in the right place is the one such insertion here). Hypothesis picks the gold, the
wrapper, the insertion and its position; ``bench/reward_hunt.py`` runs the same insertions over every bundled gold
(the ``gen_*`` families)."""

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domains.math.answer import score

SETTINGS = settings(max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

integers = st.integers(min_value=-99999, max_value=99999).map(str)
decimals = st.builds(lambda a, b: f"{a}.{b}", st.integers(0, 9999), st.integers(1, 999).map(str).filter(
    lambda s: s[-1] != "0"))
fractions = st.builds(lambda p, q: f"\\frac{{{p}}}{{{q}}}", st.integers(1, 99), st.integers(2, 99))
roots = st.builds(lambda a, b: f"{a}\\sqrt{{{b}}}", st.integers(2, 9), st.sampled_from([2, 3, 5, 6, 7, 10, 11]))
golds = st.one_of(integers, decimals, fractions, roots)
wrappers = st.sampled_from(["{}", "\\textbf{{{}}}", "${}$", "\\displaystyle {}", "x = {}", "\\text{{Answer: }} {}"])
words = st.sampled_from(["dogs", "so", "not", "no", "maybe", "apples", "never", "or", "and", "pi", "e", "i"])
COMMAND = re.compile(r"\\[A-Za-z]+|\\.")


def _boundaries(text: str) -> list[int]:
    inside = {k for m in COMMAND.finditer(text) for k in range(m.start() + 1, m.end())}
    return [k for k in range(len(text) + 1) if k not in inside]


def _boxed(text: str) -> str:
    return f"so the answer is \\boxed{{{text}}}"


@SETTINGS
@given(gold=golds, wrap=wrappers, word=words, text=st.booleans(), data=st.data())
def test_a_word_inserted_anywhere_scores_zero(gold, wrap, word, text, data):
    right = wrap.format(gold)
    k = data.draw(st.sampled_from(_boundaries(right)))
    insert = f"\\text{{ {word} }}" if text else f" {word} "
    assert score(_boxed(right[:k] + insert + right[k:]), gold) == 0.0


@SETTINGS
@given(gold=golds, wrap=wrappers, digit=st.integers(1, 9), data=st.data())
def test_a_digit_inserted_into_a_number_scores_zero(gold, wrap, digit, data):
    right = wrap.format(gold)
    slots = sorted({k for m in re.finditer(r"\d+", right) for k in range(m.start(), m.end() + 1)})
    k = data.draw(st.sampled_from(slots))
    assert score(_boxed(right[:k] + str(digit) + right[k:]), gold) == 0.0


@SETTINGS
@given(gold=golds, wrap=wrappers, sep=st.sampled_from([",", "{,}", "\\,", " ", ".", "\u00b7", "\u2013", ";", "\\!",
                                                       "~", "\\ ", "\\;"]), data=st.data())
def test_a_separator_inside_a_number_scores_zero_unless_it_groups_thousands(gold, wrap, sep, data):
    right = wrap.format(gold)
    runs = [m for m in re.finditer(r"\d{2,}", right)]
    if not runs:
        return
    run = data.draw(st.sampled_from(runs))
    k = data.draw(st.integers(run.start() + 1, run.end() - 1))
    grouping = (run.end() - k) % 3 == 0 and right[run.start()] != "0" and right[run.start() - 1:run.start()] != "."
    result = score(_boxed(right[:k] + sep + right[k:]), gold)
    assert result == 0.0 or grouping, (right[:k] + sep + right[k:], gold)


@SETTINGS
@given(gold=golds, wrap=wrappers, second=st.sampled_from([", 7", " 7", " = 7", " \\text{ or } 7", "; 7",
                                                          " \\quad 7", " 12345", "\\text{ (12345)}"]), data=st.data())
def test_a_second_value_inserted_anywhere_scores_zero(gold, wrap, second, data):
    right = wrap.format(gold)
    k = data.draw(st.sampled_from(_boundaries(right)))
    assert score(_boxed(right[:k] + second + right[k:]), gold) == 0.0


@SETTINGS
@given(gold=golds, wrap=wrappers)
def test_the_right_answer_itself_scores_one(gold, wrap):
    assert score(_boxed(wrap.format(gold)), gold) == 1.0
