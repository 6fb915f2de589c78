"""The paper's mechanism studies on a real model (SmolLM2-135M, the CPU demo task), through ``c3 diagnose``'s core.

Studies (each resumable: its raw groups are kept under --out and reused when run again):
  depth   reliability by depth: split-half and implied S/(S+2N) at every decision point of the 2-agent
          team, the 3-agent chain and the opening and last-but-one roles of the 5-agent chain (n = 4, c = 4);
  noise   the noise law: observed / predicted rollout noise at the 2-agent Reasoner over an (n, c) grid,
          and the split-half reliability c3 plan-budget predicts for each cell against the one observed;
  critic  C3's alternative ranking (4 continuations) against a 16-continuation reference, the
          reference-vs-reference ceiling and a learned critic (bench.studies.critic_study);
  report  tables and figures (docs/figures/*.png) from whatever has been collected.

Usage: python bench/credit_mechanisms.py depth noise critic report [--out runs/mechanisms] [--scale 1.0]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # for bench.studies
CONFIG = ROOT / "configs" / "math" / "demo_cpu.yaml"
FIGURES = ROOT / "docs" / "figures"
HINT = "Give a one-line hint. No answer."
ANSWER = "Answer with the larger number."
# The demo task on deeper teams: every role but the last writes a short line, the last answers in \boxed{.
WORKFLOWS = {
    "reasoner_actor": None,  # the demo config's own workflow
    "reasoner_actor_verifier": {"name": "reasoner_actor_verifier", "prefix": {"Verifier": "\\boxed{"},
                                "max_new_tokens": {"Reasoner": 16, "Actor": 16, "Verifier": 4},
                                "system": {"Reasoner": HINT, "Actor": "Say in one line which number is larger. No box.",
                                           "Verifier": ANSWER}},
    "chain5": {"name": "chain5", "prefix": {"Verifier": "\\boxed{"},
               "max_new_tokens": {"Planner": 16, "Solver": 16, "Critic": 16, "Reviser": 16, "Verifier": 4},
               "system": {"Planner": "Give a one-line plan. No answer.", "Solver": "Carry out the plan in one line.",
                          "Critic": "Name one possible mistake in one line.", "Reviser": "Fix the working in one line.",
                          "Verifier": ANSWER}},
}
DEPTH = {"reasoner_actor": ("all", 160), "reasoner_actor_verifier": ("all", 480), "chain5": ("0,3", 40)}
# what the depth table claims: (decision point a, decision point b), a expected the more reliable
CONTRASTS = [(("reasoner_actor", 0), ("reasoner_actor_verifier", 0)), (("reasoner_actor", 0), ("chain5", 0)),
             (("reasoner_actor_verifier", 1), ("reasoner_actor_verifier", 0)), (("chain5", 3), ("chain5", 0))]
NOISE_GRID = [(4, 2), (4, 8), (8, 4)]  # plus (4, 4) from the depth study
NOISE_GROUPS = 48


def session(workflow: str | None = None):
    from c3_plugin.core.config import load_config
    from c3_plugin.tools.session import open_session

    spec = WORKFLOWS.get(workflow or "reasoner_actor")
    # diagnose sets its own plans; the config's training plan only has to fit the workflow's depth
    overrides = [] if spec is None else [f"workflow={spec!r}",
                                         f"c3.plan=tree {[2, 4] + [1] * (len(spec['max_new_tokens']) - 2)}"]
    return open_session(load_config(str(CONFIG), overrides))


def depth(out: Path, scale: float) -> None:
    from c3_plugin.tools.diagnose import diagnose, print_report

    for wf, (decisions, groups) in DEPTH.items():
        print_report(diagnose(session(wf), out / "depth" / wf, groups=max(8, int(groups * scale)), decisions=decisions))


def noise(out: Path, scale: float) -> None:
    from c3_plugin.tools.diagnose import diagnose, print_report

    s = session()
    for n, c in NOISE_GRID:
        print_report(diagnose(s, out / "noise" / f"n{n}_c{c}", groups=max(8, int(NOISE_GROUPS * scale)), n=n, c=c,
                              decisions="0"))


def critic(out: Path, scale: float) -> None:
    from bench.studies.critic_study import critic_comparison

    result = critic_comparison(session(), out / "depth" / "reasoner_actor", out / "critic",
                               held_out=max(8, int(48 * scale)))
    print(json.dumps({k: v for k, v in result.items() if k != "per_point"}, indent=2))


def report(out: Path) -> None:
    from c3_plugin.tools.diagnose import RAW, contrast, plot_depth, raw_groups
    from c3_plugin.tools.plan_budget import predicted_reliability
    from c3_plugin.tools.session import print_table

    FIGURES.mkdir(parents=True, exist_ok=True)
    reports = [json.loads(p.read_text()) for wf in DEPTH if (p := out / "depth" / wf / "diagnose.json").exists()]
    if reports:
        print("== Reliability by depth (n = 4, c = 4) ==")
        rows = [{"workflow": r["workflow"], **d} for r in reports for d in r["decisions"]]
        print_table(rows, ["workflow", "u", "role", "groups", "usable", "split_half", "split_half_lo", "split_half_hi",
                           "implied", "implied_lo", "implied_hi", "signal_S", "noise_N", "influence",
                           "zero_signal_share"])
        plot_depth(reports, FIGURES / "reliability_by_depth.png")
        rows = []
        for (wa, ua), (wb, ub) in CONTRASTS:
            if (out / "depth" / wa / RAW).exists() and (out / "depth" / wb / RAW).exists():
                a, b = (raw_groups(out / "depth" / w, u, DEPTH[w][1]) for w, u in ((wa, ua), (wb, ub)))
                rows.append({"a": f"{wa} u{ua}", "b": f"{wb} u{ub}", **contrast(a, b)})
        print("\n== Reliability differences a - b (95%: split-half Welch, implied independent bootstrap) ==")
        print_table(rows, ["a", "b", "split_half_diff", "split_half_diff_lo", "split_half_diff_hi", "implied_diff",
                           "implied_diff_lo", "implied_diff_hi"])
    cells = []
    for n, c in [(4, 4)] + NOISE_GRID:
        p = out / ("depth/reasoner_actor" if (n, c) == (4, 4) else f"noise/n{n}_c{c}") / "diagnose.json"
        if p.exists():
            d = json.loads(p.read_text())["decisions"][0]
            cells.append({"n": n, "c": c, "groups": d["groups"], "sigma2": d["return_variance"],
                          "observed": d["noise_observed"], "predicted": d["noise_predicted"], "ratio": d["noise_ratio"],
                          "ratio_lo": d["noise_ratio_lo"], "ratio_hi": d["noise_ratio_hi"],
                          "split_half": d["split_half"], "usable": d["usable"], "implied": d["implied"],
                          "planned": predicted_reliability(d["signal_S"], d["return_variance"], n, c // 2)})
    if cells:
        print("\n== Noise law at the 2-agent Reasoner (B = nc/2 per half) ==")
        print_table(cells, ["n", "c", "groups", "sigma2", "observed", "predicted", "ratio", "ratio_lo", "ratio_hi",
                            "split_half", "usable", "implied", "planned"])
    critic_path = out / "critic" / "critic.json"
    if critic_path.exists():
        res = json.loads(critic_path.read_text())
        print("\n== Critic comparison at the 2-agent Reasoner (held-out decision points) ==")
        print_table(res["rows"], ["estimator", "points", "rank_corr", "lo", "hi"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("studies", nargs="+", choices=["depth", "noise", "critic", "report"])
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "mechanisms", help="where raw groups and reports go")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every group count (0.1: a smoke run)")
    args = ap.parse_args()
    for study in args.studies:
        if study == "report":
            report(args.out)
        else:
            globals()[study](args.out, args.scale)
    return 0


if __name__ == "__main__":
    sys.exit(main())
