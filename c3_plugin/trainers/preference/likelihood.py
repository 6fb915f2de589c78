"""One agent's side of a preference pair (exact ids and value-token loss masks) and its masked
log-likelihood; the zero-dropout check the streamed graphs need."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from comlrl.trainers.preference.madpo import AgentPreferenceTensors
from comlrl.utils.distributed import unwrap_model

from .fields import AGGREGATIONS


@dataclass
class MaskedPreferenceTensors(AgentPreferenceTensors):
    """One agent's side of a pair: prompt ids (prefill included), exact winner/loser continuation ids
    and their loss masks (1 on sampled value tokens, 0 on forced schema tokens)."""

    winner_loss_mask: torch.Tensor | None = None
    loser_loss_mask: torch.Tensor | None = None


def _allow_in_checkpoints(cls: type, *aliases: str) -> None:
    """CoMLRL's training checkpoints store only allow-listed dataclasses (MADPO's progress holds the pairs);
    ``aliases`` are further dotted names that resolve to ``cls``, so checkpoints written under them still load."""
    from comlrl.utils import checkpoint

    checkpoint._DATACLASSES.update({f"{cls.__module__}.{cls.__qualname__}", *aliases})


# the package-level name is the one checkpoints carried while the preference trainers were one module
_allow_in_checkpoints(MaskedPreferenceTensors, "c3_plugin.trainers.preference.MaskedPreferenceTensors")


def masked_sequence_log_prob(model: torch.nn.Module, prompt_ids: torch.Tensor, completion_ids: torch.Tensor,
                             loss_mask: torch.Tensor | Sequence[int] | None = None, aggregation: str = "token_sum") -> torch.Tensor:
    """log pi(completion | prompt) over exactly ``completion_ids`` (every token, the last included), each
    token weighted by ``loss_mask``; ``token_sum`` sums, ``sequence_mean`` divides by the mask's sum.
    One forward pass of ``prompt + completion[:-1]``; float32 log-softmax."""
    device = next(model.parameters()).device
    prompt_ids = torch.as_tensor(prompt_ids, dtype=torch.long).reshape(-1).to(device)
    completion_ids = torch.as_tensor(completion_ids, dtype=torch.long).reshape(-1).to(device)
    c = completion_ids.numel()
    if prompt_ids.numel() == 0:
        raise ValueError("a scored sequence needs a non-empty prompt")
    if c == 0:
        return torch.zeros((), device=device)
    mask = (torch.ones(c, device=device) if loss_mask is None
            else torch.as_tensor(loss_mask, dtype=torch.float32).reshape(-1).to(device))
    if mask.numel() != c:
        raise ValueError(f"loss mask has {mask.numel()} entries for {c} completion tokens")
    input_ids = torch.cat([prompt_ids, completion_ids[:-1]]).unsqueeze(0)
    attention = torch.ones_like(input_ids)
    try:
        logits = model(input_ids=input_ids, attention_mask=attention, use_cache=False, logits_to_keep=c).logits
    except TypeError:
        logits = model(input_ids=input_ids, attention_mask=attention, use_cache=False).logits
    logits = logits[0, -c:].float()
    logp = torch.log_softmax(logits, dim=-1).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)
    total = (logp * mask).sum()
    if aggregation == "sequence_mean":
        return total / mask.sum().clamp(min=1.0)
    if aggregation != "token_sum":
        raise ValueError(f"loss_aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    return total


def dropout_fields(model: torch.nn.Module) -> dict[str, float]:
    """Non-zero dropout settings of ``model``: config fields (``*dropout*``, ``*pdrop``) and Dropout modules."""
    found: dict[str, float] = {}
    cfg = getattr(unwrap_model(model), "config", None)
    values = cfg.to_dict() if hasattr(cfg, "to_dict") else {}
    for k, v in values.items():
        if ("dropout" in k or k.endswith("pdrop")) and isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
            found[f"config.{k}"] = float(v)
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Dropout) and mod.p > 0:
            found[f"module {name}"] = float(mod.p)
    return found
