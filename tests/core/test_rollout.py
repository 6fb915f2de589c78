import numpy as np
import pytest

from c3_plugin import (
    PlanError,
    Sampling,
    load_workflow,
    materialize,
    parse_plan,
    read_jsonl,
    replay_check,
    workflow_from_dict,
    write_jsonl,
)
from c3_plugin.core.credit import tree_advantages
from c3_plugin.core.synthetic import SyntheticBackend, SyntheticEnv


class CountingBackend:
    """Wraps a backend and records every call (breadth-first: one call per decision step)."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def generate(self, prompts, n, sampling):
        self.calls.append((len(prompts), n, prompts[0].role))
        return self.inner.generate(prompts, n, sampling)


def run(workflow, plan, items, seed=0, vocab=3):
    env = SyntheticEnv(workflow, vocab=vocab, seed=seed)
    backend = CountingBackend(SyntheticBackend(env, seed=seed))
    rng = np.random.default_rng(seed)
    return materialize(workflow, plan, items, backend, lambda leaves: env.reward(leaves, rng)), backend


ITEMS = [{"id": "a", "question": "Q1"}, {"id": "b", "question": "Q2"}, {"id": "c", "question": "Q3"}]


@pytest.mark.parametrize("spec, branching", [
    ("tree [2, 4]", (2, 4)), ({"tree": [2, 4]}, (2, 4)), ("independent 8", (8, 1)), ({"independent": 8}, (8, 1)),
    ("diagnostic n=4 u=0 c=3", (4, 3)), ({"diagnostic": {"n": 2, "u": 1, "c": 1}}, (1, 2)),
])
def test_plan_parsing_and_branching(spec, branching):
    assert parse_plan(spec).branching(2) == branching


def test_plan_branching_on_deeper_workflows():
    assert parse_plan("diagnostic n=4 u=1 c=4").branching(5) == (1, 4, 4, 1, 1)
    assert parse_plan("independent 8").branching(3) == (8, 1, 1)


@pytest.mark.parametrize("spec, fragment", [
    ("tree [2, 0]", "positive integer"), ("bush [2]", "unknown plan"), ({"tree": []}, "non-empty"),
    ("diagnostic n=1 u=0 c=4", "n must be at least 2"), ({"diagnostic": {"n": 2, "x": 1}}, "unknown field"),
    ("tree [2, 4", "malformed plan 'tree \\[2, 4'"), ("tree 2, 4]", "malformed plan"), ("tree [2, 4]]", "malformed"),
    ("tree [2 4]", "malformed plan"), ("tree [2, x]", "malformed plan"), ("diagnostic n=4 u=0 c", "malformed plan"),
])
def test_bad_plans_are_named(spec, fragment):
    with pytest.raises(PlanError, match=fragment):
        parse_plan(spec)


def test_plan_must_fit_the_workflow():
    with pytest.raises(PlanError, match="3 levels but the workflow has 2"):
        parse_plan("tree [2, 2, 2]").branching(2)
    with pytest.raises(PlanError, match="needs c=1"):
        parse_plan("diagnostic n=2 u=1 c=4").branching(2)


def test_accounting_tree_vs_independent_on_two_roles():
    wf = load_workflow("reasoner_actor")
    tree, _ = run(wf, "tree [2, 4]", ITEMS)
    indep, _ = run(wf, "independent 8", ITEMS)
    assert list(tree.budget.leaves) == [8, 8, 8] and list(tree.budget.messages) == [10, 10, 10]
    assert list(indep.budget.leaves) == [8, 8, 8] and list(indep.budget.messages) == [16, 16, 16]
    assert parse_plan("tree [2, 4]").messages(2) == 10 and parse_plan("independent 8").messages(2) == 16
    # synthetic messages are one token each
    assert tree.budget.totals() == {"env_steps": 24, "messages": 30, "tokens_generated": 30}
    assert indep.budget.totals()["tokens_generated"] == 48
    assert tree.rewards.shape == (3, 2, 4) and indep.rewards.shape == (3, 8, 1)


def test_breadth_first_one_backend_call_per_decision_point():
    wf = load_workflow("reasoner_actor_verifier")
    _, backend = run(wf, "tree [2, 2, 2]", ITEMS)
    assert backend.calls == [(3, 2, "Reasoner"), (6, 2, "Actor"), (12, 2, "Verifier")]
    _, backend = run(wf, "diagnostic n=4 u=0 c=3", ITEMS)
    assert backend.calls == [(3, 4, "Reasoner"), (12, 3, "Actor"), (36, 1, "Verifier")]


def test_explicit_ids_and_rewards_on_leaves():
    wf = load_workflow("reasoner_actor")
    ro, _ = run(wf, "tree [2, 4]", ITEMS[:1])
    roots = [e for e in ro.entries if e.kind == "instance"]
    assert len(roots) == 1 and roots[0].node == 0 and roots[0].parent == -1
    reasoners = ro.decision_entries(0)
    actors = ro.decision_entries(1)
    assert [e.alternative for e in reasoners] == [0, 1]
    assert [e.parent for e in actors] == [reasoners[0].node] * 4 + [reasoners[1].node] * 4
    assert [e.continuation for e in actors] == [0, 1, 2, 3] * 2
    assert all(e.reward is None for e in reasoners) and all(e.reward in (0.0, 1.0) for e in actors)
    np.testing.assert_array_equal(ro.rewards.reshape(-1), [e.reward for e in actors])
    assert len({e.node for e in ro.entries}) == len(ro.entries)
    assert all(len(e.token_ids) == len(e.logprobs) == 1 and e.logprobs[0] < 0 for e in actors)


def test_continuation_index_in_diagnostic_plan():
    wf = load_workflow("reasoner_actor_verifier")
    ro, _ = run(wf, "diagnostic n=2 u=0 c=3", ITEMS[:1])
    assert [e.continuation for e in ro.decision_entries(1)] == [0, 1, 2, 0, 1, 2]
    assert [e.continuation for e in ro.decision_entries(2)] == [0, 1, 2, 0, 1, 2]
    assert [e.alternative for e in ro.decision_entries(2)] == [0] * 6


def test_trace_jsonl_round_trip_and_replay(tmp_path):
    wf = load_workflow("branching")
    ro, _ = run(wf, "tree [2, 2, 1, 2]", ITEMS)
    path = write_jsonl(ro.entries, tmp_path / "trace.jsonl")
    back = read_jsonl(path)
    assert back == ro.entries
    assert replay_check(back, wf) == []


def test_replay_reports_hidden_state():
    wf = load_workflow("reasoner_actor")
    ro, _ = run(wf, "tree [2, 2]", ITEMS[:1])
    ro.entries[3].context += " (the weather today)"
    problems = replay_check(ro.entries, wf)
    assert len(problems) == 1 and "hidden state" in problems[0] and f"node {ro.entries[3].node}" in problems[0]


def test_feedback_entries_are_recorded_and_replayed():
    calls = {"n": 0}

    def run_tests(item, outs):
        return f"{item['question']} checked {outs['Actor']}"

    spec = {"name": "fb", "roles": {"Actor": {"agent": 0, "template": "{question}"}},
            "schedule": ["Actor", {"feedback": "run", "reads": ["Actor"]},
                         {"role": "Actor", "reads": ["run"], "template": "{question}\n{run}"}]}
    wf = workflow_from_dict(spec, feedback={"run": run_tests})
    ro, backend = run(wf, "tree [2, 2]", ITEMS[:2])
    fb = [e for e in ro.entries if e.kind == "feedback"]
    assert len(fb) == 4 and all(e.message.startswith("Q") for e in fb)
    assert backend.calls == [(2, 2, "Actor"), (4, 2, "Actor")]
    assert ro.budget.totals()["messages"] == 12
    assert replay_check(ro.entries, wf) == []

    def flaky(item, outs):
        calls["n"] += 1
        return f"run {calls['n']}"

    wf_flaky = workflow_from_dict(spec, feedback={"run": flaky})
    ro, _ = run(wf_flaky, "tree [1, 1]", ITEMS[:1])
    assert any("feedback re-run" in p for p in replay_check(ro.entries, wf_flaky))


def test_greedy_sampling_and_credit_shapes():
    wf = load_workflow("reasoner_actor")
    env = SyntheticEnv(wf, vocab=3, seed=0)
    rng = np.random.default_rng(0)
    ro = materialize(wf, "tree [2, 4]", ITEMS, SyntheticBackend(env), lambda leaf: env.reward(leaf, rng),
                     Sampling(greedy=True))
    first = ro.decision_entries(0)
    assert first[0].message == first[1].message
    adv = tree_advantages(ro.rewards)
    assert adv[0].shape == (6,) and adv[1].shape == (24,)


def test_reward_errors_are_clear():
    wf = load_workflow("reasoner_actor")
    env = SyntheticEnv(wf)
    with pytest.raises(ValueError, match="non-finite reward for leaf 0"):
        materialize(wf, "tree [1, 1]", ITEMS[:1], SyntheticBackend(env), lambda leaves: [float("nan")])
    with pytest.raises(ValueError, match="ids must be unique"):
        materialize(wf, "tree [1, 1]", [ITEMS[0], ITEMS[0]], SyntheticBackend(env), lambda leaves: [0.0] * len(leaves))


def test_rollout_diagnostics_agree_with_the_credit_functions():
    from c3_plugin.core import credit
    from c3_plugin.core.credit_diagnostics import group_returns, rollout_diagnostics

    wf = load_workflow("reasoner_actor_verifier")
    items = [{"id": f"i{i}", "question": f"Q{i % 3}"} for i in range(40)]
    ro, _ = run(wf, "diagnostic n=4 u=0 c=4", items)  # 4 independent continuations per Reasoner alternative
    m = rollout_diagnostics(ro)
    assert m["budget/env_steps"] == 40 * 16 and m["budget/messages"] == 40 * (4 + 16 + 16)
    g0 = group_returns(ro.rewards, 0)
    assert g0.shape == (40, 4, 4)
    assert (m["credit/Reasoner_u0/within_group_variance"]
            == credit.within_group_variance(credit.loo_advantages_batch(g0)))
    rho, used = credit.split_half_reliability([[list(a) for a in g] for g in g0])
    assert m["credit/Reasoner_u0/split_half_reliability"] == pytest.approx(rho)
    assert m["credit/Reasoner_u0/split_half_groups"] == used
    assert (m["credit/Reasoner_u0/noise_predicted"]
            == pytest.approx(credit.noise_variance(credit.pooled_return_variance(g0), 4, 16)))
    # c = 1
    assert 0 <= m["credit/Actor_u1/zero_signal_share"] <= 1 and "credit/Actor_u1/split_half_reliability" not in m
