"""Re-entering a team's decision points without training: the session behind ``c3 diagnose`` and ``c3 audit``.

A :class:`Session` is a run's config with its policies loaded into the config's own workflow
trainer (never trained): its generation backend (HF or vLLM, as configured), its sampling
settings and its reward (``reward_leaves``, with the config's reward processor). Every rollout
goes through :func:`c3_plugin.core.rollout.materialize`, so the analysis tools sample exactly what
training would.
"""

from __future__ import annotations

import json
import math
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from c3_plugin.core.config import ConfigError, RunConfig, load_config
from c3_plugin.core.domain import Domain
from c3_plugin.core.registry import capabilities, listed, workflow_algorithms
from c3_plugin.core.rollout import Rollout, materialize
from c3_plugin.core.trace import TraceEntry
from c3_plugin.core.workflow import Workflow
from c3_plugin.run.dry_run import prepare
from c3_plugin.run.folder import latest_checkpoint
from c3_plugin.run.train import build_trainer
from c3_plugin.trainers.bridge import TickingBackend


@dataclass
class Session:
    cfg: RunConfig
    domain: Domain
    workflow: Workflow
    train: Any  # the config's training rows (diagnose draws its contexts from them)
    trainer: Any  # the config's workflow trainer: backend, sampling, reward

    def collect(self, items: Sequence[Mapping[str, Any]], plan: Any,
                given: Sequence[Sequence[TraceEntry]] | None = None, tick: Callable[[], None] | None = None) -> Rollout:
        """Materialise ``plan`` on ``items`` with the behaviour policy (``given``: recorded prefixes to re-enter;
        ``tick``: called after each decision step is generated, :class:`~c3_plugin.trainers.bridge.TickingBackend`)."""
        t = self.trainer
        backend = t.backend if tick is None else TickingBackend(t.backend, tick)
        return materialize(self.workflow, plan, items, backend, t.reward_leaves, t.sampling(), tokenizers=t.tokenizers,
                           use_chat_template=getattr(t.args, "use_chat_template", True), given=given)

    @property
    def reward_top(self) -> float:
        """The top of the domain's reward range after the config's reward processor (1.0 when unknown)."""
        top = (getattr(self.domain.make_reward(self.cfg.domain_cfg), "reward_range", None) or (None, None))[1]
        p = self.cfg.reward_processor
        return float(p.scale * top + p.shift) if top is not None else 1.0


def run_config(run_dir: str | Path, overrides: Sequence[str] = ()) -> RunConfig:
    """The resolved config a run wrote to ``<run>/config.json``."""
    path = Path(run_dir) / "config.json"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir}: no config.json; give a run folder written by c3 train (outputs/<run>)")
    return load_config(data=json.loads(path.read_text()), overrides=list(overrides))


CHECKPOINT_STATE = "training_state.pt"  # CoMLRL's checkpoint file (comlrl.utils.checkpoint.STATE_FILENAME)


def weights_folder(run_dir: str | Path | None, checkpoint: str | None) -> Path | None:
    """Where the policies to load are: ``base`` (or None) the config's model, ``final`` the run's saved
    models (``<run>/final``), ``latest`` or ``checkpoint-N`` one of the run's CoMLRL checkpoints
    (``<run>/checkpoints/``), else a folder holding ``agent_<i>/`` model folders or a checkpoint."""
    if checkpoint in (None, "base"):
        return None
    named = checkpoint == "final" or checkpoint == "latest" or str(checkpoint).startswith("checkpoint-")
    if named and run_dir is None:
        raise ConfigError(f"--checkpoint {checkpoint} needs a run folder (--run)")
    if checkpoint == "final":
        folder = Path(run_dir) / "final"
    elif checkpoint == "latest":
        folder = latest_checkpoint(Path(run_dir) / "checkpoints")
        if folder is None:
            raise FileNotFoundError(f"{run_dir}/checkpoints: no checkpoint-N folder; the run kept no checkpoints "
                                    "(output.checkpoint_interval: 0), use --checkpoint final or base")
    elif str(checkpoint).startswith("checkpoint-") and not Path(checkpoint).exists():
        folder = Path(run_dir) / "checkpoints" / str(checkpoint)
    else:
        folder = Path(checkpoint)
    if (folder / CHECKPOINT_STATE).is_file():
        return folder
    if (folder / "adapters").exists():
        raise ConfigError(f"{folder} holds LoRA adapters; the analysis tools load per-agent models (agent_<i>/) or a "
                          "CoMLRL checkpoint: use --checkpoint latest / checkpoint-N (checkpoints hold the adapters' "
                          "state), merge the adapters into per-agent models, or use --checkpoint base")
    if not (folder / "agent_0").is_dir():
        found = sorted(p.name for p in (Path(run_dir) / "checkpoints").glob("checkpoint-*")) if run_dir else []
        raise FileNotFoundError(f"{folder}: neither agent_<i>/ model folders nor a CoMLRL checkpoint "
                                f"({CHECKPOINT_STATE}); use --checkpoint final (the run saved its models with "
                                "output.save_model: true), base, latest or "
                                f"checkpoint-N{' (this run has ' + ', '.join(found) + ')' if found else ''}")
    return folder


