"""The dry-run: everything but the accelerator is checked (data, workflow, plan, budget, reward, the
domain's probe, memory and cluster plans, model paths) without loading a model; and :func:`prepare`, the
domain, workflow and datasets a run and a dry-run share."""

from __future__ import annotations

import json
import warnings
from dataclasses import fields, is_dataclass
from itertools import combinations
from typing import Any, Mapping

from c3_plugin.core.config import ConfigError, RunConfig, build_workflow, load_config
from c3_plugin.core.domain import load_domain
from c3_plugin.core.estimator_rules import NOT_OPTIMISATION, credit_fields
from c3_plugin.core.plan import parse_plan
from c3_plugin.core.registry import (
    capabilities,
    dry_run_entries,
    estimator_description,
    head_to_head,
    inert_fields,
    preflight,
    section,
    workflow_algorithms,
)
from c3_plugin.core.sources import local_path
from c3_plugin.core.workflow import Workflow, WorkflowError
from c3_plugin.run.budget import decision_gradients, expected_budget, rollout_batch_sizes
from c3_plugin.run.cluster import cluster_plan, gpu_hours
from c3_plugin.run.contract import check_contract
from c3_plugin.run.memory import memory_report
from c3_plugin.run.needs import missing_packages
from c3_plugin.scale.model_check import check_models, unverified_models
from c3_plugin.trainers.setup import agent_training

# rows besides the config's fields: the credit in words, the budget
SETTINGS = ("estimator", "optimizer_updates_per_agent", "updates_per_1k_env_steps", "expected_env_steps")


# follow from fields (the plan a credit needs): shown, never refused themselves. The optimizer steps per agent are not
# here: a head-to-head whose arms step their agents unequally often differs in more than credit, so c3 compare refuses
# it without consent (--allow-differences optimizer_updates_per_agent) or the equal-steps setting
# (minibatches_per_ppo_epoch), unless the counts differ only by a critic's warm-up batches (MAPPO's credit: its policy
# waits for its critic); their rate per 1k env steps follows from them at the equal env steps compare requires.
DERIVED = ("estimator", "updates_per_1k_env_steps")
STEPS = "optimizer_updates_per_agent"


ABSENT = "(absent)"  # a field the algorithm's config does not have


