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
0 for a frozen agent, which then has no vote). ``score = sum_u w_u SNR_u / (1 + SNR_u)``.

**The decision rule** (:func:`advise`). The score is worked out at every outcome variance ``O`` the diagnosis
allows and on every bootstrap replicate of the diagnosis; a plan beats another *clearly* when the difference of
their scores has its 95% interval above 0 at every ``O``, never at the ``O = 0`` end alone (there the last agent's
whole reward spread counts as its signal, and the tree that gives it every alternative looks best). The plan the
team runs (``--benched``, default the most even tree) is kept unless another beats it clearly; a tree that gives
a trained agent one alternative is named only when the diagnosis shows that agent has no signal. C3 or MAGRPO:
the named (or kept) tree against ``independent B``, by the same rule.

What it reads from diagnose.json, per decision point: ``signal_S`` and ``return_variance`` before the last
one; at the last one (``c = 1``) ``reward_variance`` = ``S_{K-1} + O`` (the spread of single rewards across
its alternatives), which the outcome variance ``O`` splits: ``outcome_variance`` where the diagnosis knows it
(the exact one of :func:`bench.studies.synthetic_learning.exact_diagnosis`), else ``--outcome-variance``,
else unknown: 0, 1/4, 1/2, 3/4 and all of that spread (:data:`O_SHARES`). ``T = S_0 + sigma_0^2``.
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


O_SHARES = (0.0, 0.25, 0.5, 0.75, 1.0)  # O unknown: the shares of the last point's reward variance worked out as O
NO_SIGNAL_SHARE = 0.05  # a decision point whose signal (its 97.5% bootstrap bound) is under this share of T has none
# a tree replaces the benched tree only when its score is higher by more than this at every O: the model's error
# between trees (bench/RESULTS.md: tree [1, 8] predicted 0.03 over [2, 4], measured level with it)
TREE_SWITCH_MARGIN = 0.05
VS_KEYS = ("low", "high", "diff", "worst_O")  # a comparison with the benched plan as advice.json keeps it


def candidate_plans(k: int, budget: int) -> list[tuple[str, str, tuple[int, ...] | None]]:
    """``(algorithm, plan, tree)`` of every plan of ``budget`` leaves: MAGRPO's ``independent B``, then C3's trees."""
    return [("magrpo", f"independent {budget}", None)] + [("c3", f"tree {list(t)}", t) for t in tree_plans(k, budget)]


def default_benched(k: int, budget: int) -> str:
    """The tree a team runs without advice: alternatives at as many decision points as ``budget`` allows, as even as
    it allows, the larger factors downstream (``tree [2, 4]`` for 2 points at B = 8, ``[2, 2, 2]`` for 3)."""
    trees = tree_plans(k, budget)
    best = min(trees, key=lambda t: (sum(x < 2 for x in t), max(t), list(t) != sorted(t)))
    return f"tree {list(best)}"


def _scores(var: Mapping[str, Any], budget: int, scale: Sequence[float],
            plans: Sequence[tuple[str, str, Any]]) -> tuple[np.ndarray, list[float], list[list[float]]] | None:
    """Every plan's score, the decision points' weights and every plan's SNR per point at one ``var``; None when no
    learning decision point has any signal left (every ``lr_scale x S_u`` is 0)."""
    learnable = [x * s for x, s in zip(scale, var["S"])]
    if sum(learnable) <= 0:
        return None
    weights = [x / sum(learnable) for x in learnable]
    snrs = [plan_snr(tree, budget, var) for _, _, tree in plans]
    return np.array([sum(w * x / (1 + x) for w, x in zip(weights, snr)) for snr in snrs]), weights, snrs


def _o_at(diagnosis: Mapping[str, Any], known: float | None, share: float) -> float:
    """The outcome variance worked out: the known one, else ``share`` of the last point's reward variance."""
    return known if known is not None else share * team_variances(diagnosis, 0.0)["S"][-1]


