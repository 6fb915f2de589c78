"""Estimator to learning: tabular softmax teams trained on C3, MAGRPO-style and critic-based advantages.

Synthetic environment with exact Q and V (bench.studies.synthetic_learning): the 3-agent
Reasoner -> Actor -> Verifier workflow, 4 messages per role, the Reasoner's message decides most of
the outcome (success probability 0.7 for one of its 4 messages, 0.3 for the others). Two environment
variants (synthetic_learning.ENV_VARIANTS):

* decisive first: the Actor and the Verifier shift the success probability by at most +-0.08 each;
* masked later mistake: the Actor has one harmful message that costs 0.2 whatever came before (and no
  other effect), which the near-uniform initial Actor writes about once in 4 runs; the Verifier adds
  +-0.08 as before. Per-message credit should teach the Actor to avoid it faster than a run score
  whose variance is mostly the Reasoner's and the outcome's.

Every method spends the same env steps per update (8 terminal reward calls per update: C3 on tree
[2, 2, 2], the others on independent 8) and the same policy-gradient step size; the curves are the
EXACT expected success of the current policies (no evaluation noise).

Methods: c3; magrpo (group-mean baseline, CoMLRL's default); magrpo (rloo), the same runs with a
leave-one-out group baseline, whose expected step equals C3's (the group mean shrinks it by (B-1)/B);
critic (tabular V_hat(context)); oracle, the exact Q - V of each message on the independent runs: the
ceiling of what credit can buy. Run at several step sizes, because whether advantage noise matters for
learning depends on how far one noisy step moves the policy.

Prints per environment: how a run's reward variance splits between the agents' choices and the
Bernoulli outcome at the start (exact); per step size the final exact success and area under the curve
(mean +- 95% t interval over seeds), the first agent's final probability of its good message (mean) and
the seeds where it is below 0.5 ("stuck"), messages written per update and, with a harmful Actor
message, the team's probability of writing it at the end and averaged over the run (area under its
curve) and the seeds where it ends above 0.5. Then the paired differences C3 - MAGRPO and C3 - critic
(paired t-test, Holm-adjusted over every test printed, both environments). Writes the figure data to
bench/estimator_to_learning.json and the plots to docs/figures/estimator_to_learning.png (success, a
row per environment, a panel per step size) and docs/figures/estimator_to_learning_harmful.png.

The regimes study (``--study regimes``; synthetic_learning.REGIMES, MatchChainEnv) asks where C3 wins:
a learner downstream of a teammate whose variance persists (Reasoner frozen, or at 0.1x the step size;
tree [2, 4] vs independent 8) and an all-trained 4-agent chain whose first agent decides (tree
[2, 2, 2, 2] vs independent 16). Each method runs a step-size grid on selection seeds 1000.. (which pick its
step size by mean AUC) and on the evaluation seeds 0..29 (which measure); the paired differences at each
method's own best step size and those at equal step sizes are Holm-adjusted as two families. Beside each measured winner
it prints what ``c3 advise`` picks from the exact diagnosis of the initial team, and when the advice picks another
tree than the benched one, that tree is trained too. Figure: docs/figures/estimator_to_learning_regimes.png.

Usage: python bench/estimator_to_learning.py [--quick] [--study variants|regimes|all] [--env NAME ...] [--lrs LR ...]
       [--regime NAME ...] [--select-seeds N]
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

from bench.studies.synthetic_learning import (
    ENV_VARIANTS,
    REGIMES,
    LearningSetup,
    exact_diagnosis,
    learning_curves,
    make_env,
    variance_decomposition,
)
from c3_plugin.core.stats import area_under_curve, holm, paired_comparison, summarize
from c3_plugin.tools.advise import advise, print_advice

ROOT = Path(__file__).resolve().parent.parent
ROWS = [  # (label, method, LearningSetup overrides)
    ("c3", "c3", {}),
    ("magrpo", "magrpo", {}),
    ("magrpo (rloo)", "magrpo", {"group_mode": "rloo"}),
    ("critic", "critic", {}),
    ("oracle Q-V", "oracle", {}),
]
PAIRS = [("c3", "magrpo"), ("c3", "critic")]
DEFAULT_LRS = {"decisive first": [0.5, 2.0, 8.0], "masked later mistake": [2.0, 8.0]}
STYLE = {"c3": ("tab:blue", "-"), "magrpo": ("tab:orange", "-"), "magrpo (rloo)": ("tab:orange", ":"),
         "critic": ("tab:green", "-"), "oracle Q-V": ("0.4", "--")}


REGIME_LRS = [2.0, 4.0, 8.0, 16.0, 32.0]  # the step-size grid of every method in the regimes study
REGIME_STEPS = {"downstream learner (frozen upstream)": 800, "downstream learner (slow upstream)": 800,
                "all-trained 4-agent chain": 1600}  # env steps per training run (100 updates each)
SELECT_SEED0 = 1000  # the regimes' step sizes are picked on seeds 1000.., disjoint from the evaluation seeds 0..
ITEM = {"question": "task"}


def run_method(method: str, setup: LearningSetup, seeds: list[int], env_steps: int) -> dict:
    """Curves of one method: the env-step grid, the exact success [seeds, points], per-seed final success,
    AUC and the first agent's final probability of its good message; with a penalty, the team's probability
    of the Actor's harmful message [seeds, points], its final value and its mean over the run."""
    rows = learning_curves(method, seeds, env_steps, setup)
    steps = sorted({r["env_step"] for r in rows})
    per_seed = [[r for r in rows if r["seed"] == s] for s in seeds]
    success = np.array([[r["success"] for r in rs] for rs in per_seed])
    first_good = np.array([rs[-1]["first_good"] for rs in per_seed])
    messages = max(r["messages"] for r in rows) / max(steps) * setup.leaves * setup.copies  # per update
    out = {"steps": steps, "success": success, "final": success[:, -1], "messages_per_update": messages,
           "first_good": first_good, "auc": np.array([area_under_curve(steps, row) for row in success])}
    if setup.actor_penalty:
        harmful = np.array([[r["harmful"] for r in rs] for rs in per_seed])
        out.update(harmful=harmful, harmful_final=harmful[:, -1],
                   harmful_mean=np.array([area_under_curve(steps, h) for h in harmful]))
    return out


