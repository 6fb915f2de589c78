"""GPU tests: deselected on CPU machines by the `gpu` marker (pyproject addopts), run on the
device machine with `pytest -m gpu`. They fail, not skip, when CUDA is missing there."""

import numpy as np
import pytest
import torch
from datasets import Dataset

from c3_plugin.testing import tiny_model, tiny_tokenizer
from c3_plugin.trainers import C3Config, C3Trainer
from c3_plugin.trainers.update import PolicySample, ppo_update

pytestmark = pytest.mark.gpu


def cuda_model(tok, seed=0):
    assert torch.cuda.is_available(), "the gpu tests need CUDA"
    return tiny_model(tok, seed=seed, hidden=64).to("cuda", dtype=torch.bfloat16)


def test_bf16_ppo_step_on_cuda_moves_log_prob_with_advantage():
    from c3_plugin.loss import sequence_logprobs

    tok = tiny_tokenizer()
    model = cuda_model(tok)
    prompt, comp = [10, 11, 12], [40, 41, 1]
    with torch.no_grad():
        before, _ = sequence_logprobs(model, [prompt], [comp], tok.pad_token_id)
    sample = PolicySample(prompt, comp, before[0].float().tolist(), 1.0)
    args = type("A", (), dict(ppo_epochs=1, minibatch_size=None, micro_batch_size=4, temperature=1.0, clip_eps=0.2,
                              clip_eps_high=None, max_grad_norm=1.0, loss_aggregation="token_mean", reference_kl_coef=0.0))()
    torch.cuda.reset_peak_memory_stats()
    stats = ppo_update(model, torch.optim.AdamW(model.parameters(), lr=1e-2), [sample], args, np.random.default_rng(0), tok.pad_token_id)
    with torch.no_grad():
        after, _ = sequence_logprobs(model, [prompt], [comp], tok.pad_token_id)
    assert np.isfinite(stats["loss"]) and stats["optimizer_steps"] == 1
    assert float(after.sum()) > float(before.sum())
    assert torch.cuda.max_memory_allocated() > 0


def test_c3_trainer_step_on_cuda_in_bf16():
    tok = tiny_tokenizer()
    models = [cuda_model(tok, 0), cuda_model(tok, 1)]
    ds = Dataset.from_list([{"id": f"p{i}", "prompt": f"q{i}", "question": f"q{i}", "answer": "1"} for i in range(4)])
    args = C3Config(num_train_epochs=1, max_new_tokens=8, instances_per_update=4, agent_devices="cuda:0")
    trainer = C3Trainer(agents=models, tokenizer=tok, train_dataset=ds, args=args,
                        reward_func=lambda *c, batch_items=None, prompts=None: [float(len(x) % 2) for x in c[-1]])
    trainer.verbose = False
    trainer.train()
    assert trainer.env_step == 4 * 8
    row = trainer.history[-1]
    assert np.isfinite(row["train/loss"]) and row["train/agent1/samples"] == 32
    assert next(models[0].parameters()).dtype == torch.bfloat16


def test_the_inactive_actor_waits_on_the_cpu_during_the_other_actors_dpo_update(tmp_path):
    """offload_inactive_actor: while one actor takes its streamed joint-DPO step, the other actor
    (and its optimizer state) is on the CPU; afterwards both are back on the GPU."""
    from tests.test_preference import make_trainer

    trainer = make_trainer("madpo", tmp_path, agent_devices="cuda:0")
    for agent in trainer.agents:
        agent.to("cuda:0")
    pairs = trainer._build_preference_dataset()
    assert pairs, "the scripted candidates must give preference pairs"
    seen, original = [], trainer._agent_logprob_delta

    def spy(a, pair):
        if torch.is_grad_enabled():
            seen.append((a, [next(m.parameters()).device.type for m in trainer.agents]))
        return original(a, pair)

    trainer._agent_logprob_delta = spy
    trainer._update_from_preference_batch(pairs[:2])
    assert {a for a, _ in seen} == {0, 1}
    assert all(devices[a] == "cuda" and devices[1 - a] == "cpu" for a, devices in seen)
    assert all(next(m.parameters()).device.type == "cuda" for m in trainer.agents)
