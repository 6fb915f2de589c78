"""Sample sharing for parallel roles: a role that reads nothing of its sibling is sampled once
per context and its samples continue every alternative of the sibling (the cross product)."""

import numpy as np
import pytest

from bench.studies import fidelity
from c3_plugin import Generation, load_workflow, materialize, read_jsonl, replay_check, workflow_from_dict, write_jsonl
from c3_plugin.core.credit import average_copies, tree_advantages
from c3_plugin.core.credit_diagnostics import rollout_diagnostics, shared_groups
from c3_plugin.core.rollout import unique_samples
from c3_plugin.core.synthetic import SyntheticBackend, SyntheticEnv
from c3_plugin.core.trace import path_to
from c3_plugin.run.testing import experiment_config
from tests import oracles
from tests.core.test_estimator import assert_unbiased, bonferroni_z


def join(outputs):
    return f"{outputs['Logistics']} || {outputs['Experience']}"


PARALLEL = {"name": "parallel_pair", "agents": 2,
            "roles": {"Logistics": {"agent": 0, "template": "Plan transport and lodging for: {question}"},
                      "Experience": {"agent": 1, "template": "Plan activities for: {question}"}}}
ITEMS = [{"id": "a", "question": "Q1"}, {"id": "b", "question": "Q2"}, {"id": "c", "question": "Q3"}]


def parallel_workflow():
    return workflow_from_dict(PARALLEL, merger=join)


class CounterBackend:
    """Every generation is distinct (text and token id from one counter); records every call."""

    def __init__(self, same_text=False):
        self.count, self.calls, self.same_text = 0, [], same_text

    def generate(self, prompts, n, sampling):
        self.calls.append((len(prompts), n, prompts[0].role))
        out = []
        for _ in prompts:
            gens = []
            for _ in range(n):
                self.count += 1
                gens.append(Generation(text="same" if self.same_text else f"t{self.count}", token_ids=[self.count, 7],
                                       logprobs=[-1.0, -0.5]))
            out.append(gens)
        return out


def action_reward(leaves):
    return [float(hash(leaf.action) % 2) for leaf in leaves]


def test_parallel_role_is_sampled_once_and_crossed_with_every_sibling_alternative(tmp_path):
    wf = parallel_workflow()
    assert wf.context_decisions()[1] == ()  # Experience's context depends on no decision
    backend = CounterBackend()
    ro = materialize(wf, "tree [2, 3]", ITEMS, backend, action_reward, share_identical_contexts=True)
    assert backend.calls == [(3, 2, "Logistics"), (3, 3, "Experience")]  # one prompt per instance for Experience
    assert list(ro.budget.messages) == [5, 5, 5] and list(ro.budget.tokens) == [10, 10, 10]
    assert list(ro.budget.leaves) == [6, 6, 6] and ro.rewards.shape == (3, 2, 3)
    assert unique_samples(wf, (2, 3), True) == [2, 3] and unique_samples(wf, (2, 3), False) == [2, 6]
    logistics = np.array(ro.decision_entries(0), dtype=object).reshape(3, 2)
    experience = np.array(ro.decision_entries(1), dtype=object).reshape(3, 2, 3)
    by_node = {(e.instance, e.node): e for e in ro.entries}
    for i in range(3):
        originals, copies = experience[i, 0], experience[i, 1]
        assert len({e.message for e in originals}) == 3 and all(e.shared is None for e in originals)
        assert [e.token_ids for e in copies] == [e.token_ids for e in originals]
        assert [e.message for e in copies] == [e.message for e in originals]
        assert [e.shared for e in copies] == [e.node for e in originals]
        for j in range(2):
            assert [e.parent for e in experience[i, j]] == [logistics[i, j].node] * 3
            for k in range(3):  # leaf (j, k) is the joint action (Logistics_j, Experience_k)
                path = [e.message for e in path_to(experience[i, j, k], by_node)[1:]]
                assert path == [logistics[i, j].message, originals[k].message]
                assert experience[i, j, k].reward == ro.rewards[i, j, k]
    copy = experience[0, 1, 2]
    assert ro.owner[ro.entries.index(copy)] == ro.entries.index(experience[0, 0, 2])
    assert replay_check(ro.entries, wf) == []
    back = read_jsonl(write_jsonl(ro.entries, tmp_path / "trace.jsonl"))
    assert back == ro.entries and back[ro.entries.index(copy)].shared == experience[0, 0, 2].node


def test_without_the_flag_every_path_samples_its_own_messages():
    wf = parallel_workflow()
    backend = CounterBackend()
    ro = materialize(wf, "tree [2, 3]", ITEMS, backend, action_reward)
    assert backend.calls == [(3, 2, "Logistics"), (6, 3, "Experience")]
    assert list(ro.budget.messages) == [8, 8, 8]
    assert all(e.shared is None for e in ro.entries)
    assert np.array_equal(ro.owner, np.arange(len(ro.entries)))