def band(values: np.ndarray) -> dict:
    """Mean and 95% t band over seeds at every evaluation point of ``values`` [seeds, points]."""
    b = [summarize(values[:, k]) for k in range(values.shape[1])]
    return {"mean": [x["mean"] for x in b], "lo": [x["ci95"][0] for x in b], "hi": [x["ci95"][1] for x in b]}


def fmt(s: dict) -> str:
    return f"{s['mean']:.4f} +- {(s['ci95'][1] - s['ci95'][0]) / 2:.4f}"


def plot(curves: dict, key: str, path: Path, ylabel: str, title: str) -> None:
    """A row per environment, a panel per step size: ``curves[env][lr][label][key]`` bands against env steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = [e for e in curves if any(key in c for by_lr in curves[e].values() for c in by_lr.values())]
    cols = max(len(curves[e]) for e in envs)
    fig, axes = plt.subplots(len(envs), cols, figsize=(5.0 * cols, 3.9 * len(envs)), sharey=True, squeeze=False)
    for row, env in zip(axes, envs):
        for ax, (lr, by_label) in zip(row, curves[env].items()):
            for label, c in by_label.items():
                color, ls = STYLE[label]
                ax.plot(c["steps"], c[key]["mean"], color=color, ls=ls, label=label)
                ax.fill_between(c["steps"], c[key]["lo"], c[key]["hi"], color=color, alpha=0.15, lw=0)
            ax.set_title(f"{env}, lr = {lr:g}", fontsize=10)
            ax.set_xlabel("env steps (terminal reward calls)")
            ax.grid(alpha=0.3)
        for ax in row[len(curves[env]):]:
            ax.set_visible(False)
        row[0].set_ylabel(ylabel)
    axes[0][0].legend(loc="best", fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def variants_study(args: argparse.Namespace, seeds: list[int], env_steps: int) -> dict:
    """The environment variants (ENV_VARIANTS): every method of ROWS at every step size; writes the two figures."""
    t0 = time.time()
    print(f"seeds: {len(seeds)}, env steps per run: {env_steps} ({LearningSetup().leaves} per update for every method)")
    envs, curves, tests = {}, {}, {}
    for env_name in args.env:
        base = dataclasses.replace(LearningSetup(), **ENV_VARIANTS[env_name])
        lrs = args.lrs or DEFAULT_LRS[env_name]
        shares = np.array([[*d["decisions"], d["outcome"], d["total"]] for s in seeds
                           for d in [variance_decomposition(make_env(base, s), {"question": "task"})]]).mean(axis=0)
        roles = make_env(base, 0).workflow.decision_points()
        print(f"\n######## {env_name}: {base}")
        print("reward variance at the start, exact, mean over seeds: " + ", ".join(
            f"{r} {v:.4f} ({v / shares[-1]:.0%})" for r, v in zip([*roles, "Bernoulli outcome"], shares[:-1]))
              + f"; total {shares[-1]:.4f}")
        envs[env_name] = {"overrides": ENV_VARIANTS[env_name], "setup": dataclasses.asdict(base), "lrs": lrs,
                          "by_lr": {}, "variance_at_start": {"roles": roles, "decisions": shares[:-2].tolist(),
                                                             "outcome": float(shares[-2]), "total": float(shares[-1])}}
        curves[env_name] = {}
        for lr in lrs:
            out = {label: run_method(method, dataclasses.replace(base, lr=lr, **over), seeds, env_steps)
                   for label, method, over in ROWS}
            grids = {tuple(v["steps"]) for v in out.values()}
            if len(grids) != 1:
                raise RuntimeError(f"{env_name}, lr={lr}: the methods were evaluated at different env steps: {grids}")
            penalty = "harmful" in out["c3"]
            curves[env_name][lr] = {}
            summary = {}
            print(f"\n== {env_name}, lr = {lr:g}: exact success (mean +- 95% CI half-width over {len(seeds)} seeds) ==")
            head = f"{'method':>14} {'final success':>18} {'area under curve':>18} {'final pi(good)':>15} {'stuck':>6}"
            print(head + (f" {'P(harm) end':>11} {'P(harm) mean':>12} {'>0.5':>5}" if penalty else "")
                  + f" {'messages/update':>16}")
            for label, v in out.items():
                curves[env_name][lr][label] = c = {"steps": v["steps"], "success": band(v["success"])}
                summary[label] = {"final": summarize(v["final"]), "auc": summarize(v["auc"]),
                                  "messages_per_update": v["messages_per_update"],
                                  "first_good_final": v["first_good"].tolist(),
                                  "stuck_seeds": int((v["first_good"] < 0.5).sum()),
                                  "final_per_seed": v["final"].tolist(), "auc_per_seed": v["auc"].tolist(), "curve": c}
                line = (f"{label:>14} {fmt(summary[label]['final']):>18} {fmt(summary[label]['auc']):>18} "
                        f"{v['first_good'].mean():>15.3f} {summary[label]['stuck_seeds']:>6}")
                if penalty:
                    c["harmful"] = band(v["harmful"])
                    summary[label].update(harmful_final=summarize(v["harmful_final"]),
                                          harmful_mean=summarize(v["harmful_mean"]),
                                          harmful_final_per_seed=v["harmful_final"].tolist(),
                                          harmful_mean_per_seed=v["harmful_mean"].tolist(),
                                          harmful_stuck_seeds=int((v["harmful_final"] > 0.5).sum()))
                    line += (f" {v['harmful_final'].mean():>11.4f} {v['harmful_mean'].mean():>12.4f} "
                             f"{summary[label]['harmful_stuck_seeds']:>5}")
                print(line + f" {v['messages_per_update']:>16.0f}")
            pairs = {}
            for a, b in PAIRS:
                for metric in ("final", "auc") + (("harmful_final", "harmful_mean") if penalty else ()):
                    cmp = paired_comparison(out[a][metric], out[b][metric], seeds=seeds)
                    pairs[f"{a} - {b} ({metric})"] = cmp
                    tests[f"{env_name}, lr={lr:g}: {a} - {b} ({metric})"] = cmp["p"]
            envs[env_name]["by_lr"][str(lr)] = {"methods": summary, "paired": pairs}

    adjusted = holm(tests)
    print("\n== paired differences over seeds (same environment and seeds for every method; Holm over all "
          f"{len(tests)} tests) ==")
    print("   (harmful_*: the team's probability of the Actor's harmful message; negative = C3 avoids it more)")
    print(f"{'comparison':>60} {'mean diff':>10} {'95% CI':>20} {'t':>7} {'p':>9} {'p (Holm)':>9}")
    for env_name, e in envs.items():
        for lr in e["lrs"]:
            for name, cmp in e["by_lr"][str(lr)]["paired"].items():
                key = f"{env_name}, lr={lr:g}: {name}"
                cmp["p_holm"] = adjusted[key]
                t = "-" if cmp["t"] is None else f"{cmp['t']:.2f}"
                p = "-" if cmp["p"] is None else f"{cmp['p']:.4f}"
                ph = "-" if adjusted[key] is None else f"{adjusted[key]:.4f}"
                ci = f"[{cmp['ci95'][0]:+.4f}, {cmp['ci95'][1]:+.4f}]"
                print(f"{key:>60} {cmp['mean_diff']:>+10.4f} {ci:>20} {t:>7} {p:>9} {ph:>9}")

    report = {"seeds": seeds, "env_steps": env_steps,
              "methods": [{"label": label, "method": m, "overrides": over} for label, m, over in ROWS],
              "holm_family": len(tests), "envs": envs, "wall_s": round(time.time() - t0, 1)}
    plot(curves, "success", Path(args.png), "exact success probability",
         "Reasoner -> Actor -> Verifier, exact success: mean and 95% band over seeds")
    if any("harmful" in c for by_lr in curves.values() for by_label in by_lr.values() for c in by_label.values()):
        plot(curves, "harmful", Path(args.png_harmful), "P(Actor writes its harmful message)",
             "Masked later mistake: the team's exact probability of the Actor's harmful message, mean "
             "and 95% band over seeds")
    print(f"\nwrote {args.png} and {args.png_harmful}; variants wall time {time.time() - t0:.1f}s")
    return report


def mean_diagnosis(setup: LearningSetup, seeds: list[int]) -> dict:
    """The exact diagnosis (synthetic_learning.exact_diagnosis) of the initial policies, averaged over seeds."""
    ds = [exact_diagnosis(make_env(setup, s), ITEM) for s in seeds]
    out = ds[0]
    for u, row in enumerate(out["decisions"]):
        for key in ("signal_S", "return_variance", "reward_variance"):
            if key in row:
                row[key] = float(np.mean([d["decisions"][u][key] for d in ds]))
    for key in ("outcome_variance", "reward_variance_total"):
        out[key] = float(np.mean([d[key] for d in ds]))
    return out


def regimes_study(args: argparse.Namespace, seeds: list[int]) -> dict:
    """C3 against MAGRPO in the two regimes (synthetic_learning.REGIMES), each at its own best step size: every method
    runs the whole grid on the selection seeds (which pick its step size, by mean AUC) and on the evaluation seeds
    (which measure). Prints c3 advise's pick from the exact diagnosis beside the measured winner; one figure."""
    t0 = time.time()
    lrs = [4.0, 16.0] if args.quick else REGIME_LRS
    select = list(range(SELECT_SEED0, SELECT_SEED0 + (2 if args.quick else args.select_seeds)))
    results, curves = {}, {}
    # two Holm families: each method at its best lr (the question), and the grid
    tests: dict[str, dict] = {"best": {}, "grid": {}}
    for name in args.regime:
        base = dataclasses.replace(LearningSetup(), **REGIMES[name])
        steps = REGIME_STEPS[name] // (5 if args.quick else 1)
        env = make_env(base, 0)
        scale = base.agent_scales(env.workflow)
        diag = mean_diagnosis(base, seeds)
        advice = advise(diag, base.leaves, [scale[r] for r in env.workflow.decision_points()])
        benched = {"c3": f"tree {list(base.tree)}", "magrpo": f"independent {base.leaves}"}
        bench_score = {m: next(r["score"] for r in advice["plans"] if r["plan"] == plan) for m, plan in benched.items()}
        rows = [("c3", "c3", {}), ("magrpo", "magrpo", {})]
        if advice["algorithm"] == "c3" and advice["plan"] != benched["c3"]:  # also measure the plan the advice picks
            rows.append((f"c3 {advice['plan']} (advised)", "c3",
                         {"tree": tuple(json.loads(advice["plan"].split(" ", 1)[1]))}))
        print(f"\n######## regime: {name} ({steps} env steps per run, {base.leaves} per update; lr scale per agent "
              f"{list(base.lr_scale) or 'all 1'}; step sizes {lrs}; picked on seeds {select[0]}..{select[-1]}, "
              f"measured on seeds {seeds[0]}..{seeds[-1]})")
        print_advice(advice, top=6)
        grid: dict[str, dict] = {}
        for label, method, over in rows:
            grid[label] = {}
            for lr in lrs:
                setup = dataclasses.replace(base, lr=lr, **over)
                sel = run_method(method, setup, select, steps)
                ev = run_method(method, setup, seeds, steps)
                grid[label][lr] = {"select_auc": float(sel["auc"].mean()), "eval": ev}
        best = {label: max(lrs, key=lambda lr: g[lr]["select_auc"]) for label, g in grid.items()}
        print(f"\n{'method':>28} " + " ".join(f"{'AUC @ lr ' + format(lr, 'g'):>16}" for lr in lrs)
              + f" {'best (selection)':>17}")
        for label, g in grid.items():
            print(f"{label:>28} " + " ".join(f"{fmt(summarize(g[lr]['eval']['auc'])):>16}" for lr in lrs)
                  + f" {best[label]:>17g}")
        print("   (AUC on the evaluation seeds, mean +- 95% half-width; the step size is picked by mean AUC on "
              "the selection seeds)")
        summary = {label: {str(lr): {"select_auc": g[lr]["select_auc"], "auc": summarize(g[lr]["eval"]["auc"]),
                                     "final": summarize(g[lr]["eval"]["final"]),
                                     "auc_per_seed": g[lr]["eval"]["auc"].tolist(),
                                     "final_per_seed": g[lr]["eval"]["final"].tolist(),
                                     "messages_per_update": g[lr]["eval"]["messages_per_update"]} for lr in lrs}
                   for label, g in grid.items()}
        pairs = {}
        for label in grid:
            if label == "magrpo":
                continue
            a, b = grid[label][best[label]]["eval"], grid["magrpo"][best["magrpo"]]["eval"]
            for metric in ("auc", "final"):
                cmp = paired_comparison(a[metric], b[metric], seeds=seeds)
                pairs[f"{label} - magrpo ({metric}, each at its best lr)"] = cmp
                tests["best"][f"{name}: {label} - magrpo ({metric}, each at its best lr)"] = cmp["p"]
        for lr in lrs:  # the whole grid: the same step size for both
            cmp = paired_comparison(grid["c3"][lr]["eval"]["auc"], grid["magrpo"][lr]["eval"]["auc"], seeds=seeds)
            pairs[f"c3 - magrpo (auc, both at lr {lr:g})"] = cmp
            tests["grid"][f"{name}: c3 - magrpo (auc, both at lr {lr:g})"] = cmp["p"]
        results[name] = {"overrides": {k: list(v) if isinstance(v, tuple) else v for k, v in REGIMES[name].items()},
                         "env_steps": steps, "lrs": lrs, "select_seeds": select,
                         "best_lr": {k: float(v) for k, v in best.items()}, "methods": summary, "paired": pairs,
                         "diagnosis": diag, "advice": advice,
                         "advice_bench_plans": {"plans": benched, "scores": bench_score}}
        curves[name] = {label: {"steps": grid[label][best[label]]["eval"]["steps"], "lr": best[label],
                                "success": band(grid[label][best[label]]["eval"]["success"])} for label in grid}

    adjusted = {**holm(tests["best"]), **holm(tests["grid"])}
    print("\n== regimes: paired differences on the evaluation seeds (Holm within each family: the "
          f"{len(tests['best'])} tests at each method's best lr, the {len(tests['grid'])} at equal lr) ==")
    print(f"{'comparison':>92} {'mean diff':>10} {'95% CI':>20} {'p':>9} {'p (Holm)':>9}")
    for name, r in results.items():
        for key, cmp in r["paired"].items():
            cmp["p_holm"] = adjusted[f"{name}: {key}"]
            p = "-" if cmp["p"] is None else f"{cmp['p']:.4f}"
            ph = "-" if cmp["p_holm"] is None else f"{cmp['p_holm']:.4f}"
            ci = f"[{cmp['ci95'][0]:+.4f}, {cmp['ci95'][1]:+.4f}]"
            print(f"{name + ': ' + key:>92} {cmp['mean_diff']:>+10.4f} {ci:>20} {p:>9} {ph:>9}")
    print("\n== c3 advise (exact diagnosis of the initial team) against the measured winner (AUC, each "
          "method at its best lr) ==")
    print(f"{'regime':>38} {'advice':>30} {'predicted score c3 / magrpo (benched plans)':>44} {'measured':>34}")
    for name, r in results.items():
        cmp = r["paired"]["c3 - magrpo (auc, each at its best lr)"]
        ci = cmp["ci95"]
        winner = ("c3" if cmp["mean_diff"] > 0
                  else "magrpo") if cmp["p_holm"] is not None and cmp["p_holm"] < 0.05 else "no clear winner"
        r["measured_winner"] = winner
        sc = r["advice_bench_plans"]["scores"]
        adv = f"{r['advice']['algorithm']} ({r['advice']['plan']})"
        measured = f"{winner} ({cmp['mean_diff']:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}])"
        print(f"{name:>38} {adv:>30} {sc['c3']:>21.3f} / {sc['magrpo']:<20.3f} {measured:>34}")
    plot_regimes(curves, Path(args.png_regimes))
    plot_regime_grid(results, Path(args.png_regimes).with_name(Path(args.png_regimes).stem + "_lr.png"))
    wall = round(time.time() - t0, 1)
    print(f"wrote {args.png_regimes} and its _lr.png (AUC against step size); regimes wall time {wall}s")
    return {"seeds": seeds, "holm_families": {k: len(v) for k, v in tests.items()}, "results": results, "wall_s": wall}


