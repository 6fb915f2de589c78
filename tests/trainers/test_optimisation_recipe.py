"""The paper's optimisation recipe as config fields: the learning-rate schedule (on a real run, and across a
resume), AdamW's hyper-parameters, the adaptive KL penalty in the reward, one policy shared by every role,
and top-p / top-k reaching HF sampling."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from c3_plugin.core.config import ConfigError, load_config
from c3_plugin.core.loss import sequence_logprobs
from c3_plugin.core.protocol import Sampling
from c3_plugin.generation.hf import sampling_config
from c3_plugin.run.budget import expected_budget
from c3_plugin.run.dry_run import prepare
from c3_plugin.run.testing import killed_run, tiny_model, tiny_tokenizer
from c3_plugin.run.train import build_trainer
from c3_plugin.trainers.optim import KLController, LRSchedule, kl_per_token, lr_factor
from c3_plugin.trainers.update import ppo_update as real_ppo_update

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "math"


def config(tmp_path, algorithm="c3", agents=None, rows=3, **algo):
    section = {"num_train_epochs": 1, "max_new_tokens": 5, "instances_per_update": 1, "micro_batch_size": 8,
               "eval_batch_size": 4, "agent_learning_rate": 1e-3, **algo}
    return load_config(data={
        "algorithm": algorithm, "domain": "math", "seed": 0, "agent_model": {"name": "tiny", "device": "cpu"},
        "agents": agents or {}, "workflow": {"name": "reasoner_actor", "max_new_tokens": {"Reasoner": 5, "Actor": 4}},
        "dataset": {"train": {"name": "gsm8k_train", "source": str(FIXTURES / "gsm8k_train.jsonl"), "limit": rows},
                    "eval": [{"name": "math500", "source": str(FIXTURES / "math500.jsonl"), "limit": 1}]},
        "output": {"base_dir": str(tmp_path), "verbose": False, "plot": False, "save_model": False,
                   "checkpoint_interval": 0},
        algorithm: section})


def build(tmp_path, cfg, models=None):
    domain, wf, train, evals = prepare(cfg)
    tok = tiny_tokenizer()
    models = models(tok) if models is not None else [tiny_model(tok, 0), tiny_model(tok, 1)]
    return build_trainer(cfg, domain, wf, train, evals, tmp_path, models, tok)


def record_steps(trainer):
    """Per distinct optimizer: the learning rate of every step it takes (wraps ``step``)."""
    seen = {}
    for opt in {id(o): o for o in trainer.optimizers}.values():
        rates = seen.setdefault(id(opt), [])
        step = opt.step

        def spy(*a, _step=step, _opt=opt, _rates=rates, **kw):
            _rates.append(_opt.param_groups[0]["lr"])
            return _step(*a, **kw)

        opt.step = spy
    return seen


# ----- learning-rate schedule -------------------------------------------------------------------
def test_closed_forms_of_the_schedules():
    total, warm = 100, 3
    assert [lr_factor("cosine", k, total, warm) for k in range(4)] == pytest.approx([0, 1 / 3, 2 / 3, 1])
    mid = warm + (total - warm) / 2
    assert lr_factor("cosine", mid, total, warm, 0.1) == pytest.approx(0.1 + 0.9 * 0.5)
    assert lr_factor("cosine", total, total, warm, 0.1) == pytest.approx(0.1)
    assert lr_factor("linear", mid, total, warm, 0.0) == pytest.approx(0.5)
    assert lr_factor("constant", 50, total, warm) == 1.0
    s = LRSchedule(2e-6, total, "cosine", warmup_ratio=0.03, min_ratio=0.1)
    assert (s.warmup_steps == 3 and s.lr(0) == 0.0 and s.lr(3) == pytest.approx(2e-6)
            and s.lr(10**6) == pytest.approx(2e-7))


def test_cosine_schedule_on_a_real_run_follows_the_closed_form(tmp_path):
    cfg = config(tmp_path, ppo_epochs=2, minibatch_size=2, lr_scheduler="cosine", lr_warmup_ratio=0.25,
                 lr_min_ratio=0.1, agents={"learning_rate_scale": {"Reasoner": 0.5}})
    trainer = build(tmp_path, cfg)
    _, wf, train, _ = prepare(cfg)
    expected = expected_budget(cfg, wf, train)["expected_optimizer_updates_per_agent"]
    # 2 Reasoner, 8 Actor messages
    assert [s.total_steps for s in trainer.lr_schedulers] == expected == [3 * 2 * 1, 3 * 2 * 4]
    seen = record_steps(trainer)
    trainer.train()
    for agent, base in enumerate((5e-4, 1e-3)):
        rates, total = seen[id(trainer.optimizers[agent])], expected[agent]
        warm = math.ceil(0.25 * total)
        closed = [base * lr_factor("cosine", k, total, warm, 0.1) for k in range(total)]
        assert rates == pytest.approx(closed, rel=1e-12, abs=0)
        assert rates[0] == 0.0 and rates[warm] == pytest.approx(base)  # warm-up from 0, its end at the full rate
        mid = warm + (total - warm) // 2
        assert rates[mid] == pytest.approx(
            base * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (mid - warm) / (total - warm)))))
        assert rates[-1] == pytest.approx(
            base * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (total - 1 - warm) / (total - warm)))))
        assert trainer.lr_schedulers[agent].steps == total
    logged = [row["train/agent1/lr"] for row in trainer.history if "train/agent1/lr" in row]
    assert logged[-1] == pytest.approx(seen[id(trainer.optimizers[1])][-1])


def test_constant_rate_keeps_no_schedule_and_logs_the_rate(tmp_path):
    trainer = build(tmp_path, config(tmp_path))
    assert not hasattr(trainer, "lr_schedulers")
    trainer.train()
    assert {row.get("train/agent0/lr") for row in trainer.history if "train/agent0/lr" in row} == {1e-3}


def test_resume_restores_the_schedule_position(tmp_path):
    cfg = config(tmp_path, rows=2, num_train_epochs=2, lr_scheduler="cosine", lr_warmup_ratio=0.5)
    full = build(tmp_path / "full", cfg)
    rates = record_steps(full)
    full.train(checkpoint_dir=str(tmp_path / "full" / "ckpt"))
    full_rates = rates[id(full.optimizers[1])]
    assert len(full_rates) == full.lr_schedulers[1].total_steps == 4

    victim = build(tmp_path / "killed", cfg)
    reward = victim.reward_func
    ckpt = killed_run(victim, tmp_path / "killed" / "ckpt", after_calls=2)  # two rollout batches per epoch
    resumed = build(tmp_path / "killed", cfg)
    resumed.reward_func = reward
    after = record_steps(resumed)
    resumed.train(checkpoint_dir=str(tmp_path / "killed" / "ckpt"), resume_from_checkpoint=str(ckpt))
    assert resumed.lr_schedulers[1].steps == 4
    assert after[id(resumed.optimizers[1])] == pytest.approx(full_rates[2:])  # epoch 2 runs at the full run's rates


# ----- AdamW ------------------------------------------------------------------------------------------
def test_adam_fields_reach_every_policy_optimizer(tmp_path):
    default = build(tmp_path, config(tmp_path))
    torch_default = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))]).defaults
    for opt in default.optimizers:
        g = opt.param_groups[0]
        assert ((g["betas"], g["eps"], g["weight_decay"])
                == (torch_default["betas"], torch_default["eps"], torch_default["weight_decay"]))
    paper = build(tmp_path, config(tmp_path, adam_beta1=0.9, adam_beta2=0.95, adam_eps=1e-6, weight_decay=0.0))
    for opt in paper.optimizers:
        g = opt.param_groups[0]
        assert (g["betas"], g["eps"], g["weight_decay"]) == ((0.9, 0.95), 1e-6, 0.0)
    with pytest.raises(ConfigError, match="adam_beta1"):
        config(tmp_path, adam_beta2=1.0)


# ----- KL penalty in the reward ----------------------------------------------------------------------------
def perturbed_reference(trainer):
    with torch.no_grad():
        for ref in {id(r): r for r in trainer.reference_models}.values():
            for p in ref.parameters():
                p.add_(0.05 * torch.randn_like(p))


def hand_path_kl(trainer, rollout):
    by_node = {(e.instance, e.node): e for e in rollout.entries}
    out = []
    for leaf in rollout.depth_nodes[-1]:
        e, total = rollout.entries[int(leaf)], 0.0
        while True:
            if e.kind == "decision":
                ref, _ = sequence_logprobs(trainer.reference_models[e.agent], [e.prompt_ids], [e.token_ids],
                                           trainer._pad_id(e.agent), trainer.agent_temperature[e.agent])
                d = ref[0, : len(e.token_ids)].detach().double() - torch.tensor(e.logprobs, dtype=torch.float64)
                total += float((torch.exp(d) - d - 1).sum())
            if e.parent < 0:
                break
            e = by_node[(e.instance, e.parent)]
        out.append(total)
    return np.array(out)


def test_kl_reward_subtracts_coef_times_the_path_kl_before_credit(tmp_path):
    cfg = config(tmp_path, kl_reward_coef=0.05, kl_reward_target=0.1, kl_reward_horizon=100, temperature=0.8)
    trainer = build(tmp_path, cfg)
    assert (trainer.reference_models[0] is not trainer.agents[0]
            and not any(p.requires_grad for p in trainer.reference_models[0].parameters()))
    perturbed_reference(trainer)
    rollout = trainer.collect([dict(trainer.train_dataset[0])])
    raw = rollout.rewards.copy()
    metrics = trainer.apply_kl_reward(rollout)
    kl = hand_path_kl(trainer, rollout)
    assert kl.min() > 0
    np.testing.assert_allclose(rollout.rewards.reshape(-1), raw.reshape(-1) - 0.05 * kl, rtol=1e-6, atol=1e-8)
    assert (metrics["train/kl_reward_coef"] == 0.05 and metrics["train/kl_path_mean"]
            == pytest.approx(kl.mean(), rel=1e-6))
    err = float(np.clip(kl.mean() / 0.1 - 1, -0.2, 0.2))
    assert trainer.kl_controller.value == pytest.approx(0.05 * (1 + err * kl.size / 100))

    seen = []
    credit = trainer.compute_advantages
    trainer.compute_advantages = lambda r: (seen.append((r.rewards.copy(),
                                                         [e.reward for e in r.entries if e.reward is not None])),
                                            credit(r))[1]
    trainer.train()
    penalised, task = seen[0]
    assert (penalised.reshape(-1) < np.array(task)).all()  # credit saw R - coef * KL; the trace keeps the task reward
    assert "train/kl_path_mean" in trainer.history[-2] or any("train/kl_path_mean" in r for r in trainer.history)


def test_kl_estimators_and_fixed_coefficient():
    lp, ref = np.array([-1.0, -2.0]), np.array([-1.5, -1.0])
    r = lp - ref
    assert kl_per_token(lp, ref, "k1") == pytest.approx(r)
    assert kl_per_token(lp, ref, "k2") == pytest.approx(r ** 2 / 2)
    assert kl_per_token(lp, ref, "k3") == pytest.approx(np.exp(-r) - 1 + r)
    fixed = KLController(0.01)
    fixed.update(5.0, 1000)
    assert fixed.value == 0.01
    adaptive = KLController(0.01, target=0.1, horizon=10000)
    adaptive.update(1.0, 64)  # far above target: the +0.2 clip
    assert adaptive.value == pytest.approx(0.01 * (1 + 0.2 * 64 / 10000))


def test_kl_reward_is_off_by_default(tmp_path):
    trainer = build(tmp_path, config(tmp_path))
    assert trainer.kl_controller is None and not trainer.reference_models
    rollout = trainer.collect([dict(trainer.train_dataset[0])])
    rewards = rollout.rewards
    assert trainer.apply_kl_reward(rollout) == {} and rollout.rewards is rewards
    with pytest.raises(ConfigError, match="kl_reward_target"):
        config(tmp_path, kl_reward_target=0.1)


def test_kl_reward_state_is_checkpointed(tmp_path):
    trainer = build(tmp_path, config(tmp_path, kl_reward_coef=0.01, kl_reward_target=0.1))
    trainer.kl_controller.value = 0.0123
    extra = trainer._checkpoint_extra_state()
    trainer.kl_controller.value = 0.5
    trainer._restore_checkpoint_extra_state(extra, None)
    assert trainer.kl_controller.value == 0.0123


# ----- one policy shared by every role ----------------------------------------------------------------
def test_shared_policy_is_one_module_one_optimizer_one_update(tmp_path, monkeypatch):
    cfg = config(tmp_path, agents={"policy": "shared"}, ppo_epochs=2)
    trainer = build(tmp_path, cfg, models=lambda tok: [tiny_model(tok, 0)] * 2)
    assert trainer.agents[0] is trainer.agents[1] and trainer.policy_groups == [[0, 1]]
    assert trainer.optimizers[0] is trainer.optimizers[1]
    calls = []

    def spy(model, optimizer, samples, *a, **kw):
        calls.append(len(samples))
        return real_ppo_update(model, optimizer, samples, *a, **kw)

    monkeypatch.setattr("c3_plugin.trainers.update.ppo_update", spy)
    steps = record_steps(trainer)
    before = [p.detach().clone() for p in trainer.agents[0].parameters()]
    trainer.train()
    assert calls == [2 + 8] * 3  # one update per batch on both roles' messages (tree [2, 4]: 2 Reasoner + 8 Actor)
    # one step per PPO epoch, not one per role
    assert len(steps) == 1 and len(steps[id(trainer.optimizers[0])]) == 3 * 2
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.agents[0].parameters()))
    keys = {k for row in trainer.history for k in row}
    assert "train/agent0/lr" in keys and not any(k.startswith("train/agent1/") for k in keys)


def test_shared_policy_steps_and_refusals(tmp_path):
    cfg = config(tmp_path, agents={"policy": "shared"}, minibatch_size=4, lr_scheduler="linear")
    trainer = build(tmp_path, cfg, models=lambda tok: [tiny_model(tok, 0)] * 2)
    assert (trainer.lr_schedulers[0] is trainer.lr_schedulers[1] and trainer.lr_schedulers[0].total_steps
            == 3 * math.ceil(10 / 4))
    with pytest.raises(ConfigError, match="different learning rates"):
        config(tmp_path, agents={"policy": "shared", "learning_rate": {"Reasoner": 1e-4, "Actor": 2e-4}})
    with pytest.raises(ConfigError, match="freeze the one model"):
        config(tmp_path, agents={"policy": "shared", "trainable": {"Reasoner": False}})
    with pytest.raises(ValueError, match="different learning rates"):  # a role left at the default rate
        build(tmp_path, config(tmp_path, agents={"policy": "shared", "learning_rate": {"Actor": 2e-4}}),
              models=lambda tok: [tiny_model(tok, 0)] * 2)


def test_shared_policy_loads_one_model_and_its_memory_counts_one(tmp_path):
    from c3_plugin.core.config import AgentsSection, ModelSection
    from c3_plugin.run.memory import memory_report
    from c3_plugin.scale.policies import load_policies

    tok = tiny_tokenizer()
    tiny_model(tok, 0).save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    models, _, lora = load_policies(ModelSection(name=str(tmp_path / "m")), AgentsSection(policy="shared"), 2)
    assert models[0] is models[1] and not lora
    reports = {}
    for policy in ("per_agent", "shared"):
        cfg = load_config(data={**config(tmp_path).raw, "agent_model": {"name": "HuggingFaceTB/SmolLM2-135M-Instruct"},
                                "agents": {"policy": policy}})
        _, wf, _, _ = prepare(cfg)
        reports[policy] = memory_report(cfg, wf)
    assert reports["shared"]["agents_on_device"] == 1 and reports["per_agent"]["agents_on_device"] == 2
    assert reports["shared"]["total_gib"] < reports["per_agent"]["total_gib"]


# ----- sampling -----------------------------------------------------------------------------------------
def test_top_p_and_top_k_reach_hf_sampling_and_logprobs_stay_full_vocabulary(tmp_path):
    trainer = build(tmp_path, config(tmp_path, temperature=0.7, top_p=0.8, top_k=20))
    s = trainer.sampling()
    assert (s.temperature, s.top_p, s.top_k) == (0.7, 0.8, 20)
    gen = sampling_config(s, 8, [0], 0, 2)
    assert (gen.do_sample, gen.temperature, gen.top_p, gen.top_k) == (True, 0.7, 0.8, 20)
    seen = []
    original = trainer.backend._generate_agent

    def spy(agent, prompts, n, sampling, *rest, **kw):
        seen.append(sampling)
        return original(agent, prompts, n, sampling, *rest, **kw)

    trainer.backend._generate_agent = spy
    rollout = trainer.collect([dict(trainer.train_dataset[0])])
    assert {(x.top_p, x.top_k, x.temperature) for x in seen} == {(0.8, 20, 0.7)}
    e = next(e for e in rollout.entries if e.kind == "decision")
    again = trainer.backend.behaviour_logprobs(e.agent, [list(e.prompt_ids)], [list(e.token_ids)], 0.7)[0]
    assert again == pytest.approx(e.logprobs, abs=1e-5)  # the temperature-scaled full-vocabulary log-probs
    assert Sampling(top_k=None).top_k is None and sampling_config(Sampling(), 4, [0], 0, 1).top_k == 0


# ----- the optimizer steps the plan prints are the ones that run -------------------------------------
def test_the_shared_policy_plan_prints_one_count_for_the_one_model_and_it_is_what_runs(tmp_path):
    cfg = config(tmp_path, agents={"policy": "shared"}, minibatch_size=4, ppo_epochs=2)
    _, wf, train, _ = prepare(cfg)
    budget = expected_budget(cfg, wf, train)
    (policy,) = budget["optimizer_updates_per_policy"]  # one model plays both roles: one count, not one per role
    assert policy["agents"] == [0, 1] and policy["roles"] == ["Reasoner", "Actor"]
    assert policy["updates"] == 3 * 2 * math.ceil((2 + 8) / 4)  # per batch both roles' 10 messages, 4 per step
    # each role's model steps that often
    assert budget["expected_optimizer_updates_per_agent"] == [policy["updates"]] * 2
    trainer = build(tmp_path, cfg, models=lambda tok: [tiny_model(tok, 0)] * 2)
    seen = record_steps(trainer)
    trainer.train()
    assert [len(r) for r in seen.values()] == [policy["updates"]]  # per role it would have printed [3*2*1, 3*2*2]
    from c3_plugin.run.dry_run import dry_run_report, summary

    assert f"one shared policy (Reasoner, Actor) {policy['updates']} optimizer updates" in summary(dry_run_report(cfg))


@pytest.mark.parametrize("algorithm", ["c3", "magrpo"])
def test_the_equal_steps_setting_gives_every_agent_the_same_optimizer_steps(tmp_path, algorithm):
    """minibatches_per_ppo_epoch: each policy's messages of a batch in k minibatches, whatever their count: C3's
    Reasoner (2 messages per instance) steps as often as its Actor (8) and as MAGRPO's agents (8 each)."""
    cfg = config(tmp_path, algorithm, minibatches_per_ppo_epoch=2, ppo_epochs=2,
                 **({"plan": "independent 8"} if algorithm == "magrpo" else {}))
    _, wf, train, _ = prepare(cfg)
    expected = expected_budget(cfg, wf, train)["expected_optimizer_updates_per_agent"]
    assert expected == [3 * 2 * 2, 3 * 2 * 2]
    trainer = build(tmp_path, cfg)
    seen = record_steps(trainer)
    trainer.train()
    assert [len(seen[id(trainer.optimizers[a])]) for a in range(2)] == expected
    plain = config(tmp_path, algorithm, minibatch_size=4, ppo_epochs=2,
                   **({"plan": "independent 8"} if algorithm == "magrpo" else {}))
    counts = expected_budget(plain, wf, train)["expected_optimizer_updates_per_agent"]
    # messages per step: unequal under C3
    assert counts == ([3 * 2 * 1, 3 * 2 * 2] if algorithm == "c3" else [3 * 2 * 2] * 2)
    with pytest.raises(ConfigError, match="both size the minibatches"):
        config(tmp_path, algorithm, minibatches_per_ppo_epoch=2, minibatch_size=4)


