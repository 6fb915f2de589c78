"""Diagnostics that mean something: influence on a domain's outcome (never the message text, never at
the last decision point), split-half and noise law only where continuations are independent, and the
dry run naming the decisions a plan leaves without a gradient."""

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from c3_plugin import load_workflow, materialize, parse_plan
from c3_plugin.core import credit
from c3_plugin.core.credit_diagnostics import group_returns, independent_continuations, rollout_diagnostics
from c3_plugin.core.protocol import Generation
from c3_plugin.core.rollout import Leaf
from c3_plugin.core.synthetic import SyntheticBackend, SyntheticEnv

ROOT = Path(__file__).resolve().parents[2]
ITEMS = [{"id": f"i{k}", "question": f"Q{k % 3}"} for k in range(30)]


class UniqueTexts:
    """Every message is a new text (free text never repeats), one token each."""

    def __init__(self):
        self.count = 0

    def generate(self, prompts, n, sampling):
        out = []
        for _ in prompts:
            row = []
            for _ in range(n):
                self.count += 1
                row.append(Generation(text=f"text {self.count}", token_ids=[self.count % 200], logprobs=[-1.0]))
            out.append(row)
        return out


def coin(leaves):
    return [float(int(leaf.action.split()[-1]) % 2) for leaf in leaves]


def synthetic(workflow, plan, items=ITEMS, seed=0, **kw):
    env = SyntheticEnv(workflow, vocab=3, seed=seed)
    rng = np.random.default_rng(seed)
    return materialize(workflow, plan, items, SyntheticBackend(env, seed=seed), lambda leaf: env.reward(leaf, rng),
                       **kw)


# ----- influence ------------------------------------------------------------------------------------------


def test_influence_is_not_logged_without_an_outcome_extractor():
    ro = materialize(load_workflow("reasoner_actor"), "tree [4, 2]", ITEMS, UniqueTexts(), coin)
    m = rollout_diagnostics(ro)
    assert not [k for k in m if k.endswith("/influence")]
    # what it used to log: the final text as the outcome, unique per leaf, so log n (+ the Miller-Madow term) everywhere
    texts = [[[f"{g}-{j}-{c}"] for c in range(2)] for g in range(1) for j in range(4)]
    assert credit.influence([sum(t, []) for t in texts]) == pytest.approx(math.log(4) + 3 / 16)


def test_influence_uses_the_outcome_and_skips_the_last_decision_point():
    ro = materialize(load_workflow("reasoner_actor"), "tree [4, 2]", ITEMS, UniqueTexts(), coin)
    constant = rollout_diagnostics(ro, outcome=lambda leaves: ["same"] * len(leaves))
    assert constant["credit/Reasoner_u0/influence"] == pytest.approx(0.0, abs=1e-12)
    assert "credit/Actor_u1/influence" not in constant  # the last decision point's outcomes are its own messages
    parity = rollout_diagnostics(ro, outcome=lambda leaves: [int(leaf.action.split()[-1]) % 2 for leaf in leaves])
    groups = group_returns(ro.rewards, 0)  # the reward here is that parity
    expected = np.mean([credit.influence([list(alt) for alt in g]) for g in groups])
    assert parity["credit/Reasoner_u0/influence"] == pytest.approx(expected)
    runs = materialize(load_workflow("reasoner_actor"), "independent 4", ITEMS, UniqueTexts(), coin)
    # c = 1
    assert "credit/Reasoner_u0/influence" not in rollout_diagnostics(runs, outcome=lambda leaves: [0] * len(leaves))


def test_influence_accepts_tuple_outcomes():
    from tests import oracles

    outcomes = [[(True, False), (True, True)], [(True, False), (False, False), (True, False)]]
    assert credit.influence(outcomes) == pytest.approx(oracles.influence(outcomes), abs=1e-12)


def test_outcome_extractor_length_is_checked():
    ro = synthetic(load_workflow("reasoner_actor"), "tree [2, 2]", ITEMS[:2])
    with pytest.raises(ValueError, match="returned 1 outcomes for 8 leaves"):
        rollout_diagnostics(ro, outcome=lambda leaves: ["x"])


