"""``c3 advise`` (c3_plugin.tools.advise): the noise of every plan's advantage estimates matches a simulation of the
additive model it is derived from; on the synthetic regimes, the advice from the exact diagnosis names the
algorithm that measurably learns faster there (C3 for a learner downstream of a frozen teammate, MAGRPO for the
all-trained 4-agent chain); the CLI writes its JSON; diagnose reports the last decision point's reward variance."""

import dataclasses
import json

import numpy as np
import pytest

from bench.studies.synthetic_learning import REGIMES, LearningSetup, exact_diagnosis, learning_curves, make_env
from c3_plugin.core import credit
from c3_plugin.core.stats import area_under_curve
from c3_plugin.tools.advise import advise, default_benched, plan_noise, plan_snr, print_advice, team_variances
from c3_plugin.tools.cli import console
from c3_plugin.tools.diagnose import decision_report

ITEM = {"question": "task"}


def diagnosis(S, O, roles=None):
    """A diagnose.json of the additive model with signals ``S`` per decision point and outcome variance ``O``."""
    k = len(S)
    roles = roles or [f"R{u}" for u in range(k)]
    rows = [{"u": u, "role": roles[u], "signal_S": S[u], "return_variance": sum(S[u + 1:]) + O} for u in range(k - 1)]
    rows.append({"u": k - 1, "role": roles[-1], "reward_variance": S[-1] + O})
    return {"workflow": "test", "decision_points": roles, "decisions": rows, "outcome_variance": O}


def simulate(tree, S, O, instances, rng):
    """Additive-model runs on ``tree``: every level-v message adds an independent N(0, S_v) to its leaves' return,
    every leaf its own N(0, O). Returns the rewards [instances, *tree] and each level's true credits."""
    shape = (instances, *tree)
    credits = []
    rewards = rng.normal(0.0, np.sqrt(O), shape)
    for v, s in enumerate(S):
        a = rng.normal(0.0, np.sqrt(s), (instances, *tree[: v + 1]))
        credits.append(a)
        rewards = rewards + a.reshape(a.shape + (1,) * (len(tree) - v - 1))
    return rewards, credits


@pytest.mark.parametrize("tree", [(2, 4), (4, 2), (2, 2, 2), (3, 1, 2), (1, 4, 2)])
def test_tree_noise_matches_the_additive_model(tree):
    """N_u = S_u / (n-1) + M_u n / (n-1), M_u the noise of the mean of the leaves below an alternative, which share
    the messages between: the variance of (leave-one-out advantage - true credit) in a simulation."""
    S = [0.05, 0.02, 0.03][: len(tree)]
    O = 0.1
    var = team_variances(diagnosis(S, O))
    rng = np.random.default_rng(0)
    rewards, credits = simulate(tree, S, O, 40000, rng)
    predicted = plan_noise(tree, 0, var)
    for u, n in enumerate(tree):
        if n < 2:
            assert predicted[u] == (0, np.inf)
            continue
        groups = rewards.reshape(-1, n, int(np.prod(tree[u + 1:])))
        err = credit.loo_advantages_batch(groups) - credits[u].reshape(-1, n)
        m, noise = predicted[u]
        assert m == int(np.prod(tree[: u + 1]))
        assert err.mean() == pytest.approx(0.0, abs=0.01)  # unbiased
        assert err.var() == pytest.approx(noise, rel=0.03), (u, tree)


def test_independent_continuations_give_the_noise_law():
    """A level whose continuations are independent (only the next level branches below it): the rollout term of
    N_u is the noise law sigma^2 n^2 / (B_u (n-1)), plus the baseline's S / (n-1)."""
    S, O = [0.04, 0.01], 0.12
    var = team_variances(diagnosis(S, O))
    for n, c in ((2, 4), (4, 2), (8, 1)):
        (_, noise), _ = plan_noise((n, c), 0, var)
        assert noise == pytest.approx(S[0] / (n - 1) + credit.noise_variance(S[1] + O, n, n * c), abs=1e-12)


