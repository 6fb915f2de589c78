"""Workflow trainers on CoMLRL and the algorithm registry."""

from c3_plugin.trainers.base import WorkflowConfig, WorkflowTrainer
from c3_plugin.trainers.c3 import C3Config, C3Trainer
from c3_plugin.trainers.magrpo import WorkflowMAGRPOConfig, WorkflowMAGRPOTrainer
from c3_plugin.trainers.mappo import MAPPOConfig, MAPPOTrainer

__all__ = ["C3Config", "C3Trainer", "MAPPOConfig", "MAPPOTrainer", "WorkflowConfig", "WorkflowMAGRPOConfig",
           "WorkflowMAGRPOTrainer", "WorkflowTrainer"]
