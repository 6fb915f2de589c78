"""CoMLRL's ``MAGRPOConfig`` under the workflow trainers: every field honoured or refused, and the default plan.

A CoMLRL script swaps ``MAGRPOConfig``/``MAGRPOTrainer`` for ``C3Config``/``C3Trainer`` and keeps every
field: the defaults are CoMLRL's, so the swap changes the credit only. :data:`MAGRPO_FIELDS` says what each
field means here (``tests/trainers/test_comlrl_fields.py`` walks ``dataclasses.fields(MAGRPOConfig)`` against it and
proves each entry); :func:`resolve_comlrl_fields` turns the CoMLRL fields into the workflow fields when a
config is built; :func:`c3_plugin.core.plan.default_plan` spends the env steps CoMLRL would spend with the same config.

CoMLRL's budget per prompt: each turn node samples ``num_generations`` = K completions per agent and scores
J joint actions (``joint_mode: aligned``: J = K; ``cross``: J = K^N for N agents), and every joint action of
turn t < T opens a child node, so a prompt costs ``J + J^2 + ... + J^T`` reward calls (env steps). The
default plan gives each turn's decision points a tree whose product is J, so C3 scores J^t joint actions at
turn t: the same env steps. J is split over the turn's decision points as evenly as its prime factors allow,
in schedule order (8 over two agents: [2, 4], the paper's tree; 2 over two: [2, 1]), and each later turn's split
is rotated by the earlier turns' branching points (:func:`~c3_plugin.core.plan.rotate_split`: [2, 1] then [1, 2]),
so at two turns or more every agent of a 2-agent team gets groups at CoMLRL's env steps. Where the plan still
leaves a trained agent without a group (one turn, J = 2 over two agents; J = 1; three agents over two turns), the
trainer runs the cheapest tree that gives every one a group on the share of each epoch's prompts that keeps the
run within CoMLRL's env steps, and says so before it trains (:func:`c3_plugin.trainers.setup.every_agent_plan`).
MAGRPO and MAPPO default to ``independent J``.
"""

from __future__ import annotations

from typing import Any

from c3_plugin.core.registry import Inert

# MAGRPOConfig field -> how the workflow trainers read it ("honoured: ..." or "refused: ...").
MAGRPO_FIELDS: dict[str, str] = {
    "num_train_epochs": "honoured: CoMLRL's epoch loop",
    "agent_learning_rate": "honoured: every policy optimizer's learning rate (agents.learning_rate overrides per role)",
    "logging_steps": "honoured: the workflow trainers' W&B training rows go at the env steps CoMLRL's MAGRPOTrainer "
                     "logs at, logging_steps env steps apart or more (wandb_cadence: comlrl; cadence.py); "
                     "metrics.jsonl keeps every batch",
    "num_agents": "honoured: the size of the default team (checked against agents and the workflow)",
    "parallel_training": "honoured: CoMLRL's agent placement ('mp': agents on agent_devices)",
    "agent_devices": "honoured: CoMLRL's agent placement",
    "num_generations": "honoured: the default plan's budget (J joint actions per turn node, see default_plan); an "
                       "explicit plan with another budget is printed",
    "max_new_tokens": "honoured: the generation cap of every role without its own",
    "temperature": "honoured: sampling temperature (the PPO ratio is taken at it)",
    "top_p": "honoured: nucleus sampling",
    "top_k": "honoured: top-k sampling; None is no cut, where CoMLRL passes no top_k and the model's generation "
             "default (50) applies: the workflow trainers warn",
    "num_turns": "honoured: > 1 runs CoMLRL's team for num_turns turns with its external_transition "
                 "as steps of the trace",
    "discount": "honoured: multi-turn returns are sum_t discount^(t-1) r_t (CoMLRL 1.4.3's MAGRPOTrainer sums "
                "undiscounted; a warning says so); with one turn it changes nothing and is accepted, as CoMLRL "
                "accepts it, and listed among the dry-run's inert fields",
    "joint_mode": "honoured: aligned (each joint action's messages drawn for it); cross under C3 is the tree's cross "
                  "product over parallel agents (share_parallel_samples); refused for MAGRPO/MAPPO plans, which "
                  "draw aligned joint runs",
    "early_termination_threshold": "honoured: in training a multi-turn episode ends after a turn whose reward exceeds "
                                   "it (per path: a counterfactual continuation depends on its own trace only; CoMLRL "
                                   "stops a node on its K siblings' mean: the workflow trainers warn); evaluation runs "
                                   "every turn, as CoMLRL's; no effect with one turn, as in CoMLRL",
    "external_prompt_passthrough": "honoured: multi-turn prompts are the transition's text as is (True) or through the "
                                   "agent's formatter (False), as CoMLRL; no effect with one turn, as in CoMLRL",
    "eval_interval": "honoured: evaluate every eval_interval training items (CoMLRL's loop; items still queued for "
                     "a rollout batch are trained on first, so the evaluation sees every item before it, as CoMLRL's)",
    "eval_num_samples": "honoured: eval items per evaluation",
    "eval_batch_size": "honoured: eval items per generate call",
    "rollout_buffer_size": "honoured: prompts per rollout batch and update (instances_per_update, "
                           "when that is not set)",
    "train_batch_size": "honoured when >= rollout_buffer_size (one optimizer step per buffer, as CoMLRL); refused "
                        "below it: the workflow trainers step on messages (minibatch_size)",
    "advantage_normalization": "honoured: C3 divides each agent's leave-one-out advantages in a batch by their std "
                               "(batch_scale, keeping leave-one-out); MAGRPO z-scores each group (group_zscore, "
                               "CoMLRL's); MAPPO standardises the batch (batch_zscore)",
    "advantage_mode": "honoured by MAGRPO (its group baseline); refused under C3 and MAPPO when not the default "
                      "(estimator_rules: advantage_mode_unread)",
    "reference_kl_enabled": "honoured: a token-level KL to a frozen reference in the PPO loss",
    "reference_kl_coef": "honoured: that KL's coefficient",
    "reference_devices": "honoured: where the reference copies live",
}

