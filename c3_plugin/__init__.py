"""comlrl-c3: credit by counterfactual continuation (C3) for CoMLRL multi-LLM teams."""

from c3_plugin.core.plan import Plan, PlanError, parse_plan
from c3_plugin.core.protocol import Generation, GenerationBackend, Prompt, Sampling
from c3_plugin.core.rollout import Budget, Leaf, Rollout, materialize
from c3_plugin.core.trace import TraceEntry, read_jsonl, replay_check, write_jsonl
from c3_plugin.core.workflow import (
    Role,
    Step,
    Workflow,
    WorkflowError,
    builtin_workflows,
    load_workflow,
    workflow_from_dict,
)

__version__ = "0.1.0"

__all__ = [
    "Budget", "Generation", "GenerationBackend", "Leaf", "Plan", "PlanError", "Prompt", "Role", "Rollout",
    "Sampling", "Step", "TraceEntry", "Workflow", "WorkflowError", "builtin_workflows", "load_workflow",
    "materialize", "parse_plan", "read_jsonl", "replay_check", "workflow_from_dict", "write_jsonl",
]
