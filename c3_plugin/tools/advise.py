"""``c3 advise``: which algorithm and rollout plan a team should train with, predicted from a diagnosis.

For every decision point ``u`` and every candidate plan of ``B`` reward calls per instance (every
tree of ``B`` leaves, C3's credit, and ``independent B``, MAGRPO's broadcast group baseline) it
predicts the signal-to-noise ratio of ``u``'s policy gradient from what ``c3 diagnose`` measures,
then says which plan gives the team's learning agents the most signal.

**Model** (the additive one of ``c3 diagnose``). A run's return is
``R = V(h_0) + sum_v A_v + eps``: ``A_v = Q(h_v, a_v) - V(h_v)`` is decision point ``v``'s own credit,
with variance ``S_v`` (the diagnosis' ``signal_S``: ``E Var_a Q``), and ``eps`` the outcome noise of a
complete path, variance ``O``. The ``A_v`` are martingale differences, so they are uncorrelated and

* ``T = Var(R) = sum_v S_v + O`` (within one instance), ``sigma_u^2 = Var(R | h_u, a_u) = sum_{v>u} S_v + O``
  (the diagnosis' ``return_variance``), and the variance that persists from teammates upstream of ``u``,
  constant within ``u``'s context, is ``U_u = sum_{v<u} S_v = T - S_u - sigma_u^2``.

**Gradient SNR.** At ``u`` an update averages ``m_u`` terms ``A_hat_i s_i`` (``s`` = grad log pi of the
message). With ``A_hat = A_u + e``, ``e`` of variance ``N_u`` uncorrelated with ``A_u`` and ``s`` given the
context (so unbiased), and the terms independent, ``|E g|^2 / E|g - E g|^2 = kappa m_u S_u / (S_u + N_u)``,
where ``kappa = |E[A s]|^2 / (S_u E|s|^2)`` depends on the policy only, the same for every plan. So

    SNR_u = m_u S_u / (S_u + N_u)        (the plan-independent kappa dropped)

* ``independent B``, leave-one-out group baseline ``A_hat_i = R_i - mean_{k != i} R_k`` (the group mean
  with the run itself scales signal and noise alike by ``(B-1)/B``, so the same SNR):
  ``m_u = B`` and ``N_u = (T - S_u) + T / (B - 1) = U_u + sigma_u^2 + T / (B - 1)``: the broadcast run
  score hands every agent its teammates' variance, upstream and downstream, as noise.
* ``tree [t_0, ..., t_{K-1}]``: at ``u``, ``n = t_u`` alternatives per context, ``c_u = prod_{v>u} t_v``
  leaves below each, ``m_u = prod_{v<=u} t_v``. The leave-one-out advantage
  ``A_hat_j = Ybar_j - mean_{k != j} Ybar_k`` has ``Ybar_j = Q_j + ebar_j``, and the leaves below ``j``
  share each level-``v`` message among ``prod_{w>v} t_w`` of them, so
  ``Var ebar_j = M_u = sum_{u<v<K} S_v / prod_{u<w<=v} t_w + O / c_u``, and
  ``N_u = S_u / (n - 1) + M_u n / (n - 1)`` (the other alternatives' true values, then their rollout noise).
  With independent continuations ``M_u = sigma_u^2 / c_u`` and the second term is the noise law
  ``sigma^2 n^2 / (B_u (n - 1))`` at ``B_u = n c_u``. No upstream term: a group shares its context.
  ``n < 2``: no credit at ``u``, SNR 0.

**The team's score.** A decision point's update is a share ``SNR / (1 + SNR)`` signal; each point counts
by its share of the team's learnable signal ``w_u = lr_u S_u / sum_v lr_v S_v`` (``lr_u``: ``--lr-scale``,
0 for a frozen agent, which then has no vote). ``score = sum_u w_u SNR_u / (1 + SNR_u)``; the plan with the
highest score is advised: C3 on that tree, or MAGRPO when ``independent B`` wins.

What it reads from diagnose.json, per decision point: ``signal_S`` and ``return_variance`` before the last
one; at the last one (``c = 1``) ``reward_variance`` = ``S_{K-1} + O`` (the spread of single rewards across
its alternatives), which the outcome variance ``O`` splits: ``outcome_variance`` where the diagnosis knows it
(the exact one of :func:`bench.studies.synthetic_learning.exact_diagnosis`), else ``--outcome-variance``
(default 0: a deterministic reward). ``T = S_0 + sigma_0^2``.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from c3_plugin.tools.plan_budget import tree_plans


def team_variances(diagnosis: Mapping[str, Any], outcome_variance: float | None = None) -> dict[str, Any]:
    """``S_u`` and ``sigma_u^2`` per decision point, ``O``, ``T`` and the upstream ``U_u`` from a diagnose.json."""
    roles = diagnosis["decision_points"]
    k = len(roles)
    by_u = {d["u"]: d for d in diagnosis["decisions"]}
    missing = [u for u in range(k) if u not in by_u or (u < k - 1 and by_u[u].get("signal_S") is None)]
    if missing:
        raise ValueError(f"c3 advise: decision points {missing} were not measured; run c3 diagnose --decisions all")
    if diagnosis.get("outcome_variance") is not None:
        o = float(diagnosis["outcome_variance"])
    else:
        o = float(outcome_variance or 0.0)
    last = by_u[k - 1]
    if last.get("reward_variance") is None:
        if k > 1:
            last_total = float(by_u[k - 2]["return_variance"])  # sigma_{K-2}^2 = S_{K-1} + O
        else:
            raise ValueError("c3 advise: the last decision point has no reward_variance (a diagnosis from before c3 "
                             "advise existed); rerun c3 diagnose")
    else:
        last_total = float(last["reward_variance"])
    signal = [max(float(by_u[u]["signal_S"]), 0.0) for u in range(k - 1)] + [max(last_total - o, 0.0)]
    sigma2 = [max(float(by_u[u]["return_variance"]), 0.0) for u in range(k - 1)] + [o]
    total = signal[0] + sigma2[0]
    upstream = [max(total - signal[u] - sigma2[u], 0.0) for u in range(k)]
    return {"roles": list(roles), "S": signal, "sigma2": sigma2, "O": o, "T": total, "U": upstream}


def plan_noise(tree: Sequence[int] | None, budget: int, var: Mapping[str, Any]) -> list[tuple[int, float]]:
    """Per decision point, the samples per update ``m_u`` and the noise variance ``N_u`` of one advantage estimate
    under ``tree`` (``None``: ``independent budget``); ``(0, inf)`` where the plan gives no credit (``n < 2``)."""
    s, o, total = var["S"], var["O"], var["T"]
    k = len(s)
    out = []
    for u in range(k):
        if tree is None:
            out.append((budget, (total - s[u]) + total / (budget - 1)))
            continue
        n = tree[u]
        if n < 2:
            out.append((0, math.inf))
            continue
        below = math.prod(tree[u + 1:])
        mean_noise = sum(s[v] / math.prod(tree[u + 1: v + 1]) for v in range(u + 1, k)) + o / below
        out.append((math.prod(tree[: u + 1]), s[u] / (n - 1) + mean_noise * n / (n - 1)))
    return out


def plan_snr(tree: Sequence[int] | None, budget: int, var: Mapping[str, Any]) -> list[float]:
    """Predicted gradient SNR ``m_u S_u / (S_u + N_u)`` of every decision point under ``tree`` (``None``:
    independent)."""
    return [m * sig / (sig + noise) if m and sig + noise > 0 else 0.0
            for sig, (m, noise) in zip(var["S"], plan_noise(tree, budget, var))]


def _rank(var: Mapping[str, Any], budget: int,
          scale: Sequence[float]) -> tuple[list[dict[str, Any]], list[float]] | None:
    """Every plan of ``budget`` leaves scored for this team (best first) and the decision points' weights; None when
    no learning decision point has any signal left (every ``lr_scale x S_u`` is 0)."""
    k = len(var["S"])
    learnable = [x * s for x, s in zip(scale, var["S"])]
    if sum(learnable) <= 0:
        return None
    weights = [x / sum(learnable) for x in learnable]
    plans = [("magrpo", f"independent {budget}", None)] + [("c3", f"tree {list(t)}", t) for t in tree_plans(k, budget)]
    rows = []
    for algorithm, name, tree in plans:
        snr = plan_snr(tree, budget, var)
        rows.append({"algorithm": algorithm, "plan": name, "snr": snr,
                     "score": sum(w * x / (1 + x) for w, x in zip(weights, snr))})
    rows.sort(key=lambda r: -r["score"])
    return rows, weights


def _margin(rows: Sequence[Mapping[str, Any]]) -> float:
    """The best C3 plan's score minus MAGRPO's (``independent B``): > 0 advises C3."""
    best_tree = next(r for r in rows if r["algorithm"] == "c3")
    indep = next(r for r in rows if r["algorithm"] == "magrpo")
    return float(best_tree["score"] - indep["score"])


BOOTSTRAP_KEYS = ("signal_S", "return_variance", "reward_variance")  # what c3 diagnose resamples per decision point


def replicates(diagnosis: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The diagnosis redrawn from its own sampling noise: replicate ``r`` takes every decision point's statistics
    from its ``r``-th bootstrap resample of groups (``bootstrap`` of ``c3 diagnose``; the decision points' groups are
    independent draws, so their resamples combine). Empty when a decision point has none (an exact diagnosis, or one
    written before ``c3 diagnose`` kept them)."""
    boots = [d.get("bootstrap") for d in diagnosis["decisions"]]
    if not boots or any(not b for b in boots):
        return []
    count = min(len(v) for b in boots for v in b.values())
    out = []
    for r in range(count):
        rows = [{**d, **{key: b[key][r] for key in BOOTSTRAP_KEYS if key in b}}
                for d, b in zip(diagnosis["decisions"], boots)]
        out.append({**diagnosis, "decisions": rows})
    return out


