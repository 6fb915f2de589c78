"""This process's peak memory: resident (``ru_maxrss``) and, with CUDA, allocated on its GPU. Logged with every
rollout batch (``memory/*``, docs/metrics.md) and written into the run's ``summary.json``."""

from __future__ import annotations

import resource

import torch


def peak_memory() -> dict[str, float]:
    """``peak_rss_gib`` (this process's peak resident memory) and, with CUDA, ``peak_gpu_gib`` (its peak allocated
    GPU memory, ``torch.cuda.max_memory_allocated``), in GiB."""
    out = {"peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}  # ru_maxrss is in KiB on Linux
    if torch.cuda.is_available():
        out["peak_gpu_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return out
