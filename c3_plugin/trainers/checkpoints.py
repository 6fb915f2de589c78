"""Checkpoints and resume of a workflow trainer, through CoMLRL's checkpoint hooks.

CoMLRL writes a checkpoint at epoch boundaries (models, trainer state, its RNG streams) and calls the
hooks :class:`WorkflowCheckpoints` implements, by name; so this concern is a class placed before CoMLRL's
trainer in the bases (``class WorkflowTrainer(WorkflowBridge, WorkflowCheckpoints, MAGRPOTrainer)``), each
hook short, its work in the functions below:

* the trainer's own state (:func:`extra_state`): the update counter, the budget totals, its RNG, the
  adaptive KL coefficient, and the per-agent settings a resume must keep (:func:`agent_training_record`,
  refused when they changed);
* under DeepSpeed, CoMLRL's checkpoint (written by rank 0) holds no optimizer: the engines' sharded states
  go in its ``deepspeed/`` folder, written by every rank, with each rank's RNG streams
  (:func:`save_rank_state`), and are restored by every rank (a shared file system, as DeepSpeed's), the
  world size and ZeRO stage checked first (:func:`check_deepspeed_assets`);
* on resume the ``metrics.jsonl`` rows logged after the checkpoint are dropped (:func:`truncate_metrics`).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch
import wandb

from c3_plugin.scale.distributed import barrier, broadcast, gathered


def agent_training_record(trainer: Any) -> dict[str, Any]:
    """The per-agent training settings a resume must keep: base learning rates, frozen agents, PPO temperatures."""
    return {"learning_rates": [float(x) for x in trainer.agent_lrs], "frozen": sorted(int(a) for a in trainer.frozen),
            "temperatures": [float(trainer.agent_temperature[a]) for a in sorted(trainer.agent_temperature)]}


def extra_state(trainer: Any) -> dict[str, Any]:
    """What CoMLRL's checkpoint records of the trainer beyond its own state."""
    extra = {"update_step": trainer.update_step, "totals": dict(trainer.totals), "rng": trainer.rng.bit_generator.state,
             "agent_training": agent_training_record(trainer)}
    if getattr(trainer, "kl_controller", None) is not None:
        extra["kl_controller"] = trainer.kl_controller.state_dict()  # the adaptive coefficient
    return extra


def restore_extra_state(trainer: Any, extra: Mapping[str, Any] | None, checkpoint_dir: Any) -> None:
    """Restore :func:`extra_state`; refuse a checkpoint trained with other per-agent settings."""
    if not extra:
        return
    saved, now = extra.get("agent_training"), agent_training_record(trainer)
    if saved is not None and saved != now:  # constructor settings CoMLRL's config check does not see
        raise ValueError(f"checkpoint {checkpoint_dir} was trained with per-agent settings {saved}, this run has {now} "
                         "(agents.learning_rate / learning_rate_scale / trainable, workflow.temperature); resume with "
                         "the same settings, or start a new run (output.resume: null)")
    trainer.update_step = int(extra["update_step"])
    trainer.totals = {k: int(v) for k, v in extra["totals"].items()}
    trainer.rng.bit_generator.state = extra["rng"]
    if getattr(trainer, "kl_controller", None) is not None and "kl_controller" in extra:
        trainer.kl_controller.load_state_dict(extra["kl_controller"])


def truncate_metrics(path: Path, env_step: int) -> None:
    """Drop the rows of ``metrics.jsonl`` an interrupted run logged after its last checkpoint (after ``env_step``:
    their rollouts are run again), so every env step appears once."""
    if not path.exists():
        return
    rows = path.read_text(encoding="utf-8").splitlines()

    def kept_row(row: str) -> bool:
        try:
            return json.loads(row).get("env_step", 0) <= env_step
        except ValueError:  # a line cut short by the crash
            return False

    kept = [r for r in rows if r.strip() and kept_row(r)]
    if len(kept) != len(rows):
        path.write_text("".join(r + "\n" for r in kept), encoding="utf-8")


def save_rank_state(trainer: Any, staging: Path) -> None:
    """Every rank: the engines' shards, then this rank's RNG streams (sampling differs per rank)."""
    for tag, engine in trainer.ds_engines().items():
        engine.save_checkpoint(str(staging / "deepspeed"), tag=tag)
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate(),
             "trainer": trainer.rng.bit_generator.state,
             "cuda": torch.cuda.get_rng_state() if torch.cuda.is_available() else None}
    torch.save(state, staging / "deepspeed" / f"rng_rank{trainer.dist.rank}.pt")
    barrier()


