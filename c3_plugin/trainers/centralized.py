"""The centralized joint actor: one model writes every role's action at one decision point.

One trainable model (one tokenizer, one optimizer) sees a joint prompt holding every role's
context and emits one joint action; ``num_agents`` (2 in travel) counts the *logical* roles
used at the environment boundary, not model copies. The joint completion's own tokens are
what is trained, with the value-only loss mask of the joint JSON skeleton (schema tokens,
forced closes and EOS carry no loss); a joint trajectory is never split and re-tokenized to
train artificial role policies. Only rewards and metrics split the joint text into the role
actions (the domain's adapter, e.g. :class:`domains.travel.joint.TravelJointAdapter`), which
the unchanged reward and evaluator then score; an invalid joint action is a failed action.

C3 is not defined for the centralized actor: with one decision point there is no other
role's message to hold fixed and continue counterfactually.

This module needs CoMLRL's centralized actor APIs (``CentralizedMAGRPOTrainer`` /
``CentralizedMAGRPOConfig``, ``CentralizedCollaboration``, ``MADPOConfig.collaboration_mode``).
:func:`require_centralized_api` checks for them without loading a model; the trainer classes
(``JointMAGRPOTrainer`` and the preference variants) are resolved lazily from
:mod:`c3_plugin.trainers.joint_actor` *after* that check, so an older core fails with a
message naming what is missing and how to fix it, never with a bare ImportError and never by
falling back to two actors.

Replay records of a joint run carry ``"joint": true`` (:func:`mark_joint`);
:func:`check_records` rejects decentralized records in a joint run and joint records in a
decentralized run.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Iterable, Mapping, MutableMapping, Sequence

import torch

FIX = ("install a CoMLRL that contains the centralized actor APIs (comlrl 1.4.3, or a CoMLRL checkout at or after the cen "
       "commit 998ea13) into this environment, e.g. `pip install 'comlrl>=1.4.3'`; keep an older core for other jobs in a "
       "separate environment")

# (module, attribute, what it is): everything the centralized trainers use from CoMLRL.
REQUIRED_API: tuple[tuple[str, str, str], ...] = (
    ("comlrl.trainers.reinforce", "CentralizedMAGRPOTrainer", "the one-actor MAGRPO trainer"),
    ("comlrl.trainers.reinforce", "CentralizedMAGRPOConfig", "its config"),
    ("comlrl.trainers.preference.collaboration", "CentralizedCollaboration", "the role split of a joint action"),
    ("comlrl.trainers.preference.centralized", "CentralizedComparatorAdapter", "the joint prompt/parse protocol"),
    ("comlrl.trainers.preference", "MADPOConfig", "the preference config"),
)
CONFIG_FIELD = ("comlrl.trainers.preference", "MADPOConfig", "collaboration_mode")

TRAINERS = ("JointMAGRPOTrainer", "JointMADPOTrainer", "JointMADPOIterTrainer", "JointMARLHFTrainer", "JointMARLHFIterTrainer")
CONFIGS = ("JointMAGRPOConfig", "JointMADPOConfig", "JointMADPOIterConfig", "JointMARLHFConfig", "JointMARLHFIterConfig")


class CentralizedAPIError(ImportError, ValueError):
    """The installed CoMLRL lacks the centralized actor APIs (a ValueError too, so CLIs report it in one line)."""


def _installed_version() -> str:
    try:
        from importlib.metadata import version

        return version("comlrl")
    except Exception:  # not installed as a distribution (a source checkout on sys.path)
        return "unknown"


def missing_centralized_api() -> list[str]:
    """Dotted names of the centralized APIs the installed CoMLRL lacks (empty when all are there)."""
    missing = []
    for module, attr, what in REQUIRED_API:
        try:
            mod = importlib.import_module(module)
        except ImportError:
            missing.append(f"{module}.{attr} ({what}; module {module} not importable)")
            continue
        if not hasattr(mod, attr):
            missing.append(f"{module}.{attr} ({what})")
    module, cls, name = CONFIG_FIELD
    try:
        config = getattr(importlib.import_module(module), cls)
        fields = {f.name for f in dataclasses.fields(config)} if dataclasses.is_dataclass(config) else set()
    except (ImportError, AttributeError):
        fields = set()
    if name not in fields:
        missing.append(f"{module}.{cls}.{name} (the centralized collaboration switch of the preference trainers)")
    return missing


def require_centralized_api() -> None:
    """Raise :class:`CentralizedAPIError` unless the installed CoMLRL has every centralized actor API.

    Loads no model (imports CoMLRL modules only): call it from ``--dry-run`` and before building a
    centralized trainer. There is no fallback to two actors."""
    missing = missing_centralized_api()
    if missing:
        raise CentralizedAPIError(f"the centralized joint actor needs CoMLRL APIs that the installed comlrl "
                                  f"({_installed_version()}) lacks: {'; '.join(missing)}. Fix: {FIX}")


def centralized_api_report() -> dict[str, Any]:
    """For ``--dry-run``: the CoMLRL version and the centralized APIs found (raises when one is missing)."""
    require_centralized_api()
    return {"comlrl_version": _installed_version(), "centralized_api": "ok",
            "apis": [f"{m}.{a}" for m, a, _ in REQUIRED_API] + [".".join(CONFIG_FIELD)]}


# ----- the value-masked joint likelihood ------------------------------------------------------------

LOSS_AGGREGATIONS = ("sequence_mean", "token_sum")


def masked_joint_log_prob(model: Any, prompt_ids: torch.Tensor, completion_ids: torch.Tensor,
                          loss_mask: Sequence[int] | torch.Tensor, aggregation: str = "sequence_mean") -> torch.Tensor:
    """Log-likelihood of a joint completion under ``model``, over its loss-masked tokens only.

    Every completion token is conditioned on the whole prompt and the earlier joint tokens (one
    causal pass over ``prompt + completion[:-1]``); only tokens with mask 1 (the values the policy
    chose) enter: ``token_sum`` sums their log-probs, ``sequence_mean`` averages them
    (length-normalised value log-probs). A message with no trained token gives a zero that still
    carries the graph. ``completion_ids`` are exactly the generated ids (no padding)."""
    from comlrl.utils.distributed import unwrap_model

    if aggregation not in LOSS_AGGREGATIONS:
        raise ValueError(f"loss_aggregation must be one of {LOSS_AGGREGATIONS}, got {aggregation!r}")
    module = unwrap_model(model)
    device = next(module.parameters()).device
    prompt_ids = torch.as_tensor(prompt_ids, dtype=torch.long).reshape(-1).to(device)
    completion_ids = torch.as_tensor(completion_ids, dtype=torch.long).reshape(-1).to(device)
    mask = torch.as_tensor(list(loss_mask) if not torch.is_tensor(loss_mask) else loss_mask, dtype=torch.float32).reshape(-1).to(device)
    if mask.numel() != completion_ids.numel():
        raise ValueError(f"loss mask has {mask.numel()} entries for {completion_ids.numel()} completion tokens")
    if not prompt_ids.numel():
        raise ValueError("the joint actor needs a non-empty tokenized prompt")
    if not completion_ids.numel():
        return sum(p.sum() * 0.0 for p in module.parameters() if p.requires_grad)
    module.train()
    input_ids = torch.cat([prompt_ids, completion_ids[:-1]]).unsqueeze(0)
    logits = module(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), use_cache=False).logits[0, prompt_ids.numel() - 1:]
    token_logp = logits.float().log_softmax(-1).gather(1, completion_ids[:, None]).squeeze(1)
    total = (token_logp * mask).sum()
    if aggregation == "sequence_mean":
        return total / mask.sum().clamp(min=1.0)
    return total


# ----- replay records ---------------------------------------------------------------------------------

JOINT_KEY = "joint"


def mark_joint(record: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Mark a replay record as written by a centralized (joint-actor) run; returns it."""
    record[JOINT_KEY] = True
    return record


