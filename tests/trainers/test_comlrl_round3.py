"""CoMLRL scripts under the C3 swap, round three (issue 38): each a small CoMLRL-style script run under CoMLRL's real
trainer (MAGRPOTrainer, IACTrainer) and under C3Trainer with only the class names changed: every agent of a multi-turn
script trained, IAC's num_generations=1 run, an IAC script's eval metrics kept, the same W&B steps, and each
behaviour change printed."""

import warnings

import numpy as np
import pytest
import torch
import wandb
from comlrl.trainers.actor_critic import IACConfig, IACTrainer
from wandb.sdk.wandb_run import Run

from c3_plugin.run.testing import tiny_model, tiny_tokenizer
from c3_plugin.trainers import C3Config, C3Trainer
from c3_plugin.trainers.cadence import ComlrlCadence, realized_nodes
from tests.trainers.test_comlrl_scripts import PAIRS, _data, _offline, _reward  # noqa: F401 (_offline: autouse)

IAC_PAIRS = {"comlrl": (IACConfig, IACTrainer), "c3": (C3Config, C3Trainer)}


def _transition(prompt, agent_completions, num_agents, prompt_history_per_agent, response_history_per_agent):
    return [f"{prompt} you wrote {len(agent_completions[a])} chars, agent {a}:" for a in range(num_agents)]


def _script(key, pairs=PAIRS, n_items=4, eval_items=0, wandb_config=None, **config):
    """A CoMLRL-style script: config, trainer; ``key`` picks the classes (the swap). Returns the trainer and the
    agents' starting weights."""
    Config, Trainer = pairs[key]
    IACConfig = Config if pairs is IAC_PAIRS else None  # noqa: F841,N806 (the script imports C3Config as IACConfig)
    tok = tiny_tokenizer()
    extra = {k: config.pop(k) for k in ("external_transition", "metrics_callback", "eval_logger", "eval_aggregator")
             if k in config}
    cfg = Config(num_train_epochs=1, max_new_tokens=4, agent_devices="cpu", **{"eval_interval": 0, **config})
    agents = [tiny_model(tok, seed=a) for a in range(2)]
    before = [[p.detach().clone() for p in a.parameters()] for a in agents]
    tr = Trainer(agents=agents, tokenizer=tok, reward_func=_reward, train_dataset=_data(n_items),
                 eval_dataset=_data(eval_items) if eval_items else None, args=cfg, wandb_config=wandb_config, **extra)
    tr.verbose = False
    return tr, before


def _trained(tr, before):
    return [any(not torch.equal(x, y) for x, y in zip(b, a.parameters())) for b, a in zip(before, tr.agents)]


# ----- 1. every agent of a multi-turn script is trained -----------------------------------------------------------
@pytest.mark.parametrize("turns", [2, 4])
def test_every_agent_of_a_multi_turn_script_gets_updates_at_comlrl_env_steps(turns):
    """LLM_Collab_Code_Completion (2 turns) and Minecraft (4 turns) at num_generations=2: the default tree rotates the
    branching decision over the turns, so both agents get groups, at MAGRPO's env steps."""
    runs = {}
    for key in PAIRS:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            tr, before = _script(key, n_items=2, num_turns=turns, num_generations=2, early_termination_threshold=None,
                                 external_transition=_transition)
            tr.train()
        runs[key] = tr, before, caught
    c3, before, caught = runs["c3"]
    assert c3.env_step == runs["comlrl"][0].env_step == 2 * sum(2 ** t for t in range(1, turns + 1))
    assert c3.plan.tree == ((2, 1, 1, 2) if turns == 2 else (2, 1, 1, 2, 2, 1, 1, 2))
    assert _trained(c3, before) == [True, True]
    keys = set().union(*c3.history)
    assert {"train/agent0/samples", "train/agent1/samples"} <= keys
    assert not [w for w in caught if "get no update" in str(w.message)]


