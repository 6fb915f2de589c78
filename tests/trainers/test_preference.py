"""MAPL preference trainers (MADPO, MARLHF and their iterative forms) on the travel workflow with tiny
random CPU models.

Most tests replace generation by a scripted backend that returns fixed travel actions through the real
JSON skeleton (exact ids, EOS, value-token loss masks from ``loss_mask_for``), scored by the real task
reward, so the preference loops run in seconds; one test samples with the real skeleton-constrained
backend to pin the ``_generate_completions`` contract."""

import ast
import json
import math

import numpy as np
import pytest
import torch
from comlrl.trainers.preference.iterative import MADPOIterTrainer
from comlrl.trainers.preference.madpo import MADPOTrainer

from c3_plugin.core.loss import masked_sequence_log_prob
from c3_plugin.core.protocol import Generation, encode_prompt
from c3_plugin.core.structured import loss_mask_for
from c3_plugin.run.testing import tiny_model, tiny_tokenizer
from c3_plugin.trainers.preference import (
    MaskedPreferenceTensors,
    WorkflowMADPOConfig,
    WorkflowMADPOIterConfig,
    WorkflowMADPOIterTrainer,
    WorkflowMADPOTrainer,
    WorkflowMARLHFConfig,
    WorkflowMARLHFIterConfig,
    WorkflowMARLHFIterTrainer,
    WorkflowMARLHFTrainer,
)
from domains.travel import TravelConfig, eval_aggregator, eval_logger, make_grammar, normalise, prompt_fields, reward
from domains.travel.prompts import workflows
from tests.domains.test_travel_training import FIXTURE

RAW = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
THREE_DAY = [i for i, r in enumerate(RAW) if r["days"] == 3][:3]
ROWS = [{**normalise(RAW[i], i, "train"), "datasource": "travel"} for i in THREE_DAY]
for _r in ROWS:
    _r.update(prompt_fields(_r))
WORKFLOW = workflows()["travel_planners"].with_templates({"Logistics": "{logistics_checklist}",
                                                          "Experience": "{experience_checklist}"})
GRAMMAR = make_grammar(TravelConfig(max_value_tokens=256))  # scripted values are whole catalog names
TOK = tiny_tokenizer()
CLASSES = {"madpo": (WorkflowMADPOTrainer, WorkflowMADPOConfig),
           "marlhf": (WorkflowMARLHFTrainer, WorkflowMARLHFConfig),
           "madpo_iter": (WorkflowMADPOIterTrainer, WorkflowMADPOIterConfig),
           "marlhf_iter": (WorkflowMARLHFIterTrainer, WorkflowMARLHFIterConfig)}


def gold_values(raw_index):
    """Per (day, field) the human plan's value (test scaffolding for candidate actions; never a label)."""
    plan = [d for d in ast.literal_eval(RAW[raw_index]["annotated_plan"])[1] if d]
    return {(k + 1, f): str(v).strip() or "-" for k, day in enumerate(plan) for f, v in day.items() if f != "days"}


class ScriptedBackend:
    """Generation stand-in: per role prompt a fixed pool of actions rendered through the real skeleton
    (gold, all-dash and two half-filled variants); sampling rotates through the pool, greedy takes the first."""

    use_chat_template, max_batch, json_stop = True, None, False

    def __init__(self, trainer, constant=False):
        self.pools = {}
        for row, raw_index in zip(ROWS, THREE_DAY):
            gold = gold_values(raw_index)
            for a in range(2):
                prompt = trainer.agent_prompt(a, row)
                skeleton = GRAMMAR(prompt)
                full = [gold.get(slot, "-") for slot in skeleton.slots]
                variants = [full, ["-"] * len(full), [v if k % 2 else "-" for k, v in enumerate(full)],
                            [v if k % 2 == 0 else "-" for k, v in enumerate(full)]]
                if constant:
                    variants = [variants[1]] * 4
                self.pools[(a, prompt.text)] = [self._generation(skeleton, v) for v in variants]
        self.calls = 0

    @staticmethod
    def _generation(skeleton, values):
        text = skeleton.render(values)[len(skeleton.prefill()):]
        ids = TOK(text, add_special_tokens=False)["input_ids"] + [TOK.eos_token_id]
        return Generation(text=text, token_ids=ids, logprobs=[0.0] * len(ids),
                          loss_mask=loss_mask_for(TOK, skeleton, ids))

    def generate(self, prompts, n, sampling):
        out = []
        for p in prompts:
            pool = self.pools[(p.agent, p.text)]
            self.calls += 1
            picks = [0] * n if sampling.greedy else [(self.calls + k * (p.agent + 1)) % len(pool) for k in range(n)]
            out.append([pool[i] for i in picks])
        return out


