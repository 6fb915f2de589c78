"""The policy optimizer recipe: the AdamW hyper-parameters, the learning-rate schedule and the
adaptive KL-in-reward controller of the workflow trainers.

* :func:`adam_kwargs`: AdamW's ``adam_beta1``, ``adam_beta2``, ``adam_eps`` and ``weight_decay`` (defaults:
  torch's, which CoMLRL's optimizers use) for the one optimizer factory,
  :func:`c3_plugin.scale.optimizers.make_adamw`, in one process or inside a DeepSpeed engine.
* :class:`LRSchedule`: one policy optimizer's learning rate as a function of its optimizer-step count,
  ``base_lr * lr_factor(k)`` (:func:`lr_factor`, the closed forms of Hugging Face's
  ``get_{constant,linear,cosine_with_min_lr}_schedule_with_warmup``). The run's total
  (:func:`policy_optimizer_steps`) is counted as :func:`c3_plugin.run.budget.expected_budget` counts it.
* :class:`KLController`: the KL coefficient, fixed, or adapted after every rollout batch as in
  Ziegler et al. (2019) and TRL/OpenRLHF's ``AdaptiveKLController``.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from c3_plugin.core.curriculum import epoch_rows
from c3_plugin.core.plan import parse_plan
from c3_plugin.core.registry import learned_critic
from c3_plugin.core.rollout import unique_samples

SCHEDULES = ("constant", "cosine", "linear")
KL_ESTIMATORS = ("k1", "k2", "k3")


def adam_kwargs(args: Any) -> dict[str, Any]:
    """AdamW's hyper-parameters (all but the learning rate) from a config."""
    return {"betas": (float(args.adam_beta1), float(args.adam_beta2)), "eps": float(args.adam_eps),
            "weight_decay": float(args.weight_decay)}


def lr_factor(kind: str, step: int, total: int, warmup: int, min_ratio: float = 0.0) -> float:
    """Multiplier of the base learning rate at optimizer step ``step`` (0-based) of ``total``: ``step / warmup``
    during the warm-up, then 1 (``constant``), ``min_ratio + (1 - min_ratio) (1 + cos(pi p)) / 2`` (``cosine``)
    or ``min_ratio + (1 - min_ratio) (1 - p)`` (``linear``), ``p = (step - warmup) / (total - warmup)``, capped at 1."""
    if step < warmup:
        return step / max(1, warmup)
    if kind == "constant":
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    decay = 0.5 * (1.0 + math.cos(math.pi * progress)) if kind == "cosine" else 1.0 - progress
    return min_ratio + (1.0 - min_ratio) * decay


class LRSchedule:
    """The learning rate of one policy optimizer: ``apply`` writes ``base_lr * lr_factor(steps)`` into its
    parameter groups before a step, ``advance`` counts the step. The count is all the state (checkpointed by
    CoMLRL as the trainer's ``lr_schedulers``); a resumed run rewrites the rate before its next step, also under
    DeepSpeed, whose engine restores its optimizer after the trainer state."""

    def __init__(self, base_lr: float, total_steps: int, kind: str, warmup_ratio: float = 0.0, min_ratio: float = 0.0):
        if kind not in SCHEDULES:
            raise ValueError(f"lr_scheduler must be one of {SCHEDULES}, got {kind!r}")
        self.base_lr = float(base_lr)
        self.total_steps = max(1, int(total_steps))
        self.kind = kind
        self.warmup_steps = math.ceil(self.total_steps * float(warmup_ratio))
        self.min_ratio = float(min_ratio)
        self.steps = 0

    def lr(self, step: int | None = None) -> float:
        return self.base_lr * lr_factor(self.kind, self.steps if step is None else step, self.total_steps,
                                        self.warmup_steps, self.min_ratio)

    def apply(self, optimizer: Any) -> None:
        rate = self.lr()
        for group in optimizer.param_groups:
            group["lr"] = rate

    def advance(self) -> None:
        self.steps += 1

    def state_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "total_steps": self.total_steps, "warmup_steps": self.warmup_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps = int(state["steps"])