def _at_outcome_variance(diagnosis: Mapping[str, Any], draws: Sequence[Mapping[str, Any]], budget: int,
                         scale: Sequence[float], o: float) -> dict[str, Any]:
    """The ranking at outcome variance ``o`` and the margin's percentile 95% interval over the diagnosis' replicates
    (None without replicates); ``winner``: c3 / magrpo when the interval excludes 0 (the point estimate's sign without
    one), else None; ``no_signal`` when the team has none left at this ``o``."""
    var = team_variances(diagnosis, o)
    ranked = _rank(var, budget, scale)
    if ranked is None:
        return {"O": o, "var": var, "no_signal": True, "winner": None, "margin": None, "ci95": None}
    rows, weights = ranked
    margin = _margin(rows)
    margins = [_margin(r[0]) for d in draws if (r := _rank(team_variances(d, o), budget, scale)) is not None]
    ci = None
    if draws and len(margins) >= len(draws) // 2:
        ci = [float(x) for x in np.quantile(margins, [0.025, 0.975])]
    low, high = ci if ci is not None else (margin, margin)
    winner = "c3" if low > 0 else "magrpo" if high < 0 else None
    return {"O": o, "var": var, "rows": rows, "weights": weights, "margin": margin, "ci95": ci, "winner": winner,
            "no_signal": False, "resamples": len(margins)}


