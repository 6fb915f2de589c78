"""The policy loss: PPO's clipped surrogate on token log-probs, one padded forward pass per batch.

Layout of a batch: prompts left-padded to a common width ``P``, completions right-padded
to ``T``, so every completion starts at column ``P`` and its log-probs are one contiguous
slice of the logits (only the last ``T + 1`` positions are projected onto the vocabulary).
The message's advantage is broadcast over its tokens; padding is masked; the EOS token
is a token of the message. Tokens forced by a grammar (a sample's ``loss_mask`` 0) are
masked like padding by the caller: no loss, and not counted in means, clip fractions or KL.

Aggregations: ``token_mean`` averages over every trained token of the batch;
``sequence_mean`` averages each message's trained tokens (for a JSON skeleton: its value
tokens, i.e. length-normalised value log-probs) and then the messages; ``token_sum`` sums
a message's tokens and averages over messages. Rows with no trained token are left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

AGGREGATIONS = ("token_mean", "sequence_mean", "token_sum")


def pad_batch(prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]], pad_id: int):
    """``(input_ids, attention_mask, completion_mask)``; prompts left-padded, completions right-padded."""
    width = max(len(p) for p in prompt_ids)
    t = max(1, max(len(c) for c in completion_ids))
    b = len(prompt_ids)
    input_ids = torch.full((b, width + t), pad_id, dtype=torch.long)
    attention = torch.zeros((b, width + t), dtype=torch.long)
    cmask = torch.zeros((b, t), dtype=torch.float32)
    for r, (p, c) in enumerate(zip(prompt_ids, completion_ids)):
        input_ids[r, width - len(p):width] = torch.as_tensor(list(p), dtype=torch.long)
        input_ids[r, width:width + len(c)] = torch.as_tensor(list(c), dtype=torch.long)
        attention[r, width - len(p):width + len(c)] = 1
        cmask[r, : len(c)] = 1.0
    return input_ids, attention, cmask


def sequence_logprobs(model: torch.nn.Module, prompt_ids: Sequence[Sequence[int]],
                      completion_ids: Sequence[Sequence[int]], pad_id: int,
                      temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probs ``[B, T]`` of the completions under ``model`` and their mask ``[B, T]``."""
    device = next(model.parameters()).device
    input_ids, attention, cmask = pad_batch(prompt_ids, completion_ids, pad_id)
    input_ids, attention, cmask = input_ids.to(device), attention.to(device), cmask.to(device)
    t = cmask.shape[1]
    position_ids = (attention.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=input_ids, attention_mask=attention, position_ids=position_ids,
                   logits_to_keep=t + 1, use_cache=False).logits[:, :-1].float()
    logits = logits[:, -t:]
    if temperature != 1.0:
        logits = logits / temperature
    targets = input_ids[:, -t:]
    logp = torch.gather(logits, -1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, -1)
    return logp * cmask, cmask


# one message's masked log-likelihood: the mean or the sum of its tokens
SEQUENCE_AGGREGATIONS = ("sequence_mean", "token_sum")


def masked_sequence_log_prob(model: torch.nn.Module, prompt_ids: Sequence[int] | torch.Tensor,
                             completion_ids: Sequence[int] | torch.Tensor,
                             loss_mask: Sequence[int] | torch.Tensor | None = None,
                             aggregation: str = "token_sum") -> torch.Tensor:
    """log pi(completion | prompt) of one message over exactly ``completion_ids`` (the last token included), each
    token weighted by ``loss_mask`` (None: every token; 0 on forced schema tokens): ``token_sum`` sums,
    ``sequence_mean`` divides by the mask's sum. The same forward pass and float32 log-softmax as the PPO loss
    (:func:`sequence_logprobs`, a batch of one). An empty completion gives a zero that still carries the graph."""
    if aggregation not in SEQUENCE_AGGREGATIONS:
        raise ValueError(f"loss_aggregation must be one of {SEQUENCE_AGGREGATIONS}, got {aggregation!r}")
    device = next(model.parameters()).device
    prompt = [int(x) for x in torch.as_tensor(prompt_ids, dtype=torch.long).reshape(-1).tolist()]
    completion = [int(x) for x in torch.as_tensor(completion_ids, dtype=torch.long).reshape(-1).tolist()]
    if not prompt:
        raise ValueError("a scored sequence needs a non-empty tokenized prompt")
    mask = (torch.ones(len(completion)) if loss_mask is None else
            torch.as_tensor(loss_mask if torch.is_tensor(loss_mask) else list(loss_mask),
                            dtype=torch.float32).reshape(-1))
    if mask.numel() != len(completion):
        raise ValueError(f"loss mask has {mask.numel()} entries for {len(completion)} completion tokens")
    if not completion:
        zero = torch.zeros((), device=device)
        if torch.is_grad_enabled():
            zero = zero + sum((p.sum() * 0.0 for p in model.parameters() if p.requires_grad), zero)
        return zero
    logp, _ = sequence_logprobs(model, [prompt], [completion], pad_id=0)
    total = (logp[0] * mask.to(logp.device)).sum()
    return total / mask.sum().clamp(min=1.0) if aggregation == "sequence_mean" else total