@pytest.mark.parametrize("u", [0, 1, 2])
def test_broadcast_noise_matches_the_additive_model(u):
    """MAGRPO's broadcast score R_i - mean_{k != i} R_k hands decision point u every other point's variance and the
    outcome's, upstream ones included: N_u = T - S_u + T / (B - 1)."""
    S, O, B = [0.05, 0.02, 0.03], 0.1, 8
    var = team_variances(diagnosis(S, O))
    rng = np.random.default_rng(1)
    rewards, credits = simulate((B, 1, 1), S, O, 40000, rng)
    runs = rewards.reshape(-1, B)
    adv = credit.group_advantages(runs, "rloo")
    err = adv - credits[u].reshape(-1, B)
    m, noise = plan_noise(None, B, var)[u]
    assert m == B and noise == pytest.approx(sum(S) + O - S[u] + (sum(S) + O) / (B - 1), abs=1e-12)
    assert err.var() == pytest.approx(noise, rel=0.03)


def test_upstream_variance_costs_magrpo_not_c3():
    """Moving variance from the outcome to an upstream teammate leaves C3's downstream SNR unchanged (its groups
    share the context) and lowers MAGRPO's by exactly that much noise."""
    a, b = team_variances(diagnosis([0.0, 0.01], 0.2)), team_variances(diagnosis([0.1, 0.01], 0.2))
    assert plan_snr((2, 4), 8, a)[1] == pytest.approx(plan_snr((2, 4), 8, b)[1], abs=1e-12)
    assert plan_noise(None, 8, b)[1][1] - plan_noise(None, 8, a)[1][1] == pytest.approx(0.1 * (1 + 1 / 7), abs=1e-12)
    assert b["U"] == pytest.approx([0.0, 0.1])


def test_advice_inputs_are_checked():
    d = diagnosis([0.05, 0.01], 0.1)
    with pytest.raises(ValueError, match="one multiplier >= 0 per decision point"):
        advise(d, 8, [1.0])
    with pytest.raises(ValueError, match="no learning decision point"):
        advise(d, 8, [0.0, 0.0])
    with pytest.raises(ValueError, match="at least 2 reward calls"):
        advise(d, 1)
    partial = {**d, "decisions": d["decisions"][1:]}
    with pytest.raises(ValueError, match="run c3 diagnose --decisions all"):
        advise(partial, 8)
    no_o = {k: v for k, v in d.items() if k != "outcome_variance"}  # a real diagnosis: O from the flag, default 0
    assert (team_variances(no_o)["S"][1] == pytest.approx(0.11) and team_variances(no_o, 0.1)["S"][1]
            == pytest.approx(0.01))
    r = advise(d, 8)
    assert {p["plan"] for p in r["plans"]} == {"independent 8", "tree [1, 8]", "tree [2, 4]", "tree [4, 2]",
                                               "tree [8, 1]"}
    assert r["algorithm"] in ("c3", "magrpo") and r["plan"] == r["plans"][0]["plan"] and r["verdict"].startswith("use ")


def regime_advice(name, seeds=range(3)):
    setup = dataclasses.replace(LearningSetup(), **REGIMES[name])
    env = make_env(setup, 0)
    scale = setup.agent_scales(env.workflow)
    diags = [exact_diagnosis(make_env(setup, s), ITEM) for s in seeds]
    return setup, advise(diags[0], setup.leaves, [scale[r] for r in env.workflow.decision_points()])


def auc_diff(setup, lr, seeds, env_steps):
    """Per seed, C3's AUC minus MAGRPO's at step size ``lr``."""
    out = {}
    for m in ("c3", "magrpo"):
        rows = learning_curves(m, seeds, env_steps, dataclasses.replace(setup, lr=lr))
        out[m] = np.array([area_under_curve([r["env_step"] for r in rows if r["seed"] == s],
                                            [r["success"] for r in rows if r["seed"] == s])
                           for s in seeds])
    return out["c3"] - out["magrpo"]


