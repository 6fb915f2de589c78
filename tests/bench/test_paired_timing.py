"""bench/paired_timing.py: both arms warmed up, then timed in pairs whose order alternates, the ratio the median of
the pairs: an order effect (the arm that runs second in a pair is slower) hits both arms alike, so it shows as the
pairs' spread around the true ratio instead of as a bias toward the arm that ran first."""

import pytest

from bench import paired_timing


def test_pairs_alternate_after_a_warm_up_and_an_order_effect_cancels(monkeypatch):
    clock = {"now": 0.0}
    calls = []
    monkeypatch.setattr(paired_timing.time, "perf_counter", lambda: clock["now"])

    def arm(name, seconds):
        def run():
            second_in_pair = bool(calls) and calls[-1] != name and len(calls) > 2 and len(calls) % 2 == 1
            clock["now"] += seconds * (1.5 if second_in_pair else 1.0)  # whichever runs second in a pair is slowed
            calls.append(name)
        return run

    restored = []
    result = paired_timing.paired_ratio(arm("a", 2.0), arm("b", 1.0), pairs=6, before=lambda: restored.append(1))
    assert calls == ["a", "b"] + ["a", "b", "b", "a"] * 3  # warm-up, then AB, BA, ...
    assert len(restored) == len(calls)  # weights restored before every run, timed or not
    assert sorted(result["ratios"]) == pytest.approx([2 / 1.5] * 3 + [3.0] * 3)
    assert result["min"] == pytest.approx(2 / 1.5) and result["max"] == pytest.approx(3.0)  # the true 2.0 in between
    assert result["min"] < 2.0 < result["max"] and result["median"] == pytest.approx((2 / 1.5 + 3.0) / 2)
    assert "6 alternated pairs" in paired_timing.describe(result, "x")
    with pytest.raises(ValueError, match="at least 2 pairs"):
        paired_timing.paired_ratio(arm("a", 1), arm("b", 1), pairs=1)
