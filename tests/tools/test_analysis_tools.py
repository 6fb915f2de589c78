"""``c3 diagnose``, ``c3 plan-budget`` and ``c3 audit``: their statistics against known truth (Gaussian groups,
the synthetic environment's exact Q and V), re-entering recorded prefixes, and the commands end to end on tiny
models."""

import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from c3_plugin.core.plan import parse_plan
from c3_plugin.core.protocol import Sampling
from c3_plugin.core.rollout import materialize
from c3_plugin.core.stats import spearman_expectation
from c3_plugin.core.synthetic import SyntheticBackend, SyntheticEnv
from c3_plugin.core.trace import read_jsonl, write_jsonl
from c3_plugin.core.workflow import load_workflow
from c3_plugin.run.testing import template_config
from c3_plugin.tools.audit import audit, recorded_runs, select_runs
from c3_plugin.tools.cli import console
from c3_plugin.tools.diagnose import adjacent_contrasts, contrast, decision_report
from c3_plugin.tools.plan_budget import plan_budget, predicted_reliability, tree_plans
from c3_plugin.tools.session import Session

pytestmark = pytest.mark.xdist_group("analysis_tools")  # one worker builds the module's shared fixture once


def gaussian_groups(signal, sigma2, g, n, c, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(0, np.sqrt(signal), (g, n, 1)) + rng.normal(0, np.sqrt(sigma2), (g, n, c))


def test_decision_report_recovers_signal_noise_and_reliability():
    rep = decision_report(gaussian_groups(0.05, 0.1, 4000, 4, 4))
    assert rep["usable"] == 4000  # continuous returns: every group ranks its alternatives
    assert rep["signal_S"] == pytest.approx(0.05, abs=0.005) and rep["noise_N"] == pytest.approx(0.025, abs=0.002)
    assert rep["implied"] == pytest.approx(0.5, abs=0.04) and rep["implied_lo"] < 0.5 < rep["implied_hi"]
    assert rep["noise_ratio"] == pytest.approx(1.0, abs=0.06) and rep["noise_ratio_lo"] < 1.0 < rep["noise_ratio_hi"]
    assert rep["split_half"] == pytest.approx(spearman_expectation(0.5, 4), abs=0.03)
    assert rep["split_half_lo"] < rep["split_half"] < rep["split_half_hi"]
    flat = decision_report(np.zeros((50, 4, 4)))  # nothing to rank: no usable group, full zero-signal share
    assert flat["usable"] == 0 and flat["zero_signal_share"] == 1.0


def test_contrast_separates_different_reliabilities_and_covers_equal_ones():
    strong, weak = gaussian_groups(0.05, 0.1, 300, 4, 4, seed=1), gaussian_groups(0.005, 0.1, 300, 4, 4, seed=2)
    d = contrast(strong, weak)
    truth = 0.5 - 0.005 / (0.005 + 0.05)  # S/(S+2N) at N = sigma^2/4
    assert d["implied_diff_lo"] < truth < d["implied_diff_hi"] and d["implied_diff_lo"] > 0
    assert d["split_half_diff_lo"] > 0 and d["split_half_diff"] == pytest.approx(
        spearman_expectation(0.5, 4) - spearman_expectation(0.005 / 0.055, 4), abs=0.1)
    covered = [contrast(gaussian_groups(0.02, 0.1, 120, 4, 4, seed=10 + s),
                        gaussian_groups(0.02, 0.1, 120, 4, 4, seed=60 + s), seed=s, resamples=300) for s in range(40)]
    assert np.mean([c["implied_diff_lo"] < 0 < c["implied_diff_hi"] for c in covered]) >= 0.85
    assert np.mean([c["split_half_diff_lo"] < 0 < c["split_half_diff_hi"] for c in covered]) >= 0.85
    # diagnose's contrasts: each decision point with continuations against the previous one (not the last role)
    chunks = [{"u": u, "first": f, "groups": grp[f:f + 100].tolist()}
              for u, grp in ((0, weak), (1, strong), (2, weak[:, :, :1]))
              for f in (0, 100, 200)]
    (adjacent,) = adjacent_contrasts(chunks, 3)
    assert (adjacent["a"], adjacent["b"]) == (1, 0) and adjacent["implied_diff"] == pytest.approx(d["implied_diff"])


@pytest.mark.parametrize("n,c", [(3, 4), (4, 8), (8, 2)])
def test_plan_budget_prediction_matches_observed_split_half(n, c):
    signal, sigma2 = 0.04, 0.2
    observed = decision_report(gaussian_groups(signal, sigma2, 4000, n, c, seed=n * c))["split_half"]
    assert predicted_reliability(signal, sigma2, n, c // 2) == pytest.approx(observed, abs=0.04)


def test_plan_budget_trades_alternatives_against_continuations():
    noisy = {"workflow": "reasoner_actor", "decision_points": ["Reasoner", "Actor"],
             "decisions": [{"u": 0, "signal_S": 0.01, "return_variance": 0.25}]}
    clean = {**noisy, "decisions": [{"u": 0, "signal_S": 0.2, "return_variance": 0.01}]}
    best_noisy = plan_budget(noisy, 16)["decisions"][0]["best"]
    best_clean = plan_budget(clean, 16)["decisions"][0]["best"]
    # noise buys continuations, signal alternatives
    assert best_noisy["c"] > best_clean["c"] and best_clean["n"] > best_noisy["n"]
    result = plan_budget(clean, 8)
    assert all(np.prod(t["tree"]) == 8 for t in result["trees"]) and len(result["trees"]) == len(tree_plans(2, 8))
    assert parse_plan(result["recommended"]).leaves(2) == 8
    # the last role: its reward is exact
    assert result["decisions"][1]["best"] == {"n": 8, "c": 1, "calls": 8, "predicted": 1.0}


# ----- re-entering recorded runs on the synthetic environment -----------------------------------------------------


def synthetic_session(env, seed=0):
    rng = np.random.default_rng(seed)
    trainer = SimpleNamespace(backend=SyntheticBackend(env, seed=seed),
                              reward_leaves=lambda leaves: env.reward(leaves, rng), sampling=lambda: Sampling(),
                              tokenizers=None, args=SimpleNamespace())
    domain = SimpleNamespace(make_reward=lambda config: SimpleNamespace(reward_range=(0.0, 1.0)), outcome=None)
    return Session(cfg=SimpleNamespace(reward_processor=SimpleNamespace(scale=1.0, shift=0.0), domain_cfg=None),
                   domain=domain, workflow=env.workflow, train=None, trainer=trainer)


def test_materialize_given_reenters_a_recorded_prefix():
    env = SyntheticEnv(load_workflow("reasoner_actor_verifier"), vocab=3, seed=1)
    wf = env.workflow
    rec = materialize(wf, "tree [2, 2, 2]", [{"id": "a", "question": "q1"}, {"id": "b", "question": "q2"}],
                      SyntheticBackend(env, 0), lambda leaves: env.reward(leaves, np.random.default_rng(0)))
    runs = recorded_runs(rec.entries, len(wf.steps))
    assert len(runs) == 16 and all(r.path[0].kind == "instance" and len(r.path) == 4 for r in runs)
    picked = [runs[3], runs[12]]
    items = [{**r.path[0].item, "id": f"x{i}"} for i, r in enumerate(picked)]
    ro = materialize(wf, "tree [1, 3, 2]", items, SyntheticBackend(env, 5), lambda leaves: [0.0] * len(leaves),
                     given=[r.path[1:2] for r in picked])
    assert [e.message for e in ro.decision_entries(0)] == [r.path[1].message for r in picked]
    actor = ro.decision_entries(1)
    assert [e.context for e in actor[::3]] == [r.path[2].context for r in picked]  # re-entered at the recorded context
    assert ro.budget.messages.tolist() == [3 + 6, 3 + 6]  # the copied Reasoner message is not a new sample
    with pytest.raises(ValueError, match="branches at decision points"):
        materialize(wf, "tree [2, 3, 2]", items, SyntheticBackend(env, 5), lambda leaves: [0.0] * len(leaves),
                    given=[r.path[1:2] for r in picked])
    with pytest.raises(ValueError, match="expected step 0"):
        materialize(wf, "tree [1, 3, 2]", items, SyntheticBackend(env, 5), lambda leaves: [0.0] * len(leaves),
                    given=[r.path[2:3] for r in picked])


def test_audit_credit_is_unbiased_and_its_interval_covers_exact_q_minus_v():
    env = SyntheticEnv(load_workflow("reasoner_actor_verifier"), vocab=3, seed=3)
    wf = env.workflow
    rec = materialize(wf, "tree [1, 1, 1]", [{"id": "a", "question": "Name a prime."}], SyntheticBackend(env, 0),
                      lambda leaves: env.reward(leaves, np.random.default_rng(0)))
    run = recorded_runs(rec.entries, len(wf.steps))[0]
    item, outputs = run.path[0].item, [e.output for e in run.path[1:]]
    truth = [env.q(item, outputs[:u], run.path[u + 1].message) - env.value(item, outputs[:u]) for u in range(3)]
    reps = [audit(synthetic_session(env, seed=s), [run], n=8, c=8, seed=s)["runs"][0]["messages"] for s in range(150)]
    for u in range(3):
        adv = np.array([r[u]["advantage"] for r in reps])
        assert abs(adv.mean() - truth[u]) < 4 * adv.std(ddof=1) / np.sqrt(len(adv)) + 1e-9
        covered = np.mean([r[u]["ci_lo"] <= truth[u] <= r[u]["ci_hi"] for r in reps])
        assert covered >= 0.85, (u, covered)
    last = reps[0][2]
    # the last role: its action re-scored c times
    assert len(last["q_returns"]) == 8 and len(last["alternative_means"]) == 8
    for m in reps[0]:  # what would have won: the fresh alternative with the highest mean return
        assert m["best_alternative_mean"] == max(m["alternative_means"])
        assert m["best_alternative"] == m["alternatives"][int(np.argmax(m["alternative_means"]))]


def test_split_half_interval_stays_within_the_range_of_a_correlation():
    """Few, reliable groups: the mean of their Spearman values is near 1, where a normal interval passes 1; the
    reported percentile bootstrap interval stays within [-1, 1] and holds the mean."""
    from c3_plugin.core import credit
    from c3_plugin.tools.diagnose import mean_correlation_ci
    from c3_plugin.tools.session import mean_ci

    groups = gaussian_groups(0.05, 0.02, 8, 4, 4, seed=5)
    rho, used = credit.split_half_per_group(groups)
    assert mean_ci(rho[used])[2] > 1  # the normal interval the report used to give
    for seed in range(20):
        rep = decision_report(gaussian_groups(0.05, 0.02, 8, 4, 4, seed=seed), seed=seed)
        assert -1 <= rep["split_half_lo"] <= rep["split_half"] <= rep["split_half_hi"] <= 1, rep
    assert mean_correlation_ci([1.0, 1.0, 1.0]) == (1.0, 1.0, 1.0)  # every group agreed: no spread
    assert np.isnan(mean_correlation_ci([0.5])[1:]).all()  # one group: no interval


def _saved_figures(monkeypatch):
    """The matplotlib figures saved from now on (each is still drawn and written)."""
    import matplotlib.figure

    saved, save = [], matplotlib.figure.Figure.savefig
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, *a, **k: saved.append(fig)
                        or save(fig, *a, **k))
    return saved


@pytest.mark.parametrize("u", [0, 1])
def test_reliability_by_depth_with_one_decision_point_has_integer_ticks(u, tmp_path, monkeypatch):
    """One diagnosed decision point (its split-half and implied values drawn a little apart): one tick, at u."""
    from c3_plugin.tools.diagnose import plot_depth

    saved = _saved_figures(monkeypatch)
    rep = {"workflow": "reasoner_actor",
           "decisions": [{"u": u, **decision_report(gaussian_groups(0.05, 0.1, 40, 4, 4))}]}
    plot_depth([rep], tmp_path / "depth.png")
    ax = saved[0].axes[0]
    assert list(ax.get_xticks()) == [u] and [t.get_text() for t in ax.get_xticklabels()] == [str(u)]
    two = {**rep, "decisions": [{**rep["decisions"][0], "u": 0}, {**rep["decisions"][0], "u": 2}]}
    plot_depth([two, {**two, "workflow": "other"}], tmp_path / "depth2.png")
    assert list(saved[1].axes[0].get_xticks()) == [0, 2]


def test_audit_names_zero_width_intervals_and_writes_readable_boxes(tmp_path, monkeypatch, capsys):
    """A reward every sample agrees on gives a zero-width interval: audit.json says why, the table and the figure mark
    it; a box's text is white on the colour map's dark ends, black on its light middle."""
    import matplotlib.pyplot as plt

    from c3_plugin.tools.audit import interval_note, plot_audit, print_audit, text_colour

    env = SyntheticEnv(load_workflow("reasoner_actor_verifier"), vocab=3, seed=3)
    rec = materialize(env.workflow, "tree [1, 1, 1]", [{"id": "a", "question": "Name a prime."}],
                      SyntheticBackend(env, 0), lambda leaves: env.reward(leaves, np.random.default_rng(0)))
    run = recorded_runs(rec.entries, len(env.workflow.steps))[0]
    session = synthetic_session(env)
    session.trainer.reward_leaves = lambda leaves: [0.0] * len(leaves)  # every continuation fails alike
    report = audit(session, [run], n=3, c=2, progress=False)
    for m in report["runs"][0]["messages"]:
        assert m["ci_lo"] == m["ci_hi"] == 0.0
        assert (m["interval_note"].startswith("no spread: all 2 Q returns are 0 and all 3 fresh "
                                              "alternatives' mean returns are 0"))
    assert all(r["interval_note"] for r in report["ranking"])
    spread = audit(synthetic_session(env), [run], n=8, c=8, progress=False)["runs"][0]["messages"]
    assert [m["interval_note"] for m in spread
            if m["ci_hi"] > m["ci_lo"]] == [None] * sum(m["ci_hi"] > m["ci_lo"] for m in spread)
    one = {"ci_lo": -1.0, "ci_hi": -1.0, "q_returns": [0.0], "alternative_means": [1.0, 1.0]}
    assert (interval_note(one).startswith("no spread: the one Q return is 0 and all 2 fresh "
                                          "alternatives' mean returns are 1"))
    import sys

    from c3_plugin.tools import audit as audit_module
    from c3_plugin.tools.session import print_table

    # print_table's default stream is the sys.stdout of its import: hand it the captured one
    monkeypatch.setattr(audit_module, "print_table", lambda rows, cols: print_table(rows, cols, out=sys.stdout))
    print_audit(report)
    out = capsys.readouterr().out
    assert "0.000  no spread" in out and "note 'no spread': every Q return" in out
    cmap = plt.get_cmap("RdYlGn")
    assert [text_colour(cmap(x)) for x in (0.0, 0.5, 1.0)] == ["white", "black", "white"]
    assert text_colour("white") == "black" and text_colour("black") == "white"
    hurt = report["runs"][0]["messages"]
    report["runs"][0]["messages"] = [{**hurt[0], "advantage": -1.0, "ci_lo": -1.0, "ci_hi": -1.0},  # dark red
                                     {**hurt[1], "advantage": 0.0},
                                     {**hurt[2], "advantage": 1.0, "interval_note": None}]
    saved = _saved_figures(monkeypatch)
    plot_audit(report, tmp_path / "audit.png")
    texts = [t for t in saved[0].axes[0].texts if "Q-V" in t.get_text()]
    assert [t.get_color() for t in texts] == ["white", "black", "white"]
    assert ["no spread" in t.get_text() for t in texts] == [True, True, False]
    # the policy writes the messages: an unbalanced "$" (mathtext) is drawn as text, never a crash of the figure
    report["runs"][0]["messages"][0]["message"] = r"so $\frac{1}{ is $ and \boxed{$"
    report["runs"][0]["instance"] = "a$b"
    plot_audit(report, tmp_path / "dollars.png")
    assert (tmp_path / "dollars.png").stat().st_size > 0


# ----- the commands end to end on tiny models ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory):
    folder = tmp_path_factory.mktemp("analysis")
    cfg = template_config(folder, dataset={"train": {"size": 4}, "eval": [{"name": "echo", "size": 2}]},
                          output={"verbose": False, "plot": False, "base_dir": str(folder / "outputs")},
                          c3={"num_train_epochs": 1, "max_new_tokens": 3, "instances_per_update": 2,
                              "plan": "tree [2, 2]", "save_traces": True})
    path = folder / "c3.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_diagnose_command_reports_every_decision_point_and_resumes(tiny_config, tmp_path, capsys):
    out = tmp_path / "diag"
    args = ["diagnose", "--config", str(tiny_config), "--groups", "4", "--chunk", "2", "--out", str(out), "--quiet"]
    assert console(args) == 0
    report = json.loads((out / "diagnose.json").read_text())
    assert [d["u"] for d in report["decisions"]] == [0, 1] and report["decision_points"] == ["Planner", "Writer"]
    assert report["decisions"][0]["env_steps"] == 4 * 4 * 4 and report["decisions"][1]["env_steps"] == 4 * 4
    assert report["decisions"][0]["messages"] == 4 * (4 + 16) and report["decisions"][1]["messages"] == 4 * (1 + 4)
    assert (out / "reliability_by_depth.png").stat().st_size > 0
    assert "split_half" in capsys.readouterr().out
    raw = (out / "raw.jsonl").read_text().splitlines()
    assert len(raw) == 4  # 2 decision points x 2 chunks
    (out / "raw.jsonl").write_text("\n".join(raw[:-1]) + "\n")  # as if interrupted before the last chunk
    assert console(args) == 0
    def timeless(lines):
        return [{k: v for k, v in json.loads(line).items() if k != "wall_s"} for line in lines]

    # the lost chunk redone identically (seeded per chunk)
    assert timeless((out / "raw.jsonl").read_text().splitlines()) == timeless(raw)
    again = json.loads((out / "diagnose.json").read_text())
    assert [{k: v for k, v in d.items() if k != "wall_s"} for d in again["decisions"]] == \
        [{k: v for k, v in d.items() if k != "wall_s"} for d in report["decisions"]]
    with pytest.raises(SystemExit) as exc:
        console(args[:-1] + ["--n", "5", "--quiet"])
    assert exc.value.code == 2 and "different n" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:  # a sampling setting changed: refused, naming the config
        console(args + ["--override", "c3.temperature=0.3"])
    assert exc.value.code == 2 and "different config" in capsys.readouterr().out
    # settings that change no sample (output, W&B) resume the same diagnosis
    assert console(args + ["--override", "output.if_exists=overwrite", "--override", "wandb.project=elsewhere"]) == 0
    assert timeless((out / "raw.jsonl").read_text().splitlines()) == timeless(raw)
    assert console(["plan-budget", "--from", str(out / "diagnose.json"), "--budget", "8", "--out",
                    str(tmp_path / "plan.json")]) == 0
    assert 'plan: "tree' in capsys.readouterr().out
    assert json.loads((tmp_path / "plan.json").read_text())["budget"] == 8


def test_audit_command_ranks_every_message_and_refuses_hidden_state(tiny_config, tmp_path, capsys):
    from c3_plugin.core.config import load_config
    from c3_plugin.run.train import train

    summary = train(load_config(str(tiny_config)))
    run = Path(summary["run_dir"])
    assert console(["audit", "--run", str(run), "--failed", "2", "--n", "2", "--c", "2"]) == 0
    report = json.loads((run / "audit" / "audit.json").read_text())
    ranks = sorted(m["rank"] for r in report["runs"] for m in r["messages"])
    assert ranks == [1, 2, 3, 4] and len(report["ranking"]) == 4  # 2 runs x 2 decision points, ranked together
    assert [x["advantage"] for x in report["ranking"]] == sorted(x["advantage"] for x in report["ranking"])
    entries = read_jsonl(run / "traces.jsonl")
    worst = select_runs(recorded_runs(entries, 2), failed=2)
    assert [r["instance"] for r in report["runs"]] == [w.instance for w in worst]
    for r in report["runs"]:
        for m in r["messages"]:
            assert m["verdict"] in ("hurt", "no measurable effect",
                                    "helped") and m["ci_lo"] <= m["advantage"] <= m["ci_hi"]
    assert (run / "audit" / "audit.png").stat().st_size > 0
    out = capsys.readouterr().out
    assert "policies: final" in out and "rank" in out
    # a CoMLRL checkpoint of the run is restored by the trainer's own load_checkpoint (1 epoch: checkpoint-1 = final)
    import torch

    from c3_plugin.tools.session import open_session, run_config, weights_folder

    ck = weights_folder(run, "latest")
    assert ck.name == "checkpoint-1" and weights_folder(run, "checkpoint-1") == ck
    restored, final, base = (open_session(run_config(run), w).trainer.agents[0].state_dict()
                             for w in (ck, weights_folder(run, "final"), None))
    assert (all(torch.equal(restored[k], final[k]) for k in final)
            and not all(torch.equal(base[k], final[k]) for k in final))
    assert console(["audit", "--run", str(run), "--failed", "1", "--n", "2", "--c", "2", "--checkpoint", "checkpoint-1",
                    "--out", str(tmp_path / "ck")]) == 0
    assert "policies: checkpoint-1" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        console(["audit", "--run", str(run), "--checkpoint", "checkpoint-7"])
    assert exc.value.code == 2 and "this run has checkpoint-1" in capsys.readouterr().out
    target = worst[0].path[2]  # tamper with the Writer's recorded context: state the trace does not explain
    for e in entries:
        if (e.instance, e.node) == (target.instance, target.node):
            e.context += " (edited)"
    write_jsonl(entries, run / "traces.jsonl")
    with pytest.raises(SystemExit) as exc:
        console(["audit", "--run", str(run), "--instance", target.instance, "--n", "2", "--c", "2"])
    msg = capsys.readouterr().out
    assert exc.value.code == 2 and "replay check" in msg and f"instance {target.instance} node {target.node}" in msg


def test_critic_head_is_chosen_by_cross_validation_and_fits_a_learnable_target():
    from bench.studies.critic_study import HEADS, fit_critic

    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 20))
    y = x[:, :3] @ np.array([0.3, -0.2, 0.1]) + rng.normal(0, 0.05, 400)
    name, critic, losses = fit_critic(x, y, np.repeat(np.arange(100), 4))
    assert set(losses) == set(HEADS) and losses[name] == min(losses.values())
    test = rng.normal(size=(200, 20))
    truth = test[:, :3] @ np.array([0.3, -0.2, 0.1])
    assert np.corrcoef(critic(test), truth)[0, 1] > 0.9


