"""Estimator to learning (bench.studies.synthetic_learning): the trainable policies plug into the real rollout
machinery, the exact success is what Monte Carlo through ``materialize`` measures, every estimator's
policy gradient has the expected mean, the methods spend equal env steps, and learning responds to the
quality of the credit; on the "masked later mistake" variant, the Actor's harmful message costs exactly its
penalty after every first message, the harmful probability and the reward-variance split are exact, and every
method learns to avoid it; the regimes' MatchChainEnv has the exact law it states, frozen agents keep their logits
and the per-agent lr multiplier scales each agent's step. Small, seed-fixed versions of
``bench/estimator_to_learning.py``."""

import dataclasses

import numpy as np
import pytest
from scipy.special import log_softmax

from bench.studies.synthetic_learning import (
    ENV_VARIANTS,
    METHODS,
    REGIMES,
    LearningSetup,
    MatchChainEnv,
    TabularCritic,
    advantages,
    exact_diagnosis,
    learning_curves,
    make_env,
    policy_gradient,
    train,
    variance_decomposition,
)
from c3_plugin import materialize, parse_plan
from c3_plugin.core.stats import area_under_curve
from c3_plugin.core.synthetic import SyntheticBackend

ITEM = {"question": "task"}
SKEWED = LearningSetup(init_scale=1.0)  # far from uniform, so that wrong indices or signs show


def rollout_of(env, plan, copies, seed=0):
    rng = np.random.default_rng(seed)
    items = [{"id": str(i), **ITEM} for i in range(copies)]
    return materialize(env.workflow, plan, items, SyntheticBackend(env, seed=seed + 1),
                       lambda leaves: env.reward(leaves, rng))


def test_backend_logprobs_are_log_softmax_of_the_logits():
    env = make_env(SKEWED, seed=3)
    ro = rollout_of(env, "tree [2, 2, 2]", 4)
    decisions = [e for e in ro.entries if e.kind == "decision"]
    assert len(decisions) == 4 * 14
    for e in decisions:
        (k,) = e.token_ids
        assert e.message == env.messages[k]
        assert e.logprobs[0] == pytest.approx(log_softmax(env.learner.logits[(e.role, e.context)])[k], abs=1e-12)


def test_first_message_decides_whatever_the_later_agents_do():
    env = make_env(SKEWED, seed=5)
    good = env.good_index(ITEM)
    assert int(np.argmax(env.q_values(ITEM, ()))) == good
    first = env.workflow.steps[0].name
    probs = {tuple(o): env.reward_prob(ITEM, o) for o in np.ndindex(*(len(env.messages),) * 3)
             for o in [[env.messages[i] for i in o]]}
    worst_good = min(p for o, p in probs.items() if o[0] == env.messages[good])
    best_bad = max(p for o, p in probs.items() if o[0] != env.messages[good])
    assert first == "Reasoner" and worst_good > best_bad
    assert (max(probs.values()) <= SKEWED.high + 2 * SKEWED.noise
            and min(probs.values()) >= SKEWED.low - 2 * SKEWED.noise)


def test_exact_success_matches_monte_carlo_through_materialize():
    env = make_env(SKEWED, seed=1)
    ro = rollout_of(env, "independent 1", 4000, seed=2)
    v = env.value(ITEM)
    assert ro.rewards.mean() == pytest.approx(v, abs=4 * np.sqrt(v * (1 - v) / 4000))
    first = np.array([e.token_ids[0] for e in ro.decision_entries(0)])
    assert (first == env.good_index(ITEM)).mean() == pytest.approx(env.first_good(ITEM), abs=0.03)


def test_value_cache_follows_the_policy():
    env = make_env(SKEWED, seed=1)
    before = env.value(ITEM)
    role, ctx = env.context(ITEM, ())
    env.learner.step({(role, ctx): np.eye(env.learner.vocab)[env.good_index(ITEM)] * 3.0})
    after = env.value(ITEM)
    p = env.policy(role, ctx)
    assert after > before
    assert after == pytest.approx(float(p @ env.q_values(ITEM, ())))


@pytest.mark.parametrize("method, scale", [("c3", 1.0), ("magrpo", 7 / 8), ("critic", 1.0), ("oracle", 1.0)])
def test_policy_gradient_has_the_exact_mean(method, scale):
    """At the opening context, E[gradient] = pi * (Q - V) for an unbiased estimator ((B-1)/B of it for the
    group-mean baseline). A misaligned advantage (wrong entry order, wrong sign, another context's baseline) fails."""
    setup = dataclasses.replace(SKEWED, critic_init=0.5)
    env = make_env(setup, seed=7)
    ro = rollout_of(env, setup.plan(method), 1500, seed=11)
    grads = policy_gradient(env.learner, ro, advantages(method, ro, setup,
                                                        TabularCritic(setup.critic_lr, setup.critic_init), env))
    role, ctx = env.context(ITEM, ())
    p = env.policy(role, ctx)
    expected = scale * p * (env.q_values(ITEM, ()) - env.value(ITEM))
    assert np.abs(expected).max() > 0.03
    assert grads[(role, ctx)] == pytest.approx(expected, abs=0.012)


