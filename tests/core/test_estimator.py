"""C3 against exact ground truth on the synthetic environment (smaller versions of
``bench/estimator_fidelity.py``). Each statistical check runs with fixed seeds; bounds are
per-cell 3-standard-error checks aggregated so that the family of cells is tested at a
sound level (chi-square over cells and a Bonferroni bound on the largest |z|)."""

import numpy as np
import pytest

from bench.studies import fidelity
from c3_plugin import load_workflow, materialize
from c3_plugin.core.credit import tree_advantages
from c3_plugin.core.synthetic import NULL_MESSAGE, SyntheticBackend, SyntheticEnv

QUESTIONS = ["Q1", "Q2"]


def bonferroni_z(cells, alpha=0.01):
    from scipy.stats import norm

    return float(norm.isf(alpha / (2 * max(cells, 1))))


def assert_unbiased(rows):
    s = fidelity.summary(rows)
    assert s["cells"] >= 6, s
    assert s["chi2_p"] > 1e-3, s
    assert s["max_abs_z"] < bonferroni_z(s["cells"]), s
    return s


def include_self_baseline(rewards):
    """A biased estimator (the alternative raises its own baseline), for the power check."""
    return [None if a is None else a * (rewards.shape[1 + u] - 1) / rewards.shape[1 + u]
            for u, a in enumerate(tree_advantages(rewards))]


def test_exact_values_by_enumeration():
    wf = load_workflow("reasoner_actor")
    env = SyntheticEnv(wf, vocab=3, seed=0)
    item = {"id": "x", "question": "Q1"}
    v = env.value(item)
    role, ctx = env.context(item, ())
    p = env.policy(role, ctx)
    q = env.q_values(item, ())
    assert v == pytest.approx(float(p @ q))
    # Q at the opening point is the policy-weighted reward probability one level down
    a0 = env.messages[0]
    p1 = env.policy("Actor", wf.assemble(wf.steps[1], item, [a0]))
    leaf = [env.reward_prob(item, (a0, m)) for m in env.messages]
    assert q[0] == pytest.approx(float(p1 @ np.array(leaf)))
    # the continuation law used by sample_groups matches the real materialiser's leaf rewards
    items = [{"id": f"x{i}", "question": "Q1"} for i in range(3000)]
    rng = np.random.default_rng(0)
    ro = materialize(wf, "tree [1, 1]", items, SyntheticBackend(env, seed=1), lambda leaf: env.reward(leaf, rng))
    assert ro.rewards.mean() == pytest.approx(v, abs=3 * np.sqrt(v * (1 - v) / 3000))


@pytest.mark.parametrize("workflow, plan, runs", [
    ("reasoner_actor", "tree [2, 4]", 600),
    ("reasoner_actor", "tree [4, 4]", 400),
    ("reasoner_actor_verifier", "tree [2, 2, 2]", 600),
    ("reasoner_actor", "diagnostic n=2 u=0 c=1", 1500),
    ("reasoner_actor", "diagnostic n=4 u=0 c=4", 400),
    ("reasoner_actor", "diagnostic n=8 u=0 c=16", 60),
    ("branching", "diagnostic n=4 u=1 c=2", 300),
])
def test_c3_is_unbiased_through_the_rollout_machinery(workflow, plan, runs):
    env = fidelity.builtin_env(workflow, vocab=3, seed=0)
    assert_unbiased(fidelity.unbiasedness(env, plan, QUESTIONS, runs, seed=11))


def test_the_check_has_power_against_a_biased_baseline():
    env = fidelity.builtin_env("reasoner_actor", vocab=3, seed=0)
    rows = fidelity.unbiasedness(env, "tree [2, 4]", QUESTIONS, 600, seed=11, estimator=include_self_baseline)
    s = fidelity.summary(rows)
    assert s["chi2_p"] < 1e-6 and s["max_abs_z"] > bonferroni_z(s["cells"]), s


def test_c3_is_unbiased_with_unequal_continuation_counts():
    env = fidelity.builtin_env("reasoner_actor", vocab=3, seed=0)
    rows = fidelity.unbiasedness_unequal(env, "Q1", [1, 2, 3, 6], groups=20000, seed=3)
    assert_unbiased(rows)


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("c", [1, 4, 16])
def test_noise_law(n, c):
    env = fidelity.builtin_env("reasoner_actor", vocab=3, seed=0)
    row = fidelity.noise_law(env, ["Q1", "Q2", "Q3"], n, c, groups=6000, seed=7)
    assert 0.9 <= row["ratio"] <= 1.1, row


def test_noise_law_detects_a_wrong_law():
    env = fidelity.builtin_env("reasoner_actor", vocab=3, seed=0)
    row = fidelity.noise_law(env, ["Q1"], 2, 4, groups=6000, seed=7)
    # the naive "variance of one mean" sigma^2 / c misses the baseline's share by a factor n/(n-1) = 2
    assert row["observed"] / (row["sigma2"] / 4) > 1.5


def test_ablation_bias_stays_while_c3_error_shrinks():
    env = fidelity.builtin_env("reasoner_actor_verifier", vocab=3, seed=0)
    rows = fidelity.ablation_vs_c3(env, "Q1", 4, [1, 16, 256], groups=4000, seed=5)
    offset = abs(rows[0]["ablation_offset"])
    assert offset > 0.05  # the null message moves what downstream roles read
    first, last = rows[0], rows[-1]
    assert last["ablation_bias"] > 0.8 * offset and last["ablation_bias"] > 10 * last["ablation_bias_se"]
    assert last["c3_bias"] < 4 * last["c3_bias_se"] + 1e-3
    assert last["c3_rmse"] < first["c3_rmse"] / 4
    assert last["ablation_rmse"] > 0.9 * offset
    env.q({"id": "q", "question": "Q1"}, (), NULL_MESSAGE)  # the null message is a valid counterfactual


@pytest.mark.parametrize("signal, noise", [(0.05, 0.05), (0.1, 0.025), (0.02, 0.05), (0.08, 0.01)])
def test_split_half_follows_signal_share(signal, noise):
    row = fidelity.split_half_study(signal, noise, n=64, c=4, groups=1500, seed=2)
    assert abs(row["observed"] - row["implied"]) <= 0.05, row
    small = fidelity.split_half_study(signal, noise, n=4, c=4, groups=3000, seed=2)
    assert abs(small["observed"] - small["finite_n"]) <= 0.05, small