def is_joint_record(record: Mapping[str, Any]) -> bool:
    return record.get(JOINT_KEY) is True


def check_records(records: Iterable[Mapping[str, Any]], joint: bool, source: str = "replay") -> list[Mapping[str, Any]]:
    """The records, if every one matches the run's kind; otherwise a ValueError naming the first mismatch.

    A joint run accepts only records marked ``"joint": true`` (one joint prompt and one joint
    completion per side); a decentralized run only unmarked ones (one prompt and completion per role)."""
    out = list(records)
    for k, rec in enumerate(out):
        if not isinstance(rec, Mapping):
            raise ValueError(f"{source}: record {k} is a {type(rec).__name__}, not a mapping")
        if is_joint_record(rec) != bool(joint):
            kind, run = (("a decentralized (per-role)", "a centralized joint-actor") if joint
                         else ("a centralized joint-actor", "a decentralized (per-role)"))
            raise ValueError(f"{source}: record {k} is {kind} preference record but this is {run} run; joint and "
                             "per-role replay cannot be mixed: point the replay directory at records of the same kind "
                             "(each run writes its own under its run directory)")
    return out


def check_replay_dir(directory: str | Any, joint: bool) -> int:
    """Check every record of the replay shards (``iteration_*.json``) under ``directory`` before training
    (no model needed); returns the number of records checked (0 when the directory is absent or empty)."""
    import json
    from pathlib import Path

    path = Path(directory)
    count = 0
    for shard in sorted(path.glob("iteration_*.json")) if path.is_dir() else []:
        records = json.loads(shard.read_text(encoding="utf-8")).get("pairs", [])
        count += len(check_records(records, joint, source=str(shard)))
    return count


