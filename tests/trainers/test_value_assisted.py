"""C3's ``credit: value_assisted`` (the reference code's default): the formula on hand-computed groups
against a plain loop, the learned Q-critic trained on C3's own groups, its checkpoint, and ``credit: loo``
left exactly as it was."""

import warnings

import numpy as np
import pytest
import torch
from datasets import Dataset

from c3_plugin.core.credit import loo_advantages_batch, tree_advantages, value_assisted_advantages
from c3_plugin.run.testing import experiment_config, tiny_model, tiny_tokenizer
from c3_plugin.scale.precision import compute_dtype_of
from c3_plugin.trainers import C3Config, C3Trainer


def oracle(groups, q, alpha, eps=1e-8):
    """Plain loop: A_j = mean(R_j) - [(1 - alpha) b^R_j + alpha b^Q_j], then z-scored in the group."""
    out = []
    for g, qs in zip(groups, q):
        means = [float(np.mean(r)) for r in g]
        counts = [len(r) for r in g]
        adv = []
        for j in range(len(g)):
            w = sum(counts[k] for k in range(len(g)) if k != j)
            b_r = sum(counts[k] * means[k] for k in range(len(g)) if k != j) / w
            b_q = sum(counts[k] * qs[k] for k in range(len(g)) if k != j) / w
            adv.append(means[j] - ((1 - alpha) * b_r + alpha * b_q))
        mu = sum(adv) / len(adv)
        sd = (sum((a - mu) ** 2 for a in adv) / len(adv) + eps) ** 0.5
        out.append([(a - mu) / sd for a in adv])
    return np.array(out)


RETURNS = np.array([[[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]],   # means 0.5, 0, 1
                    [[0.0, 1.0], [1.0, 1.0], [0.0, 0.0]]])  # means 0.5, 1, 0
Q = np.array([[0.2, 0.4, 0.9], [0.1, 0.1, 0.7]])


def test_the_formula_on_a_hand_computed_group():
    # group 0, alpha = 1: A_j = mean(R_j) - mean of the others' Q = 0.5 - 0.65, 0 - 0.55, 1 - 0.3
    adv = np.array([0.5 - 0.65, 0.0 - 0.55, 1.0 - 0.3])
    z = (adv - adv.mean()) / np.sqrt(adv.var() + 1e-8)
    got = value_assisted_advantages(RETURNS, Q, alpha=1.0)
    assert got[0] == pytest.approx(z, abs=1e-12)
    for alpha in (0.0, 0.3, 1.0):
        assert value_assisted_advantages(RETURNS, Q, alpha) == pytest.approx(oracle(RETURNS, Q, alpha), abs=1e-12)
    ragged = np.array([[[1.0, np.nan, np.nan], [0.0, 1.0, 1.0], [0.5, 0.5, np.nan]]])  # 1, 3 and 2 continuations
    q = np.array([[0.3, 0.6, 0.2]])
    groups = [[[1.0], [0.0, 1.0, 1.0], [0.5, 0.5]]]
    assert value_assisted_advantages(ragged, q, 0.6) == pytest.approx(oracle(groups, q, 0.6), abs=1e-12)


def test_alpha_zero_is_the_z_scored_leave_one_out_and_a_perfect_critic_adds_nothing():
    loo = loo_advantages_batch(RETURNS)
    z = (loo - loo.mean(-1, keepdims=True)) / np.sqrt(loo.var(-1, keepdims=True) + 1e-8)
    assert value_assisted_advantages(RETURNS, Q, alpha=0.0) == pytest.approx(z, abs=1e-12)
    means = RETURNS.mean(-1)
    for alpha in (0.5, 1.0):  # Q_hat = the true means: its baseline is the returns' baseline
        assert value_assisted_advantages(RETURNS, means, alpha) == pytest.approx(z, abs=1e-12)
    # the critic's term, exactly: LOO + alpha (b^R - b^Q), before the z-score
    b = lambda x: (x.sum(-1, keepdims=True) - x) / (x.shape[-1] - 1)  # noqa: E731 (equal continuation counts)
    raw = loo + 0.7 * (b(means) - b(Q))
    assert value_assisted_advantages(RETURNS, Q, 0.7) == pytest.approx(
        (raw - raw.mean(-1, keepdims=True)) / np.sqrt(raw.var(-1, keepdims=True) + 1e-8), abs=1e-12)
    flat = value_assisted_advantages(np.ones((1, 3, 2)), np.full((1, 3), 0.4), 1.0)  # nothing to tell apart: 0, not NaN
    assert np.array_equal(flat, np.zeros((1, 3)))


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="alpha must be in"):
        value_assisted_advantages(RETURNS, Q, 1.5)
    with pytest.raises(ValueError, match="do not match"):
        value_assisted_advantages(RETURNS, Q[:, :2], 1.0)
    with pytest.raises(ValueError, match="credit must be one of"):
        C3Config(credit="value")
    with pytest.raises(ValueError, match="q_critic_alpha"):
        C3Config(credit="value_assisted", q_critic_alpha=-0.1, allow_estimator_change=True)


