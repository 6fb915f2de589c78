"""What a rollout batch writes: its metrics row (rewards, advantages, budget totals, the update's stats, the
rollout's diagnostics and CoMLRL's ``turn_<t>/*``) and its traces (``example_trace.json``, ``traces.jsonl``)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from c3_plugin.core.rollout import Rollout, credited_path
from c3_plugin.core.trace import write_jsonl
from c3_plugin.scale.peak_memory import peak_memory
from c3_plugin.trainers import ranks
from c3_plugin.trainers.turns import turn_metrics


def batch_metrics(trainer: Any, rollout: Rollout | None, task_rewards: np.ndarray | None, advantages: np.ndarray,
                   n_items: int, update: dict[str, float]) -> dict[str, Any]:
    """The batch's metrics on this rank: rewards and advantages over every rank, the budget totals, the
    ``update``'s (its stats, the KL reward's and the times), the rollout's diagnostics, and CoMLRL's ``turn_<t>/*``
    (published to W&B at CoMLRL's steps: :func:`.cadence.wandb_rows`)."""
    rewards, adv = ranks.concatenated(task_rewards), ranks.concatenated(advantages)
    metrics = {"env_step": float(trainer.env_step), "train/update_step": float(trainer.update_step),
               "train/reward_mean": float(rewards.mean()), "train/reward_std": float(rewards.std()),
               **{f"budget/total_{k}": float(v) for k, v in trainer.totals.items()}, **update,
               **{f"memory/{k}": v for k, v in peak_memory().items()}}
    if len(adv):
        metrics.update({"train/advantage_mean": float(adv.mean()), "train/advantage_std": float(adv.std()),
                        "train/advantage_abs_mean": float(np.abs(adv).mean())})
    if rollout is not None:
        metrics.update({k: v for k, v in trainer.rollout_metrics(rollout).items() if k not in metrics})
    if trainer.turns is not None and rollout is not None:
        metrics.update(turn_metrics(rollout.turn_rewards))
    else:
        metrics.update({"turn_1/reward_mean": float(rewards.mean()),
                        "turn_1/expected_return": float(rewards.reshape(n_items, -1).mean(1).mean())})
    return metrics


def write_example_trace(trainer: Any, rollout: Rollout, credited: list[tuple[np.ndarray, np.ndarray]]) -> None:
    """``example_trace.json``: the first batch's first root-to-leaf path with each message's credit
    (:func:`c3_plugin.core.rollout.credited_path`), which the dashboard shows."""
    example = {"update_step": trainer.update_step, "env_step": trainer.env_step, **credited_path(rollout, credited)}
    trainer.run_dir.mkdir(parents=True, exist_ok=True)
    (trainer.run_dir / "example_trace.json").write_text(json.dumps(example, indent=2, default=str), encoding="utf-8")



def append_trace(trainer: Any, rollout: Rollout) -> None:
    """Append the batch's trace to ``traces.jsonl`` (``traces.rank<r>.jsonl`` per rank under data parallelism)."""
    path = trainer.run_dir / ("traces.jsonl" if not trainer.dist.enabled else f"traces.rank{trainer.dist.rank}.jsonl")
    tmp = path.with_suffix(".batch.jsonl")
    write_jsonl(rollout.entries, tmp)
    with path.open("a", encoding="utf-8") as out:
        out.write(tmp.read_text(encoding="utf-8"))
    tmp.unlink()