def test_math_outcome_is_the_normalised_boxed_answer():
    from domains.math import DOMAIN, outcome

    assert DOMAIN.outcome is outcome
    leaves = [Leaf({"answer": "1/2"}, text, (text,)) for text in
              ("so \\boxed{ 1/2 }.", "so \\boxed{1/2}", "\\boxed{0.5}", "no box", "\\boxed{$3$}.")]
    assert outcome(leaves) == ["1/2", "1/2", "0.5", None, "3"]


def test_code_outcome_is_the_test_vector_and_reuses_the_rewards_sandbox_runs(monkeypatch):
    import domains.code as dc
    from domains.code import tasks

    assert dc.DOMAIN.outcome is dc.outcome
    item = dict(dc.load_split({"name": "mbpp", "source": str(ROOT / "tests/fixtures/code/mbpp.jsonl")})[0])
    n_tests = len(json.loads(item["tests"]))
    good, wrong = f"```python\n{item['canonical']}\n```", "```python\ndef remove_Occ(s, ch):\n    return s\n```"
    reward = tasks.make_reward()
    outcome = tasks.make_outcome(reward)
    assert reward(["plan", "plan"], [good, wrong], batch_items=[item, item]) == [1.0, 0.25]
    real = tasks.judge_batch
    monkeypatch.setattr(tasks, "judge_batch", lambda *a, **k: pytest.fail("the outcome re-ran the sandbox"))
    leaves = [Leaf(item, good, ("plan", good)), Leaf(item, wrong, ("plan", wrong))]
    got = outcome(leaves)
    assert got[0] == (True,) * n_tests and len(got[1]) == n_tests and sum(got[1]) == 1
    calls = []
    monkeypatch.setattr(tasks, "judge_batch", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    fresh = "```python\ndef remove_Occ(s, ch):\n    return ''\n```"
    assert outcome([Leaf(item, fresh, ("plan", fresh))] + leaves)[1:] == got and calls == [[dc.extract_code(fresh)]]


def test_travel_outcome_is_the_merged_plans_pass_fail_vector():
    import domains.travel as dt

    assert dt.DOMAIN.outcome is dt.outcome
    row = dt.normalise(json.loads((ROOT / "domains/travel/probe_row.json").read_text()), 0, "probe")
    row.update(dt.prompt_fields(row))
    dash = dt.all_dash(dt.task_of(row).days)
    merged = dt.merger(dict(zip(dt.ROLE_NAMES, dash)))
    broken = dt.merger({"Logistics": '{"assignments": [', "Experience": "no"})
    out = dt.outcome([Leaf(row, merged, dash), Leaf(row, broken, ("", ""))])
    assert all(isinstance(o, tuple) and all(isinstance(x, bool) for x in o) for o in out)
    assert (out[0] == dt.pass_fail(row, list(dash)) and out[0][:3] == (True, True, True)
            and out[1][:3] == (False, False, False))


def test_the_trainer_logs_influence_with_the_domains_outcome(tmp_path):
    from domains.template import DOMAIN
    from tests.trainers.test_trainers import template_trainer

    trainer, wf, train = template_trainer(tmp_path, "c3", "tree [3, 2]", 4)
    assert trainer.outcome.__wrapped__ is DOMAIN.outcome  # the domain's own hook, guarded (run.contract.guarded)
    m = trainer.rollout_metrics(trainer.collect([dict(train[i]) for i in range(4)]))
    assert "credit/Planner_u0/influence" in m and "credit/Writer_u1/influence" not in m


# ----- split-half and the noise law: independent continuations only -----------------------------------------


def test_independent_points_of_a_plan():
    assert parse_plan("tree [2, 4]").independent_points(2) == [0, 1]
    assert parse_plan("tree [4, 2, 2]").independent_points(3) == [1, 2]  # u=0: its 4 leaves share 2 Actor messages
    assert parse_plan("tree [2, 1, 4]").independent_points(3) == [2]  # u=0: its 4 leaves share 1 Actor message
    assert parse_plan("tree [2, 2, 1, 2]").independent_points(4) == [3]
    assert parse_plan("diagnostic n=4 u=1 c=4").independent_points(4) == [1, 2]


def test_split_half_and_noise_ratio_are_logged_only_for_independent_continuations():
    wf = load_workflow("reasoner_actor_verifier")
    items = [{"id": f"i{k}", "question": f"Q{k % 3}"} for k in range(40)]
    deep = rollout_diagnostics(synthetic(wf, "tree [4, 2, 2]", items))
    assert deep["credit/Reasoner_u0/independent_continuations"] == 0.0
    for key in ("split_half_reliability", "split_half_groups", "split_half_excluded", "noise_ratio", "noise_predicted"):
        assert f"credit/Reasoner_u0/{key}" not in deep, key
    assert deep["credit/Reasoner_u0/return_variance"] >= 0  # descriptive; no law attached
    assert deep["credit/Actor_u1/independent_continuations"] == 1.0 and "credit/Actor_u1/noise_ratio" in deep
    diag = rollout_diagnostics(synthetic(wf, "diagnostic n=4 u=0 c=4", items))
    assert diag["credit/Reasoner_u0/independent_continuations"] == 1.0
    assert {"split_half_reliability", "noise_ratio",
            "noise_predicted"} <= {k.split("/")[-1] for k in diag if "_u0/" in k}


def test_shared_halves_are_biased_which_is_why_they_are_not_logged():
    """Under tree [4, 2, 2] the even and odd leaves of a Reasoner alternative hold the same 2 Actor
    messages: with a Reasoner that changes nothing and an Actor that decides the return, the split-half
    statistic still finds a near-perfect ranking."""
    rng = np.random.default_rng(0)
    actor = rng.normal(size=(500, 4, 2, 1))  # the Actor message's value; the Reasoner has no effect at all
    rewards = actor + 0.05 * rng.normal(size=(500, 4, 2, 2))
    rho, used = credit.split_half_reliability(group_returns(rewards, 0))
    assert used > 400 and rho > 0.8
    wf = load_workflow("reasoner_actor_verifier")
    assert not independent_continuations(synthetic(wf, "tree [4, 2, 2]", ITEMS[:2]), 0)


def test_shared_parallel_samples_are_not_independent_continuations():
    wf = load_workflow("branching")  # SolverA and SolverB read the Planner, not each other
    own = synthetic(wf, "tree [1, 3, 4, 1]", ITEMS[:6])
    assert independent_continuations(own, 1) is True  # each SolverA alternative has its own 4 SolverB samples
    shared = synthetic(wf, "tree [1, 3, 4, 1]", ITEMS[:6], share_identical_contexts=True)
    assert independent_continuations(shared, 1) is False  # every SolverA alternative is continued by the same 4
    assert "credit/SolverA_u1/split_half_reliability" in rollout_diagnostics(own)
    m = rollout_diagnostics(shared)
    assert "credit/SolverA_u1/split_half_reliability" not in m and "credit/SolverA_u1/noise_ratio" not in m


# ----- decisions without a gradient --------------------------------------------------------------------------


def _gradient_warnings(report):
    """The report's warnings about decisions without a gradient (its budget warnings are another test's)."""
    return [w for w in report.get("warnings", []) if "gradient" in w]


def _code_config(tmp_path, name):
    fix = ROOT / "tests/fixtures/code"
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"""
extends: {ROOT / 'configs/code' / name}
dataset:
  train: {{name: mbpp_train, kind: mbpp, source: {fix / 'mbpp_train.jsonl'}, id_range: [601, 974]}}
  eval: [{{name: mbpp, kind: mbpp, source: {fix / 'mbpp.jsonl'}}}]
  drop_overlap: false
""")
    return path


