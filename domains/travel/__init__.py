"""The travel domain: TravelPlanner with two simultaneous planners (Logistics and Experience),
a deterministic merger, the dense reference/constraint reward and a reward-independent joint
evaluator. See ``domains/travel/README.md``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Mapping, Sequence

from c3_plugin.core.domain import Domain, single_train_source
from c3_plugin.core.registry import is_centralized
from c3_plugin.core.rewards import batched
from c3_plugin.core.workflow import Workflow

from .actions import ROLE_NAMES, merger, owned_slots, parse_action, plan_to_actions, render_action
from .catalog import CatalogError, parse_reference, route_scaffold
from .data import FILTERS, HF_NAME, HF_REVISION, PANELS, load_rows, normalise, read_source, split_rows
from .eval_log import METRICS, eval_aggregator, eval_logger
from .evaluate import evaluate_joint, task_of
from .joint import (
    JOINT_ROLE,
    TravelJointAdapter,
    is_joint,
    item_days,
    joint_eval_logger,
    joint_grammar,
    joint_prefill,
    joint_probe,
    joint_reward,
    joint_workflow,
    plan_to_joint,
    split_joint,
)
from .prompts import prefill, prompt_fields, skeleton_days, travel_workflow
from .prompts import workflows as role_workflows
from .reward import NAME as REWARD_BACKEND
from .reward import RANGE as REWARD_RANGE
from .reward import VARIANTS as REWARD_VARIANTS
from .reward import make_reward, reward, terms


@dataclass
class TravelConfig:
    """The config's ``travel:`` section."""

    max_value_tokens: int = 64  # token cap of one JSON value under the forced skeleton
    structured_generation: bool = True  # force the role-owned JSON skeleton; the policy writes only value text
    # the compact W&B surface (used when the algorithm section sets no wandb_keys)
    wandb_keys: list[str] = field(default_factory=lambda: [f"eval/{m}" for m in METRICS] + ["turn_1/*", "iter/*"])
    # the training reward: "specified" (the published dense formula) or "strict" (constraint passes carry partial
    # credit; README.md); eval/reward stays the specified formula for comparability
    reward: str = "specified"

    def __post_init__(self) -> None:
        if self.reward not in REWARD_VARIANTS:
            raise ValueError(f"reward must be one of {', '.join(REWARD_VARIANTS)}, got {self.reward!r}")


def load_datasets(section: Mapping[str, Any], seed: int = 0, config: Any = None):
    """``(train, eval)`` datasets: the curriculum split of ``dataset.train`` (eval rows in panel order, P1 first)."""
    import datasets

    spec = single_train_source(section, "travel")
    if section.get("eval"):
        raise ValueError("travel: dataset.eval must stay empty: the eval rows are the held-out panels of dataset.train")
    train, evals, _ = load_rows(spec, section.get("base_dir"))
    for rows in (train, evals):
        for r in rows:
            r.update(prompt_fields(r))
            r["datasource"] = "travel"
    return datasets.Dataset.from_list(train), datasets.Dataset.from_list(evals)


def pass_fail(item: Mapping[str, Any], texts: Sequence[str]) -> tuple[bool, ...]:
    """The merged plan's pass/fail vector: each agent's exact action validity, team action success,
    the 10 commonsense checks and each applicable hard constraint (in the evaluator's order)."""
    joint = evaluate_joint(task_of(item), texts)
    return (tuple(bool(a.valid) for a in joint.actions) + (joint.metrics["team_action_success"] == 1.0,)
            + tuple(bool(v) for v in joint.strict.commonsense.values())
            + tuple(v >= 1.0 for v in joint.strict.hard.values()))