def test_a_budget_that_leaves_an_agent_without_a_group_gets_a_plan_that_gives_every_agent_one():
    """One turn at num_generations=2 over two agents: no plan of 2 leaves gives both a group, so C3 runs the cheapest
    that does, [2, 2], on half the prompts (issue 51): both agents trained, MAGRPO's env steps, printed before
    training. A decision listed in untrained_decisions keeps CoMLRL's plan, without a warning."""
    magrpo, _ = _script("comlrl", n_items=4, num_turns=1, num_generations=2)
    magrpo.train()
    with pytest.warns(UserWarning, match=r"no plan that branches every trained agent \[0, 1\]; C3 runs plan 'tree "
                                         r"\[2, 2\]' \(4 env steps per prompt.*on 1/2 of each epoch's prompts"):
        tr, before = _script("c3", n_items=4, num_turns=1, num_generations=2)
    assert tr.update_step == 0
    tr.train()
    assert _trained(tr, before) == [True, True] and tr.env_step == magrpo.env_step == 8
    with warnings.catch_warnings(record=True) as caught:  # listed on purpose: no warning, CoMLRL's plan
        warnings.simplefilter("always")
        listed, _ = _script("c3", num_turns=1, num_generations=2, untrained_decisions=["Agent1_u1"])
    assert listed.plan.tree == (2, 1)
    assert not [w for w in caught if "no gradient" in str(w.message) or "every trained agent" in str(w.message)]


# ----- 2. IAC at IAC's default num_generations=1 runs -------------------------------------------------------------
def test_an_iac_script_at_num_generations_1_trains_under_c3_at_iacs_env_steps():
    """LLM_Collab_Writing's train_iac: IACConfig(num_generations=1). CoMLRL's IACTrainer trains one joint action per
    prompt; C3 runs the cheapest plan that gives both agents alternatives ([2, 2]) on a quarter of the prompts, so
    both spend 4 env steps (issue 51; round three spent twice IAC's)."""
    comlrl, _ = _script("comlrl", IAC_PAIRS, num_turns=1, num_generations=1, rollout_buffer_size=2,
                        use_separate_critic=False)
    comlrl.train()
    with pytest.warns(UserWarning, match=r"num_generations=1, num_turns=1: 1 env steps per prompt.*C3 runs plan 'tree "
                                         r"\[2, 2\]'.*on 1/4 of each epoch's prompts"):
        c3, before = _script("c3", IAC_PAIRS, num_turns=1, num_generations=1, rollout_buffer_size=2,
                             use_separate_critic=False)
    c3.train()
    assert comlrl.env_step == 4 and c3.env_step == comlrl.env_step
    assert c3.args.num_generations == 1 and c3.plan.tree == (2, 2)
    assert _trained(c3, before) == [True, True]


# ----- 3. an IAC script's eval metrics are kept -------------------------------------------------------------------
def test_an_iac_scripts_eval_metrics_are_logged_under_c3_as_under_iac():
    """BFCL's train_iac computes its eval metrics in its metrics_callback (IACTrainer has no eval_logger): IAC's
    evaluate calls it on each eval item's rollouts and logs eval/<key>; C3 logs the same keys."""
    def callback(rollouts):
        first = rollouts[0]
        return {"turn_1/argument_match": float(len(first.completion) % 2),
                "official_category/simple": float(len(rollouts)), "task_type/single": 1.0, "note": "skipped"}

    keys = {}
    for key in IAC_PAIRS:
        tr, _ = _script(key, IAC_PAIRS, n_items=2, eval_items=2, num_turns=1, num_generations=2, eval_num_samples=2,
                        rollout_buffer_size=2, metrics_callback=callback, use_separate_critic=False)
        keys[key] = {k for k in tr.evaluate() if k.startswith("eval/")}
    assert {"eval/turn_1/argument_match", "eval/official_category/simple", "eval/task_type/single"} <= keys["comlrl"]
    assert keys["comlrl"] <= keys["c3"]
    assert "eval/note" not in keys["c3"]


# ----- 5. behaviour CoMLRL would not change, printed -------------------------------------------------------------
def test_early_termination_and_top_k_none_are_printed():
    with pytest.warns(UserWarning, match=r"early_termination_threshold=0.3: C3 ends each path.*CoMLRL 1.4.3 ends a "
                                         r"node when the mean reward"):
        _script("c3", num_turns=2, num_generations=2, early_termination_threshold=0.3,
                external_transition=_transition)
    with pytest.warns(UserWarning, match=r"top_k=None: C3 samples from the whole vocabulary.*CoMLRL 1.4.3 passes no "
                                         r"top_k"):
        _script("c3", num_turns=1, num_generations=4, top_k=None)
    with warnings.catch_warnings(record=True) as caught:  # one turn: the threshold changes nothing, as in CoMLRL
        warnings.simplefilter("always")
        _script("c3", num_turns=1, num_generations=4, early_termination_threshold=0.3)
    assert not [w for w in caught if "early_termination" in str(w.message) or "top_k" in str(w.message)]