def optimisation_settings(cfg: RunConfig, workflow: Workflow, train: Any, algorithms: Any = None) -> dict[str, Any]:
    """Every effective setting of the config's algorithm and of each other workflow algorithm whose section the
    config holds (the head-to-head a shared base config sets up), or of ``algorithms``; which differ; and which of
    those a controlled comparison refuses.

    A row holds every field of the algorithm's config dataclass (walked, so new fields are picked up) except
    :data:`c3_plugin.core.estimator_rules.NOT_OPTIMISATION` (output, logging, throughput), plus :data:`SETTINGS` (the
    budget rows only when ``workflow`` and ``train`` are given).
    ``credit_fields``: per algorithm, the fields that are its credit
    (:func:`c3_plugin.core.estimator_rules.credit_fields`). ``uncontrolled``: per differing key, the algorithm pairs
    that differ in it although it is the credit of neither of the two (what ``c3 compare`` refuses without
    ``--allow-differences``). ``inert``: per algorithm, the fields its training does not read under its settings, with
    the reason (:func:`c3_plugin.core.registry.inert_fields`)."""
    # preference and centralized trainers: CoMLRL's own loops, another workflow
    if capabilities(cfg.algo).budget != "plan":
        return {"settings": {}, "differ": [], "credit_fields": {}, "uncontrolled": {}, "ignored": [],
                "steps_beside_warmup": {}, "inert": {}}
    names = list(algorithms) if algorithms else head_to_head(cfg.algorithm, cfg.raw)
    table: dict[str, dict[str, Any]] = {}
    credit: dict[str, set[str]] = {}
    inert: dict[str, dict[str, str]] = {}
    beside_warmup: dict[str, Any] = {}  # the optimizer steps per agent had no batch been a critic's warm-up
    for name in names:
        other = cfg if name == cfg.algorithm else load_config(data={**cfg.raw, "algorithm": name})
        a = other.algo
        if capabilities(a).budget != "plan" or not is_dataclass(a):
            continue
        row = {f.name: getattr(a, f.name) for f in fields(a) if f.name not in NOT_OPTIMISATION
               and not f.name.startswith("_")}
        row["estimator"] = estimator_description(a, name)
        if workflow is not None and train is not None:  # without them (a config-only check): the fields alone
            budget = expected_budget(other, workflow, train)
            row["optimizer_updates_per_agent"] = budget["expected_optimizer_updates_per_agent"]
            row["updates_per_1k_env_steps"] = [round(1000 * u / max(1, budget["expected_env_steps"]), 3)
                                               for u in budget["expected_optimizer_updates_per_agent"]]
            row["expected_env_steps"] = budget["expected_env_steps"]
            beside_warmup[section(name)] = budget.get(f"{STEPS}_beside_warmup", row[STEPS])
        table[section(name)] = row
        credit[section(name)] = credit_fields(type(a))
        inert[section(name)] = inert_fields(a, workflow)
    keys = sorted({k for row in table.values() for k in row})

    def value(algo: str, key: str) -> str:
        return json.dumps(table[algo].get(key, ABSENT), default=str, sort_keys=True)

    differ = sorted(k for k in keys if len({value(a, k) for a in table}) > 1)
    uncontrolled: dict[str, list[str]] = {}
    for key in differ:
        if key in DERIVED:
            continue
        pairs = [f"{a} vs {b}" for a, b in combinations(table, 2)
                 if value(a, key) != value(b, key) and key not in credit[a] | credit[b]
                 and (key != STEPS or beside_warmup[a] != beside_warmup[b])]
        if pairs:
            uncontrolled[key] = pairs
    return {"settings": table, "differ": differ, "credit_fields": {a: sorted(c & set(keys)) for a, c in credit.items()},
            "uncontrolled": uncontrolled, "ignored": sorted(NOT_OPTIMISATION), "steps_beside_warmup": beside_warmup,
            "inert": inert}


def prepare(cfg: RunConfig, dry_run: bool = False):
    """Domain, workflow and datasets: everything but the models. ``dry_run``: the domain counts and checks its data
    but leaves to the run what the run measures once and caches (``Domain.load_datasets``)."""
    preflight(cfg.algo)  # the algorithm's own checks, before any model or data is loaded (the joint actor's API)
    domain = load_domain(cfg.domain)
    workflow = build_workflow(cfg, domain)
    section = {"train": cfg.dataset.train, "eval": cfg.dataset.eval, "drop_overlap": cfg.dataset.drop_overlap,
               "base_dir": cfg.dataset.base_dir, **({"dry_run": True} if dry_run else {})}
    if domain.validate_config is not None:
        domain.validate_config(cfg, workflow)
    check_sizes(cfg)
    train, evals = domain.load_datasets(section, cfg.seed, cfg.domain_cfg)
    if train is None or len(train) == 0:
        raise ConfigError(empty_train(cfg))
    if capabilities(cfg.algo).budget == "plan":
        parse_plan(cfg.algo.plan).branching(workflow.num_decisions)
    check_agent_training(cfg, workflow)
    return domain, workflow, train, evals


def check_sizes(cfg: RunConfig) -> None:
    """A ``size: 0`` in the dataset section is refused by name (it would read as an empty dataset)."""
    train = cfg.dataset.train
    specs = [("dataset.train", train)] if isinstance(train, Mapping) else [
        (f"dataset.train[{i}]", s) for i, s in enumerate(train or [])]
    specs += [(f"dataset.eval[{i}]", s) for i, s in enumerate(cfg.dataset.eval or [])]
    for where, spec in specs:
        if isinstance(spec, Mapping) and spec.get("size") is not None and int(spec["size"]) <= 0:
            drop = "" if where == "dataset.train" else ", or drop the source"
            raise ConfigError(f"{where}.size is {spec['size']}: a source needs at least one row; give a positive size "
                              f"(or remove it for the source's default){drop}")


