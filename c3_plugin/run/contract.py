"""The domain contract, exercised by the dry-run on the domain's own rows, no model loaded: each role's prompt built
from real rows (templates, formatters, contexts, feedback steps, the merger), the reward called on completions made
up here (the gold itself, an empty string, a wrong answer) through the run's own reward call, every other hook and
the eval logger called with the shapes the trainer passes, and the rows' schema. A mistake the run would meet at its
first batch or first evaluation is refused here, naming the domain, the hook, the row and the fix."""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping, Sequence

from c3_plugin.core.config import ConfigError, RunConfig
from c3_plugin.core.domain import Domain
from c3_plugin.core.errors import DomainHookError
from c3_plugin.core.registry import capabilities
from c3_plugin.core.rewards import RewardValueError, finite_rewards, leaf_rewards
from c3_plugin.core.rollout import Leaf
from c3_plugin.core.workflow import Workflow

ROWS = 3  # rows of each split the hooks are called on
CONTRACT = "domains/template/README.md tables the contract"
WRONG = "c3 dry-run: a made-up wrong answer"  # the wrong completion
REWARD = "the reward"  # the hook name :func:`guarded` checks the values of


def _rows(ds: Any, n: int = ROWS) -> list[dict]:
    return [dict(ds[i]) for i in range(min(n, len(ds)))] if ds is not None else []


def _where(row: Mapping[str, Any], i: int, split: str) -> str:
    return f"{split} row {i + 1} (id {row.get('id', '?')!r})"


def _call(domain: Domain, hook: str, where: str, fn: Callable[[], Any], fix: str) -> Any:
    """``fn()``; an exception becomes a :class:`ConfigError` naming the domain, the hook, the row and the fix."""
    try:
        return fn()
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure of a domain's hook is reported by name
        raise ConfigError(f"domain '{domain.name}': {hook} raised {type(exc).__name__}: {exc} (on {where}); "
                          f"{fix}") from exc


def check_rows(domain: Domain, ds: Any, split: str) -> None:
    """Every row has a non-empty ``prompt`` or ``question`` (the task a workflow's ``{question}`` reads); with
    ``Domain.gold`` set, every row has that field and not every one is empty."""
    if ds is None or len(ds) == 0:
        return
    columns = set(ds.column_names)
    task = [c for c in ("question", "prompt") if c in columns]
    if not task:
        raise ConfigError(f"domain '{domain.name}': the {split} rows have no 'prompt' or 'question' field (fields: "
                          f"{', '.join(sorted(columns))}), so every role would see an empty task; give each row the "
                          f"task as 'prompt' and 'question' in load_datasets ({CONTRACT})")
    texts = [[str(v or "").strip() for v in ds[c]] for c in task]
    empty = [i for i in range(len(ds)) if not any(t[i] for t in texts)]
    if empty:
        i = empty[0]
        raise ConfigError(f"domain '{domain.name}': {_where(ds[i], i, split)} has an empty {' and '.join(task)} "
                          f"({len(empty)} of {len(ds)} rows), so its roles would see an empty task; drop such rows or "
                          "fill them in load_datasets")
    if domain.gold is None:
        return
    if domain.gold not in columns:
        raise ConfigError(f"domain '{domain.name}': the {split} rows have no '{domain.gold}' field (the gold the "
                          f"reward compares with, Domain.gold; fields: {', '.join(sorted(columns))}); give each row "
                          "its gold in load_datasets, or set Domain.gold to the field that holds it")
    golds = [str(v if v is not None else "").strip() for v in ds[domain.gold]]
    missing = [i for i, g in enumerate(golds) if not g]
    if len(missing) == len(golds):
        raise ConfigError(f"domain '{domain.name}': every {split} row's '{domain.gold}' (the gold) is empty, so every "
                          "reward would score against nothing; check the field load_datasets reads the gold from")
    if missing:
        i = missing[0]
        raise ConfigError(f"domain '{domain.name}': {_where(ds[i], i, split)} has no gold ('{domain.gold}' empty; "
                          f"{len(missing)} of {len(golds)} rows); drop such rows in load_datasets or give them a gold")


