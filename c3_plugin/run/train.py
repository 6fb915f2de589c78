"""Running a training job from a :class:`~c3_plugin.core.config.RunConfig`: evaluate, train (with checkpoints
and resume), evaluate, save, summarise. The dry-run is :mod:`c3_plugin.run.dry_run`."""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any

from c3_plugin.core.config import ConfigError, RunConfig
from c3_plugin.core.domain import Domain
from c3_plugin.core.errors import RunInterrupted
from c3_plugin.core.registry import capabilities, resolve, section, workflow_algorithms
from c3_plugin.core.workflow import Workflow, WorkflowError
from c3_plugin.run.contract import REWARD, guarded
from c3_plugin.run.dry_run import prepare
from c3_plugin.run.folder import (
    abandon_run_dir,
    check_resume_config,
    claim_run_dir,
    interrupted_line,
    latest_checkpoint,
    release_claim,
    run_dir_for,
)
from c3_plugin.run.report import plot_history, summary_table
from c3_plugin.scale import distributed as dp
from c3_plugin.scale.peak_memory import peak_memory
from c3_plugin.scale.policies import load_policies


def _seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build_trainer(cfg: RunConfig, domain: Domain, workflow: Workflow, train: Any, evals: Any, run_dir: Path,
                  models: Any = None, tokenizer: Any = None, lora: bool = False):
    """The config's trainer on ``models`` (None: the config's policies, loaded here): CoMLRL's arguments, and the run's
    keywords its algorithm declares (``Capabilities.trainer_keywords``: a workflow trainer's outcome, deepspeed and
    per-role learning rates)."""
    if models is None:
        models, tokenizer, lora = load_policies(cfg.agent_model, cfg.agents, workflow.num_agents)
    _, trainer_cls = resolve(cfg.algorithm)
    wandb_config = None
    if cfg.wandb.enabled and cfg.wandb.mode != "disabled":
        os.environ["WANDB_MODE"] = cfg.wandb.mode
        wandb_dir = Path(cfg.wandb.dir or run_dir)
        wandb_dir.mkdir(parents=True, exist_ok=True)
        wandb_config = {"project": cfg.wandb.project, "entity": cfg.wandb.entity, "name": cfg.wandb.name
                        or run_dir.name,
                        "dir": str(wandb_dir), "tags": list(cfg.wandb.tags), "config_sections": cfg.resolved()}
        if cfg.wandb.group:  # wandb.init reads these (CoMLRL's init passes no group or job type)
            os.environ["WANDB_RUN_GROUP"] = cfg.wandb.group
        os.environ["WANDB_JOB_TYPE"] = cfg.wandb.job_type or cfg.algorithm
    scale, shift = cfg.reward_processor.scale, cfg.reward_processor.shift
    settle(cfg, domain)
    # forced skeletons (None: free text)
    grammar = domain.grammar(cfg.domain_cfg) if domain.grammar is not None else None
    if dp.context().enabled and not dp.context().is_main:
        wandb_config = None  # rank 0 logs
    logger = guarded(domain, "the eval logger", domain.make_eval_logger(workflow))
    keywords = {"outcome": guarded(domain, "outcome(leaves)", domain.outcome), "deepspeed": cfg.deepspeed,
                "learning_rates": cfg.agents.learning_rate,
                "learning_rate_scales": cfg.agents.learning_rate_scale, "trainable": cfg.agents.trainable}
    extra = {k: keywords[k] for k in capabilities(cfg.algo).trainer_keywords}
    trainer = trainer_cls(agents=models, tokenizer=tokenizer, train_dataset=train, eval_dataset=evals,
                          reward_func=guarded(domain, REWARD, domain.make_reward(cfg.domain_cfg)),
                          reward_processor=(lambda r: scale * r + shift), eval_logger=logger,
                          eval_aggregator=domain.eval_aggregator, wandb_config=wandb_config, args=cfg.algo,
                          workflow=workflow, run_dir=run_dir, lora_adapters=lora, grammar=grammar, **extra)
    trainer.verbose = cfg.output.verbose
    return trainer


def settle(cfg: RunConfig, domain: Domain) -> None:
    """Fill in what the run derives from its config, once, before ``config.json`` records it (so the recorded
    config is the one that runs): the domain's W&B keys when the algorithm section sets none, and the agents'
    device (each rank's own under torchrun, which refuses CoMLRL's one-process placement keys)."""
    if getattr(cfg.algo, "wandb_keys", None) is None and domain.wandb_keys is not None:
        cfg.algo.wandb_keys = domain.wandb_keys(cfg.domain_cfg)  # the domain's published surface
    device = dp.context().device if dp.context().enabled else cfg.agent_model.device
    cfg.algo.agent_devices = getattr(cfg.algo, "agent_devices", None) or (None if device == "auto" else device)


