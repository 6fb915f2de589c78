"""MAGRPO on workflows: independent full runs, one group-relative score per run, broadcast
to every decision of that run (CoMLRL's advantage modes), trained with the same PPO loss
as C3 so that a head-to-head differs only in credit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from c3_plugin.core.credit import group_advantages
from c3_plugin.core.estimator_rules import check
from c3_plugin.core.plan import parse_plan
from c3_plugin.core.rollout import Rollout
from c3_plugin.trainers.base import WorkflowConfig, WorkflowTrainer


@dataclass
class WorkflowMAGRPOConfig(WorkflowConfig):
    """MAGRPO's defaults on workflows."""

    # advantage_normalization=True: CoMLRL's z-score within each instance's B joint runs
    normalization_scaling: ClassVar[str] = "group_zscore"
    # its credit (registry): B independent runs and CoMLRL's group baseline
    credit_fields: ClassVar[tuple[str, ...]] = ("plan", "advantage_mode")
    estimator_description: ClassVar[str] = "group baseline over B joint runs ({advantage_mode})"
    estimator_rules: ClassVar[tuple[str, ...]] = ("rloo_under_scaling", "mode_under_group_zscore", "single_run_group",
                                                  "clip_high_equals_clip")  # core/estimator_rules.py RULES
    # B full runs per instance (None: independent num_generations, CoMLRL's joint samples)
    plan: str | dict[str, Any] | None = None
    advantage_mode: str = "mean"  # CoMLRL's group baseline: "mean", "rloo", "max" or "raw"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.plan is not None and parse_plan(self.plan).kind != "independent":
            raise ValueError(f"MAGRPO runs independent full runs; plan '{self.plan}' is not 'independent B'")
        check(self, "magrpo")  # advantage_mode / scaling / clip combinations that change nothing


class WorkflowMAGRPOTrainer(WorkflowTrainer):
    """MAGRPOTrainer on a workflow: group advantages over B independent runs, broadcast per run."""

    default_config_cls = WorkflowMAGRPOConfig
    algorithm_name = "MAGRPO"

    def compute_advantages(self, rollout: Rollout) -> list[tuple[np.ndarray, np.ndarray]]:
        runs = rollout.rewards.reshape(rollout.rewards.shape[0], -1)  # [instances, B]
        adv = group_advantages(runs, self.args.advantage_mode).reshape(-1)
        return [(rollout.depth_nodes[s.index], adv) for s in rollout.workflow.decision_steps]
