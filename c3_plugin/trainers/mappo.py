"""MAPPO on workflows: a centralized critic and GAE over decision points.

The critic is a value head on a transformer backbone that reads the centralized state at
decision point ``u``: the task text followed by every output written before ``u`` on the
run's path (the concatenated context of all agents). The backbone is a copy of agent 0's
model by default, or any model named by ``critic_model`` with its own tokenizer, such as
the small encoder the paper used (mmBERT-base). A decoder's value is read at the state's
last token; an encoder's at its first (the ``[CLS]`` position), see ``critic_pooling``.
Advantages come from GAE over the run's decision points with the terminal reward at the
last one; the critic regresses on the GAE returns. During ``critic_warmup_updates`` rollout
batches only the critic trains. As in the paper, ``advantage_per_token`` divides each
message's (scaled) advantage by its trained token count. The critic trains on fp32 masters
in the agents' compute dtype (:mod:`c3_plugin.scale.precision`); the critic itself is
:class:`~c3_plugin.trainers.critic.OnlineCritic`, shared with C3's ``value_assisted`` credit.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np
import torch

from c3_plugin.core.estimator_rules import check
from c3_plugin.core.plan import parse_plan
from c3_plugin.core.registry import WORKFLOW, Critic
from c3_plugin.core.rollout import Rollout
from c3_plugin.core.trace import path_to
from c3_plugin.trainers.base import WorkflowConfig, WorkflowTrainer
from c3_plugin.trainers.critic import POOLINGS, OnlineCritic, ValueCritic, default_pooling  # noqa: F401 (MAPPO's names for them)
from c3_plugin.trainers.update import PolicySample, trained_tokens


@dataclass
class MAPPOConfig(WorkflowConfig):
    """MAPPO's fields."""

    capabilities = replace(WORKFLOW, decision_critic=True)  # a workflow trainer, a critic state per run and decision
    # its credit (registry): the critic, GAE, and the paper's treatment of the critic's advantages (standardised over
    # the batch, which removes the critic's mean bias, then divided per token): part of MAPPO's estimator, no free knob
    credit_fields: ClassVar[tuple[str, ...]] = ("plan", "gae_lambda", "gamma", "critic_*", "advantage_scaling",
                                                "advantage_per_token")
    estimator_description: ClassVar[str] = "critic values, GAE over decision points"
    estimator_rules: ClassVar[tuple[str, ...]] = ("advantage_mode_unread",
                                                  "clip_high_equals_clip")  # core/estimator_rules.py RULES

    plan: str | dict[str, Any] | None = None  # B full runs per instance, as MAGRPO (None: independent num_generations)
    gae_lambda: float = 0.95  # GAE lambda over decision points
    gamma: float = 1.0  # discount between decision points
    critic_model: str | None = None  # backbone for the critic (None: a copy of agent 0's model)
    critic_learning_rate: float = 1e-5  # critic AdamW learning rate
    critic_epochs: int = 1  # critic passes per rollout batch
    critic_warmup_updates: int = 1  # rollout batches that train only the critic
    # the state is left-truncated to this many tokens (an encoder keeps its leading special token)
    critic_max_tokens: int = 1024
    # where the value is read: "last" token (decoders), "first" token (encoders' [CLS]); "auto" picks by model type
    critic_pooling: str = "auto"
    # divide each message's advantage, after scaling, by its trained token count (the paper's MAPPO)
    advantage_per_token: bool = False

    @property
    def learned_critic(self) -> Critic:
        """The centralized critic: a state per run and decision point, the only update of the warm-up batches."""
        return Critic(model=self.critic_model, reads="decision_states", max_tokens=int(self.critic_max_tokens),
                      epochs=int(self.critic_epochs), policy_warmup_updates=int(self.critic_warmup_updates))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.plan is not None and parse_plan(self.plan).kind != "independent":
            raise ValueError(f"MAPPO runs independent full runs; plan '{self.plan}' is not 'independent B'")
        if not 0.0 <= self.gae_lambda <= 1.0 or not 0.0 < self.gamma <= 1.0:
            raise ValueError("gae_lambda must be in [0, 1] and gamma in (0, 1]")
        if self.critic_pooling not in POOLINGS:
            raise ValueError(f"critic_pooling must be one of {POOLINGS}, got {self.critic_pooling!r}")
        check(self, "mappo")  # settings MAPPO does not read, or that change nothing