def open_session(cfg: RunConfig, weights: Path | None = None) -> Session:
    """Load the config's domain, data, workflow and policies into its trainer: ``weights`` (from
    :func:`weights_folder`) is a folder of ``agent_<i>/`` models or a CoMLRL checkpoint restored with the
    trainer's own ``load_checkpoint``."""
    if not capabilities(cfg.algo).workflow_trainer:
        raise ConfigError(f"{cfg.algorithm} is not a workflow trainer: the analysis tools re-enter decision points of "
                          f"a workflow; use a {listed(workflow_algorithms(), 'or')} config")
    cfg.wandb.enabled = False
    domain, workflow, train, evals = prepare(cfg)
    checkpoint = weights is not None and (weights / CHECKPOINT_STATE).is_file()
    if weights is not None and not checkpoint:
        cfg.agents.models = [str(weights / f"agent_{a}") for a in range(workflow.num_agents)]
        missing = [m for m in cfg.agents.models if not Path(m).is_dir()]
        if missing:
            raise FileNotFoundError(f"{weights}: missing {', '.join(missing)} for the workflow's "
                                    f"{workflow.num_agents} agents")
    trainer = build_trainer(cfg, domain, workflow, train, evals, None)
    trainer.verbose = False
    if checkpoint:  # CoMLRL restores the checkpoint's policies (and checks it belongs to this config)
        trainer.load_checkpoint(str(weights))
        if getattr(trainer.backend, "sync", None) is not None:
            trainer.backend.sync()  # a vLLM engine samples from the restored weights
    return Session(cfg, domain, workflow, train, trainer)


def seed_all(*parts: Any) -> None:
    """Seed Python, NumPy and torch from ``parts`` (a chunk of work is reproducible on its own, so resumable)."""
    import hashlib

    import torch

    seed = int.from_bytes(hashlib.blake2b(repr(parts).encode(), digest_size=4).digest(), "little")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def mean_ci(values: Sequence[float] | np.ndarray, z: float = 1.96) -> tuple[float, float, float]:
    """Mean and its normal 95% interval; NaN interval with fewer than 2 values."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if not len(v):
        return float("nan"), float("nan"), float("nan")
    m = float(v.mean())
    if len(v) < 2:
        return m, float("nan"), float("nan")
    h = z * float(v.std(ddof=1)) / math.sqrt(len(v))
    return m, m - h, m + h


def bootstrap_ci(stat: Any, groups: int, resamples: int = 400, seed: int = 0) -> tuple[float, float]:
    """Percentile 95% interval of ``stat(index array)`` over resamples of ``groups`` groups."""
    rng = np.random.default_rng(seed)
    vals = np.array([stat(rng.integers(0, groups, groups)) for _ in range(resamples)], dtype=np.float64)
    vals = vals[np.isfinite(vals)]
    if len(vals) < resamples // 2:
        return float("nan"), float("nan")
    lo, hi = np.quantile(vals, [0.025, 0.975])
    return float(lo), float(hi)


def fmt(x: Any, digits: int = 3) -> str:
    """A table cell: numbers rounded, missing values as '-'."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def print_table(rows: Sequence[Mapping[str, Any]], cols: Sequence[str], out: Any = sys.stdout) -> None:
    cells = [[fmt(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(cols)]
    print("  ".join(c.rjust(w) for c, w in zip(cols, widths)), file=out)
    for row in cells:
        print("  ".join(x.rjust(w) for x, w in zip(row, widths)), file=out)
