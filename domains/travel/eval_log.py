"""The travel evaluation's rows and means: the reward and the reward-independent end metrics of each sample."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from .evaluate import evaluate_joint, task_of
from .reward import terms

METRICS = ("reward", "action_validity", "team_action_success", "required_cooperative_contribution",
           "required_grounded_recall", "entity_grounding_precision", "grounding_f1", "required_cost_completeness",
           "reference_budget_soft", "reference_budget_pass", "route_scaffold_match", "reference_plan_delivery",
           "required_plan_completion", "reference_commonsense_micro", "reference_hard_micro", "reference_plan_success",
           "collaboration_success")


def eval_logger(agent_completions_turns: Sequence[Sequence[Sequence[str]]], batch_items: Sequence[Mapping[str, Any]],
                prompts: Sequence[str] | None = None) -> list[dict[str, float]]:
    """Per sample: the reward and the reward-independent end metrics."""
    rows = []
    for k, item in enumerate(batch_items):
        texts = [str(agent_completions_turns[a][k][-1]) if agent_completions_turns[a][k] else "" for a in range(2)]
        task = task_of(item)
        t = terms(task, texts)
        joint = evaluate_joint(task, texts)
        rows.append({"reward": t["reward"], **{m: float(joint.metrics[m]) for m in METRICS if m != "reward"}})
    return rows


def eval_aggregator(rows: Sequence[Mapping[str, float]], num_turns: int = 1) -> dict[str, float]:
    """Means of the published metrics (names as in docs/metrics.md, under ``eval/``)."""
    if not rows:
        return {}
    return {m: sum(float(r[m]) for r in rows) / len(rows) for m in METRICS}
