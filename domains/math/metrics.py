"""Reward-independent eval metrics per suite, in CoMLRL 1.4.3's eval_logger / eval_aggregator form.

Per decode: ``correct`` (the final answer checks against the gold: the training reward),
``correct_lenient`` (the paper-style check published tables use, :func:`~domains.math.answer.score_lenient`),
``boxed`` (the final message has a box to read: its last box opener braced and closed) and message lengths in
characters. Aggregated per suite as
``<suite>/accuracy``, ``<suite>/accuracy_lenient``, ``<suite>/boxed_rate`` and ``<suite>/len_<role>``, plus the same
over all suites under ``all/``. A sampled suite (``num_samples: k``: the trainer hands the
logger k decodes of each item, tagged ``eval_index``) averages each item's decodes first, so
``accuracy`` is avg@k, and adds ``<suite>/avg@k`` and ``<suite>/pass@k'`` (:func:`pass_at_k`).
"""

from __future__ import annotations

from math import comb
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from c3_plugin.core.workflow import Workflow

from .answer import last_boxed, score, score_lenient


def _logger(agent_names: Sequence[str], final_agent: int, timeout_s: float) -> Callable[..., list[dict]]:
    def eval_logger(agent_completions_turns: Sequence[Sequence[Sequence[str]]],
                    batch_items: Sequence[Mapping[str, Any]] | None = None,
                    prompts: Sequence[str] | None = None) -> list[dict]:
        items = list(batch_items or [])
        rows = []
        for i, item in enumerate(items):
            final = agent_completions_turns[final_agent][i][-1] if agent_completions_turns[final_agent][i] else ""
            gold = str(item.get("answer", ""))
            row = {"datasource": str(item.get("datasource", "eval")), "correct": score(final, gold, timeout_s),
                   "correct_lenient": score_lenient(final, gold, timeout_s),
                   "boxed": float(last_boxed(final) is not None)}
            if item.get("eval_index") is not None:  # one of an item's k sampled decodes
                row.update(item=int(item["eval_index"]), samples=int(item.get("eval_samples") or 1),
                           pass_k=[int(k) for k in (item.get("eval_pass_k") or [])])
            for a, name in enumerate(agent_names):
                turns = agent_completions_turns[a][i]
                row[f"len_{name}"] = float(np.mean([len(t) for t in turns])) if turns else 0.0
            rows.append(row)
        return rows

    return eval_logger


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct (Chen et al. 2021):
    ``1 - C(n - c, k) / C(n, k)``, the chance that k of the n drawn without replacement hold a correct one."""
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n and 0 <= c <= n, got n={n}, c={c}, k={k}")
    return 1.0 - comb(n - c, k) / comb(n, k)


def _items(rows: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """Rows grouped by eval item: an untagged (greedy) row alone, the tagged decodes of one item together."""
    groups: dict[Any, list[Mapping[str, Any]]] = {}
    for i, r in enumerate(rows):
        groups.setdefault(("item", r["datasource"], r["item"]) if r.get("item") is not None else ("row", i),
                          []).append(r)
    return list(groups.values())


def eval_aggregator(rows: Sequence[Mapping[str, Any]], num_turns: int = 1) -> dict[str, float]:
    out: dict[str, float] = {}
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["datasource"], []).append(r)
    if len(groups) > 1:
        groups["all"] = list(rows)
    for suite, rs in groups.items():
        items = _items(rs)
        def per_item(key: str, items: list = items) -> float:
            return float(np.mean([np.mean([r[key] for r in item]) for item in items]))

        out[f"{suite}/accuracy"] = per_item("correct")
        if all("correct_lenient" in r for r in rs):
            out[f"{suite}/accuracy_lenient"] = per_item("correct_lenient")
        out[f"{suite}/boxed_rate"] = per_item("boxed")
        for key in (k for k in rs[0] if k.startswith("len_")):
            out[f"{suite}/{key}"] = per_item(key)
        out[f"{suite}/n"] = float(len(items))
        sampled = suite != "all" and all(r.get("item") is not None for r in rs)
        if sampled:  # every item decoded k times (one suite, one k)
            k = int(rs[0]["samples"])
            out[f"{suite}/avg@{k}"] = out[f"{suite}/accuracy"]
            for kk in rs[0].get("pass_k") or [k]:
                solved = [int(sum(r["correct"] >= 1.0 for r in item)) for item in items]
                scores = [pass_at_k(len(item), c, kk) for item, c in zip(items, solved)]
                out[f"{suite}/pass@{kk}"] = float(np.mean(scores))
    return out


def make_eval_logger(workflow: Workflow, timeout_s: float = 5.0) -> Callable[..., list[dict]]:
    """Role-aware logger: lengths keyed by role (roles of one agent joined with '+')."""
    names = ["+".join(dict.fromkeys(r.name for r in workflow.roles.values() if r.agent == a))
             for a in range(workflow.num_agents)]
    final_role = workflow.final or workflow.decision_points()[-1]
    return _logger(names, workflow.roles[final_role].agent, timeout_s)


def default_eval_logger(agent_completions_turns, batch_items=None, prompts=None) -> list[dict]:
    """Role-agnostic logger for plain CoMLRL trainers: the last agent gives the final answer."""
    n = len(agent_completions_turns)
    return _logger([f"agent{a}" for a in range(n)], n - 1, 5.0)(agent_completions_turns, batch_items, prompts)
