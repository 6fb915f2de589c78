"""The vLLM backend's trainer-side contract, without vLLM: config, mismatch metrics, truncated IS, lazy import."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from c3_plugin.core.loss import ppo_loss
from c3_plugin.trainers.base import WorkflowConfig
from c3_plugin.trainers.update import PolicySample, _truncated_is, logprob_mismatch

ROOT = Path(__file__).resolve().parents[2]


def test_mismatch_metrics_are_the_k3_kl_and_the_largest_gap_over_all_tokens():
    a = PolicySample([1], [5, 6], old_logprobs=[-1.0, -2.0], advantage=1.0, trainer_logprobs=[-1.1, -2.0])
    b = PolicySample([1], [7], old_logprobs=[-0.5], advantage=0.0, trainer_logprobs=[-0.2])
    hf = PolicySample([1], [7], old_logprobs=[-0.5], advantage=0.0)
    d = np.array([-0.1, 0.0, 0.3])  # trainer - engine, token by token
    got = logprob_mismatch([a, b, hf])
    assert got["logprob_mismatch_kl"] == pytest.approx(float(np.mean(np.exp(d) - d - 1)))
    assert got["logprob_mismatch_max"] == pytest.approx(0.3)
    assert logprob_mismatch([hf]) == {}  # the HF backend's samples carry no second opinion


def test_truncated_is_takes_the_ratio_against_the_trainer_and_caps_the_weight():
    engine = torch.tensor([[-1.0, -2.0], [-0.5, 0.0]])
    chunk = [PolicySample([1], [5, 6], [-1.0, -2.0], 1.0, trainer_logprobs=[-0.5, -2.5]),
             PolicySample([1], [7], [-0.5], 1.0)]
    old, w = _truncated_is(chunk, engine, cap=1.5)
    assert old.tolist() == [[-0.5, -2.5], [-0.5, 0.0]]
    assert w[0].tolist() == pytest.approx([1.5, math.exp(-0.5)])  # exp(0.5) capped at 1.5
    assert w[1].tolist() == [1.0, 1.0]


def test_token_weights_scale_each_tokens_surrogate():
    new = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    old = torch.tensor([[-1.0, -2.0]])
    mask = torch.ones(1, 2)
    adv = torch.tensor([1.0])
    plain, _ = ppo_loss(new, old, adv, mask)
    weighted, _ = ppo_loss(new, old, adv, mask, token_weights=torch.tensor([[0.5, 2.0]]))
    assert float(plain.detach()) == pytest.approx(-1.0)
    assert float(weighted.detach()) == pytest.approx(-(0.5 + 2.0) / 2)


def test_config_checks_the_backend_and_the_correction():
    assert WorkflowConfig().generation_backend == "hf"
    with pytest.raises(ValueError, match="generation_backend"):
        WorkflowConfig(generation_backend="sglang")
    with pytest.raises(ValueError, match="importance_sampling_cap"):
        WorkflowConfig(importance_sampling_cap=2.0)  # the HF backend has no sampler/trainer gap to correct
    with pytest.raises(ValueError, match="importance_sampling_cap"):
        WorkflowConfig(generation_backend="vllm", importance_sampling_cap=0.5)
    WorkflowConfig(generation_backend="vllm", importance_sampling_cap=2.0)


def test_the_dry_run_and_the_trainer_do_not_import_vllm():
    code = f"""
import sys
from c3_plugin.core.config import load_config
from c3_plugin.run.dry_run import dry_run_report
from c3_plugin.run.testing import experiment_config, tiny_model, tiny_tokenizer
from c3_plugin.trainers import C3Config, C3Trainer
from c3_plugin.generation.vllm import VLLMBackend
report = dry_run_report(load_config({str(ROOT / 'configs/math/demo_cpu.yaml')!r},
                                    overrides=['c3.generation_backend=vllm']))
tok = tiny_tokenizer()
trainer = C3Trainer(agents=[tiny_model(tok), tiny_model(tok, seed=1)], tokenizer=tok, reward_func=lambda *a, **k: [0.0],
                    args=experiment_config(C3Config, generation_backend="vllm", plan="tree [2, 2]"),
                    workflow="reasoner_actor")
assert isinstance(trainer.backend, VLLMBackend) and trainer.backend.llm is None, trainer.backend
assert "vllm" not in sys.modules, "vllm was imported"
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


def test_json_stop_after_sampling_cuts_where_the_stopping_criterion_stops():
    from c3_plugin.core.structured import JsonStop
    from c3_plugin.generation.vllm import json_stop_length
    from c3_plugin.run.testing import tiny_tokenizer

    tok = tiny_tokenizer()
    rng = np.random.default_rng(0)
    pieces = ['{"a": ', '"x}"', "1", "}", " ", "]", "{", '"', "\\"]
    rows, prefills = [], []
    for _ in range(40):
        text = "".join(rng.choice(pieces) for _ in range(int(rng.integers(1, 12))))
        rows.append(tok(text, add_special_tokens=False)["input_ids"])
        prefills.append(str(rng.choice(["", "{", '{"k": [', "{}"])))
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [tok.pad_token_id] * (width - len(r)) for r in rows])
    stop = JsonStop(tok, 0, prefills)
    for t in range(1, width + 1):
        stop(ids[:, :t], None)
    want = [s if s is None or s <= len(r) else None for s, r in zip(stop.stop_lengths, rows)]
    got = [json_stop_length(tok, p, r) for p, r in zip(prefills, rows)]
    assert got == want
    assert any(g is None for g in got) and any(g not in (None, 0) for g in got) and 0 in got