def tiny_fields(name, **fields):
    """Config values for a tiny, fast preference run of algorithm ``name`` (CPU, 4 candidates, 2 pairs)."""
    base = dict(agent_devices="cpu", eval_num_samples=1, eval_batch_size=1, eval_interval=0,
                preference_num_candidates=4, preference_pairs_per_sample=2, num_train_epochs=1,
                agent_learning_rate=1e-3, logging_steps=1)
    if "marlhf" in name:
        base.update(num_generations=2, reward_num_train_epochs=1, rollout_buffer_size=1)
    if "iter" in name:
        base.update(num_iterations=2, comparator_num_candidates=4)
    return {**base, **fields}


def make_trainer(name, tmp_path, scripted=True, constant=False, models=None, reward_func=reward, **fields):
    trainer_cls, config_cls = CLASSES[name]
    base = tiny_fields(name, eval_batch_size=2, **fields)
    models = models or [tiny_model(TOK, seed=i, hidden=16, layers=1, max_positions=4096) for i in range(2)]
    trainer = trainer_cls(agents=models, tokenizer=TOK, train_dataset=list(ROWS[:2]), eval_dataset=list(ROWS[2:]),
                          reward_func=reward_func, eval_logger=eval_logger, eval_aggregator=eval_aggregator,
                          args=config_cls(**base), workflow=WORKFLOW, run_dir=tmp_path / name, grammar=GRAMMAR)
    trainer.verbose = False
    if scripted:
        trainer.backend = ScriptedBackend(trainer, constant=constant)
    return trainer


def history(trainer):
    return [json.loads(line) for line in (trainer.run_dir / "metrics.jsonl").read_text().splitlines()]


def weights(trainer):
    return [torch.cat([p.detach().flatten().clone() for p in m.parameters()]) for m in trainer.agents]


# ------------------------------------------------------------------------------------------- contract
def test_defaults_follow_the_travel_schedule():
    madpo, marlhf, madpo_iter, marlhf_iter = (WorkflowMADPOConfig(), WorkflowMARLHFConfig(), WorkflowMADPOIterConfig(),
                                              WorkflowMARLHFIterConfig())
    assert (madpo.num_train_epochs, madpo.preference_num_candidates, madpo.preference_pairs_per_sample,
            madpo.environment_steps_per_pair) == (7, 20, 6, 2)
    assert (marlhf.num_train_epochs, marlhf.num_generations, marlhf.preference_num_candidates) == (21, 4, 20)
    assert (marlhf_iter.num_iterations, marlhf_iter.num_train_epochs, marlhf_iter.num_generations) == (6, 3, 4)
    assert (madpo_iter.num_iterations, madpo_iter.num_train_epochs, madpo_iter.preference_pairs_per_sample) == (6, 1, 6)
    for it in (madpo_iter, marlhf_iter):
        assert (it.preference_num_candidates, it.comparator_num_candidates,
                it.comparator_policy) == (20, 20, "current_copy")
        assert (it.preference_replay_mode, it.preference_replay_lambda,
                it.log_reward_distribution) == ("lambda_decay", 0.8, True)
    with pytest.raises(ValueError, match="api"):
        WorkflowMADPOIterConfig(comparator_policy="api", comparator_api_url="http://x")
    with pytest.raises(ValueError, match="task reward"):
        WorkflowMARLHFIterConfig(preference_scoring_reward="reward_model")


