"""MADPO on a workflow: task-reward preferences collected once, then streamed joint DPO on that fixed set."""

from __future__ import annotations

from dataclasses import dataclass

from comlrl.trainers.preference.madpo import MADPOConfig, MADPOTrainer

from c3_plugin.core.registry import Capabilities
from c3_plugin.trainers.preference.fields import PreferenceFields
from c3_plugin.trainers.preference.shared import PreferenceBridge


@dataclass
class WorkflowMADPOConfig(PreferenceFields, MADPOConfig):
    """MADPO: task-reward preferences collected once, then joint DPO on that fixed set."""

    capabilities = Capabilities(budget="preference")  # registry.Capabilities

    num_train_epochs: int = 7  # passes of joint DPO over the fixed preference set
    preference_num_candidates: int = 20  # joint candidates sampled per prompt
    preference_pairs_per_sample: int | None = 6  # at most this many non-tied pairs per prompt (largest reward gaps)
    environment_steps_per_pair: int = 2  # env steps a trained pair counts (its two joint actions)


class WorkflowMADPOTrainer(PreferenceBridge, MADPOTrainer):
    """MADPO on a workflow's parallel roles."""

    default_config_cls = WorkflowMADPOConfig
    algorithm_name = "MADPO"