def test_exact_advantage_step_increases_exact_success():
    env = make_env(SKEWED, seed=2)
    ro = rollout_of(env, "independent 64", 1, seed=3)
    before = env.value(ITEM)
    grads = policy_gradient(env.learner, ro, advantages("oracle", ro, SKEWED, env=env))
    env.learner.step({k: 2.0 * g for k, g in grads.items()})
    improved = env.value(ITEM)
    env.learner.step({k: -4.0 * g for k, g in grads.items()})  # the opposite step from the start
    assert improved > before + 0.01 and env.value(ITEM) < before - 0.01


def test_equal_env_steps_per_method():
    setup = LearningSetup()
    assert {parse_plan(setup.plan(m)).leaves(3) for m in METHODS} == {setup.leaves} == {8}
    grids, messages = {}, {}
    for m in METHODS:
        rows = train(m, seed=0, env_steps=80, setup=setup)
        grids[m] = [r["env_step"] for r in rows]
        messages[m] = rows[-1]["messages"]
    assert all(g == grids["c3"] for g in grids.values()) and grids["c3"][-1] == 80
    assert messages == {"c3": 10 * 14, "magrpo": 10 * 24, "critic": 10 * 24, "oracle": 10 * 24}
    with pytest.raises(ValueError, match="unknown method"):
        setup.plan("ppo")


def test_learning_responds_to_credit_quality():
    """At a large step size, where one noisy update moves the policy far, noise-free credit (exact Q - V) learns
    faster than MAGRPO's broadcast group advantage on the same kind of samples; every method learns."""
    setup = LearningSetup(lr=8.0)
    seeds = range(8)
    auc = {}
    for m in ("oracle", "magrpo", "c3"):
        rows = learning_curves(m, seeds, 480, setup)
        curves = [[r for r in rows if r["seed"] == s] for s in seeds]
        auc[m] = np.array([area_under_curve([r["env_step"] for r in c], [r["success"] for r in c]) for c in curves])
        assert np.mean([c[-1]["success"] - c[0]["success"] for c in curves]) > 0.2, m
    assert (auc["oracle"] - auc["magrpo"]).mean() > 0.015
    assert (auc["oracle"] > auc["magrpo"]).mean() >= 0.75


# ---- the "masked later mistake" variant: the Actor has one harmful message. The 30-seed bench finds no
# C3 advantage on it (bench/results_estimator_to_learning.md), so these tests check the environment, not a win.

MASKED = dataclasses.replace(SKEWED, **ENV_VARIANTS["masked later mistake"])


def paths(env):
    return [tuple(env.messages[i] for i in o) for o in np.ndindex(*(len(env.messages),) * env.workflow.num_decisions)]


def test_harmful_message_costs_exactly_the_penalty_after_every_first_message():
    env = make_env(dataclasses.replace(MASKED, noise=0.0), seed=4)  # no Verifier noise: the law is exact
    good, bad = env.messages[env.good_index(ITEM)], env.messages[env.harmful_index(ITEM)]
    for r, a, v in paths(env):
        base = MASKED.high if r == good else MASKED.low
        assert env.reward_prob(ITEM, (r, a, v)) == pytest.approx(base - MASKED.actor_penalty * (a == bad), abs=1e-12)
    env = make_env(MASKED, seed=4)  # with it: the Actor adds no shift of its own, the Verifier at most +-noise
    for r, a, v in paths(env):
        base = MASKED.high if r == good else MASKED.low
        assert abs(env.reward_prob(ITEM, (r, a, v)) + MASKED.actor_penalty * (a == bad) - base) <= MASKED.noise + 1e-12
    # whatever the (skewed) policies, the harmful message is the Actor's worst by about the penalty
    for r in env.messages:
        q = env.q_values(ITEM, (r,))
        k = env.harmful_index(ITEM)
        assert int(np.argmin(q)) == k
        gap = np.delete(q, k) - q[k]
        assert (np.all(gap >= MASKED.actor_penalty - 2 * MASKED.noise)
                and np.all(gap <= MASKED.actor_penalty + 2 * MASKED.noise))
    assert int(np.argmax(env.q_values(ITEM, ()))) == env.good_index(ITEM)