def test_generate_completions_samples_the_role_skeleton_with_exact_ids_and_masks(tmp_path):
    torch.manual_seed(0)
    tr = make_trainer("madpo", tmp_path, scripted=False)
    tr.grammar = tr.backend.grammar = make_grammar(TravelConfig(max_value_tokens=1))
    out = tr._generate_completions(tr.agents[1], [ROWS[0]], agent_idx=1, num_return_sequences=2, max_new_tokens=8)
    prompt = tr.agent_prompt(1, ROWS[0])
    expected = encode_prompt(TOK, prompt)
    assert out["prompt_input_ids"].shape == (1, len(expected)) and out["prompt_input_ids"][0].tolist() == expected
    prefill = TOK(prompt.prefix, add_special_tokens=False)["input_ids"]
    assert expected[-len(prefill):] == prefill  # the prefill is in the prompt ids ...
    for k in range(2):
        ids = out["completion_input_ids"][0][k].tolist()
        mask = out["completion_loss_masks"][0][k]
        assert ids[-1] == TOK.eos_token_id and ids[:len(prefill)] != prefill  # ... never in the targets; EOS kept
        assert len(mask) == len(ids) == out["response_lens"][k] and 0 < sum(mask) < len(ids)
        assert out["completions"][0][k] == prompt.prefix + TOK.decode(ids, skip_special_tokens=True)
        json.loads(out["completions"][0][k])  # the full action the reward sees


def test_masked_final_token_likelihood_equals_a_plain_loop(tmp_path):
    tr = make_trainer("madpo", tmp_path)
    model = tr.agents[0]
    prompt = torch.tensor(encode_prompt(TOK, tr.agent_prompt(0, ROWS[0])))
    completion = torch.tensor(TOK('Paris"}, {"x": "y', add_special_tokens=False)["input_ids"] + [TOK.eos_token_id])
    mask = torch.tensor([1 if k % 3 else 0 for k in range(len(completion))])
    mask[-1] = 1  # the final selected token (EOS) carries loss
    with torch.no_grad():
        per_token = []
        for t in range(len(completion)):  # the oracle: one forward per token, no slicing tricks
            logits = model(input_ids=torch.cat([prompt, completion[:t]])[None]).logits[0, -1].double()
            per_token.append(torch.log_softmax(logits, -1)[completion[t]].item())
        per_token = np.array(per_token)
        oracle_sum = float((per_token * mask.numpy()).sum())
        for aggregation, want in (("token_sum", oracle_sum), ("sequence_mean", oracle_sum / int(mask.sum()))):
            tr.args.loss_aggregation = aggregation
            got = tr._sequence_log_prob(0, prompt, completion, mask)
            assert math.isclose(float(got), want, rel_tol=1e-5, abs_tol=1e-5), (aggregation, float(got), want)
        # CoMLRL's decentralized likelihood drops the final token (and the EOS when pad == eos); ours does not
        assert not math.isclose(float(MADPOTrainer._sequence_log_prob(tr, 0, prompt, completion)),
                                float(per_token.sum()), abs_tol=1e-4)
        unmasked = masked_sequence_log_prob(model, prompt, completion, None, "token_sum")
        assert math.isclose(float(unmasked), float(per_token.sum()), rel_tol=1e-5, abs_tol=1e-5)


# ------------------------------------------------------------------------------------------- pairs and replay
def collect_pairs(tr, iteration=False):
    kwargs = {"iteration_idx": 0} if iteration else {}
    return [p for row in ROWS[:2] for p in tr._generate_preference_pairs_for_item(dict(row), **kwargs)]


