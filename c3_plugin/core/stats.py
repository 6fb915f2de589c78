"""Statistics of a multi-seed head-to-head comparison (mean +- std, t intervals, paired tests, Holm).

Pure functions over plain sequences; every output is JSON-ready (Python floats, ``None`` for undefined).

- ``std``: sample standard deviation (ddof=1); 0.0 when n == 1.
- ``ci95``: Student t interval ``mean +- t_{0.975, n-1} * std / sqrt(n)``; ``[mean, mean]`` when n == 1.
- paired difference: ``d_i = a_i - b_i`` for the same seed; its mean, std and ci95 as above.
- paired t-test: ``scipy.stats.ttest_rel`` (two-sided), ``t = mean(d) / (std(d) / sqrt(n))``, ``p = 2 * t.sf(|t|,
n-1)``;
  ``None`` with a note when n < 2 or the differences are constant (spread within float rounding: t is undefined).
- Wilcoxon signed-rank: ``scipy.stats.wilcoxon(d)`` two-sided, only when n >= 6 pairs (at n <= 5 its smallest
  two-sided p is 0.0625, so it can never reject at 0.05); zero differences are dropped (scipy's default
  ``zero_method="wilcox"``), and all-zero differences give ``None`` with a note.
- Holm: sort the m non-None p ascending; ``adj_(i) = max_{j<=i} min(1, (m-j+1) p_(j))`` (step-down, monotone).
- area under the curve: trapezoidal area of values against strictly increasing steps, divided by the step
  span (the mean level over the run); a single point gives its value.
"""

from __future__ import annotations

import math
from typing import Hashable, Mapping, Sequence

import numpy as np
from scipy import stats as _st

_CONST_TOL = 1e-12  # relative spread below which paired differences count as constant


def _finite(values, name: str = "values") -> np.ndarray:
    x = np.asarray(values, dtype=float).ravel()
    bad = int(np.count_nonzero(~np.isfinite(x)))
    if bad:
        raise ValueError(f"{name}: {bad} of {x.size} values are NaN or infinite")
    return x


def summarize(values: Sequence[float]) -> dict:
    """n, mean, sample std, 95% Student t interval, min and max of ``values``."""
    x = _finite(values)
    n = x.size
    if n == 0:
        raise ValueError("summarize: no values")
    mean = float(x.mean())
    std = float(x.std(ddof=1)) if n > 1 else 0.0
    if n > 1:
        half = float(_st.t.ppf(0.975, n - 1)) * std / np.sqrt(n)
        ci = [mean - half, mean + half]
    else:
        ci = [mean, mean]
    return {"n": n, "mean": mean, "std": std, "ci95": [float(c) for c in ci], "single_value": n == 1,
            "min": float(x.min()), "max": float(x.max())}


def paired_comparison(a: Sequence[float], b: Sequence[float], seeds: Sequence[Hashable] | None = None) -> dict:
    """Per-seed differences ``a - b`` with their summary, a paired t-test and (n >= 6) a Wilcoxon test."""
    if len(a) != len(b):
        raise ValueError(f"paired_comparison: a has {len(a)} values and b has {len(b)}; they must pair by seed")
    if seeds is not None and len(seeds) != len(a):
        raise ValueError(f"paired_comparison: {len(seeds)} seeds for {len(a)} pairs")
    x, y = _finite(a, "a"), _finite(b, "b")
    d = x - y
    s = summarize(d)
    n = s["n"]
    out = {"n": n, "seeds": list(seeds) if seeds is not None else None, "diffs": [float(v) for v in d],
           "mean_diff": s["mean"], "std_diff": s["std"], "ci95": s["ci95"],
           "t": None, "p": None, "note": None, "wilcoxon": None}
    scale = max(1.0, float(np.abs(x).max()), float(np.abs(y).max()))
    if n < 2:
        out["note"] = "t-test needs at least 2 pairs"
    elif np.ptp(d) <= _CONST_TOL * scale:
        out["note"] = f"all {n} differences equal {s['mean']:g}: the t statistic is undefined"
    else:
        res = _st.ttest_rel(x, y)
        out["t"], out["p"] = float(res.statistic), float(res.pvalue)
    if n < 6:
        out["wilcoxon"] = {"statistic": None, "p": None, "note": f"Wilcoxon needs >= 6 pairs, have {n}"}
    elif not np.any(d):
        out["wilcoxon"] = {"statistic": None, "p": None, "note": "all differences are zero"}
    else:
        res = _st.wilcoxon(d)  # two-sided, zero_method="wilcox": zero differences dropped
        out["wilcoxon"] = {"statistic": float(res.statistic), "p": float(res.pvalue),
                           "n_nonzero": int(np.count_nonzero(d)), "note": None}
    return out