def restore_rank_state(trainer: Any, state: Mapping[str, Any]) -> None:
    """This rank's RNG streams from :func:`save_rank_state` (after CoMLRL restored rank 0's everywhere)."""
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    trainer.rng.bit_generator.state = state["trainer"]
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def check_deepspeed_assets(checkpoint_dir: Any, saved: Mapping[str, Any] | None, trainer: Any) -> None:
    """Refuse to resume DeepSpeed shards without DeepSpeed (or the reverse), or on another world size or ZeRO stage."""
    if saved is None and trainer.engines is None:
        return
    if saved is None or trainer.engines is None:
        how = f"torchrun with {saved['world_size']} processes" if saved else "one process, deepspeed.enabled: auto"
        written = "with" if saved else "without"
        raise ValueError(f"checkpoint {checkpoint_dir} was written {written} DeepSpeed; resume it the same way ({how})")
    stage = int(trainer.deepspeed.zero_stage)
    if int(saved["world_size"]) != trainer.dist.world or int(saved["zero_stage"]) != stage:
        raise ValueError(f"checkpoint {checkpoint_dir} holds ZeRO-{saved['zero_stage']} shards of "
                         f"{saved['world_size']} ranks; this run has ZeRO-{stage} on {trainer.dist.world}: resume with "
                         "the same --nproc_per_node/--nnodes and deepspeed.zero_stage")


def on_train_start(trainer: Any, start_epoch: int) -> None:
    """CoMLRL's train start (after a resume restored the epoch): the epoch counter the data order is seeded by,
    the metrics of a resumed run truncated, and this rank's own RNG streams restored."""
    trainer._epoch = start_epoch
    if getattr(trainer, "resuming", None) and getattr(getattr(trainer, "dist", None), "is_main", True):
        print(f"[c3] resuming {trainer.resuming} at env step {trainer.env_step}", flush=True)
    if start_epoch > 0 and hasattr(trainer, "dist") and trainer.run_dir is not None and trainer.dist.is_main:
        truncate_metrics(trainer.run_dir / "metrics.jsonl", trainer.env_step)
    if getattr(trainer, "_rank_state", None) is not None:
        state, trainer._rank_state = trainer._rank_state, None
        restore_rank_state(trainer, state)


class WorkflowCheckpoints:
    """CoMLRL's checkpoint and model-saving hooks for a workflow trainer (see the module docstring)."""

    def save_model(self, output_dir: str) -> None:
        """Per-agent models as CoMLRL saves them; shared LoRA adapters once, under ``adapters/``. Under
        data parallelism rank 0 writes (ZeRO-3 gathers the parameters on every rank first)."""
        with gathered(self.engines, self.zero3):
            if self.dist.is_main:
                self._save_model(output_dir)
        barrier()

    def _save_model(self, output_dir: str) -> None:
        if not self.lora_adapters:
            return super().save_model(output_dir)
        out = Path(output_dir) / "adapters"
        out.mkdir(parents=True, exist_ok=True)
        self.agents[0].save_pretrained(str(out))
        self.tokenizers[0].save_pretrained(str(out))
        if self.wandb_initialized and wandb.run is not None:
            wandb.finish()

    def _checkpoint_extra_state(self) -> dict[str, Any]:
        return extra_state(self)

    def _restore_checkpoint_extra_state(self, extra: Mapping[str, Any] | None, checkpoint_dir: Any) -> None:
        restore_extra_state(self, extra, checkpoint_dir)

    def save_checkpoint(self, output_dir: Any) -> Any:
        if self.engines is None:
            return super().save_checkpoint(output_dir)
        if self.dist.is_main:
            target = super().save_checkpoint(output_dir)  # calls _checkpoint_save_assets on the staging folder
        else:
            save_rank_state(self, Path(broadcast(None)))
            target = None
        barrier()
        return broadcast(target)

    def _checkpoint_save_assets(self, staging: Path) -> dict[str, Any] | None:
        if self.engines is None:
            return None
        broadcast(str(staging))  # the other ranks write their shards there
        save_rank_state(self, staging)
        return {"deepspeed": {"world_size": self.dist.world, "zero_stage": int(self.deepspeed.zero_stage),
                              "engines": sorted(self.ds_engines())}}

    def _checkpoint_validate_assets(self, checkpoint_dir: Any, assets: Mapping[str, Any]) -> None:
        check_deepspeed_assets(checkpoint_dir, (assets or {}).get("deepspeed"), self)

    def _checkpoint_load_assets(self, checkpoint_dir: Any, assets: Mapping[str, Any]) -> None:
        if self.engines is None:
            return
        folder = Path(checkpoint_dir) / "deepspeed"
        for tag, engine in self.ds_engines().items():
            engine.load_checkpoint(str(folder), tag=tag, load_module_strict=True, load_optimizer_states=True,
                                   load_lr_scheduler_states=False)
        self._rank_state = torch.load(folder / f"rng_rank{self.dist.rank}.pt", weights_only=False)

    def _on_checkpoint_train_start(self, start_epoch: int, total_epochs: int) -> None:
        on_train_start(self, start_epoch)
