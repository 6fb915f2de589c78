"""CoMLRL scripts under the C3 swap: each a small script in CoMLRL's style, run under CoMLRL's real
MAGRPOTrainer and under C3Trainer with only the class names changed, asserting the same budget, prompts,
defaults, metric keys and behaviour where CoMLRL defines them (issue 23)."""

import dataclasses
import json

import numpy as np
import pytest
import torch
import wandb
from comlrl.trainers.reinforce import MAGRPOConfig, MAGRPOTrainer
from datasets import Dataset

from c3_plugin.core.workflow import EPISODE_END
from c3_plugin.run.testing import tiny_model, tiny_tokenizer
from c3_plugin.trainers import C3Config, C3Trainer, WorkflowMAGRPOConfig

PAIRS = {"comlrl": (MAGRPOConfig, MAGRPOTrainer), "c3": (C3Config, C3Trainer)}


@pytest.fixture(autouse=True)
def _offline(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")


def _data(n=4):
    return Dataset.from_list([{"prompt": f"task {i}:"} for i in range(n)])


def _reward(c1, c2):  # a team reward with variance on a tiny random model
    return [float(len(c1[0]) % 3 == 0) - 0.5 * float(len(c2[0]) % 2)]


def _script(key, n_agents=2, reward=_reward, **config):
    """A CoMLRL-style script: config, trainer, train; ``key`` picks the classes (the swap)."""
    Config, Trainer = PAIRS[key]
    tok = tiny_tokenizer()
    transition = config.pop("external_transition", None)
    cfg = Config(num_train_epochs=1, max_new_tokens=4, eval_interval=0, agent_devices="cpu", **config)
    tr = Trainer(agents=[tiny_model(tok, seed=a) for a in range(n_agents)], num_agents=n_agents, tokenizer=tok,
                 reward_func=reward, train_dataset=_data(), external_transition=transition, args=cfg)
    tr.verbose = False
    return tr


def _transition(log):
    def transition(prompt, agent_completions, num_agents, prompt_history_per_agent, response_history_per_agent):
        log.append({"prompt": prompt, "completions": list(agent_completions),
                    "prompts": [list(p) for p in prompt_history_per_agent],
                    "responses": [list(r) for r in response_history_per_agent]})
        return [f"{prompt} you wrote {len(agent_completions[a])} chars, agent {a}:" for a in range(num_agents)]
    return transition


def test_multi_turn_script_with_external_transition_trains_at_comlrl_budget():
    logs = {}
    trainers = {}
    for key in PAIRS:
        logs[key] = []
        tr = _script(key, num_turns=2, num_generations=2, early_termination_threshold=None,
                     external_transition=_transition(logs[key]))
        tr.train()
        trainers[key] = tr
    c3 = trainers["c3"]
    assert c3.env_step == trainers["comlrl"].env_step == 4 * (2 + 4)  # J + J^2 reward calls per prompt
    assert len(logs["c3"]) == len(logs["comlrl"]) == 4 * 2  # one transition per turn-1 joint action
    for call in logs["c3"]:  # called as CoMLRL calls it: the item's prompt, this turn's joint action, the histories
        assert call["prompts"] == [[call["prompt"]], [call["prompt"]]] and all(len(r) == 1 for r in call["responses"])
        assert [r[0] for r in call["responses"]] == call["completions"]
    ro = c3.collect([{"id": "x", "prompt": "task 9:"}])
    turn2 = [e for e in ro.entries if e.role == "Agent1_turn2"]
    transitions = {e.node: json.loads(e.message) for e in ro.entries if e.role == "transition1"}
    # the transition's prompt, as is
    assert turn2 and all(e.context in [p[1] for p in transitions.values()] for e in turn2)
    assert ro.budget.leaves.tolist() == [6]
    keys = set().union(*c3.history)
    assert {"turn_1/reward_mean", "turn_2/reward_mean", "turn_1/expected_return", "turn_2/expected_return"} <= keys
    assert any(not torch.equal(a, b) for a, b in zip(tiny_model(tiny_tokenizer(), seed=0).parameters(),
                                                     c3.agents[0].parameters()))


def test_counterfactual_continuation_reruns_the_later_turns_from_the_recorded_state():
    log = []
    tr = _script("c3", num_turns=2, num_generations=4, early_termination_threshold=None,
                 external_transition=_transition(log))
    ro = tr.collect([{"id": "x", "prompt": "task 1:"}])
    # tree [2, 2, 2, 2]: 4 turn-1 joint actions, each continued by its own transition and 4 turn-2 joint actions
    assert tr.plan.tree == (2, 2, 2, 2) and len(log) == 4
    assert (sorted(tuple(c["completions"]) for c in log) == sorted({tuple(c["completions"]) for c in log})
            or len(log) == 4)
    leaves = ro.turn_rewards
    assert leaves.shape == (16, 2) and np.allclose(ro.rewards.reshape(-1), leaves.sum(1))


def test_early_termination_ends_a_path_as_comlrl_ends_its_node():
    always = lambda c1, c2: [1.0]  # noqa: E731  every turn's reward exceeds the threshold
    envs = {}
    for key in PAIRS:
        tr = _script(key, reward=always, num_turns=3, num_generations=2, early_termination_threshold=0.5,
                     external_transition=_transition([]))
        tr.train()
        envs[key] = tr
    assert envs["c3"].env_step == envs["comlrl"].env_step == 4 * 2  # turn 1 only
    ro = envs["c3"].collect([{"id": "x", "prompt": "t"}])
    later = [e for e in ro.entries if e.kind == "decision" and e.role.endswith(("_turn2", "_turn3"))]
    assert later and all(e.ended and not e.token_ids for e in later)
    assert any(e.message == EPISODE_END for e in ro.entries if e.role == "transition1")
    # evaluation: every turn, as CoMLRL's
    ev = envs["c3"].collect([{"id": "x", "prompt": "t"}], plan="tree [1, 1, 1, 1, 1, 1]")
    assert not any(e.ended for e in ev.entries)


def test_advantage_normalization_is_accepted_and_keeps_leave_one_out():
    assert C3Config(num_turns=1).advantage_scaling == "batch_scale"
    assert WorkflowMAGRPOConfig(num_turns=1).advantage_scaling == "group_zscore"  # CoMLRL's: per group of joint runs
    assert C3Config(num_turns=1, advantage_normalization=False).advantage_scaling == "none"
    with pytest.raises(ValueError, match="advantage_normalization=True.*contradicts advantage_scaling: none"):
        C3Config(num_turns=1, advantage_scaling="none")
    tr = _script("c3", num_turns=1, num_generations=8, advantage_normalization=True)
    ro = tr.collect([{"id": f"i{k}", "prompt": f"task {k}:"} for k in range(3)])
    credited = tr.compute_advantages(ro)
    scaled, _ = tr.build_samples(ro, credited)
    tr.args.advantage_scaling = "none"
    raw, _ = tr.build_samples(ro, credited)
    for agent in scaled:
        a, b = np.array([s.advantage for s in scaled[agent]]), np.array([s.advantage for s in raw[agent]])
        if np.abs(b).max() > 0:
            ratio = a[np.abs(b) > 0] / b[np.abs(b) > 0]
            assert np.allclose(ratio, ratio[0]) and ratio[0] > 0  # one positive scale: every sign, zero and ratio kept
            assert np.isclose(a.std(), 1.0)


def test_single_agent_script_gets_a_single_level_tree_of_the_same_budget():
    one = lambda completions: [float(len(completions[0]) % 2)]  # noqa: E731
    envs = {}
    for key in PAIRS:
        tr = _script(key, n_agents=1, reward=one, num_turns=1, num_generations=4)
        tr.train()
        envs[key] = tr
    assert envs["c3"].plan.tree == (4,)
    assert envs["c3"].env_step == envs["comlrl"].env_step == 4 * 4


def test_prompts_reach_the_model_exactly_as_comlrl_tokenizes_them():
    tr = _script("c3", num_turns=1)
    assert tr.tokenizers[0].chat_template  # the tiny tokenizer has a template; CoMLRL does not apply it
    ro = tr.collect([{"id": "x", "prompt": "task 3:"}])
    comlrl = tr.tokenizers[0](["task 3:"], padding=True, truncation=True)["input_ids"][0]
    assert all(list(e.prompt_ids) == list(comlrl) for e in ro.entries if e.kind == "decision")


def test_c3_config_defaults_are_magrpo_config_defaults():
    ours, theirs = C3Config(), MAGRPOConfig()
    for f in dataclasses.fields(MAGRPOConfig):
        assert getattr(ours, f.name) == getattr(theirs, f.name), f.name


@pytest.mark.parametrize("n_agents,generations,expected", [(2, 2, 2), (2, 8, 8), (3, 4, 4)])
def test_default_plan_spends_comlrl_env_steps(n_agents, generations, expected):
    reward = lambda *c: [float(sum(len(x[0]) for x in c) % 2)]  # noqa: E731
    envs = {key: _script(key, n_agents=n_agents, reward=reward, num_turns=1, num_generations=generations)
            for key in PAIRS}
    for tr in envs.values():
        tr.train()
    assert envs["c3"].env_step == envs["comlrl"].env_step == 4 * expected


def test_a_plan_of_another_budget_is_printed():
    with pytest.warns(UserWarning, match=r"spends 8 env steps .* would spend 2"):
        _script("c3", num_turns=1, num_generations=2, plan="tree [2, 4]")


def test_evaluation_matches_comlrl_keys_sampling_and_wandb_step(monkeypatch):
    seen = {"aggregator_turns": [], "steps": []}
    from wandb.sdk.wandb_run import Run

    real_log = Run.log

    # the real Run.log (wandb.log is bound to it at init), its step recorded
    def spy(run, data, *args, step=None, **kwargs):
        seen["steps"].append((step, data.get("env_step")))
        return real_log(run, data, *args, step=step, **kwargs)

    monkeypatch.setattr(Run, "log", spy)

    def logger(agent_completions_turns, batch_items, prompts):
        return [{"turns": len(agent_completions_turns[0][i])} for i in range(len(batch_items))]

    def aggregator(metrics, num_turns):
        seen["aggregator_turns"].append(num_turns)
        return {"turn_1/seen": float(len(metrics))}

    keys = {}
    for key, (Config, Trainer) in PAIRS.items():
        tok = tiny_tokenizer()
        cfg = Config(num_train_epochs=1, max_new_tokens=4, num_turns=2, num_generations=2, eval_interval=2,
                     agent_devices="cpu")
        tr = Trainer(agents=[tiny_model(tok, seed=a) for a in range(2)], tokenizer=tok, reward_func=_reward,
                     train_dataset=_data(), eval_dataset=_data(3), eval_logger=logger, eval_aggregator=aggregator,
                     external_transition=_transition([]), args=cfg, wandb_config={"project": "p", "name": key})
        keys[key] = set(tr.evaluate())
        if key == "c3":
            greedy = []
            real = tr.backend.generate
            monkeypatch.setattr(tr.backend, "generate",
                                lambda p, n, s, greedy=greedy, real=real: (greedy.append(s.greedy), real(p, n, s))[1])
            tr.train()
            assert greedy and not any(greedy)  # CoMLRL samples its evaluation (and its training)
        wandb.finish()
    assert {"eval/turn_1/reward_mean", "eval/turn_2/reward_mean", "eval/turn_1/expected_return",
            "eval/turn_1/seen"} <= keys["comlrl"]
    assert keys["comlrl"] <= keys["c3"] | {"env_step"}
    assert set(seen["aggregator_turns"]) == {2}
    c3_steps = [s for s in seen["steps"] if s[1] is not None]
    assert c3_steps and all(step == int(env) for step, env in c3_steps)  # every row on CoMLRL's step=env_step axis
