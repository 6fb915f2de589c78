"""MARLHF's joint reward model: a transformer backbone (no LM vocabulary logits) with a scalar head."""

from __future__ import annotations

import torch
from comlrl.utils.distributed import unwrap_model


class BackboneRewardModel(torch.nn.Module):
    """A transformer backbone without LM vocabulary logits and a scalar head on the last non-pad token."""

    def __init__(self, backbone: torch.nn.Module):
        super().__init__()
        self.backbone = backbone
        hidden = getattr(backbone.config, "hidden_size", None) or getattr(backbone.config, "n_embd", None)
        if hidden is None:
            raise ValueError("could not infer the reward backbone's hidden size")
        p = next(backbone.parameters())
        self.reward_head = torch.nn.Linear(int(hidden), 1).to(device=p.device, dtype=torch.float32)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        h = self.backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                          use_cache=False).last_hidden_state
        positions = torch.arange(attention_mask.shape[1], device=h.device).expand_as(attention_mask)
        last = positions.masked_fill(attention_mask == 0, -1).max(dim=1).values.clamp(min=0)
        pooled = h[torch.arange(h.shape[0], device=h.device), last]
        return self.reward_head(pooled.float()).squeeze(-1)


def backbone_of(model: torch.nn.Module) -> torch.nn.Module:
    model = unwrap_model(model)
    base = getattr(model, "base_model", None)
    if base is None or base is model:
        base = getattr(model, "model", None)
    if base is None:
        raise ValueError(f"cannot find the backbone of {type(model).__name__} (no base_model / model attribute)")
    return base
