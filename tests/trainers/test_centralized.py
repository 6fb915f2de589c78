"""The centralized joint actor on travel: the joint action contract (prompt, skeleton, strict split),
replay-record kinds, the CoMLRL capability check, and centralized MAGRPO on a tiny random CPU model."""

import ast
import json
from pathlib import Path

import datasets
import pytest
import torch

from c3_plugin.core.protocol import Prompt, Sampling
from c3_plugin.generation.hf import HFBackend
from c3_plugin.run.testing import tiny_model, tiny_tokenizer
from c3_plugin.trainers import joint as centralized
from c3_plugin.trainers.joint import CentralizedAPIError, check_records, mark_joint, require_centralized_api
from c3_plugin.trainers.streamed_pg import train_mode_log_prob
from domains.travel import (
    TravelConfig,
    eval_aggregator,
    eval_logger,
    make_grammar,
    normalise,
    parse_action,
    plan_to_actions,
    reward,
)
from domains.travel.actions import FIELDS, owned_slots
from domains.travel.joint import (
    JOINT_ROLE,
    TravelJointAdapter,
    joint_prefill,
    joint_reward,
    joint_slots,
    joint_workflow,
    output_budget,
    plan_to_joint,
    split_joint,
)
from domains.travel.prompts import prompt_fields

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "travel" / "train.jsonl"
RAW = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
ROWS = [normalise(r, i, "train") for i, r in enumerate(RAW)]
PLANS = [[d for d in ast.literal_eval(r["annotated_plan"])[1] if d] for r in RAW]
SHORT = joint_workflow(True).with_templates({JOINT_ROLE: "{logistics_checklist}\n{experience_checklist}"})


def row(i):
    return {**ROWS[i], **prompt_fields(ROWS[i])}


def joint_of(i):
    return plan_to_joint(PLANS[i], ROWS[i]["days"])


# ----- the joint action contract ------------------------------------------------------------------------

def test_the_split_of_a_human_joint_plan_scores_exactly_as_the_decentralized_pair():
    adapter = TravelJointAdapter()
    for i in range(12):
        days = ROWS[i]["days"]
        pair = plan_to_actions(PLANS[i], days)
        joint = joint_of(i)
        assert split_joint(joint, days) == pair
        assert adapter.parse_completion(joint, ROWS[i], 2) == list(pair)
        assert joint_reward([joint], batch_items=[ROWS[i]]) == reward([pair[0]], [pair[1]], batch_items=[ROWS[i]])
        # the order of the assignments is not part of the contract: field-major reads the same
        items = json.loads(joint)["assignments"]
        reordered = json.dumps({"assignments": sorted(items, key=lambda a: (FIELDS.index(a["field"]), a["day"]))})
        assert split_joint(reordered, days) == pair
    assert joint_reward([joint_of(0)], batch_items=[ROWS[0]])[0] == pytest.approx(1.0)


def test_the_joint_prompt_holds_both_roles_contexts_and_no_target_plan():
    r = row(3)
    # fields are computed when the row lacks them
    text = TravelJointAdapter().build_prompt(ROWS[3], ["ignored", "ignored"])
    for key in ("route_scaffold", "logistics_catalog", "experience_catalog", "logistics_checklist",
                "experience_checklist", "logistics_budget", "experience_budget"):
        assert r[key] in text, key
    assert r["question"] in text and "annotated_plan" not in text
    assert ", ".join(FIELDS) in text


