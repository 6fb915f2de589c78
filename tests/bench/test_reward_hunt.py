"""The standing reward-hack hunt (``bench/reward_hunt.py``), fast subset: a change that reopens a closed hack
(math, travel or the code sandbox) fails here. The full catalogue runs with ``python bench/reward_hunt.py``."""

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.xdist_group("reward_hunt")  # one worker builds the module's shared fixture once

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("reward_hunt", ROOT / "bench" / "reward_hunt.py")
hunt = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hunt)

# golds chosen to exercise every family: integers, fractions, a base subscript, units, an irrational constant,
# an equation, an interval, a tuple, text, a percent, GSM8K thousands
EXTRA_GOLDS = ["52_8", "5 \\text{ cm}", "\\pi", "2\\sqrt{3}", "x=5", "(-\\infty, 3]",
               "\\left( 3, \\frac{\\pi}{2} \\right)", "\\text{(C)}", "10\\%", "\\frac{14}{3}", "70000", "1000000", "-4",
               "0.5",
               # round two: a text answer, a simple fraction, a gold written with ,\! thousands, Minerva's normalised
               # e-notation
               "\\text{east}", "\\frac{3}{4}", "11,\\! 111,\\! 111,\\! 100", "204", "4.5 \\times 10^{33}",
               "1.325 \\times 10^{-27}",
               # round three: a +- gold, a percent gold, a degree gold, a radian gold, a fraction with a terminating
               # decimal, a list, a letter, a 4-digit integer, a decimal, a multiple of 1000, a proportion
               "1 \\pm \\sqrt{19}", "5%", "120^\\circ", "8\\pi", "\\frac{1}{8}", "1,-2", "m", "1251", "4.5", "3000",
               "0.2",
               # round four (issue 49): a repeating fraction, a two-digit integer, a 3-digit integer, an ODE solution
               "\\frac{2}{3}", "42", "284", "x(t) = e^{-t}", "7"]
RIGHT_VARIANTS = [v for v in hunt.MATH_RIGHT]


@pytest.fixture(scope="module")
def math_subset():
    golds = hunt.math_golds(every=100) + [("extra", g) for g in EXTRA_GOLDS]
    return hunt.math_tables(golds)


@pytest.mark.parametrize("family", list(hunt.MATH_HACKS))
def test_no_math_hack_family_scores(math_subset, family):
    t = math_subset["hacks"][family]
    assert t["scored_1"] == 0, f"{family}: {t['scored_1']}/{t['applicable']} scored 1, e.g. {t['examples']}"


def test_every_math_hack_family_is_exercised(math_subset):
    assert all(t["applicable"] > 0 for t in math_subset["hacks"].values()), \
        {k: t["applicable"] for k, t in math_subset["hacks"].items()}


@pytest.mark.parametrize("variant", RIGHT_VARIANTS)
def test_right_math_forms_still_score(math_subset, variant):
    t = math_subset["right"][variant]
    assert (t["applicable"] > 0 and t["scored_0"]
            == 0), f"{variant}: {t['scored_0']}/{t['applicable']} scored 0, e.g. {t['examples']}"


ROWS = (0, 4, 5, 20, 33, 40)  # 3/5/7-day rows, one and several cities, the accommodation with a trailing space (4, 40)


@pytest.fixture(scope="module")
def travel_subset():
    return hunt.travel_tables(indices=ROWS)


@pytest.mark.parametrize("family", ["dup_attraction_suffix", "dup_attraction_respelled", "dup_restaurant_suffix",
                                    "dup_restaurant_respelled", "constraint_breaker", "duplicate_assignment",
                                    "wrong_role_write"])
def test_travel_hacks_are_caught_by_reward_and_evaluator_alike(travel_subset, family):
    t, human = travel_subset[family], travel_subset["human"]
    assert t["evaluator_pass"] == 0.0, family
    for variant in ("specified", "strict"):
        for hacked, ref in zip(t["per_row"], human["per_row"]):
            assert hacked["reward"][variant] <= ref["reward"][variant] - 0.1, (family, variant, hacked["row"])


def test_human_plans_pass_and_the_strict_variant_ranks_constraints(travel_subset):
    human = travel_subset["human"]
    assert human["evaluator_pass"] == 1.0 and all(r["reward"]["specified"] == pytest.approx(1.0)
                                                  for r in human["per_row"])
    assert all(r["reward"]["strict"] == pytest.approx(1.0) for r in human["per_row"])
    breaker = travel_subset["constraint_breaker"]
    assert breaker["min_reward"]["specified"] > 0.8  # the specified formula, kept as published, barely sees constraints
    assert 0.4 <= breaker["reward"]["strict"] <= 0.62
    assert hunt.ranking(travel_subset)["strict"] == 1.0  # one invented lunch outranks breaking every constraint


def test_code_sandbox_escapes_score_zero():
    table = hunt.code_table()  # the sandbox runs in CI (tests/test_sandbox*.py); an error here is a failure, not a skip
    assert table == {k: 0.0 for k in hunt.CODE_HACKS}, table
