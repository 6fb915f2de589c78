"""MAGRPO and C3 on the travel domain with tiny random CPU models: forced JSON skeletons, value-token
loss masks, the curriculum, P1-anchored evaluation and the compact W&B surface."""

import json
from pathlib import Path

import pytest

from c3_plugin.core.config import load_config
from c3_plugin.core.trace import TraceEntry
from c3_plugin.run.budget import expected_budget
from c3_plugin.run.dry_run import prepare
from c3_plugin.run.testing import tiny_model, tiny_tokenizer
from c3_plugin.run.train import train
from domains.travel import METRICS, parse_action
from tests.trainers.test_trainers import read_offline_history

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "travel" / "train.jsonl"


def travel_config(tmp_path, algorithm, curriculum=True, wandb=False):
    phases = ("[{'name': 'three_day', 'epochs': 1, 'where': {'days': [3]}, 'eval_every': 16}, {'name': "
              "'full', 'epochs': 1}]"
              if curriculum else "None")
    overrides = [f"dataset.train.source={FIXTURE}", "dataset.train.split=train", "dataset.train.eval_panels=null",
                 "dataset.train.filters={'days': [3, 5], 'level': ['easy', 'medium']}", "dataset.train.limit=4",
                 "agent_model.device=cpu", "agent_model.name=tiny", "travel.max_value_tokens=3",
                 "workflow.templates={'Logistics': '{logistics_checklist}', 'Experience': '{experience_checklist}'}",
                 f"{algorithm}.num_train_epochs={2 if curriculum else 1}", f"{algorithm}.curriculum={phases}",
                 f"{algorithm}.instances_per_update=4", f"{algorithm}.eval_num_samples=2",
                 f"{algorithm}.eval_batch_size=4", f"{algorithm}.micro_batch_size=4", f"{algorithm}.save_traces=true",
                 f"{algorithm}.agent_learning_rate=1e-3", f"output.base_dir={tmp_path}", f"output.run_name={algorithm}",
                 "output.verbose=false", "output.plot=false", "output.save_model=false", "output.checkpoint_interval=0"]
    if wandb:
        overrides += ["wandb.enabled=true", "wandb.mode=offline", f"wandb.dir={tmp_path / 'wb'}"]
    return load_config(ROOT / "configs" / "travel" / f"{algorithm}.yaml", overrides)


def tiny_pair():
    tok = tiny_tokenizer()
    return [tiny_model(tok, seed=i, max_positions=4096) for i in range(2)], tok


def test_c3_trains_on_travel_with_skeletons_masks_curriculum_and_compact_wandb(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = travel_config(tmp_path, "c3", wandb=True)
    models, tok = tiny_pair()
    summary = train(cfg, models=models, tokenizer=tok)
    _, wf, train_ds, evals = prepare(cfg)
    budget = expected_budget(cfg, wf, train_ds)
    assert summary["env_steps"] == budget["expected_env_steps"] == 2 * 4 * 4
    assert summary["totals"]["messages"] == budget["expected_messages"] == 8 * 4  # 2 + 2 per instance: shared samples
    run = Path(summary["run_dir"])
    entries = [TraceEntry.from_dict(json.loads(line)) for line in (run / "traces.jsonl").read_text().splitlines()]
    decisions = [e for e in entries if e.kind == "decision"]
    originals = [e for e in decisions if e.shared is None]
    assert len(originals) == 32 and len(decisions) == 8 * 6
    for e in originals:  # every sampled action is a complete, strictly valid role action
        days = json.loads(json.dumps(e.context)).count("\nDay ") + 1
        act = parse_action(e.output, wf.roles[e.role].agent, days)
        assert act.valid, e.output
        assert (e.loss_mask is not None and len(e.loss_mask) == len(e.token_ids)
                and 0 < sum(e.loss_mask) < len(e.token_ids))
    history = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    evals_logged = [h for h in history if "eval/reward" in h]
    # before training, after the three-day phase's 16-env-step flush, and after training
    assert [h["env_step"] for h in evals_logged] == [0, 16, 32]
    assert "eval_full/reward" in evals_logged[0] and "eval_full/reward" not in evals_logged[1]
    assert summary["eval_after"]["eval/action_validity"] == 1.0 and "eval_anchor/reward" in summary["eval_after"]
    keys = read_offline_history(tmp_path / "wb")
    allowed = {f"eval/{m}" for m in METRICS} | {"env_step", "turn_1/reward_mean", "turn_1/expected_return"}
    ours = {k for k in keys if not k.startswith("_")}  # _step, _runtime, _timestamp are W&B's own
    assert ours <= allowed, ours - allowed
    assert {"eval/reward", "eval/collaboration_success", "turn_1/reward_mean", "env_step"} <= keys


def test_magrpo_trains_on_travel_with_four_aligned_joint_actions(tmp_path):
    cfg = travel_config(tmp_path, "magrpo", curriculum=False)
    models, tok = tiny_pair()
    summary = train(cfg, models=models, tokenizer=tok)
    assert summary["env_steps"] == 4 * 4 and summary["totals"]["messages"] == 4 * 8
    history = [json.loads(line) for line in (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    rows = [h for h in history if "train/update_step" in h]
    assert [h["train/agent0/samples"] for h in rows] == [16]  # 4 prompts x 4 generations, no sharing
    assert rows[0]["train/agent0/optimizer_steps"] == rows[0]["train/agent1/optimizer_steps"] == 1


def test_structured_generation_rejects_a_reference_kl(tmp_path):
    with pytest.raises(Exception, match="reference_kl_enabled must stay false"):
        cfg = travel_config(tmp_path, "magrpo", curriculum=False)
        cfg.algo.reference_kl_enabled = True
        prepare(cfg)
