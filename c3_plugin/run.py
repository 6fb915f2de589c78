"""Building and running a training job from a :class:`~c3_plugin.config.RunConfig`.

:func:`dry_run_report` checks everything but the accelerator: data, workflow, plan,
budget, reward and the domain's probe, without loading a model. :func:`train` runs the
job: evaluate, train (with checkpoints and resume), evaluate, save, summarise.
"""

from __future__ import annotations

import json
import os
import random
import warnings
from pathlib import Path
from typing import Any

from .config import ConfigError, RunConfig, build_workflow, load_config
from .domain import Domain, load_domain
from .plan import parse_plan
from .registry import capabilities
from .run_budget import decision_gradients, expected_budget
from .workflow import Workflow, WorkflowError


CREDIT = {"c3": "leave-one-out over counterfactual continuations (credit: {credit})",
          "magrpo": "group baseline over B joint runs ({advantage_mode})", "mappo": "critic values, GAE over decision points"}
SETTINGS = ("estimator", "optimizer_updates_per_agent", "updates_per_1k_env_steps", "expected_env_steps")  # rows besides the config's fields: the credit in words, the budget
DERIVED = ("estimator", "optimizer_updates_per_agent", "updates_per_1k_env_steps")  # follow from fields (the plan a credit needs, a critic's warm-up): shown, never refused themselves
ABSENT = "(absent)"  # a field the algorithm's config does not have


def optimisation_settings(cfg: RunConfig, workflow: Workflow, train: Any, algorithms: Any = None) -> dict[str, Any]:
    """Every effective setting of the config's algorithm and of each other workflow algorithm whose section the
    config holds (the head-to-head a shared base config sets up), or of ``algorithms``; which differ; and which of
    those a controlled comparison refuses.

    A row holds every field of the algorithm's config dataclass (walked, so new fields are picked up) except
    :data:`c3_plugin.estimator_rules.NOT_OPTIMISATION` (output, logging, throughput), plus :data:`SETTINGS` (the budget
    rows only when ``workflow`` and ``train`` are given).
    ``credit_fields``: per algorithm, the fields that are its credit (:func:`c3_plugin.estimator_rules.credit_fields`).
    ``uncontrolled``: per differing key, the algorithm pairs that differ in it although it is the credit of neither
    of the two (what ``c3 compare`` refuses without ``--allow-differences``)."""
    from dataclasses import fields, is_dataclass
    from itertools import combinations

    from .estimator_rules import NOT_OPTIMISATION, credit_fields
    from .registry import section

    if capabilities(cfg.algo).budget != "plan":  # preference and centralized trainers: CoMLRL's own loops, another workflow
        return {"settings": {}, "differ": [], "credit_fields": {}, "uncontrolled": {}, "ignored": []}
    names = list(algorithms) if algorithms else [cfg.algorithm] + [n for n in ("c3", "magrpo", "mappo") if n != cfg.algorithm and n in cfg.raw]
    table: dict[str, dict[str, Any]] = {}
    credit: dict[str, set[str]] = {}
    for name in names:
        other = cfg if name == cfg.algorithm else load_config(data={**cfg.raw, "algorithm": name})
        a = other.algo
        if capabilities(a).budget != "plan" or not is_dataclass(a):
            continue
        row = {f.name: getattr(a, f.name) for f in fields(a) if f.name not in NOT_OPTIMISATION and not f.name.startswith("_")}
        row["estimator"] = CREDIT.get(name, name).format(**{f.name: getattr(a, f.name) for f in fields(a)})
        if workflow is not None and train is not None:  # without them (a config-only check): the fields alone
            budget = expected_budget(other, workflow, train)
            row["optimizer_updates_per_agent"] = budget["expected_optimizer_updates_per_agent"]
            row["updates_per_1k_env_steps"] = [round(1000 * u / max(1, budget["expected_env_steps"]), 3)
                                               for u in budget["expected_optimizer_updates_per_agent"]]
            row["expected_env_steps"] = budget["expected_env_steps"]
        table[section(name)] = row
        credit[section(name)] = credit_fields(name, type(a))
    keys = sorted({k for row in table.values() for k in row})

    def value(algo: str, key: str) -> str:
        return json.dumps(table[algo].get(key, ABSENT), default=str, sort_keys=True)

    differ = sorted(k for k in keys if len({value(a, k) for a in table}) > 1)
    uncontrolled: dict[str, list[str]] = {}
    for key in differ:
        if key in DERIVED:
            continue
        pairs = [f"{a} vs {b}" for a, b in combinations(table, 2)
                 if value(a, key) != value(b, key) and key not in credit[a] | credit[b]]
        if pairs:
            uncontrolled[key] = pairs
    return {"settings": table, "differ": differ, "credit_fields": {a: sorted(c & set(keys)) for a, c in credit.items()},
            "uncontrolled": uncontrolled, "ignored": sorted(NOT_OPTIMISATION)}


