"""CoMLRL scripts under the C3 swap, round four (issue 51): five scripts nobody ran before, each a small CoMLRL-style
script (tiny random models, offline) run under CoMLRL's real trainer (IACTrainer, MAACTrainer, MAGRPOTrainer) and under
C3Trainer with only the class names changed (``from c3_plugin.trainers import C3Config as IACConfig``): the same env
steps, every agent trained, the same W&B keys at the same steps. Then the pieces: a stand-in config takes IAC's/MAAC's
defaults, ``discount`` with one turn is inert, and the plan branches every trained agent of 3- and 4-agent teams at
1-4 turns and num_generations 1-4 within the reference's env steps (or is refused, naming the budget that would do)."""

import dataclasses
import math
import warnings
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import wandb
from comlrl.trainers.actor_critic import IACConfig, IACTrainer, MAACConfig, MAACTrainer
from comlrl.trainers.reinforce import MAGRPOConfig, MAGRPOTrainer
from wandb.sdk.wandb_run import Run

from c3_plugin.core.config import load_config
from c3_plugin.core.plan import comlrl_env_steps, plan_env_steps
from c3_plugin.core.registry import inert_fields
from c3_plugin.core.workflow import parallel_workflow
from c3_plugin.run.dry_run import optimisation_settings
from c3_plugin.run.testing import tiny_model, tiny_tokenizer
from c3_plugin.trainers import C3Config, C3Trainer
from c3_plugin.trainers.setup import prompts_per_epoch, resolve_plan
from c3_plugin.trainers.turns import Turns
from tests.trainers.test_comlrl_round3 import _steps_by_key
from tests.trainers.test_comlrl_scripts import _data, _offline, _reward  # noqa: F401 (_offline: autouse)

ROOT = Path(__file__).resolve().parents[2]
REAL = {"iac": (IACConfig, IACTrainer), "maac": (MAACConfig, MAACTrainer), "magrpo": (MAGRPOConfig, MAGRPOTrainer)}


def _transition(prompt, agent_completions, num_agents, prompt_history_per_agent, response_history_per_agent):
    return [f"{prompt} you wrote {len(agent_completions[a])} chars, agent {a}:" for a in range(num_agents)]


def _reward3(c1, c2, c3):
    return [float(len(c1[0]) % 3 == 0) - 0.5 * float(len(c2[0]) % 2) + 0.25 * float(len(c3[0]) % 2)]


# ----- the five scripts, in CoMLRL's style: each names its classes as the script does --------------------------------
def docs_iac(IACConfig, IACTrainer, wandb_config=None):
    """CoMLRL docs' shared actor-critic IAC example: one turn, value heads on the actors, IAC's defaults otherwise."""
    tok = tiny_tokenizer()
    args = IACConfig(num_turns=1, use_separate_critic=False, num_train_epochs=1, max_new_tokens=4, agent_devices="cpu",
                     eval_interval=0)
    return IACTrainer(agents=[tiny_model(tok, seed=a) for a in range(2)], tokenizer=tok, reward_func=_reward,
                      train_dataset=_data(4), args=args, wandb_config=wandb_config)


def writing_maac(MAACConfig, MAACTrainer, wandb_config=None):
    """LLM_Collab_Writing's train_maac: one turn, discount=0.9 (no effect), a buffer of 2, one joint action."""
    tok = tiny_tokenizer()
    args = MAACConfig(num_turns=1, discount=0.9, rollout_buffer_size=2, num_train_epochs=1, max_new_tokens=4,
                      agent_devices="cpu", eval_interval=0)
    return MAACTrainer(agents=[tiny_model(tok, seed=a) for a in range(2)], critics=[tiny_model(tok, seed=7)],
                       tokenizer=tok, reward_func=_reward, train_dataset=_data(8), args=args,
                       wandb_config=wandb_config)


def house_build_iac(IACConfig, IACTrainer, wandb_config=None):
    """LLM_Collab_Minecraft's house_build train_iac: 4 turns with an external transition, a buffer of 1 sample,
    discount 0.9, logging_steps 40 (early termination off here: IAC ends a node on its own reward)."""
    tok = tiny_tokenizer()
    args = IACConfig(num_turns=4, discount=0.9, rollout_buffer_size=1, train_batch_size=1, logging_steps=40,
                     early_termination_threshold=None, num_train_epochs=1, max_new_tokens=4, agent_devices="cpu",
                     eval_interval=0, use_separate_critic=False)
    return IACTrainer(agents=[tiny_model(tok, seed=a) for a in range(2)], tokenizer=tok, reward_func=_reward,
                      train_dataset=_data(7), args=args, external_transition=_transition, wandb_config=wandb_config)


