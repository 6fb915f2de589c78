"""A run's folder: where it writes, whether one already holds a run, resuming from its last checkpoint,
and removing a folder a failed start made."""

from __future__ import annotations

import os
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


CLAIM = ".c3-run"  # made create-exclusive by the run that claims the folder (its process id inside)


def holds_run(folder: Path) -> bool:
    """Whether ``folder`` holds an earlier run's results (metrics, summary or checkpoints) or another run claimed it."""
    return any((folder / name).exists() for name in ("metrics.jsonl", "summary.json", "checkpoints", CLAIM))


def _claim(folder: Path) -> bool:
    """Claim ``folder`` for this process, atomically: its claim file is created exclusively (``O_CREAT | O_EXCL``), so
    of two runs started at once exactly one gets it. False when another run claimed it or it holds results."""
    folder.mkdir(parents=True, exist_ok=True)
    if any((folder / name).exists() for name in ("metrics.jsonl", "summary.json", "checkpoints")):
        return False
    try:
        fd = os.open(folder / CLAIM, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(f"{os.getpid()}\n")
    return True


def release_claim(folder: Path | None) -> None:
    """Give ``folder`` back (a run that failed before training in a folder it did not make): its claim file removed."""
    if folder is not None:
        (folder / CLAIM).unlink(missing_ok=True)


def claim_run_dir(cfg: RunConfig, run_dir: Path) -> tuple[Path, bool]:
    """The folder this run writes to, claimed, and whether this call made (or emptied) it. With ``output.resume`` the
    folder is reused as it is; else the claim is atomic (:func:`_claim`), so two runs started at once with one name
    never share a folder, and a folder holding (or claimed by) another run follows ``output.if_exists``: ``new`` writes
    to ``<name>-2``, ``-3``, ... (saying so in one line), ``overwrite`` empties it first, ``refuse`` raises."""
    import shutil

    existed = run_dir.exists()
    if cfg.output.resume:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / CLAIM).write_text(f"{os.getpid()}\n")
        return run_dir, not existed
    if _claim(run_dir):
        return run_dir, not existed
    mode = cfg.output.if_exists
    if mode == "overwrite":
        for child in run_dir.iterdir():
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        _claim(run_dir)
        return run_dir, True
    if mode != "new":
        raise ConfigError(f"{run_dir} already holds a run (output.if_exists: {mode}); set output.resume: auto to "
                          "continue it, output.if_exists: new (a fresh <name>-2 folder) or overwrite (replace it), or "
                          "another output.run_name")
    n = 2
    while True:
        fresh = run_dir.with_name(f"{run_dir.name}-{n}")
        existed = fresh.exists()
        if _claim(fresh):
            break
        n += 1
    print(f"[c3] {run_dir} holds an earlier run; this run writes to {fresh} "
          "(output.if_exists: overwrite replaces the old one, output.resume: auto continues it)")
    return fresh, not existed


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