def empty_train(cfg: RunConfig) -> str:
    """Why the training set came back empty, in words: an empty local file, or no source."""
    train = cfg.dataset.train
    source = train.get("source") if isinstance(train, Mapping) else None
    path = local_path(str(source), cfg.dataset.base_dir) if source else None
    if path is not None and path.exists():
        return (f"dataset.train.source {source} holds no rows (an empty file, or every row filtered out by limit or "
                "drop_overlap); a JSONL file holds one JSON row per line")
    return "dataset.train is empty: give a source (a HF name, a JSONL path or 'synthetic')"


def check_agent_training(cfg: RunConfig, workflow: Workflow) -> dict[str, Any]:
    """The ``agents`` section's per-role learning rates and frozen agents, resolved per agent (what the dry-run
    reports), refused where they would do nothing: under the preference and centralized trainers, which keep
    CoMLRL's own optimizers."""
    ag = cfg.agents
    workflow.agent_temperatures()  # roles of one agent must agree on a temperature
    if not (ag.learning_rate or ag.learning_rate_scale or ag.trainable):
        return {}
    if not capabilities(cfg.algo).data_parallel:
        raise ConfigError("agents.learning_rate / learning_rate_scale / trainable are honoured by the workflow "
                          f"trainers ({', '.join(workflow_algorithms())}), not by {cfg.algorithm}; remove them "
                          "from the agents section")
    try:  # the trainer's own checks, which it makes after loading the models (a rate <= 0, every agent frozen)
        agent_training(workflow, cfg.algo, workflow.num_agents, ag.learning_rate, ag.learning_rate_scale, ag.trainable)
    except WorkflowError:  # a role the workflow does not have: named as it is
        raise
    except ValueError as exc:
        raise ConfigError(f"agents: {exc}") from exc
    lrs = workflow.per_agent(ag.learning_rate, "agents.learning_rate")
    scales = workflow.per_agent(ag.learning_rate_scale, "agents.learning_rate_scale")
    frozen = workflow.per_agent(ag.trainable, "agents.trainable")
    base = float(cfg.algo.agent_learning_rate)
    return {"learning_rate": [0.0 if frozen.get(a) is False else float(lrs.get(a, base * float(scales.get(a, 1.0))))
                              for a in range(workflow.num_agents)],
            "frozen_agents": sorted(a for a, v in frozen.items() if v is False)}