def plot_regimes(curves: dict, path: Path) -> None:
    """A panel per regime: each method's exact success at its best step size, mean and 95% band over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(5.0 * len(curves), 3.9), squeeze=False)
    for ax, (name, by_label) in zip(axes[0], curves.items()):
        for label, c in by_label.items():
            color, ls = STYLE.get(label, ("tab:purple", "--"))
            ax.plot(c["steps"], c["success"]["mean"], color=color, ls=ls, label=f"{label}, lr {c['lr']:g}")
            ax.fill_between(c["steps"], c["success"]["lo"], c["success"]["hi"], color=color, alpha=0.15, lw=0)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("env steps (terminal reward calls)")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    axes[0][0].set_ylabel("exact success probability")
    fig.suptitle("C3 vs MAGRPO, each at its best step size (picked on separate seeds): mean and 95% band over seeds",
                 fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_regime_grid(results: dict, path: Path) -> None:
    """A panel per regime: each method's AUC (evaluation seeds, mean and 95% interval) against the step size; the
    step size picked on the selection seeds circled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5.0 * len(results), 3.6), squeeze=False)
    for ax, (name, r) in zip(axes[0], results.items()):
        for label, by_lr in r["methods"].items():
            color, ls = STYLE.get(label, ("tab:purple", "--"))
            lrs = [float(x) for x in by_lr]
            mean = [by_lr[x]["auc"]["mean"] for x in by_lr]
            lo = [by_lr[x]["auc"]["mean"] - by_lr[x]["auc"]["ci95"][0] for x in by_lr]
            hi = [by_lr[x]["auc"]["ci95"][1] - by_lr[x]["auc"]["mean"] for x in by_lr]
            ax.errorbar(lrs, mean, yerr=[lo, hi], color=color, ls=ls, marker="o", ms=3, capsize=2, label=label)
            best = r["best_lr"][label]
            ax.plot([best], [by_lr[str(best)]["auc"]["mean"]], "o", mfc="none", mec=color, ms=11)
        ax.set_xscale("log", base=2)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("step size lr (circled: picked on the selection seeds)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("AUC of exact success")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: 5 seeds, 320 env steps (regimes: 3 + 2 seeds, 2 step sizes)")
    ap.add_argument("--study", choices=["variants", "regimes", "all"], default="all",
                    help="variants: ENV_VARIANTS, every method and step size; regimes: C3 vs MAGRPO at each "
                         "one's best step size")
    ap.add_argument("--seeds", type=int, default=30,
                    help="seeds 0..N-1 (each: environment, initial policies, sampling, rewards)")
    ap.add_argument("--env-steps", type=int, default=1600, help="terminal reward calls per training run (variants)")
    ap.add_argument("--env", nargs="+", choices=list(ENV_VARIANTS), default=list(ENV_VARIANTS),
                    help="environment variants")
    ap.add_argument("--lrs", type=float, nargs="+", default=None,
                    help=f"policy-gradient step sizes for every environment variant (default: {DEFAULT_LRS})")
    ap.add_argument("--regime", nargs="+", choices=list(REGIMES), default=list(REGIMES),
                    help="regimes of the regimes study")
    ap.add_argument("--select-seeds", type=int, default=10,
                    help=f"regimes: seeds {SELECT_SEED0}.. that pick each method's step size")
    ap.add_argument("--json", default=str(ROOT / "bench" / "estimator_to_learning.json"))
    ap.add_argument("--png", default=str(ROOT / "docs" / "figures" / "estimator_to_learning.png"))
    ap.add_argument("--png-harmful", default=str(ROOT / "docs" / "figures" / "estimator_to_learning_harmful.png"))
    ap.add_argument("--png-regimes", default=str(ROOT / "docs" / "figures" / "estimator_to_learning_regimes.png"))
    args = ap.parse_args()
    seeds = list(range(5 if args.quick else args.seeds))
    t0 = time.time()
    path = Path(args.json)
    report = json.loads(path.read_text()) if path.exists() else {}  # a study not run keeps its last results
    if args.study in ("variants", "all"):
        report.update(variants_study(args, seeds, 320 if args.quick else args.env_steps))
    if args.study in ("regimes", "all"):
        report["regimes"] = regimes_study(args, list(range(3)) if args.quick else seeds)
    path.write_text(json.dumps(report, indent=1))
    print(f"\nwrote {args.json}; wall time {time.time() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