def holm(pvalues: Mapping[str, float | None]) -> dict[str, float | None]:
    """Holm-Bonferroni adjusted p-values, same keys; ``None`` entries pass through and do not count in m."""
    keys = [k for k, p in pvalues.items() if p is not None]
    p = _finite([pvalues[k] for k in keys], "p-values")
    if np.any((p < 0) | (p > 1)):
        raise ValueError("holm: p-values must lie in [0, 1]")
    m = p.size
    order = np.argsort(p, kind="stable")
    adj = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    result: dict[str, float | None] = {k: None for k in pvalues}
    for rank, i in enumerate(order):
        result[keys[i]] = float(adj[rank])
    return result


def area_under_curve(steps: Sequence[float], values: Sequence[float]) -> float:
    """Trapezoidal area of ``values`` against strictly increasing ``steps``, divided by the step span."""
    s, v = _finite(steps, "steps"), _finite(values, "values")
    if s.size != v.size or s.size == 0:
        raise ValueError(f"area_under_curve: {s.size} steps and {v.size} values (need equal, non-zero)")
    if s.size == 1:
        return float(v[0])
    bad = np.flatnonzero(np.diff(s) <= 0)
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"area_under_curve: steps must be strictly increasing; step {s[i + 1]:g} at "
                         f"index {i + 1} follows {s[i]:g} (sort the curve first)")
    area = float(np.sum((v[1:] + v[:-1]) / 2.0 * np.diff(s)))
    return area / float(s[-1] - s[0])


def compare_table(results: Mapping[str, Mapping[Hashable, float]],
                  baseline_pairs: Sequence[tuple[str, str]] | None = None) -> dict:
    """Per-algorithm summaries and paired comparisons of ``results[algorithm][seed]`` (one suite's metric).

    Pairs are every ``(first, second)`` in the mapping's order, or ``baseline_pairs`` when given; each pair
    compares the seeds both have (in ``first``'s order) and lists the others under ``unpaired_seeds``.
    """
    names = list(results)
    if baseline_pairs is None:
        pairs = [(names[i], names[j]) for i in range(len(names)) for j in range(i + 1, len(names))]
    else:
        pairs = [tuple(p) for p in baseline_pairs]
        unknown = sorted({n for p in pairs for n in p} - set(names))
        if unknown:
            raise ValueError(f"compare_table: pairs name algorithms without results: {unknown}")
    table = {"algorithms": {n: summarize(list(results[n].values())) for n in names}, "pairs": {}}
    for first, second in pairs:
        ra, rb = results[first], results[second]
        common = [s for s in ra if s in rb]
        unpaired = [s for s in ra if s not in rb] + [s for s in rb if s not in ra]
        if common:
            entry = paired_comparison([ra[s] for s in common], [rb[s] for s in common], seeds=common)
        else:
            entry = {"n": 0, "note": "no seeds in common"}
        table["pairs"][f"{first} vs {second}"] = {"a": first, "b": second, **entry, "unpaired_seeds": unpaired}
    return table


def spearman_expectation(rho: float, n: int) -> float:
    """Expected sample Spearman correlation of ``n`` bivariate-normal pairs with Pearson ``rho``."""
    return 6.0 / (math.pi * (n + 1)) * (math.asin(rho) + (n - 2) * math.asin(rho / 2.0))


def wilson_interval(share: float, n: int, z: float = 1.959963984540054) -> list[float] | None:
    """The 95% Wilson score interval of a proportion ``share`` of ``n`` 0/1 outcomes (an accuracy over ``n`` items
    scored right or wrong); None when ``n < 1`` or ``share * n`` is not a whole count (per-item averages of several
    samples are not binomial)."""
    if n < 1 or not 0.0 <= share <= 1.0 or abs(share * n - round(share * n)) > 1e-6:
        return None
    centre = (share + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [max(0.0, centre - half), min(1.0, centre + half)]