def test_replay_records_round_trip_exact_ids_and_masks_and_reject_other_kinds(tmp_path):
    tr = make_trainer("madpo_iter", tmp_path)
    pairs = collect_pairs(tr, iteration=True)
    assert pairs and all(isinstance(t, MaskedPreferenceTensors) for p in pairs for t in p.agent_tensors)
    backend_ids = {tuple(g.token_ids) for pool in tr.backend.pools.values() for g in pool}
    for pair in pairs:
        record = json.loads(json.dumps(tr._preference_pair_to_record(pair)))
        assert record["joint"] is False
        back = tr._preference_pair_from_record(record)
        for t, u in zip(pair.agent_tensors, back.agent_tensors):
            for name in ("prompt_input_ids", "winner_completion_ids", "loser_completion_ids", "winner_loss_mask",
                         "loser_loss_mask"):
                assert torch.equal(getattr(t, name), getattr(u, name)), name
            # comparator and current candidates alike keep their generated ids (no re-tokenization from text)
            assert (tuple(t.winner_completion_ids.tolist()) in backend_ids
                    and tuple(t.loser_completion_ids.tolist()) in backend_ids)
            assert (t.winner_completion_ids[-1] == TOK.eos_token_id
                    and 0 < int(t.winner_loss_mask.sum()) < len(t.winner_loss_mask))
        assert (back.prompts, back.winner_completions,
                back.loser_completions) == (pair.prompts, pair.winner_completions,
                                            pair.loser_completions)
        assert (back.target_raw_reward, back.comparator_raw_reward, back.raw_rewards) == (
            pair.target_raw_reward, pair.comparator_raw_reward, pair.raw_rewards)
    record = tr._preference_pair_to_record(pairs[0])
    with pytest.raises(ValueError, match="joint-actor record"):
        tr._preference_pair_from_record({**record, "joint": True})
    with pytest.raises(ValueError, match="without token ids"):
        tr._preference_pair_from_record(MADPOIterTrainer._preference_pair_to_record(pairs[0]))


def test_ties_give_no_pair():
    tr = object.__new__(WorkflowMADPOIterTrainer)
    tr.args = WorkflowMADPOIterConfig(pair_selection="all", preference_pairs_per_sample=None)
    assert sorted(MADPOTrainer._select_preference_pair_indices(tr, [0.5, 0.5, 0.2])) == [(0, 2), (1, 2)]
    assert tr._select_policy_comparison_pairs([0.1, 0.3, 0.2], [0.1, 0.2, 0.2]) == [(("current", 1), ("comparator", 1))]


@pytest.mark.parametrize("name", ["madpo", "madpo_iter"])
def test_an_all_tied_run_raises(tmp_path, name):
    tr = make_trainer(name, tmp_path, constant=True,
                      num_iterations=2) if "iter" in name else make_trainer(name, tmp_path, constant=True)
    before = weights(tr)
    with pytest.raises(RuntimeError, match="no preference pair.*tied on the task reward"):
        tr.train()
    assert all(torch.equal(a, b) for a, b in zip(before, weights(tr)))


# ------------------------------------------------------------------------------------------- joint DPO
def test_streamed_joint_dpo_gradients_equal_the_batched_loss(tmp_path, monkeypatch):
    tr = make_trainer("madpo", tmp_path)
    batch = collect_pairs(tr)[:3]
    assert len(batch) == 3
    detached = tr._detached_agent_deltas(batch)
    reference = []
    for a in range(2):  # CoMLRL's batched loss (all graphs held, one backward) over the same masked deltas
        tr.agents[a].zero_grad(set_to_none=True)
        MADPOTrainer._agent_preference_loss(tr, a, batch, detached).backward()
        reference.append([p.grad.clone() for p in tr.agents[a].parameters()])
    events, streamed = [], [None, None]
    real_delta, real_backward = tr._agent_logprob_delta, torch.Tensor.backward

    def delta(a, pair):
        d = real_delta(a, pair)
        events.append("graph" if d.requires_grad else "detached")
        return d

    def backward(self, *args, **kwargs):
        events.append("backward")
        return real_backward(self, *args, **kwargs)

    monkeypatch.setattr(tr, "_agent_logprob_delta", delta)
    monkeypatch.setattr(torch.Tensor, "backward", backward)
    for a in range(2):
        monkeypatch.setattr(tr.optimizers[a], "step",
                            lambda a=a: streamed.__setitem__(a, [p.grad.clone() for p in tr.agents[a].parameters()]))
    metrics = tr._update_from_preference_batch(batch)
    graphs = [e for e in events if e != "detached"]
    assert graphs == ["graph", "backward"] * 6  # one live winner/loser graph at a time, 2 agents x 3 pairs
    for a in range(2):
        for got, want in zip(streamed[a], reference[a]):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
    assert {"train/dpo_loss", "train/dpo_margin", "train/dpo_accuracy"} <= set(metrics)
    monkeypatch.setattr(tr, "_detached_agent_deltas", lambda b: [[float("nan"), 0.0]] * len(b))
    with pytest.raises(FloatingPointError):
        tr._update_from_preference_batch(batch)