def gae(values: np.ndarray, rewards: np.ndarray, gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """GAE over decision points. ``values`` ``[runs, K]``, ``rewards`` ``[runs]`` (terminal).
    Returns (advantages, returns), both ``[runs, K]``."""
    runs, k = values.shape
    adv = np.zeros_like(values)
    nxt_adv = np.zeros(runs)
    for u in range(k - 1, -1, -1):
        nxt_v = values[:, u + 1] if u + 1 < k else np.zeros(runs)
        r = rewards if u == k - 1 else 0.0
        delta = r + gamma * nxt_v - values[:, u]
        nxt_adv = delta + gamma * lam * nxt_adv
        adv[:, u] = nxt_adv
    return adv, adv + values


class MAPPOTrainer(WorkflowTrainer):
    """MAGRPOTrainer with a centralized critic: value per decision point, GAE, critic warm-up."""

    default_config_cls = MAPPOConfig
    algorithm_name = "MAPPO"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.critic = OnlineCritic(self, self.args.critic_model, self.args.critic_learning_rate,
                                   self.args.critic_max_tokens, self.args.critic_pooling, field="mappo.critic_model")
        self.critic_tokenizer = self.critic.tokenizer
        self.critics = [self.critic.module]  # the names CoMLRL's checkpoints save and restore
        self.critic_optimizer = self.critic.optimizer
        self.critic_engine = self.critic.engine
        self._critic_batch: tuple[list[list[int]], np.ndarray] | None = None

    def critic_states(self, rollout: Rollout) -> list[list[int]]:
        """Token ids of the centralized state at every decision entry, runs-major ``[runs x K]``."""
        by_node = {(e.instance, e.node): e for e in rollout.entries}
        states = []
        for leaf in rollout.depth_nodes[-1]:
            chain = path_to(rollout.entries[int(leaf)], by_node)
            question = chain[0].context
            outputs = [e.output for e in chain[1:]]
            for s in rollout.workflow.decision_steps:
                text = "\n\n".join([question] + outputs[: s.index])
                states.append(self._critic_encode(text))
        return states

    def _critic_encode(self, text: str) -> list[int]:
        return self.critic.encode(text)

    def values(self, states: Sequence[Sequence[int]]) -> np.ndarray:
        return self.critic.predict(states, self.args.micro_batch_size)

    def _critic_forward(self, states: Sequence[Sequence[int]]) -> torch.Tensor:
        return self.critic.forward(states)

    def _critic_pad(self) -> int:
        return self.critic.pad_id

    def compute_advantages(self, rollout: Rollout) -> list[tuple[np.ndarray, np.ndarray]]:
        k = rollout.workflow.num_decisions
        states = self.critic_states(rollout)
        values = self.values(states).reshape(-1, k)
        adv, returns = gae(values, rollout.rewards.reshape(-1), self.args.gamma, self.args.gae_lambda)
        self._critic_batch = (states, returns.reshape(-1))
        self._last_values = values
        return [(rollout.depth_nodes[s.index], adv[:, u]) for u, s in enumerate(rollout.workflow.decision_steps)]

    def build_samples(self, rollout: Rollout | None, credited: list[tuple[np.ndarray, np.ndarray]]):
        if rollout is None:  # a rank without instances in this batch: no critic states either (not the last batch's)
            self._critic_batch = None
        samples, adv = super().build_samples(rollout, credited)
        if self.args.advantage_per_token:
            for batch in samples.values():
                for s in batch:
                    s.advantage /= max(1, trained_tokens(s))
            adv = np.array([s.advantage for batch in samples.values() for s in batch])
        return samples, adv

    def ds_engines(self) -> dict[str, Any]:
        engines = super().ds_engines()
        return ({**engines, "critic": self.critic_engine} if getattr(self, "critic_engine", None) is not None
                else engines)

    def update_critic(self) -> dict[str, float]:
        """Regress the critic on the GAE returns: one step per ``critic_epochs`` pass, mean squared error over
        every state of the batch (of every rank under data parallelism, where a rank without states joins
        with zero-weight passes)."""
        states, returns = self._critic_batch or ([], np.zeros(0))
        losses = self.critic.fit(states, returns, self.args.critic_epochs, self.rng, self.args.micro_batch_size,
                                 self.args.max_grad_norm)
        values = self._last_values if states else np.zeros(0)
        out = {"critic/value_loss": float(np.mean(losses)) if losses else float("nan"),
               "critic/value_mean": float(values.mean()) if values.size else float("nan"),
               "critic/return_mean": float(returns.mean()) if len(returns) else float("nan")}
        return out

    def update_policies(self, samples: Mapping[int, list[PolicySample]]) -> dict[str, float]:
        metrics = self.update_critic()
        warming = self.update_step < int(self.args.critic_warmup_updates)
        metrics["critic/warmup"] = float(warming)
        if not warming:
            metrics.update(super().update_policies(samples))
        return metrics