@pytest.mark.parametrize("same_text", [False, True])
def test_sequential_roles_never_share(same_text):
    """Actor reads Reasoner: no sharing, even when two Reasoner alternatives write the same text."""
    wf = load_workflow("reasoner_actor")
    backend = CounterBackend(same_text=same_text)
    ro = materialize(wf, "tree [2, 3]", ITEMS, backend, action_reward, share_identical_contexts=True)
    assert backend.calls == [(3, 2, "Reasoner"), (6, 3, "Actor")]
    assert list(ro.budget.messages) == [8, 8, 8]
    assert all(e.shared is None for e in ro.entries)
    actors = ro.decision_entries(1)
    assert len({e.token_ids[0] for e in actors}) == len(actors)


def test_sharing_follows_what_a_role_reads():
    """branching: SolverB reads only Planner, so it is shared across SolverA's alternatives under
    one Planner message and never across Planner alternatives."""
    wf = load_workflow("branching")
    backend = CounterBackend()
    ro = materialize(wf, "tree [2, 2, 2, 1]", ITEMS[:2], backend, action_reward, share_identical_contexts=True)
    assert [c[0] for c in backend.calls] == [2, 4, 4, 16]
    assert list(ro.budget.messages) == [2 + 4 + 4 + 8] * 2 == [sum(unique_samples(wf, (2, 2, 2, 1), True))] * 2
    # [instance, Planner, SolverA, SolverB]
    solver_b = np.array(ro.decision_entries(2), dtype=object).reshape(2, 2, 2, 2)
    assert [e.token_ids for e in solver_b[:, :, 1].ravel()] == [e.token_ids for e in solver_b[:, :, 0].ravel()]
    assert len({e.token_ids[0] for e in solver_b[:, :, 0].ravel()}) == 8  # distinct under each Planner message
    assert all(e.shared is None for e in ro.decision_entries(3))  # Integrator reads both solvers
    assert replay_check(ro.entries, wf) == []


def test_independent_plans_refuse_sharing():
    with pytest.raises(ValueError, match="independent"):
        materialize(parallel_workflow(), "independent 4", ITEMS, CounterBackend(), action_reward,
                    share_identical_contexts=True)


def test_average_copies_matches_its_oracle():
    rng = np.random.default_rng(0)
    owners = rng.integers(0, 6, size=40)
    adv = rng.normal(size=40)
    got_owners, got = average_copies(owners, adv)
    exp_owners, exp = oracles.average_copies(owners.tolist(), adv.tolist())
    assert got_owners.tolist() == exp_owners
    np.testing.assert_allclose(got, exp)
    same, vals = average_copies(np.arange(5), adv[:5])  # no copies: unchanged, same order
    assert same.tolist() == list(range(5)) and vals.tolist() == adv[:5].tolist()


def test_averaged_tree_credit_is_the_parallel_role_formula():
    wf = parallel_workflow()
    env = SyntheticEnv(wf, vocab=4, seed=1)
    rng = np.random.default_rng(1)
    items = [{"id": f"i{k}", "question": f"Q{k}"} for k in range(20)]
    ro = materialize(wf, "tree [3, 4]", items, SyntheticBackend(env, seed=2), lambda leaf: env.reward(leaf, rng),
                     share_identical_contexts=True)
    adv = tree_advantages(ro.rewards)
    idx, shared = ro.unique_credit(ro.depth_nodes[1], adv[1])
    assert len(idx) == 20 * 4 and all(ro.entries[i].shared is None for i in idx)
    expected = [a for inst in ro.rewards.tolist() for a in oracles.shared_advantages(inst)]
    np.testing.assert_allclose(shared, expected, atol=1e-12)
    # the upper decision keeps the tree leave-one-out, one advantage per alternative
    idx0, adv0 = ro.unique_credit(ro.depth_nodes[0], adv[0])
    np.testing.assert_array_equal(idx0, ro.depth_nodes[0])
    np.testing.assert_allclose(adv0, adv[0])