# ----- progress on stderr and the commands' help ----------------------------------------------------------------------


def bar_counts(err: str, desc: str) -> list[str]:
    """The ``n/total`` of every frame the bar ``desc`` drew on stderr, repeats of one count once."""
    frames = [f.strip() for f in err.replace("\n", "\r").split("\r") if f.strip().startswith(desc + ":")]
    return list(dict.fromkeys(f.split("|")[2].split()[0] for f in frames))


def test_audit_bar_moves_with_each_decision_step_it_generates(capsys):
    """Per decision point u of 3, Q generates the 2 - u steps after it and V the 3 - u from it: the bar moves a share
    of the point per generated step, with the time left on show; --quiet (progress=False) draws nothing."""
    env = SyntheticEnv(load_workflow("reasoner_actor_verifier"), vocab=3, seed=3)
    rec = materialize(env.workflow, "tree [1, 1, 1]", [{"id": "a", "question": "q"}], SyntheticBackend(env, 0),
                      lambda leaves: env.reward(leaves, np.random.default_rng(0)))
    run = recorded_runs(rec.entries, len(env.workflow.steps))[0]
    audit(synthetic_session(env), [run], n=2, c=2)
    err = capsys.readouterr().err
    assert bar_counts(err, "audit (1 run)") == ["0.0/3", "0.2/3", "0.4/3", "0.6/3", "0.8/3", "1.0/3", "1.3/3", "1.7/3",
                                               "2.0/3", "3.0/3"], err
    assert "u=0 Reasoner: Q" in err and "u=2 Verifier: V" in err and "<00:00" in err
    audit(synthetic_session(env), [run], n=2, c=2, progress=False)
    assert capsys.readouterr().err == ""