def test_advice_picks_c3_downstream_of_a_frozen_teammate_and_it_wins():
    setup, advice = regime_advice("downstream learner (frozen upstream)")
    scores = {r["plan"]: r["score"] for r in advice["plans"]}
    assert advice["algorithm"] == "c3" and scores["tree [2, 4]"] > scores["independent 8"]  # the benched tree too
    d = auc_diff(setup, 16.0, range(8), 480)  # both at MAGRPO's best step size of the 30-seed study
    assert d.mean() > 0.01 and (d > 0).mean() >= 0.75


def test_advice_picks_magrpo_on_the_all_trained_4_agent_chain_and_it_wins():
    setup, advice = regime_advice("all-trained 4-agent chain")
    scores = {r["plan"]: r["score"] for r in advice["plans"]}
    assert advice["algorithm"] == "magrpo" and advice["plan"] == "independent 16"
    assert scores["tree [2, 2, 2, 2]"] < 0.7 * scores["independent 16"]
    d = auc_diff(setup, 16.0, range(6), 640)
    assert d.mean() < -0.02 and (d < 0).mean() >= 0.6


def test_cli_writes_the_advice(tmp_path, capsys):
    src = tmp_path / "diagnose.json"
    src.write_text(json.dumps(diagnosis([0.1, 0.008], 0.11, ["Reasoner", "Actor"])))
    assert console(["advise", "--from", str(src), "--budget", "8", "--lr-scale", "0", "1"]) == 0
    out = capsys.readouterr().out
    assert "verdict: use C3 with the benched plan \"tree [2, 4]\"" in out and "8/8/" in out  # Actor: 8 alternatives
    saved = json.loads((tmp_path / "advice.json").read_text())
    assert saved["algorithm"] == "c3" and saved["decisions"][0]["weight"] == 0.0 and saved["benched"] == "tree [2, 4]"
    assert console(["advise", "--from", str(src), "--budget", "8", "--lr-scale", "0", "1", "--benched",
                    "tree [1, 8]"]) == 0
    assert json.loads((tmp_path / "advice.json").read_text())["plan"] == "tree [1, 8]"  # the benched plan, kept


def test_diagnose_reports_the_last_points_reward_variance():
    rng = np.random.default_rng(0)
    groups = (rng.random((50, 4, 1)) < 0.4).astype(float)
    rep = decision_report(groups)
    assert rep["reward_variance"] == pytest.approx(float(np.mean(groups[..., 0].var(-1, ddof=1))), abs=1e-12)
    assert "signal_S" not in rep


def sampled_diagnosis(S, O, groups, n=4, c=4, seed=0, known=True):
    """A diagnose.json built by c3 diagnose's own statistics (decision_report, with its bootstrap replicates) from
    groups sampled from the additive model: a Reasoner with continuations, then an Actor (c = 1)."""
    rng = np.random.default_rng(seed)
    first = rng.normal(0, np.sqrt(S[0]), (groups, n, 1)) + rng.normal(0, np.sqrt(S[1] + O), (groups, n, c))
    last = rng.normal(0, np.sqrt(S[1]), (groups, n, 1)) + rng.normal(0, np.sqrt(O), (groups, n, 1))
    d = {"workflow": "t", "decision_points": ["Reasoner", "Actor"],
         "decisions": [{"u": 0, "role": "Reasoner", **decision_report(first, seed=seed)},
                       {"u": 1, "role": "Actor", **decision_report(last, seed=seed + 1)}]}
    return {**d, "outcome_variance": O} if known else d