# fields the workflow trainers accept, as CoMLRL does, where they change nothing (registry.Inert: the dry-run's and
# c3 compare's inert list)
COMLRL_INERT = (
    Inert(("discount",), lambda c, w: int(c.num_turns) == 1,
          "discounts later turns' rewards, and with num_turns: 1 there is one reward per episode (accepted, as "
          "CoMLRL's IAC, MAAC and MAGRPO accept it)"),
)

JOINT_MODES = {"aligned": "aligned", "align": "aligned", "cross": "cross", "crossed": "cross"}


def resolve_comlrl_fields(cfg: Any) -> None:
    """Turn a config's CoMLRL fields into the workflow fields, in place (``WorkflowConfig.__post_init__``):
    ``advantage_scaling`` from ``advantage_normalization``, ``instances_per_update`` from
    ``rollout_buffer_size``; refuse ``train_batch_size`` below the buffer, an unknown ``joint_mode``, and a
    ``discount`` outside (0, 1] (with one turn it has no effect, as in CoMLRL: listed in :data:`COMLRL_INERT`)."""
    wanted = cfg.normalization_scaling if cfg.advantage_normalization else "none"
    if cfg.advantage_scaling is None:
        cfg.advantage_scaling = wanted
    elif cfg.advantage_normalization and cfg.advantage_scaling != wanted:
        raise ValueError("advantage_normalization=True (CoMLRL's z-score; for this algorithm advantage_scaling: "
                         f"{wanted}) contradicts advantage_scaling: {cfg.advantage_scaling}; set "
                         f"advantage_normalization: false to scale with {cfg.advantage_scaling}, or "
                         "drop advantage_scaling")
    if cfg.instances_per_update is None:
        cfg.instances_per_update = int(cfg.rollout_buffer_size)
    elif int(cfg.rollout_buffer_size) != 2 and int(cfg.rollout_buffer_size) != int(cfg.instances_per_update):
        raise ValueError(f"rollout_buffer_size={cfg.rollout_buffer_size} and "
                         f"instances_per_update={cfg.instances_per_update} both set the prompts per "
                         "update; give one of them")
    if int(cfg.train_batch_size) < int(cfg.rollout_buffer_size):
        raise ValueError(f"train_batch_size={cfg.train_batch_size} < rollout_buffer_size={cfg.rollout_buffer_size} "
                         "splits CoMLRL's buffer of prompts into several optimizer steps; the workflow trainers step "
                         "on messages: set minibatch_size (messages per optimizer step) and leave "
                         "train_batch_size at its default")
    mode = JOINT_MODES.get(str(cfg.joint_mode).lower())
    if mode is None:
        raise ValueError(f"joint_mode must be 'aligned' or 'cross' (CoMLRL's), got {cfg.joint_mode!r}")
    cfg.joint_mode = mode
    if not 0.0 < float(cfg.discount) <= 1.0:
        raise ValueError(f"discount must be in (0, 1], got {cfg.discount}")