def code_completion_3(MAGRPOConfig, MAGRPOTrainer, wandb_config=None):
    """LLM_Collab_Code_Completion with num_agents=3: two turns, num_generations=2 (MAGRPO)."""
    tok = tiny_tokenizer()
    args = MAGRPOConfig(num_agents=3, num_turns=2, num_generations=2, logging_steps=1, early_termination_threshold=None,
                        num_train_epochs=1, max_new_tokens=4, agent_devices="cpu", eval_interval=0)
    return MAGRPOTrainer(agents=[tiny_model(tok, seed=a) for a in range(3)], num_agents=3, tokenizer=tok,
                         reward_func=_reward3, train_dataset=_data(3), args=args, external_transition=_transition,
                         wandb_config=wandb_config)


def code_completion_maac(MAACConfig, MAACTrainer, wandb_config=None):
    """LLM_Collab_Code_Completion's train_maac: two turns, MAAC's defaults (one joint action per turn, buffer 8)."""
    tok = tiny_tokenizer()
    args = MAACConfig(num_turns=2, early_termination_threshold=None, num_train_epochs=1, max_new_tokens=4,
                      agent_devices="cpu", eval_interval=0)
    return MAACTrainer(agents=[tiny_model(tok, seed=a) for a in range(2)], critics=[tiny_model(tok, seed=7)],
                       tokenizer=tok, reward_func=_reward, train_dataset=_data(5), args=args,
                       external_transition=_transition, wandb_config=wandb_config)


def _bfcl_callback(rollouts):
    first = rollouts[0]
    return {"turn_1/argument_match": float(len(first.completion) % 2), "official_category/simple": float(len(rollouts))}


def bfcl_iac(IACConfig, IACTrainer, wandb_config=None):
    """LLM_Collab_BFCL-v4's train_iac (round three's; its keys were logged at IAC's steps only in part): one turn,
    num_generations=2, a buffer of 2, its metrics in a metrics_callback, which IAC logs after every prompt."""
    tok = tiny_tokenizer()
    args = IACConfig(num_turns=1, num_generations=2, rollout_buffer_size=2, num_train_epochs=1, max_new_tokens=4,
                     agent_devices="cpu", eval_interval=0, use_separate_critic=False)
    return IACTrainer(agents=[tiny_model(tok, seed=a) for a in range(2)], tokenizer=tok, reward_func=_reward,
                      train_dataset=_data(4), args=args, metrics_callback=_bfcl_callback, wandb_config=wandb_config)


# script -> (the reference it was written for, its env steps, C3's plan)
SCRIPTS = {
    "docs_iac": (docs_iac, "iac", 4, (2, 2)),
    "writing_maac": (writing_maac, "maac", 8, (2, 2)),
    "house_build_iac": (house_build_iac, "iac", 28, (1, 1, 1, 1, 1, 1, 2, 2)),
    "code_completion_3": (code_completion_3, "magrpo", 18, (1, 1, 1, 2, 2, 2)),
    "code_completion_maac": (code_completion_maac, "maac", 10, (1, 1, 2, 2)),
    "bfcl_iac": (bfcl_iac, "iac", 8, (2, 2)),
}