def dry_run_report(cfg: RunConfig) -> dict[str, Any]:
    """Everything :mod:`this module <c3_plugin.run.dry_run>` checks, as one report with its ``status``
    (:func:`settle_status`); :func:`summary` is its human form."""
    import datasets

    datasets.disable_progress_bars()  # the dry-run's output is its summary, not the JSON reader's bars
    domain, workflow, train, evals = prepare(cfg, dry_run=True)
    eval_rows: dict[str, int] = {}
    for ds in (evals["datasource"] if evals is not None else []):
        eval_rows[ds] = eval_rows.get(ds, 0) + 1
    contract = check_contract(domain, cfg, workflow, train, evals)  # the domain's hooks on its own rows
    checks = domain.dry_run(cfg, train, evals)
    probe = checks.pop("probe")
    reward_range = list(getattr(domain.make_reward(cfg.domain_cfg), "reward_range", (None, None)))
    report = {"status": "ok", "algorithm": cfg.algorithm, "domain": cfg.domain,
              "workflow": {"name": workflow.name, "decision_points": workflow.decision_points(),
                           "parallel_stages": workflow.parallel_stages(), "agents": workflow.num_agents},
              "train_rows": len(train), "eval_rows": eval_rows, **expected_budget(cfg, workflow, train),
              "reward_range": reward_range, "probe_reward": probe.get("probe_reward"), "probe": probe,
              "model": cfg.agent_model.name, "policy": cfg.agents.policy, "contract": contract}
    training = check_agent_training(cfg, workflow)
    if training:
        report["agent_training"] = training
    if capabilities(cfg.algo).budget == "plan":  # the workflow trainers
        report.update(decision_gradients(cfg.algorithm, cfg.algo.plan, workflow,
                                         getattr(cfg.algo, "untrained_decisions", None)))
        for line in report.get("warnings", []):
            warnings.warn(line, stacklevel=2)
    report["devices"] = {"agents": cfg.agent_model.device}
    report["memory"] = memory_report(cfg, workflow)
    report["cluster"] = cluster_plan(cfg, workflow, train)
    report["gpu_hours"] = gpu_hours(cfg, workflow, train)  # the run's and the experiment's GPU-hours on that cluster
    report["optimisation"] = optimisation_settings(cfg, workflow, train)
    report["model_check"] = check_models(cfg)  # a local model folder holds weights and a tokenizer; a hub name: "hub"
    report.update(dry_run_entries(cfg.algo))  # the algorithm's own entries (the joint actor's CoMLRL API)
    report.update(checks)  # the domain's own checks (travel: split, catalog parse, the joint probe under a joint actor)
    budget_errors, budget_warnings = budget_problems(cfg, report, train)
    report["warnings"] = list(report.get("warnings", [])) + budget_warnings
    report["budget_errors"] = budget_errors
    if cfg.layout == "llm_collab":  # an LLM_Collab config: the keys that mean nothing here, also in the summary
        report["llm_collab"] = {"unmapped": list(cfg.unmapped)}
        report["notes"] = list(report.get("notes", [])) + unmapped_lines(cfg)
    return settle_status(cfg, report)


def unmapped_lines(cfg: RunConfig) -> list[str]:
    """An LLM_Collab config's keys with no meaning under its algorithm, one line each after a heading (the dry-run's
    notes; training prints them too)."""
    head = (f"LLM_Collab layout, read as its train scripts read it: {len(cfg.unmapped)} key(s) mean nothing under "
            f"{cfg.algorithm} or act otherwise here{':' if cfg.unmapped else ''}")
    return [head] + [f"  {line}" for line in cfg.unmapped]


