"""Training at real precision: fp32 master weights under bf16 compute, for every trainer path."""

import copy

import numpy as np
import pytest
import torch
from datasets import Dataset

from c3_plugin.run.testing import experiment_config, tiny_model, tiny_tokenizer
from c3_plugin.scale.precision import compute_dtype_of, keep_fp32_masters
from c3_plugin.trainers import C3Config, C3Trainer, MAPPOConfig, MAPPOTrainer
from c3_plugin.trainers.update import PolicySample, ppo_update

LR = 1e-6


def reward(*completions, batch_items=None, prompts=None):
    return [float(len(c) % 2) for c in completions[-1]]


def fixed_samples(tok, model, n=12, seed=0):
    """Random messages with behaviour log-probs of ``model`` and +-1 advantages."""
    from c3_plugin.core.loss import token_logprobs

    rng = np.random.default_rng(seed)
    prompts = [list(map(int, rng.integers(6, 200, size=int(rng.integers(3, 9))))) for _ in range(n)]
    comps = [list(map(int, rng.integers(6, 200, size=int(rng.integers(2, 8))))) for _ in range(n)]
    old = token_logprobs(model, prompts, comps, tok.pad_token_id)
    return [PolicySample(p, c, o, float(a)) for p, c, o, a in zip(prompts, comps, old, rng.choice([-1.0, 1.0], size=n))]


def trainer(models, tok, cls=C3Trainer, args_cls=C3Config, **kw):
    ds = Dataset.from_list([{"id": f"p{i}", "prompt": f"q{i}", "question": f"q{i}", "answer": "1"} for i in range(2)])
    args = experiment_config(args_cls, num_train_epochs=1, max_new_tokens=4, instances_per_update=2,
                             agent_devices="cpu", agent_learning_rate=LR, **kw)
    return cls(agents=models, tokenizer=tok, reward_func=reward, train_dataset=ds, args=args)


def flat(model):
    return torch.cat([p.detach().float().reshape(-1) for p in model.parameters()])


def test_bf16_models_train_on_fp32_masters_and_match_the_fp32_update():
    tok = tiny_tokenizer()
    init = [tiny_model(tok, seed=s).to(torch.bfloat16) for s in (0, 1)]
    fp32 = [copy.deepcopy(m).float() for m in init]  # the same (bf16-representable) starting point in fp32
    bf16 = [copy.deepcopy(m) for m in init]
    t32, t16 = trainer(fp32, tok), trainer(bf16, tok)
    # a user's bf16 models are kept as fp32 masters, computed in bf16
    assert all(p.dtype == torch.float32 for m in t16.agents for p in m.parameters())
    assert t16.compute_dtypes == [torch.bfloat16, torch.bfloat16] and t32.compute_dtypes == [None, None]
    x = torch.tensor([[7, 8, 9]])
    assert t16.agents[0](input_ids=x).logits.dtype == torch.bfloat16
    start = [flat(m) for m in t16.agents]
    samples = {a: fixed_samples(tok, fp32[a], seed=a) for a in range(2)}
    for _ in range(3):
        t32.update_policies(samples)
        t16.update_policies(samples)
    for a in range(2):
        d16, d32 = flat(t16.agents[a]) - start[a], flat(t32.agents[a]) - start[a]
        assert (d16 != 0).float().mean() > 0.8  # bf16 weights updated in place: about 2% change at lr 1e-6
        assert (d32 != 0).float().mean() > 0.8
        cos = torch.nn.functional.cosine_similarity(d16, d32, dim=0)
        assert cos > 0.95, float(cos)
        assert (d16 - d32).norm() / d32.norm() < 0.3
        assert d16.abs().max() < 10 * LR  # the step size is Adam's, not a rounding artefact


def test_adam_state_is_fp32_and_half_precision_updates_are_refused():
    tok = tiny_tokenizer()
    tr = trainer([tiny_model(tok, seed=s).to(torch.bfloat16) for s in (0, 1)], tok)
    tr.update_policies({0: fixed_samples(tok, tr.agents[0])})
    states = [st for st in tr.optimizers[0].state.values()]
    assert states and all(st["exp_avg"].dtype == torch.float32 for st in states)
    model = tiny_model(tok).to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    with pytest.raises(ValueError, match="keep_fp32_masters"):
        ppo_update(model, opt, fixed_samples(tok, model), C3Config(), np.random.default_rng(0), tok.pad_token_id)
    with pytest.raises(ValueError, match="bfloat16"):
        keep_fp32_masters(tiny_model(tok).to(torch.float16))


def test_lora_adapters_train_in_fp32_over_a_bf16_base():
    from peft import LoraConfig, get_peft_model

    tok = tiny_tokenizer()
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    # peft would upcast the adapters itself by default; the trainer must not rely on it
    peft_model = get_peft_model(tiny_model(tok).to(torch.bfloat16), cfg, adapter_name="agent0",
                                autocast_adapter_dtype=False)
    peft_model.add_adapter("agent1", cfg, autocast_adapter_dtype=False)
    assert any(p.dtype == torch.bfloat16 for n, p in peft_model.named_parameters() if "lora_" in n)
    ds = Dataset.from_list([{"id": f"p{i}", "prompt": f"q{i}", "question": f"q{i}", "answer": "1"} for i in range(2)])
    tr = C3Trainer(agents=[peft_model, peft_model], tokenizer=tok, reward_func=reward, train_dataset=ds,
                   lora_adapters=True, args=experiment_config(C3Config, num_train_epochs=1, max_new_tokens=4,
                                                              instances_per_update=2, agent_devices="cpu",
                                                              agent_learning_rate=LR))
    lora = {n: p for n, p in peft_model.named_parameters() if "lora_" in n}
    base = {n: p for n, p in peft_model.named_parameters() if "lora_" not in n}
    assert (all(p.dtype == torch.float32 for p in lora.values())
            and all(p.dtype == torch.bfloat16 for p in base.values()))
    assert compute_dtype_of(peft_model) == torch.bfloat16
    before = {n: p.detach().clone() for n, p in lora.items()}
    for _ in range(3):
        tr.update_policies({0: fixed_samples(tok, peft_model, seed=3)})
    moved = [n for n, p in lora.items() if ".agent0." in n and not torch.equal(p, before[n])]
    frac = np.mean([(lora[n] != before[n]).float().mean().item() for n in moved])
    assert moved and frac > 0.8


def test_mappo_critic_keeps_fp32_masters_with_bf16_agents():
    tok = tiny_tokenizer()
    tr = trainer([tiny_model(tok, seed=s).to(torch.bfloat16) for s in (0, 1)], tok, MAPPOTrainer, MAPPOConfig,
                 critic_learning_rate=LR)
    critic = tr.critics[0]
    assert all(p.dtype == torch.float32 for p in critic.parameters()) and compute_dtype_of(critic) == torch.bfloat16
    states = tr.critic_states(tr.collect([{"id": "a", "question": "1+1", "prompt": "1+1", "answer": "2"}]))
    before = [p.detach().clone() for p in critic.backbone.parameters()]
    tr._critic_batch = (states, np.linspace(-1, 1, len(states)))
    tr._last_values = np.zeros((len(states), 1))
    for _ in range(3):
        tr.update_critic()
    changed = np.mean([(p != b).float().mean().item() for p, b in zip(critic.backbone.parameters(), before)])
    assert changed > 0.5
