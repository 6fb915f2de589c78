"""The head-to-head statistics against scipy and against numbers computed by hand from their formulas."""

import json
import math

import numpy as np
import pytest
from scipy import stats as st

from c3_plugin.core.stats import area_under_curve, compare_table, holm, paired_comparison, summarize

VALUES = [0.5, 0.6, 0.7, 0.4, 0.55]
A = [0.62, 0.55, 0.71, 0.58, 0.66]
B = [0.50, 0.52, 0.60, 0.57, 0.55]


def test_summarize_t_interval_by_hand_and_scipy():
    s = summarize(VALUES)
    # by hand: mean 2.75/5 = 0.55; squared deviations sum to 0.05, var = 0.05/4 = 0.0125, std/sqrt(5) = 0.05;
    # t_{0.975, 4} = 2.7764451051977987 (t table: 2.776), half-width = 0.05 * 2.77644... = 0.138822...
    assert s["n"] == 5 and s["mean"] == pytest.approx(0.55)
    assert s["std"] == pytest.approx(math.sqrt(0.0125))
    half = 2.7764451051977987 * 0.05
    assert s["ci95"] == pytest.approx([0.55 - half, 0.55 + half], abs=1e-12)
    assert s["ci95"] == pytest.approx([0.41117774474011, 0.68882225525989], abs=1e-12)
    lo, hi = st.t.interval(0.95, 4, loc=np.mean(VALUES), scale=st.sem(VALUES))
    assert s["ci95"] == pytest.approx([lo, hi], abs=1e-12)
    assert (s["min"], s["max"], s["single_value"]) == (0.4, 0.7, False)


def test_summarize_single_value_and_nan():
    s = summarize([0.3])
    assert (s["n"], s["mean"], s["std"], s["ci95"], s["single_value"]) == (1, 0.3, 0.0, [0.3, 0.3], True)
    with pytest.raises(ValueError, match="2 of 4 values are NaN"):
        summarize([0.1, float("nan"), 0.2, float("nan")])
    with pytest.raises(ValueError, match="no values"):
        summarize([])


def test_paired_t_test_by_hand():
    r = paired_comparison(A, B, seeds=[0, 1, 2, 3, 4])
    d = [x - y for x, y in zip(A, B)]  # 0.12, 0.03, 0.11, 0.01, 0.11
    assert r["diffs"] == pytest.approx(d) and r["seeds"] == [0, 1, 2, 3, 4] and r["n"] == 5
    mean = sum(d) / 5  # 0.076
    sd = math.sqrt(sum((v - mean) ** 2 for v in d) / 4)  # sqrt(0.01072 / 4)
    assert mean == pytest.approx(0.076) and sd == pytest.approx(math.sqrt(0.00268))
    t = mean / (sd / math.sqrt(5))
    assert t == pytest.approx(3.28270, abs=1e-4)
    assert r["mean_diff"] == pytest.approx(mean) and r["std_diff"] == pytest.approx(sd)
    assert r["t"] == pytest.approx(t) and r["p"] == pytest.approx(2 * st.t.sf(abs(t), 4))
    assert r["p"] == pytest.approx(st.ttest_rel(A, B).pvalue)
    half = st.t.ppf(0.975, 4) * sd / math.sqrt(5)
    assert r["ci95"] == pytest.approx([mean - half, mean + half])
    assert r["note"] is None
    # the sign follows a - b
    assert paired_comparison(B, A)["t"] == pytest.approx(-t)


def test_constant_differences_give_none_and_a_note_never_nan():
    for a, b in [([0.3, 0.4, 0.5], [0.2, 0.3, 0.4]), ([0.3, 0.4, 0.5], [0.3, 0.4, 0.5])]:
        r = paired_comparison(a, b)
        assert r["t"] is None and r["p"] is None and "undefined" in r["note"]
        json.dumps(r, allow_nan=False)
    r = paired_comparison([0.5], [0.4])
    assert r["p"] is None and "at least 2" in r["note"]


def test_wilcoxon_only_from_six_pairs():
    a6 = [0.9, 0.8, 0.85, 0.7, 0.95, 0.75]
    b6 = [0.5, 0.6, 0.55, 0.62, 0.51, 0.6]
    w = paired_comparison(a6, b6)["wilcoxon"]
    ref = st.wilcoxon(np.subtract(a6, b6))
    assert w["p"] == pytest.approx(ref.pvalue) and w["statistic"] == ref.statistic
    assert w["p"] == pytest.approx(2 / 64)  # all six positive: exact two-sided p = 2 / 2^6
    w5 = paired_comparison(a6[:5], b6[:5])["wilcoxon"]
    assert w5["p"] is None and w5["statistic"] is None and "6" in w5["note"]


def test_wilcoxon_zero_differences_dropped_as_scipy_default():
    a = [0.9, 0.8, 0.85, 0.7, 0.95, 0.6]
    b = [0.5, 0.6, 0.55, 0.62, 0.51, 0.6]  # last difference is zero
    w = paired_comparison(a, b)["wilcoxon"]
    assert w["n_nonzero"] == 5 and w["p"] == pytest.approx(st.wilcoxon(np.subtract(a, b)).pvalue)
    assert w["p"] == pytest.approx(2 / 32)  # zero dropped: five positive differences
    same = paired_comparison(a, a)
    assert same["wilcoxon"]["p"] is None and "zero" in same["wilcoxon"]["note"]
    json.dumps(same, allow_nan=False)


