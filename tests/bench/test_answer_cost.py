"""``bench/answer_cost.py`` (the reward's cost per answer beside plain math-verify's) stays runnable, and its two arms
score the same answers: the reward refuses the hack that plain math-verify accepts."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("answer_cost", ROOT / "bench" / "answer_cost.py")
cost = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cost)


def test_the_arms_score_the_same_answers_and_the_ratio_is_measured():
    pairs = [(content, "9") for content in ("9", "x = 9", "\\text{Answer: } 9", "12345", "9 dogs")]
    reward, plain = cost.arms(pairs, in_process=False)
    assert reward() == [1.0, 1.0, 1.0, 0.0, 0.0]
    assert plain()[0] == 1.0 and plain()[3] == 0.0 and plain()[4] == 1.0  # math-verify drops the word
    result = cost.paired_ratio(reward, plain, pairs=2)
    assert result["median"] > 0 and len(result["ratios"]) == 2
    assert len(cost.answers(every=1000)) == 5 * len(cost.math_golds(1000))


def test_same_checks_the_cost_path_against_the_reference_on_answers_and_hunt_families(capsys):
    hunt = cost.hunt_answers(every=1000)
    assert len(hunt) > 10 * len(cost.math_golds(1000))  # the families' answers, not only the timed forms
    assert cost.same(every=1000) == 0
    assert "verdicts that differ: 0" in capsys.readouterr().out


def test_cold_empties_the_gold_caches():
    from answer_language import compare

    assert compare.strict("x = 9", "9")
    assert compare._GOLDS and compare._GOLD_VALUES
    cost.forget()
    assert not compare._GOLDS and not compare._GOLD_VALUES
