"""IAC and MAAC scripts under C3 with the class names changed: CoMLRL's actor-critic examples run first with
CoMLRL's IACTrainer/MAACTrainer, then with ``C3Config``/``C3Trainer`` swapped in; every IACConfig/MAACConfig field
is a C3Config field, every IACTrainer/MAACTrainer keyword a C3Trainer keyword, and the critic's settings are named
in one warning (c3_plugin/trainers/actor_critic_fields.py)."""

import dataclasses
import inspect
import warnings

import pytest
import torch
from comlrl.models.actor_critic import CausalLMWithValueHead
from comlrl.trainers.actor_critic import IACConfig, IACTrainer, MAACConfig, MAACTrainer
from comlrl.trainers.reinforce.magrpo import MAGRPOConfig
from datasets import Dataset

from c3_plugin.run.testing import tiny_model, tiny_tokenizer
from c3_plugin.trainers import C3Config, C3Trainer, WorkflowTrainer, actor_critic_fields
from c3_plugin.trainers.actor_critic_fields import CRITIC_FIELDS, ActorCriticFields

WARNING = "have no meaning under C3"  # the one critic warning
PROMPTS = ["Describe a city in the clouds:", "Invent a new holiday:", "Write a bedtime story for a dragon:",
           "Tell a joke about dinosaurs:", "Invent a new type of fruit:", "Design a playground on Mars:"]


# the settings both scripts share (a CoMLRL user's usual single-turn run)
SCRIPT_SETTINGS = dict(num_agents=2, num_turns=1, num_generations=4, num_train_epochs=1, agent_learning_rate=1e-3,
                       max_new_tokens=6, temperature=0.9, top_p=0.95, eval_interval=0)


def length_balance_reward(agent1, agent2):
    """CoMLRL's shared actor-critic example's reward, one value per joint action."""
    return [1.0 - abs(len(a) - len(b)) / max(len(a), len(b), 1) for a, b in zip(agent1, agent2)]


def iac_script(IACConfig, IACTrainer, tokenizer, agents, critics, metrics_callback, **critic_settings):
    """CoMLRL's IAC example (docs/content/docs/examples/shared-actor-critic.md) with local models: the same text
    runs with CoMLRL's classes and with C3's."""
    dataset = Dataset.from_dict({"prompt": PROMPTS})
    trainer = IACTrainer(
        agents=agents,
        critics=critics,
        tokenizer=tokenizer,
        train_dataset=dataset,
        reward_func=length_balance_reward,
        formatters=[lambda ex: ex["prompt"]] * 2,
        metrics_callback=metrics_callback,
        args=IACConfig(
            **SCRIPT_SETTINGS,
            rollout_buffer_size=3,
            train_batch_size=3,
            **critic_settings,
        ),
    )
    trainer.train()
    return trainer


def maac_script(MAACConfig, MAACTrainer, tokenizer, agents, critic, metrics_callback):
    """CoMLRL's MAAC set-up (docs/content/docs/user-guide/multi-agent-actor-critic.md): one shared critic."""
    dataset = Dataset.from_dict({"prompt": PROMPTS})
    trainer = MAACTrainer(
        agents=agents,
        critic_model=critic,
        tokenizer=tokenizer,
        train_dataset=dataset,
        reward_func=length_balance_reward,
        metrics_callback=metrics_callback,
        model_config={"critic_value_head_hidden_dim": 16},
        args=MAACConfig(
            **SCRIPT_SETTINGS,
            critic_learning_rate=1e-3,
            value_loss_coef=0.5,
            critic_type="q",
            rollout_buffer_size=3,
        ),
    )
    trainer.train()
    return trainer


class Recorder:
    """A metrics_callback: keeps what it was given, returns one metric."""

    def __init__(self):
        self.calls = []

    def __call__(self, rollouts):
        self.calls.append(rollouts)
        return {"completion_chars": sum(len(r.completion) for r in rollouts) / max(len(rollouts), 1),
                "note": "not a number"}