def prepare(cfg: RunConfig):
    """Domain, workflow and datasets: everything but the models."""
    from .registry import is_centralized

    if is_centralized(cfg.algorithm):  # fail before any model or data is loaded, never fall back to two actors
        from .trainers.centralized import check_replay_dir, require_centralized_api

        require_centralized_api()
        if getattr(cfg.algo, "preference_replay_dir", None):
            check_replay_dir(cfg.algo.preference_replay_dir, joint=True)
    domain = load_domain(cfg.domain)
    workflow = build_workflow(cfg, domain)
    section = {"train": cfg.dataset.train, "eval": cfg.dataset.eval, "drop_overlap": cfg.dataset.drop_overlap,
               "base_dir": cfg.dataset.base_dir}
    if domain.validate_config is not None:
        domain.validate_config(cfg, workflow)
    train, evals = domain.load_datasets(section, cfg.seed, cfg.domain_cfg)
    if train is None or len(train) == 0:
        raise ConfigError("dataset.train is empty: give a source (a HF name, a JSONL path or 'synthetic')")
    if capabilities(cfg.algo).budget == "plan":
        parse_plan(cfg.algo.plan).branching(workflow.num_decisions)
    check_agent_training(cfg, workflow)
    return domain, workflow, train, evals


def check_agent_training(cfg: RunConfig, workflow: Workflow) -> dict[str, Any]:
    """The ``agents`` section's per-role learning rates and frozen agents, resolved per agent (what the dry-run
    reports), refused where they would do nothing: under the preference and centralized trainers, which keep
    CoMLRL's own optimizers."""
    ag = cfg.agents
    workflow.agent_temperatures()  # roles of one agent must agree on a temperature
    if not (ag.learning_rate or ag.learning_rate_scale or ag.trainable):
        return {}
    if not capabilities(cfg.algo).data_parallel:
        raise ConfigError(f"agents.learning_rate / learning_rate_scale / trainable are honoured by the workflow trainers "
                          f"(c3, magrpo, mappo), not by {cfg.algorithm}; remove them from the agents section")
    lrs = workflow.per_agent(ag.learning_rate, "agents.learning_rate")
    scales = workflow.per_agent(ag.learning_rate_scale, "agents.learning_rate_scale")
    frozen = workflow.per_agent(ag.trainable, "agents.trainable")
    base = float(cfg.algo.agent_learning_rate)
    return {"learning_rate": [0.0 if frozen.get(a) is False else float(lrs.get(a, base * float(scales.get(a, 1.0))))
                              for a in range(workflow.num_agents)],
            "frozen_agents": sorted(a for a, v in frozen.items() if v is False)}