def test_diagnostics_count_each_shared_sample_once():
    wf = parallel_workflow()
    env = SyntheticEnv(wf, vocab=4, seed=1)
    rng = np.random.default_rng(3)
    items = [{"id": f"i{k}", "question": f"Q{k % 3}"} for k in range(30)]
    ro = materialize(wf, "tree [2, 4]", items, SyntheticBackend(env, seed=4), lambda leaf: env.reward(leaf, rng),
                     share_identical_contexts=True)
    m = rollout_diagnostics(ro)
    assert m["budget/messages"] == 30 * 6 and m["budget/messages_per_instance"] == 6
    assert m["credit/Experience_u1/groups"] == 30  # one group of unique samples per instance, not 2
    assert m["credit/Experience_u1/alternatives"] == 4 and m["credit/Experience_u1/continuations"] == 2
    expected = [a for inst in ro.rewards.tolist() for a in oracles.shared_advantages(inst)]
    assert m["credit/Experience_u1/advantage_abs_mean"] == pytest.approx(np.abs(expected).mean())
    assert m["credit/Logistics_u0/groups"] == 30 and m["credit/Logistics_u0/continuations"] == 4


def test_shared_groups_moves_copies_into_continuations_and_pads_ragged_classes():
    per_parent = np.arange(5 * 2 * 1, dtype=float).reshape(5, 2, 1)
    out = shared_groups(per_parent, np.array([7, 3, 7, 7, 3]))
    assert out.shape == (2, 2, 3)
    np.testing.assert_array_equal(out[0], [[2, 8, np.nan], [3, 9, np.nan]])  # class 3: parents 1, 4
    np.testing.assert_array_equal(out[1], [[0, 4, 6], [1, 5, 7]])  # class 7: parents 0, 2, 3


# ----- unbiasedness on a two-agent parallel environment with exact Q and V -------------------------

PL = np.array([0.5, 0.3, 0.2])  # Logistics policy over m0, m1, m2
PE = np.array([0.2, 0.45, 0.35])  # Experience policy
P = np.array([[0.9, 0.1, 0.5], [0.6, 0.2, 0.1], [0.95, 0.3, 0.4]])  # P(reward = 1 | Logistics l, Experience e)


