"""The math answer grammar (issue 36), property-based: answers generated from the grammar score 1 against their
gold, and perturbations of them (a word appended, a digit changed, a later box opened, a stray percent, a mark,
a second value) score 0, so the next hack family is found by the suite rather than by a hunt. Also: every bundled
gold is in the answer language, and nothing a model writes makes the parser raise."""

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from answer_language import MULTIPLIERS, NUMBER_WORDS, UNITS, last_box, read, unit_key
from domains.math.answer import score
from domains.math.data import normalise_gold

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = settings(max_examples=20, deadline=None, database=None,  # nothing written to .hypothesis/
                    suppress_health_check=[HealthCheck.too_slow])

integers = st.integers(min_value=-99999, max_value=99999)
naturals = st.integers(min_value=2, max_value=99999)
decimals = st.builds(lambda a, b: f"{a}.{b}", st.integers(0, 999),
                     st.integers(1, 999).map(str).filter(lambda s: s[-1] != "0"))
fractions = st.builds(lambda p, q: f"\\frac{{{p}}}{{{q}}}", st.integers(1, 99), st.integers(2, 99))
roots = st.builds(lambda a, b: f"{a}\\sqrt{{{b}}}", st.integers(2, 9), st.sampled_from([2, 3, 5, 6, 7, 10, 11]))
golds = st.one_of(integers.map(str), decimals, fractions, roots)
unit_words = st.sampled_from(["cm", "meters", "km", "square feet", "dollars", "cents", "hours", "minutes", "kg",
                              "inches", "miles per hour", "m/s", "liters", "degrees"])
wrappers = st.sampled_from(["{}", "\\textbf{{{}}}", "${}$", "\\displaystyle {}", "{}.", "\\boldsymbol{{{}}}",
                            "\\mathbf{{{}}}"])
# lowercase words that are no unit, no multiplier and no list connective
words = st.text("abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8).filter(
    lambda w: unit_key(w) is None and w not in MULTIPLIERS and w not in ("or", "and"))


def boxed(content: str) -> str:
    return f"The work ... so the answer is \\boxed{{{content}}}"


@SETTINGS
@given(gold=golds, wrap=wrappers)
def test_a_gold_in_any_wrapper_scores(gold, wrap):
    assert score(boxed(wrap.format(gold)), gold) == 1.0


@SETTINGS
@given(gold=golds, unit=unit_words, space=st.sampled_from([" ", "\\,", "~", "\\ ", "\u00a0"]),
       cmd=st.sampled_from(["\\text", "\\mathrm", "\\mbox"]))
def test_a_unit_from_the_vocabulary_may_follow_the_value(gold, unit, space, cmd):
    assert score(boxed(f"{gold}{space}{cmd}{{{unit}}}"), gold) == 1.0


@SETTINGS
@given(gold=golds, lhs=st.sampled_from(["x", "a_1", "f(3)", "m+n", "x_1+x_2", "AB", "\\text{Total}", "\\angle A"]))
def test_a_name_may_stand_before_the_value(gold, lhs):
    assert score(boxed(f"{lhs} = {gold}"), gold) == 1.0


@SETTINGS
@given(k=st.integers(1, 999), word=st.sampled_from(["thousand", "k"]))
def test_a_multiplier_word_changes_the_value(k, word):
    assert score(boxed(f"{k} \\text{{ {word}}}"), str(k * 1000)) == 1.0
    assert score(boxed(f"{k} \\text{{ {word}}}"), str(k)) == 0.0


@SETTINGS
@given(n=st.integers(1000, 10 ** 9), form=st.sampled_from(["{:,}", "\\${:,}", "{:,} \\text{{ dollars}}"]))
def test_thousands_separators(n, form):
    assert score(boxed(form.format(n)), str(n)) == 1.0


@SETTINGS
@given(gold=golds, word=words, cmd=st.sampled_from(["\\text", "\\mathrm", "\\textbf", "\\mbox"]))
def test_a_word_that_is_no_unit_scores_zero(gold, word, cmd):
    assert score(boxed(f"{gold} {cmd}{{ {word}}}"), gold) == 0.0


@SETTINGS
@given(n=naturals, data=st.data())
def test_a_changed_digit_scores_zero(n, data):
    digits = str(n)
    i = data.draw(st.integers(0, len(digits) - 1))
    new = data.draw(st.sampled_from([d for d in "0123456789" if d != digits[i] and not (i == 0 and d == "0")]))
    assert score(boxed(digits[:i] + new + digits[i + 1:]), digits) == 0.0


@SETTINGS
@given(gold=golds, wrong=naturals, opener=st.sampled_from(["\\boxed{{{}", "\\boxed {}", "\\framebox{{{}}}",
                                                              "\\colorbox{{red}}{{{}}}", "\\bbox{{{}}}", "\\fbox{{{}"]))
def test_a_later_box_decides(gold, wrong, opener):
    assume(str(wrong) != gold)
    text = f"First \\boxed{{{gold}}}. On reflection ... {opener.format(wrong)}"
    assert score(text, gold) == 0.0


@SETTINGS
@given(n=st.integers(10, 99999), data=st.data())
def test_a_stray_percent_scores_zero(n, data):
    digits = str(n)
    i = data.draw(st.integers(0, len(digits) - 1))
    assert score(boxed(digits[:i] + "\\%" + digits[i:]), digits) == 0.0