@torch.no_grad()
def token_logprobs(model: torch.nn.Module, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]],
                   pad_id: int, temperature: float = 1.0, micro_batch_size: int = 8) -> list[list[float]]:
    """Per-sequence token log-probs of the completions, ``micro_batch_size`` sequences per forward
    pass: full-vocabulary logits exist for one micro-batch at a time, whatever the number of sequences."""
    if micro_batch_size < 1:
        raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
    out: list[list[float]] = []
    for s in range(0, len(completion_ids), micro_batch_size):
        comps = completion_ids[s:s + micro_batch_size]
        lp, _ = sequence_logprobs(model, prompt_ids[s:s + micro_batch_size], comps, pad_id, temperature)
        lp = lp.float().cpu()
        out.extend(lp[r, : len(c)].tolist() for r, c in enumerate(comps))
        del lp
    return out


@dataclass
class LossStats:
    loss: float
    clip_fraction: float
    approx_kl: float  # mean of the k3 estimate of KL(behaviour || current) over tokens
    ref_kl: float  # mean of the k3 estimate of KL(current || reference) over tokens (0 without a reference)
    ratio_mean: float
    tokens: int  # trained (mask-1) tokens
    sequences: int  # rows with at least one trained token


def ppo_loss(new_logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
             clip: float = 0.2, aggregation: str = "token_mean", ref_logp: torch.Tensor | None = None,
             kl_coef: float = 0.0, clip_high: float | None = None,
             token_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, LossStats]:
    """Clipped surrogate ``-min(r A, clip(r, 1-eps, 1+eps_high) A)`` per token, times ``token_weights``
    when given (truncated importance weights), plus ``kl_coef`` times the k3 estimate of KL to a
    reference; aggregated over valid tokens (``token_mean`` by default)."""
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"unknown loss aggregation {aggregation!r}; use one of {AGGREGATIONS}")
    high = clip if clip_high is None else clip_high
    adv = advantages.to(new_logp.dtype).unsqueeze(-1)
    log_ratio = (new_logp - old_logp) * mask
    ratio = torch.exp(log_ratio)
    per_token = -torch.minimum(ratio * adv, torch.clamp(ratio, 1.0 - clip, 1.0 + high) * adv)
    if token_weights is not None:
        per_token = per_token * token_weights.to(per_token.dtype)
    ref_kl = torch.zeros_like(per_token)
    if ref_logp is not None and kl_coef:
        d = (ref_logp - new_logp) * mask
        ref_kl = torch.exp(d) - d - 1.0
        per_token = per_token + kl_coef * ref_kl
    per_token = per_token * mask
    n_tok = mask.sum().clamp(min=1.0)
    row_tokens = mask.sum(-1)
    n_seq = int((row_tokens > 0).sum())
    if aggregation == "token_mean":
        loss = per_token.sum() / n_tok
    elif aggregation == "sequence_mean":
        loss = (per_token.sum(-1) / row_tokens.clamp(min=1.0)).sum() / max(1, n_seq)
    else:
        loss = per_token.sum() / max(1, n_seq)
    with torch.no_grad():
        clipped = ((ratio > 1.0 + high) & (adv > 0)) | ((ratio < 1.0 - clip) & (adv < 0))
        k3 = torch.exp(-log_ratio) + log_ratio - 1.0
        stats = LossStats(loss=float(loss), clip_fraction=float((clipped.float() * mask).sum() / n_tok),
                          approx_kl=float((k3 * mask).sum() / n_tok), ref_kl=float((ref_kl * mask).sum() / n_tok),
                          ratio_mean=float((ratio * mask).sum() / n_tok), tokens=int(mask.sum()), sequences=n_seq)
    return loss, stats
