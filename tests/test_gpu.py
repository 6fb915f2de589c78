"""GPU tests: deselected on CPU machines by the `gpu` marker (pyproject addopts), run on the
device machine with `pytest -m gpu`. They fail, not skip, when CUDA is missing there."""

import numpy as np
import pytest
import torch
from datasets import Dataset

from c3_plugin.run.testing import experiment_config, tiny_model, tiny_tokenizer
from c3_plugin.trainers import C3Config, C3Trainer
from c3_plugin.trainers.update import PolicySample, ppo_update

pytestmark = pytest.mark.gpu


def cuda_model(tok, seed=0):
    assert torch.cuda.is_available(), "the gpu tests need CUDA"
    return tiny_model(tok, seed=seed, hidden=64).to("cuda", dtype=torch.bfloat16)


def test_bf16_compute_over_fp32_masters_keeps_small_updates_on_cuda():
    """At the paper's learning rate (1e-6) three steps of bf16 compute move most fp32 master weights, in
    the direction of the fp32 update; bf16 weights updated in place would keep about 2% of them."""
    import copy

    from c3_plugin.core.loss import token_logprobs
    from c3_plugin.scale.precision import keep_fp32_masters

    tok = tiny_tokenizer()
    init = cuda_model(tok)
    masters, plain = copy.deepcopy(init), copy.deepcopy(init).float()
    assert keep_fp32_masters(masters) == torch.bfloat16
    rng = np.random.default_rng(0)
    prompts = [list(map(int, rng.integers(6, 200, size=6))) for _ in range(8)]
    comps = [list(map(int, rng.integers(6, 200, size=5))) for _ in range(8)]
    old = token_logprobs(plain, prompts, comps, tok.pad_token_id)
    samples = [PolicySample(p, c, o, float(a))
               for p, c, o, a in zip(prompts, comps, old, rng.choice([-1.0, 1.0], size=8))]
    args = type("A", (), dict(ppo_epochs=1, minibatch_size=None, micro_batch_size=4, temperature=1.0, clip_eps=0.2,
                              clip_eps_high=None, max_grad_norm=1.0, loss_aggregation="token_mean",
                              reference_kl_coef=0.0))()
    start = torch.cat([p.detach().float().reshape(-1) for p in plain.parameters()])
    for model in (masters, plain):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
        for _ in range(3):
            stats = ppo_update(model, opt, samples, args, np.random.default_rng(0), tok.pad_token_id)
            assert np.isfinite(stats["loss"])
    d16 = torch.cat([p.detach().reshape(-1) for p in masters.parameters()]) - start
    d32 = torch.cat([p.detach().reshape(-1) for p in plain.parameters()]) - start
    assert (d16 != 0).float().mean() > 0.8
    assert torch.nn.functional.cosine_similarity(d16, d32, dim=0) > 0.95


def test_c3_trainer_step_on_cuda_in_bf16():
    tok = tiny_tokenizer()
    models = [cuda_model(tok, 0), cuda_model(tok, 1)]
    ds = Dataset.from_list([{"id": f"p{i}", "prompt": f"q{i}", "question": f"q{i}", "answer": "1"} for i in range(4)])
    args = experiment_config(C3Config, num_train_epochs=1, max_new_tokens=8, instances_per_update=4,
                             agent_devices="cuda:0")
    trainer = C3Trainer(agents=models, tokenizer=tok, train_dataset=ds, args=args,
                        reward_func=lambda *c, batch_items=None, prompts=None: [float(len(x) % 2) for x in c[-1]])
    trainer.verbose = False
    trainer.train()
    assert trainer.env_step == 4 * 8
    row = trainer.history[-1]
    assert np.isfinite(row["train/loss"]) and row["train/agent1/samples"] == 32
    assert next(models[0].parameters()).dtype == torch.float32  # fp32 masters
    assert trainer.compute_dtypes == [torch.bfloat16, torch.bfloat16]  # bf16 compute


def test_the_inactive_actor_waits_on_the_cpu_during_the_other_actors_dpo_update(tmp_path):
    """offload_inactive_actor: while one actor takes its streamed joint-DPO step, the other actor
    (and its optimizer state) is on the CPU; afterwards both are back on the GPU."""
    from tests.trainers.test_preference import make_trainer

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