def dry_run_report(cfg: RunConfig) -> dict[str, Any]:
    domain, workflow, train, evals = prepare(cfg)
    eval_rows: dict[str, int] = {}
    for ds in (evals["datasource"] if evals is not None else []):
        eval_rows[ds] = eval_rows.get(ds, 0) + 1
    probe = domain.dry_run_probe(cfg.domain_cfg)
    reward_range = list(getattr(domain.reward_for(cfg.domain_cfg), "reward_range", (None, None)))
    report = {"status": "ok", "algorithm": cfg.algorithm, "domain": cfg.domain,
              "workflow": {"name": workflow.name, "decision_points": workflow.decision_points(),
                           "parallel_stages": workflow.parallel_stages(), "agents": workflow.num_agents},
              "train_rows": len(train), "eval_rows": eval_rows, **expected_budget(cfg, workflow, train),
              "reward_range": reward_range, "probe_reward": probe.get("probe_reward"), "probe": probe,
              "model": cfg.agent_model.name, "policy": cfg.agents.policy}
    training = check_agent_training(cfg, workflow)
    if training:
        report["agent_training"] = training
    if capabilities(cfg.algo).budget == "plan":  # the workflow trainers
        report.update(decision_gradients(cfg.algorithm, cfg.algo.plan, workflow))
        for line in report.get("warnings", []):
            warnings.warn(line, stacklevel=2)
    from .registry import is_centralized

    report["devices"] = {"agents": cfg.agent_model.device}
    from .memory import memory_report

    report["memory"] = memory_report(cfg, workflow)
    from .cluster import cluster_plan, gpu_hours

    report["cluster"] = cluster_plan(cfg, workflow, train)
    report["gpu_hours"] = gpu_hours(cfg, workflow, train)  # the run's and the experiment's GPU-hours on that cluster
    report["optimisation"] = optimisation_settings(cfg, workflow, train)
    from .model_check import check_models

    report["model_check"] = check_models(cfg)  # a local model folder holds weights and a tokenizer; a hub name: "hub"
    if is_centralized(cfg.algorithm):
        from .trainers.centralized import centralized_api_report

        report.update(centralized_api_report())
        if domain.joint_probe is not None:
            report["joint_probe"] = domain.joint_probe(list(train))
        report["c3"] = ("not defined for the centralized joint actor: one model writes the whole joint action at one "
                        "decision point, so no other role's message can be continued counterfactually")
    if domain.dry_run_extra is not None:
        report.update(domain.dry_run_extra(cfg, train, evals))
    return report


def _seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def run_dir_for(cfg: RunConfig, workflow: Workflow) -> Path:
    name = cfg.output.run_name or f"{cfg.domain}-{cfg.algorithm}-{workflow.name}-s{cfg.seed}"
    return Path(cfg.output.base_dir) / name


def latest_checkpoint(ckpt_dir: Path) -> Path | None:
    found = sorted(ckpt_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]) if p.name.split("-")[-1].isdigit() else -1)
    return found[-1] if found else None


def build_trainer(cfg: RunConfig, domain: Domain, workflow: Workflow, train: Any, evals: Any, run_dir: Path,
                  models: Any = None, tokenizer: Any = None, lora: bool = False):
    from .policies import load_policies
    from .registry import resolve

    if models is None:
        models, tokenizer, lora = load_policies(cfg.agent_model, cfg.agents, workflow.num_agents)
    _, trainer_cls = resolve(cfg.algorithm)
    wandb_config = None
    if cfg.wandb.enabled and cfg.wandb.mode != "disabled":
        os.environ["WANDB_MODE"] = cfg.wandb.mode
        wandb_dir = Path(cfg.wandb.dir or run_dir)
        wandb_dir.mkdir(parents=True, exist_ok=True)
        wandb_config = {"project": cfg.wandb.project, "entity": cfg.wandb.entity, "name": cfg.wandb.name or run_dir.name,
                        "dir": str(wandb_dir), "tags": list(cfg.wandb.tags), "config_sections": cfg.resolved()}
        if cfg.wandb.group:  # wandb.init reads these (CoMLRL's init passes no group or job type)
            os.environ["WANDB_RUN_GROUP"] = cfg.wandb.group
        os.environ["WANDB_JOB_TYPE"] = cfg.wandb.job_type or cfg.algorithm
    scale, shift = cfg.reward_processor.scale, cfg.reward_processor.shift
    settle(cfg, domain)
    grammar = domain.grammar(cfg.domain_cfg) if domain.grammar is not None else None  # forced skeletons (None: free text)
    from .distributed import context

    if context().enabled and not context().is_main:
        wandb_config = None  # rank 0 logs
    logger = domain.make_eval_logger(workflow) if domain.make_eval_logger else domain.eval_logger
    from .trainers.base import WorkflowTrainer

    extra = {"outcome": domain.outcome, "deepspeed": cfg.deepspeed, "learning_rates": cfg.agents.learning_rate,
             "learning_rate_scales": cfg.agents.learning_rate_scale, "trainable": cfg.agents.trainable} \
        if issubclass(trainer_cls, WorkflowTrainer) else {}
    trainer = trainer_cls(agents=models, tokenizer=tokenizer, train_dataset=train, eval_dataset=evals, reward_func=domain.reward_for(cfg.domain_cfg),
                          reward_processor=(lambda r: scale * r + shift), eval_logger=logger, eval_aggregator=domain.eval_aggregator,
                          wandb_config=wandb_config, args=cfg.algo, workflow=workflow, run_dir=run_dir, lora_adapters=lora,
                          grammar=grammar, **extra)
    trainer.verbose = cfg.output.verbose
    return trainer