def test_dry_run_names_the_decisions_c3_leaves_without_a_gradient(tmp_path):
    from c3_plugin.core.config import load_config
    from c3_plugin.run.dry_run import dry_run_report

    # without the shipped config's acknowledgement (c3.untrained_decisions), the untrained decision is a warning
    with pytest.warns(UserWarning, match="no gradient for Reasoner_u2 .one alternative per context.*MAGRPO "
                                         "trains every decision"):
        report = dry_run_report(load_config(_code_config(tmp_path, "multi_turn_c3.yaml"),
                                            ["c3.untrained_decisions=null"]))
    assert report["plan"] == "tree [2, 2, 1, 2]" and report["leaves_per_instance"] == 8
    assert report["trained_decisions"] == ["Reasoner_u0", "Actor_u1", "Actor_u3"]
    assert report["untrained_decisions"] == ["Reasoner_u2"] and "Reasoner_u2" in report["warnings"][0]
    assert "untrained_acknowledged" not in report
    with warnings.catch_warnings(record=True) as seen:  # the shipped config names it: listed, no warning
        warnings.simplefilter("always")
        shipped = dry_run_report(load_config(_code_config(tmp_path, "multi_turn_c3.yaml")))
    assert not [w for w in seen if "no gradient" in str(w.message)]
    assert not _gradient_warnings(shipped)
    assert shipped["untrained_decisions"] == shipped["untrained_acknowledged"] == ["Reasoner_u2"]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        magrpo = dry_run_report(load_config(_code_config(tmp_path, "multi_turn_magrpo.yaml")))
    assert not [w for w in seen if "no gradient" in str(w.message)]
    assert magrpo["trained_decisions"] == ["Reasoner_u0", "Actor_u1", "Reasoner_u2", "Actor_u3"]
    assert magrpo["untrained_decisions"] == [] and not _gradient_warnings(magrpo)
    assert magrpo["expected_env_steps"] == report["expected_env_steps"]  # the same env-step budget as C3's tree