def test_the_advice_carries_an_interval_from_the_diagnosis_own_noise_and_says_no_clear_winner_when_it_straddles():
    vague = advise(sampled_diagnosis([0.1, 0.008], 0.11, 60), 8, [0, 1])  # frozen Reasoner: 60 groups straddle 0
    low, high = vague["margin"]["ci95"]
    assert low < 0 < high and vague["outcome"] == "no clear winner" and vague["plan"] == "tree [2, 4]"
    assert vague["verdict"].startswith("no clear winner: keep the benched plan \"tree [2, 4]\"")
    clear = advise(sampled_diagnosis([0.1, 0.008], 0.11, 200), 8, [0, 1])  # the same team on 200 groups
    low, high = clear["margin"]["ci95"]
    assert clear["outcome"] == "c3" and 0 < low <= clear["margin"]["c3_minus_magrpo"] <= high
    assert clear["margin"]["resamples"] >= 100 and "beats MAGRPO's independent runs clearly" in clear["verdict"]
    sure = advise(sampled_diagnosis([0.03, 0.02], 0.05, 400), 8)  # all trained, 400 groups
    assert sure["outcome"] == "magrpo" and sure["plan"] == "independent 8" and sure["margin"]["ci95"][1] < 0
    kept = advise(sampled_diagnosis([0.03, 0.02], 0.05, 400), 8, benched="independent 8")  # MAGRPO benched: kept
    assert kept["plan"] == "independent 8" and kept["outcome"] == "magrpo" and kept["vs_benched"] is None
    assert kept["margin"]["c3_plan"].startswith("tree") and kept["verdict"].startswith("use MAGRPO with the benched")
    exact = advise(diagnosis([0.1, 0.008], 0.11), 8, [0, 1])  # no replicates (an exact diagnosis): n/a, never +- 0
    assert exact["margin"]["ci95"] is None and "intervals n/a" in exact["verdict"] and "+- 0" not in exact["verdict"]


def test_an_unmeasured_outcome_variance_is_worked_out_over_its_whole_range():
    d = sampled_diagnosis([0.05, 0.01], 0.1, 400, known=False)  # c = 1 at the Actor: O not measurable
    r = advise(d, 8)
    last = r["decisions"][1]["S"]  # at O = 0 the Actor's whole reward spread
    assert not r["outcome_variance_known"] and r["outcome_variances"] == pytest.approx([0, last / 4, last / 2,
                                                                                        3 * last / 4, last])
    assert len(r["margin"]["by_outcome_variance"]) == 5 and "O unknown" in r["verdict"]
    lo, hi = r["decisions"][1]["weight_range"]
    assert lo == 0.0 and hi > 0.5  # the Actor's share of the signal: none at O = max, most at O = 0
    for o in r["outcome_variances"]:  # what holds over the range holds at every O stated
        stated = advise(d, 8, outcome_variance=o)
        assert stated["outcome_variance_known"] and len(stated["margin"]["by_outcome_variance"]) == 1
        assert stated["outcome"] in (r["outcome"], "no clear winner") or stated["outcome"] == "magrpo"
        assert stated["margin"]["ci95"][1] <= r["margin"]["ci95"][1] + 1e-12
    # an O that eats every signal: named, with the bound
    with pytest.raises(ValueError, match=r"reward variance is .* below"):
        advise(d, 8, [0, 1], outcome_variance=0.5)


def test_the_o_0_end_alone_never_names_the_tree_that_gives_the_last_agent_everything():
    """A 3-agent chain with strong downstream agents and O unknown: at O = 0 the last agent's whole reward spread is
    its signal and tree [1, 1, 8] scores best; it leaves two trained agents with signal without alternatives, and at
    a large O it gives the middle agent nothing: never named."""
    d = sampled_3chain = sampled_chain([0.02, 0.04, 0.04], 0.15, 200)
    at_zero = advise(d, 8, outcome_variance=0.0)
    top = max((row for row in at_zero["plans"] if row["algorithm"] == "c3"), key=lambda row: row["score"])
    assert top["plan"] in ("tree [1, 1, 8]", "tree [1, 2, 4]")  # the best C3 plan at the O = 0 end alone
    r = advise(sampled_3chain, 8)
    assert r["plan"] not in ("tree [1, 1, 8]", "tree [1, 2, 4]")
    named = next(row for row in r["plans"] if row["plan"] == r["plan"])
    assert named["eligible"] and min(named["alternatives"]) >= 2
    starve = next(row for row in r["plans"] if row["plan"] == "tree [1, 1, 8]")
    assert not starve["eligible"] and starve["vs_benched"]["low"] < 0 < starve["score"] - named["score"] + 1