def parity_reward(*completions, batch_items=None, prompts=None):
    return [float(len(c) % 2) for c in completions[-1]]


def make_trainer(rows=4, **cfg):
    tok = tiny_tokenizer()
    ds = (Dataset.from_list([{"id": f"p{i}", "prompt": f"q{i}", "question": f"q{i}", "answer": "1"}
                             for i in range(rows)]))
    args = experiment_config(C3Config, num_train_epochs=1, max_new_tokens=5, instances_per_update=2,
                             agent_devices="cpu", **cfg)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tree [2, 4]: the +-1 warning of the 2-alternative Reasoner groups
        tr = C3Trainer(agents=[tiny_model(tok, seed=0), tiny_model(tok, seed=1)], tokenizer=tok,
                       reward_func=parity_reward, train_dataset=ds, args=args, workflow="reasoner_actor")
    tr.verbose = False
    return tr, ds


def test_loo_credit_is_unchanged_and_builds_no_critic():
    tr, ds = make_trainer()
    assert tr.q_critic is None and getattr(tr, "critics", None) is None
    ro = tr.collect([dict(r) for r in ds])
    credited = tr.compute_advantages(ro)
    expected = [a for a in tree_advantages(ro.rewards) if a is not None]
    assert len(credited) == len(expected) == 2
    for (_, adv), exp in zip(credited, expected):
        assert np.array_equal(adv, exp)  # bit-identical: the same function on the same rewards


def test_value_assisted_credits_with_the_critic_and_trains_it():
    tr, ds = make_trainer(credit="value_assisted", allow_estimator_change=True, q_critic_learning_rate=1e-3,
                          q_critic_warmup_updates=0, q_critic_max_tokens=24)
    critic = tr.critics[0]
    assert tr.critics[0] is tr.q_critic.module and tr.critic_optimizer is tr.q_critic.optimizer
    assert all(p.dtype == torch.float32 for p in critic.parameters()) and compute_dtype_of(critic) is None
    ro = tr.collect([dict(r) for r in ds])
    inputs = tr.q_critic_inputs(ro)
    states = [tr.q_critic.encode(t) for _, _, ts in inputs for t in ts]
    assert max(len(s) for s in states) <= 24
    q = tr.q_critic.predict(states, 8)
    credited = tr.compute_advantages(ro)
    sizes = [len(ts) for _, _, ts in inputs]
    for (idx, adv), (idx2, returns, _ts), qs in zip(credited, inputs, np.split(q, np.cumsum(sizes)[:-1])):
        assert np.array_equal(idx, idx2)
        assert adv == pytest.approx(value_assisted_advantages(returns, qs.reshape(returns.shape[:2]), 1.0).reshape(-1),
                                    abs=1e-9)
    # the critic's fit on a fixed batch: the loss goes down over a few steps
    batch_states, targets = tr._q_batch
    assert len(batch_states) == len(targets) == sum(sizes)  # every alternative, its mean continuation return
    losses = [float(np.mean(tr.q_critic.fit(batch_states, targets, 1, np.random.default_rng(0), 8, 1.0)))
              for _ in range(6)]
    assert losses[-1] < losses[0], losses
    metrics = tr.update_q_critic()
    assert {"train/q_critic_loss", "train/q_critic_value_mean", "train/q_critic_target_mean",
            "train/q_critic_rank_corr", "train/q_critic_warmup"} <= set(metrics)
    assert metrics["train/q_critic_warmup"] == 0.0 and np.isfinite(metrics["train/q_critic_loss"])
    assert tr._q_batch is None  # consumed: a rank without instances next batch does not refit this one


def test_warmup_leaves_the_critic_term_out():
    tr, ds = make_trainer(credit="value_assisted", allow_estimator_change=True, q_critic_warmup_updates=1,
                          q_critic_alpha=1.0)
    torch.nn.init.normal_(tr.q_critic.module.head.weight, std=1.0)  # a critic whose term would change the credit
    ro = tr.collect([dict(r) for r in ds])
    credited = tr.compute_advantages(ro)
    for (_, adv), (_, returns, _) in zip(credited, tr.q_critic_inputs(ro)):
        loo = loo_advantages_batch(returns)
        z = (loo - loo.mean(-1, keepdims=True)) / np.sqrt(loo.var(-1, keepdims=True) + 1e-8)
        assert adv == pytest.approx(z.reshape(-1), abs=1e-9)
    assert tr._q_metrics["train/q_critic_warmup"] == 1.0