def test_dropout_is_rejected(tmp_path):
    models = [tiny_model(TOK, seed=i, hidden=16, layers=1) for i in range(2)]
    models[1].config.attention_dropout = 0.1
    with pytest.raises(ValueError, match="zero dropout"):
        make_trainer("madpo", tmp_path, scripted=False, models=models)


# ------------------------------------------------------------------------------------------- MARLHF reward model
def test_reward_model_reads_complete_joint_texts_without_a_vocabulary_head(tmp_path, monkeypatch):
    tr = make_trainer("marlhf", tmp_path)
    pairs = collect_pairs(tr)
    seen, real_score = [], tr._score_reward_texts

    def score(texts):
        seen.append((list(texts), tr._actors_offloaded))
        return real_score(texts)

    monkeypatch.setattr(tr, "_score_reward_texts", score)
    tr._init_reward_model()
    rm = tr.reward_model
    vocab = len(TOK)
    assert not any(isinstance(m, torch.nn.Linear) and m.out_features == vocab for m in rm.modules())
    assert not hasattr(rm.backbone, "lm_head") and rm.reward_head.out_features == 1
    lengths = []
    rm.register_forward_pre_hook(lambda mod, args, kw: lengths.extend(kw["attention_mask"].sum(-1).tolist()),
                                 with_kwargs=True)
    tr._train_reward_model(pairs)
    assert tr.reward_optimizer is None and not rm.training and not tr._actors_offloaded
    assert seen and all(offloaded for _, offloaded in seen)
    texts = [t for batch, _ in seen for t in batch]
    for pair in pairs:
        for completions in (pair.winner_completions, pair.loser_completions):
            text = next(t for t in texts if all(c in t for c in completions))
            assert all(p in text for p in pair.prompts) and all(c in text for c in completions)
    assert lengths == [len(TOK(t)["input_ids"]) for t in texts]  # the model reads every token: nothing truncated
    assert max(lengths) > 512  # longer than a typical truncation default
    # online scoring reads the same complete role prompts; evaluation bypasses the learned model
    tr._reward_model_active = True
    seen.clear()
    outs = tr._sample_candidates(tr.agents, ROWS[0], 2)
    scores = tr._compute_rewards([outs[0]["prompts"][0]], [o["completions"][0] for o in outs], batch_items=[ROWS[0]])
    assert len(scores) == 2 and all(outs[a]["prompts"][0] in seen[0][0][0] for a in range(2))
    monkeypatch.setattr(tr, "_score_reward_texts", lambda texts: pytest.fail("evaluation used the learned reward"))
    assert tr.evaluate(1)["eval/reward"] == pytest.approx(tr._evaluate_items(1)["eval/reward"])


# ------------------------------------------------------------------------------------------- end to end
def test_madpo_trains_end_to_end(tmp_path):
    tr = make_trainer("madpo", tmp_path, train_batch_size=2)
    before = weights(tr)
    tr.train()
    rows = [h for h in history(tr) if "train/dpo_loss" in h]
    assert tr.env_step == 2 * 2 * 2 == tr.totals["env_steps"]  # 2 prompts x 2 pairs x 2 env steps, one epoch
    assert len(rows) == tr.update_step == 2 and rows[-1]["env_step"] == 8
    assert all(not torch.equal(a, b) for a, b in zip(before, weights(tr)))


def test_marlhf_trains_end_to_end_with_masked_online_magrpo(tmp_path, monkeypatch):
    tr = make_trainer("marlhf", tmp_path)
    used_masks = []
    real = tr._sequence_log_prob
    monkeypatch.setattr(tr, "_sequence_log_prob", lambda a, p, c, m=None: used_masks.append(m) or real(a, p, c, m))
    before = weights(tr)
    tr.train()
    assert tr.env_step == 2 * 2  # one epoch: 2 prompts x 2 joint rollouts
    assert tr.reward_model is not None and tr.reward_optimizer is None
    # skeleton masks in the PG loss
    assert used_masks and all(m is not None and 0 < sum(m) < len(m) for m in used_masks)
    keys = {k for h in history(tr) for k in h}
    assert {"turn_1/reward_mean", "train/reward_model_loss"} <= keys
    assert all(not torch.equal(a, b) for a, b in zip(before, weights(tr)))