def _explain(main: Mapping[str, Any], ends: Sequence[Mapping[str, Any]], budget: int) -> tuple[str, str, float]:
    """The advice's ``outcome`` (c3, magrpo or no clear winner), its ``verdict`` in words and the score ratio of the
    best C3 plan to MAGRPO's, from the ranking at the main outcome variance and at every end worked out."""
    var, rows, weights = main["var"], main["rows"], main["weights"]
    k = len(var["S"])
    best = rows[0]
    indep = next(r for r in rows if r["algorithm"] == "magrpo")
    best_tree = next(r for r in rows if r["algorithm"] == "c3")
    ratio = best_tree["score"] / indep["score"] if indep["score"] > 0 else math.inf
    lead = max(range(k), key=lambda u: weights[u])
    why = (f"{var['roles'][lead]} carries {weights[lead]:.0%} of the learnable signal; its predicted gradient SNR is "
           f"{best_tree['snr'][lead]:.3g} on C3's {best_tree['plan']} against {indep['snr'][lead]:.3g} on "
           f"independent {budget}")
    if best["algorithm"] == "c3" and var["U"][lead] > 0:
        why += (f" (its teammates' upstream variance U = {var['U'][lead]:.3g} is noise in MAGRPO's broadcast run "
                "score, not in C3's groups)")
    elif best["algorithm"] == "magrpo":
        m = math.prod(_tree(best_tree)[: lead + 1])
        why += (f" (the tree gives it {m} alternatives per update against {budget} runs)" if m < budget else
                f" (that tree credits only {var['roles'][lead]}; independent {budget} also gives the "
                f"others {budget} samples)")
    name = {"c3": "C3", "magrpo": "MAGRPO"}
    point = (f"use {name[best['algorithm']]} with plan \"{best['plan']}\": predicted score {best['score']:.3f} vs "
             f"{(indep if best['algorithm'] == 'c3' else best_tree)['score']:.3f} for the best "
             f"{'MAGRPO' if best['algorithm'] == 'c3' else 'C3'} plan; {why}")
    labels = {"no signal" if e["no_signal"] else e["winner"] or "none" for e in ends}
    if len(labels) > 1:
        outcome = "no clear winner"
        parts = [f"O = {e['O']:.4g}: " + ("no signal left" if e["no_signal"] else
                                         f"{name.get(e['winner'], 'neither')} (margin "
                                         f"{e['margin']:+.3f} {_interval(e)})")
                 for e in ends]
        verdict = ("no clear winner: the advice hinges on the outcome variance O of a complete path, which this "
                   "diagnosis cannot measure (c = 1 at the last decision point): " + "; ".join(parts)
                   + ". Pass --outcome-variance "
                   "(0 for a deterministic reward) to decide; at O = 0 the point estimate is: " + point)
    elif main["winner"] is None:
        outcome = "no clear winner"
        verdict = (f"no clear winner: the margin of the best C3 plan over MAGRPO is {main['margin']:+.3f} "
                   f"{_interval(main)}, an interval that straddles 0 (the diagnosis' own sampling noise); more groups "
                   f"in c3 diagnose narrow it. The point estimate: {point}")
    else:
        outcome = main["winner"]
        verdict = point + f"; margin {main['margin']:+.3f} {_interval(main)}"
        if len(ends) > 1:
            verdict += " at every outcome variance O from 0 to the last point's reward variance"
    return outcome, verdict, ratio