def steps_per_ppo_epoch(args: Any, messages: int) -> int:
    """Optimizer steps one PPO epoch takes over a policy's ``messages`` of a rollout batch (all ranks together):
    ``minibatches_per_ppo_epoch`` (the equal-steps setting; fewer only when there are fewer messages), else
    ``ceil(messages / minibatch_size)``, else 1 (the whole batch in one step)."""
    if not messages:
        return 0
    k = getattr(args, "minibatches_per_ppo_epoch", None)
    if k:
        return min(int(k), int(messages))
    return math.ceil(messages / args.minibatch_size) if args.minibatch_size else 1


def policy_optimizer_steps(args: Any, workflow: Any, train: Any, groups: Sequence[Sequence[int]],
                           warmup: bool = True) -> dict[int, int]:
    """Optimizer steps each policy takes over the whole run, by the first agent of its group (``groups``: the
    agents that share one model, one optimizer): per rollout batch, ``ppo_epochs`` passes of
    :func:`steps_per_ppo_epoch` steps over the messages its agents are credited for, MAPPO's critic warm-up
    batches excluded (counted as trained with ``warmup=False``). ``train`` is the training set (or its row count)."""
    plan = parse_plan(args.plan)
    branching = plan.branching(workflow.num_decisions)
    ipu = int(args.instances_per_update)
    _, rows_per_epoch = epoch_rows(getattr(args, "curriculum", None), int(args.num_train_epochs), train)
    batches = [min(ipu, rows - s) for rows in rows_per_epoch for s in range(0, rows, ipu)]
    shared = bool(getattr(args, "share_parallel_samples", False)) and plan.kind != "independent"
    unique = unique_samples(workflow, branching, shared)
    credited = (range(workflow.num_decisions) if plan.kind == "independent"
                else plan.credit_points(workflow.num_decisions))
    critic = learned_critic(args)
    # batches that train only a critic (MAPPO's warm-up)
    warmup = critic.policy_warmup_updates if warmup and critic else 0
    out = {}
    for group in groups:
        per_instance = sum(unique[u] for u in credited
                           if workflow.roles[workflow.decision_steps[u].name].agent in group)
        out[group[0]] = sum(int(args.ppo_epochs) * steps_per_ppo_epoch(args, per_instance * size)
                            for b, size in enumerate(batches) if b >= warmup and per_instance)
    return out


def kl_per_token(logp: np.ndarray, ref_logp: np.ndarray, estimator: str = "k3") -> np.ndarray:
    """Per-token estimates of ``KL(pi || pi_ref)`` at tokens sampled from ``pi``, ``r = log pi - log pi_ref``:
    ``k1 = r``, ``k2 = r^2 / 2``, ``k3 = exp(-r) - 1 + r`` (Schulman's estimators; k3 is unbiased and >= 0)."""
    r = np.asarray(logp, dtype=np.float64) - np.asarray(ref_logp, dtype=np.float64)
    if estimator == "k1":
        return r
    if estimator == "k2":
        return 0.5 * r ** 2
    if estimator == "k3":
        return np.expm1(-r) + r
    raise ValueError(f"kl_reward_estimator must be one of {KL_ESTIMATORS}, got {estimator!r}")


class KLController:
    """The KL coefficient. Fixed without a target; with one, after each rollout batch
    ``coef *= 1 + clip(kl / target - 1, -0.2, 0.2) * n / horizon``, ``kl`` the batch's mean KL per path and
    ``n`` its env steps (paths)."""

    def __init__(self, coef: float, target: float | None = None, horizon: int = 10000):
        self.value = float(coef)
        self.target = None if target is None else float(target)
        self.horizon = int(horizon)

    def update(self, kl: float, n_steps: int) -> None:
        if self.target is None:
            return
        error = float(np.clip(kl / self.target - 1.0, -0.2, 0.2))
        self.value *= 1.0 + error * n_steps / self.horizon

    def state_dict(self) -> dict[str, float]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])