@pytest.mark.parametrize("name", ["madpo_iter", "marlhf_iter"])
def test_iterative_refresh_writes_replay_distributions_and_iter_metrics(tmp_path, name):
    tr = make_trainer(name, tmp_path)
    before = weights(tr)
    tr.train()
    run = tr.run_dir
    for it in (1, 2):
        shard = json.loads((run / "preference_replay" / f"iteration_{it:04d}.json").read_text())
        assert shard["num_pairs"] > 0 and all(r["joint"] is False and len(r["agent_tokens"])
                                              == 2 for r in shard["pairs"])
        dist = json.loads((run / "reward_distributions" / f"iteration_{it:04d}.json").read_text())
        assert (dist["candidate"]["target"]["sample_count"] == 2 * 4
                and dist["candidate"]["comparator"]["sample_count"] == 2 * 4)
        assert (dist["reward_min"], dist["reward_max"], dist["num_bins"]) == (-0.25, 1.0, 16)
    iters = [h for h in history(tr) if "iter/current_iteration" in h]
    assert [h["iter/current_iteration"] for h in iters] == [1.0, 2.0]
    assert all(h["iter/train_preference_pairs"] > 0 and "iter/reward_distribution/target_mean" in h for h in iters)
    if name == "marlhf_iter":
        assert tr.env_step == 2 * 1 * 2 * 2  # iterations x epochs x prompts x generations
    else:
        assert tr.env_step == 2 * sum(h["iter/train_preference_pairs"] for h in iters)
    assert all(not torch.equal(a, b) for a, b in zip(before, weights(tr)))


# ------------------------------------------------------------------------------------------- centralized comparator
def test_encode_values_gives_the_exact_ids_and_value_masks_of_a_rendered_action():
    from c3_plugin.core.structured import Skeleton, encode_values

    sk = Skeleton(((1, "current_city"), (1, "transportation"), (2, "current_city")), max_value_tokens=64)
    values = ["from Austin to Dallas", "-", ""]
    ids, mask = encode_values(TOK, sk, values)
    assert ids[-1] == TOK.eos_token_id and len(ids) == len(mask)
    assert TOK.decode(ids[:-1]) == sk.render(values)[len(sk.prefill()):]
    assert mask == loss_mask_for(TOK, sk, ids)
    expected = []
    for k, v in enumerate(values):
        seg = sk.between(k) if k < len(values) - 1 else sk.closing()
        expected += [1] * len(TOK(v, add_special_tokens=False)["input_ids"]) + [1]  # value tokens and the chosen close
        # forced (+EOS)
        expected += [0] * (len(TOK(seg, add_special_tokens=False)["input_ids"]) + (k == len(values) - 1))
    assert mask == expected
    for bad in ('say "hi"', "back\\slash", "new\nline"):
        with pytest.raises(ValueError):
            encode_values(TOK, sk, [bad, "-", "-"])
    with pytest.raises(ValueError):
        encode_values(TOK, Skeleton(sk.slots, max_value_tokens=2), ["abc", "-", "-"])
    with pytest.raises(ValueError):
        encode_values(TOK, sk, ["-", "-"])


class ScriptedTeacher:
    """The central teacher's generations: joint actions through the real joint skeleton (gold, all-dash,
    half-filled) and one unclosed joint action (a failed split)."""

    def __init__(self, trainer):
        from domains.travel.joint import TravelJointAdapter

        adapter = TravelJointAdapter()
        self.rows = {adapter.build_prompt(row): raw for row, raw in zip(ROWS, THREE_DAY)}
        self.prompts = []

    def generate(self, prompts, n, sampling):
        (p,) = prompts
        self.prompts.append(p)
        skeleton = GRAMMAR(p)
        gold = gold_values(self.rows[p.text])
        full = [gold.get(slot, "-") for slot in skeleton.slots]
        texts = [skeleton.render(v)[len(skeleton.prefill()):]
                 for v in (full, ["-"] * len(full), [v if k % 2 else "-" for k, v in enumerate(full)])]
        texts.append(texts[0][:-2])  # unclosed: split gives two empty role actions
        gens = [Generation(text=t, token_ids=TOK(t, add_special_tokens=False)["input_ids"], logprobs=[]) for t in texts]
        return [[gens[k % len(gens)] for k in range(n)]]


