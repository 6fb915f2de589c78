"""Workflow trainers on CoMLRL and the algorithm registry."""

from .base import WorkflowConfig, WorkflowTrainer
from .c3 import C3Config, C3Trainer
from .magrpo import WorkflowMAGRPOConfig, WorkflowMAGRPOTrainer
from .mappo import MAPPOConfig, MAPPOTrainer

__all__ = ["C3Config", "C3Trainer", "MAPPOConfig", "MAPPOTrainer", "WorkflowConfig", "WorkflowMAGRPOConfig",
           "WorkflowMAGRPOTrainer", "WorkflowTrainer"]
