"""C3 as a drop-in for CoMLRL users: CoMLRL's documented quick-start with only the class names changed,
every reward signature CoMLRL accepts, formatters honoured, CoMLRL arguments the workflow trainers cannot
honour refused by name, the parallel default workflow, and one name per algorithm."""

import json
import math
import warnings
from functools import partial
from pathlib import Path

import pytest
import torch
from datasets import Dataset

from c3_plugin.core.rewards import batched
from c3_plugin.run.testing import experiment_config, tiny_model, tiny_tokenizer
from c3_plugin.trainers import C3Config, C3Trainer, MAPPOTrainer, WorkflowMAGRPOTrainer

ROOT = Path(__file__).resolve().parents[2]


def test_comlrl_quick_start_trains_under_c3_with_only_class_names_changed(tmp_path, monkeypatch):
    """CoMLRL's "Quick Start" (docs/content/docs/examples/comlrl-quick-start.md, 1.4.x), verbatim but for
    the class names (MAGRPOConfig/MAGRPOTrainer -> C3Config/C3Trainer) and, offline, tiny local models in
    place of ``from_pretrained("Qwen/Qwen2.5-0.5B")``."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    from comlrl.utils.reward_processor import RewardProcessors

    from c3_plugin.trainers import (  # was: from comlrl.trainers.reinforce import MAGRPOConfig, MAGRPOTrainer
        C3Config,
        C3Trainer,
    )

    train_data = {
        "prompt": [
            "Describe a city in the clouds:",
            "Invent a new holiday and explain it:",
            "Write a bedtime story for a dragon:",
            "Explain how teleportation might work:",
            "Tell a joke about dinosaurs:",
            "Describe a world without electricity:",
            "Create a superhero with a unique power:",
            "Write a scene where the moon talks:",
            "Invent a new type of fruit:",
            "Design a playground on Mars:",
        ]
    }
    train_dataset = Dataset.from_dict(train_data)

    tokenizer = tiny_tokenizer()  # offline stand-in for AutoTokenizer.from_pretrained(model_name)
    agents = [tiny_model(tokenizer, seed=i) for i in range(2)]  # for AutoModelForCausalLM.from_pretrained(model_name)
    before = [p.detach().clone() for p in agents[1].parameters()]
    calls = []

    def proper_length_ratio_reward(completions1, completions2, target_min=2.0, target_max=3.0):
        calls.append((len(completions1), len(completions2)))
        rewards = []
        for c1, c2 in zip(completions1, completions2):
            len1, len2 = len(c1), len(c2)
            if len1 == 0:
                rewards.append(0.0)
                continue
            ratio = len2 / len1
            if target_min <= ratio <= target_max:
                reward = 1.0
            else:
                if ratio < target_min:
                    distance = target_min - ratio
                else:
                    distance = ratio - target_max
                reward = math.exp(-distance)
            rewards.append(float(reward))
        return rewards

    output_dir = "./magrpo_multi_reward_output"
    config = C3Config(
        num_train_epochs=3,
        agent_learning_rate=5e-5,
        logging_steps=10,
        num_generations=8,
        num_turns=1,
        max_new_tokens=128,
    )
    wandb_config = {
        "project": "your-project-name",
        "entity": "your-entity-name",
        "name": "length-ratio-demo",
    }
    configured_reward_func = partial(proper_length_ratio_reward, target_min=2, target_max=3)
    trainer = C3Trainer(
        agents=agents,
        reward_func=configured_reward_func,
        reward_processor=RewardProcessors.scale(factor=100.0),
        args=config,
        train_dataset=train_dataset,
        tokenizer=tokenizer,
        wandb_config=wandb_config,
    )
    trainer.train()
    trainer.save_model(f"{output_dir}/models")

    assert trainer.workflow.name == "parallel"  # CoMLRL's independent agents, not a Reasoner -> Actor chain
    assert trainer.env_step == 3 * 10 * 8  # tree [2, 4]: 8 joint actions per prompt
    assert calls and set(calls) == {(1, 1)}  # called once per joint action, as CoMLRL calls it
    assert any(not torch.equal(a, b) for a, b in zip(before, agents[1].parameters()))
    rewards = [h["train/reward_mean"] for h in trainer.history if "train/reward_mean" in h]
    assert rewards and all(0.0 <= r <= 100.0 for r in rewards) and max(rewards) > 1.0  # the 100x processor applied
    assert (tmp_path / "magrpo_multi_reward_output" / "models").exists()


def _items(n=4):
    return [{"id": f"p{i}", "prompt": f"task {i}:", "answer": str(i % 2)} for i in range(n)]


def _expected(c0, c1):  # what every signature below computes for one joint action
    return float(len(c0) % 2 == len(c1) % 2)


SIGNATURES = {
    "positional per agent, list": lambda a, b: [_expected(a[0], b[0])],
    "prompts first": lambda prompts, a, b: [_expected(a[0], b[0]) + 10.0 * (prompts[0].startswith("task "))],
    "one list of agents": lambda completions: [_expected(completions[0][0], completions[1][0])],
    "batch_items keyword, scalar": lambda a, b, *, batch_items=None: _expected(a[0], b[0])
              + 100.0 * (batch_items[0]["answer"] in "01"),
    "varargs and kwargs, tensor": lambda *c, **kw: torch.tensor([_expected(c[0][0], c[1][0])
                                                                 + 1000.0 * ("prompts" in kw)]),
}
OFFSET = {"positional per agent, list": 0.0, "prompts first": 10.0, "one list of agents": 0.0,
          "batch_items keyword, scalar": 100.0, "varargs and kwargs, tensor": 1000.0}


@pytest.mark.parametrize("name", list(SIGNATURES))
@pytest.mark.parametrize("cls", [C3Trainer, WorkflowMAGRPOTrainer, MAPPOTrainer])
def test_every_comlrl_reward_signature_trains_under_every_workflow_trainer(cls, name):
    tok = tiny_tokenizer()
    args = experiment_config(cls.default_config_cls, num_train_epochs=1, max_new_tokens=3, instances_per_update=4,
                             agent_devices="cpu")
    tr = cls(agents=[tiny_model(tok, seed=0), tiny_model(tok, seed=1)], tokenizer=tok, reward_func=SIGNATURES[name],
             train_dataset=Dataset.from_list(_items()), args=args)
    tr.verbose = False
    ro = tr.collect(_items())
    paths = tr._path_outputs(ro)  # each leaf's step outputs, in the order of the rewards
    assert len(paths) == ro.rewards.size == 4 * tr.plan.leaves(2)
    for leaf_reward, outputs in zip(ro.rewards.reshape(-1), paths):
        assert leaf_reward == _expected(*outputs) + OFFSET[name]
    tr.train()
    assert tr.env_step == 4 * tr.plan.leaves(2) and tr.update_step >= 1


def test_batched_rewards_are_called_once_per_batch_and_checked():
    tok = tiny_tokenizer()
    seen = []

    @batched
    def fast(a, b, batch_items=None, prompts=None):
        seen.append(len(a))
        return [_expected(x, y) for x, y in zip(a, b)]

    tr = C3Trainer(agents=[tiny_model(tok, seed=0), tiny_model(tok, seed=1)], tokenizer=tok, reward_func=fast,
                   train_dataset=Dataset.from_list(_items()),
                   args=experiment_config(C3Config, max_new_tokens=3, agent_devices="cpu"))
    ro = tr.collect(_items())
    assert seen == [ro.rewards.size]  # one call for the whole batch of leaves
    tr.reward_func = batched(lambda a, b, **kw: [0.0])
    with pytest.raises(ValueError, match="returned 1 rewards for 32 joint actions"):
        tr.collect(_items())


def test_formatters_shape_the_parallel_contexts_and_other_arguments_are_refused_by_name():
    tok = tiny_tokenizer()
    models = lambda: [tiny_model(tok, seed=0), tiny_model(tok, seed=1)]  # noqa: E731
    fmts = [lambda item: "PLAN " + item["prompt"], lambda item: "WRITE " + item["prompt"]]
    args = experiment_config(C3Config, max_new_tokens=3, agent_devices="cpu", save_traces=False)
    tr = C3Trainer(agents=models(), tokenizer=tok, reward_func=lambda a, b: [1.0], formatters=fmts,
                   train_dataset=Dataset.from_list(_items()), args=args)
    ro = tr.collect(_items(1))
    contexts = {(e.role, e.context) for e in ro.entries if e.kind == "decision"}
    assert contexts == {("Agent0", "PLAN task 0:"), ("Agent1", "WRITE task 0:")}  # agent 1 does not read agent 0
    with pytest.raises(ValueError, match="formatters and a workflow were both given"):
        C3Trainer(agents=models(), tokenizer=tok, reward_func=lambda a, b: [1.0], formatters=fmts,
                  workflow="reasoner_actor", train_dataset=Dataset.from_list(_items()), args=args)
    with pytest.raises(ValueError, match="external_transition is called between turns.*never run"):
        C3Trainer(agents=models(), tokenizer=tok, reward_func=lambda a, b: [1.0],
                  external_transition=lambda **kw: ["x", "y"], train_dataset=Dataset.from_list(_items()), args=args)
    # CoMLRL's default num_turns=2
    with pytest.raises(ValueError, match="Multi-turn C3 requires an external_transition"):
        C3Trainer(agents=models(), tokenizer=tok, reward_func=lambda a, b: [1.0],
                  train_dataset=Dataset.from_list(_items()), args=C3Config())
    with pytest.raises(ValueError, match="num_turns=2 runs CoMLRL's team.*workflow was given"):
        C3Trainer(agents=models(), tokenizer=tok, reward_func=lambda a, b: [1.0], workflow="reasoner_actor",
                  external_transition=lambda **kw: ["x", "y"], train_dataset=Dataset.from_list(_items()),
                  args=C3Config())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the default num_generations is no warning
        C3Trainer(agents=models(), tokenizer=tok, reward_func=lambda a, b: [1.0],
                  train_dataset=Dataset.from_list(_items()),
                  args=experiment_config(C3Config, max_new_tokens=3, agent_devices="cpu"))


def test_one_name_per_algorithm_reads_its_own_section(capsys):
    from c3_plugin.core.config import ConfigError, load_config
    from c3_plugin.tools.cli import main

    cfg = load_config(ROOT / "configs" / "math" / "c3.yaml", ["algorithm=magrpo", "magrpo.num_train_epochs=3"])
    assert type(cfg.algo).__name__ == "WorkflowMAGRPOConfig" and cfg.algo.num_train_epochs == 3
    with pytest.raises(ConfigError, match="unknown algorithm 'magrpo_workflow'; did you mean 'magrpo'"):
        load_config(ROOT / "configs" / "math" / "c3.yaml", ["algorithm=magrpo_workflow"])
    # an entry point's algorithm is only its default: the override trains another algorithm from the same config
    assert main(["--config", str(ROOT / "configs" / "math" / "c3.yaml"), "--override", "algorithm=magrpo", "--dry-run",
                 "--json"],
                algorithm="c3") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["algorithm"] == "magrpo" and report["plan"] == "independent 8"
    with pytest.raises(SystemExit):  # a config naming another algorithm, without the override, is refused
        main(["--config", str(ROOT / "configs" / "math" / "magrpo.yaml"), "--dry-run"], algorithm="c3")
    assert "add --override algorithm=magrpo" in capsys.readouterr().out