def advise(diagnosis: Mapping[str, Any], budget: int, lr_scale: Sequence[float] | None = None,
           outcome_variance: float | None = None) -> dict[str, Any]:
    """Every candidate plan of ``budget`` leaves scored for this team; the advised algorithm and plan, and how sure
    that is.

    **Uncertainty.** The margin (best C3 plan's score minus MAGRPO's) is recomputed on every bootstrap replicate of
    the diagnosis (:func:`replicates`), giving a 95% interval; an interval that straddles 0 is *no clear winner*.
    Without replicates the interval is n/a and the verdict is the point estimate's, said so. **Outcome variance.**
    Where neither the diagnosis nor ``outcome_variance`` gives ``O`` (a diagnosis cannot split the last decision
    point's reward variance into its signal and ``O`` at ``c = 1``), the advice is worked out at both ends of what
    ``O`` can be, 0 (a deterministic reward) and the last point's whole reward variance; if the two disagree the
    verdict is *no clear winner*, naming the crossing, never a silent choice of ``O``."""
    if budget < 2:
        raise ValueError(f"--budget {budget}: a group needs at least 2 reward calls")
    k = len(diagnosis["decision_points"])
    scale = [1.0] * k if not lr_scale else [float(x) for x in lr_scale]
    if len(scale) != k or any(x < 0 for x in scale):
        raise ValueError(f"--lr-scale {list(lr_scale or [])}: give one multiplier >= 0 per decision point ({k})")
    if not any(scale):
        raise ValueError("c3 advise: no learning decision point has any signal (lr-scale 0 everywhere)")
    known = diagnosis.get("outcome_variance") is not None or outcome_variance is not None
    first = team_variances(diagnosis, outcome_variance)
    # unknown O: from none of the last reward's spread to all
    o_values = [first["O"]] if known else [0.0, first["S"][-1]]
    draws = replicates(diagnosis)
    ends = [_at_outcome_variance(diagnosis, draws, budget, scale, o) for o in o_values]
    main = next((e for e in ends if not e["no_signal"]), None)
    if main is None:
        last = first["S"][-1] + first["O"]
        raise ValueError("c3 advise: no learning decision point has any signal at outcome variance O = "
                         f"{o_values[0]:.4g}: the last decision point's reward variance is {last:.4g}, so an O at or "
                         "above it leaves that point no signal of its own, and every other decision point with "
                         f"lr-scale > 0 has S = 0; give an --outcome-variance below {last:.4g} (0 for a deterministic "
                         "reward), or measure more groups")
    var, rows, weights = main["var"], main["rows"], main["weights"]
    best = rows[0]
    outcome, verdict, ratio = _explain(main, ends, budget)
    points = [{"u": u, "role": r, "S": var["S"][u], "sigma2": var["sigma2"][u], "upstream_U": var["U"][u],
               "lr_scale": scale[u], "weight": weights[u]} for u, r in enumerate(var["roles"])]
    return {"workflow": diagnosis.get("workflow"), "budget": budget, "outcome_variance": var["O"], "T": var["T"],
            "outcome_variance_known": known, "decisions": points, "plans": rows, "algorithm": best["algorithm"],
            "plan": best["plan"], "c3_over_magrpo": ratio, "outcome": outcome,
            "margin": {"c3_minus_magrpo": main["margin"], "ci95": main["ci95"], "resamples": main["resamples"],
                       "by_outcome_variance": [{"O": e["O"], "winner": e["winner"], "no_signal": e["no_signal"],
                                                "margin": e["margin"], "ci95": e["ci95"]} for e in ends]},
            "verdict": verdict}


