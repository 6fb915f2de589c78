"""One agent's side of a preference pair (exact ids and value-token loss masks) and its masked
log-likelihood; the zero-dropout check the streamed graphs need."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from comlrl.trainers.preference.madpo import AgentPreferenceTensors
from comlrl.utils.distributed import unwrap_model


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


def dropout_fields(model: torch.nn.Module) -> dict[str, float]:
    """Non-zero dropout settings of ``model``: config fields (``*dropout*``, ``*pdrop``) and Dropout modules."""
    found: dict[str, float] = {}
    cfg = getattr(unwrap_model(model), "config", None)
    values = cfg.to_dict() if hasattr(cfg, "to_dict") else {}
    for k, v in values.items():
        if (("dropout" in k or k.endswith("pdrop")) and isinstance(v, (int, float)) and not isinstance(v, bool)
            and v > 0):
            found[f"config.{k}"] = float(v)
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Dropout) and mod.p > 0:
            found[f"module {name}"] = float(mod.p)
    return found