def _evaluate(diagnosis: Mapping[str, Any], draws: Sequence[Mapping[str, Any]], budget: int, scale: Sequence[float],
              plans: Sequence[tuple[str, str, Any]], known: float | None) -> list[dict[str, Any]]:
    """Every plan scored at every outcome variance worked out (the known one, else :data:`O_SHARES` of the last
    point's reward variance, each replicate at its own share): point scores, weights, SNRs and the replicates'
    scores ``[replicates, plans]`` (None without replicates); ``no_signal`` where nothing learnable is left."""
    ends = []
    for share in (O_SHARES if known is None else (0.0,)):
        o = _o_at(diagnosis, known, share)
        point = _scores(team_variances(diagnosis, o), budget, scale, plans)
        if point is None:
            ends.append({"O": o, "share": share, "no_signal": True})
            continue
        reps = [r[0] for d in draws
                if (r := _scores(team_variances(d, _o_at(d, known, share)), budget, scale, plans)) is not None]
        enough = bool(draws) and len(reps) >= len(draws) // 2
        ends.append({"O": o, "share": share, "no_signal": False, "scores": point[0], "weights": point[1],
                     "snr": point[2], "replicates": np.array(reps) if enough else None})
    return ends


def compare(ends: Sequence[Mapping[str, Any]], a: int, b: int) -> dict[str, Any]:
    """Plan ``a``'s score minus plan ``b``'s at every outcome variance worked out, with its 95% interval over the
    diagnosis' replicates (the point where there are none): ``low``, the least lower bound over ``O`` (the decision
    rule: > 0 at every O and on 97.5% of the replicates), ``high`` the largest upper bound, and where ``low`` is."""
    rows = []
    for e in ends:
        if e["no_signal"]:
            continue
        diff = float(e["scores"][a] - e["scores"][b])
        reps = e["replicates"]
        lo, hi = ([float(x) for x in np.quantile(reps[:, a] - reps[:, b], [0.025, 0.975])] if reps is not None
                  else (diff, diff))
        rows.append({"O": e["O"], "diff": diff, "low": lo, "high": hi, "resamples": 0 if reps is None else len(reps)})
    worst = min(rows, key=lambda r: r["low"])
    return {"low": worst["low"], "high": max(r["high"] for r in rows), "diff": worst["diff"], "worst_O": worst["O"],
            "resamples": min(r["resamples"] for r in rows), "by_outcome_variance": rows}


def silent_points(diagnosis: Mapping[str, Any], draws: Sequence[Mapping[str, Any]], known: float | None) -> list[bool]:
    """Per decision point, whether the diagnosis shows it has no signal: its ``S_u`` at its largest (``O`` = 0 where
    ``O`` is unknown), the 97.5% quantile over the replicates where there are, under ``NO_SIGNAL_SHARE x T``."""
    var = team_variances(diagnosis, _o_at(diagnosis, known, 0.0))
    signal = np.array([team_variances(d, _o_at(d, known, 0.0))["S"] for d in draws] or [var["S"]])
    return [bool(x < NO_SIGNAL_SHARE * var["T"]) for x in np.quantile(signal, 0.975, axis=0)]


def _choose(plans: Sequence[tuple[str, str, Any]], ends: Sequence[Mapping[str, Any]], bench: int,
            eligible: Sequence[bool]) -> tuple[int, dict[int, dict[str, Any]]]:
    """The plan named, and every plan against the benched one: the eligible plan whose score beats the benched plan's
    at every O by the most, when it beats it clearly (``low`` > 0; a tree against the benched tree by more than
    :data:`TREE_SWITCH_MARGIN`); else the benched plan."""
    vs = {i: compare(ends, i, bench) for i in range(len(plans)) if i != bench}

    def need(i: int) -> float:
        return TREE_SWITCH_MARGIN if plans[i][2] is not None and plans[bench][2] is not None else 0.0

    clear = [i for i in vs if eligible[i] and vs[i]["low"] > need(i)]
    return (max(clear, key=lambda i: vs[i]["low"] - need(i)) if clear else bench), vs


def _outcome(plans: Sequence[tuple[str, str, Any]], ends: Sequence[Mapping[str, Any]], named: int, bench: int,
             eligible: Sequence[bool]) -> tuple[str, int, dict[str, Any]]:
    """C3 or MAGRPO, or ``no clear winner``; the C3 plan weighed against MAGRPO's ``independent B`` (index 0) and
    that comparison. A named tree: C3 when it beats independent B clearly. MAGRPO named over a benched tree: MAGRPO.
    MAGRPO benched and kept: MAGRPO when it beats every eligible tree clearly."""
    trees = [i for i in range(1, len(plans)) if eligible[i]]
    tree = named if named else bench if bench else max(trees, key=lambda i: compare(ends, i, 0)["high"])
    rival = compare(ends, tree, 0)
    if named:
        return ("c3" if rival["low"] > 0 else "no clear winner"), tree, rival
    if bench:
        return "magrpo", tree, rival
    return ("magrpo" if all(compare(ends, 0, i)["low"] > 0 for i in trees) else "no clear winner"), tree, rival


