"""The centralized joint actor: one model writes every role's action at one decision point.

One trainable model (one tokenizer, one optimizer) sees a joint prompt holding every role's
context and emits one joint action; ``num_agents`` (2 in travel) counts the *logical* roles
used at the environment boundary, not model copies. The joint completion's own tokens are
what is trained, with the value-only loss mask of the joint JSON skeleton (schema tokens,
forced closes and EOS carry no loss; :mod:`c3_plugin.trainers.streamed_pg`); a joint trajectory is never split
and re-tokenized to train artificial role policies. Only rewards and metrics split the joint text
into the role actions (the domain's adapter, e.g. :class:`domains.travel.joint.TravelJointAdapter`),
which the unchanged reward and evaluator then score; an invalid joint action is a failed action.

C3 is not defined for the centralized actor: with one decision point there is no other
role's message to hold fixed and continue counterfactually.

This module is the entry to the centralized trainers. They need CoMLRL's centralized actor APIs
(``CentralizedMAGRPOTrainer`` / ``CentralizedMAGRPOConfig``, ``CentralizedCollaboration``,
``MADPOConfig.collaboration_mode``); :func:`require_centralized_api` (:mod:`.api`) checks
for them without loading a model. The trainer classes (``JointMAGRPOTrainer`` and the preference
variants) are resolved lazily from :mod:`c3_plugin.trainers.joint.actor` *after* that check, so an
older core fails with a message naming what is missing and how to fix it, never with a bare
ImportError and never by falling back to two actors. :mod:`.actor` imports only the pieces it
needs (:mod:`.api`, :mod:`c3_plugin.trainers.streamed_pg`, :mod:`.records`), never this module.

Replay records of a joint run carry ``"joint": true`` (:func:`mark_joint`, :mod:`.records`);
:func:`check_records` rejects decentralized records in a joint run and joint records in a
decentralized run.
"""

from __future__ import annotations

import math
from typing import Any

from c3_plugin.core.curriculum import epoch_rows

from c3_plugin.trainers.joint.api import CentralizedAPIError, centralized_api_report, missing_centralized_api, require_centralized_api
from c3_plugin.trainers.joint.records import check_records, check_replay_dir, is_joint_record, mark_joint

TRAINERS = ("JointMAGRPOTrainer", "JointMADPOTrainer", "JointMADPOIterTrainer", "JointMARLHFTrainer", "JointMARLHFIterTrainer")
CONFIGS = ("JointMAGRPOConfig", "JointMADPOConfig", "JointMADPOIterConfig", "JointMARLHFConfig", "JointMARLHFIterConfig")


# ----- the centralized MAGRPO budget (for --dry-run) -----------------------------------------------------

def joint_magrpo_budget(args: Any, train: Any) -> dict[str, Any]:
    """Env steps (joint actions), optimizer updates of the one actor and the curriculum of a centralized
    MAGRPO run: per epoch every row of its phase yields ``num_generations`` joint actions; a buffer of
    ``rollout_buffer_size`` prompts (and the epoch's remainder) is one update of
    ``ceil(prompts / train_batch_size)`` optimizer steps. ``train`` is the training dataset (or a row count
    without a curriculum)."""
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
        from c3_plugin.trainers.joint import actor as joint_actor

        return getattr(joint_actor, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CONFIGS", "CentralizedAPIError", "TRAINERS", "centralized_api_report", "check_records",
           "check_replay_dir", "joint_magrpo_budget",
           "is_joint_record", "mark_joint", "missing_centralized_api", "require_centralized_api"]