def train(cfg: RunConfig, models: Any = None, tokenizer: Any = None, lora: bool = False) -> dict[str, Any]:
    """Run the job; returns the summary (also written to ``<run>/summary.json``)."""
    started = time.perf_counter()
    ctx, run_dir, created, trainer, claimed = dp.context(), None, False, None, False
    # until training starts; a failure removes the run folder this call made (never a resumed run's) and is re-raised
    try:
        if dp.launched_world() > 1:  # torchrun: data-parallel replicas of the team, one per process
            if not capabilities(cfg.algo).data_parallel:
                raise ConfigError(f"torchrun launched {dp.launched_world()} processes, but data parallelism "
                                  f"covers the workflow trainers ({', '.join(workflow_algorithms())}), not "
                                  f"{cfg.algorithm}; launch one process")
            world = dp.launched_world()
            errors = dp.divisibility_errors(cfg.algo, world) + dp.placement_errors(cfg.algo, world)
            if errors:
                raise ConfigError("; ".join(errors))
            dp.use_deepspeed(cfg.deepspeed.enabled)
            ctx = dp.init(cfg.deepspeed.dist_backend, cfg.deepspeed.timeout_minutes)
        missing = dp.missing_devices(cfg.algo, section(cfg.algorithm))
        if missing:  # before any data or model is loaded; an LLM_Collab YAML has the keys in its trainer section
            raise ConfigError("; ".join(missing) + (" (in the LLM_Collab YAML: its trainer section's key, e.g. "
                                                    "magrpo.agent_devices)" if cfg.layout == "llm_collab" else ""))
        domain, workflow, train_ds, evals = prepare(cfg)
        settle(cfg, domain)
        run_dir = run_dir_for(cfg, workflow)
        if ctx.is_main:
            run_dir, created = claim_run_dir(cfg, run_dir)
            claimed = True
            if cfg.output.resume:  # a checkpoint of another config: refused here, before any model loads
                check_resume_config(cfg, run_dir)
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
            trainer.resuming = f"{run_dir.name} from {Path(resume).name}"  # said at train start, with its env step
    except BaseException as exc:
        abandon_run_dir(run_dir if created else None, trainer)
        release_claim(run_dir if claimed and not created else None)
        try:
            exc.before_training = True  # the CLI reports it as one line, like a config error
        except AttributeError:  # an exception type without attributes keeps its traceback
            pass
        raise
    try:
        trainer.train(**kwargs)
    except KeyboardInterrupt:
        raise RunInterrupted(interrupted_line(cfg, run_dir, trainer.env_step)) from None
    after = trainer.evaluate(cfg.algo.final_eval_num_samples)
    summary = {"run_dir": str(run_dir), "algorithm": cfg.algorithm, "workflow": workflow.name,
               "env_steps": trainer.env_step, "totals": dict(trainer.totals), "updates": trainer.update_step,
               "eval_before": before, "eval_after": after, "world_size": ctx.world,
               "wall_s": time.perf_counter() - started, **peak_memory()}
    if ctx.is_main:  # rank 0 writes the summary, plots and the final model (ZeRO-3 gathers on every rank)
        write_outputs(cfg, trainer, run_dir, summary, workflow.name)
    elif cfg.output.save_model:
        trainer.save_model(str(run_dir / "final"))
    return summary


def write_outputs(cfg: RunConfig, trainer: Any, run_dir: Path, summary: dict[str, Any], workflow: str) -> None:
    """What a finished run leaves in its folder: ``summary.json``, the learning curve, the final model (else the W&B
    run closed), and the summary table printed."""
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    history = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    if cfg.output.plot:
        plot_history(history, run_dir / "learning_curve.png", title=f"{cfg.algorithm} on {workflow}")
    if cfg.output.save_model:
        trainer.save_model(str(run_dir / "final"))
    elif trainer.wandb_initialized:
        import wandb

        wandb.finish()
    print(summary_table(summary))


def validate_or_exit(load: Any, as_json: bool = False) -> Any:
    """Turn config, workflow and data errors into one line and a non-zero exit, never a traceback: the line
    ``error: <type>: <message>``, or under ``--json`` (``as_json``) ``{"status": "error", "error": ...}``."""
    try:
        return load()
    except (ConfigError, WorkflowError, ValueError, KeyError, FileNotFoundError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        error = f"{type(exc).__name__}: {msg}"
        print(json.dumps({"status": "error", "error": error}) if as_json else f"error: {error}")
        raise SystemExit(2) from None
