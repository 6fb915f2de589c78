"""Fair wall-time ratios of two arms on one machine: warmed up, alternated, reported as the median of pairs.

A ratio measured as "run A a few times, then B a few times" depends on which runs first (caches, the CPU's clock,
a neighbour's load drifting): the C3/MAGRPO rollout wall ratio ranged 0.43-2.41 that way. Here every pair times both
arms back to back, the order alternating pair by pair (AB, BA, AB, ...), after each arm has run once untimed; the
figure is the median of the per-pair ratios with their interquartile range and extremes: drift affects both arms of a
pair alike, and an order effect hits each arm in half the pairs, so it shows as spread around the ratio, not as a bias
toward the arm that ran first.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable


def paired_ratio(first: Callable[[], object], second: Callable[[], object], pairs: int = 6,
                 before: Callable[[], object] | None = None) -> dict[str, float | list[float]]:
    """Wall seconds of ``first`` over ``second``: ``pairs`` alternated pairs after one untimed warm-up run of each;
    ``before`` (e.g. restoring weights) runs untimed before every timed or warm-up call. Returns the per-pair
    ``ratios`` and seconds, their median, quartiles and extremes."""
    if pairs < 2:
        raise ValueError("paired_ratio: at least 2 pairs (the order alternates)")

    def timed(fn: Callable[[], object]) -> float:
        if before is not None:
            before()
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    timed(first), timed(second)  # warm-up: allocator, kernels, caches
    a, b = [], []
    for k in range(pairs):
        if k % 2 == 0:
            a.append(timed(first)), b.append(timed(second))
        else:
            b.append(timed(second)), a.append(timed(first))
    ratios = sorted(x / y for x, y in zip(a, b))
    q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) >= 4 else (ratios[0], None, ratios[-1])
    return {"ratios": [x / y for x, y in zip(a, b)], "first_s": a, "second_s": b, "median": statistics.median(ratios),
            "q1": q1, "q3": q3, "min": ratios[0], "max": ratios[-1],
            "first_median_s": statistics.median(a), "second_median_s": statistics.median(b)}


def describe(result: dict, label: str) -> str:
    """One line: the median ratio, its interquartile range and extremes over the pairs."""
    return (f"{label}: median {result['median']:.3f} over {len(result['ratios'])} alternated pairs "
            f"(IQR {result['q1']:.3f}-{result['q3']:.3f}, range {result['min']:.3f}-{result['max']:.3f}; "
            f"medians {result['first_median_s']:.2f} s vs {result['second_median_s']:.2f} s)")