def test_a_short_value_assisted_run_trains_critic_and_policies_and_resumes_the_critic(tmp_path):
    tr, _ = make_trainer(credit="value_assisted", allow_estimator_change=True, q_critic_learning_rate=1e-3,
                         q_critic_max_tokens=32)
    head = tr.q_critic.module.head.weight.detach().clone()
    policy = [p.detach().clone() for p in tr.agents[1].parameters()]
    tr.train(checkpoint_dir=str(tmp_path / "ckpt"))
    assert tr.update_step == 2 and not torch.equal(head, tr.q_critic.module.head.weight)
    assert any(not torch.equal(a, b) for a, b in zip(policy, tr.agents[1].parameters()))
    from c3_plugin.run.folder import latest_checkpoint

    ckpt = latest_checkpoint(tmp_path / "ckpt")
    assert ckpt is not None  # CoMLRL saves critics[0] and critic_optimizer with the agents
    resumed, _ = make_trainer(credit="value_assisted", allow_estimator_change=True, q_critic_learning_rate=1e-3,
                              q_critic_max_tokens=32)
    assert not torch.equal(resumed.q_critic.module.head.weight, tr.q_critic.module.head.weight)
    # resumes at the end: no new batch
    resumed.train(checkpoint_dir=str(tmp_path / "ckpt"), resume_from_checkpoint=str(ckpt))
    assert resumed.update_step == tr.update_step
    for a, b in zip(resumed.q_critic.module.state_dict().values(), tr.q_critic.module.state_dict().values()):
        assert torch.equal(a, b)
    saved, restored = tr.q_critic.optimizer.state_dict(), resumed.q_critic.optimizer.state_dict()
    assert saved["state"] and set(saved["state"]) == set(restored["state"])
    for k in saved["state"]:
        assert torch.equal(saved["state"][k]["exp_avg"], restored["state"][k]["exp_avg"])


def test_value_assisted_through_the_run_path_logs_the_critic(tmp_path):
    import json
    from pathlib import Path

    from c3_plugin.run.train import train
    from tests.trainers.test_trainers import run_config, tiny_team

    cfg = run_config(tmp_path, "c3", credit="value_assisted", allow_estimator_change=True, q_critic_max_tokens=32)
    models, tok = tiny_team()
    with pytest.warns(UserWarning, match="2 alternatives"):
        summary = train(cfg, models=models, tokenizer=tok)
    rows = [json.loads(line) for line in (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "train/update_step" in r]
    assert len(rows) == 2 and [r["train/q_critic_warmup"] for r in rows] == [1.0, 0.0]
    assert all(np.isfinite(r["train/q_critic_loss"]) and "train/agent1/optimizer_steps" in r for r in rows)


def test_the_critic_enters_as_a_bonus_for_the_alternative_it_rates_not_as_a_baseline():
    """What the estimator rule says of value_assisted, against the reference's formula (the oracle above): with
    equal continuations, A_j = ((n - alpha) mean(R_j) + alpha Q_j) / (n - 1) + one constant per group, so after the
    z-score the credit is the z-score of (n - alpha) mean(R_j) + alpha Q_j. A baseline would not depend on the
    alternative's own value; here raising Q_hat of one alternative raises that alternative's credit."""
    rng = np.random.default_rng(3)
    returns = rng.normal(size=(5, 4, 3))  # 5 groups of n = 4 alternatives with 3 continuations each
    q = rng.normal(size=(5, 4))
    n = returns.shape[1]
    for alpha in (0.3, 1.0):
        mixed = (n - alpha) * returns.mean(-1) + alpha * q
        z = (mixed - mixed.mean(-1, keepdims=True)) / mixed.std(-1, keepdims=True)
        reference = oracle(returns, q, alpha)
        assert reference == pytest.approx(z, abs=1e-6)
        assert value_assisted_advantages(returns, q, alpha) == pytest.approx(z, abs=1e-6)
    bumped = q.copy()
    bumped[:, 0] += 1.0  # the critic rates alternative 0 higher; nothing else changes
    gain = value_assisted_advantages(returns, bumped, 1.0)[:, 0] - value_assisted_advantages(returns, q, 1.0)[:, 0]
    assert np.all(gain > 0)  # its own credit rises: a bonus, not a variance-reducing baseline


def test_value_assisted_needs_the_acknowledgement():
    with pytest.raises(ValueError, match=r"\[value_assisted_changes_estimator\].*Fix: credit: loo"):
        C3Config(credit="value_assisted")
    assert C3Config(credit="value_assisted", allow_estimator_change=True).credit == "value_assisted"