def test_centralized_comparator_projects_the_teacher_onto_each_actor_with_exact_ids(tmp_path):
    from c3_plugin.core.structured import encode_values
    from domains.travel.joint import JOINT_ROLE, TravelJointAdapter, joint_prefill, split_joint

    with pytest.raises(ValueError, match="policy index 0"):
        WorkflowMADPOIterConfig(comparator_generation_mode="centralized", comparator_centralized_agent_index=1)
    tr = make_trainer("madpo_iter", tmp_path, comparator_generation_mode="centralized", num_iterations=1)
    assert isinstance(tr.centralized_comparator_adapter, TravelJointAdapter)
    teacher, used, collected, projections = ScriptedTeacher(tr), [], [], []
    tr._centralized_comparator_backend = lambda agent: (used.append(agent), teacher)[1]
    generate_pairs, project = tr._generate_preference_pairs_for_item, tr._generate_centralized_policy_output_for_agent

    def record_pairs(item, **kw):
        pairs = generate_pairs(item, **kw)
        collected.extend((item, p) for p in pairs)
        return pairs

    def record_projection(agent, item, **kw):
        outs = project(agent, item, **kw)
        projections.append((item, outs))
        return outs

    tr._generate_preference_pairs_for_item = record_pairs
    tr._generate_centralized_policy_output_for_agent = record_projection
    tr.train()

    # one teacher, policy index 0's comparator model, on the joint prompt with both roles' contexts
    assert used and all(a is tr.agents[0] or a is (getattr(tr, "_current_copy_comparator_agents", None) or [None])[0]
                        for a in used)
    assert all(p.role == JOINT_ROLE and p.agent == 0 and p.prefix == joint_prefill() for p in teacher.prompts)
    assert all(p.max_new_tokens == 2 * tr.args.max_new_tokens for p in teacher.prompts)  # aggregate budget
    assert len(projections) == 2
    for item, outs in projections:
        joints = outs[0]["joint_completions"][0]
        assert len(joints) == 4 and outs[0]["completion_valid"][0] == [True, True, True, False]
        for a in range(2):
            prompt = tr.agent_prompt(a, item)
            skeleton = GRAMMAR(prompt)
            assert outs[a]["prompts"] == [prompt.text]
            assert outs[a]["prompt_input_ids"][0].tolist() == encode_prompt(TOK, prompt, True)
            for j, joint in enumerate(joints):
                role_text = split_joint(joint, int(item["days"]))[a]
                assert outs[a]["completions"][0][j] == role_text
                if j < 3:
                    values = [e["value"] for e in json.loads(role_text)["assignments"]]
                    ids, mask = encode_values(TOK, skeleton, values)
                    assert outs[a]["completion_input_ids"][0][j].tolist() == ids
                    assert outs[a]["completion_loss_masks"][0][j] == mask
    # pairs: per-agent prompts; every side (the comparator's included) carries encode_values ids and masks;
    # the failed joint action keeps its reward in the distribution but forms no pair
    assert collected
    for item, pair in collected:
        assert pair.prompts == [tr.agent_prompt(a, item).text for a in range(2)]
        for a, t in enumerate(pair.agent_tensors):
            prompt = tr.agent_prompt(a, item)
            assert t.prompt_input_ids.tolist() == encode_prompt(TOK, prompt, True)
            for text, ids, mask in ((pair.winner_completions[a], t.winner_completion_ids, t.winner_loss_mask),
                                    (pair.loser_completions[a], t.loser_completion_ids, t.loser_loss_mask)):
                assert text, "a failed joint projection formed a pair"
                values = [e["value"] for e in json.loads(text)["assignments"]]
                exp_ids, exp_mask = encode_values(TOK, GRAMMAR(prompt), values)
                assert ids.tolist() == exp_ids and mask.tolist() == exp_mask
    dist = json.loads((tr.run_dir / "reward_distributions" / "iteration_0001.json").read_text())
    assert dist["candidate"]["comparator"]["sample_count"] == 2 * 4
    assert min(dist["candidate"]["comparator"]["raw_rewards"]) < 0  # the failed joint action (-0.10) is counted
