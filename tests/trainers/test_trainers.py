import dataclasses
import inspect
import json
from importlib.metadata import entry_points
from pathlib import Path

import numpy as np
import pytest
import torch
from comlrl.trainers.reinforce.magrpo import MAGRPOConfig, MAGRPOTrainer
from datasets import Dataset

from c3_plugin.core import registry
from c3_plugin.core.config import load_config
from c3_plugin.core.credit import group_advantages, tree_advantages
from c3_plugin.core.rewards import batched
from c3_plugin.run.budget import expected_budget
from c3_plugin.run.dry_run import prepare
from c3_plugin.run.folder import latest_checkpoint
from c3_plugin.run.testing import experiment_config, tiny_model, tiny_tokenizer
from c3_plugin.run.train import build_trainer, train
from c3_plugin.trainers import C3Config, C3Trainer, MAPPOConfig, MAPPOTrainer, WorkflowMAGRPOTrainer
from c3_plugin.trainers.mappo import gae

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "math"


def parity_reward(*completions, batch_items=None, prompts=None):
    """Reward with variance on random tiny models: the parity of the final message's length."""
    return [float(len(c) % 2) for c in completions[-1]]


def run_config(tmp_path, algorithm="c3", **algo):
    section = {"num_train_epochs": 1, "max_new_tokens": 5, "instances_per_update": 3, "micro_batch_size": 8,
               "eval_batch_size": 4, "save_traces": True, **algo}
    data = {"algorithm": algorithm, "domain": "math", "seed": 0,
            "agent_model": {"name": "tiny", "device": "cpu"},
            "workflow": {"name": "reasoner_actor", "max_new_tokens": {"Reasoner": 5, "Actor": 4}},
            "dataset": {"train": {"name": "gsm8k_train", "source": str(FIXTURES / "gsm8k_train.jsonl"), "limit": 6},
                        "eval": [{"name": "math500", "source": str(FIXTURES / "math500.jsonl"), "limit": 3},
                                 {"name": "gsm8k", "source": str(FIXTURES / "gsm8k.jsonl"), "limit": 2}]},
            "output": {"base_dir": str(tmp_path), "run_name": f"{algorithm}-run", "verbose": False, "plot": True},
            algorithm: section}
    return load_config(data=data)


def template_trainer(tmp_path, algorithm: str, plan: str, rows: int):
    """A trainer of ``algorithm`` on the template domain's echo_pair workflow with tiny models, built by the
    run path (``prepare`` + ``build_trainer``); returns ``(trainer, workflow, train rows)``."""
    from c3_plugin.core.config import load_config
    from c3_plugin.run.dry_run import prepare
    from c3_plugin.run.train import build_trainer

    cfg = load_config(data={"algorithm": algorithm, "domain": "template", "workflow": {"name": "echo_pair"},
                            "dataset": {"train": {"size": rows}},
                            "output": {"base_dir": str(tmp_path), "verbose": False},
                            algorithm: {"num_train_epochs": 1, "max_new_tokens": 3, "plan": plan}})
    domain, wf, train, evals = prepare(cfg)
    tok = tiny_tokenizer()
    return build_trainer(cfg, domain, wf, train, evals, tmp_path, [tiny_model(tok, 0), tiny_model(tok, 1)],
                         tok), wf, train


def tiny_team(n=2):
    tok = tiny_tokenizer()
    return [tiny_model(tok, seed=i) for i in range(n)], tok


def test_trainers_extend_comlrl_and_keep_its_constructor():
    assert issubclass(C3Trainer, MAGRPOTrainer) and issubclass(C3Config, MAGRPOConfig)
    ours = inspect.signature(C3Trainer.__init__).parameters
    for name in inspect.signature(MAGRPOTrainer.__init__).parameters:
        assert name in ours, name
    assert {"workflow", "plan"} <= set(ours)
    for name in ("c3", "magrpo", "mappo"):
        cfg_cls, trainer_cls = registry.resolve(name)
        assert issubclass(trainer_cls, MAGRPOTrainer) and cfg_cls is trainer_cls.default_config_cls
    # one name per algorithm: the entry points this package declares are exactly the registry's names and classes
    ours = {ep.name: ep.value for ep in entry_points(group="comlrl.trainers") if ep.value.startswith("c3_plugin.")}
    assert ours == registry._BUILTIN
    assert tuple(entry_points(group="comlrl.trainers", name="c3"))[0].load() is C3Trainer
    with pytest.raises(KeyError, match="unknown algorithm 'ppo2'"):
        registry.resolve("ppo2")


