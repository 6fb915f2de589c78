"""What a workflow trainer's rollout batch sums, gathers or averages over the ranks under data parallelism.

Every function here is a collective: every rank calls it, with or without instances in the batch. On one
process each returns the local value.
"""

from __future__ import annotations

from typing import Any, Mapping, MutableMapping

import numpy as np

from c3_plugin.scale.distributed import DistContext, all_sum, gather

RANK_COUNTS = ("/groups", "/split_half_groups", "/split_half_excluded")  # per-rank diagnostic counts, summed over ranks
SUMMED = ("budget/env_steps", "budget/messages", "budget/tokens_generated")  # this batch's per-rank counts
MAXED = ("memory/peak_",)  # per-rank peaks: the job's is the largest rank's


def global_batch_scaling(adv: np.ndarray, mode: str, eps: float = 1e-6) -> np.ndarray:
    """``batch_scale`` / ``batch_zscore`` (:func:`c3_plugin.core.credit.normalize_advantages`) with the mean and
    population std of every rank's advantages."""
    n, total, squares = all_sum([adv.size, float(adv.sum()), float((adv ** 2).sum())])
    if n == 0:
        return adv.copy()
    mean = total / n
    std = max(float(np.sqrt(max(squares / n - mean ** 2, 0.0))), eps)
    return (adv - mean) / std if mode == "batch_zscore" else adv / std


def add_budget(totals: MutableMapping[str, int], budget: Mapping[str, Any]) -> None:
    """Add every rank's ``budget`` (a rollout's ``budget.totals()``; empty without a rollout) to ``totals``."""
    keys = sorted(totals)
    for k, v in zip(keys, all_sum([budget.get(k, 0) for k in keys])):
        totals[k] += int(v)


def env_steps(leaves: Any) -> int:
    """The env steps of every rank's rollout (``rollout.budget.leaves``; 0 without a rollout)."""
    return int(all_sum([np.sum(leaves)])[0])


def concatenated(values: np.ndarray | None) -> np.ndarray:
    """Every rank's ``values`` flattened and concatenated in rank order (None: this rank has none)."""
    mine = np.asarray(values, dtype=float).reshape(-1).tolist() if values is not None else []
    return np.concatenate([np.asarray(v, dtype=float) for v in gather(mine)])


def combine_ranks(metrics: dict[str, Any], dist: DistContext) -> dict[str, Any]:
    """Under data parallelism: per-rank counts (this batch's ``budget/env_steps``, ``budget/messages``,
    ``budget/tokens_generated``, and the diagnostics' group counts) are summed over the ranks, every other
    key is its mean over the ranks that report it (budget totals, rewards and advantages are already
    global, the same on every rank; per-rank diagnostics become their mean); W&B media are rank 0's."""
    if not dist.enabled:
        return metrics
    numeric = {k: float(v) for k, v in metrics.items()
               if isinstance(v, (int, float, np.number)) and np.isfinite(float(v))}
    media = {k: v for k, v in metrics.items() if k not in numeric and dist.is_main}
    return {**merge_rank_rows(gather(numeric)), **media}


def merge_rank_rows(rows: list[dict[str, float]]) -> dict[str, float]:
    """One row from every rank's numeric metrics: the per-rank counts summed, the peaks (``memory/peak_*``) their
    maximum, every other key its mean over the ranks that report it."""
    merged: dict[str, list[float]] = {}
    for row in rows:
        for k, v in row.items():
            merged.setdefault(k, []).append(v)
    return {k: float(np.sum(v) if k in SUMMED or k.endswith(RANK_COUNTS) else np.max(v) if k.startswith(MAXED)
                     else np.mean(v)) for k, v in merged.items()}