@pytest.mark.parametrize("mutate", [
    lambda j: j[:-2],  # unclosed assignments array
    lambda j: "garbage " + j,
    lambda j: j + " trailing",
    lambda j: "not json at all",
    lambda j: "",
    lambda j: j.replace('"field": "lunch"', '"field": "snack"', 1),  # a field that is not one of the seven
    lambda j: j.replace('"day": 1, ', '"day": "1", ', 1),  # a non-integer day
    lambda j: j.replace('{"assignments": ', '{"plan": [], "assignments": ', 1),  # an extra top-level key
    lambda j: j.replace('"value": "', '"value": 7, "x": "', 1),  # a malformed assignment
    lambda j: '{"assignments": {"day": 1}}',
    lambda j: "[" + j + "]",
])
def test_an_invalid_joint_json_is_a_failed_action_with_a_low_reward(mutate):
    from comlrl.trainers.preference.collaboration import CentralizedCollaboration

    bad = mutate(joint_of(0))
    assert split_joint(bad, ROWS[0]["days"]) == ("", "")
    low = joint_reward([bad], batch_items=[ROWS[0]])[0]
    assert low == reward([""], [""], batch_items=[ROWS[0]])[0] and low < 0.0
    # CoMLRL's centralized path, unchanged reward
    collab = CentralizedCollaboration(TravelJointAdapter(), None, reward, 2)
    assert collab([bad, joint_of(0)], batch_items=[ROWS[0]]) == [low, pytest.approx(1.0)]


def test_wrong_role_entries_make_that_role_invalid_and_are_never_repaired():
    days = ROWS[0]["days"]
    items = json.loads(joint_of(0))["assignments"]
    lo_ok, ex_ok = plan_to_actions(PLANS[0], days)
    duplicate = items + [dict(items[2])]  # a second breakfast of day 1
    out_of_trip = items + [{"day": days + 1, "field": "current_city", "value": "X"}]
    missing = [a for a in items if not (a["day"] == 2 and a["field"] == "dinner")]
    for entries, broken in ((duplicate, 1), (out_of_trip, 0), (missing, 1)):
        texts = split_joint(json.dumps({"assignments": entries}), days)
        assert texts[1 - broken] == (lo_ok, ex_ok)[1 - broken]
        assert not parse_action(texts[broken], broken, days).valid
        assert parse_action(texts[1 - broken], 1 - broken, days).valid
        # the strict gate is shut
        assert joint_reward([json.dumps({"assignments": entries})], batch_items=[ROWS[0]])[0] < 0.1


def test_the_joint_skeleton_forces_all_seven_fields_of_every_day_on_a_tiny_model():
    tok = tiny_tokenizer()
    model = tiny_model(tok, seed=3, max_positions=4096)
    grammar = make_grammar(TravelConfig(max_value_tokens=3))
    r = row(0)
    step = SHORT.decision_steps[0]
    role = SHORT.roles[JOINT_ROLE]
    prompt = Prompt(SHORT.assemble(step, r, []), JOINT_ROLE, 0, role.prefix, role.system)
    sk = grammar(prompt)
    assert list(sk.slots) == joint_slots(r["days"]) and len(sk.slots) == 7 * r["days"]
    assert grammar(Prompt(prompt.text, "Logistics", 0, prompt.prefix)).slots == tuple(owned_slots(0, r["days"]))
    assert role.prefix == joint_prefill() == sk.prefill()
    gens = HFBackend(lambda a: model, [tok], grammar=grammar).generate([prompt], 2, Sampling(temperature=1.0))[0]
    for g in gens:
        text = prompt.prefix + g.text
        slots = [(a["day"], a["field"]) for a in json.loads(text)["assignments"]]
        assert slots == joint_slots(r["days"])
        lo, ex = split_joint(text, r["days"])
        assert parse_action(lo, 0, r["days"]).valid and parse_action(ex, 1, r["days"]).valid
        assert g.loss_mask is not None and 0 < sum(g.loss_mask) < len(g.token_ids)
    budget = output_budget(tok, r["days"], 64)  # the joint cap is the two roles' budgets (one schema segment moved)
    assert budget["joint"] > max(budget["logistics"], budget["experience"])
    assert abs(budget["joint"] - budget["roles_sum"]) <= 64


# ----- replay records and the CoMLRL capability check -------------------------------------------------------

