"""Estimator fidelity studies against the exact ground truth of a synthetic environment.

Each function runs one study and returns plain rows (dicts) that ``bench/estimator_fidelity.py``
prints and the tests bound: unbiasedness of C3 through the real rollout machinery, the
noise law, agent ablation against C3 as rollouts grow, and split-half reliability against
the additive model ``S / (S + 2N)``.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from c3_plugin.core.credit import (
    loo_advantages_batch,
    noise_variance,
    observed_noise_variance,
    pooled_return_variance,
    split_half_reliability,
    tree_advantages,
)
from c3_plugin.core.plan import parse_plan
from c3_plugin.core.rollout import materialize
from c3_plugin.core.stats import spearman_expectation
from c3_plugin.core.synthetic import NULL_MESSAGE, SyntheticBackend, SyntheticEnv
from c3_plugin.core.trace import path_to


def _cluster_mean_se(sums: np.ndarray, counts: np.ndarray) -> tuple[float, float]:
    """Ratio mean and its cluster-robust standard error (clusters: independent runs)."""
    total = counts.sum()
    mean = sums.sum() / total
    r = len(sums)
    if r < 2:
        return float(mean), float("inf")
    resid = sums - mean * counts
    return float(mean), float(math.sqrt(r / (r - 1) * (resid ** 2).sum()) / total)


def unbiasedness(env: SyntheticEnv, plan: Any, questions: Sequence[str], runs: int, seed: int = 0,
                 estimator: Callable[[np.ndarray], list] = tree_advantages) -> list[dict]:
    """Run ``plan`` ``runs`` times per question through :func:`materialize` and compare the mean
    advantage (C3's by default) of every (decision point, context, action) cell with its exact Q - V."""
    plan = parse_plan(plan)
    items = [{"id": f"q{qi}#{r}", "question": q} for r in range(runs) for qi, q in enumerate(questions)]
    rng = np.random.default_rng(seed)
    rollout = materialize(env.workflow, plan, items, SyntheticBackend(env, seed=seed + 1),
                          lambda leaves: env.reward(leaves, rng))
    by_node = {(e.instance, e.node): e for e in rollout.entries}
    cells: dict[tuple, dict[str, dict[str, float]]] = {}
    for u, adv in enumerate(estimator(rollout.rewards)):
        if adv is None:
            continue
        for entry, a in zip(rollout.decision_entries(u), adv):
            chain = path_to(entry, by_node)
            outputs = tuple(e.output for e in chain[1:-1])
            item = chain[0].item
            key = (u, item["question"], outputs, entry.message)
            if key not in cells:
                cells[key] = {"truth": env.q(item, outputs, entry.message) - env.value(item, outputs), "runs": {}}
            run = cells[key]["runs"].setdefault(entry.instance, [0.0, 0])
            run[0] += float(a)
            run[1] += 1
    rows = []
    for (u, _q, outputs, msg), cell in cells.items():
        sums = np.array([v[0] for v in cell["runs"].values()])
        counts = np.array([v[1] for v in cell["runs"].values()], dtype=np.float64)
        mean, se = _cluster_mean_se(sums, counts)
        rows.append({"plan": plan.describe(), "u": u, "context": "|".join(outputs) or "<root>", "action": msg,
                     "n_obs": int(counts.sum()), "clusters": len(sums), "mean": mean, "truth": cell["truth"], "se": se,
                     "z": (mean - cell["truth"]) / se if se > 0 else 0.0})
    return rows


def unbiasedness_unequal(env: SyntheticEnv, question: str, counts: Sequence[int], groups: int,
                         seed: int = 0) -> list[dict]:
    """C3 at the opening decision point with unequal continuation counts per alternative:
    mean advantage per (alternative slot, action) against the exact Q - V."""
    item = {"id": "q", "question": question}
    rng = np.random.default_rng(seed)
    alt, ret = env.sample_groups(item, (), len(counts), counts, groups, rng)
    adv = loo_advantages_batch(ret)
    truth = env.q_values(item, ()) - env.value(item, ())
    rows = []
    for j, c in enumerate(counts):
        for k, msg in enumerate(env.messages):
            sel = alt[:, j] == k
            if sel.sum() < 2:
                continue
            a = adv[sel, j]
            mean, se = float(a.mean()), float(a.std(ddof=1) / math.sqrt(len(a)))
            rows.append({"slot": j, "c": int(c), "action": msg, "n_obs": int(sel.sum()), "mean": mean,
                         "truth": float(truth[k]), "se": se, "z": (mean - truth[k]) / se if se > 0 else 0.0})
    return rows


def noise_law(env: SyntheticEnv, questions: Sequence[str], n: int, c: int, groups: int, seed: int = 0) -> dict:
    """Observed over predicted rollout noise at the opening decision point.

    Observed: half the variance of the difference between two advantage vectors computed
    from two independent sets of ``c`` continuations of the same ``n`` alternatives.
    Predicted: ``noise_variance(sigma2, n, n * c)`` with ``sigma2`` the pooled
    within-alternative variance of the same cell's returns.
    """
    rng = np.random.default_rng(seed)
    adv_a, adv_b, rets = [], [], []
    for qi, q in enumerate(questions):
        _, ret = env.sample_groups({"id": f"q{qi}", "question": q}, (), n, [2 * c] * n, groups, rng)
        adv_a.append(loo_advantages_batch(ret[..., :c]))
        adv_b.append(loo_advantages_batch(ret[..., c:]))
        rets.append(ret)
    sigma2 = pooled_return_variance(np.concatenate(rets))
    observed = observed_noise_variance(np.concatenate(adv_a), np.concatenate(adv_b))
    predicted = noise_variance(sigma2, n, n * c)
    return {"n": n, "c": c, "groups": groups * len(questions), "sigma2": sigma2, "observed": observed,
            "predicted": predicted, "ratio": observed / predicted}


def ablation_vs_c3(env: SyntheticEnv, question: str, n: int, rollouts: Sequence[int], groups: int,
                   seed: int = 0) -> list[dict]:
    """Error against the exact ``Q(h, a) - V(h)`` at the opening decision point as the rollouts
    per alternative grow, for C3 (leave-one-out over ``n`` alternatives) and for agent
    ablation (each alternative's mean return minus the null message's mean return).

    ``*_bias`` is the largest absolute mean error over actions, conditional on the action
    (``*_bias_se`` its standard error); ``*_rmse`` the root-mean-square error over all
    alternatives. ``ablation_offset`` is the exact shift ``V(h) - Q(h, null)``."""
    item = {"id": "q", "question": question}
    rng = np.random.default_rng(seed)
    q_all = env.q_values(item, ())
    v = env.value(item, ())
    q_null = env.q(item, (), NULL_MESSAGE)
    rows = []
    for c in rollouts:
        alt, ret = env.sample_groups(item, (), n, [c] * n, groups, rng)
        truth = q_all[alt] - v
        errors = {"c3": loo_advantages_batch(ret) - truth,
                  "ablation": ret.mean(-1) - rng.binomial(c, q_null, size=(groups, 1)) / c - truth}
        row: dict[str, float] = {"rollouts": c, "ablation_offset": float(v - q_null)}
        for name, err in errors.items():
            per_action = [(abs(err[alt == k].mean()), err[alt == k].std(ddof=1) / math.sqrt((alt == k).sum()))
                          for k in range(len(env.messages)) if (alt == k).sum() > 1]
            bias, se = max(per_action)
            row.update({f"{name}_bias": float(bias), f"{name}_bias_se": float(se),
                        f"{name}_rmse": float(np.sqrt((err ** 2).mean()))})
        rows.append(row)
    return rows


def split_half_study(signal: float, noise: float, n: int, c: int, groups: int, seed: int = 0) -> dict:
    """Split-half reliability on Gaussian groups with known signal variance ``S`` (true values
    of the alternatives) and noise ``N`` (sampling variance of a ``c``-continuation mean)."""
    rng = np.random.default_rng(seed)
    values = rng.normal(0.0, math.sqrt(signal), size=(groups, n, 1))
    sigma = math.sqrt(noise * c)  # per-continuation sd, so that a c-continuation mean has variance N
    returns = values + rng.normal(0.0, sigma, size=(groups, n, c))
    rho, used = split_half_reliability(returns)
    implied = signal / (signal + 2 * noise)
    return {"S": signal, "N": noise, "n": n, "c": c, "groups_used": used, "observed": rho, "implied": implied,
            "finite_n": spearman_expectation(implied, n)}


def builtin_env(name: str, vocab: int = 3, seed: int = 0, **kwargs: Any) -> SyntheticEnv:
    from c3_plugin.core.workflow import load_workflow

    return SyntheticEnv(load_workflow(name), vocab=vocab, seed=seed, **kwargs)


def summary(rows: Sequence[Mapping[str, Any]], min_clusters: int = 30) -> dict:
    """Cells with at least ``min_clusters`` independent runs (a cluster standard error needs
    them): their count, the largest |z|, how many lie within 3 standard errors, and the
    p-value of sum z^2 against chi-square with one degree of freedom per cell."""
    from scipy.stats import chi2

    z = np.array([r["z"] for r in rows if r.get("clusters", r["n_obs"]) >= min_clusters])
    if not len(z):
        return {"cells": 0, "max_abs_z": float("nan"), "within_3se": 0, "chi2_p": float("nan")}
    return {"cells": len(z), "max_abs_z": float(np.abs(z).max()), "within_3se": int((np.abs(z) <= 3).sum()),
            "chi2_p": float(chi2.sf((z ** 2).sum(), len(z)))}