def walk(domain: Domain, workflow: Workflow, row: Mapping[str, Any], where: str, answer: str) -> Leaf:
    """One path of ``workflow`` on ``row`` whose every decision writes ``answer``: each role's prompt assembled
    (template, formatter or context), each feedback step run, the merger's join as the action."""
    outputs: list[str] = []
    for step in workflow.steps:
        if step.kind == "decision":
            _call(domain, f"the prompt of role '{step.name}'", where,
                  lambda step=step: workflow.assemble(step, row, outputs),
                  "fix the role's template, formatter or context (the run builds this prompt at every rollout)")
            outputs.append(answer)
        else:
            latest = workflow.latest_outputs(outputs)
            fn = workflow.feedback[step.name]
            outputs.append(str(_call(domain, f"the feedback step '{step.name}'", where,
                                     lambda fn=fn, latest=latest, step=step: fn(
                                         row, {r: latest.get(r, "") for r in step.reads}),
                                     "fix the feedback function; it must return the text the next roles read")))
    action = _call(domain, "the workflow's merger", where, lambda: workflow.final_action(outputs),
                   "a merger maps {role: message} to one string and never raises on model output")
    return Leaf(item=row, action=str(action), outputs=tuple(outputs))


def check_reward(domain: Domain, cfg: RunConfig, workflow: Workflow, rows: Sequence[dict],
                 split: str) -> dict[str, list[float]]:
    """The reward on every row at once with each made-up completion (the gold, empty, wrong), as the run calls it:
    one finite number per joint action, or a :class:`ConfigError` naming the fix."""
    reward = _call(domain, "make_reward(config)", "the domain config", lambda: domain.make_reward(cfg.domain_cfg),
                   "make_reward returns the reward of a config section")
    first = workflow.decision_steps[0]
    out: dict[str, list[float]] = {}
    made_up = {"empty": [""] * len(rows), "wrong": [WRONG] * len(rows)}
    if domain.gold:
        made_up = {"gold": [str(r.get(domain.gold, "")) for r in rows], **made_up}
    for kind, answers in made_up.items():
        leaves = [walk(domain, workflow, r, _where(r, i, split), a) for i, (r, a) in enumerate(zip(rows, answers))]
        per_agent: list[list[str]] = [[] for _ in range(workflow.num_agents)]
        for leaf in leaves:
            latest = workflow.latest_outputs(leaf.outputs)
            for agent in range(workflow.num_agents):
                roles = [s.name for s in workflow.decision_steps if workflow.roles[s.name].agent == agent]
                per_agent[agent].append(latest.get(roles[-1], "") if roles else "")
        prompts = [workflow.assemble(first, leaf.item, list(leaf.outputs[:first.index])) for leaf in leaves]
        try:
            out[kind] = leaf_rewards(reward, per_agent, rows, prompts)
        except RewardValueError as exc:
            raise ConfigError(f"domain '{domain.name}': {exc} (the {kind} completion on the {split} rows)") from exc
        except Exception as exc:  # noqa: BLE001 - a wrong signature, a reward that raises on model output
            raise ConfigError(f"domain '{domain.name}': the reward raised {type(exc).__name__}: {exc} (the {kind} "
                              f"completion on the {split} rows, {len(rows)} joint actions); the reward takes "
                              "reward(*agent_completions, batch_items=None, prompts=None), one list of completions per "
                              f"agent, and never raises on model output ({CONTRACT})") from exc
    return out


def check_hooks(domain: Domain, cfg: RunConfig, workflow: Workflow, rows: Sequence[dict], split: str) -> None:
    """The optional hooks the run calls (outcome, merger, formatters, grammar, wandb_keys) on made-up messages."""
    leaves = [walk(domain, workflow, r, _where(r, i, split), WRONG) for i, r in enumerate(rows)]
    where = f"the {split} rows 1-{len(rows)}"
    if domain.outcome is not None:
        found = _call(domain, "outcome(leaves)", where, lambda: list(domain.outcome(leaves)),
                      "outcome maps a batch of Leaf to one hashable outcome per leaf, never raising on model output")
        if len(found) != len(leaves):
            raise ConfigError(f"domain '{domain.name}': outcome(leaves) returned {len(found)} outcomes for "
                              f"{len(leaves)} leaves; return one per leaf")
        _call(domain, "outcome(leaves)", where, lambda: [hash(o) for o in found], "each outcome must be hashable")
    if domain.merger is not None:
        roles = {s.name: WRONG for s in workflow.decision_steps}
        _call(domain, "merger", where, lambda: str(domain.merger(roles)),
              "a merger maps {role: message} to one string and never raises on model output")
    if domain.formatters is not None:
        _call(domain, "formatters(workflow)", where, lambda: domain.formatters(workflow),
              "formatters(workflow) returns CoMLRL formatters, one per agent")
    for name in ("grammar", "wandb_keys"):
        hook = getattr(domain, name)
        if hook is not None:
            _call(domain, f"{name}(config)", "the domain config", lambda hook=hook: hook(cfg.domain_cfg),
                  f"{name} takes the domain config section")