def test_original_variant_is_unchanged_and_has_no_harmful_message():
    env, masked = make_env(SKEWED, seed=4), make_env(MASKED, seed=4)
    assert env.harmful(ITEM) is None and env.actor_step is None and masked.actor_step.name == "Actor"
    assert len(env._later) == 2 and len(masked._later) == 1  # the Actor's noise is replaced by the penalty
    with pytest.raises(ValueError, match="later agent could change"):
        make_env(dataclasses.replace(MASKED, actor_penalty=0.25), seed=0)  # 0.4 > 0.25 + 2 * 0.08 fails
    with pytest.raises(ValueError, match="Actor's worst"):
        make_env(dataclasses.replace(MASKED, actor_penalty=0.1), seed=0)  # 0.1 > 2 * 0.08 fails


def test_harmful_probability_is_exact():
    env = make_env(MASKED, seed=6)
    k = env.harmful_index(ITEM)
    p_first = env.policy(*env.context(ITEM, ()))
    direct = sum(p_first[i] * env.policy(*env.context(ITEM, (m,)))[k] for i, m in enumerate(env.messages))
    assert env.harmful(ITEM) == pytest.approx(direct, abs=1e-12)
    ro = rollout_of(env, "independent 1", 4000, seed=8)
    actor = np.array([e.token_ids[0] for e in ro.decision_entries(1)])
    assert (actor == k).mean() == pytest.approx(env.harmful(ITEM), abs=4 * np.sqrt(0.25 * 0.75 / 4000))


def test_variance_decomposition_is_exact():
    for setup in (SKEWED, MASKED):
        env = make_env(setup, seed=9)
        d = variance_decomposition(env, ITEM)
        assert sum(d["decisions"]) + d["outcome"] == pytest.approx(d["total"], abs=1e-12) and min(d["decisions"]) >= 0
    # then the Actor's term is E_r[pi_h (1 - pi_h)] penalty^2
    env = make_env(dataclasses.replace(MASKED, noise=0.0), seed=9)
    k = env.harmful_index(ITEM)
    p_first = env.policy(*env.context(ITEM, ()))
    actor = sum(p_first[i] * (h := env.policy(*env.context(ITEM, (m,)))[k]) * (1 - h)
                for i, m in enumerate(env.messages))
    d = variance_decomposition(env, ITEM)
    assert d["decisions"][1] == pytest.approx(actor * MASKED.actor_penalty ** 2,
                                              abs=1e-12) and d["decisions"][2] == pytest.approx(0, abs=1e-15)


def test_every_method_learns_to_avoid_the_harmful_message():
    setup = LearningSetup(lr=8.0, **ENV_VARIANTS["masked later mistake"])
    for m in ("c3", "magrpo"):
        rows = learning_curves(m, range(4), 320, setup)
        start = np.mean([r["harmful"] for r in rows if r["env_step"] == 0])
        end = np.mean([r["harmful"] for r in rows if r["env_step"] == 320])
        assert start > 0.15 and end < start / 2, m


# ---- the regimes of the C3-vs-MAGRPO study (MatchChainEnv, per-agent step sizes, frozen agents)


FROZEN = dataclasses.replace(SKEWED, **REGIMES["downstream learner (frozen upstream)"])
CHAIN = dataclasses.replace(SKEWED, **REGIMES["all-trained 4-agent chain"])


@pytest.mark.parametrize("setup", [FROZEN, CHAIN], ids=["downstream", "chain4"])
def test_match_chain_probabilities_by_enumeration(setup):
    """Every path's success probability is the first message's value plus the gains of the later agents that
    answered their predecessor with its good reply; the best first message is best whatever the others do."""
    env = make_env(setup, seed=3)
    assert isinstance(env, MatchChainEnv) and env.workflow.num_decisions == len(setup.gains) + 1
    assert sorted(env.first_value(ITEM, k) for k in range(4)) == sorted(setup.first_values)
    for path in paths(env):
        k = env.messages.index(path[0])
        expected = env.first_value(ITEM, k) + sum(g * (path[u] == env.messages[env.reply_index(ITEM, u, path[u - 1])])
                                                  for u, g in enumerate(setup.gains, start=1))
        assert env.reward_prob(ITEM, path) == pytest.approx(expected, abs=1e-12)
    # the second agent's best message depends on the first's
    assert len({env.reply_index(ITEM, 1, m) for m in env.messages}) >= 2
    worst_best = min(env.reward_prob(ITEM, p) for p in paths(env) if p[0] == env.messages[env.good_index(ITEM)])
    assert int(np.argmax(env.q_values(ITEM, ()))) == env.good_index(ITEM)
    assert worst_best >= max(setup.first_values)
    direct = sum(np.prod([env.policy(*env.context(ITEM, p[:u]))[env.messages.index(p[u])] for u in range(len(p))])
                 * env.reward_prob(ITEM, p) for p in paths(env))
    assert env.value(ITEM) == pytest.approx(direct, abs=1e-12)


