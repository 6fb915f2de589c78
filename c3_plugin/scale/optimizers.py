"""The one optimizer factory: AdamW for every trained module (each policy, the critics, the MARLHF reward
model), torch's or DeepSpeed's CPU Adam when a ZeRO engine offloads its optimizer state."""

from __future__ import annotations

from typing import Iterable

import torch


def make_adamw(params: Iterable[torch.nn.Parameter], lr: float, *, betas: tuple[float, float] = (0.9, 0.999),
               eps: float = 1e-8, weight_decay: float = 0.01, cpu_offload: bool = False) -> torch.optim.Optimizer:
    """AdamW (decoupled weight decay) over ``params``; the defaults are torch's. ``cpu_offload``: DeepSpeed's
    ``DeepSpeedCPUAdam`` in AdamW mode, for an engine whose optimizer state lives in host memory."""
    params = list(params)
    if cpu_offload:
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        return DeepSpeedCPUAdam(params, lr=float(lr), betas=betas, eps=eps, weight_decay=weight_decay, adamw_mode=True)
    return torch.optim.AdamW(params, lr=float(lr), betas=betas, eps=eps, weight_decay=weight_decay)