def test_replay_records_are_marked_joint_and_kinds_never_mix():
    decentral = {"prompts": ["a", "b"], "winner_completions": ["x", "y"], "loser_completions": ["z", "w"]}
    joint = mark_joint({"prompts": ["j"], "winner_completions": ["x"], "loser_completions": ["y"]})
    assert joint["joint"] is True
    assert check_records([joint, dict(joint)], joint=True) == [joint, joint]
    assert check_records([decentral], joint=False) == [decentral]
    with pytest.raises(ValueError, match="record 1 is a decentralized .* centralized joint-actor run"):
        check_records([joint, decentral], joint=True)
    with pytest.raises(ValueError, match="record 0 is a centralized joint-actor .* decentralized"):
        check_records([joint], joint=False)


def test_require_centralized_api_passes_on_the_installed_comlrl_and_names_what_is_missing(monkeypatch):
    from dataclasses import dataclass

    import comlrl.trainers.preference as pref
    import comlrl.trainers.reinforce as reinforce

    require_centralized_api()
    assert centralized.centralized_api_report()["centralized_api"] == "ok"
    monkeypatch.delattr(reinforce, "CentralizedMAGRPOTrainer")
    with pytest.raises(CentralizedAPIError,
                       match=r"comlrl\.trainers\.reinforce\.CentralizedMAGRPOTrainer.*Fix: install"):
        require_centralized_api()
    with pytest.raises(ValueError, match="CentralizedMAGRPOTrainer"):  # the lazily resolved trainer checks first
        _ = centralized.JointMAGRPOTrainer
    monkeypatch.undo()

    @dataclass
    class OldMADPOConfig:
        num_agents: int = 2

    monkeypatch.setattr(pref, "MADPOConfig", OldMADPOConfig)
    with pytest.raises(CentralizedAPIError, match=r"MADPOConfig\.collaboration_mode"):
        require_centralized_api()


# ----- centralized MAGRPO -----------------------------------------------------------------------------------

def three_day_rows(n):
    return [row(i) for i in range(len(ROWS)) if ROWS[i]["days"] == 3][:n]


def joint_trainer(tmp_path, logger=None, rows=1, **overrides):
    from c3_plugin.trainers.joint import JointMAGRPOConfig, JointMAGRPOTrainer
    from domains.travel import make_eval_logger

    tok = tiny_tokenizer()
    model = tiny_model(tok, seed=0, max_positions=4096)
    rows = three_day_rows(rows)
    args = JointMAGRPOConfig(num_train_epochs=1, num_generations=2, rollout_buffer_size=len(rows),
                             agent_learning_rate=1e-2, max_new_tokens=64, eval_num_samples=1, eval_batch_size=1,
                             logging_steps=1, **overrides)
    trainer = JointMAGRPOTrainer(agents=[model], tokenizer=tok, train_dataset=datasets.Dataset.from_list(rows),
                                 eval_dataset=datasets.Dataset.from_list(rows[:1]), reward_func=reward,
                                 eval_logger=logger or make_eval_logger(SHORT), eval_aggregator=eval_aggregator,
                                 args=args, workflow=SHORT, run_dir=tmp_path,
                                 grammar=make_grammar(TravelConfig(max_value_tokens=3)))
    trainer.verbose = False
    return trainer, model, tok