# ----- the centralized MAGRPO budget (for --dry-run) -----------------------------------------------------

def joint_magrpo_budget(args: Any, train: Any) -> dict[str, Any]:
    """Env steps (joint actions), optimizer updates of the one actor and the curriculum of a centralized
    MAGRPO run: per epoch every row of its phase yields ``num_generations`` joint actions; a buffer of
    ``rollout_buffer_size`` prompts (and the epoch's remainder) is one update of
    ``ceil(prompts / train_batch_size)`` optimizer steps. ``train`` is the training dataset (or a row count
    without a curriculum)."""
    import math

    from ..curriculum import epoch_rows

    epochs = int(args.num_train_epochs)
    phases, rows_per_epoch = epoch_rows(getattr(args, "curriculum", None), epochs, train)
    gens, buffer = int(args.num_generations), int(args.rollout_buffer_size)
    batch = int(getattr(args, "train_batch_size", None) or buffer)
    steps = 0
    for rows in rows_per_epoch:
        chunks = [buffer] * (rows // buffer) + ([rows % buffer] if rows % buffer else [])
        steps += sum(math.ceil(c / batch) for c in chunks)
    out: dict[str, Any] = {"actors": 1, "roles": int(args.num_agents), "epochs": epochs, "joint_actions_per_prompt": gens,
                           "expected_env_steps": sum(rows_per_epoch) * gens, "expected_optimizer_updates": steps}
    if phases:
        out["curriculum"] = [{"name": p.name, "epochs": p.epochs, "where": {f: list(v) for f, v in (p.where or {}).items()},
                              "rows": len(p.rows(train)), "env_steps": p.epochs * len(p.rows(train)) * gens,
                              "eval_every_env_steps": p.eval_every} for p in phases]
    return out


# ----- lazy trainer classes ----------------------------------------------------------------------------

def __getattr__(name: str) -> Any:
    """``JointMAGRPOTrainer`` etc. resolve after :func:`require_centralized_api` (clear error on an old core)."""
    if name in TRAINERS or name in CONFIGS:
        require_centralized_api()
        from . import joint_actor

        return getattr(joint_actor, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CONFIGS", "CentralizedAPIError", "LOSS_AGGREGATIONS", "TRAINERS", "centralized_api_report", "check_records",
           "check_replay_dir", "joint_magrpo_budget",
           "is_joint_record", "mark_joint", "masked_joint_log_prob", "missing_centralized_api", "require_centralized_api"]
