"""Before/after figures for training at real precision (issue: bf16 masters, bounded memory, exact tokens).

1. Share of parameters an update changes after 3 Adam steps at the paper's learning rate 1e-6, on a
   randomly initialised Llama (init std 0.02, the scale of real weights): bf16 weights updated in place
   (what a bf16-loaded model did before), bf16 compute over fp32 masters (now), and plain fp32.
2. Peak memory of the behaviour log-prob pass over many sequences with a 50k-token vocabulary: one
   forward over every sequence (before) against micro-batches (now).
3. Recorded against recomputed behaviour log-probs with a Qwen-like tokenizer (two EOS ids, the pad
   token one of them): before, the log-probs came from ``generate``'s logits with only the tokenizer's
   EOS as stop and pad tokens deleted from messages; now, every declared EOS stops a message and the
   log-probs are recomputed by the update's forward pass.

Usage: python bench/precision_memory.py
"""

from __future__ import annotations

import copy
import json

import numpy as np
import torch

LR = 1e-6


def changed_share(lr: float = LR, steps: int = 3) -> dict[str, float]:
    from transformers import LlamaConfig, LlamaForCausalLM

    from c3_plugin.core.loss import token_logprobs
    from c3_plugin.scale.precision import keep_fp32_masters
    from c3_plugin.trainers.update import PolicySample, ppo_update

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=4096, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=4, initializer_range=0.02, tie_word_embeddings=False)
    base = LlamaForCausalLM(cfg).to(torch.bfloat16)
    rng = np.random.default_rng(0)
    prompts = [list(map(int, rng.integers(0, 4096, size=16))) for _ in range(16)]
    comps = [list(map(int, rng.integers(0, 4096, size=16))) for _ in range(16)]
    old = token_logprobs(copy.deepcopy(base).float(), prompts, comps, 0)
    samples = [PolicySample(p, c, o, float(a))
               for p, c, o, a in zip(prompts, comps, old, rng.choice([-1.0, 1.0], size=16))]
    args = type("A", (), dict(ppo_epochs=1, minibatch_size=None, micro_batch_size=8, temperature=1.0, clip_eps=0.2,
                              clip_eps_high=None, max_grad_norm=1.0, loss_aggregation="token_mean",
                              reference_kl_coef=0.0))()
    start = torch.cat([p.detach().float().reshape(-1) for p in base.parameters()])
    out, deltas = {}, {}
    for name in ("bf16_in_place", "fp32_masters_bf16_compute", "fp32"):
        model = copy.deepcopy(base)
        if name == "fp32":
            model = model.float()
        elif name == "fp32_masters_bf16_compute":
            keep_fp32_masters(model)
        opt = torch.optim.AdamW(model.parameters(), lr=lr)
        for _ in range(steps):
            if name == "bf16_in_place":  # the old path: the precision guard did not exist
                _plain_step(model, opt, samples)
            else:
                ppo_update(model, opt, samples, args, np.random.default_rng(0), 0)
        deltas[name] = torch.cat([p.detach().float().reshape(-1) for p in model.parameters()]) - start
        out[f"changed_share/{name}"] = float((deltas[name] != 0).float().mean())
    out["cosine_masters_vs_fp32"] = float(torch.nn.functional.cosine_similarity(deltas["fp32_masters_bf16_compute"],
                                                                                deltas["fp32"], dim=0))
    return out


def _plain_step(model, opt, samples) -> None:
    """One token-mean policy-gradient step on the model's own (bf16) weights."""
    from c3_plugin.core.loss import sequence_logprobs

    opt.zero_grad()
    lp, mask = sequence_logprobs(model, [s.prompt_ids for s in samples], [s.completion_ids for s in samples], 0)
    adv = torch.tensor([s.advantage for s in samples]).unsqueeze(-1)
    (-(lp * adv * mask).sum() / mask.sum()).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


def logprob_memory(sequences: int = 64, micro: int = 8) -> dict[str, float]:
    from c3_plugin.run.testing import logprob_peak_bytes

    mib = 2**20
    return {"logprob_peak_mib/one_pass_all_sequences": logprob_peak_bytes(sequences, sequences) / mib,
            f"logprob_peak_mib/micro_batch_{micro}": logprob_peak_bytes(sequences, micro) / mib,
            f"logprob_peak_mib/micro_batch_{micro}_quarter_sequences": logprob_peak_bytes(sequences // 4, micro) / mib}


def logprob_gap() -> dict[str, float]:
    from c3_plugin.core.loss import sequence_logprobs
    from c3_plugin.core.protocol import Prompt, Sampling, encode_prompt
    from c3_plugin.generation.hf import HFBackend
    from c3_plugin.run.testing import two_eos_team

    tok, model = two_eos_team()
    prompts = [Prompt("abc", "R", 0), Prompt("ponmlkjih", "R", 0)]
    torch.manual_seed(0)
    gens = HFBackend(lambda a: model, [tok],
                     use_chat_template=False).generate(prompts, 16, Sampling(max_new_tokens=12, temperature=0.7))
    pids = [encode_prompt(tok, p, False) for p, row in zip(prompts, gens) for _ in row]
    flat = [g for row in gens for g in row]
    with torch.no_grad():
        lp, _ = sequence_logprobs(model, pids, [g.token_ids for g in flat], tok.pad_token_id, 0.7)
    now = max(abs(lp[r, i].item() - v) for r, g in enumerate(flat) for i, v in enumerate(g.logprobs))
    # before: stop only at the tokenizer's EOS, read log-probs from generate's logits, delete pad tokens
    ids = torch.tensor([pids[0]])
    torch.manual_seed(0)
    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=0.7, top_k=0,
                         max_new_tokens=12, num_return_sequences=16, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id, output_logits=True, return_dict_in_generate=True)
    seqs = out.sequences[:, ids.shape[1]:]
    logits = torch.stack(out.logits, 1).float() / 0.7
    step = (torch.gather(logits, -1, seqs.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, -1))
    gaps, deleted = [], 0
    for r in range(seqs.shape[0]):
        row = seqs[r].tolist()
        row = row[: row.index(tok.eos_token_id) + 1] if tok.eos_token_id in row else row
        kept = [t for t in row if t != tok.pad_token_id]
        deleted += len(row) - len(kept)
        if not kept:
            continue
        with torch.no_grad():
            re, _ = sequence_logprobs(model, [pids[0]], [kept], tok.pad_token_id, 0.7)
        gaps.extend(abs(re[0, i].item() - step[r, i].item()) for i in range(len(kept)))
    return {"logprob_gap_max/now": now, "logprob_gap_max/before": max(gaps),
            "tokens_deleted_inside_messages/before": deleted}


def main() -> None:
    torch.set_num_threads(1)
    report = {**changed_share(), **logprob_memory(), **logprob_gap()}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
