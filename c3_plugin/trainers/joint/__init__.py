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

from typing import Any

from c3_plugin.trainers.joint.api import (
    CentralizedAPIError,
    centralized_api_report,
    missing_centralized_api,
    require_centralized_api,
)
from c3_plugin.trainers.joint.records import check_records, check_replay_dir, is_joint_record, mark_joint

TRAINERS = ("JointMAGRPOTrainer", "JointMADPOTrainer", "JointMADPOIterTrainer", "JointMARLHFTrainer",
            "JointMARLHFIterTrainer")
CONFIGS = ("JointMAGRPOConfig", "JointMADPOConfig", "JointMADPOIterConfig", "JointMARLHFConfig",
           "JointMARLHFIterConfig")


# ----- lazy trainer classes ----------------------------------------------------------------------------

def __getattr__(name: str) -> Any:
    """``JointMAGRPOTrainer`` etc. resolve after :func:`require_centralized_api` (clear error on an old core)."""
    if name in TRAINERS or name in CONFIGS:
        require_centralized_api()
        from c3_plugin.trainers.joint import actor as joint_actor

        return getattr(joint_actor, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CONFIGS", "CentralizedAPIError", "TRAINERS", "centralized_api_report", "check_records",
           "check_replay_dir", "is_joint_record", "mark_joint", "missing_centralized_api", "require_centralized_api"]