def test_decision_gradients_of_full_trees():
    from c3_plugin.run.budget import decision_gradients

    wf = load_workflow("reasoner_actor")
    assert decision_gradients("c3", "tree [2, 4]", wf) == {"trained_decisions": ["Reasoner_u0", "Actor_u1"],
                                                           "untrained_decisions": []}
    out = decision_gradients("c3", "diagnostic n=4 u=0 c=1", wf)
    assert out["untrained_decisions"] == ["Actor_u1"] and len(out["warnings"]) == 1
    assert decision_gradients("c3", "tree [2, 2, 2, 2]", load_workflow("four_turn"))["untrained_decisions"] == []


def test_untrained_decisions_a_config_names_are_listed_without_the_warning():
    from c3_plugin.core.errors import ConfigError
    from c3_plugin.run.budget import decision_gradients

    wf = load_workflow("four_turn")
    named = decision_gradients("c3", "tree [2, 1, 2, 2]", wf, ["Actor_u1"])
    assert named["untrained_decisions"] == named["untrained_acknowledged"] == ["Actor_u1"]
    assert not _gradient_warnings(named)
    partly = decision_gradients("c3", "tree [2, 1, 1, 4]", wf, ["Actor_u1"])  # only the unnamed one warns
    assert partly["untrained_acknowledged"] == ["Actor_u1"] and len(partly["warnings"]) == 1
    assert "no gradient for Reasoner_u2 " in partly["warnings"][0] and "untrained_decisions" in partly["warnings"][0]
    full = decision_gradients("c3", "tree [2, 2, 2, 2]", wf, ["Actor_u1"])  # a plan that trains it: nothing to say
    assert full["untrained_decisions"] == full["untrained_acknowledged"] == [] and not _gradient_warnings(full)
    with pytest.raises(ConfigError, match=r"'Actor_2', which is no decision point .*Reasoner_u0, Actor_u1, "
                                          r"Reasoner_u2, Actor_u3.*--override c3.untrained_decisions=null"):
        decision_gradients("c3", "tree [2, 1, 2, 2]", wf, ["Actor_2"])