def test_diagnose_bars_show_every_group_and_the_decision_point_under_way(tiny_config, tmp_path, capsys):
    """A bar over all groups and one over the current decision point's, both moving as each decision step of a chunk
    is generated (2 groups per chunk, 2 steps: one group per step)."""
    assert console(["diagnose", "--config", str(tiny_config), "--groups", "2", "--chunk", "2",
                    "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert bar_counts(err, "diagnose") == ["0.0/4", "1.0/4", "2.0/4", "3.0/4", "4.0/4"], err
    assert bar_counts(err, "u=0 Planner") == bar_counts(err, "u=1 Writer") == ["0.0/2", "1.0/2", "2.0/2"], err


def help_entries(text: str) -> list[str]:
    """Each option or positional argument of a ``--help`` text, as one line."""
    entries, current = [], None
    for line in text.splitlines():
        if re.match(r"^  \S", line):
            current = [line]
            entries.append(current)
        elif line.startswith("   ") and current is not None:
            current.append(line)
        else:
            current = None
    return [" ".join(" ".join(e).split()) for e in entries]


@pytest.mark.parametrize("command", ["train", "dry-run", "compare", "dashboard", "diagnose", "plan-budget", "advise",
                                     "audit"])
def test_every_option_of_every_command_shows_its_default(command, capsys):
    with pytest.raises(SystemExit) as exc:
        console([command, "--help"])
    text = capsys.readouterr().out
    assert exc.value.code == 0
    usage = text.split("\n\n", 1)[0]
    entries = [e for e in help_entries(text) if not e.startswith("-h, --help")]
    assert entries, text
    for entry in entries:
        flag = entry.split()[0].rstrip(",")
        required = flag.startswith("-") and re.search(rf"(?<!\[){re.escape(flag)}\b", usage)
        assert required or "default" in entry, entry
    if command == "diagnose":
        assert "(default: 60)" in text and "(default: base)" in text and "(default: all)" in text
