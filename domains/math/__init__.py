"""The math domain: MATH500, GSM8K, CMATH, AIME 2024/2025, AMC23, Minerva-Math and a synthetic
arithmetic set; boxed-answer checking with math-verify; prompts for the six paper workflows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from c3_plugin.core.domain import Domain, probe_only
from c3_plugin.core.rewards import batched
from c3_plugin.core.workflow import Workflow

from .answer import _normalise, last_boxed, score
from .data import SUITES, check_overlap, load_datasets, load_split, synthetic_rows
from .metrics import default_eval_logger, eval_aggregator, make_eval_logger
from .prompts import math_workflow, workflows


@dataclass
class MathConfig:
    """The config's ``math:`` section."""

    answer_timeout_s: float = 5.0  # wall-clock bound on one math-verify equivalence check (an overrun scores 0)

    def __post_init__(self) -> None:
        if not float(self.answer_timeout_s) > 0:
            raise ValueError(f"answer_timeout_s must be > 0 seconds, got {self.answer_timeout_s!r}")


def make_reward(config: MathConfig | None = None):
    """The math reward of a ``math:`` section: 1.0 when the final agent's boxed answer matches the item's
    ``answer`` (each equivalence check bounded by ``answer_timeout_s``), else 0.0. CoMLRL contract, batched:
    one list of completions per agent, the last agent answers."""
    timeout_s = float((config or MathConfig()).answer_timeout_s)

    @batched
    def reward(*agent_completions: Sequence[str], batch_items: Sequence[Mapping[str, Any]] | None = None,
               prompts: Sequence[str] | None = None) -> list[float]:
        if not agent_completions:
            raise ValueError("math reward: no agent completions given")
        finals = agent_completions[-1]
        finals = [finals] if isinstance(finals, str) else list(finals)
        if batch_items is None or len(batch_items) != len(finals):
            raise ValueError("math reward: batch_items must give one item with an 'answer' per completion")
        return [score(c, str(item.get("answer", "")), timeout_s) for c, item in zip(finals, batch_items)]

    reward.reward_range = (0.0, 1.0)
    return reward


reward = make_reward()


def formatters(workflow: Workflow) -> list:
    """CoMLRL formatters for a plain (parallel) MAGRPOTrainer: each agent's first role, upstream messages empty."""
    out = []
    for a in range(workflow.num_agents):
        step = next(s for s in workflow.decision_steps if workflow.roles[s.name].agent == a)

        def fmt(item: Mapping[str, Any], step=step, **_: Any) -> str:
            return workflow.assemble(step, item, [""] * step.index)

        out.append(fmt)
    return out


def outcome(leaves: Sequence[Any]) -> list[str | None]:
    """Per leaf: the final action's last balanced boxed answer, normalised as the checker's exact-match
    step normalises it (whitespace, ``$`` and a trailing period dropped); None when nothing is boxed."""
    out = []
    for leaf in leaves:
        answer = last_boxed(leaf.action)
        out.append(None if answer is None else _normalise(answer))
    return out


def dry_run_probe(config: MathConfig | None = None) -> dict[str, Any]:
    """Score fixed probe actions with the config's reward, without a model: a correct boxed answer, an
    unboxed one, a malformed one."""
    reward = make_reward(config)
    item = {"answer": "\\frac{1}{2}"}
    right = reward(["plan"], ["so the answer is \\boxed{0.5}"], batch_items=[item])[0]
    unboxed = reward(["plan"], ["the answer is 1/2"], batch_items=[item])[0]
    malformed = reward(["plan"], ["\\boxed{\\frac{1}{2"], batch_items=[item])[0]
    ok = right == 1.0 and unboxed == 0.0 and malformed == 0.0
    return {"probe_reward": right, "probe_unboxed_reward": unboxed, "probe_malformed_reward": malformed, "probe_ok": ok}


DOMAIN = Domain(name="math", load_datasets=load_datasets, workflows=workflows, make_reward=make_reward,
                make_eval_logger=make_eval_logger, eval_aggregator=eval_aggregator, dry_run=probe_only(dry_run_probe),
                config_cls=MathConfig, default_workflow="reasoner_actor", formatters=formatters, outcome=outcome,
                gold="answer")

__all__ = ["DOMAIN", "MathConfig", "SUITES", "check_overlap", "default_eval_logger", "dry_run_probe", "eval_aggregator",
           "formatters", "last_boxed", "load_datasets", "load_split", "make_eval_logger", "make_reward",
           "math_workflow", "outcome", "reward", "score", "synthetic_rows", "workflows"]