def memory_problems(cfg: RunConfig, report: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(errors, warnings) of the memory plan per GPU: a plan that fits none of the device classes it was made for
    is an error (name the hardware with ``cluster.gpu`` and the ranks with ``cluster.nproc_per_node``, or shrink
    the plan); one that fits some of them warns about the others. A CPU run has no GPU verdict."""
    per_gpu = (report.get("cluster") or {}).get("memory_per_gpu") or {}
    verdict, totals = per_gpu.get("verdict") or {}, per_gpu.get("total_gib") or {}
    if str(cfg.agent_model.device).startswith("cpu") or not verdict:
        return [], []
    bad = [c for c, v in verdict.items() if v != "fits"]
    ranks = (report.get("cluster") or {}).get("world_size", 1)
    where = f"{ranks} rank{'s' if ranks != 1 else ''}"
    needs = ", ".join(f"{totals.get(c, '?')} GiB on {c}" for c in bad)
    if len(bad) == len(verdict):
        return [f"memory: the plan needs {needs} per GPU with {where}, more than each planned device class holds; plan "
                "for the hardware it runs on (cluster.gpu: h100 / h200 / GiB, cluster.nproc_per_node: GPUs under "
                "torchrun) or shrink it (deepspeed.offload_optimizer, deepspeed.zero_stage: 3, agents.policy: lora, a "
                "smaller micro_batch_size or instances_per_update)"], []
    return [], [f"memory: does not fit {c} ({totals.get(c, '?')} GiB per GPU with {where}); fits "
                f"{', '.join(k for k, v in verdict.items() if v == 'fits')}" for c in bad]


def budget_problems(cfg: RunConfig, report: Mapping[str, Any], train: Any) -> tuple[list[str], list[str]]:
    """(errors, warnings) of the run's budget, said at the dry-run: a train set smaller than one rollout batch, an
    epoch whose last batch is partial, and an arm (the config's algorithm or another of its head-to-head) whose agents
    get 0 optimizer steps, an error unless ``agents.zero_updates_ok`` acknowledges it."""
    errors, warns = [], []
    if capabilities(cfg.algo).budget == "plan":
        ipu, rows = int(cfg.algo.instances_per_update), len(train)
        if rows < ipu:
            warns.append(f"budget: the train set ({rows} rows) is smaller than one rollout batch "
                         f"({section(cfg.algorithm)}.instances_per_update: {ipu}); each epoch is one batch of {rows}")
        else:
            partial = sorted({b for b in rollout_batch_sizes(cfg, train) if b < ipu})
            if partial:
                warns.append(f"budget: a last partial rollout batch of {', '.join(map(str, partial))} instance(s) "
                             f"(of {ipu}) in each epoch ({rows} rows); a number of rows that "
                             f"{section(cfg.algorithm)}.instances_per_update divides gives equal batches")
    arms = {a: row.get(STEPS) for a, row in ((report.get("optimisation") or {}).get("settings") or {}).items()}
    arms.setdefault(section(cfg.algorithm), report.get("expected_optimizer_updates_per_agent"))
    for arm, steps in arms.items():
        if not isinstance(steps, list) or min(steps, default=1) > 0:
            continue
        line = (f"budget: {arm} gives its agents {steps} optimizer steps (0 for some agent: nothing learns; a critic's "
                "warm-up can take every batch), so raise num_train_epochs or the train rows, lower "
                "instances_per_update or the warm-up")
        if cfg.agents.zero_updates_ok:
            warns.append(line + " (acknowledged: agents.zero_updates_ok)")
        else:
            errors.append(line + ", or set agents.zero_updates_ok: true if that is the intent")
    return errors, warns


def settle_status(cfg: RunConfig, report: dict[str, Any]) -> dict[str, Any]:
    """The report's ``status``: ``error`` when the run would fail (``errors``: a package it imports is missing
    here, its memory plan fits no planned GPU), else ``unverified`` when something could not be checked from
    here (``unverified``: a hub model offline and not cached), else ``ok``; ``warnings`` gathers the rest."""
    memory_errors, memory_warnings = memory_problems(cfg, report)
    errors = missing_packages(cfg, report.get("cluster") or {}) + memory_errors + list(report.get("budget_errors", []))
    unverified = unverified_models(report.get("model_check") or {})
    per_gpu = (report.get("cluster") or {}).get("memory_per_gpu") or {}
    if per_gpu.get("status") == "unknown" and not str(cfg.agent_model.device).startswith("cpu"):
        unverified.append(f"memory per GPU: not estimated ({per_gpu.get('reason', 'unknown shape')})")
    if memory_warnings:
        report["warnings"] = list(report.get("warnings", [])) + memory_warnings
    report["errors"], report["unverified"] = errors, unverified
    report["status"] = "error" if errors else "unverified" if unverified else "ok"
    return report


def steps_line(steps: Mapping[str, Any], beside_warmup: Mapping[str, Any], refused: bool,
               consented: bool = False) -> str:
    """Each arm's optimizer steps per agent and what their difference is: equal, only a critic's warm-up (the
    critic's credit), or a difference beyond credit that c3 compare runs only with consent."""
    text = "optimizer steps per agent: " + "; ".join(f"{a} {v}" for a, v in steps.items())
    if len({json.dumps(v) for v in steps.values()}) <= 1:
        return text + " (equal)"
    if not refused:
        return text + " (unequal only by a critic's warm-up batches, part of its credit; beside them: " + "; ".join(
            f"{a} {beside_warmup.get(a, v)}" for a, v in steps.items()) + ")"
    if consented:
        return text + " (unequal, compared with consent: --allow-differences optimizer_updates_per_agent)"
    return text + (" (unequal: c3 compare refuses it without --allow-differences optimizer_updates_per_agent; "
                   "minibatches_per_ppo_epoch, the same in every arm, gives every agent the same steps)")


BUDGET_LINE = (("epochs", "epochs"), ("plan", "plan"), ("expected_env_steps", "env steps"),
               ("expected_messages", "messages"), ("expected_optimizer_updates_per_agent",
                                                   "optimizer updates per agent"),
               # the summary's budget, where the report has them
               ("preference_joint_rollouts", "preference rollouts"), ("refreshes", "refreshes"))


def summary(report: Mapping[str, Any], full: str | None = None) -> str:
    """The dry-run in a dozen lines for a person: the verdict and why, the budget, the memory verdict per device
    class, what differs between the algorithms of the config, the warnings; ``full`` says where the JSON is."""
    status = report.get("status", "?")
    lines = [f"dry-run: {status.upper()}  {report.get('algorithm')} on {report.get('domain')}"
             f" ({(report.get('workflow') or {}).get('name', '?')}, model {report.get('model')}, policy "
             f"{report.get('policy')})"]
    lines += [f"  error: {e}" for e in report.get("errors", [])]
    lines += [f"  unverified: {u}" for u in report.get("unverified", [])]
    if "expected_env_steps" in report:
        parts = ([f"{report.get('train_rows')} train rows"]
                 + [f"{label} {report[key]}" for key, label in BUDGET_LINE if key in report])
        shared = [p for p in report.get("optimizer_updates_per_policy") or [] if len(p["agents"]) > 1]
        parts += [f"one shared policy ({', '.join(p['roles'])}) {p['updates']} optimizer updates" for p in shared]
        lines.append("budget: " + ", ".join(parts))
    evals = report.get("eval_rows") or {}
    if evals:
        lines.append("eval: " + ", ".join(f"{k} {v}" for k, v in evals.items()))
    cluster = report.get("cluster") or {}
    per_gpu = cluster.get("memory_per_gpu") or {}
    if per_gpu.get("verdict"):
        lines.append(f"memory per GPU ({cluster.get('world_size', 1)} rank(s), {cluster.get('launcher', 'python')}): "
                     + ", ".join(f"{c} {per_gpu['total_gib'].get(c, '?')} GiB {v}"
                                 for c, v in per_gpu["verdict"].items()))
    optimisation = report.get("optimisation") or {}
    if len(optimisation.get("settings") or {}) > 1:
        differ = [k for k in optimisation.get("differ", []) if k not in optimisation.get("uncontrolled", {})]
        lines.append(f"algorithms {', '.join(optimisation['settings'])} differ in: {', '.join(differ) or 'nothing'}")
        steps = {a: row.get(STEPS) for a, row in optimisation["settings"].items()}
        if all(v is not None for v in steps.values()):
            lines.append(steps_line(steps, optimisation.get("steps_beside_warmup") or {},
                                    STEPS in optimisation.get("uncontrolled", {})))
        for key, pairs in optimisation.get("uncontrolled", {}).items():
            lines.append(f"  not the credit: {key} ({'; '.join(pairs)}): c3 compare refuses it "
                         "without --allow-differences")
    lines += [f"warning: {w}" for w in report.get("warnings", [])]
    lines += [f"note: {n}" for n in report.get("notes", [])]
    lines.append(f"full report: {full or 'add --json to print it as JSON, or --report FILE to write it'}")
    return "\n".join(lines)