class TableBackend:
    """Known categorical policy per role, independent of the context; one token per message."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.policy = {"Logistics": PL, "Experience": PE}

    def generate(self, prompts, n, sampling):
        p = self.policy[prompts[0].role]
        idx = self.rng.choice(len(p), size=(len(prompts), n), p=p)
        return [[Generation(text=f"m{k}", token_ids=[int(k)], logprobs=[float(np.log(p[k]))]) for k in row]
                for row in idx]


def table_reward(rng):
    def reward(leaves):
        joint = np.array([[int(o[1:]) for o in leaf.outputs] for leaf in leaves])
        return (rng.random(len(leaves)) < P[joint[:, 0], joint[:, 1]]).astype(float)
    return reward


def parallel_cells(runs, seed, scale=None):
    """Rows (one per agent and message) of mean shared-rollout advantage vs exact Q - V."""
    wf = parallel_workflow()
    items = [{"id": f"r{r}", "question": "trip"} for r in range(runs)]
    ro = materialize(wf, "tree [2, 3]", items, TableBackend(seed), table_reward(np.random.default_rng(seed + 1)),
                     share_identical_contexts=True)
    assert ro.budget.totals()["messages"] == 5 * runs  # the samples really were shared
    v = PL @ P @ PE
    truth = [P @ PE - v, PL @ P - v]  # Q(Logistics, l) and Q(Experience, e): the other agent's policy marginalised
    rows = []
    for u, adv in enumerate(tree_advantages(ro.rewards)):
        if scale is not None:
            adv = adv * scale(ro.rewards.shape[1 + u])
        idx, a = ro.unique_credit(ro.depth_nodes[u], adv)
        msg = np.array([ro.entries[i].token_ids[0] for i in idx])
        inst = np.array([int(ro.entries[i].instance[1:]) for i in idx])
        assert len(idx) == runs * ro.rewards.shape[1 + u]  # each unique sample credited once
        for k in range(3):
            sel = msg == k
            sums = np.bincount(inst[sel], weights=a[sel], minlength=runs)
            counts = np.bincount(inst[sel], minlength=runs).astype(float)
            keep = counts > 0
            mean, se = fidelity._cluster_mean_se(sums[keep], counts[keep])
            rows.append({"u": u, "action": f"m{k}", "n_obs": int(counts.sum()), "clusters": int(keep.sum()),
                         "mean": mean, "truth": float(truth[u][k]), "se": se, "z": (mean - truth[u][k]) / se})
    return rows


def test_shared_credit_is_unbiased_for_both_parallel_agents():
    rows = parallel_cells(runs=3000, seed=5)
    s = assert_unbiased(rows)
    assert s["cells"] == 6 and s["within_3se"] == 6, rows


def test_the_parallel_check_has_power_against_a_biased_baseline():
    """Including the alternative itself in the baseline shrinks every advantage by (b - 1) / b."""
    rows = parallel_cells(runs=3000, seed=5, scale=lambda b: (b - 1) / b)
    s = fidelity.summary(rows)
    assert s["chi2_p"] < 1e-6, rows
    for u in (0, 1):  # rejected on each agent's cells alone
        assert max(abs(r["z"]) for r in rows if r["u"] == u) > bonferroni_z(s["cells"]), rows


# ----- the trainer ---------------------------------------------------------------------------------

def make_parallel_trainer(cls, **cfg):
    from datasets import Dataset

    from tests.trainers.test_trainers import parity_reward, tiny_team

    models, tok = tiny_team()
    ds = Dataset.from_list([{"id": f"p{i}", "prompt": f"q{i}", "question": f"q{i}", "answer": "1"} for i in range(4)])
    args = experiment_config(cls.default_config_cls, num_train_epochs=1, max_new_tokens=4, instances_per_update=4,
                             agent_devices="cpu", **cfg)
    tr = cls(agents=models, tokenizer=tok, reward_func=parity_reward, train_dataset=ds, args=args,
             workflow=parallel_workflow())
    tr.verbose = False
    return tr


def record_update(tr):
    seen = {}
    collect, update = tr.collect, tr.update_policies

    def spy_collect(items, plan=None, greedy=False):
        seen["rollout"] = collect(items, plan, greedy)
        return seen["rollout"]

    def spy_update(samples):
        seen["samples"] = samples
        return update(samples)

    tr.collect, tr.update_policies = spy_collect, spy_update
    return seen


@pytest.mark.parametrize("share, per_agent", [(True, (2, 3)), (False, (2, 6))])
def test_c3_trains_each_unique_parallel_sample_once(share, per_agent):
    from c3_plugin.trainers import C3Trainer

    tr = make_parallel_trainer(C3Trainer, plan="tree [2, 3]", share_parallel_samples=share)
    seen = record_update(tr)
    tr.train()
    ro, samples = seen["rollout"], seen["samples"]
    assert tr.update_step == 1
    assert [len(samples[a]) for a in (0, 1)] == [4 * per_agent[0], 4 * per_agent[1]]
    assert tr.totals["messages"] == 4 * sum(per_agent) and tr.totals["env_steps"] == 4 * 6
    row = tr.history[-1]
    assert row["train/agent1/samples"] == 4 * per_agent[1] and row["budget/messages"] == 4 * sum(per_agent)
    adv1 = [s.advantage for s in samples[1]]
    if share:
        expected = [a for inst in ro.rewards.tolist() for a in oracles.shared_advantages(inst)]
        np.testing.assert_allclose(adv1, expected, atol=1e-12)
        originals = [e for e in ro.decision_entries(1) if e.shared is None]
        assert [s.completion_ids for s in samples[1]] == [e.token_ids for e in originals]
        assert row["credit/Experience_u1/groups"] == 4
    else:
        np.testing.assert_allclose(adv1, tree_advantages(ro.rewards)[1])
    np.testing.assert_allclose([s.advantage for s in samples[0]], tree_advantages(ro.rewards)[0])


def test_evaluation_and_magrpo_never_share(monkeypatch):
    from c3_plugin.trainers import C3Trainer, WorkflowMAGRPOTrainer, bridge

    calls = []
    real = bridge.materialize

    def spy(*args, **kwargs):
        calls.append(kwargs["share_identical_contexts"])
        return real(*args, **kwargs)

    monkeypatch.setattr(bridge, "materialize", spy)
    tr = make_parallel_trainer(C3Trainer, plan="tree [2, 2]")
    tr.eval_dataset = tr.train_dataset
    tr.evaluate(num_eval_samples=2)
    tr.collect([{"id": "x", "question": "q"}])
    assert calls[-1] is True and calls[:-1] and not any(calls[:-1])  # evaluation's greedy plan never shares
    mg = make_parallel_trainer(WorkflowMAGRPOTrainer, plan="independent 4")
    ro = mg.collect([{"id": "x", "question": "q"}])
    assert calls[-1] is False and list(ro.budget.messages) == [8]


@pytest.mark.parametrize("share, messages", [(True, 2 + 4 + 4 + 8), (False, 2 + 4 + 8 + 8)])
def test_dry_run_budget_counts_shared_samples_once(tmp_path, share, messages):
    from c3_plugin.core.config import load_config
    from c3_plugin.run.budget import expected_budget

    data = {"algorithm": "c3", "domain": "math", "workflow": {"name": "branching"},
            "output": {"base_dir": str(tmp_path)}, "c3": {"num_train_epochs": 1, "plan": "tree [2, 2, 2, 1]",
                                                          "share_parallel_samples": share}}
    budget = expected_budget(load_config(data=data), load_workflow("branching"), 6)
    assert budget["messages_per_instance"] == messages and budget["expected_messages"] == 6 * messages
    assert budget["expected_env_steps"] == 6 * 8
