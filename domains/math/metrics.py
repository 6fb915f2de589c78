"""Reward-independent eval metrics per suite, in CoMLRL 1.4.3's eval_logger / eval_aggregator form.

Per item: ``correct`` (the final answer checks against the gold), ``boxed`` (the final
message has a balanced box) and message lengths in characters. Aggregated per suite as
``<suite>/accuracy``, ``<suite>/boxed_rate`` and ``<suite>/len_<role>``, plus the same
over all suites under ``all/``.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from c3_plugin.workflow import Workflow

from .answer import last_boxed, score


def _logger(agent_names: Sequence[str], final_agent: int, timeout_s: float) -> Callable[..., list[dict]]:
    def eval_logger(agent_completions_turns: Sequence[Sequence[Sequence[str]]], batch_items: Sequence[Mapping[str, Any]] | None = None,
                    prompts: Sequence[str] | None = None) -> list[dict]:
        items = list(batch_items or [])
        rows = []
        for i, item in enumerate(items):
            final = agent_completions_turns[final_agent][i][-1] if agent_completions_turns[final_agent][i] else ""
            row = {"datasource": str(item.get("datasource", "eval")), "correct": score(final, str(item.get("answer", "")), timeout_s),
                   "boxed": float(last_boxed(final) is not None)}
            for a, name in enumerate(agent_names):
                turns = agent_completions_turns[a][i]
                row[f"len_{name}"] = float(np.mean([len(t) for t in turns])) if turns else 0.0
            rows.append(row)
        return rows

    return eval_logger


def eval_aggregator(rows: Sequence[Mapping[str, Any]], num_turns: int = 1) -> dict[str, float]:
    out: dict[str, float] = {}
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["datasource"], []).append(r)
    if len(groups) > 1:
        groups["all"] = list(rows)
    for suite, rs in groups.items():
        out[f"{suite}/accuracy"] = float(np.mean([r["correct"] for r in rs]))
        out[f"{suite}/boxed_rate"] = float(np.mean([r["boxed"] for r in rs]))
        for key in (k for k in rs[0] if k.startswith("len_")):
            out[f"{suite}/{key}"] = float(np.mean([r[key] for r in rs]))
        out[f"{suite}/n"] = float(len(rs))
    return out


def make_eval_logger(workflow: Workflow, timeout_s: float = 5.0) -> Callable[..., list[dict]]:
    """Role-aware logger: lengths keyed by role (roles of one agent joined with '+')."""
    names = ["+".join(dict.fromkeys(r.name for r in workflow.roles.values() if r.agent == a)) for a in range(workflow.num_agents)]
    final_role = workflow.final or workflow.decision_points()[-1]
    return _logger(names, workflow.roles[final_role].agent, timeout_s)


def default_eval_logger(agent_completions_turns, batch_items=None, prompts=None) -> list[dict]:
    """Role-agnostic logger for plain CoMLRL trainers: the last agent gives the final answer."""
    n = len(agent_completions_turns)
    return _logger([f"agent{a}" for a in range(n)], n - 1, 5.0)(agent_completions_turns, batch_items, prompts)
