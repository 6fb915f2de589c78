"""``c3 plan-budget``: how to spend B reward calls per decision point, from a diagnosis's measured signal and noise.

Under the additive model of ``c3 diagnose`` an alternative's c-continuation mean is its true value
(variance ``S`` across alternatives) plus noise of variance ``sigma^2 / c``. Two independent estimates
of one group at ``(n, c)`` then correlate at ``rho = S / (S + sigma^2 / c)`` (Pearson), and the
expected Spearman correlation of their n-alternative rankings is
:func:`~c3_plugin.core.stats.spearman_expectation` ``(rho, n)``: the predicted reliability. Noise falls
with ``c``, and the ranking's expected agreement rises with ``n``, so at a fixed ``B = n c`` the best
split depends on the measured ``S / sigma^2`` (the paper's A.5: the noise law alone would always pick
``n = 2``). At ``(n, c / 2)`` the same formula predicts the split-half reliability ``c3 diagnose``
observes, which is how the model is checked (bench/credit_mechanisms.py).

At the last decision point nothing follows an alternative but the reward, so ``c = 1`` and, for a
deterministic reward, its value is exact: reliability 1 whenever ``n >= 2``.
"""

from __future__ import annotations

import math
from itertools import product
from typing import Any, Mapping, Sequence

from c3_plugin.core.stats import spearman_expectation


def predicted_reliability(signal: float, sigma2: float, n: int, c: int) -> float:
    """Expected Spearman agreement of two independent ``(n, c)`` estimates of one group's ranking."""
    if n < 2:
        return 0.0
    s = max(float(signal), 0.0)
    if s == 0.0:
        return 0.0
    rho = s / (s + max(float(sigma2), 0.0) / c)
    return spearman_expectation(rho, n)


def decision_options(point: Mapping[str, Any], budget: int, last: bool) -> list[dict[str, Any]]:
    """Every ``(n, c)`` with ``n >= 2`` and ``n c <= budget`` (``c = 1`` at the last decision point), predicted
    reliability each."""
    if last:
        return [{"n": budget, "c": 1, "calls": budget, "predicted": 1.0 if budget >= 2 else 0.0}]
    out = []
    for n in range(2, budget + 1):
        c = budget // n
        out.append({"n": n, "c": c, "calls": n * c,
                    "predicted": predicted_reliability(point["signal_S"], point["return_variance"], n, c)})
    return out


def tree_plans(num_decisions: int, budget: int) -> list[tuple[int, ...]]:
    """Every tree plan (one branching factor per decision point) with exactly ``budget`` leaves."""
    divisors = [d for d in range(1, budget + 1) if budget % d == 0]
    return [t for t in product(divisors, repeat=num_decisions) if math.prod(t) == budget]


def tree_reliability(tree: Sequence[int], points: Sequence[Mapping[str, Any] | None]) -> list[float]:
    """Predicted reliability at each decision point of a tree plan: ``n_u = tree[u]``, ``c_u`` the leaves below
    one alternative. Below the top level of a deeper tree, continuations share messages, so this is optimistic there."""
    k = len(tree)
    out = []
    for u, n in enumerate(tree):
        point = points[u]
        if u == k - 1:
            out.append(1.0 if n >= 2 else 0.0)
        elif point is None or point.get("signal_S") is None:
            out.append(float("nan"))
        else:
            out.append(predicted_reliability(point["signal_S"], point["return_variance"], n, math.prod(tree[u + 1:])))
    return out


def plan_budget(diagnosis: Mapping[str, Any], budget: int) -> dict[str, Any]:
    """Per decision point the best ``(n, c)`` for ``budget`` reward calls, and the tree plans of ``budget`` leaves
    ranked."""
    if budget < 2:
        raise ValueError(f"--budget {budget}: a group needs at least 2 reward calls")
    roles = diagnosis["decision_points"]
    k = len(roles)
    measured: list[Mapping[str, Any] | None] = [None] * k
    for d in diagnosis["decisions"]:
        measured[d["u"]] = d
    points = []
    for u, role in enumerate(roles):
        d = measured[u]
        last = u == k - 1
        if not last and (d is None or d.get("signal_S") is None):
            points.append({"u": u, "role": role,
                           "note": "not measured by this diagnosis (run c3 diagnose --decisions all)"})
            continue
        options = decision_options(d, budget, last)
        best = max(options, key=lambda o: (o["predicted"], o["calls"], -o["n"]))
        points.append({"u": u, "role": role, "options": options, "best": best,
                       "plan": f"diagnostic n={best['n']} u={u} c={best['c']}",
                       **({} if last else {"signal_S": d["signal_S"], "return_variance": d["return_variance"]})})
    trees = []
    for tree in tree_plans(k, budget):
        rel = tree_reliability(tree, measured)
        known = [r for r in rel if math.isfinite(r)]
        trees.append({"plan": f"tree {list(tree)}", "tree": list(tree), "reliability": rel,
                      "mean": sum(known) / len(known) if known else float("nan")})
    trees.sort(key=lambda t: -t["mean"] if math.isfinite(t["mean"]) else math.inf)
    return {"workflow": diagnosis["workflow"], "budget": budget, "decisions": points, "trees": trees,
            "recommended": trees[0]["plan"] if trees else None}


def print_plan(result: Mapping[str, Any], top: int = 5) -> None:
    print(f"== c3 plan-budget: {result['workflow']}, {result['budget']} reward calls ==")
    for p in result["decisions"]:
        if "best" not in p:
            print(f"u={p['u']} {p['role']}: {p['note']}")
            continue
        opts = ", ".join(f"n={o['n']} c={o['c']}: {o['predicted']:.3f}" for o in p["options"])
        print(f"u={p['u']} {p['role']}: best {p['plan']} (predicted reliability {p['best']['predicted']:.3f}); {opts}")
    print(f"tree plans with {result['budget']} leaves (predicted reliability per decision point, mean):")
    for t in result["trees"][:top]:
        print(f"  {t['plan']:<20} " + " ".join(f"{r:.3f}" for r in t["reliability"]) + f"  mean {t['mean']:.3f}")
    if result["recommended"]:
        print(f'paste into the config\'s algorithm section:  plan: "{result["recommended"]}"')