def settle(cfg: RunConfig, domain: Domain) -> None:
    """Fill in what the run derives from its config, once, before ``config.json`` records it (so the recorded
    config is the one that runs): the domain's W&B keys when the algorithm section sets none, and the agents'
    device (each rank's own under torchrun, which refuses CoMLRL's one-process placement keys)."""
    from .distributed import context

    if getattr(cfg.algo, "wandb_keys", None) is None and domain.wandb_keys is not None:
        cfg.algo.wandb_keys = domain.wandb_keys(cfg.domain_cfg)  # the domain's published surface
    device = context().device if context().enabled else cfg.agent_model.device
    cfg.algo.agent_devices = getattr(cfg.algo, "agent_devices", None) or (None if device == "auto" else device)


def train(cfg: RunConfig, models: Any = None, tokenizer: Any = None, lora: bool = False) -> dict[str, Any]:
    """Run the job; returns the summary (also written to ``<run>/summary.json``)."""
    from .report import plot_history, summary_table

    import time

    from . import distributed as dp

    started = time.perf_counter()
    ctx, run_dir, created, trainer = dp.context(), None, False, None
    try:  # until training starts; a failure removes the run folder this call made (never a resumed run's) and is re-raised
        if dp.launched_world() > 1:  # torchrun: data-parallel replicas of the team, one per process
            from .distributed import divisibility_errors, placement_errors

            if not capabilities(cfg.algo).data_parallel:
                raise ConfigError(f"torchrun launched {dp.launched_world()} processes, but data parallelism covers the workflow "
                                  f"trainers (c3, magrpo, mappo), not {cfg.algorithm}; launch one process")
            errors = divisibility_errors(cfg.algo, dp.launched_world()) + placement_errors(cfg.algo, dp.launched_world())
            if errors:
                raise ConfigError("; ".join(errors))
            dp.use_deepspeed(cfg.deepspeed.enabled)
            ctx = dp.init(cfg.deepspeed.dist_backend, cfg.deepspeed.timeout_minutes)
        domain, workflow, train_ds, evals = prepare(cfg)
        settle(cfg, domain)
        run_dir = run_dir_for(cfg, workflow)
        if ctx.is_main:
            run_dir, created = claim_run_dir(cfg, run_dir)
            (run_dir / "config.json").write_text(json.dumps(cfg.resolved(), indent=2, default=str))
        run_dir = Path(dp.broadcast(str(run_dir) if ctx.is_main else None))
        _seed_everything(cfg.seed)  # the same initial weights on every rank (DeepSpeed also broadcasts rank 0's)
        trainer = build_trainer(cfg, domain, workflow, train_ds, evals, run_dir, models, tokenizer, lora)
        if ctx.enabled:
            _seed_everything(cfg.seed + 1000 * ctx.rank)  # then each rank samples its own stream
        ckpt_dir = run_dir / "checkpoints"
        resume = cfg.output.resume
        if resume == "auto":
            resume = dp.broadcast(latest_checkpoint(ckpt_dir) if ctx.is_main else None)
        before_path = run_dir / "eval_before.json"
        if dp.broadcast(bool(resume) and before_path.exists() if ctx.is_main else None):
            before = json.loads(before_path.read_text())
        else:
            before = trainer.evaluate(cfg.algo.final_eval_num_samples)
            if ctx.is_main:
                before_path.write_text(json.dumps(before))
        kwargs: dict[str, Any] = {}
        if cfg.output.checkpoint_interval > 0:
            kwargs = {"checkpoint_dir": str(ckpt_dir), "checkpoint_interval": int(cfg.output.checkpoint_interval)}
        if resume:
            kwargs["resume_from_checkpoint"] = str(resume)
    except BaseException as exc:
        abandon_run_dir(run_dir if created else None, trainer)
        try:
            exc.before_training = True  # the CLI reports it as one line, like a config error
        except AttributeError:  # an exception type without attributes keeps its traceback
            pass
        raise
    trainer.train(**kwargs)
    after = trainer.evaluate(cfg.algo.final_eval_num_samples)
    summary = {"run_dir": str(run_dir), "algorithm": cfg.algorithm, "workflow": workflow.name, "env_steps": trainer.env_step,
               "totals": dict(trainer.totals), "updates": trainer.update_step, "eval_before": before, "eval_after": after,
               "world_size": ctx.world, "wall_s": time.perf_counter() - started, **_peak_memory()}
    if not ctx.is_main:  # rank 0 writes the summary, plots and the final model (ZeRO-3 gathers on every rank)
        if cfg.output.save_model:
            trainer.save_model(str(run_dir / "final"))
        return summary
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    history = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    if cfg.output.plot:
        plot_history(history, run_dir / "learning_curve.png", title=f"{cfg.algorithm} on {workflow.name}")
    if cfg.output.save_model:
        trainer.save_model(str(run_dir / "final"))
    elif trainer.wandb_initialized:
        import wandb

        wandb.finish()
    print(summary_table(summary))
    return summary


