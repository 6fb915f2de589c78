"""The checks of a workflow config's own fields, run when a ``WorkflowConfig`` is built (its ``__post_init__``,
after MAGRPOConfig's): the CoMLRL fields turned into the workflow fields (:func:`.comlrl_compat.resolve_comlrl_fields`),
then every workflow field's range, each refusal naming the field and the fix."""

from __future__ import annotations

from typing import Any

from c3_plugin.core.credit import NORMALIZATIONS
from c3_plugin.core.curriculum import parse_curriculum
from c3_plugin.core.plan import parse_plan
from c3_plugin.trainers.comlrl_compat import resolve_comlrl_fields
from c3_plugin.trainers.optim import KL_ESTIMATORS, SCHEDULES


def check_workflow_config(cfg: Any) -> None:
    """Resolve and check ``cfg``'s workflow fields in place (``WorkflowConfig.__post_init__``)."""
    check_recipe(cfg)
    # advantage_normalization, rollout_buffer_size, train_batch_size, joint_mode, discount, ...
    resolve_comlrl_fields(cfg)
    if cfg.advantage_scaling not in NORMALIZATIONS:
        raise ValueError(f"advantage_scaling must be one of {NORMALIZATIONS}, got {cfg.advantage_scaling!r}")
    for name in ("instances_per_update", "ppo_epochs", "micro_batch_size"):
        if int(getattr(cfg, name)) < 1:
            raise ValueError(f"{name} must be >= 1, got {getattr(cfg, name)}")
    if cfg.minibatch_size is not None and cfg.minibatch_size < 1:
        raise ValueError(f"minibatch_size must be >= 1 or None, got {cfg.minibatch_size}")
    if cfg.minibatches_per_ppo_epoch is not None:
        if cfg.minibatches_per_ppo_epoch < 1:
            raise ValueError("minibatches_per_ppo_epoch must be >= 1 or None, got "
                             f"{cfg.minibatches_per_ppo_epoch}")
        if cfg.minibatch_size is not None:
            raise ValueError(f"minibatch_size ({cfg.minibatch_size} messages per step) and "
                             f"minibatches_per_ppo_epoch ({cfg.minibatches_per_ppo_epoch} steps per PPO epoch) "
                             "both size the minibatches: keep one (minibatch_size: null for the "
                             "equal-steps setting)")
    if not 0 < cfg.clip_eps < 1:
        raise ValueError(f"clip_eps must be in (0, 1), got {cfg.clip_eps}")
    if cfg.generation_backend not in ("hf", "vllm"):
        raise ValueError(f"generation_backend must be 'hf' or 'vllm', got {cfg.generation_backend!r}")
    if cfg.importance_sampling_cap is not None and not (cfg.generation_backend == "vllm" and cfg.logprob_mismatch
                                                         and cfg.importance_sampling_cap >= 1.0):
        raise ValueError("importance_sampling_cap needs generation_backend: vllm, logprob_mismatch: true and a cap "
                         f">= 1, got backend {cfg.generation_backend!r}, logprob_mismatch "
                         f"{cfg.logprob_mismatch}, cap {cfg.importance_sampling_cap}")
    if cfg.wandb_cadence not in ("comlrl", "batch"):
        raise ValueError(f"wandb_cadence must be 'comlrl' (CoMLRL's W&B steps) or 'batch' (every rollout batch), "
                         f"got {cfg.wandb_cadence!r}")
    if cfg.vllm_server_url is not None and cfg.generation_backend != "vllm":
        raise ValueError("vllm_server_url needs generation_backend: vllm (it names the vLLM "
                         "server to sample through)")
    if cfg.plan is not None:
        parse_plan(cfg.plan)
    parse_curriculum(cfg.curriculum, int(cfg.num_train_epochs))


def check_recipe(cfg: Any) -> None:
    """The learning-rate schedule, AdamW and KL-in-reward fields."""
    if cfg.lr_scheduler not in SCHEDULES:
        raise ValueError(f"lr_scheduler must be one of {SCHEDULES}, got {cfg.lr_scheduler!r}")
    for name in ("lr_warmup_ratio", "lr_min_ratio"):
        if not 0.0 <= float(getattr(cfg, name)) <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {getattr(cfg, name)}")
    if not (0.0 <= cfg.adam_beta1 < 1.0 and 0.0 <= cfg.adam_beta2 < 1.0 and cfg.adam_eps > 0
            and cfg.weight_decay >= 0):
        raise ValueError(f"adam_beta1 and adam_beta2 must be in [0, 1), adam_eps > 0 and weight_decay >= 0; got "
                         f"{cfg.adam_beta1}, {cfg.adam_beta2}, {cfg.adam_eps}, {cfg.weight_decay}")
    if cfg.kl_reward_coef < 0:
        raise ValueError(f"kl_reward_coef must be >= 0 (0: off), got {cfg.kl_reward_coef}")
    if cfg.kl_reward_target is not None and not (cfg.kl_reward_target > 0 and cfg.kl_reward_coef > 0):
        raise ValueError(f"kl_reward_target={cfg.kl_reward_target} adapts the coefficient multiplicatively: it "
                         "needs kl_reward_target > 0 and kl_reward_coef > 0 (the initial coefficient), got "
                         f"{cfg.kl_reward_coef}")
    if int(cfg.kl_reward_horizon) < 1:
        raise ValueError(f"kl_reward_horizon must be >= 1, got {cfg.kl_reward_horizon}")
    if cfg.kl_reward_estimator not in KL_ESTIMATORS:
        raise ValueError(f"kl_reward_estimator must be one of {KL_ESTIMATORS}, got {cfg.kl_reward_estimator!r}")
