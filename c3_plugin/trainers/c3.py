"""C3: credit by counterfactual continuation.

``C3Trainer`` overrides one hook of the shared workflow trainer, :meth:`compute_advantages`:
at every decision point whose plan samples two or more alternatives from a context, each
alternative is credited with its mean return minus the continuation-weighted mean return
of the other alternatives (:func:`c3_plugin.core.credit.tree_advantages`).

Parallel roles (``share_parallel_samples``): a role that reads nothing of its sibling is
sampled once per context and its ``n1`` samples continue every one of the sibling's ``n0``
alternatives, so the leaves are the cross product. The sibling's credit is the tree
leave-one-out over common continuations; each shared sample is trained once with the mean of
its per-copy advantages, ``mean_j R[j,k] - mean_{k'!=k} mean_j R[j,k']``
(:meth:`c3_plugin.core.rollout.Rollout.unique_credit`, applied in ``build_samples``).

Credit variants (``credit``). ``loo`` (the default) is the paper's estimator as its text states it
(Sections 2-3, B.2): reward-only leave-one-out, no learned critic. ``value_assisted`` reproduces the
default of the authors' reference code (github.com/EIT-EAST-Lab/C3, ``c3_credit_variant``): a
decision-value critic ``Q_hat(h_u, a)`` (:class:`~c3_plugin.trainers.critic.OnlineCritic`, the same
critic MAPPO trains; it reads the context followed by the alternative) replaces, in the proportion
``q_critic_alpha``, the returns of the other alternatives in the baseline, and the credit is z-scored
within each group (:func:`c3_plugin.core.credit.value_assisted_advantages`; so a 2-alternative group gets
+-1, which the trainer warns about). ``Q_hat`` is read before it trains on the batch, then regresses
(mean squared error, ``q_critic_epochs`` steps) on every alternative's mean continuation return; its
first ``q_critic_warmup_updates`` batches train it without using its term (the policies still train,
on z-scored LOO). The reference trains its critic with a binary cross-entropy on leaf rewards in [0, 1]
(``c3_critic_loss_type: bce``) where this one regresses the mean return; both fit the same mean. The
paper's own comparison (B.7) finds such a critic ranks the alternatives of a held-out decision point
at 0.29 rank correlation with a 16-continuation reference where C3's 4 continuations reach 0.69
(``train/q_critic_rank_corr`` logs the same kind of agreement, in-batch before each fit):
``value_assisted`` is there to reproduce the reference code, not as the paper's method.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numpy as np

from c3_plugin.core.credit import CREDITS, masked_spearman, tree_advantages, value_assisted_advantages
from c3_plugin.core.estimator_rules import check
from c3_plugin.core.plan import parse_plan
from c3_plugin.core.registry import Critic, Inert
from c3_plugin.core.rollout import Rollout
from c3_plugin.trainers.actor_critic_fields import ActorCriticFields, actor_critic_constructor
from c3_plugin.trainers.base import WorkflowConfig, WorkflowTrainer
from c3_plugin.trainers.critic import OnlineCritic
from c3_plugin.trainers.update import PolicySample


@dataclass
class C3Config(ActorCriticFields, WorkflowConfig):
    """C3's fields; everything else is WorkflowConfig's and MAGRPOConfig's (and IAC's/MAAC's critic fields, accepted
    and unused: actor_critic_fields.py)."""

    # advantage_normalization=True: one scale per agent and batch, which keeps leave-one-out (z-scoring a 2-alternative
    # group gives +-1)
    normalization_scaling: ClassVar[str] = "batch_scale"
    default_plan_kind: ClassVar[str] = "tree"
    # its credit (registry): the counterfactual tree, the credit variant and its Q critic, how parallel roles share
    # samples, the credit diagnostics and the consent to another estimator
    credit_fields: ClassVar[tuple[str, ...]] = ("plan", "credit", "q_critic_*", "share_parallel_samples",
                                                "credit_diagnostics", "allow_estimator_change")
    # fields its training does not read under some settings (registry.Inert): c3 compare lists a difference in them
    # apart, as changing nothing
    inert_fields: ClassVar[tuple[Inert, ...]] = (
        *WorkflowConfig.inert_fields,
        Inert(("q_critic_*",), lambda c, w: c.credit != "value_assisted",
              "read only under credit: value_assisted (this run: credit: {credit}, no Q critic)"),
        Inert(("allow_estimator_change",),
              lambda c, w: c.credit != "value_assisted" and c.advantage_scaling != "group_zscore",
              "consents to credit: value_assisted or advantage_scaling: group_zscore, and this run sets neither"),
        Inert(("credit_diagnostics",), lambda c, w: True, "chooses whether credit/* diagnostics are logged; the "
              "update is the same either way"),
        Inert(("share_parallel_samples",),
              lambda c, w: w is not None and all(len(stage) == 1 for stage in w.parallel_stages()),
              "the workflow has no parallel roles whose samples could be shared"),
    )
    estimator_description: ClassVar[str] = "leave-one-out over counterfactual continuations (credit: {credit})"
    estimator_rules: ClassVar[tuple[str, ...]] = ("advantage_mode_unread", "clip_high_equals_clip", "no_group",
                                                  "group_zscore_changes_estimator",
                                                  "value_assisted_changes_estimator")  # core/estimator_rules.py RULES
    # C3 needs groups: a tree (or diagnostic) plan (None: num_generations joint actions per turn split over its decision
    # points, [2, 4] for 8 over two; comlrl_compat.default_plan)
    plan: str | dict[str, Any] | None = None
    credit_diagnostics: bool = True  # log credit/* diagnostics (variance, reliability, influence, noise law) per batch
    # sample a parallel role once per distinct context, reuse it under each sibling alternative, train it once
    share_parallel_samples: bool = True
    # accept a setting that turns the leave-one-out credit into another estimator (advantage_scaling: group_zscore,
    # credit: value_assisted); c3_plugin/core/estimator_rules.py
    allow_estimator_change: bool = False
    # "loo": the paper's reward-only leave-one-out; "value_assisted": the reference code's default, a learned Q_hat(h_u,
    # a) mixed into the other alternatives' baseline by q_critic_alpha, then z-scored per group, which makes Q_hat a
    # bonus for the alternative it rates (another estimator: needs allow_estimator_change)
    credit: str = "loo"
    # value_assisted: backbone of Q_hat (None: a copy of agent 0's model; the paper's critic comparison used
    # mmBERT-base)
    q_critic_model: str | None = None
    # value_assisted: weight in [0, 1] of Q_hat's leave-one-out baseline against the returns' (0: z-scored LOO; 1: the
    # reference's default)
    q_critic_alpha: float = 1.0
    q_critic_learning_rate: float = 5e-5  # value_assisted: Q_hat's AdamW learning rate (the reference code's default)
    # value_assisted: Q_hat's passes (one optimizer step each) over a rollout batch's alternatives
    q_critic_epochs: int = 1
    # value_assisted: context + alternative left-truncated to this many tokens (the reference's critic_ctx_limit)
    q_critic_max_tokens: int = 2560
    # value_assisted: first rollout batches whose credit leaves Q_hat's term out (z-scored LOO) while Q_hat trains on
    # them
    q_critic_warmup_updates: int = 1

    @property
    def learned_critic(self) -> Critic | None:
        """``value_assisted``: Q_hat reads every credited alternative (registry.Critic); ``loo`` trains no critic."""
        if self.credit != "value_assisted":
            return None
        return Critic(model=self.q_critic_model, reads="alternatives", max_tokens=int(self.q_critic_max_tokens),
                      epochs=int(self.q_critic_epochs))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.plan is not None and parse_plan(self.plan).kind == "independent":
            raise ValueError(f"C3 needs alternatives that share a context; plan '{self.plan}' has "
                             "none. Use 'tree [2, 4]'")
        self._check_credit_fields()
        check(self, "c3")  # settings that change nothing, or change the estimator without allow_estimator_change

    def _check_credit_fields(self) -> None:
        """``credit`` and the ``q_critic_*`` fields (the value-assisted variant)."""
        if self.credit not in CREDITS:
            raise ValueError(f"credit must be one of {CREDITS}, got {self.credit!r}")
        if not 0.0 <= float(self.q_critic_alpha) <= 1.0:
            raise ValueError(f"q_critic_alpha must be in [0, 1] (a mix of two baselines), got {self.q_critic_alpha}")
        if not float(self.q_critic_learning_rate) > 0:
            raise ValueError(f"q_critic_learning_rate must be > 0, got {self.q_critic_learning_rate}")
        if int(self.q_critic_epochs) < 1 or int(self.q_critic_max_tokens) < 2 or int(self.q_critic_warmup_updates) < 0:
            raise ValueError("q_critic_epochs must be >= 1, q_critic_max_tokens >= 2 and q_critic_warmup_updates >= "
                             f"0, got {self.q_critic_epochs}, {self.q_critic_max_tokens} and "
                             f"{self.q_critic_warmup_updates}")


class C3Trainer(WorkflowTrainer):
    """MAGRPOTrainer with C3 credit: leave-one-out advantages over counterfactual continuations."""

    default_config_cls = C3Config
    algorithm_name = "C3"

    # WorkflowTrainer's constructor, taking IACTrainer's/MAACTrainer's keywords too (actor_critic_fields.py)
    __init__ = actor_critic_constructor(WorkflowTrainer.__init__)

    @property
    def share_identical_contexts(self) -> bool:
        return bool(self.args.share_parallel_samples)

    def compute_advantages(self, rollout: Rollout) -> list[tuple[np.ndarray, np.ndarray]]:
        if self.args.credit == "value_assisted":  # a learned Q_hat (self.q_critic) in the baseline
            return self._value_assisted_advantages(rollout)
        out = []
        for u, adv in enumerate(tree_advantages(rollout.rewards)):
            if adv is not None:
                out.append((rollout.depth_nodes[rollout.workflow.decision_steps[u].index], adv))
        return out

    # ----- credit: value_assisted ---------------------------------------------------------------
    def _build_critics(self) -> None:
        """``self.q_critic``: under ``credit: value_assisted`` the ``Q_hat`` critic (None otherwise), built where
        WorkflowTrainer builds critics (after the agents' DeepSpeed engines, which its own follows)."""
        self.q_critic: OnlineCritic | None = None
        self._q_batch: tuple[list[list[int]], np.ndarray] | None = None
        self._q_metrics: dict[str, float] = {}
        if self.args.credit != "value_assisted":
            return
        if self.share_identical_contexts and any(len(stage) > 1 for stage in self.workflow.parallel_stages()):
            # a shared sample's credit is the mean over its copies, which is exact for the linear leave-one-out
            # but not for a per-group z-score: averaging each parent's z-scores can erase the sample's ranking
            raise ValueError(f"credit: value_assisted z-scores each group, and workflow '{self.workflow.name}' has "
                             "parallel roles whose samples are shared across their sibling's alternatives "
                             "(share_parallel_samples: true), where the mean of per-copy z-scores is not the sample's "
                             "credit; set c3.share_parallel_samples: false, or use credit: loo")
        a = self.args
        self.q_critic = OnlineCritic(self, a.q_critic_model, a.q_critic_learning_rate, a.q_critic_max_tokens,
                                     field="c3.q_critic_model")
        self.critics = [self.q_critic.module]  # the names CoMLRL's checkpoints save and restore
        self.critic_optimizer = self.q_critic.optimizer
        pairs = [u for u, b in enumerate(self.branching) if b == 2]
        if pairs:
            warnings.warn(f"credit: value_assisted z-scores each group of alternatives; at decision point(s) {pairs} "
                          f"the plan '{a.plan}' samples 2 alternatives, whose credit is then always +-1 (or 0)",
                          stacklevel=2)

    def ds_engines(self) -> dict[str, Any]:
        engines = super().ds_engines()
        critic = self.q_critic
        return {**engines, "q_critic": critic.engine} if critic is not None and critic.engine is not None else engines

    def q_critic_inputs(self, rollout: Rollout) -> list[tuple[np.ndarray, np.ndarray, list[str]]]:
        """Per decision point with a group: (entry indices, returns ``[groups, n, c]``, the critic's texts,
        the exact context ``h_u`` followed by the alternative's output) in the order of :func:`tree_advantages`."""
        shape = rollout.rewards.shape
        out = []
        for u in range(len(shape) - 1):
            b = shape[1 + u]
            if b < 2:
                continue
            idx = rollout.depth_nodes[rollout.workflow.decision_steps[u].index]
            entries = [rollout.entries[int(i)] for i in idx]
            out.append((idx, rollout.rewards.reshape(int(np.prod(shape[: 1 + u])), b, -1),
                        [f"{e.context}\n\n{e.output}" for e in entries]))
        return out

    def _value_assisted_advantages(self, rollout: Rollout) -> list[tuple[np.ndarray, np.ndarray]]:
        """:func:`~c3_plugin.core.credit.value_assisted_advantages` at every decision point with a group, ``Q_hat``
        read before it trains on this batch (so its values here are out of sample); ``alpha`` is 0 during the
        ``q_critic_warmup_updates`` first batches. Stores the batch (every alternative, target its mean
        continuation return) for :meth:`update_q_critic`."""
        inputs = self.q_critic_inputs(rollout)
        texts = sorted({t for _, _, ts in inputs for t in ts})  # a shared sample's copies have one text
        states = [self.q_critic.encode(t) for t in texts]
        value_of = dict(zip(texts, self.q_critic.predict(states, self.args.micro_batch_size)))
        warming = self.update_step < int(self.args.q_critic_warmup_updates)
        alpha = 0.0 if warming else float(self.args.q_critic_alpha)
        out, batch_states, targets, rho = [], [], [], []
        state_of = dict(zip(texts, states))
        for idx, returns, ts in inputs:
            q = np.array([value_of[t] for t in ts], dtype=np.float64).reshape(returns.shape[:2])
            out.append((idx, value_assisted_advantages(returns, q, alpha).reshape(-1)))
            means = np.nanmean(returns, -1)
            batch_states += [state_of[t] for t in ts]
            targets.append(means.reshape(-1))
            varies = (np.ptp(q, -1) > 1e-12) & (np.ptp(means, -1) > 1e-12)
            if varies.any():
                rho.append(masked_spearman(q[varies], means[varies], np.ones(q[varies].shape, dtype=bool)))
        target = np.concatenate(targets) if targets else np.zeros(0)
        self._q_batch = (batch_states, target)
        values = np.array([value_of[t] for _, _, ts in inputs for t in ts])
        corr = np.concatenate(rho) if rho else np.zeros(0)
        self._q_metrics = {"train/q_critic_warmup": float(warming),
                           "train/q_critic_value_mean": float(values.mean()) if values.size else float("nan"),
                           "train/q_critic_target_mean": float(target.mean()) if target.size else float("nan"),
                           "train/q_critic_rank_corr": float(np.nanmean(corr)) if np.isfinite(corr).any()
                           else float("nan")}
        return out

    def update_q_critic(self) -> dict[str, float]:
        """Regress ``Q_hat`` on the batch's alternatives (target: each one's mean continuation return),
        ``q_critic_epochs`` optimizer steps; a rank without instances joins with zero-weight passes."""
        (states, targets), self._q_batch = self._q_batch or ([], np.zeros(0)), None
        metrics, self._q_metrics = self._q_metrics, {}
        losses = self.q_critic.fit(states, targets, self.args.q_critic_epochs, self.rng, self.args.micro_batch_size,
                                   self.args.max_grad_norm)
        return {**metrics, "train/q_critic_loss": float(np.mean(losses)) if losses else float("nan")}

    def update_policies(self, samples: Mapping[int, list[PolicySample]]) -> dict[str, float]:
        metrics = self.update_q_critic() if self.q_critic is not None else {}
        metrics.update(super().update_policies(samples))
        return metrics

    def rollout_metrics(self, rollout: Rollout) -> dict[str, float]:
        return super().rollout_metrics(rollout) if self.args.credit_diagnostics else {}