def test_one_centralized_magrpo_step_updates_the_single_actor_with_value_masked_joint_tokens(tmp_path):
    trainer, model, tok = joint_trainer(tmp_path)
    assert len(trainer.agents) == 1 and len(trainer.optimizers) == 1 and trainer.args.num_agents == 2
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    seen = []
    inner = trainer._pack_completions_for_buffer
    trainer._pack_completions_for_buffer = lambda data: seen.append(inner(data)) or seen[-1]
    trainer.train()  # one prompt, two sampled joint actions, one update
    assert trainer.env_step == 2 and trainer.update_step == 1
    changed = [k for k, v in model.named_parameters() if not torch.equal(v, before[k])]
    assert changed, "the joint actor's parameters did not move"
    # the trained sequences are the joint completions with the skeleton's value-only masks
    data = seen[0]
    seqs, masks = data["completion_input_ids"][0], data["completion_loss_masks"][0]
    assert len(seqs) == 2 and all(len(s) == len(m) and 0 < sum(m) < len(m) for s, m in zip(seqs, masks))
    text = joint_prefill() + tok.decode(seqs[0], skip_special_tokens=True)
    assert [(a["day"], a["field"]) for a in json.loads(text)["assignments"]] == joint_slots(3)
    logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train_rows = [h for h in logged if "turn_1/reward_mean" in h]
    assert len(train_rows) == 1 and 0 < train_rows[0]["train/value_token_fraction"] < 1
    assert train_rows[0]["env_step"] == 2 and trainer.totals["messages"] == 2


def test_the_joint_loss_counts_only_value_tokens(tmp_path):
    trainer, model, tok = joint_trainer(tmp_path)
    # real skeleton ids and masks
    trainer.backend = JointScriptedBackend(make_grammar(TravelConfig(max_value_tokens=256)))
    gen = trainer._generate_completions(model, [three_day_rows(1)[0]], agent_idx=0, num_return_sequences=2)
    data = trainer._pack_completions_for_buffer(gen)
    prompt, seq, mask = (data["prompt_input_ids"][0], data["completion_input_ids"][0][0],
                         data["completion_loss_masks"][0][0])
    with torch.no_grad():  # oracle: the full forward pass, value tokens only
        full = torch.cat([prompt, seq])
        logp = model(full.unsqueeze(0)).logits[0, len(prompt) - 1:-1].float().log_softmax(-1)
        token = logp.gather(1, seq[:, None]).squeeze(1)
        m = torch.tensor(mask, dtype=torch.float)
        want_sum, want_mean = float((token * m).sum()), float((token * m).sum() / m.sum())
    assert (float(train_mode_log_prob(model, prompt, seq, mask, "token_sum").detach())
            == pytest.approx(want_sum, rel=1e-4))
    assert (float(train_mode_log_prob(model, prompt, seq, mask, "sequence_mean").detach())
            == pytest.approx(want_mean, rel=1e-4))
    # a message with no trained token (every mask 0) gives no gradient at all
    zero = {**data, "completion_loss_masks": [[[0] * len(s) for s in data["completion_input_ids"][0]]]}
    model.zero_grad()
    trainer._compute_loss_with_gradients(model, zero, [1.0, 0.0]).backward()
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())
    trainer._compute_loss_with_gradients(model, data, [1.0, 0.0]).backward()
    assert any(p.grad is not None and p.grad.any() for p in model.parameters())


def test_centralized_evaluation_scores_the_split_roles_with_the_fixed_task_reward(tmp_path):
    from domains.travel import joint_eval_logger

    r = ROWS[0]
    pair = plan_to_actions(PLANS[0], r["days"])
    # a joint logger splits
    assert joint_eval_logger([[[joint_of(0)]]], [r]) == eval_logger([[[pair[0]]], [[pair[1]]]], [r])
    trainer, _, _ = joint_trainer(tmp_path, logger=eval_logger)  # the plain two-role logger: the trainer splits
    out = trainer.evaluate(1)
    # the skeleton makes both roles valid
    assert out["eval/action_validity"] == 1.0 and out["eval/team_action_success"] == 1.0
    assert out["eval/reward"] == pytest.approx(out["eval/reward_mean"])


# ----- centralized preference variants -----------------------------------------------------------------------

