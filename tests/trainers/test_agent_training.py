"""Per-role training settings (the ``agents`` section): learning rates, learning-rate multipliers, frozen
agents, and per-role sampling temperatures (``workflow.temperature``), through the real run path."""

from pathlib import Path

import pytest
import torch

from c3_plugin.core.config import ConfigError, load_config
from c3_plugin.core.protocol import Sampling, role_sampling
from c3_plugin.core.workflow import WorkflowError
from c3_plugin.run.dry_run import dry_run_report, prepare
from c3_plugin.run.testing import killed_run, tiny_model, tiny_tokenizer
from c3_plugin.run.train import build_trainer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "math"


def config(tmp_path, algorithm="c3", agents=None, workflow=None, **algo):
    section = {"num_train_epochs": 1, "max_new_tokens": 5, "instances_per_update": 3, "micro_batch_size": 8,
               "eval_batch_size": 4, "agent_learning_rate": 1e-3, **algo}
    return load_config(data={
        "algorithm": algorithm, "domain": "math", "seed": 0, "agent_model": {"name": "tiny", "device": "cpu"},
        "agents": agents or {},
        "workflow": {"name": "reasoner_actor", "max_new_tokens": {"Reasoner": 5, "Actor": 4}, **(workflow or {})},
        "dataset": {"train": {"name": "gsm8k_train", "source": str(FIXTURES / "gsm8k_train.jsonl"), "limit": 3},
                    "eval": [{"name": "math500", "source": str(FIXTURES / "math500.jsonl"), "limit": 2}]},
        "output": {"base_dir": str(tmp_path), "verbose": False, "plot": False, "save_model": False,
                   "checkpoint_interval": 0},
        algorithm: section})


def build(tmp_path, cfg):
    domain, wf, train, evals = prepare(cfg)
    tok = tiny_tokenizer()
    return build_trainer(cfg, domain, wf, train, evals, tmp_path, [tiny_model(tok, 0), tiny_model(tok, 1)], tok)


def snapshot(model):
    return [p.detach().clone() for p in model.parameters()]


def changed(before, model):
    return any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


@pytest.mark.parametrize("algorithm", ["c3", "magrpo"])
def test_frozen_reasoner_is_never_updated_and_the_actor_is(tmp_path, algorithm):
    plan = {"plan": "tree [2, 4]"} if algorithm == "c3" else {"plan": "independent 8"}
    cfg = config(tmp_path, algorithm, agents={"trainable": {"Reasoner": False}}, **plan)
    trainer = build(tmp_path, cfg)
    reasoner, actor = snapshot(trainer.agents[0]), snapshot(trainer.agents[1])
    trainer.train()
    assert trainer.update_step >= 1 and trainer.env_step == 3 * 8
    assert not changed(reasoner, trainer.agents[0]), "a frozen agent's weights moved"
    assert changed(actor, trainer.agents[1]), "the trainable agent did not learn"
    keys = {k for row in trainer.history for k in row}
    assert not any(k.startswith("train/agent0/") for k in keys) and any(k.startswith("train/agent1/") for k in keys)


def test_per_role_learning_rates_reach_the_optimizers(tmp_path):
    cfg = config(tmp_path, agents={"learning_rate": {"Actor": 2e-4}, "learning_rate_scale": {"Reasoner": 0.1}})
    trainer = build(tmp_path, cfg)
    assert trainer.agent_lrs == pytest.approx([1e-4, 2e-4])
    assert [g["lr"] for g in trainer.optimizers[0].param_groups] == pytest.approx([1e-4])
    assert [g["lr"] for g in trainer.optimizers[1].param_groups] == pytest.approx([2e-4])
    report = dry_run_report(cfg)
    assert report["agent_training"] == {"learning_rate": pytest.approx([1e-4, 2e-4]), "frozen_agents": []}


def test_role_temperature_samples_and_scores_at_that_temperature(tmp_path):
    cfg = config(tmp_path, workflow={"temperature": {"Reasoner": 1.7}}, temperature=0.9)
    trainer = build(tmp_path, cfg)
    assert trainer.workflow.roles["Reasoner"].temperature == 1.7 and trainer.workflow.roles["Actor"].temperature is None
    assert trainer.agent_temperature == {0: 1.7, 1: 0.9}
    seen = []
    backend = trainer.backend
    original = backend.generate

    def spy(prompts, n, sampling):
        seen.append((prompts[0].role, sampling.temperature, sampling.greedy))
        return original(prompts, n, sampling)

    backend.generate = spy
    rollout = trainer.collect([dict(trainer.train_dataset[0])])
    assert ("Reasoner", 1.7, False) in seen and ("Actor", 0.9, False) in seen
    # behaviour log-probs were recorded at the role's temperature: recomputing them at 1.7 gives the same values
    e = next(e for e in rollout.entries if e.kind == "decision" and e.role == "Reasoner")
    again = backend.behaviour_logprobs(0, [list(e.prompt_ids)], [list(e.token_ids)], 1.7)[0]
    assert again == pytest.approx(e.logprobs, abs=1e-4)
    # eval stays greedy
    assert role_sampling(Sampling(temperature=0.9, greedy=True), trainer.workflow.roles["Reasoner"]).greedy


def test_bad_per_role_settings_are_refused_early(tmp_path):
    with pytest.raises(WorkflowError, match="no role 'Planner'"):
        prepare(config(tmp_path, agents={"trainable": {"Planner": False}}))
    with pytest.raises(ConfigError, match=r"workflow.temperature.*Actor"):  # refused when the config loads
        prepare(config(tmp_path, workflow={"temperature": {"Actor": 0}}))
    with pytest.raises(ValueError, match="both a learning_rate and a learning_rate_scale"):
        build(tmp_path, config(tmp_path, agents={"learning_rate": {"Actor": 1e-4},
                                                 "learning_rate_scale": {"Actor": 0.5}}))
    with pytest.raises(ValueError, match="nothing to train"):
        build(tmp_path, config(tmp_path, agents={"trainable": {"Reasoner": False, "Actor": False}}))
    with pytest.raises(ConfigError, match="unknown key 'agents.trainabel'"):
        config(tmp_path, agents={"trainabel": {"Actor": False}})


def test_a_train_mix_is_refused_by_name_where_the_domain_reads_one_source(tmp_path):
    from c3_plugin.core.domain import single_train_source

    assert single_train_source({"train": {"name": "x"}},
                               "code") == {"name": "x"} and single_train_source({}, "code") == {}
    with pytest.raises(ConfigError, match="the travel domain reads one train source"):
        single_train_source({"train": [{"name": "a"}, {"name": "b"}]}, "travel")


def test_a_resume_with_other_per_agent_settings_is_refused(tmp_path):

    cfg = config(tmp_path, num_train_epochs=2, agents={"learning_rate": {"Actor": 2e-4}})
    first = build(tmp_path, cfg)
    ckpt = killed_run(first, tmp_path / "ckpt", after_calls=1)  # one rollout batch per epoch (3 rows, 3 per update)
    assert ckpt is not None
    changed_lr = build(tmp_path, config(tmp_path, num_train_epochs=2, agents={"learning_rate": {"Actor": 3e-4}}))
    with pytest.raises(ValueError, match="per-agent settings"):
        changed_lr.train(checkpoint_dir=str(tmp_path / "ckpt"), resume_from_checkpoint=str(ckpt))
    same = build(tmp_path, cfg)
    same.train(checkpoint_dir=str(tmp_path / "ckpt"), resume_from_checkpoint=str(ckpt))
    assert same.env_step == 2 * 3 * 8
