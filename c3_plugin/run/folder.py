"""A run's folder: where it writes, whether one already holds a run, resuming from its last checkpoint,
and removing a folder a failed start made."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

from c3_plugin.core.config import ConfigError, RunConfig
from c3_plugin.core.registry import section
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


# the algorithm section's fields a resume may change (CoMLRL's checkpoint check ignores them too)
PORTABLE = ("num_train_epochs", "num_iterations", "agent_devices", "critic_devices", "reference_devices",
            "comparator_devices", "parallel_training", "reward_model_device", "reference_device", "logging_steps",
            "logging_interval", "verbose")


def check_resume_config(cfg: RunConfig, run_dir: Path) -> None:
    """Refuse, before any model loads, to resume a checkpoint of ``run_dir`` that was trained under another config
    (the folder's ``config.json``): the differing fields are named with both values, and the two ways out (resume
    with the checkpoint's values, or start a fresh run). CoMLRL refuses it only once training starts, with a
    traceback."""
    ckpt, recorded = latest_checkpoint(run_dir / "checkpoints"), run_dir / "config.json"
    if ckpt is None or not recorded.exists():
        return
    old, new = json.loads(recorded.read_text()), json.loads(json.dumps(cfg.resolved(), default=str))
    name = section(cfg.algorithm)
    diffs = [f"algorithm: {old.get('algorithm')} (checkpoint) vs {new['algorithm']}"] if (
        old.get("algorithm") != new["algorithm"]) else []
    before, now = old.get(name) or {}, new.get(name) or {}
    diffs += [f"{name}.{k}: {before.get(k)!r} (checkpoint) vs {now.get(k)!r}"
              for k in sorted(set(before) | set(now)) if k not in PORTABLE and before.get(k) != now.get(k)]
    for key in ("domain", "seed", "agent_model", "workflow", "dataset"):
        if old.get(key) != new.get(key):
            diffs.append(f"{key}: {json.dumps(old.get(key), default=str)[:80]} (checkpoint) vs "
                         f"{json.dumps(new.get(key), default=str)[:80]}")
    if diffs:
        raise ConfigError(f"{run_dir} holds {ckpt.name} of a run with another config: {'; '.join(diffs)}; resume it "
                          "with the values it was trained with (undo those overrides), or start a fresh run without "
                          "output.resume (it writes to <name>-2) or with another output.run_name")


def interrupted_line(cfg: RunConfig, run_dir: Path, env_step: int) -> str:
    """What Ctrl-C during training says: the env step, and how the same command continues (from the last
    checkpoint) or starts over."""
    ckpt = latest_checkpoint(run_dir / "checkpoints")
    if ckpt is None:
        every = cfg.output.checkpoint_interval
        why = f"output.checkpoint_interval: {every} epoch(s)" if every else "output.checkpoint_interval: 0"
        return (f"interrupted at env step {env_step}; no checkpoint was saved yet ({why}), so the same command starts "
                f"over (output.if_exists: {cfg.output.if_exists})")
    if cfg.output.resume == "auto":
        return f"interrupted at env step {env_step}; the same command resumes from {ckpt.name} ({run_dir})"
    return (f"interrupted at env step {env_step}; the same command with --override output.resume=auto resumes from "
            f"{ckpt.name} ({run_dir})")


# a folder that cannot be written: read-only, not ours, full
WRITE_ERRNOS = (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT)


def write_failure(exc: OSError, cfg: RunConfig) -> str | None:
    """The one line for a run that could not write its output (read-only, not ours, full), with the fix; None for any
    other OS error (it keeps its traceback)."""
    if exc.errno not in WRITE_ERRNOS:
        return None
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
    fix = ("free space there, or point output.base_dir at a disk with room" if full else
           "point output.base_dir at a folder this user can write")
    return (f"cannot write {exc.filename or cfg.output.base_dir}: {exc.strerror or exc}; {fix} (--override "
            "output.base_dir=PATH); a run stopped after a checkpoint continues with --override output.resume=auto")


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