class JointScriptedBackend:
    """Generation stand-in for the joint planner: per prompt a pool of joint actions rendered through the real
    joint skeleton (the human plan, all-dash and two half-filled variants: different task rewards), exact ids with
    EOS and ``loss_mask_for`` masks; sampling rotates through the pool, greedy takes the first."""

    use_chat_template, max_batch, json_stop = True, None, False

    def __init__(self, grammar):
        self.grammar, self.calls, self.pools = grammar, 0, {}

    def _pool(self, prompt):
        from c3_plugin.core.protocol import Generation
        from c3_plugin.core.structured import loss_mask_for

        if prompt.text not in self.pools:
            sk = self.grammar(prompt)
            i = next(k for k in range(len(ROWS)) if row(k)["logistics_checklist"] in prompt.text
                     and ROWS[k]["days"] == 3)
            gold = {(d + 1, f): str(day.get(f, "-")).strip() or "-" for d, day in enumerate(PLANS[i]) for f in FIELDS}
            full = [gold[s] for s in sk.slots]
            pool = []
            for values in (full, ["-"] * len(full), [v if k % 2 else "-" for k, v in enumerate(full)],
                           [v if k % 2 == 0 else "-" for k, v in enumerate(full)]):
                text = sk.render(values)[len(sk.prefill()):]
                ids = TOK(text, add_special_tokens=False)["input_ids"] + [TOK.eos_token_id]
                pool.append(Generation(text=text, token_ids=ids, logprobs=[0.0] * len(ids),
                                       loss_mask=loss_mask_for(TOK, sk, ids)))
            self.pools[prompt.text] = pool
        return self.pools[prompt.text]

    def generate(self, prompts, n, sampling):
        out = []
        for p in prompts:
            assert p.role == JOINT_ROLE and p.agent == 0
            pool = self._pool(p)
            self.calls += 1
            out.append([pool[0]] * n if sampling.greedy else [pool[(self.calls + k) % len(pool)] for k in range(n)])
        return out


TOK = tiny_tokenizer()


def preference_trainer(name, tmp_path, **fields):
    from c3_plugin.trainers import joint as c

    trainer_cls, config_cls = {"madpo": (c.JointMADPOTrainer, c.JointMADPOConfig),
                               "marlhf": (c.JointMARLHFTrainer, c.JointMARLHFConfig),
                               "madpo_iter": (c.JointMADPOIterTrainer, c.JointMADPOIterConfig),
                               "marlhf_iter": (c.JointMARLHFIterTrainer, c.JointMARLHFIterConfig)}[name]
    from tests.trainers.test_preference import tiny_fields

    base = tiny_fields(name, **fields)
    grammar = make_grammar(TravelConfig(max_value_tokens=256))
    rows = three_day_rows(2)
    trainer = trainer_cls(agents=[tiny_model(TOK, seed=0, hidden=16, layers=1, max_positions=4096)], tokenizer=TOK,
                          train_dataset=datasets.Dataset.from_list(rows),
                          eval_dataset=datasets.Dataset.from_list(rows[:1]), reward_func=reward,
                          eval_logger=eval_logger, eval_aggregator=eval_aggregator, args=config_cls(**base),
                          workflow=SHORT, run_dir=tmp_path / name, grammar=grammar)
    trainer.verbose = False
    trainer.backend = JointScriptedBackend(grammar)
    return trainer


