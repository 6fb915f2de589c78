"""The baselines as CoMLRL and the paper define them, and a head-to-head whose dry-run shows what differs."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from c3_plugin.core.config import load_config
from c3_plugin.core.credit import normalize_advantages
from c3_plugin.run.dry_run import dry_run_report
from c3_plugin.trainers import MAPPOTrainer, WorkflowMAGRPOTrainer
from c3_plugin.trainers.mappo import default_pooling
from c3_plugin.trainers.update import trained_tokens

from .test_trainers import make_trainer

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def comlrl_group_normalised(returns):
    """CoMLRL 1.4.3's MAGRPO advantage for one group of joint runs (advantage_mode mean, advantage_normalization
    on): R - mean, then z-scored with the population standard deviation, clamped at 1e-6."""
    r = torch.tensor(returns, dtype=torch.float)
    adv = r - r.mean()
    return ((adv - adv.mean()) / adv.std(unbiased=False).clamp(min=1e-6)).numpy()


def test_magrpo_normalises_within_each_instances_runs_at_every_decision():
    tr, ds = make_trainer(WorkflowMAGRPOTrainer)
    assert tr.args.advantage_scaling == "group_zscore"
    ro = tr.collect([dict(r) for r in ds])
    runs = ro.rewards.reshape(4, 8)
    assert np.any(runs.std(1) > 0)
    samples, _ = tr.build_samples(ro, tr.compute_advantages(ro))
    for agent in (0, 1):  # the Reasoner (decision 0) and the Actor (decision 1) alike
        got = np.array([s.advantage for s in samples[agent]]).reshape(4, 8)
        for i in range(4):
            np.testing.assert_allclose(got[i], comlrl_group_normalised(runs[i]), atol=1e-5)


def test_group_of_one_is_an_error_not_a_zero():
    with pytest.raises(ValueError, match="group of one|group\\(s\\) of one"):
        normalize_advantages(np.array([1.0, 0.0, 2.0]), "group_zscore", groups=np.array([0, 0, 1]))
    np.testing.assert_allclose(normalize_advantages(np.array([1.0, 3.0, 0.0, 4.0]), "group_zscore",
                                                    np.array([0, 0, 1, 1])),
                               [-1.0, 1.0, -1.0, 1.0])


def test_mappo_divides_the_scaled_advantage_by_the_token_count():
    plain, ds = make_trainer(MAPPOTrainer)
    per_tok, _ = make_trainer(MAPPOTrainer, advantage_per_token=True)
    torch.manual_seed(0)
    ro = plain.collect([dict(r) for r in ds])
    credited = plain.compute_advantages(ro)
    a, _ = plain.build_samples(ro, credited)
    b, _ = per_tok.build_samples(ro, credited)
    for agent in a:
        for x, y in zip(a[agent], b[agent]):
            assert y.advantage == pytest.approx(x.advantage / trained_tokens(x))


def tiny_encoder(path: Path):
    """A randomly initialised BERT encoder and its WordPiece tokenizer, saved where a Hub name would resolve."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    chars = sorted(set("abcdefghijklmnopqrstuvwxyz0123456789+-*/=?.,:"))
    (path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars) + "\n")
    tok = BertTokenizerFast(vocab_file=str(path / "vocab.txt"))
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32, max_position_embeddings=512)).save_pretrained(path)
    tok.save_pretrained(path)
    return tok


def test_mappo_critic_on_a_small_encoder_selected_by_name(tmp_path):
    enc_tok = tiny_encoder(tmp_path / "encoder")
    tr, ds = make_trainer(MAPPOTrainer, critic_model=str(tmp_path / "encoder"), critic_learning_rate=1e-2,
                          critic_max_tokens=12)
    critic = tr.critics[0]
    assert critic.pooling == "first" and critic.backbone.config.model_type == "bert"
    assert default_pooling(tr.agents[0]) == "last"
    ro = tr.collect([dict(r) for r in ds])
    states = tr.critic_states(ro)
    assert all(s[0] == enc_tok.cls_token_id and len(s) <= 12 for s in states)  # [CLS] kept through truncation
    # the value is read at [CLS] whatever the padding: a state alone and in a padded batch agree
    short, long = min(states, key=len), max(states, key=len)
    with torch.no_grad():
        alone = tr._critic_forward([short])
        batched = tr._critic_forward([long, short])
    torch.testing.assert_close(alone[0], batched[1], atol=1e-5, rtol=1e-4)
    before = [p.detach().clone() for p in critic.backbone.parameters()]
    tr.compute_advantages(ro)
    stats = tr.update_critic()
    assert np.isfinite(stats["critic/value_loss"])
    assert any(not torch.equal(p, q) for p, q in zip(critic.backbone.parameters(), before))


def test_head_to_head_dry_run_lists_every_effective_setting():
    cfg = load_config(CONFIGS / "math" / "c3.yaml")
    report = dry_run_report(cfg)
    opt = report["optimisation"]
    assert set(opt["settings"]) == {"c3", "magrpo", "mappo"}
    c3, magrpo, mappo = (opt["settings"][k] for k in ("c3", "magrpo", "mappo"))
    assert c3["plan"] == "tree [2, 4]" and magrpo["plan"] == mappo["plan"] == "independent 8"
    assert (c3["advantage_scaling"], magrpo["advantage_scaling"],
            mappo["advantage_scaling"]) == ("none", "none", "batch_zscore")
    assert mappo["advantage_per_token"] is True
    for key in ("loss_aggregation", "agent_learning_rate", "clip_eps", "updates_per_1k_env_steps",
                "expected_env_steps"):
        assert key in c3 and key not in ("differ",)
    assert {"plan", "credit", "advantage_scaling"} <= set(opt["differ"])
    assert not {"agent_learning_rate", "clip_eps", "loss_aggregation", "expected_env_steps",
                "micro_batch_size"} & set(opt["differ"])
    json.dumps(report)  # one JSON report
    mem = report["memory"]
    assert mem["status"] == "ok" and mem["params_per_agent"] == pytest.approx(4.02e9, rel=0.01)
    assert set(mem["fits"]) == {"h100-80", "h200-141"}