def test_config_field_docs_and_validation():
    src = inspect.getsource(C3Config)
    assert "# C3 needs groups" in src
    with pytest.raises(ValueError, match="advantage_scaling"):
        C3Config(advantage_scaling="zscore")
    # CoMLRL's flag, keeping leave-one-out
    assert C3Config(advantage_normalization=True).advantage_scaling == "batch_scale"
    with pytest.raises(ValueError, match="not 'independent B'"):
        MAPPOConfig(plan="tree [2, 4]")


@pytest.mark.parametrize("algorithm", ["c3", "magrpo", "mappo"])
def test_each_algorithm_trains_through_the_run_path(tmp_path, algorithm):
    extra = {"critic_warmup_updates": 1} if algorithm == "mappo" else {}
    cfg = run_config(tmp_path, algorithm, **extra)
    models, tok = tiny_team()
    before = [p.detach().clone() for p in models[1].parameters()]
    summary = train(cfg, models=models, tokenizer=tok)
    _, wf, train_ds, _ = prepare(cfg)
    budget = expected_budget(cfg, wf, len(train_ds))
    assert summary["env_steps"] == budget["expected_env_steps"] == 6 * 8
    assert summary["totals"]["messages"] == budget["expected_messages"]
    run = Path(summary["run_dir"])
    history = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train_rows = [h for h in history if "train/update_step" in h]
    assert len(train_rows) == budget["rollout_batches"] == 2
    peaks = [h["memory/peak_rss_gib"] for h in train_rows]  # the process's peak so far: positive, never falling
    assert peaks[0] > 0 and peaks == sorted(peaks) and summary["peak_rss_gib"] >= peaks[-1]
    steps = [sum(h.get(f"train/agent{a}/optimizer_steps") or 0 for h in train_rows) for a in range(2)]
    assert steps == budget["expected_optimizer_updates_per_agent"]
    assert any(not torch.equal(a, b) for a, b in zip(before, models[1].parameters())) == (steps[1] > 0)
    for key in ("eval/math500/accuracy", "eval/gsm8k/boxed_rate", "eval/all/len_Actor"):
        assert key in summary["eval_after"]
    for f in ("config.json", "summary.json", "learning_curve.png", "traces.jsonl", "final/agent_0/config.json"):
        assert (run / f).exists(), f
    assert (run / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    example = json.loads((run / "example_trace.json").read_text())  # the first batch's first path, with its credit
    decisions = [m for m in example["messages"] if m["kind"] == "decision"]
    assert example["update_step"] == 1 and [m["role"] for m in decisions] == ["Reasoner", "Actor"]
    assert example["task"] and isinstance(example["return"], float)
    assert all(isinstance(m["advantage"], float) for m in decisions if m["agent"] in trained_agents(steps))
    recorded = json.loads((run / "config.json").read_text())[algorithm]  # the settled config is what ran
    assert (recorded == json.loads(json.dumps(dataclasses.asdict(cfg.algo), default=str))
            and recorded["agent_devices"] == "cpu")


def trained_agents(steps):
    return {a for a, n in enumerate(steps) if n}


def make_trainer(cls, plan=None, workflow="reasoner_actor", **cfg):
    models, tok = tiny_team()
    ds = Dataset.from_list([{"id": f"p{i}", "prompt": f"q{i}", "question": f"q{i}", "answer": "1"} for i in range(4)])
    args = experiment_config(cls.default_config_cls, num_train_epochs=1, max_new_tokens=5, instances_per_update=4,
                             agent_devices="cpu", **cfg)
    tr = cls(agents=models, tokenizer=tok, reward_func=parity_reward, train_dataset=ds, args=args, plan=plan,
             workflow=workflow)
    tr.verbose = False
    return tr, ds


def test_c3_credits_each_decision_point_with_leave_one_out():
    tr, ds = make_trainer(C3Trainer)
    ro = tr.collect([dict(r) for r in ds])
    credited = tr.compute_advantages(ro)
    expected = tree_advantages(ro.rewards)
    assert len(credited) == 2
    for (idx, adv), exp, u in zip(credited, expected, range(2)):
        np.testing.assert_allclose(adv, exp)
        assert all(ro.entries[i].decision == u for i in idx)
    samples, _ = tr.build_samples(ro, credited)
    assert len(samples[0]) == 4 * 2 and len(samples[1]) == 4 * 8


@pytest.mark.parametrize("cls", [C3Trainer, WorkflowMAGRPOTrainer])
def test_the_example_trace_is_one_path_with_each_messages_credit(cls):
    """credited_path: the first instance's first leaf, root to leaf: the task, each message with the advantage
    compute_advantages gave its entry (the first alternative at each decision point), and the leaf's return."""
    from c3_plugin.core.rollout import credited_path

    tr, ds = make_trainer(cls)
    ro = tr.collect([dict(r) for r in ds])
    credited = tr.compute_advantages(ro)
    example = credited_path(ro, credited)
    decisions = [m for m in example["messages"] if m["kind"] == "decision"]
    assert [m["decision"] for m in decisions] == [0, 1] and [m["alternative"] for m in decisions] == [0, 0]
    assert [m["advantage"] for m in decisions] == pytest.approx([float(adv[0]) for _, adv in credited])
    assert example["return"] == pytest.approx(float(ro.rewards[0].flat[0])) and example["task"] == ro.entries[0].context
    leaf = credited_path(ro, credited, instance=1, leaf=7)  # instance 1's last leaf: under the last alternatives
    assert leaf["instance"] == ro.entries[ro.depth_nodes[-1][8 + 7]].instance
    assert leaf["return"] == pytest.approx(float(ro.rewards[1].flat[7]))


def test_magrpo_broadcasts_one_run_score_to_every_decision():
    tr, ds = make_trainer(WorkflowMAGRPOTrainer)
    ro = tr.collect([dict(r) for r in ds])
    credited = tr.compute_advantages(ro)
    runs = group_advantages(ro.rewards.reshape(4, 8), "mean").reshape(-1)
    for _idx, adv in credited:
        np.testing.assert_allclose(adv, runs)
    # the Actor of run r continues the Reasoner of run r
    r_nodes = [ro.entries[i] for i in credited[0][0]]
    a_nodes = [ro.entries[i] for i in credited[1][0]]
    assert [a.parent for a in a_nodes] == [r.node for r in r_nodes]


def test_gae_matches_a_plain_loop():
    rng = np.random.default_rng(0)
    values, rewards = rng.normal(size=(5, 3)), rng.normal(size=5)
    adv, ret = gae(values, rewards, gamma=0.9, lam=0.8)
    for r in range(5):
        for u in range(3):
            total = 0.0
            for t in range(u, 3):
                v_next = values[r, t + 1] if t + 1 < 3 else 0.0
                delta = (rewards[r] if t == 2 else 0.0) + 0.9 * v_next - values[r, t]
                total += (0.9 * 0.8) ** (t - u) * delta
            assert adv[r, u] == pytest.approx(total)
    np.testing.assert_allclose(ret, adv + values)
    # lambda = 1, gamma = 1: the advantage is the terminal reward minus the value
    adv1, _ = gae(values, rewards, 1.0, 1.0)
    np.testing.assert_allclose(adv1, rewards[:, None] - values)


def test_mappo_critic_warms_up_before_the_policy_moves():
    tr, ds = make_trainer(MAPPOTrainer, critic_warmup_updates=1, critic_learning_rate=1e-3)
    head_before = tr.critics[0].head.weight.detach().clone()
    policy_before = [p.detach().clone() for p in tr.agents[0].parameters()]
    tr.train()
    first = tr.history[0]
    assert first["critic/warmup"] == 1.0 and "train/agent0/optimizer_steps" not in first
    assert not torch.equal(head_before, tr.critics[0].head.weight)
    assert all(torch.equal(a, b) for a, b in zip(policy_before, tr.agents[0].parameters()))


def test_lora_adapters_one_per_role(tmp_path):
    from peft import LoraConfig, get_peft_model

    tok = tiny_tokenizer()
    base = tiny_model(tok)
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft_model = get_peft_model(base, cfg, adapter_name="agent0")
    peft_model.add_adapter("agent1", cfg)
    ds = Dataset.from_list([{"id": f"p{i}", "prompt": f"q{i}", "question": f"q{i}", "answer": "1"} for i in range(4)])
    args = experiment_config(C3Config, num_train_epochs=1, max_new_tokens=4, instances_per_update=4,
                             agent_devices="cpu", agent_learning_rate=1e-2)
    tr = C3Trainer(agents=[peft_model, peft_model], tokenizer=tok, reward_func=parity_reward, train_dataset=ds,
                   args=args, lora_adapters=True, workflow="reasoner_actor")
    tr.verbose = False
    ids0 = {id(p) for g in tr.optimizers[0].param_groups for p in g["params"]}
    ids1 = {id(p) for g in tr.optimizers[1].param_groups for p in g["params"]}
    assert ids0 and ids1 and not ids0 & ids1
    snap = {n: p.detach().clone() for n, p in peft_model.named_parameters()}
    tr.train()
    changed = {n for n, p in peft_model.named_parameters() if not torch.equal(p, snap[n])}
    assert any(".agent0." in n for n in changed) and any(".agent1." in n for n in changed)
    assert all("lora_" in n for n in changed)  # the shared base never moves
    tr.save_model(str(tmp_path / "final"))
    assert len(list((tmp_path / "final" / "adapters").rglob("adapter_model.safetensors"))) == 2


def test_template_domain_runs_the_contract(tmp_path):
    data = {"algorithm": "c3", "domain": "template", "workflow": {"name": "echo_pair"},
            "dataset": {"train": {"size": 8}, "eval": [{"name": "echo", "size": 4}]},
            "output": {"base_dir": str(tmp_path), "verbose": False, "plot": False, "save_model": False},
            "c3": {"num_train_epochs": 1, "max_new_tokens": 4, "instances_per_update": 4}}
    cfg = load_config(data=data)
    from c3_plugin.run.dry_run import dry_run_report

    report = dry_run_report(cfg)
    assert (report["probe_reward"] == 1.0 and report["expected_env_steps"] == 8 * 8
            and report["eval_rows"] == {"echo": 4})
    summary = train(cfg, *tiny_team())
    assert summary["env_steps"] == 64 and "eval/echo/accuracy" in summary["eval_after"]


def test_interrupted_run_resumes_to_the_same_budget(tmp_path):
    cfg = run_config(tmp_path, "c3", num_train_epochs=2)
    domain, wf, train_ds, evals = prepare(cfg)
    full = build_trainer(cfg, domain, wf, train_ds, evals, tmp_path / "full", *tiny_team(), False)
    full.reward_func = parity_reward
    full.train(checkpoint_dir=str(tmp_path / "full" / "ckpt"))

    killed_dir = tmp_path / "killed"
    victim = build_trainer(cfg, domain, wf, train_ds, evals, killed_dir, *tiny_team(), False)
    calls = {"n": 0}

    @batched  # one call per rollout batch
    def dies_in_epoch_two(*c, **kw):
        calls["n"] += 1
        if calls["n"] > 2:  # two rollout batches per epoch
            raise KeyboardInterrupt("killed")
        return parity_reward(*c, **kw)

    victim.reward_func = dies_in_epoch_two
    with pytest.raises(KeyboardInterrupt):
        victim.train(checkpoint_dir=str(killed_dir / "ckpt"))
    ckpt = latest_checkpoint(killed_dir / "ckpt")
    assert ckpt is not None and victim.env_step == 2 * 24 + 0
    resumed = build_trainer(cfg, domain, wf, train_ds, evals, killed_dir, *tiny_team(), False)
    resumed.reward_func = parity_reward
    resumed.train(checkpoint_dir=str(killed_dir / "ckpt"), resume_from_checkpoint=str(ckpt))
    assert resumed.env_step == full.env_step == 2 * 6 * 8
    assert resumed.totals == full.totals
    assert resumed.update_step == full.update_step == 4


def read_offline_history(run_dir):
    """History keys of an offline W&B run, read from its .wandb file (a LevelDB-style log of
    protobuf Records: 7-byte file header, 32 KiB blocks, records with a 7-byte header)."""
    import struct

    from wandb.proto import wandb_internal_pb2

    files = list(Path(run_dir).rglob("*.wandb"))
    assert files, "no offline W&B run written"
    raw = files[0].read_bytes()
    assert raw[:4] == b":W&B"
    keys, pos, block, pending = set(), 7, 32768, b""
    while pos + 7 <= len(raw):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", raw[pos:pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        pending += raw[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST
            rec = wandb_internal_pb2.Record()
            rec.ParseFromString(pending)
            pending = b""
            if rec.WhichOneof("record_type") == "history":
                keys |= {item.key or "/".join(item.nested_key) for item in rec.history.item}
    return keys


def test_wandb_offline_run_has_eval_keys_against_env_step(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = run_config(tmp_path, "c3")
    cfg.wandb.enabled, cfg.wandb.mode, cfg.wandb.dir = True, "offline", str(tmp_path / "wb")
    cfg.output.save_model = False
    models, tok = tiny_team()
    train(cfg, models=models, tokenizer=tok)
    keys = read_offline_history(tmp_path / "wb")
    assert "env_step" in keys and "eval/math500/accuracy" in keys and "train/loss" in keys


def test_comlrl_magrpo_trains_with_the_math_domain():
    from domains.math import DOMAIN, math_workflow

    wf = math_workflow("reasoner_actor")
    models, tok = tiny_team()
    ds = Dataset.from_list([{"prompt": "What is 1+1?", "question": "What is 1+1?", "answer": "2"}])
    args = MAGRPOConfig(num_train_epochs=1, num_turns=1, num_generations=2, max_new_tokens=4, agent_devices="cpu",
                        eval_interval=0, rollout_buffer_size=1)
    trainer = MAGRPOTrainer(agents=models, tokenizer=tok, num_agents=2, reward_func=DOMAIN.make_reward(None),
                            formatters=DOMAIN.formatters(wf), train_dataset=ds, args=args)
    trainer.verbose = False
    before = [p.detach().clone() for p in models[0].parameters()]
    trainer.train()
    assert trainer.env_step == 2
    assert DOMAIN.formatters(wf)[1](ds[0]).startswith("Problem:\nWhat is 1+1?")
    assert all(p.grad is not None or torch.equal(p, b) for p, b in zip(models[0].parameters(), before))


def test_torchrun_world_that_cannot_split_the_batch_is_refused_before_anything_loads(tmp_path, monkeypatch):
    """Under torchrun a rollout batch is split evenly over the ranks: 3 instances per update on 2 ranks is
    refused with the fix named, and a non-workflow trainer (no data parallelism) is refused, before any
    process group, model or folder exists (tests/scale/test_distributed.py runs the real multi-process jobs)."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="instances_per_update.*multiple of 2"):
        train(run_config(tmp_path))
    with pytest.raises(ValueError, match="minibatch_size=12 is not a multiple of ranks x micro_batch_size = 2 x 8"):
        train(run_config(tmp_path, instances_per_update=4, minibatch_size=12))
    assert not (tmp_path / "c3-run").exists()


def test_comlrl_placement_keys_keep_their_meaning_in_one_process(tmp_path):
    """CoMLRL's agent_devices (one device per agent) with parallel_training: mp reach its trainer unchanged in a
    one-process run; under torchrun they are refused (tests/run/test_cluster_plan.py)."""
    cfg = run_config(tmp_path, agent_devices=["cpu", "cpu"], parallel_training="mp", num_train_epochs=1)
    domain, wf, train_ds, evals = prepare(cfg)
    models, tok = tiny_team()
    trainer = build_trainer(cfg, domain, wf, train_ds, evals, tmp_path, models, tok)
    assert trainer.parallel_training == "mp" and [str(d) for d in trainer.agent_devices] == ["cpu", "cpu"]
    assert trainer.engines is None and not trainer.dist.enabled  # no DeepSpeed, no process group


def test_training_bar_shows_the_phase_env_steps_reward_and_loss(capsys):
    """CoMLRL's training bar ticks once per item, and an update waits for instances_per_update of them: its postfix
    names what the run waits on and the last update's env steps, train reward and loss."""
    tr, ds = make_trainer(C3Trainer, plan="tree [2, 2]", eval_interval=0)  # 4 items, one update
    shown = []
    show = tr._show_progress
    tr._show_progress = lambda **fields: (show(**fields), shown.append(dict(tr._progress)))
    tr.verbose = True
    tr.train()
    err = capsys.readouterr().err
    assert "Epoch 1/1" in err
    for fragment in ("phase=queue 3/4", "phase=rollout 1/2", "phase=credit", "phase=update", "env_step=16", "reward=",
                     "loss="):
        assert fragment in err, fragment
    phases = [s["phase"] for s in shown]
    assert phases == ["queue 1/4", "queue 2/4", "queue 3/4", "rollout 0/2", "rollout 1/2", "rollout 2/2", "credit",
                      "update", "queue 0/4"]
    last = shown[-1]
    assert last["env_step"] == 16 and last["reward"] == tr.history[-1]["train/reward_mean"]
    assert last["loss"] == tr.history[-1]["train/loss"]
    # no bar (verbose off, or outside CoMLRL's epoch loop): nothing is drawn, nothing fails
    tr.verbose = False
    assert tr._training_bar() is None
    tr._show_progress(phase="update")
    assert capsys.readouterr().err == ""


def test_rank_rows_merge_counts_by_sum_peaks_by_max_and_the_rest_by_mean():
    from c3_plugin.trainers.ranks import merge_rank_rows

    rows = [{"budget/messages": 10.0, "memory/peak_rss_gib": 3.0, "train/reward_mean": 0.2},
            {"budget/messages": 6.0, "memory/peak_rss_gib": 5.0, "train/reward_mean": 0.4}]
    assert merge_rank_rows(rows) == pytest.approx({"budget/messages": 16.0, "memory/peak_rss_gib": 5.0,
                                                   "train/reward_mean": 0.3})
