"""One agent's PPO update over a rollout batch: epochs, minibatches, micro-batches, clipping.

A sample's ``loss_mask`` (0 on tokens a grammar forced) multiplies the completion mask:
forced tokens get no loss and do not count in token means, micro-batch weights or stats;
samples with no trained token are dropped.

Samples drawn by another engine (vLLM) carry the trainer's recomputation of their log-probs
(``trainer_logprobs``) beside the engine's (``old_logprobs``, the behaviour). The update logs
their per-token mismatch (:func:`logprob_mismatch`). With ``importance_sampling_cap`` set, it
corrects for it by truncated importance sampling: the PPO ratio is taken against the trainer's
log-probs and every token's loss is weighted by ``min(pi_trainer / pi_engine, cap)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from c3_plugin.core.loss import ppo_loss, sequence_logprobs
from c3_plugin.scale.precision import check_trainable_fp32


@dataclass
class PolicySample:
    prompt_ids: list[int]  # exactly the ids the policy conditioned on at sampling time
    completion_ids: list[int]  # the message's tokens (EOS included when sampled)
    old_logprobs: list[float]  # behaviour log-probs recorded at sampling time
    advantage: float
    loss_mask: list[int] | None = None  # per completion token: 1 trained on, 0 forced schema token (None: all 1)
    trainer_logprobs: list[float] | None = None  # the trainer's log-probs at sampling time when old_logprobs are another engine's (None: the same)


def ppo_update(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, samples: Sequence[PolicySample], args: Any,
               rng: np.random.Generator, pad_id: int, ref_model: torch.nn.Module | None = None,
               params: Sequence[torch.nn.Parameter] | None = None, engine: Any = None,
               temperature: float | None = None, schedule: Any = None) -> dict[str, float]:
    """``args.ppo_epochs`` passes over ``samples``; one optimizer step per minibatch, gradients
    accumulated over micro-batches with token-count weights so the step equals one big batch.
    A learning-rate ``schedule`` (:class:`~.optim.LRSchedule`) sets the rate before every step and
    counts it after.

    With a DeepSpeed ``engine`` (data parallelism, :mod:`c3_plugin.scale.distributed`) ``samples`` are this
    rank's share: each optimizer step takes ``minibatch_size / world`` of every rank's messages (all of
    them when ``minibatch_size`` is None), the token counts that weight the loss are global, and every
    rank runs the same number of steps and micro-batches (a rank short of messages runs zero-weight
    passes), so the step equals the one-process step on the combined minibatch."""
    from c3_plugin.scale.distributed import all_sum, context

    samples = [s for s in samples if s.completion_ids and trained_tokens(s) > 0]
    world = context().world if engine is not None else 1
    if engine is not None and all_sum([len(samples)])[0] == 0 or engine is None and not samples:
        return {}
    runner = engine if engine is not None else model
    device = next(model.parameters()).device
    params = list(params) if params is not None else [p for p in model.parameters() if p.requires_grad]
    check_trainable_fp32(params, "ppo_update")
    if getattr(args, "minibatches_per_ppo_epoch", None):  # the equal-steps setting: k minibatches of every rank's share
        total = int(all_sum([len(samples)])[0]) if world > 1 else len(samples)
        steps_per_epoch = min(int(args.minibatches_per_ppo_epoch), total)
        mb = max(1, math.ceil(len(samples) / steps_per_epoch))
    else:
        mb = int(args.minibatch_size) // world if args.minibatch_size else max(len(samples), 1)
        steps_per_epoch = int(all_sum([math.ceil(len(samples) / mb)], op="max")[0]) if world > 1 else math.ceil(len(samples) / mb)
        if args.minibatch_size is None and world > 1:
            steps_per_epoch = 1
    micro = int(args.micro_batch_size)
    temperature = float(args.temperature if temperature is None else temperature)  # the temperature the samples were drawn at
    kl_coef = float(getattr(args, "reference_kl_coef", 0.0)) if ref_model is not None else 0.0
    cap = getattr(args, "importance_sampling_cap", None)
    totals: dict[str, float] = {"loss": 0.0, "clip_fraction": 0.0, "approx_kl": 0.0, "ref_kl": 0.0, "grad_norm": 0.0}
    steps = 0
    runner.train()
    filler = samples[:1] or [PolicySample([pad_id], [pad_id], [0.0], 0.0)]  # a zero-weight pass for a rank short of messages
    for _ in range(int(args.ppo_epochs)):
        order = rng.permutation(len(samples))
        for j in range(steps_per_epoch):
            batch = [samples[i] for i in order[j * mb:(j + 1) * mb]]
            n_tokens, n_seqs = sum(trained_tokens(s) for s in batch), len(batch)
            passes = math.ceil(len(batch) / micro)
            if world > 1:
                n_tokens, n_seqs, passes = (int(x) for x in (*all_sum([n_tokens, n_seqs]), all_sum([passes], op="max")[0]))
            if engine is None:
                optimizer.zero_grad(set_to_none=True)
            step_stats = {k: 0.0 for k in ("loss", "clip_fraction", "approx_kl", "ref_kl")}
            for m in range(passes):
                chunk = batch[m * micro:(m + 1) * micro]
                real = bool(chunk)
                chunk = chunk or filler
                prompts = [s.prompt_ids for s in chunk]
                comps = [s.completion_ids for s in chunk]
                new_logp, mask = sequence_logprobs(runner, prompts, comps, pad_id, temperature)
                mask = mask * _loss_masks(chunk, mask)
                old = torch.zeros_like(new_logp)
                for r, s in enumerate(chunk):
                    old[r, : len(s.old_logprobs)] = torch.as_tensor(s.old_logprobs, dtype=old.dtype)
                weights = None
                if cap is not None and any(s.trainer_logprobs is not None for s in chunk):
                    old, weights = _truncated_is(chunk, old, float(cap))
                adv = torch.tensor([s.advantage for s in chunk], dtype=new_logp.dtype, device=device)
                ref_logp = None
                if ref_model is not None and kl_coef:
                    with torch.no_grad():
                        ref_logp, _ = sequence_logprobs(ref_model, prompts, comps, pad_id, temperature)
                loss, stats = ppo_loss(new_logp, old, adv, mask, clip=args.clip_eps, aggregation=args.loss_aggregation,
                                       ref_logp=ref_logp, kl_coef=kl_coef, clip_high=args.clip_eps_high, token_weights=weights)
                weight = _chunk_weight(args.loss_aggregation, stats.tokens, n_tokens, stats.sequences, n_seqs) if real else 0.0
                if engine is None:
                    (loss * weight).backward()
                else:  # DeepSpeed averages gradients over the ranks: scale back to the global sum
                    engine.set_gradient_accumulation_boundary(m == passes - 1)
                    engine.backward(loss * (weight * world))
                if real:
                    for k in step_stats:
                        step_stats[k] += getattr(stats, k) * stats.tokens / max(n_tokens, 1)
            if engine is None:
                grad_norm = torch.nn.utils.clip_grad_norm_(params, args.max_grad_norm) if args.max_grad_norm else _norm(params)
                if not torch.isfinite(grad_norm):
                    raise FloatingPointError(f"non-finite gradient norm ({float(grad_norm)}); lower the learning rate or check the inputs")
                if schedule is not None:
                    schedule.apply(optimizer)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)  # free the gradients before the next agent's update
            else:
                if schedule is not None:
                    schedule.apply(engine.optimizer)
                engine.step()  # clips by the global norm (gradient_clipping) and zeroes the gradients
                grad_norm = torch.as_tensor(float(engine.get_global_grad_norm() or 0.0))
                if not torch.isfinite(grad_norm):
                    raise FloatingPointError(f"non-finite gradient norm ({float(grad_norm)}); lower the learning rate or check the inputs")
            if schedule is not None:
                schedule.advance()
            for k, v in step_stats.items():
                totals[k] += v
            totals["grad_norm"] += float(grad_norm)
            steps += 1
    if world > 1:  # the stats are token-weighted shares of the global step: sum them
        keys = [k for k in totals if k != "grad_norm"]
        totals.update(zip(keys, all_sum([totals[k] for k in keys])))
    out = {k: v / steps for k, v in totals.items()}
    out["optimizer_steps"] = float(steps)
    out["samples"] = float(all_sum([len(samples)])[0] if world > 1 else len(samples))
    out.update(logprob_mismatch(samples))
    return out


def logprob_mismatch(samples: Sequence[PolicySample]) -> dict[str, float]:
    """Sampler/trainer log-prob mismatch over every token of the samples that carry both:
    ``logprob_mismatch_kl``, the mean k3 estimate of KL(sampler || trainer) per token (the tokens
    are the sampler's draws), and ``logprob_mismatch_max``, the largest absolute difference.
    Empty when no sample carries the trainer's log-probs (the HF backend)."""
    pairs = [(s.old_logprobs, s.trainer_logprobs) for s in samples if s.trainer_logprobs is not None]
    if not pairs:
        return {}
    engine = torch.as_tensor([x for e, _ in pairs for x in e], dtype=torch.float64)
    trainer = torch.as_tensor([x for _, t in pairs for x in t], dtype=torch.float64)
    d = trainer - engine
    return {"logprob_mismatch_kl": float((torch.exp(d) - d - 1.0).mean()), "logprob_mismatch_max": float(d.abs().max())}


def _truncated_is(chunk: Sequence[PolicySample], engine: torch.Tensor, cap: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(old, weights)`` ``[B, T]``: the trainer's log-probs (the engine's where a sample has none) and the
    truncated importance weights ``min(exp(trainer - engine), cap)`` (1 where a sample has none)."""
    old = engine.clone()
    for r, s in enumerate(chunk):
        if s.trainer_logprobs is not None:
            old[r, : len(s.trainer_logprobs)] = torch.as_tensor(s.trainer_logprobs, dtype=old.dtype)
    return old, torch.exp(old - engine).clamp(max=cap)


def trained_tokens(sample: PolicySample) -> int:
    """Tokens of the sample that carry loss (all of them without a loss mask)."""
    if sample.loss_mask is None:
        return len(sample.completion_ids)
    if len(sample.loss_mask) != len(sample.completion_ids):
        raise ValueError(f"loss_mask has {len(sample.loss_mask)} entries for {len(sample.completion_ids)} completion tokens; "
                         "record one 0/1 per generated token")
    return int(sum(sample.loss_mask))


def _loss_masks(chunk: Sequence[PolicySample], like: torch.Tensor) -> torch.Tensor:
    """``[B, T]`` per-token loss masks of a micro-batch (1 where a sample has none)."""
    out = torch.ones_like(like)
    for r, s in enumerate(chunk):
        if s.loss_mask is not None:
            out[r, : len(s.loss_mask)] = torch.as_tensor(s.loss_mask, dtype=out.dtype)
    return out


def _chunk_weight(aggregation: str, chunk_tokens: int, batch_tokens: int, chunk_seqs: int, batch_seqs: int) -> float:
    """Weight of one micro-batch's loss so that the accumulated gradient equals the full minibatch's."""
    if aggregation == "token_mean":
        return chunk_tokens / max(batch_tokens, 1)
    return chunk_seqs / max(batch_seqs, 1)


def _norm(params: Sequence[torch.nn.Parameter]) -> torch.Tensor:
    grads = [p.grad.detach().norm() for p in params if p.grad is not None]
    return torch.norm(torch.stack(grads)) if grads else torch.tensor(0.0)