@pytest.mark.parametrize("setup", [FROZEN, CHAIN], ids=["downstream", "chain4"])
def test_match_chain_exact_success_matches_monte_carlo(setup):
    env = make_env(setup, seed=1)
    ro = rollout_of(env, "independent 1", 4000, seed=2)
    v = env.value(ITEM)
    assert ro.rewards.mean() == pytest.approx(v, abs=4 * np.sqrt(v * (1 - v) / 4000))
    d = exact_diagnosis(env, ITEM)  # what c3 diagnose would estimate: S_u and sigma_u^2 add up to the run's variance
    rows = d["decisions"]
    assert rows[0]["signal_S"] + rows[0]["return_variance"] == pytest.approx(d["reward_variance_total"], abs=1e-12)
    assert rows[-1]["reward_variance"] == pytest.approx(rows[-2]["return_variance"], abs=1e-12)
    assert ro.rewards.var() == pytest.approx(d["reward_variance_total"], abs=0.02)


def test_match_chain_rejects_bad_laws():
    with pytest.raises(ValueError, match="sum\\(gains\\) <= 1"):
        make_env(dataclasses.replace(FROZEN, gains=(0.3,)), seed=0)
    with pytest.raises(ValueError, match="one value >= 0 per later decision point"):
        make_env(dataclasses.replace(CHAIN, gains=(0.05,)), seed=0)
    # a point may read several earlier ones (the Integrator answers both solvers), or none
    judge = make_env(dataclasses.replace(FROZEN, workflow="solvers_judge", gains=(0.05, 0.1)), seed=0)
    assert [len(r) for r in judge._reads] == [0, 0, 2]
    assert len({judge.reply_index(ITEM, 2, a, b) for a in judge.messages for b in judge.messages}) >= 2
    assert [len(r) for r in make_env(dataclasses.replace(FROZEN, workflow="branching", gains=(0.05, 0.05, 0.05)),
                                     seed=0)._reads] == [0, 1, 1, 2]
    wf = make_env(FROZEN, 0).workflow
    with pytest.raises(ValueError, match="lr_scale has 1 entries"):
        dataclasses.replace(FROZEN, lr_scale=(1.0,)).agent_scales(wf)
    with pytest.raises(ValueError, match="must be >= 0"):
        dataclasses.replace(FROZEN, lr_scale=(-1.0, 1.0)).agent_scales(wf)
    assert dataclasses.replace(FROZEN, lr_scale=()).agent_scales(wf) == {"Reasoner": 1.0, "Actor": 1.0}


def test_frozen_agent_keeps_its_logits():
    env = make_env(dataclasses.replace(FROZEN, lr=16.0), seed=4)
    rows = train("c3", seed=4, env_steps=160, setup=dataclasses.replace(FROZEN, lr=16.0), env=env)
    reasoner = {k: v for k, v in env.learner.logits.items() if k[0] == "Reasoner"}
    actor = {k: v for k, v in env.learner.logits.items() if k[0] == "Actor"}
    fresh = make_env(FROZEN, seed=4).learner
    assert reasoner and all(np.array_equal(v, fresh.logit(*k)) for k, v in reasoner.items())
    assert len(actor) == 4 and any(not np.allclose(v, fresh.logit(*k)) for k, v in actor.items())
    assert rows[-1]["first_good"] == pytest.approx(rows[0]["first_good"],
                                                   abs=0) and rows[-1]["success"] > rows[0]["success"]


@pytest.mark.parametrize("method", ["c3", "magrpo"])
def test_lr_multiplier_scales_each_agents_step(method):
    """One update from the same initial policies and samples: agent 0's logit change is lr_scale[0] times the
    unscaled one, agent 1's unchanged."""
    deltas = {}
    for scale in ((1.0, 1.0), (0.25, 1.0)):
        setup = dataclasses.replace(FROZEN, lr=4.0, lr_scale=scale)
        env = make_env(setup, seed=6)
        init = {k: v.copy() for k, v in env.learner.logits.items()}
        train(method, seed=6, env_steps=setup.leaves, setup=setup, env=env)
        fresh = make_env(setup, seed=6).learner
        deltas[scale] = {k: v - init.get(k, fresh.logit(*k)) for k, v in env.learner.logits.items()}
    full, scaled = deltas[(1.0, 1.0)], deltas[(0.25, 1.0)]
    assert set(full) == set(scaled)
    moved = [k for k in full if np.abs(full[k]).max() > 1e-9]
    assert {k[0] for k in moved} == {"Reasoner", "Actor"}
    for k in full:
        factor = 0.25 if k[0] == "Reasoner" else 1.0
        assert scaled[k] == pytest.approx(factor * full[k], abs=1e-12)