def test_the_equal_steps_setting_splits_evenly_and_never_steps_on_nothing():
    """minibatches_per_ppo_epoch: 4 on 5 messages gives minibatches of 2, 1, 1, 1 (not 2, 2, 1, 0: a step on
    nothing); over ranks the larger minibatches follow one another, so no step is empty on every rank."""
    from types import SimpleNamespace

    from c3_plugin.trainers.update import PolicySample, even_split, plan_minibatches

    samples = [PolicySample([1], [2, 3], [0.0, 0.0], float(i)) for i in range(5)]
    args = SimpleNamespace(minibatches_per_ppo_epoch=4, minibatch_size=None, ppo_epochs=2, micro_batch_size=1)
    steps = plan_minibatches(samples, args, np.random.default_rng(0), world=1)
    assert [n_seqs for _, _, n_seqs, _ in steps] == [2, 1, 1, 1] * 2
    assert all(len(b) == n for b, _, n, _ in steps)
    for epoch in (steps[:4], steps[4:]):  # each epoch trains on every message once
        assert sorted(s.advantage for b, *_ in epoch for s in b) == [0.0, 1.0, 2.0, 3.0, 4.0]
    # ranks with 1, 0, 1 and 3 messages, k = 4: each rank's split starts after the messages of the ranks before it
    counts, k = [1, 0, 1, 3], 4
    per_rank = [even_split(n, k, offset=sum(counts[:r])) for r, n in enumerate(counts)]
    assert [sum(col) for col in zip(*per_rank)] == [2, 1, 1, 1]
    assert even_split(2, 2, offset=1) == [1, 1] and even_split(1, 2, offset=1) == [0, 1]