def _interval(entry: Mapping[str, Any]) -> str:
    ci = entry.get("ci95")
    if ci is None:
        return ("[95% interval n/a: the diagnosis has no bootstrap replicates (an exact diagnosis, or "
                "one from before them)]")
    return f"[{ci[0]:+.3f}, {ci[1]:+.3f}] (95%, {entry.get('resamples')} bootstrap replicates of the diagnosis)"


def _tree(row: Mapping[str, Any]) -> list[int]:
    return [int(x) for x in row["plan"].split("[", 1)[1].rstrip("]").split(",")]


def print_advice(result: Mapping[str, Any], top: int = 8) -> None:
    print(f"== c3 advise: {result['workflow']}, {result['budget']} reward calls per instance ==")
    print(f"{'u':>2} {'role':>12} {'S (signal)':>11} {'sigma^2':>9} {'upstream U':>11} {'lr scale':>9} {'weight':>7}")
    for p in result["decisions"]:
        print(f"{p['u']:>2} {p['role']:>12} {p['S']:>11.4g} {p['sigma2']:>9.4g} {p['upstream_U']:>11.4g} "
              f"{p['lr_scale']:>9g} {p['weight']:>7.2f}")
    print(f"outcome variance O = {result['outcome_variance']:.4g}, run variance T = {result['T']:.4g}")
    roles = [p["role"] for p in result["decisions"]]
    print(f"\n{'plan':>22} {'algorithm':>9} " + " ".join(f"{'SNR ' + r:>14}" for r in roles) + f" {'score':>7}")
    shown = result["plans"][:top]
    if not any(r["algorithm"] == "magrpo" for r in shown):
        shown = shown + [r for r in result["plans"] if r["algorithm"] == "magrpo"]
    for r in shown:
        print(f"{r['plan']:>22} {r['algorithm']:>9} " + " ".join(f"{x:>14.3f}" for x in r["snr"])
              + f" {r['score']:>7.3f}")
    margin = result.get("margin") or {}
    if margin:
        print(f"\nmargin, best C3 plan minus MAGRPO: {margin['c3_minus_magrpo']:+.4f} "
              + (f"[{margin['ci95'][0]:+.4f}, {margin['ci95'][1]:+.4f}] 95% over {margin['resamples']} replicates"
                 if margin.get("ci95") else "[95% interval n/a: no bootstrap replicates in the diagnosis]")
              + ("" if result.get("outcome_variance_known", True)
                 else "; O unknown, advice at O = 0 and O = its maximum"))
    print(f"outcome: {result.get('outcome', result['algorithm'])}")
    print("\nverdict: " + result["verdict"])