def test_a_tree_that_starves_a_trained_agent_is_named_only_when_that_agent_has_no_signal():
    irrelevant = advise(sampled_diagnosis([0.0, 0.05], 0.05, 400), 8)  # the Reasoner's message changes nothing
    assert irrelevant["decisions"][0]["no_signal"] and not irrelevant["decisions"][1]["no_signal"]
    row = next(r for r in irrelevant["plans"] if r["plan"] == "tree [1, 8]")
    assert row["eligible"]
    relevant = advise(sampled_diagnosis([0.03, 0.05], 0.05, 400), 8)  # the same Actor, a Reasoner with signal
    row = next(r for r in relevant["plans"] if r["plan"] == "tree [1, 8]")
    assert not relevant["decisions"][0]["no_signal"] and not row["eligible"] and relevant["plan"] != "tree [1, 8]"
    frozen = advise(sampled_diagnosis([0.03, 0.05], 0.05, 400), 8, [0, 1])  # not trained: no alternatives needed
    assert next(r for r in frozen["plans"] if r["plan"] == "tree [1, 8]")["eligible"]


def test_the_table_says_what_each_agent_gets_under_every_plan(capsys):
    r = advise(diagnosis([0.05, 0.02], 0.1, ["Reasoner", "Actor"]), 8)
    rows = {row["plan"]: row for row in r["plans"]}
    assert rows["tree [2, 4]"]["alternatives"] == [2, 4] and rows["tree [2, 4]"]["samples"] == [2, 8]
    assert rows["tree [1, 8]"]["samples"] == [0, 8] and rows["tree [1, 8]"]["signal_share"][0] == 0.0
    assert rows["independent 8"]["alternatives"] == [8, 8] and rows["independent 8"]["samples"] == [8, 8]
    snr = plan_snr((2, 4), 8, team_variances(diagnosis([0.05, 0.02], 0.1)))
    assert rows["tree [2, 4]"]["signal_share"] == pytest.approx([x / (1 + x) for x in snr])
    assert rows["tree [2, 4]"]["benched"] and rows["tree [2, 4]"]["vs_benched"] is None
    assert [p["weight"] for p in r["decisions"]] == pytest.approx([0.05 / 0.07, 0.02 / 0.07])
    print_advice(r)
    out = capsys.readouterr().out
    assert "2/2/" in out and "4/8/" in out and "benched" in out and "share of the learnable signal" in out
    assert default_benched(2, 8) == "tree [2, 4]" and default_benched(3, 8) == "tree [2, 2, 2]"
    assert default_benched(4, 16) == "tree [2, 2, 2, 2]" and default_benched(2, 2) == "tree [1, 2]"
    with pytest.raises(ValueError, match="--benched 'tree \\[3, 3\\]': not a plan of 8 leaves"):
        advise(diagnosis([0.05, 0.02], 0.1), 8, benched="tree [3, 3]")


def sampled_chain(S, O, groups, n=4, c=4, seed=0):
    """c3 diagnose's statistics on groups sampled from the additive model of a 3-agent chain (O unknown)."""
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(3):
        later = sum(S[u + 1:]) + O
        cont = c if u < 2 else 1
        g = rng.normal(0, np.sqrt(S[u]), (groups, n, 1)) + rng.normal(0, np.sqrt(later), (groups, n, cont))
        rows.append({"u": u, "role": f"R{u}", **decision_report(g, seed=seed + u)})
    return {"workflow": "t", "decision_points": ["R0", "R1", "R2"], "decisions": rows}