def run_both(script, comlrl_classes, critic_models, tmp_path, monkeypatch, **settings):
    """``script`` with CoMLRL's classes, then with C3's; ``critic_models(tok)`` gives its critic argument(s).
    Returns CoMLRL's trainer, C3's, C3's critic warnings, C3's metrics_callback and whether each agent trained."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    tok = tiny_tokenizer()
    comlrl_agents = [tiny_model(tok, seed=i) for i in range(2)]
    before = [p.detach().clone() for p in comlrl_agents[0].parameters()]
    comlrl = script(*comlrl_classes, tok, comlrl_agents, *critic_models(tok), Recorder(), **settings)
    assert any(not torch.equal(a, b) for a, b in zip(before, comlrl_agents[0].parameters()))  # CoMLRL's trains on CPU

    agents = [tiny_model(tok, seed=i) for i in range(2)]
    before = [[p.detach().clone() for p in a.parameters()] for a in agents]
    recorder = Recorder()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c3 = script(C3Config, C3Trainer, tok, agents, *critic_models(tok), recorder, **settings)  # the swap
    critic = [w for w in caught if WARNING in str(w.message)]
    trained = [any(not torch.equal(x, y) for x, y in zip(b, a.parameters())) for b, a in zip(before, agents)]
    return comlrl, c3, critic, recorder, trained


def check_honoured(comlrl, c3, recorder, changed):
    """What the script asks for that C3 reads, it does."""
    assert all(changed)  # both agents trained
    assert c3.workflow.name == "parallel" and c3.num_agents == 2  # CoMLRL's team of independent agents
    assert c3.agent_lrs == [1e-3, 1e-3] and c3.agent_temperature == {0: 0.9, 1: 0.9}
    assert (c3.args.top_p, c3.args.max_new_tokens, c3.args.num_train_epochs) == (0.95, 6, 1)
    # rollout_buffer_size: 3 samples per agent, which one prompt's 4 joint actions fill: an update per prompt, as
    # IAC's and MAAC's (issue 51: standing in for them, comlrl_reference)
    assert c3.args.comlrl_reference in ("iac", "maac")
    assert c3.args.instances_per_update == 1 and c3.update_step == len(PROMPTS)
    # num_generations: 4 joint actions
    assert c3.plan.leaves(2) == 4 and c3.env_step == comlrl.env_step == 4 * len(PROMPTS)
    # per update: 1 prompt x 4 joint actions x 2 agents
    assert recorder.calls and all(len(call) == 2 * 4 * 1 for call in recorder.calls)
    sample = recorder.calls[0][0]
    assert sample.agent_idx in (0, 1) and isinstance(sample.completion, str) and sample.reward.shape == (1,)
    assert sample.metadata["batch_item"]["prompt"] in PROMPTS and sample.metadata["turn_idx"] == 0
    logged = [row["completion_chars"] for row in c3.history if "completion_chars" in row]
    # numbers logged, the rest skipped as IAC does
    assert len(logged) == len(PROMPTS) and not any("note" in row for row in c3.history)


IAC_MODES = {
    "separate critics": (lambda tok: ([tiny_model(tok, seed=5), tiny_model(tok, seed=6)],),
                         dict(critic_learning_rate=1e-3, value_loss_coef=0.5, critic_type="v")),
    "value heads": (lambda tok: (None,),
                    dict(use_separate_critic=False, value_clip_range=0.1, value_head_hidden_dim=16)),
}


@pytest.mark.parametrize("mode", list(IAC_MODES))
def test_an_iac_script_trains_under_c3_with_the_class_names_changed(mode, tmp_path, monkeypatch):
    critics, settings = IAC_MODES[mode]
    comlrl, c3, critic, recorder, changed = run_both(iac_script, (IACConfig, IACTrainer), critics, tmp_path,
                                                     monkeypatch, **settings)
    assert len(critic) == 1 and critic[0].category is UserWarning
    message = str(critic[0].message)
    defaults = {f.name: f.default for f in dataclasses.fields(ActorCriticFields)}
    # named when set to other than CoMLRL's default (critic_type="v" is the default)
    for name, value in settings.items():
        assert (f"{name}={value!r}" in message) == (value != defaults[name]), name
    assert ("critics (2 model(s))" in message) == (mode == "separate critics")
    assert "leave-one-out of its counterfactual continuations" in message and "C3 trains none" in message
    for name in set(CRITIC_FIELDS) - set(settings):
        assert f"{name}=" not in message
    check_honoured(comlrl, c3, recorder, changed)
    # train_batch_size = buffer: one step per update
    assert c3.args.train_batch_size == 3 and c3.args.minibatch_size is None


def test_a_maac_script_trains_under_c3_with_the_class_names_changed(tmp_path, monkeypatch):
    comlrl, c3, critic, recorder, changed = run_both(maac_script, (MAACConfig, MAACTrainer),
                                                     lambda tok: (tiny_model(tok, seed=7),), tmp_path, monkeypatch)
    assert len(critic) == 1
    message = str(critic[0].message)
    for named in ("critic_learning_rate=0.001", "value_loss_coef=0.5", "critic_type='q'", "critic_model (a model)",
                  "model_config['critic_value_head_hidden_dim']"):
        assert named in message
    assert "use_separate_critic" not in message and "critic_devices" not in message
    check_honoured(comlrl, c3, recorder, changed)


@pytest.mark.parametrize("cls", [IACConfig, MAACConfig], ids=["IACConfig", "MAACConfig"])
def test_every_iac_and_maac_field_is_a_c3_field(cls):
    """Walks CoMLRL's config: each field is C3Config's, named in the decision table; a field MAGRPOConfig has keeps
    MAGRPOConfig's definition, the others are the critic's, with CoMLRL's default."""
    c3 = {f.name: f for f in dataclasses.fields(C3Config)}
    mixin = {f.name: f for f in dataclasses.fields(ActorCriticFields)}
    magrpo = {f.name for f in dataclasses.fields(MAGRPOConfig)}
    for f in dataclasses.fields(cls):
        assert f.name in c3, f.name
        assert f"``{f.name}``" in actor_critic_fields.__doc__, f"{f.name} is missing from the decision table"
        if f.name in magrpo:
            assert f.name not in mixin
        else:
            assert f.name in CRITIC_FIELDS and mixin[f.name].default == f.default, f.name
    assert set(mixin) == set(CRITIC_FIELDS) | {"comlrl_reference"}  # and the reference it stands in for
    missing = [n for n, f in c3.items() if f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    assert not missing  # every field has a default, whatever the MRO puts first
    cfg = C3Config(num_turns=1, critic_learning_rate=None, critic_type="q", critic_devices=["cpu"],
                   value_clip_range=None)
    assert (cfg.critic_learning_rate, cfg.critic_type, cfg.critic_devices) == (None, "q", ["cpu"])


def test_every_iac_and_maac_keyword_is_a_c3_keyword():
    accepted = (set(inspect.signature(C3Trainer.__init__).parameters)
                | set(inspect.signature(WorkflowTrainer.__init__).parameters))
    for cls in (IACTrainer, MAACTrainer):
        assert set(inspect.signature(cls.__init__).parameters) - {"self"} <= accepted, cls.__name__


def test_value_head_agents_and_defaults(tmp_path, monkeypatch):
    """A value-head agent trains its base model and its head is named; CoMLRL's defaults warn nothing; IAC's
    num_generations=1 is kept where the config stands in for IAC."""
    monkeypatch.chdir(tmp_path)
    tok = tiny_tokenizer()
    ds = Dataset.from_dict({"prompt": PROMPTS[:2]})
    base = tiny_model(tok, seed=0)
    with pytest.warns(UserWarning, match=WARNING) as caught:
        tr = C3Trainer(agents=[CausalLMWithValueHead(base), tiny_model(tok, seed=1)], tokenizer=tok,
                       reward_func=length_balance_reward, train_dataset=ds,
                       args=C3Config(num_turns=1, max_new_tokens=3, agent_devices="cpu"))
    assert tr.agents[0] is base
    assert [str(w.message).count("agents[0].value_head") for w in caught if WARNING in str(w.message)] == [1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        C3Trainer(agents=[tiny_model(tok, seed=0), tiny_model(tok, seed=1)], tokenizer=tok,
                  reward_func=length_balance_reward, train_dataset=ds,
                  args=C3Config(num_turns=1, max_new_tokens=3, agent_devices="cpu", critic_learning_rate=5e-6))
    assert not [w for w in caught if WARNING in str(w.message)]  # CoMLRL's default value is no setting
    # IAC's num_generations=1 is kept (the reference's budget; the plan branches every agent within it, issue 51);
    # MAGRPO refuses it, and so does a C3Config standing in for MAGRPO
    assert C3Config(num_turns=1, num_generations=1, comlrl_reference="iac").num_generations == 1
    with pytest.raises(ValueError, match="num_generations must be >= 2"):
        C3Config(num_turns=1, num_generations=1)
    with pytest.raises(ValueError, match="metrics_callback must be callable"):
        C3Trainer(agents=[tiny_model(tok, seed=0), tiny_model(tok, seed=1)], tokenizer=tok,
                  reward_func=length_balance_reward, train_dataset=ds,
                  args=C3Config(num_turns=1, max_new_tokens=3, agent_devices="cpu"), metrics_callback="x")
