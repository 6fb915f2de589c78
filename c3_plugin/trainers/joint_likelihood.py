"""The joint actor's training likelihood: log-probs of a joint completion's value tokens only."""

from __future__ import annotations

from typing import Any, Sequence

import torch

LOSS_AGGREGATIONS = ("sequence_mean", "token_sum")


def masked_joint_log_prob(model: Any, prompt_ids: torch.Tensor, completion_ids: torch.Tensor,
                          loss_mask: Sequence[int] | torch.Tensor, aggregation: str = "sequence_mean") -> torch.Tensor:
    """Log-likelihood of a joint completion under ``model``, over its loss-masked tokens only.

    Every completion token is conditioned on the whole prompt and the earlier joint tokens (one
    causal pass over ``prompt + completion[:-1]``); only tokens with mask 1 (the values the policy
    chose) enter: ``token_sum`` sums their log-probs, ``sequence_mean`` averages them
    (length-normalised value log-probs). A message with no trained token gives a zero that still
    carries the graph. ``completion_ids`` are exactly the generated ids (no padding)."""
    from comlrl.utils.distributed import unwrap_model

    if aggregation not in LOSS_AGGREGATIONS:
        raise ValueError(f"loss_aggregation must be one of {LOSS_AGGREGATIONS}, got {aggregation!r}")
    module = unwrap_model(model)
    device = next(module.parameters()).device
    prompt_ids = torch.as_tensor(prompt_ids, dtype=torch.long).reshape(-1).to(device)
    completion_ids = torch.as_tensor(completion_ids, dtype=torch.long).reshape(-1).to(device)
    mask = torch.as_tensor(list(loss_mask) if not torch.is_tensor(loss_mask) else loss_mask, dtype=torch.float32).reshape(-1).to(device)
    if mask.numel() != completion_ids.numel():
        raise ValueError(f"loss mask has {mask.numel()} entries for {completion_ids.numel()} completion tokens")
    if not prompt_ids.numel():
        raise ValueError("the joint actor needs a non-empty tokenized prompt")
    if not completion_ids.numel():
        return sum(p.sum() * 0.0 for p in module.parameters() if p.requires_grad)
    module.train()
    input_ids = torch.cat([prompt_ids, completion_ids[:-1]]).unsqueeze(0)
    logits = module(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), use_cache=False).logits[0, prompt_ids.numel() - 1:]
    token_logp = logits.float().log_softmax(-1).gather(1, completion_ids[:, None]).squeeze(1)
    total = (token_logp * mask).sum()
    if aggregation == "sequence_mean":
        return total / mask.sum().clamp(min=1.0)
    return total
