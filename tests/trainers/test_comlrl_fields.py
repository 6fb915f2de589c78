"""Every field of CoMLRL's MAGRPOConfig is honoured or refused under the workflow trainers, and each entry of
``comlrl_compat.MAGRPO_FIELDS`` is proved here: a refused value raises naming the field, an honoured one
reaches the place that reads it."""

import dataclasses

import pytest
from comlrl.trainers.reinforce import MAGRPOConfig
from datasets import Dataset

from c3_plugin.core.registry import inert_fields
from c3_plugin.run.testing import tiny_model, tiny_tokenizer
from c3_plugin.trainers import C3Config, C3Trainer, WorkflowMAGRPOConfig, WorkflowMAGRPOTrainer
from c3_plugin.trainers.comlrl_compat import MAGRPO_FIELDS


def _trainer(cls=C3Trainer, **fields):
    tok = tiny_tokenizer()
    args = cls.default_config_cls(**{"num_turns": 1, "agent_devices": "cpu", "max_new_tokens": 3, **fields})
    transition = ((lambda prompt, agent_completions, num_agents, **kw: ["next"] * num_agents) if args.num_turns > 1
                  else None)
    return cls(agents=[tiny_model(tok, seed=0), tiny_model(tok, seed=1)], tokenizer=tok, reward_func=lambda a, b: [1.0],
               train_dataset=Dataset.from_list([{"prompt": "p"}] * 2), external_transition=transition, args=args)


def _refused(field, value, match, cls=C3Config, **extra):
    with pytest.raises(ValueError, match=match):
        cls(**{"num_turns": 1, field: value, **extra})


PROOFS = {
    "num_train_epochs": lambda: _trainer(num_train_epochs=3).args.num_train_epochs == 3,
    "agent_learning_rate": lambda: _trainer(agent_learning_rate=3e-4).optimizers[0].param_groups[0]["lr"] == 3e-4,
    "logging_steps": lambda: _trainer(logging_steps=7).args.logging_steps == 7,
    "num_agents": lambda: _trainer().workflow.num_agents == 2,
    "parallel_training": lambda: str(_trainer(parallel_training="none").parallel_training) == "none",
    "agent_devices": lambda: [str(d) for d in _trainer().agent_devices] == ["cpu", "cpu"],
    "num_generations": lambda: _trainer(num_generations=6).plan.tree == (2, 3),
    "max_new_tokens": lambda: _trainer(max_new_tokens=5).sampling().max_new_tokens == 5,
    "temperature": lambda: _trainer(temperature=0.9).sampling().temperature == 0.9,
    "top_p": lambda: _trainer(top_p=0.8).sampling().top_p == 0.8,
    "top_k": lambda: _trainer(top_k=7).sampling().top_k == 7,
    "num_turns": lambda: _trainer(num_turns=3).workflow.num_decisions == 6,
    "discount": lambda: ("discount" in inert_fields(C3Config(num_turns=1, discount=0.9))  # accepted, inert (issue 51)
                         and _refused("discount", 0.0, r"discount must be in \(0, 1\]") is None
                         and _trainer(num_turns=2, discount=0.5).turns.returns(
                             __import__("numpy").array([[1.0, 1.0]]))[0] == 1.5),
    "joint_mode": lambda: (_trainer(joint_mode="cross", num_generations=3).plan.tree == (3, 3)  # J = K^N joint actions
                           and _raises(lambda: _trainer(WorkflowMAGRPOTrainer, joint_mode="cross"),
                                       "joint_mode: cross")),
    "early_termination_threshold": lambda: _trainer(
        num_turns=2, early_termination_threshold=0.5).args.early_termination_threshold == 0.5,
    "external_prompt_passthrough": lambda: _passthrough(),
    "eval_interval": lambda: _trainer(eval_interval=3).args.eval_interval == 3,
    "eval_num_samples": lambda: _trainer(eval_num_samples=2).args.eval_num_samples == 2,
    "eval_batch_size": lambda: _trainer(eval_batch_size=3).args.eval_batch_size == 3,
    "rollout_buffer_size": lambda: _trainer(rollout_buffer_size=3).args.instances_per_update == 3,
    "train_batch_size": lambda: (_refused("train_batch_size", 1, "train_batch_size=1 < rollout_buffer_size=2") is None
                                 and C3Config(num_turns=1, train_batch_size=4).instances_per_update == 2),
    "advantage_normalization": lambda: (C3Config(num_turns=1).advantage_scaling == "batch_scale"
                                        and WorkflowMAGRPOConfig(num_turns=1).advantage_scaling == "group_zscore"),
    "advantage_mode": lambda: (_refused("advantage_mode", "rloo", "advantage_mode_unread") is None
                               and WorkflowMAGRPOConfig(num_turns=1, advantage_mode="max",
                                                        advantage_normalization=False).advantage_mode == "max"),
    "reference_kl_enabled": lambda: len(_trainer(reference_kl_enabled=True).reference_models) == 2,
    "reference_kl_coef": lambda: _trainer(reference_kl_enabled=True, reference_kl_coef=0.3).args.reference_kl_coef
          == 0.3,
    "reference_devices": lambda: len(_trainer(reference_kl_enabled=True, reference_devices="cpu").reference_models)
          == 2,
}


def _raises(fn, match):
    with pytest.raises(ValueError, match=match):
        fn()
    return True


def _passthrough():
    seen = {}
    for passthrough in (True, False):
        fmt = lambda item, external_prompts=None: f"FMT[{external_prompts or item['prompt']}]"  # noqa: E731
        tok = tiny_tokenizer()
        args = C3Config(num_turns=2, num_generations=2, agent_devices="cpu", max_new_tokens=3,
                        external_prompt_passthrough=passthrough, early_termination_threshold=None)
        tr = C3Trainer(agents=[tiny_model(tok, seed=0), tiny_model(tok, seed=1)], tokenizer=tok,
                       reward_func=lambda a, b: [1.0], formatters=fmt,
                       train_dataset=Dataset.from_list([{"prompt": "p"}] * 2), args=args,
                       external_transition=lambda prompt, agent_completions, num_agents, **kw: ["NEXT"] * num_agents)
        ro = tr.collect([{"id": "x", "prompt": "p"}])
        seen[passthrough] = {e.context for e in ro.entries if e.role == "Agent0_turn2"}
    return seen == {True: {"NEXT"}, False: {"FMT[NEXT]"}}


def test_every_magrpo_config_field_is_listed():
    assert [f.name for f in dataclasses.fields(MAGRPOConfig)] == list(MAGRPO_FIELDS)
    assert all(v.startswith(("honoured", "refused")) for v in MAGRPO_FIELDS.values())


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(MAGRPOConfig)])
def test_each_field_is_honoured_or_refused(field):
    assert PROOFS[field]()