def _plan_rows(plans: Sequence[tuple[str, str, Any]], ends: Sequence[Mapping[str, Any]], budget: int, bench: int,
               vs: Mapping[int, Mapping[str, Any]], eligible: Sequence[bool]) -> list[dict[str, Any]]:
    """One row per plan, best against the benched plan first: per decision point the alternatives per context and
    the samples per update it gets, and the share of its update that is signal (``SNR / (1 + SNR)``) at the O where
    the plan compares worst; its score and SNR at the first O worked out; the comparison with the benched plan."""
    live = [e for e in ends if not e["no_signal"]]
    rows = []
    for i, (algorithm, name, tree) in enumerate(plans):
        cmp = vs.get(i)
        at = next((e for e in live if cmp and e["O"] == cmp["worst_O"]), live[0])
        k = len(at["snr"][i])
        samples = [budget] * k if tree is None else [math.prod(tree[: u + 1]) if tree[u] > 1 else 0 for u in range(k)]
        rows.append({"algorithm": algorithm, "plan": name, "benched": i == bench, "eligible": bool(eligible[i]),
                     "alternatives": [budget] * k if tree is None else list(tree), "samples": samples,
                     "signal_share": [x / (1 + x) for x in at["snr"][i]], "at_O": at["O"],
                     "snr": live[0]["snr"][i], "score": float(live[0]["scores"][i]),
                     "vs_benched": None if cmp is None else {key: cmp[key] for key in VS_KEYS}})
    rows.sort(key=lambda r: -(r["vs_benched"]["low"] if r["vs_benched"] else 0.0))
    return rows


NAME = {"c3": "C3", "magrpo": "MAGRPO"}


def _gets(row: Mapping[str, Any], roles: Sequence[str]) -> str:
    """What each decision point gets under a plan, in words."""
    if row["algorithm"] == "magrpo":
        return f"every agent {row['alternatives'][0]} independent runs scored by the broadcast run reward"
    return ", ".join(f"{r} {n} alternative{'s' if n > 1 else ''} ({m} per update, {share:.0%} signal)"
                     for r, n, m, share in zip(roles, row["alternatives"], row["samples"], row["signal_share"]))


def _explain(rows: Sequence[Mapping[str, Any]], roles: Sequence[str], named: Mapping[str, Any],
             bench: Mapping[str, Any], outcome: str, rival: Mapping[str, Any], known: bool, c3: str) -> str:
    """The verdict in words: the plan named and why, or that none beats the benched plan clearly; C3 against MAGRPO."""
    rule = "at every outcome variance worked out" + ("" if known else " (O unknown: 0 to all of the last point's reward"
                                                                       " spread)")
    if named is not bench:
        cmp = named["vs_benched"]
        text = (f"use {NAME[named['algorithm']]} with plan \"{named['plan']}\": its score beats the benched "
                f"\"{bench['plan']}\" by at least {cmp['low']:+.3f} {rule}; it gives {_gets(named, roles)}")
    else:
        best = next((r for r in rows if not r["benched"] and r["eligible"]), None)
        head = (f"no clear winner: keep the benched plan \"{bench['plan']}\"" if outcome == "no clear winner" else
                f"use {NAME[bench['algorithm']]} with the benched plan \"{bench['plan']}\"")
        text = f"{head}: no plan is clearly better; it gives {_gets(bench, roles)}"
        if best is not None:
            need = TREE_SWITCH_MARGIN if best["algorithm"] == "c3" and bench["algorithm"] == "c3" else 0.0
            text += (f". The best other, \"{best['plan']}\", beats it by {best['vs_benched']['low']:+.3f} at worst "
                     f"(needs > {need:g}) and by up to {best['vs_benched']['high']:+.3f}")
    skipped = [r for r in rows if not r["eligible"] and r["vs_benched"] and r["vs_benched"]["diff"] > 0][:1]
    for r in skipped:
        text += (f". \"{r['plan']}\" scores higher at O = {r['vs_benched']['worst_O']:.3g} but leaves a trained agent "
                 "with signal without alternatives: not named")
    interval = f"[{rival['low']:+.3f}, {rival['high']:+.3f}]"
    if outcome == "c3":
        text += f". C3 (\"{c3}\") beats MAGRPO's independent runs clearly: {interval} {rule}"
    elif outcome == "magrpo":
        text += f". MAGRPO beats C3 clearly: C3 minus MAGRPO {interval} {rule}"
    else:
        text += (f". C3 against MAGRPO: no clear winner, C3 (\"{c3}\") minus MAGRPO spans {interval} over "
                 "the outcome variances and the diagnosis' replicates"
                 + ("" if known else "; --outcome-variance narrows it"))
    if not rival["resamples"]:
        text += (" [intervals n/a: the diagnosis has no bootstrap replicates (an exact diagnosis, or one from before "
                 "them)]")
    return text