def _run(script, pair, monkeypatch):
    """Build and train the script with the classes ``pair``; returns the trainer, each agent's optimizer steps, whether
    each agent's weights moved, and the (step, keys) of every W&B log call (the real Run.log, its step recorded)."""
    rows, real = [], Run.log

    def spy(run, data, *args, step=None, **kwargs):
        rows.append((step, {k for k in data if k != "env_step"}))
        return real(run, data, *args, step=step, **kwargs)

    monkeypatch.setattr(Run, "log", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tr = script(*pair, wandb_config={"project": "p", "name": pair[1].__name__})
    tr.verbose = False
    before = [[p.detach().clone() for p in a.parameters()] for a in tr.agents]
    counts = _count_steps(tr)
    tr.train()
    wandb.finish()
    monkeypatch.setattr(Run, "log", real)
    if isinstance(tr, C3Trainer):
        counts = [sum(r.get(f"train/agent{a}/optimizer_steps", 0) for r in tr.history) for a in range(len(tr.agents))]
    moved = [any(not torch.equal(x, y) for x, y in zip(b, a.parameters())) for b, a in zip(before, tr.agents)]
    return tr, list(counts), moved, rows


def _count_steps(tr):
    """Each agent's optimizer steps under CoMLRL's trainer (its own optimizers' step calls)."""
    counts = [0] * len(tr.agents)
    optimizers = getattr(tr, "agent_optimizers", None) or getattr(tr, "optimizers", None) or []
    for a, opt in enumerate(optimizers):
        step = opt.step

        def counted(*args, _a=a, _step=step, **kwargs):
            counts[_a] += 1
            return _step(*args, **kwargs)

        opt.step = counted
    return counts


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_a_new_script_trains_every_agent_at_the_references_env_steps_and_wandb_steps(name, monkeypatch):
    script, reference, env_steps, tree = SCRIPTS[name]
    theirs, their_steps, their_moved, their_rows = _run(script, REAL[reference], monkeypatch)
    c3, our_steps, our_moved, our_rows = _run(script, (C3Config, C3Trainer), monkeypatch)
    assert c3.args.comlrl_reference == reference
    assert theirs.env_step == c3.env_step == env_steps
    assert c3.plan.tree == tree
    assert all(s > 0 for s in their_steps) and all(their_moved)
    assert all(s > 0 for s in our_steps) and all(our_moved), our_steps  # every agent of the team trained
    reference_steps, c3_steps = _steps_by_key(their_rows), _steps_by_key(our_rows)
    # every training key the reference logs (its turn_<t>/* and its metrics_callback's), at the reference's W&B steps
    train_keys = {k for k in reference_steps if k.startswith("turn_")} | set(c3.callback_keys)
    assert train_keys and train_keys <= set(c3_steps)
    for key in train_keys:
        assert c3_steps[key] == reference_steps[key], (key, c3_steps[key], reference_steps[key])
    assert sorted({s for s, _ in our_rows}) == sorted({s for s, _ in their_rows})


# ----- 1. a stand-in config keeps IAC's / MAAC's defaults -------------------------------------------------------------
CHANGED = ("rollout_buffer_size", "top_k", "num_train_epochs", "num_generations", "logging_steps")


def _as_iac(IACConfig, **fields):
    return IACConfig(**fields)


def _as_maac(MAACConfig, **fields):
    return MAACConfig(**fields)


@pytest.mark.parametrize("reference", ["iac", "maac"])
def test_a_config_standing_in_for_iac_or_maac_takes_its_defaults_for_every_field_not_set(reference):
    real = REAL[reference][0]()
    stand_in = (_as_iac if reference == "iac" else _as_maac)(C3Config, num_turns=1)
    assert stand_in.comlrl_reference == reference
    for name in CHANGED:
        assert getattr(stand_in, name) == getattr(real, name), name
    assert (stand_in.rollout_buffer_size, stand_in.num_generations, stand_in.logging_steps) == (8, 1, 1)
    # a field the script set keeps its value, also where it equals C3's own default
    kept = (_as_iac if reference == "iac" else _as_maac)(C3Config, num_turns=1, rollout_buffer_size=2, top_k=50)
    assert (kept.rollout_buffer_size, kept.top_k, kept.num_train_epochs) == (2, 50, 40)
    # C3Config under its own name keeps its defaults; comlrl_reference says it explicitly
    own = C3Config(num_turns=1)
    assert own.comlrl_reference == "magrpo" and (own.rollout_buffer_size, own.num_generations) == (2, 4)
    explicit = C3Config(num_turns=1, comlrl_reference=reference)
    assert [getattr(explicit, n) for n in CHANGED] == [getattr(real, n) for n in CHANGED]
    assert dataclasses.replace(kept, top_k=3).rollout_buffer_size == 2
    with pytest.raises(ValueError, match="comlrl_reference must be 'magrpo', 'iac' or 'maac'"):
        C3Config(num_turns=1, comlrl_reference="ppo")


def test_the_docs_iac_example_spends_iacs_env_steps_with_a_stand_in_rollout_batch():
    """IAC's buffer of 8 samples per agent is 8 env steps at one joint action per prompt; C3's plan [2, 2] spends 4 per
    prompt, so a rollout batch holds 2 prompts and the run visits a quarter of the prompts: 4 env steps, as IAC."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tr = docs_iac(C3Config, C3Trainer)
    assert tr.args.instances_per_update == 2 and tr.prompt_share == 0.25
    assert [tr.args.rollout_buffer_size, tr.args.num_generations, tr.args.top_k] == [8, 1, None]


# ----- 2. discount with one turn: accepted, inert ---------------------------------------------------------------------
def test_discount_with_one_turn_is_accepted_and_listed_inert():
    cfg = C3Config(num_turns=1, discount=0.9)
    inert = inert_fields(cfg)
    assert "discount" in inert and "one reward per episode" in inert["discount"]
    assert "discount" not in inert_fields(C3Config(num_turns=2, discount=0.9))
    with pytest.raises(ValueError, match=r"discount must be in \(0, 1\]"):
        C3Config(num_turns=1, discount=0.0)
    # the dry-run's inert list (and c3 compare's), for every workflow algorithm of a shipped head-to-head
    cfg = load_config(ROOT / "configs" / "math" / "h2h_cpu.yaml", ["c3.discount=0.9", "magrpo.discount=0.9"])
    listing = optimisation_settings(cfg, None, None, ["c3", "magrpo"])
    assert all("one reward per episode" in listing["inert"][a]["discount"] for a in ("c3", "magrpo"))
    assert listing["uncontrolled"] == {}


# ----- 3. every trained agent branched, every shape ----------------------------------------------------------------
def _plan_for(agents, turns, gens, frozen=()):
    """The trainer's plan (setup.resolve_plan, the function C3Trainer calls) for CoMLRL's team of ``agents`` over
    ``turns`` turns (the workflow the trainer builds: turns.Turns, one turn: parallel) at ``num_generations=gens``
    (1: a config standing in for IAC, which allows it); returns the plan's branching, the decision points' agents,
    the share of the prompts it visits and both budgets per prompt."""
    wf = Turns(SimpleNamespace(), agents, turns, None, _transition).workflow if turns > 1 else parallel_workflow(agents)
    per_turn = [agents] * turns
    cfg = C3Config(num_agents=agents, num_turns=turns, num_generations=gens, eval_interval=0,
                   comlrl_reference="iac" if gens == 1 else "magrpo")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, branching, share = resolve_plan(cfg, None, wf, per_turn, "C3", frozen)
    decision_agents = [wf.roles[step.name].agent for step in wf.decision_steps]
    return branching, decision_agents, share, plan_env_steps(branching, per_turn), comlrl_env_steps(cfg, agents)


@pytest.mark.parametrize("agents", [3, 4])
@pytest.mark.parametrize("turns", [1, 2, 3, 4])
@pytest.mark.parametrize("gens", [1, 2, 3, 4])
def test_the_plan_branches_every_trained_agent_within_the_references_env_steps(agents, turns, gens):
    branching, decision_agents, share, ours, theirs = _plan_for(agents, turns, gens)
    assert {decision_agents[u] for u, b in enumerate(branching) if b > 1} == set(range(agents))
    assert share == min(Fraction(1), Fraction(theirs, ours))
    for prompts in (1, 8, 64):
        used = prompts_per_epoch(prompts, share)
        assert used * ours <= prompts * theirs  # never more env steps than the reference
        assert used == (math.floor(prompts * theirs / ours) if ours > theirs else prompts)
    # a frozen teammate needs no group; every other agent gets one
    branching, decision_agents, _, _, _ = _plan_for(agents, turns, gens, frozen=(agents - 1,))
    assert {decision_agents[u] for u, b in enumerate(branching) if b > 1} >= set(range(agents - 1))


def test_a_budget_that_leaves_no_prompt_is_refused_naming_the_smallest_that_would():
    """Code_Completion's MAAC at one prompt: the cheapest plan that gives both agents a group spends 5 env steps where
    MAAC spends 2, so no prompt fits; the refusal names the train set that would (3 prompts)."""
    with pytest.raises(ValueError, match=r"plan 'tree \[1, 1, 2, 2\]'.*give at least 3 prompts"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tok = tiny_tokenizer()
            args = _as_maac(C3Config, num_turns=2, num_train_epochs=1, max_new_tokens=4, agent_devices="cpu")
            C3Trainer(agents=[tiny_model(tok, seed=a) for a in range(2)], tokenizer=tok, reward_func=_reward,
                      train_dataset=_data(1), args=args, external_transition=_transition)