def outcome(leaves: Sequence[Any]) -> list[tuple[bool, ...]]:
    """Per leaf, :func:`pass_fail` of its joint action: the merger's record of the two role texts, or a
    joint planner's action split into them."""
    out = []
    for leaf in leaves:
        try:
            data = json.loads(leaf.action)
        except (ValueError, TypeError, RecursionError):
            data = None
        if isinstance(data, dict) and set(data) == set(ROLE_NAMES):
            texts = [str(data[r]) for r in ROLE_NAMES]
        else:
            texts = list(split_joint(leaf.action, item_days(leaf.item)))
        out.append(pass_fail(leaf.item, texts))
    return out


def workflows() -> dict[str, Workflow]:
    """The two-planner workflows and the centralized joint planner (``travel_joint``, one role)."""
    return {**role_workflows(), "travel_joint": joint_workflow(True), "travel_joint_free": joint_workflow(False)}


def grammar(prompt: Any, max_value_tokens: int = 64):
    """The forced JSON skeleton of a travel role's prompt (None for other prompts): the role's owned
    slots for the trip length its checklist states (all seven fields of every day for the joint planner)."""
    from c3_plugin.core.structured import Skeleton

    if prompt.role == JOINT_ROLE:
        return joint_grammar(prompt, max_value_tokens)
    if prompt.role not in ROLE_NAMES or prompt.prefix != prefill(ROLE_NAMES.index(prompt.role)):
        return None
    days = skeleton_days(prompt.text)
    if days is None:
        raise ValueError(f"travel grammar: the {prompt.role} prompt states no 'Trip length: N days' line")
    return Skeleton(owned_slots(ROLE_NAMES.index(prompt.role), days), max_value_tokens=max_value_tokens)


def make_grammar(cfg: TravelConfig):
    """The grammar the trainer's generation backend uses (None when structured generation is off)."""
    if not cfg.structured_generation:
        return None
    return partial(grammar, max_value_tokens=int(cfg.max_value_tokens))


def validate_config(cfg: Any, workflow: Workflow) -> None:
    """Structured generation needs the prefilled workflow and excludes a reference KL."""
    if not cfg.domain_cfg.structured_generation:
        return
    if getattr(cfg.algo, "reference_kl_enabled", False):
        raise ValueError(f"{cfg.algorithm}.reference_kl_enabled must stay false with travel.structured_generation: "
                         "schema tokens are excluded from the policy loss; set travel.structured_generation=false "
                         "to use a reference KL")
    if is_joint(workflow):
        if workflow.roles[JOINT_ROLE].prefix != joint_prefill():
            raise ValueError(f"travel.structured_generation needs workflow 'travel_joint' (role {JOINT_ROLE} prefilled "
                             f"with the first joint assignment); workflow '{workflow.name}' is not. Set "
                             "travel.structured_generation=false")
        return
    for agent, name in enumerate(ROLE_NAMES):
        if name not in workflow.roles or workflow.roles[name].prefix != prefill(agent):
            raise ValueError(f"travel.structured_generation needs workflow 'travel_planners' (role {name} prefilled "
                             f"with the first assignment); workflow '{workflow.name}' is not. Set "
                             "travel.structured_generation=false")


def all_dash(days: int) -> tuple[str, str]:
    """A strictly valid joint action that assigns "-" to every slot."""
    return render_action({}, 0, days), render_action({}, 1, days)


