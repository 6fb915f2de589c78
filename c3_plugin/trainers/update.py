"""The PPO update of a rollout batch: one agent's (:func:`ppo_update`: epochs, minibatches, micro-batches,
clipping) and every policy's (:func:`update_policies`).

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

import functools
import math
import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from c3_plugin.core.loss import ppo_loss, sequence_logprobs
from c3_plugin.scale.distributed import all_sum, context, gathered
from c3_plugin.scale.precision import check_trainable_fp32
from c3_plugin.trainers.optimizer_step import optimizer_step


@dataclass
class PolicySample:
    prompt_ids: list[int]  # exactly the ids the policy conditioned on at sampling time
    completion_ids: list[int]  # the message's tokens (EOS included when sampled)
    old_logprobs: list[float]  # behaviour log-probs recorded at sampling time
    advantage: float
    loss_mask: list[int] | None = None  # per completion token: 1 trained on, 0 forced schema token (None: all 1)
    # the trainer's log-probs at sampling time when old_logprobs are another engine's (None: the same)
    trainer_logprobs: list[float] | None = None


def ppo_update(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, samples: Sequence[PolicySample],
               args: Any, rng: np.random.Generator, pad_id: int, ref_model: torch.nn.Module | None = None,
               params: Sequence[torch.nn.Parameter] | None = None, engine: Any = None,
               temperature: float | None = None, schedule: Any = None) -> dict[str, float]:
    """``args.ppo_epochs`` passes over ``samples``; one optimizer step per minibatch, gradients
    accumulated over micro-batches with token-count weights so the step equals one big batch.
    A learning-rate ``schedule`` (:class:`~.optim.LRSchedule`) sets the rate before every step and
    counts it after. The step is ``optimizer``'s, or a DeepSpeed ``engine``'s
    (:func:`~.optimizer_step.optimizer_step`).

    With a DeepSpeed ``engine`` (data parallelism, :mod:`c3_plugin.scale.distributed`) ``samples`` are this
    rank's share: each optimizer step takes ``minibatch_size / world`` of every rank's messages (all of
    them when ``minibatch_size`` is None), the token counts that weight the loss are global, and every
    rank runs the same number of steps and micro-batches (a rank short of messages runs zero-weight
    passes), so the step equals the one-process step on the combined minibatch. The counts are reduced
    over the ranks before the first step (:func:`plan_minibatches`), the stats after the last."""
    samples = [s for s in samples if s.completion_ids and trained_tokens(s) > 0]
    params = list(params) if params is not None else [p for p in model.parameters() if p.requires_grad]
    step = optimizer_step(model, optimizer, engine, params, args.max_grad_norm, schedule)
    total = int(_over_ranks([len(samples)], step.world)[0])
    if total == 0:
        return {}
    check_trainable_fp32(params, "ppo_update")
    # the temperature the samples were drawn at
    temperature = float(args.temperature if temperature is None else temperature)
    kl_coef = float(getattr(args, "reference_kl_coef", 0.0)) if ref_model is not None else 0.0
    loss_of = functools.partial(_micro_batch_loss, step.module, args=args, pad_id=pad_id, temperature=temperature,
                                ref_model=ref_model if kl_coef else None, kl_coef=kl_coef)
    # a zero-weight pass for a rank short of messages
    filler = samples[:1] or [PolicySample([pad_id], [pad_id], [0.0], 0.0)]
    micro = int(args.micro_batch_size)
    totals: dict[str, float] = {"loss": 0.0, "clip_fraction": 0.0, "approx_kl": 0.0, "ref_kl": 0.0, "grad_norm": 0.0}
    minibatches = plan_minibatches(samples, args, rng, step.world)
    step.module.train()
    for batch, n_tokens, n_seqs, passes in minibatches:
        step.zero_grad(passes)
        step_stats = {k: 0.0 for k in ("loss", "clip_fraction", "approx_kl", "ref_kl")}
        for m in range(passes):
            chunk = batch[m * micro:(m + 1) * micro]
            loss, stats = loss_of(chunk or filler)
            step.backward(loss, _chunk_weight(args.loss_aggregation, stats.tokens, n_tokens, stats.sequences, n_seqs)
                          if chunk else 0.0)
            for k in step_stats if chunk else ():
                step_stats[k] += getattr(stats, k) * stats.tokens / max(n_tokens, 1)
        grad_norm = step.step()
        for k, v in step_stats.items():
            totals[k] += v
        totals["grad_norm"] += grad_norm
    keys = [k for k in totals if k != "grad_norm"]  # token-weighted shares of the global step: summed over the ranks
    totals.update(zip(keys, _over_ranks([totals[k] for k in keys], step.world)))
    out = {k: v / len(minibatches) for k, v in totals.items()}
    out["optimizer_steps"] = float(len(minibatches))
    out["samples"] = float(total)
    out.update(logprob_mismatch(samples))
    return out


def plan_minibatches(samples: Sequence[PolicySample], args: Any, rng: np.random.Generator,
                     world: int) -> list[tuple[list[PolicySample], int, int, int]]:
    """Every optimizer step of the update, epoch by epoch: ``(this rank's messages, trained tokens and messages
    of the step over every rank, micro-batch passes every rank runs)``. The ranks agree on the number of steps
    (the most any rank needs; one per epoch when ``minibatch_size`` is None) and on each step's passes; the
    collectives (three, whatever the number of steps) run here, none in the loss loop. Under the equal-steps setting
    (``minibatches_per_ppo_epoch: k``) every epoch takes ``k`` steps (fewer only with fewer messages in all), each
    rank's share split into ``k`` minibatches of sizes that differ by at most one (:func:`even_split`), over the ranks
    too (one more sum: every rank's message count), so no step trains on nothing."""
    if getattr(args, "minibatches_per_ppo_epoch", None):
        rank = context().rank if world > 1 else 0
        per_rank = [int(x) for x in _over_ranks([len(samples) if r == rank else 0 for r in range(world)], world)]
        steps_per_epoch = min(int(args.minibatches_per_ppo_epoch), sum(per_rank))
        sizes = even_split(len(samples), steps_per_epoch, offset=sum(per_rank[:rank]))
    else:
        mb = int(args.minibatch_size) // world if args.minibatch_size else max(len(samples), 1)
        steps_per_epoch = math.ceil(len(samples) / mb)
        if world > 1:
            steps_per_epoch = 1 if args.minibatch_size is None else int(_over_ranks([steps_per_epoch], world, "max")[0])
        sizes = [min(mb, max(len(samples) - j * mb, 0)) for j in range(steps_per_epoch)]
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    orders = [rng.permutation(len(samples)) for _ in range(int(args.ppo_epochs))]
    batches = [[samples[i] for i in order[starts[j]:starts[j + 1]]] for order in orders for j in range(steps_per_epoch)]
    counts = _over_ranks([x for b in batches for x in (sum(trained_tokens(s) for s in b), len(b))], world)
    passes = _over_ranks([math.ceil(len(b) / int(args.micro_batch_size)) for b in batches], world, "max")
    return [(b, int(counts[2 * j]), int(counts[2 * j + 1]), int(passes[j])) for j, b in enumerate(batches)]


def even_split(n: int, k: int, offset: int = 0) -> list[int]:
    """``n`` messages in ``k`` minibatches whose sizes differ by at most one (``[2, 1, 1, 1]`` for 5 in 4, never
    ``[2, 2, 1, 0]``, a step that trains on nothing). The larger ones start at minibatch ``offset % k``: with
    ``offset`` = the messages of the ranks before this one, the ranks' larger minibatches follow one another round
    the ``k`` steps, so every step's messages over all ranks differ by at most one too, and none is empty when there
    are at least ``k`` messages in all."""
    if k <= 0:
        return []
    base, extra = divmod(int(n), int(k))
    return [base + ((j - offset) % k < extra) for j in range(k)]


def _over_ranks(values: Sequence[float], world: int, op: str = "sum") -> list[float]:
    """``values`` summed (or their maximum) over the ranks of a step; as they are on one process."""
    return all_sum(values, op=op) if world > 1 else [float(v) for v in values]


def _micro_batch_loss(module: Any, chunk: Sequence[PolicySample], *, args: Any, pad_id: int, temperature: float,
                      ref_model: torch.nn.Module | None, kl_coef: float) -> tuple[torch.Tensor, Any]:
    """The PPO loss of one micro-batch and its stats (:func:`c3_plugin.core.loss.ppo_loss`): the trained tokens'
    mask, the behaviour log-probs (the trainer's under truncated importance sampling, whose weights then scale
    each token) and the reference log-probs of a token-level KL."""
    prompts, comps = [s.prompt_ids for s in chunk], [s.completion_ids for s in chunk]
    new_logp, mask = sequence_logprobs(module, prompts, comps, pad_id, temperature)
    mask = mask * _loss_masks(chunk, mask)
    old = torch.zeros_like(new_logp)
    for r, s in enumerate(chunk):
        old[r, : len(s.old_logprobs)] = torch.as_tensor(s.old_logprobs, dtype=old.dtype)
    weights = None
    cap = getattr(args, "importance_sampling_cap", None)
    if cap is not None and any(s.trainer_logprobs is not None for s in chunk):
        old, weights = _truncated_is(chunk, old, float(cap))
    adv = torch.tensor([s.advantage for s in chunk], dtype=new_logp.dtype, device=new_logp.device)
    ref_logp = None
    if ref_model is not None:
        with torch.no_grad():
            ref_logp, _ = sequence_logprobs(ref_model, prompts, comps, pad_id, temperature)
    return ppo_loss(new_logp, old, adv, mask, clip=args.clip_eps, aggregation=args.loss_aggregation, ref_logp=ref_logp,
                    kl_coef=kl_coef, clip_high=args.clip_eps_high, token_weights=weights)


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
        raise ValueError(f"loss_mask has {len(sample.loss_mask)} entries for {len(sample.completion_ids)} completion "
                         "tokens; record one 0/1 per generated token")
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



def update_policies(trainer: Any, samples: Mapping[int, list[PolicySample]]) -> dict[str, float]:
    """A workflow trainer's update of a rollout batch (``WorkflowTrainer.update_policies``): one
    :func:`ppo_update` per trained policy (per agent; a model shared by several roles once, on all their messages
    together, logged under its first agent), ``train/agent<a>/*`` and their means over the policies ``train/*``;
    then a vLLM engine gets the new weights (``time/sync_s``). ``train/agent<a>/lr`` is the learning rate of the
    update's last optimizer step. Under DeepSpeed every rank joins every policy's update."""
    metrics: dict[str, float] = {}
    agg: dict[str, list[float]] = {}
    engine = getattr(trainer.backend, "sync", None) is not None
    if engine:
        trainer.backend.sleep()
    schedules = getattr(trainer, "lr_schedulers", None)
    use_ref = getattr(trainer.args, "reference_kl_enabled", False) and trainer.reference_models
    for group in getattr(trainer, "policy_groups", [[a] for a in range(trainer.num_agents)]):
        agent = group[0]
        batch = [s for a in group for s in samples.get(a, [])]
        if agent in trainer.frozen or not batch and trainer.engines is None:
            continue
        ds = trainer.engines[agent] if trainer.engines is not None else None
        optimizer = trainer.optimizers[agent] if ds is None else ds.optimizer
        ref = trainer.reference_models[agent] if use_ref else None
        stats = ppo_update(trainer.policy(agent), optimizer if ds is None else None, batch, trainer.args, trainer.rng,
                           pad_id=trainer._pad_id(agent), ref_model=ref, params=trainer._trainable_parameters(agent),
                           engine=ds, temperature=trainer.agent_temperature[agent],
                           schedule=schedules[agent] if schedules is not None else None)
        if stats:
            stats["lr"] = float(optimizer.param_groups[0]["lr"])
        for k, v in stats.items():
            metrics[f"train/agent{agent}/{k}"] = v
            if k != "lr":
                agg.setdefault(k, []).append(v)
    metrics.update({f"train/{k}": float(np.mean(v)) for k, v in agg.items()})
    if engine:
        t0 = time.perf_counter()
        trainer.backend.wake_up()
        with gathered(trainer.engines, trainer.zero3):  # ZeRO-3: the engine gets whole weights
            trainer.backend.sync()
        metrics["time/sync_s"] = time.perf_counter() - t0
    return metrics