@pytest.mark.parametrize("name", ["madpo", "marlhf", "madpo_iter", "marlhf_iter"])
def test_centralized_preference_variants_train_one_joint_actor(tmp_path, name):
    tr = preference_trainer(name, tmp_path)
    assert tr.args.collaboration_mode == "centralized" and len(tr.agents) == 1 and len(tr.optimizers) == 1
    assert tr.args.num_agents == 2 and tr.centralized_collaboration.num_roles == 2
    if "iter" in name:
        assert tr.args.comparator_generation_mode == "centralized"
    before = torch.cat([p.detach().flatten().clone() for p in tr.agents[0].parameters()])
    pairs = tr._generate_preference_pairs_for_item(dict(tr.train_dataset[0]),
                                                   **({"iteration_idx": 0} if "iter" in name else {}))
    assert pairs and all(len(p.agent_tensors) == 1 and len(p.winner_completions) == 1 for p in pairs)
    for p in pairs:  # the joint completions themselves, with the joint skeleton's value masks
        t = p.agent_tensors[0]
        for ids, mask, text in ((t.winner_completion_ids, t.winner_loss_mask, p.winner_completions[0]),
                                (t.loser_completion_ids, t.loser_loss_mask, p.loser_completions[0])):
            assert len(ids) == len(mask) and 0 < int(mask.sum()) < len(ids)
            assert [(a["day"], a["field"]) for a in json.loads(text)["assignments"]] == joint_slots(3)
        assert p.winner_reward > p.loser_reward
    tr.train()
    after = torch.cat([p.detach().flatten() for p in tr.agents[0].parameters()])
    assert not torch.equal(before, after)
    assert tr.evaluate(1)["eval/action_validity"] == 1.0
    if "iter" in name:
        shards = sorted((tr.run_dir / "preference_replay").glob("iteration_*.json"))
        records = [r for s in shards for r in json.loads(s.read_text())["pairs"]]
        assert records and all(r["joint"] is True for r in records)
        assert tr._preference_pair_from_record(records[0]).agent_tensors[0].winner_loss_mask is not None
        with pytest.raises(ValueError, match="decentralized .* centralized joint-actor run"):
            tr._preference_pair_from_record({**records[0], "joint": False})


def test_the_joint_preference_config_stays_centralized():
    from c3_plugin.trainers.joint import JointMADPOIterConfig

    with pytest.raises(ValueError, match="collaboration_mode must be 'centralized'"):
        JointMADPOIterConfig(collaboration_mode="decentralized")
    cfg = JointMADPOIterConfig(comparator_generation_mode="decentralized")
    assert (cfg.collaboration_mode, cfg.comparator_generation_mode,
            cfg.preference_replay_lambda) == ("centralized", "centralized", 0.8)


def test_model_free_joint_checks_for_the_dry_run(tmp_path):
    from c3_plugin.run.budget import per_prompt_budget
    from c3_plugin.trainers.joint import JointMAGRPOConfig, check_replay_dir
    from domains.travel.joint import joint_probe

    probe = joint_probe(ROWS)
    assert probe["joint_probe_ok"] and probe["joint_all_dash_reward"] == 0.08 and probe["joint_malformed_reward"] < 0
    rows = datasets.Dataset.from_list([{"days": 3}] * 30 + [{"days": 5}] * 30)
    args = JointMAGRPOConfig(num_train_epochs=25, num_generations=4, rollout_buffer_size=10,
                             curriculum=[{"name": "three_day", "epochs": 8, "where": {"days": [3]}, "eval_every": 120},
                                         {"name": "full", "epochs": 17, "eval_every": 240}])
    budget = per_prompt_budget(args, rows)  # the specification's curriculum on one joint actor
    assert (budget["expected_env_steps"], budget["expected_optimizer_updates"], budget["actors"]) == (5040, 126, 1)
    (tmp_path / "iteration_0001.json").write_text(json.dumps({"pairs": [mark_joint({"prompts": ["j"]})]}))
    assert check_replay_dir(tmp_path, joint=True) == 1 and check_replay_dir(tmp_path / "absent", joint=True) == 0
    with pytest.raises(ValueError, match="iteration_0001.json: record 0 is a centralized"):
        check_replay_dir(tmp_path, joint=False)


def test_centralized_magrpo_trains_through_a_checkpointed_run(tmp_path):
    """The run path checkpoints every epoch: the joint actor's checkpoint loop (the workflow trainers' start hook,
    shared with data parallelism) trains and writes its checkpoint."""
    trainer, model, _ = joint_trainer(tmp_path)
    trainer.train(checkpoint_dir=str(tmp_path / "checkpoints"), checkpoint_interval=1)
    assert trainer.update_step == 1 and (tmp_path / "checkpoints" / "checkpoint-1").is_dir()
