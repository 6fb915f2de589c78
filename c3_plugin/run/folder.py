"""A run's folder: where it writes, whether one already holds a run, resuming from its last checkpoint,
and removing a folder a failed start made."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from c3_plugin.core.config import ConfigError, RunConfig
from c3_plugin.core.workflow import Workflow


def run_dir_for(cfg: RunConfig, workflow: Workflow) -> Path:
    name = cfg.output.run_name or f"{cfg.domain}-{cfg.algorithm}-{workflow.name}-s{cfg.seed}"
    return Path(cfg.output.base_dir) / name


def latest_checkpoint(ckpt_dir: Path) -> Path | None:
    found = sorted(ckpt_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1])
                   if p.name.split("-")[-1].isdigit() else -1)
    return found[-1] if found else None


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
        raise ConfigError(f"{run_dir} already holds a run (output.if_exists: {mode}); set output.resume: auto to "
                          "continue it, output.if_exists: new (a fresh <name>-2 folder) or overwrite (replace it), or "
                          "another output.run_name")
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