def advise(diagnosis: Mapping[str, Any], budget: int, lr_scale: Sequence[float] | None = None,
           outcome_variance: float | None = None, benched: str | None = None) -> dict[str, Any]:
    """Every candidate plan of ``budget`` leaves scored for this team; the plan named (the benched one unless another
    beats it clearly) and whether C3 or MAGRPO learns faster.

    **Decision rule.** Each plan is scored at every outcome variance ``O`` worked out (the known one, else the
    shares :data:`O_SHARES` of the last point's reward variance: a diagnosis cannot split it at ``c = 1``) and on
    every bootstrap replicate of the diagnosis (:func:`replicates`); a plan beats another *clearly* when its score
    minus the other's has its 95% interval above 0 at every ``O`` (:func:`compare`), never at the ``O = 0`` end alone.
    A plan replaces the benched one (``benched``, default :func:`default_benched`) only when it beats it clearly (a
    tree against the benched tree by more than :data:`TREE_SWITCH_MARGIN`), and a tree that gives a trained decision
    point a single alternative only when the diagnosis shows that point has no signal (:func:`silent_points`)."""
    if budget < 2:
        raise ValueError(f"--budget {budget}: a group needs at least 2 reward calls")
    k = len(diagnosis["decision_points"])
    scale = [1.0] * k if not lr_scale else [float(x) for x in lr_scale]
    if len(scale) != k or any(x < 0 for x in scale):
        raise ValueError(f"--lr-scale {list(lr_scale or [])}: give one multiplier >= 0 per decision point ({k})")
    if not any(scale):
        raise ValueError("c3 advise: no learning decision point has any signal (lr-scale 0 everywhere)")
    plans = candidate_plans(k, budget)
    names = [p[1] for p in plans]
    bench_name = " ".join(str(benched).split()).replace("[ ", "[") if benched else default_benched(k, budget)
    if bench_name not in names:
        raise ValueError(f"--benched {benched!r}: not a plan of {budget} leaves for {k} decision points; use one of "
                         f"{names}")
    known = diagnosis.get("outcome_variance") if diagnosis.get("outcome_variance") is not None else outcome_variance
    known = None if known is None else float(known)
    first = team_variances(diagnosis, known if known is not None else 0.0)
    draws = replicates(diagnosis)
    ends = _evaluate(diagnosis, draws, budget, scale, plans, known)
    if all(e["no_signal"] for e in ends):
        last = first["S"][-1] + first["O"]
        raise ValueError("c3 advise: no learning decision point has any signal at outcome variance O = "
                         f"{first['O']:.4g}: the last decision point's reward variance is {last:.4g}, so an O at or "
                         "above it leaves that point no signal of its own, and every other decision point with "
                         f"lr-scale > 0 has S = 0; give an --outcome-variance below {last:.4g} (0 for a deterministic "
                         "reward), or measure more groups")
    silent = silent_points(diagnosis, draws, known)
    eligible = [tree is None or all(t > 1 or not scale[u] or silent[u] for u, t in enumerate(tree))
                for _, _, tree in plans]
    bench = names.index(bench_name)
    named, vs = _choose(plans, ends, bench, eligible)
    outcome, c3_plan, rival = _outcome(plans, ends, named, bench, eligible)
    rows = _plan_rows(plans, ends, budget, bench, vs, eligible)
    by_name = {r["plan"]: r for r in rows}
    live = [e for e in ends if not e["no_signal"]]
    weights = np.array([e["weights"] for e in live])
    points = [{"u": u, "role": r, "S": first["S"][u], "sigma2": first["sigma2"][u], "upstream_U": first["U"][u],
               "lr_scale": scale[u], "weight": float(weights[0, u]),
               "weight_range": [float(weights[:, u].min()), float(weights[:, u].max())], "no_signal": silent[u]}
              for u, r in enumerate(first["roles"])]
    indep = live[0]["scores"][0]
    verdict = _explain(rows, first["roles"], by_name[names[named]], by_name[bench_name], outcome, rival,
                       known is not None, names[c3_plan])
    return {"workflow": diagnosis.get("workflow"), "budget": budget, "outcome_variance": first["O"], "T": first["T"],
            "outcome_variance_known": known is not None, "outcome_variances": [e["O"] for e in ends],
            "decisions": points, "plans": rows, "benched": bench_name, "algorithm": plans[named][0],
            "plan": names[named], "outcome": outcome,
            "c3_over_magrpo": float(live[0]["scores"][c3_plan] / indep) if indep > 0 else math.inf,
            "vs_benched": None if named == bench else {key: vs[named][key] for key in VS_KEYS},
            "margin": {"c3_plan": names[c3_plan], "c3_minus_magrpo": rival["diff"],
                       "ci95": [rival["low"], rival["high"]] if rival["resamples"] else None,
                       "resamples": rival["resamples"], "by_outcome_variance": rival["by_outcome_variance"]},
            "verdict": verdict}