def test_unequal_lengths_refused():
    with pytest.raises(ValueError, match="3 values and b has 2"):
        paired_comparison([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="2 seeds for 3 pairs"):
        paired_comparison([1, 2, 3], [1, 2, 4], seeds=[0, 1])


def test_holm_textbook_monotone_and_none():
    # sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> max(0.06, 0.04) = 0.06
    adj = holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005})
    assert list(adj) == ["a", "b", "c", "d"]
    assert [adj[k] for k in "abcd"] == pytest.approx([0.03, 0.06, 0.06, 0.02])
    rng = np.random.default_rng(0)
    p = rng.uniform(0, 0.3, size=12)
    out = holm({str(i): float(v) for i, v in enumerate(p)})
    ranked = [out[str(i)] for i in np.argsort(p)]
    assert all(x <= y for x, y in zip(ranked, ranked[1:]))
    assert all(out[str(i)] >= p[i] for i in range(12)) and max(out.values()) <= 1.0
    # None passes through and is not counted: m = 2 here
    adj = holm({"x": 0.02, "skip": None, "y": 0.6})
    assert adj["skip"] is None and adj["x"] == pytest.approx(0.04) and adj["y"] == pytest.approx(0.6)
    assert holm({"x": 0.7, "y": 0.8}) == pytest.approx({"x": 1.0, "y": 1.0})  # capped
    assert holm({"only": None}) == {"only": None}


def test_area_under_curve():
    assert area_under_curve([0, 100, 250, 400], [0.2, 0.3, 0.45, 0.6]) == pytest.approx((0.2 + 0.6) / 2)
    # by hand: 0.5 * 1 + 1 * 2 = 2.5 over a span of 3
    assert area_under_curve([0, 1, 3], [0.0, 1.0, 1.0]) == pytest.approx(2.5 / 3)
    assert area_under_curve([0, 1, 3], [0.0, 1.0, 1.0]) == pytest.approx(np.trapezoid([0, 1, 1], [0, 1, 3]) / 3)
    assert area_under_curve([50], [0.7]) == 0.7
    for steps in ([0, 2, 1], [0, 1, 1]):
        with pytest.raises(ValueError, match="strictly increasing"):
            area_under_curve(steps, [0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="2 steps and 3 values"):
        area_under_curve([0, 1], [0.1, 0.2, 0.3])


def test_compare_table_pairs_and_unpaired_seeds():
    results = {"c3": {0: 0.62, 1: 0.55, 2: 0.71, 3: 0.58, 4: 0.66, 7: 0.9},
               "magrpo": {0: 0.50, 1: 0.52, 2: 0.60, 3: 0.57, 4: 0.55},
               "mappo": {4: 0.4, 3: 0.41, 9: 0.3}}
    t = compare_table(results)
    assert list(t["algorithms"]) == ["c3", "magrpo", "mappo"]
    assert t["algorithms"]["c3"] == summarize(list(results["c3"].values()))
    assert list(t["pairs"]) == ["c3 vs magrpo", "c3 vs mappo", "magrpo vs mappo"]
    cm = t["pairs"]["c3 vs magrpo"]
    assert (cm["a"], cm["b"], cm["seeds"], cm["unpaired_seeds"]) == ("c3", "magrpo", [0, 1, 2, 3, 4], [7])
    assert cm["p"] == pytest.approx(paired_comparison(A, B)["p"])
    mm = t["pairs"]["magrpo vs mappo"]
    assert mm["seeds"] == [3, 4] and mm["unpaired_seeds"] == [0, 1, 2, 9]
    assert mm["diffs"] == pytest.approx([0.57 - 0.41, 0.55 - 0.4])
    json.dumps(t, allow_nan=False)
    only = compare_table(results, baseline_pairs=[("mappo", "c3")])
    assert list(only["pairs"]) == ["mappo vs c3"] and only["pairs"]["mappo vs c3"]["seeds"] == [4, 3]
    none = compare_table({"x": {0: 1.0}, "y": {1: 2.0}})
    assert none["pairs"]["x vs y"]["n"] == 0 and none["pairs"]["x vs y"]["unpaired_seeds"] == [0, 1]
    with pytest.raises(ValueError, match="without results"):
        compare_table(results, baseline_pairs=[("c3", "ghost")])


def test_wilson_interval_of_an_accuracy_over_items():
    """Textbook values (0 of 10: [0, 0.2775]; 5 of 10: [0.2366, 0.7634]); no interval for a share that is not a
    count."""
    from c3_plugin.core.stats import wilson_interval

    assert wilson_interval(0.0, 10) == pytest.approx([0.0, 0.2775], abs=1e-4)
    assert wilson_interval(0.5, 10) == pytest.approx([0.2366, 0.7634], abs=1e-4)
    assert wilson_interval(0.3, 7) is None and wilson_interval(0.5, 0) is None
