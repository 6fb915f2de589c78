"""bench/advice_new_shapes.py: the verdict of an advice against the measured truth, and one regime end to end at a
tiny size (the advice from a sampled diagnosis, every arm at its own step size, the paired differences)."""

import pytest

from bench.advice_new_shapes import SHAPES, run_regime, verdict

T = "tree [2, 4]"
M = "independent 8"


@pytest.mark.parametrize("advice, measured, expected", [
    ({"outcome": "c3", "plan": T}, {f"{T} - magrpo": {"sign": "+"}}, "right"),
    ({"outcome": "c3", "plan": T}, {f"{T} - magrpo": {"sign": "0"}}, "unconfirmed"),
    ({"outcome": "c3", "plan": T}, {f"{T} - magrpo": {"sign": "-"}}, "wrong"),
    ({"outcome": "magrpo", "plan": M}, {f"{T} - magrpo": {"sign": "-"}, f"{M} - benched": {"sign": "+"}}, "right"),
    ({"outcome": "magrpo", "plan": M}, {f"{T} - magrpo": {"sign": "+"}, f"{M} - benched": {"sign": "-"}}, "wrong"),
    # the failure: a named tree that loses clearly to the benched one, under "no clear winner" too
    ({"outcome": "no clear winner", "plan": "tree [1, 8]"},
     {"tree [1, 8] - magrpo": {"sign": "-"}, "tree [1, 8] - benched": {"sign": "-"}, f"{T} - magrpo": {"sign": "0"}},
     "miss"),
    ({"outcome": "no clear winner", "plan": T}, {f"{T} - magrpo": {"sign": "+"}}, "no clear winner"),
])
def test_the_verdict_counts_a_named_plan_that_loses_as_a_miss_and_a_contradicted_outcome_as_wrong(
        advice, measured, expected):
    assert verdict({**advice, "benched": T}, measured) == expected


def test_one_regime_end_to_end_at_a_tiny_size():
    name = "n = 2 (Reasoner -> Actor)"
    r = run_regime(name, SHAPES[name], [300, 301], [3000], groups=12, lrs=(8.0,), steps=40)
    assert {"independent 2", "tree [1, 2]"} <= set(r["arms"])
    assert all(len(a["auc"]) == 2 and a["lr"] == 8.0 for a in r["arms"].values())
    assert "tree [1, 2] - magrpo" in r["truth"] and "independent 2 - benched" in r["truth"]
    assert r["advice"]["benched"] == "tree [1, 2]" and r["advice"]["outcome"] in ("c3", "magrpo", "no clear winner")
    assert r["verdict"] in ("right", "no clear winner", "unconfirmed", "miss", "wrong")
    assert len(r["exact"]["S"]) == 2 and r["exact"]["O"] > 0
