"""The joint actor's training likelihood: log-probs of a joint completion's value tokens only
(:func:`c3_plugin.loss.masked_sequence_log_prob` on the unwrapped module, in train mode)."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ..loss import SEQUENCE_AGGREGATIONS as LOSS_AGGREGATIONS, masked_sequence_log_prob


def masked_joint_log_prob(model: Any, prompt_ids: torch.Tensor, completion_ids: torch.Tensor,
                   loss_mask: Sequence[int] | torch.Tensor, aggregation: str = "sequence_mean") -> torch.Tensor:
    """The joint completion's masked log-likelihood under ``model`` (DDP/DeepSpeed unwrapped, dropout as in
    training): every completion token conditioned on the prompt and the earlier joint tokens; only the values
    the policy chose (mask 1) enter."""
    from comlrl.utils.distributed import unwrap_model

    module = unwrap_model(model)
    module.train()
    return masked_sequence_log_prob(module, prompt_ids, completion_ids, loss_mask, aggregation)
