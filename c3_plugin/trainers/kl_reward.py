"""The KL penalty in the reward (``kl_reward_coef`` > 0), between collection and credit.

Every leaf's return becomes ``R - coef * KL(path)`` whichever algorithm credits it, ``KL(path)`` the sum over
the path's messages of their summed per-token KL estimates between the sampling policy (the recorded
behaviour log-probs: temperature-scaled, full vocabulary) and a frozen reference copy of the starting policy
at the same temperature (:func:`reference_models`); an adaptive coefficient (``kl_reward_target``,
:class:`~c3_plugin.trainers.optim.KLController`) then moves with the batch's mean KL per path over every rank.
Budgets, the trace's rewards and ``train/reward_mean`` stay the task reward's.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from comlrl.utils.reference_kl import clone_reference_models, resolve_reference_devices

from c3_plugin.core.loss import token_logprobs
from c3_plugin.core.rollout import Rollout
from c3_plugin.scale.distributed import all_sum
from c3_plugin.trainers.optim import KLController, kl_per_token
from c3_plugin.trainers.samples import entry_prompt_ids


def reference_models(agents: Sequence[Any], existing: Sequence[Any] | None, args: Any,
                     agent_devices: Any) -> list[Any] | None:
    """One frozen reference copy of each distinct starting model, shared by the agents it plays (entry ``a``:
    agent ``a``'s): CoMLRL's (``existing``, built when its ``reference_kl_enabled``), else, for the KL penalty
    in the reward, CoMLRL's ``clone_reference_models`` of each distinct model on ``reference_devices``; a LoRA
    team's copy is the base with its zero-initialised adapters. ``existing`` as it is when neither is asked."""
    first: dict[int, int] = {}
    for a, model in enumerate(agents):
        first.setdefault(id(model), a)
    owner = [first[id(model)] for model in agents]
    refs = list(existing or [])
    if refs:
        return [refs[owner[a]] for a in range(len(agents))]
    if float(args.kl_reward_coef) <= 0:
        return existing
    devices = resolve_reference_devices(args, agent_devices, len(agents))
    distinct = sorted(set(owner))
    copies = clone_reference_models([agents[a] for a in distinct], devices=[devices[a] for a in distinct])
    clones = dict(zip(distinct, copies))
    return [clones[owner[a]] for a in range(len(agents))]


def kl_controller(args: Any) -> KLController | None:
    """The (adaptive) coefficient of the penalty; None when it is off."""
    if args.kl_reward_coef <= 0:
        return None
    return KLController(args.kl_reward_coef, args.kl_reward_target, args.kl_reward_horizon)


def apply_kl_reward(trainer: Any, rollout: Rollout | None) -> dict[str, float]:
    """Penalise ``rollout.rewards`` in place (``trainer.kl_controller``'s coefficient, :func:`path_kl`), then move
    the coefficient with the mean KL per path over every rank (a collective: every rank calls it, with or without
    a rollout). Returns ``train/kl_reward_coef``, ``train/kl_path_mean`` and ``train/kl_penalty_mean``."""
    kl = path_kl(trainer, rollout) if rollout is not None else np.zeros(0)
    coef = trainer.kl_controller.value
    if rollout is not None:
        rollout.rewards = rollout.rewards - coef * kl.reshape(rollout.rewards.shape)
    n, total = all_sum([kl.size, float(kl.sum())])
    mean = total / max(n, 1.0)
    trainer.kl_controller.update(mean, int(n))
    return {"train/kl_reward_coef": coef, "train/kl_path_mean": mean, "train/kl_penalty_mean": coef * mean}


def path_kl(trainer: Any, rollout: Rollout) -> np.ndarray:
    """KL(path) per leaf, row-major like ``rollout.rewards``: over the path's messages, the sum of the
    ``kl_reward_estimator`` estimates of ``KL(pi || pi_ref)`` at each trained token (a grammar's forced tokens
    excluded), ``pi`` the temperature-scaled full-vocabulary sampling policy (the recorded behaviour log-probs,
    before any top-p/top-k truncation) and ``pi_ref`` the agent's frozen reference (``trainer.reference_models``)
    at the same temperature. A shared sample is scored once and counts on every path it is on."""
    args = trainer.args
    owners: dict[int, list[int]] = {}
    for k, e in enumerate(rollout.entries):
        if e.kind == "decision" and e.shared is None and not e.ended:
            owners.setdefault(int(e.agent), []).append(k)
    message_kl: dict[int, float] = {}
    for agent, idx in owners.items():
        entries = [rollout.entries[k] for k in idx]
        tok = trainer.tokenizers[agent]
        prompts = [entry_prompt_ids(e, tok, trainer.workflow, args.use_chat_template) for e in entries]
        ref = token_logprobs(trainer.reference_models[agent], prompts, [list(e.token_ids) for e in entries],
                             trainer._pad_id(agent), trainer.agent_temperature[agent], int(args.micro_batch_size))
        for k, e, r in zip(idx, entries, ref):
            per_token = kl_per_token(e.logprobs, r, args.kl_reward_estimator)
            mask = np.ones(len(per_token)) if e.loss_mask is None else np.asarray(e.loss_mask, dtype=np.float64)
            message_kl[k] = float((per_token * mask).sum())
    by_node = {(e.instance, e.node): k for k, e in enumerate(rollout.entries)}
    out = np.zeros(len(rollout.depth_nodes[-1]))
    for j, leaf in enumerate(rollout.depth_nodes[-1]):
        k = int(leaf)
        while k >= 0:
            e = rollout.entries[k]
            if e.kind == "decision" and not e.ended:
                out[j] += message_kl[int(rollout.owner[k])]
            k = by_node[(e.instance, e.parent)] if e.parent >= 0 else -1
    return out