def print_advice(result: Mapping[str, Any], top: int = 8) -> None:
    print(f"== c3 advise: {result['workflow']}, {result['budget']} reward calls per instance ==")
    print(f"{'u':>2} {'role':>12} {'S (signal)':>11} {'sigma^2':>9} {'upstream U':>11} {'lr scale':>9} "
          f"{'share of the learnable signal':>30}")
    for p in result["decisions"]:
        lo, hi = p["weight_range"]
        share = f"{lo:.0%}" if abs(hi - lo) < 0.005 else f"{lo:.0%} to {hi:.0%} over O"
        print(f"{p['u']:>2} {p['role']:>12} {p['S']:>11.4g} {p['sigma2']:>9.4g} {p['upstream_U']:>11.4g} "
              f"{p['lr_scale']:>9g} {share + (' (no signal)' if p['no_signal'] else ''):>30}")
    os_ = ", ".join(f"{o:.3g}" for o in result["outcome_variances"])
    print(f"outcome variance O = {os_}{'' if result['outcome_variance_known'] else ' (unknown: worked out at each)'}, "
          f"run variance T = {result['T']:.4g}")
    roles = [p["role"] for p in result["decisions"]]
    print("\nper agent: alternatives per context / samples per update / share of its update that is signal (at the "
          "O where the plan compares worst); score minus the benched plan's: worst 95% lower bound over O, upper")
    print(f"{'plan':>22} {'alg':>6} " + " ".join(f"{r[:16]:>16}" for r in roles) + f" {'vs benched':>18}")
    shown = [r for r in result["plans"][:top]]
    shown += [r for r in result["plans"] if r not in shown and (r["benched"] or r["algorithm"] == "magrpo"
                                                                 or r["plan"] == result["plan"])]
    for r in shown:
        cells = [f"{n}/{m}/{s:.0%}" for n, m, s in zip(r["alternatives"], r["samples"], r["signal_share"])]
        cmp = r["vs_benched"]
        tail = "benched" if r["benched"] else f"[{cmp['low']:+.3f}, {cmp['high']:+.3f}]"
        mark = "" if r["eligible"] else " (starves an agent with signal)"
        print(f"{r['plan']:>22} {r['algorithm']:>6} " + " ".join(f"{c:>16}" for c in cells) + f" {tail:>18}{mark}")
    margin = result["margin"]
    ci = margin["ci95"]
    print(f"\nC3 (\"{margin['c3_plan']}\") minus MAGRPO: {margin['c3_minus_magrpo']:+.4f} at the worst O"
          + (f", [{ci[0]:+.4f}, {ci[1]:+.4f}] over O and {margin['resamples']} replicates" if ci
             else " [interval n/a: no bootstrap replicates in the diagnosis]"))
    kept = result["plan"] == result["benched"]
    print(f"plan: {result['plan']} ({'the benched plan' if kept else 'replaces the benched ' + result['benched']})")
    print(f"outcome: {result['outcome']}")
    print("\nverdict: " + result["verdict"])