def probe(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Model-free checks: the all-dash joint action scores 0.08; a malformed pair stays below 0.05."""
    item = rows[0]
    task = task_of(item)
    dash = reward([all_dash(task.days)[0]], [all_dash(task.days)[1]], batch_items=[item])[0]
    broken = reward(['{"assignments": [{"day": 1'], ["not json"], batch_items=[item])[0]
    return {"probe_reward": dash, "all_dash_probe_reward": round(dash, 6), "malformed_probe_reward": broken,
            "probe_ok": abs(dash - 0.08) < 1e-9 and broken <= 0.05}


def dry_run_probe(config: TravelConfig | None = None) -> dict[str, Any]:
    """The probe on the bundled fixture row (the dry run re-runs it on the configured data)."""
    import json
    from pathlib import Path

    fixture = Path(__file__).with_name("probe_row.json")
    return probe([normalise(json.loads(fixture.read_text()), 0, "probe")])


def catalog_report(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Reference-catalog parse success over ``rows`` (every source row, not only the split)."""
    failed = []
    for r in rows:
        try:
            task_of(r)
        except (CatalogError, ValueError, KeyError, SyntaxError) as exc:
            failed.append({"id": r.get("id"), "error": str(exc)[:200]})
    return {"rows": len(rows), "parsed": len(rows) - len(failed), "failed": failed[:10]}


def dry_run_extra(cfg: Any, train: Any, evals: Any) -> dict[str, Any]:
    """The travel part of ``--dry-run``: split, panels, catalog parse success and the probe on the real rows."""
    spec = dict(cfg.dataset.train)
    raw = read_source(spec, cfg.dataset.base_dir)
    split = str(spec.get("split", "validation"))
    rows = [normalise(r, i, split) for i, r in enumerate(raw)]
    train_idx, panels = split_rows(rows, spec.get("filters", FILTERS), spec.get("eval_panels", PANELS),
                                   int(spec.get("split_seed", 42)), float(spec.get("eval_fraction", 0.25)))
    local = str(spec.get("source", HF_NAME)).endswith((".json", ".jsonl"))
    return {"split": {"source": spec.get("source", HF_NAME), "revision": None if local
                      else spec.get("revision", HF_REVISION),
                      "split": split, "source_rows": len(rows),
                      "train_rows": len(train_idx), "eval_rows": sum(len(p) for p in panels),
                      "train_source_indices": train_idx, "eval_panels": {f"P{k + 1}": p for k, p in enumerate(panels)},
                      "anchor": "P1"},
            "reward_backend": make_reward(cfg.domain_cfg.reward).backend, "catalog_parse": catalog_report(rows),
            **probe(list(train))}


def make_eval_logger(workflow: Workflow):
    """The eval logger of ``workflow``: a joint planner's texts are split into the two role actions first."""
    return joint_eval_logger if is_joint(workflow) else eval_logger


def dry_run(cfg: Any, train: Any, evals: Any) -> dict[str, Any]:
    """The travel domain's ``--dry-run`` fields: the probe, the split and catalog checks on the configured data, and
    under a centralized joint actor the joint contract's probe."""
    out = {"probe": dry_run_probe(cfg.domain_cfg), **dry_run_extra(cfg, train, evals)}
    if is_centralized(cfg.algorithm):
        out["joint_probe"] = joint_probe(list(train))
    return out


DOMAIN = Domain(name="travel", load_datasets=load_datasets, workflows=workflows,
                make_reward=lambda cfg: batched(make_reward(cfg.reward)), make_eval_logger=make_eval_logger,
                eval_aggregator=eval_aggregator, dry_run=dry_run, config_cls=TravelConfig,
                default_workflow="travel_planners", merger=merger, outcome=outcome, validate_config=validate_config,
                grammar=make_grammar, wandb_keys=lambda cfg: list(cfg.wandb_keys), joint_adapter=TravelJointAdapter)

__all__ = ["DOMAIN", "JOINT_ROLE", "METRICS", "REWARD_BACKEND", "REWARD_RANGE", "TravelConfig", "TravelJointAdapter",
           "all_dash", "catalog_report", "eval_aggregator", "eval_logger", "evaluate_joint", "grammar", "is_joint",
           "joint_eval_logger", "joint_grammar", "joint_reward", "joint_workflow", "load_datasets", "load_rows",
           "merger", "normalise", "outcome", "parse_action", "pass_fail", "parse_reference", "plan_to_actions",
           "plan_to_joint", "probe", "reward", "route_scaffold", "split_joint", "split_rows", "task_of", "terms",
           "travel_workflow", "workflows"]