def check_eval_logger(domain: Domain, workflow: Workflow, rows: Sequence[dict]) -> None:
    """The eval logger and aggregator called as the trainer calls them at every evaluation
    (``agent_completions_turns[agent][row][turn]``, ``batch_items``, ``prompts``; then the aggregator on its rows)."""
    logger = _call(domain, "make_eval_logger(workflow)", f"workflow '{workflow.name}'",
                   lambda: domain.make_eval_logger(workflow), "make_eval_logger returns the workflow's eval logger")
    if logger is None or domain.eval_aggregator is None:
        return
    leaves = [walk(domain, workflow, r, _where(r, i, "eval"), WRONG) for i, r in enumerate(rows)]
    turns = [[[leaf.outputs[s.index] for s in workflow.decision_steps if workflow.roles[s.name].agent == a]
              for leaf in leaves] for a in range(workflow.num_agents)]
    prompts = [str(r.get("prompt", r.get("question", ""))) for r in rows]
    fix = ("the trainer calls eval_logger(agent_completions_turns=..., batch_items=..., prompts=...) "
           "(agent_completions_turns[agent][row][turn]) and eval_aggregator(rows, num_turns=1) at every evaluation; "
           f"take those parameters by name ({CONTRACT})")
    detailed = _call(domain, "the eval logger", "the eval rows", lambda: logger(
        agent_completions_turns=turns, batch_items=list(rows), prompts=prompts), fix)
    metrics = _call(domain, "eval_aggregator", "the eval logger's rows",
                    lambda: domain.eval_aggregator(detailed, num_turns=1), fix)
    bad = {k: v for k, v in dict(metrics).items() if isinstance(v, str) or not isinstance(v, (int, float))}
    if bad:
        raise ConfigError(f"domain '{domain.name}': eval_aggregator returned non-numeric metrics {bad}; it maps the "
                          "eval logger's rows to {name: float}")


def check_contract(domain: Domain, cfg: RunConfig, workflow: Workflow, train: Any, evals: Any) -> dict[str, Any]:
    """Every check above on the domain's own rows; the dry-run report's ``contract``: the rows checked and the
    reward of each made-up completion."""
    check_rows(domain, train, "train")
    check_rows(domain, evals, "eval")
    rows = _rows(train)
    if not capabilities(cfg.algo).workflow_trainer:  # CoMLRL's own loops (the joint actor, the preference trainers)
        return {"rows_checked": len(rows), "hooks": f"not exercised: {cfg.algorithm} calls them through CoMLRL's loop"}
    rewards = check_reward(domain, cfg, workflow, rows, "train")
    check_hooks(domain, cfg, workflow, rows, "train")
    eval_rows = _rows(evals) or rows
    check_eval_logger(domain, workflow, eval_rows)
    return {"rows_checked": len(rows), "eval_rows_checked": len(eval_rows),
            "reward_on": rewards}


def _row_ids(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """The ids of the rows a hook was called on (its ``batch_items``, or the items of a batch of leaves)."""
    items = kwargs.get("batch_items")
    if items is None and args and isinstance(args[0], (list, tuple)) and args[0] and isinstance(args[0][0], Leaf):
        items = [leaf.item for leaf in args[0]]
    ids = [str(it.get("id", "?")) for it in items or [] if isinstance(it, Mapping)]
    return (f"row{'s' if len(ids) > 1 else ''} {', '.join(ids[:5])}{' ...' if len(ids) > 5 else ''}" if ids
            else "rows unknown")


def guarded(domain: Domain, hook: str, fn: Callable[..., Any] | None) -> Callable[..., Any] | None:
    """``fn`` (a domain hook the trainer calls during the run: the reward, the eval logger, the outcome) with the
    same signature and attributes, whose exception becomes one :class:`DomainHookError` naming the domain, the hook
    and the rows, and the dry-run that exercises it."""
    if fn is None:
        return None

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            out = fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - reported by name; --debug shows the traceback
            raise DomainHookError(f"domain '{domain.name}': {hook} raised {type(exc).__name__}: {exc} (on "
                                  f"{_row_ids(args, kwargs)}); fix the hook (c3 dry-run calls it on the domain's own "
                                  f"rows; add --debug for the traceback)") from exc
        if hook == REWARD:  # CoMLRL's own loops (preference, joint actor) call it without leaf_rewards' check
            finite_rewards(out, fn, list(kwargs.get("batch_items") or []))
        return out

    return call