@SETTINGS
@given(gold=golds, wrong=naturals, how=st.sampled_from(["{g} {w}", "{g}, {w}", "{w} = {g}", "{g} \\approx {w}",
                                                           "{g}'", "{g}''", "{g} \\text{{ or }} {w}", "\\pi = {g}",
                                                           "{g} \\pm {w}", "{g}\\\\{w}", "{g} % {w}"]))
def test_a_second_value_or_a_mark_scores_zero(gold, wrong, how):
    assume(str(wrong) != gold)
    assert score(boxed(how.format(g=gold, w=wrong)), gold) == 0.0


@SETTINGS
@given(p=st.integers(1, 99), q=st.sampled_from([2, 4, 5, 8, 10, 20, 25, 40, 50]))
def test_a_percent_is_a_hundredth_for_a_proportion(p, q):
    if p >= q:
        p = p % q or 1
    percent = f"{p * 100 / q:g}"
    assert score(boxed(f"{percent}\\%"), f"\\frac{{{p}}}{{{q}}}") == 1.0
    assert score(boxed(f"{p / q:g}\\%"), f"\\frac{{{p}}}{{{q}}}") == 0.0  # 0.5% is not 0.5


@SETTINGS
@given(text=st.text(max_size=200))
def test_the_parser_never_raises(text):
    reading = read(text)
    assert reading.ok or reading.reason
    last_box(text)


@SETTINGS
@given(text=st.text(alphabet="\\{}[]()$%^_=,.0123456789abx +-~", max_size=80))
def test_the_parser_never_raises_on_latex_shaped_noise(text):
    reading = read(text)
    assert reading.ok or reading.reason
    assert last_box("\\boxed{" + text) is None or "}" in text  # an unclosed box is no answer


def test_every_bundled_gold_is_in_the_answer_language():
    golds = []
    for suite, key in (("math500", "answer"), ("gsm8k", "final"), ("cmath", "answer"), ("aime24", "answer"),
                       ("aime25", "answer"), ("amc23", "answer"), ("minerva_math", "answer")):
        lines = (ROOT / "data" / suite / "test.jsonl").read_text().splitlines()
        rows = [json.loads(line) for line in lines if line.strip()]
        golds += [normalise_gold(str(r[key])) for r in rows]
    assert len(golds) == 2791
    refused = [(g, read(g).reason) for g in golds if not read(g).ok]
    assert refused == []


def test_the_unit_vocabulary_is_real_and_words_are_not_units():
    assert {unit_key(u) for u in ("cm", "centimeters", "centimetre")} == {"cm"}
    assert unit_key("square inches") == unit_key("inches^2") == unit_key("in^2") == "in^2"
    assert unit_key("km/h") == "kph" and unit_key("miles per hour") == "mph" and unit_key("m/s") == "m^1*s^-1"
    for word in ("squared", "no", "vs twelve", "times ten", "minus one", "at least", "when even", "isn't", "apples"):
        assert unit_key(word) is None, word
    assert len(UNITS) > 500 and not set(NUMBER_WORDS) & set(UNITS)


@pytest.mark.parametrize("answer, gold, expected", [
    ("30 \\text{ radians}", "30^\\circ", 0.0), ("(8\\pi)^{\\circ}", "8\\pi", 0.0), ("120\\degree", "120^\\circ", 1.0),
    ("4.500000400", "4.5", 0.0), ("\\approx 4.5", "4.5", 1.0), ("\\approx 40", "40", 0.0),
    ("\\frac{10000001}{10000000}", "1", 0.0), ("0.05", "5%", 1.0), ("5", "5%", 1.0), ("0.05\\%", "5%", 0.0),
    ("12.5\\%", "\\frac{1}{8}", 1.0), ("18\\%", "18", 1.0), ("1800\\%", "18", 0.0), ("0.2\\%", "0.2", 0.0),
    ("A = m", "m", 0.0), ("x = m", "m", 0.0), ("f(x) = x^2", "x^2", 1.0), ("\\text{twelve} = 3", "3", 0.0),
    ("1+\\sqrt{19}, 1-\\sqrt{19}", "1 \\pm \\sqrt{19}", 1.0), ("1 \\text{ or } -2", "1,-2", 1.0),
    ("\\textbf{(A) }12", "12", 1.0), ("(A)", "\\text{(A)}", 1.0), ("\\textbf{(E)} 12345", "\\text{(E)}", 0.0),
    ("{-}4", "-4", 1.0), ("\\lim_{x\\to0}(5+x)", "5", 1.0), ("5 \\text{ cm\u00b2}", "5", 1.0),
    ("864 \\text{ square inches}", "864 \\mbox{ inches}^2", 1.0),
    ("864 \\text{ square feet}", "864 \\mbox{ inches}^2", 0.0),
    ("12345 I \\frac{d \\omega}{d t}+2 B \\omega=T", "I \\frac{d \\omega}{d t}+2 B \\omega=T", 0.0),
    ("\\arcsin(10/13)", normalise_gold("np.arcsin(10/13)"), 1.0),
    ("Evelyn", "\\text{Evelyn}", 1.0), ("12 \\text{ square units}", "12", 1.0), ("3 \\text{ apples}", "3", 0.0),
])
def test_issue_36_forms(answer, gold, expected):
    assert score(boxed(answer), gold) == expected
