"""``c3 advise`` against the measured winner on held-out seeds: the advice as a user gets it, from a *sampled*
diagnosis with its own uncertainty, in the three synthetic regimes of ``bench/estimator_to_learning.py --study
regimes``.

Seeds 0-29 (evaluation), 1000-1009 (step-size selection) and 30-39 (the re-check that found the 4-agent chain's
verdict reversing) were all looked at while the advice was developed; this bench uses seeds 100-129 only. Per regime:

* **the advice**: ``c3 diagnose``'s statistics (``decision_report``, with its bootstrap replicates) on groups sampled
  from the first held-out seed's initial team (``--groups`` contexts per decision point, ``n = 4`` alternatives,
  ``c = 4`` continuations, ``c = 1`` at the last point, as ``c3 diagnose`` draws them), then ``advise``: once with the
  outcome variance unknown (what a diagnosis of a binary reward gives), once with the exact one stated, and, for
  reference, the point advice from the exact diagnosis (no interval);
* **the measurement**: C3 against MAGRPO, each at the step size the regimes study picked on its selection seeds
  (``bench/estimator_to_learning.json``), AUC of exact success paired by seed over the 30 held-out seeds, with the 95%
  t-interval of the mean difference; "no clear winner" when it straddles 0. In the frozen-upstream regime the advised
  ``tree [1, 8]`` is measured against ``tree [2, 4]`` as well.

Usage: python bench/advice_holdout.py [--seeds 30] [--groups 60] [--json bench/advice_holdout.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for bench.studies

from bench.estimator_to_learning import REGIME_STEPS, run_method
from bench.studies.synthetic_learning import REGIMES, LearningSetup, exact_diagnosis, make_env
from c3_plugin.core.credit_diagnostics import decision_groups
from c3_plugin.core.rollout import materialize
from c3_plugin.core.stats import paired_comparison
from c3_plugin.core.synthetic import SyntheticBackend
from c3_plugin.tools.advise import advise
from c3_plugin.tools.diagnose import decision_report

ROOT = Path(__file__).resolve().parent.parent
HOLDOUT_SEED0 = 100  # never used while c3 advise and its interval were developed
ITEM = {"question": "task"}


def sampled_diagnosis(setup: LearningSetup, seed: int, groups: int, n: int = 4, c: int = 4) -> dict:
    """What ``c3 diagnose`` reports for one seed's initial team: per decision point ``groups`` contexts, ``n``
    alternatives, ``c`` continuations each (1 at the last point), summarised by its own ``decision_report``."""
    env = make_env(setup, seed)
    wf = env.workflow
    backend = SyntheticBackend(env, seed=seed + 17)
    rng = np.random.default_rng(seed + 29)
    rows = []
    for u, role in enumerate(wf.decision_points()):
        cont = 1 if u == wf.num_decisions - 1 else c
        items = [{"id": f"diag-u{u}-g{g}", **ITEM} for g in range(groups)]
        ro = materialize(wf, f"diagnostic n={n} u={u} c={cont}", items, backend, lambda leaves: env.reward(leaves, rng))
        rows.append({"u": u, "role": role, **decision_report(decision_groups(ro, ro.rewards, u), seed=seed + u)})
    return {"workflow": wf.name, "decision_points": wf.decision_points(), "source": "sampled", "decisions": rows}


def advice_or_refusal(diagnosis: dict, budget: int, lr_scale: list[float],
                      outcome_variance: float | None = None) -> dict:
    """``advise``, or its refusal as an outcome (a stated O at or above the sampled reward variance leaves no
    signal)."""
    try:
        return advise(diagnosis, budget, lr_scale, outcome_variance)
    except ValueError as exc:
        return {"outcome": "refused", "plan": "-", "margin": {"c3_minus_magrpo": float("nan"), "ci95": None},
                "verdict": str(exc)}


def measured(setup: LearningSetup, seeds: list[int], steps: int, lrs: dict, label_a: str, over_a: dict) -> dict:
    a = run_method("c3", dataclasses.replace(setup, lr=lrs[label_a], **over_a), seeds, steps)["auc"]
    b = run_method("magrpo", dataclasses.replace(setup, lr=lrs["magrpo"]), seeds, steps)["auc"]
    cmp = paired_comparison(a, b, seeds=seeds)
    low, high = cmp["ci95"]
    winner = "c3" if low > 0 else "magrpo" if high < 0 else "no clear winner"
    return {"mean_diff": cmp["mean_diff"], "ci95": [low, high], "p": cmp["p"], "winner": winner, "n": len(seeds)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=30, help=f"held-out seeds {HOLDOUT_SEED0}..")
    ap.add_argument("--groups", type=int, default=60,
                    help="contexts per decision point of the sampled diagnosis (c3 diagnose's default)")
    ap.add_argument("--json", default=str(ROOT / "bench" / "advice_holdout.json"))
    args = ap.parse_args()
    started = time.time()
    picked = json.loads((ROOT / "bench" / "estimator_to_learning.json").read_text())["regimes"]["results"]
    seeds = list(range(HOLDOUT_SEED0, HOLDOUT_SEED0 + args.seeds))
    out = {"seeds": seeds, "groups": args.groups, "regimes": {}}
    for name, over in REGIMES.items():
        setup = dataclasses.replace(LearningSetup(), **over)
        env = make_env(setup, seeds[0])
        scale = setup.agent_scales(env.workflow)
        lr_scale = [scale[r] for r in env.workflow.decision_points()]
        diag = sampled_diagnosis(setup, seeds[0], args.groups)
        exact = exact_diagnosis(env, ITEM)
        stated = exact["outcome_variance"]
        advice = {"sampled, O unknown": advice_or_refusal(diag, setup.leaves, lr_scale),
                  "sampled, O stated (exact)": advice_or_refusal(diag, setup.leaves, lr_scale, stated),
                  "exact diagnosis (no interval)": advice_or_refusal(exact, setup.leaves, lr_scale)}
        lrs = picked[name]["best_lr"]
        meas = {"c3 " + f"tree {list(setup.tree)}": measured(setup, seeds, REGIME_STEPS[name], lrs, "c3", {})}
        advised = "c3 tree [1, 8] (advised)"
        if advised in lrs:
            meas["c3 tree [1, 8]"] = measured(setup, seeds, REGIME_STEPS[name], {**lrs, "c3": lrs[advised]}, "c3",
                                              {"tree": (1, 8)})
        out["regimes"][name] = {"lr_scale": lr_scale, "advice": {k: {"outcome": v["outcome"], "plan": v["plan"],
                                                                    "margin": v["margin"], "verdict": v["verdict"]}
                                                                for k, v in advice.items()},
                                "measured": meas, "best_lr": lrs}
        print(f"\n######## {name} (held-out seeds {seeds[0]}..{seeds[-1]}, diagnosis of seed {seeds[0]} on "
              f"{args.groups} groups)")
        for k, v in advice.items():
            ci = v["margin"]["ci95"]
            interval = f"[{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "n/a"
            print(f"  advice, {k:<30} {v['outcome']:<16} ({v['plan']}; margin "
                  f"{v['margin']['c3_minus_magrpo']:+.3f} {interval})")
        for k, m in meas.items():
            print(f"  measured, {k} - magrpo (AUC): {m['mean_diff']:+.4f} [{m['ci95'][0]:+.4f}, "
                  f"{m['ci95'][1]:+.4f}] -> {m['winner']}")
    out["wall_s"] = round(time.time() - started, 1)
    Path(args.json).write_text(json.dumps(out, indent=2, default=float))
    print(f"\nwrote {args.json}; wall {out['wall_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
