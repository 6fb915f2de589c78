"""``c3 advise`` on team shapes it was not developed on: the plan it names against measured learning.

Seven synthetic regimes of new shapes (:data:`SHAPES`, ``MatchChainEnv`` of ``bench/studies/synthetic_learning.py``):
3- and 4-agent chains with strong downstream agents, parallel solvers with a judge, an irrelevant upstream, a noisy
binary reward, and one team at budgets n = 2 and n = 8 reward calls per instance. Seeds never used before: the
advice and the measurement on seeds 300.. (``--seeds``, 30 by default), every arm's step size picked on seeds
3000.. (``--select-seeds``, 10) over the grid {2, 4, 8, 16, 32} (highest mean AUC), so no arm is scored on the seeds
that picked its step size. Per regime:

* **the advice**, as a user gets it: ``c3 diagnose``'s own statistics on groups sampled from the first evaluation
  seed's initial team (``--groups`` contexts per decision point, n = 4, c = 4; c = 1 at the last point, so the
  outcome variance ``O`` is unknown), then ``advise`` with the benched tree (the default, the most even tree of B
  leaves); also, for reference, with ``O`` stated (the exact one) and the plan the ``O = 0`` end alone ranked best
  (the rule this replaces: the best C3 plan at ``O = 0``);
* **the measurement**: every arm (MAGRPO's ``independent B``, the benched tree, the named plan, the ``O = 0`` plan)
  at its own step size, AUC of the exact success paired by seed, with 95% t-intervals;
* **the verdict**: *right* (the named outcome measures clearly so), *no clear winner* (the advice said so), *miss*
  (a named plan other than the benched one that measures clearly worse than it, or a named C3 plan clearly worse
  than MAGRPO), *wrong* (the advice named C3 or MAGRPO and the other measures clearly better), or *unconfirmed* (a
  named outcome the measurement cannot resolve).

Usage: python bench/advice_new_shapes.py [--seeds 30] [--select-seeds 10] [--groups 60] [--only NAME ...] [--quick]
       [--json bench/advice_new_shapes.json]
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

from bench.advice_holdout import advice_or_refusal, sampled_diagnosis
from bench.estimator_to_learning import run_method
from bench.studies.synthetic_learning import LearningSetup, exact_diagnosis, make_env
from c3_plugin.core.stats import paired_comparison
from c3_plugin.tools.advise import advise, default_benched

ROOT = Path(__file__).resolve().parent.parent
EVAL_SEED0 = 300  # never used before this bench (earlier: 0-39, 100-129, 1000-1009)
SELECT_SEED0 = 3000  # step-size selection, disjoint from the evaluation seeds
LRS = (2.0, 4.0, 8.0, 16.0, 32.0)
ITEM = {"question": "task"}
# name -> LearningSetup overrides (MatchChainEnv), reward calls per instance and update, env steps per run
SHAPES: dict[str, dict] = {
    # Reasoner -> Actor -> Verifier, every agent trained; the later two gain 0.3 each by the good reply, the first
    # agent's messages are worth 0, 0.1, 0.2, 0.3 (the 3-agent chain with strong downstream agents)
    "3-agent chain, strong downstream": {"setup": {"workflow": "chain3", "first_values": (0.0, 0.1, 0.2, 0.3),
                                                   "gains": (0.3, 0.3)}, "budget": 8, "steps": 800},
    # Planner -> Solver -> Critic -> Verifier, all trained, every later agent gains 0.2
    "4-agent chain, strong downstream": {"setup": {"workflow": "chain4", "first_values": (0.1, 0.1, 0.2, 0.3),
                                                   "gains": (0.2, 0.2, 0.2)}, "budget": 16, "steps": 1600},
    # SolverA and SolverB answer the question (A: one message worth 0.3; B: +0.3 for its good one), the Judge reads
    # both and gains 0.2 by the good reply to the pair
    "parallel solvers with a judge": {"setup": {"workflow": "solvers_judge", "first_values": (0.0, 0.0, 0.0, 0.3),
                                                "gains": (0.3, 0.2)}, "budget": 8, "steps": 800},
    # Reasoner -> Actor, both trained; every Reasoner message is worth 0.3 (it changes nothing), the Actor gains 0.4
    # by the good reply to the message it reads
    "irrelevant upstream": {"setup": {"workflow": "reasoner_actor", "first_values": (0.3, 0.3, 0.3, 0.3),
                                      "gains": (0.4,)}, "budget": 8, "steps": 800},
    # success near 0.5 whatever the team does: Reasoner 0.4-0.55, Actor +0.1; the Bernoulli outcome dominates
    "noisy binary reward": {"setup": {"workflow": "reasoner_actor", "first_values": (0.4, 0.45, 0.5, 0.55),
                                      "gains": (0.1,)}, "budget": 8, "steps": 800},
    # one team at two budgets: a Reasoner whose messages are worth 0, 0.1, 0.5, 0.6 and an Actor that gains 0.3
    "n = 2 (Reasoner -> Actor)": {"setup": {"workflow": "reasoner_actor", "first_values": (0.0, 0.1, 0.5, 0.6),
                                            "gains": (0.3,)}, "budget": 2, "steps": 400},
    "n = 8 (Reasoner -> Actor)": {"setup": {"workflow": "reasoner_actor", "first_values": (0.0, 0.1, 0.5, 0.6),
                                            "gains": (0.3,)}, "budget": 8, "steps": 800},
}


def arm(base: LearningSetup, plan: str) -> tuple[str, LearningSetup]:
    """The method and setup that train ``plan`` (``base.tree`` has the regime's budget of leaves)."""
    if plan.startswith("independent"):
        return "magrpo", base
    return "c3", dataclasses.replace(base, tree=tuple(json.loads(plan.split(" ", 1)[1])))


def tuned_auc(base: LearningSetup, plan: str, steps: int, select: list[int], seeds: list[int],
              lrs: tuple[float, ...]) -> dict:
    """``plan`` at the step size of the highest mean AUC on the ``select`` seeds, scored on ``seeds``."""
    method, setup = arm(base, plan)
    grid = {lr: float(run_method(method, dataclasses.replace(setup, lr=lr), select, steps)["auc"].mean())
            for lr in lrs}
    best = max(grid, key=grid.get)
    return {"lr": best, "select_auc": grid,
            "auc": run_method(method, dataclasses.replace(setup, lr=best), seeds, steps)["auc"]}


def diff(a: np.ndarray, b: np.ndarray, seeds: list[int]) -> dict:
    cmp = paired_comparison(a, b, seeds=seeds)
    low, high = cmp["ci95"]
    return {"mean": cmp["mean_diff"], "ci95": [low, high], "p": cmp["p"],
            "sign": "+" if low > 0 else "-" if high < 0 else "0"}


def verdict(advice: dict, truth: dict) -> str:
    """right / no clear winner / miss / wrong / unconfirmed, from the advice and the measured differences."""
    plan, bench, outcome = advice["plan"], advice["benched"], advice["outcome"]
    named_vs_magrpo = truth.get(f"{plan} - magrpo")
    named_vs_bench = truth.get(f"{plan} - benched")
    if outcome == "refused":
        return "no clear winner"
    if outcome == "c3" and named_vs_magrpo["sign"] == "-":
        return "wrong"
    if outcome == "magrpo" and truth[f"{bench} - magrpo"]["sign"] == "+":
        return "wrong"
    if plan != bench and named_vs_bench and named_vs_bench["sign"] == "-":
        return "miss"
    if plan.startswith("tree") and plan != bench and named_vs_magrpo["sign"] == "-":
        return "miss"
    if outcome == "no clear winner":
        return "no clear winner"
    confirmed = (named_vs_magrpo["sign"] == "+" if outcome == "c3" else truth[f"{bench} - magrpo"]["sign"] == "-")
    return "right" if confirmed else "unconfirmed"


def o0_plan(diag: dict, budget: int, scale: list[float]) -> str:
    """The best C3 plan at the O = 0 end alone (the rule the decision rule replaced)."""
    rows = advise(diag, budget, scale, outcome_variance=0.0)["plans"]
    return max((r for r in rows if r["algorithm"] == "c3"), key=lambda r: r["score"])["plan"]


def run_regime(name: str, spec: dict, seeds: list[int], select: list[int], groups: int, lrs: tuple[float, ...],
               steps: int) -> dict:
    """The advice and the measured truth of one regime."""
    bench_tree = tuple(json.loads(advise_default(spec).split(" ", 1)[1]))
    base = dataclasses.replace(LearningSetup(), env="match_chain", **spec["setup"], tree=bench_tree)
    env = make_env(base, seeds[0])
    scale = base.agent_scales(env.workflow)
    lr_scale = [scale[r] for r in env.workflow.decision_points()]
    diag = sampled_diagnosis(base, seeds[0], groups)
    exact = exact_diagnosis(env, ITEM)
    advice = advice_or_refusal(diag, spec["budget"], lr_scale)
    stated = advice_or_refusal(diag, spec["budget"], lr_scale, exact["outcome_variance"])
    bench, old = f"tree {list(bench_tree)}", o0_plan(diag, spec["budget"], lr_scale)
    plans = dict.fromkeys([f"independent {spec['budget']}", bench, advice.get("plan", bench),
                           stated.get("plan", bench), old])
    runs = {p: tuned_auc(base, p, steps, select, seeds, lrs) for p in plans if p != "-"}
    magrpo = runs[f"independent {spec['budget']}"]["auc"]
    truth = {f"{p} - magrpo": diff(r["auc"], magrpo, seeds) for p, r in runs.items() if p.startswith("tree")}
    truth.update({f"{p} - benched": diff(r["auc"], runs[bench]["auc"], seeds) for p, r in runs.items() if p != bench})
    keep = ("outcome", "plan", "benched", "vs_benched", "margin", "verdict")
    out = {"exact": {"S": [r["signal_S"] for r in exact["decisions"]], "O": exact["outcome_variance"]},
           "advice": {k: advice.get(k) for k in keep}, "advice_O_stated": {k: stated.get(k) for k in keep},
           "o0_plan": old, "arms": {p: {"lr": r["lr"], "auc_mean": float(r["auc"].mean()),
                                        "auc": [float(x) for x in r["auc"]], "select_auc": r["select_auc"]}
                                    for p, r in runs.items()},
           "truth": truth}
    out["verdict"] = verdict({**advice, "benched": bench}, truth)
    out["verdict_O_stated"] = verdict({**stated, "benched": bench}, truth)
    return out


def advise_default(spec: dict) -> str:
    """The benched tree: ``c3 advise``'s default for the workflow's decision points and the budget."""
    k = make_env(dataclasses.replace(LearningSetup(), env="match_chain", **spec["setup"]), 0).workflow.num_decisions
    return default_benched(k, spec["budget"])


def interval(advice: dict) -> str:
    margin = advice.get("margin") or {}
    ci = margin.get("ci95")
    vs = advice.get("vs_benched")
    text = f"C3 - MAGRPO [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "C3 - MAGRPO n/a"
    return text + (f"; vs benched [{vs['low']:+.3f}, {vs['high']:+.3f}]" if vs else "")


def report(name: str, r: dict) -> None:
    print(f"\n######## {name}: S per decision point {[round(x, 4) for x in r['exact']['S']]}, O {r['exact']['O']:.3f}")
    for label, key in (("O unknown", "advice"), ("O stated", "advice_O_stated")):
        a = r[key]
        print(f"  advice ({label}): {a['outcome']}, plan {a['plan']} ({interval(a)})")
    print(f"  O = 0 end alone would name: {r['o0_plan']}")
    for p, a in r["arms"].items():
        print(f"  arm {p:<22} lr {a['lr']:>4g}  AUC {a['auc_mean']:.4f}")
    for k, t in r["truth"].items():
        print(f"  measured {k:<34} {t['mean']:+.4f} [{t['ci95'][0]:+.4f}, {t['ci95'][1]:+.4f}] ({t['sign']})")
    print(f"  verdict: {r['verdict']} (O unknown); {r['verdict_O_stated']} (O stated)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=30, help=f"evaluation seeds {EVAL_SEED0}..")
    ap.add_argument("--select-seeds", type=int, default=10, help=f"step-size selection seeds {SELECT_SEED0}..")
    ap.add_argument("--groups", type=int, default=60, help="contexts per decision point of the sampled diagnosis")
    ap.add_argument("--only", nargs="+", default=None, help="regimes to run (default all)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 3 seeds, 2 selection seeds, lr 4 and 16, "
                                                         "a fifth of the steps")
    ap.add_argument("--json", default=str(ROOT / "bench" / "advice_new_shapes.json"))
    args = ap.parse_args()
    names = args.only or list(SHAPES)
    unknown = [n for n in names if n not in SHAPES]
    if unknown:
        raise SystemExit(f"--only {unknown}: not a regime; use one of {list(SHAPES)}")
    n_eval, n_sel = (3, 2) if args.quick else (args.seeds, args.select_seeds)
    seeds = list(range(EVAL_SEED0, EVAL_SEED0 + n_eval))
    select = list(range(SELECT_SEED0, SELECT_SEED0 + n_sel))
    lrs = (4.0, 16.0) if args.quick else LRS
    started = time.time()
    out = {"seeds": seeds, "select_seeds": select, "lrs": list(lrs), "groups": args.groups, "regimes": {}}
    for name in names:
        spec = SHAPES[name]
        steps = spec["steps"] // (5 if args.quick else 1)
        out["regimes"][name] = r = run_regime(name, spec, seeds, select, args.groups, lrs, steps)
        report(name, r)
    counts = {k: sum(r["verdict"] == k for r in out["regimes"].values())
              for k in ("right", "no clear winner", "unconfirmed", "miss", "wrong")}
    out["counts"] = counts
    out["wall_s"] = round(time.time() - started, 1)
    print(f"\nverdicts (O unknown): {counts}")
    Path(args.json).write_text(json.dumps(out, indent=2, default=float))
    print(f"wrote {args.json}; wall {out['wall_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