def _peak_memory() -> dict[str, float]:
    """This process's peak resident memory and, with CUDA, its peak allocated GPU memory, in GiB."""
    import resource

    import torch

    out = {"peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}  # ru_maxrss is in KiB on Linux
    if torch.cuda.is_available():
        out["peak_gpu_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return out


def validate_or_exit(load: Any) -> Any:
    """Turn config, workflow and data errors into one line and a non-zero exit, never a traceback."""
    try:
        return load()
    except (ConfigError, WorkflowError, ValueError, KeyError, FileNotFoundError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(json.dumps({"status": "error", "error": f"{type(exc).__name__}: {msg}"}))
        raise SystemExit(2)


def holds_run(folder: Path) -> bool:
    """Whether ``folder`` holds an earlier run's results (metrics, summary or checkpoints)."""
    return any((folder / name).exists() for name in ("metrics.jsonl", "summary.json", "checkpoints"))


def claim_run_dir(cfg: RunConfig, run_dir: Path) -> tuple[Path, bool]:
    """The folder this run writes to, created, and whether this call made (or emptied) it. With ``output.resume`` the
    folder is reused as it is; else a folder holding an earlier run follows ``output.if_exists``: ``new`` writes to
    ``<name>-2``, ``-3``, ... (saying so in one line), ``overwrite`` empties it first, ``refuse`` raises."""
    import shutil

    if cfg.output.resume or not holds_run(run_dir):
        created = not run_dir.exists()
        run_dir.mkdir(parents=True, exist_ok=True)
        return run_dir, created
    mode = cfg.output.if_exists
    if mode == "overwrite":
        for child in run_dir.iterdir():
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        return run_dir, True
    if mode != "new":
        raise ConfigError(f"{run_dir} already holds a run (output.if_exists: {mode}); set output.resume: auto to continue it, "
                          "output.if_exists: new (a fresh <name>-2 folder) or overwrite (replace it), or another output.run_name")
    n = 2
    while holds_run(run_dir.with_name(f"{run_dir.name}-{n}")):
        n += 1
    fresh = run_dir.with_name(f"{run_dir.name}-{n}")
    print(f"[c3] {run_dir} holds an earlier run; this run writes to {fresh} "
          "(output.if_exists: overwrite replaces the old one, output.resume: auto continues it)")
    created = not fresh.exists()
    fresh.mkdir(parents=True, exist_ok=True)
    return fresh, created


def abandon_run_dir(run_dir: Path | None, trainer: Any = None) -> None:
    """After a failure before training: close the trainer's W&B run and remove ``run_dir`` (None: keep the folder)."""
    import shutil

    if trainer is not None and getattr(trainer, "wandb_initialized", False):
        try:
            import wandb

            wandb.finish(exit_code=1)
        except Exception:  # noqa: BLE001 - the original error matters, not this one
            pass
    if run_dir is not None:
        shutil.rmtree(run_dir, ignore_errors=True)