# ----- 4. the same W&B steps -------------------------------------------------------------------------------------
def _wandb_rows(monkeypatch, key, **config):
    """The (step, keys) of every W&B log call of a script's training (the real Run.log, its step recorded)."""
    rows = []
    real = Run.log

    def spy(run, data, *args, step=None, **kwargs):
        rows.append((step, {k for k in data if k != "env_step"}))
        return real(run, data, *args, step=step, **kwargs)

    monkeypatch.setattr(Run, "log", spy)
    tr, _ = _script(key, eval_items=2, wandb_config={"project": "p", "name": key}, **config)
    tr.train()
    wandb.finish()
    monkeypatch.setattr(Run, "log", real)
    return tr, rows


def _steps_by_key(rows):
    out = {}
    for step, keys in rows:
        for k in keys:
            out.setdefault(k, set()).add(step)
    return out


SCRIPTS = {  # LLM_Collab_Writing: one turn, logging_steps above a batch's env steps; Code_Completion: two turns,
    # CoMLRL draining its buffer of 2 node samples mid-prompt; with a buffer of 3: the epoch ends on a short batch
    "writing": dict(num_turns=1, num_generations=2, logging_steps=8),
    "code_completion": dict(num_turns=2, num_generations=2, logging_steps=1, early_termination_threshold=None),
    "code_completion_buffer_3": dict(num_turns=2, num_generations=2, logging_steps=4, early_termination_threshold=None,
                                     rollout_buffer_size=3),
}


@pytest.mark.parametrize("script", list(SCRIPTS))
def test_every_key_magrpo_logs_is_logged_at_the_same_wandb_steps(script, monkeypatch):
    """C3's W&B rows land on MAGRPO's steps, key by key (and metrics.jsonl keeps every batch)."""
    config = dict(SCRIPTS[script], **({"external_transition": _transition} if SCRIPTS[script]["num_turns"] > 1
                                      else {}))
    runs = {key: _wandb_rows(monkeypatch, key, eval_interval=2, eval_num_samples=2, **config) for key in PAIRS}
    (magrpo, theirs), (c3, ours) = runs["comlrl"], runs["c3"]
    assert c3.env_step == magrpo.env_step
    assert sorted({s for s, _ in ours}) == sorted({s for s, _ in theirs})
    mine = _steps_by_key(ours)
    for key, steps in _steps_by_key(theirs).items():
        assert mine.get(key) == steps, key
    # metrics.jsonl (history) keeps every rollout batch, W&B or not
    assert [r["train/update_step"] for r in c3.history if "train/update_step" in r] == list(range(1, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, batch = _wandb_rows(monkeypatch, "c3", eval_interval=2, eval_num_samples=2, wandb_cadence="batch", **config)
    assert sorted({s for s, keys in batch if "train/loss" in keys}) == [r["env_step"] for r in c3.history
                                                                         if "train/loss" in r]
    assert "train/loss" in mine and mine["train/loss"] <= {s for s, _ in theirs}


def test_the_replay_counts_the_nodes_a_batch_really_played():
    """A 2-turn instance at J = 2 per turn: leaves [4, 2] in tree order; the second turn-1 joint action ended (NaN at
    turn 2), so its turn-2 node is absent and the prompt spends 2 + 2 env steps, not 6."""
    nan = float("nan")
    per_turn = np.array([[1.0, 0.5], [1.0, 0.0], [0.9, nan], [0.9, nan]])
    assert realized_nodes(per_turn, [2, 2]) == [(2, 0), (2, 1)]
    assert realized_nodes(np.ones((4, 2)), [2, 2]) == [(2, 0), (2, 1), (2, 1)]
    cadence = ComlrlCadence(num_agents=2, joint=[2, 2], buffer_size=2, logging_steps=1)
    assert cadence.batch(0, 1, nodes=[realized_nodes(per_turn, [2, 2])]) == [(2, 0), (2, 0), (4, 1), (4, 1)]
