"""Centralized joint-actor trainers (import through :mod:`c3_plugin.trainers.joint`, which checks
CoMLRL's centralized APIs first): ``JointMAGRPOTrainer`` and the preference variants
``JointMADPOTrainer``, ``JointMARLHFTrainer``, ``JointMADPOIterTrainer``, ``JointMARLHFIterTrainer``.

:class:`JointMAGRPOTrainer` is :class:`~.bridge.WorkflowBridge` + CoMLRL's
``CentralizedMAGRPOTrainer``: one actor, one tokenizer, one optimizer; ``num_agents`` logical
roles. CoMLRL's MAGRPO loop samples ``num_generations`` joint actions per prompt through the
bridge (the joint workflow's single role, the joint JSON skeleton forced by the grammar),
scores each by splitting it with the domain adapter and calling the unchanged task reward
(``CentralizedCollaboration``), and trains the *joint completion tokens* with the skeleton's
value-only loss mask (:func:`~.streamed_pg.train_mode_log_prob`), streamed one sequence at a
time. Evaluation is the bridge's greedy workflow evaluation (fixed task reward; the eval logger
receives the split role actions).

The preference variants are the workflow preference trainers (:mod:`.preference`) in CoMLRL's
centralized mode (``collaboration_mode="centralized"`` with the domain's joint adapter): one
actor samples joint candidates (comparators too, with their exact ids and value masks), the
joint adapter splits them only for the task reward, DPO / the reward model / the online MAGRPO
stage train the joint completions with the masked likelihood, and replay records are joint.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from comlrl.trainers.reinforce import CentralizedMAGRPOConfig, CentralizedMAGRPOTrainer

from c3_plugin.core.curriculum import check_rows, parse_curriculum
from c3_plugin.core.loss import SEQUENCE_AGGREGATIONS
from c3_plugin.core.registry import Capabilities
from c3_plugin.core.workflow import Workflow, load_workflow
from c3_plugin.trainers.base import WorkflowTrainer
from c3_plugin.trainers.bridge import WorkflowBridge, comlrl_constructor
from c3_plugin.trainers.joint.api import (
    JOINT_WORKFLOW,
    centralized_api_report,
    default_joint_adapter,
    joint_domain,
    require_centralized_api,
)
from c3_plugin.trainers.joint.records import check_records, check_replay_dir, mark_joint
from c3_plugin.trainers.preference import (
    WorkflowMADPOIterTrainer,
    WorkflowMADPOTrainer,
    WorkflowMARLHFIterTrainer,
    WorkflowMARLHFTrainer,
)
from c3_plugin.trainers.streamed_pg import StreamedPolicyGradient


def _joint_workflow(workflow: Workflow | str | None) -> Workflow | str | None:
    """``workflow``, with the default name resolved to the joint domain's workflow."""
    return (joint_domain().workflow(JOINT_WORKFLOW) if isinstance(workflow, str)
            and workflow == JOINT_WORKFLOW else workflow)


def _check_joint_workflow(workflow: Workflow) -> None:
    steps = workflow.decision_steps
    if workflow.num_agents != 1 or len(steps) != 1:
        raise ValueError("a centralized joint actor plays a one-role workflow with one decision point (e.g. "
                         f"'travel_joint'); workflow '{workflow.name}' has {workflow.num_agents} agents and decisions "
                         f"{[s.name for s in steps]}. Set workflow.name to the domain's joint workflow")


class JointActorMixin:
    """What every centralized trainer here shares: the joint workflow and adapter checks and the eval
    logger over the split role actions."""

    joint = True  # replay/record kind of the centralized trainers

    def _joint_setup(self, workflow: Any, args: Any, agents: Sequence[Any] | None, adapter: Any,
                     lora_adapters: bool) -> Any:
        """Validate the one-actor set-up (before the CoMLRL constructor); returns the adapter."""
        if lora_adapters:
            raise ValueError("the centralized joint actor trains one full model: agents.policy=lora (per-role "
                             "adapters) does not apply; use agents.policy=per_agent")
        self.workflow = workflow if isinstance(workflow, Workflow) else load_workflow(workflow)
        _check_joint_workflow(self.workflow)
        if agents is not None and len(agents) != 1:
            raise ValueError(f"the centralized joint actor is one model; got {len(agents)} agent models")
        adapter = adapter if adapter is not None else default_joint_adapter(self.workflow)
        roles = int(getattr(adapter, "num_roles", args.num_agents))
        if int(args.num_agents) != roles:
            raise ValueError(f"num_agents={args.num_agents} but the joint adapter splits actions into {roles} roles; "
                             "num_agents counts the logical roles of the joint action")
        if getattr(args, "loss_aggregation", "sequence_mean") not in SEQUENCE_AGGREGATIONS:
            raise ValueError(f"loss_aggregation must be one of {SEQUENCE_AGGREGATIONS}, got {args.loss_aggregation!r}")
        self.lora_adapters = False
        return adapter

    def _joint_finish(self) -> None:
        """After the CoMLRL constructor: eval logger over the split role actions."""
        collab = self.centralized_collaboration
        logger = self.eval_logger
        if logger is not None:
            def split_logger(agent_completions_turns, batch_items, prompts=None):
                turns = agent_completions_turns
                if len(turns) == 1:  # the joint actor's texts: split into the role actions first
                    turns = collab.split_eval(turns, list(batch_items))
                return logger(agent_completions_turns=turns, batch_items=batch_items, prompts=prompts)

            self.eval_logger = split_logger


class JointMAGRPOMixin(StreamedPolicyGradient, JointActorMixin):
    """Centralized MAGRPO's update: value-masked joint likelihoods, streamed one completion at a time,
    and CoMLRL's train logs routed through ``log_metrics``."""

    # ----- the joint loss: the streamed policy gradient over value-masked joint likelihoods --------
    def _pg_terms(self, agent_idx: int, completions_data: Mapping[str, Any], returns: Sequence[float]):
        sequences, masks = completions_data["completion_input_ids"][0], completions_data["completion_loss_masks"][0]
        if not (len(sequences) == len(masks) == len(returns)):
            raise ValueError(f"{len(sequences)} joint completions, {len(masks)} masks and "
                             f"{len(returns)} returns must align")
        self._joint_stats["value_tokens"] += float(sum(sum(m) for m in masks))
        self._joint_stats["tokens"] += float(sum(len(s) for s in sequences))
        yield from super()._pg_terms(agent_idx, completions_data, returns)

    def _after_policy_step(self, loss: float) -> None:
        self.update_step += 1
        self._joint_stats["loss"] = loss

    # ----- logging --------------------------------------------------------------------------------
    def _drain_ready_buffers(self, ready_agents: list[int]) -> None:
        """CoMLRL's buffer processing, its ``turn_1/*`` logs routed through ``log_metrics`` (metrics.jsonl
        and ``wandb_keys``-filtered W&B against ``env_step``) with the update's loss and mask counts."""
        for agent_idx in sorted({int(i) for i in ready_agents}):
            result = self._process_buffer(agent_idx, self.rollout_buffers[agent_idx])
            for entry in result.get("log_entries", []):
                step = int(entry.get("step", self.env_step))
                metrics = dict(entry.get("metrics") or {})
                stats = self._joint_stats
                metrics.update({"train/update_step": float(self.update_step), "train/loss": stats["loss"],
                                "train/value_token_fraction": stats["value_tokens"] / max(1.0, stats["tokens"]),
                                **{f"budget/total_{k}": float(v) for k, v in self.totals.items()}})
                self._joint_stats = _fresh_stats()
                if not self._should_log_train(step):  # train/* every update; turn_1/* throttled by logging_steps
                    metrics = {k: v for k, v in metrics.items() if not k.startswith("turn_1/")}
                self.log_metrics({**metrics, "env_step": float(step)})

    def _checkpoint_extra_state(self) -> dict[str, Any]:
        return {"update_step": self.update_step, "totals": dict(self.totals)}

    def _restore_checkpoint_extra_state(self, extra: Mapping[str, Any] | None, checkpoint_dir: Any) -> None:
        if extra:
            self.update_step = int(extra["update_step"])
            self.totals = {k: int(v) for k, v in extra["totals"].items()}


def _fresh_stats() -> dict[str, float]:
    return {"loss": 0.0, "value_tokens": 0.0, "tokens": 0.0}


class JointConfigChecks:
    """What the run path asks of a centralized joint-actor config (core/registry.py): its checks before any data or
    model loads, and its entries in the dry-run's report."""

    def preflight(self) -> None:
        """CoMLRL's centralized actor API is there, and every replay record is a joint one (never two actors)."""
        require_centralized_api()
        if getattr(self, "preference_replay_dir", None):
            check_replay_dir(self.preference_replay_dir, joint=True)

    def dry_run_entries(self) -> dict[str, Any]:
        """The CoMLRL version and centralized APIs found, and why C3 has no counterpart here."""
        return {**centralized_api_report(),
                "c3": ("not defined for the centralized joint actor: one model writes the whole joint action at one "
                       "decision point, so no other role's message can be continued counterfactually")}


@dataclass
class JointMAGRPOConfig(JointConfigChecks, CentralizedMAGRPOConfig):
    """Centralized MAGRPO on a joint workflow; CoMLRL's MAGRPOConfig fields keep their meaning
    (``num_generations`` joint actions per prompt, ``rollout_buffer_size`` prompts per update)."""

    capabilities = Capabilities(budget="per_prompt")  # registry.Capabilities

    num_agents: int = 2  # logical roles of the joint action (one actor model)
    num_turns: int = 1  # must stay 1
    collaboration_mode: str = "centralized"  # must stay "centralized"
    # "sequence_mean" (each joint message's mean value-token log-prob) or "token_sum" (summed value-token log-probs)
    loss_aggregation: str = "sequence_mean"
    eval_interval: int = 0  # CoMLRL's per-item eval interval (0: off; phases' eval_every counts env steps instead)
    # phases [{epochs, where: {field: [values]}, eval_every: env steps}]; epochs sum to num_train_epochs
    curriculum: list[dict[str, Any]] | None = None
    final_eval_num_samples: int | None = None  # items of the before/after evaluations (None: eval_num_samples; 0: all)
    # glob patterns of the metric keys published to W&B (None: all); metrics.jsonl keeps everything
    wandb_keys: list[str] | None = None
    use_chat_template: bool = True  # wrap the joint prompt in the tokenizer's chat template when it has one
    generation_batch_size: int | None = None  # cap on sequences per generate call (None: all of a prompt's at once)
    json_stop: bool = False  # stop free-text generation once the joint message is one complete JSON object
    seed: int = 0  # seeds the data order
    # MAGRPOConfig fields with the workflow trainers' defaults:
    temperature: float = 1.0  # sampling temperature
    top_p: float = 1.0  # nucleus sampling mass
    top_k: int | None = None  # top-k sampling (None: off)
    advantage_normalization: bool = False  # CoMLRL's per-group z-score of the advantages

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.loss_aggregation not in SEQUENCE_AGGREGATIONS:
            raise ValueError(f"loss_aggregation must be one of {SEQUENCE_AGGREGATIONS}, got {self.loss_aggregation!r}")
        parse_curriculum(self.curriculum, int(self.num_train_epochs))


class JointMAGRPOTrainer(JointMAGRPOMixin, WorkflowBridge, CentralizedMAGRPOTrainer):
    """MAGRPO with one joint actor (see the module docstring)."""

    default_config_cls = JointMAGRPOConfig
    algorithm_name = "MAGRPO"

    @comlrl_constructor
    def __init__(self, comlrl: dict[str, Any], *, workflow: Workflow | str | None = JOINT_WORKFLOW, plan: Any = None,
                 run_dir: str | Path | None = None, lora_adapters: bool = False, grammar: Any = None,
                 centralized_adapter: Any = None):
        require_centralized_api()
        args = comlrl["args"] = comlrl["args"] or self.default_config_cls()
        workflow = _joint_workflow(workflow)
        adapter = self._joint_setup(workflow, args, comlrl["agents"], centralized_adapter, lora_adapters)
        if comlrl["num_agents"] is not None and int(comlrl["num_agents"]) != int(args.num_agents):
            raise ValueError(f"num_agents={comlrl['num_agents']} but args.num_agents={args.num_agents} (the "
                             "joint action's roles)")
        self._joint_stats = _fresh_stats()
        super().__init__(centralized_adapter=adapter, **{**comlrl, "num_agents": int(args.num_agents)})
        self._bridge_setup(args, grammar=grammar, run_dir=run_dir)
        self._joint_finish()
        self.phases = parse_curriculum(args.curriculum, int(args.num_train_epochs))
        if self.phases and comlrl["train_dataset"] is not None:
            check_rows(self.phases, comlrl["train_dataset"])
        self._epoch = 0

    # the workflow trainers' seeded, curriculum-aware data order (and its resume hook); the joint actor's plan is the
    # reference's, so it visits every prompt of an epoch
    prompt_share = 1.0
    get_train_dataloader = WorkflowTrainer.get_train_dataloader
    _on_checkpoint_train_start = WorkflowTrainer._on_checkpoint_train_start

    def _train_step_returns(self, batch_item: Mapping[str, Any], **kwargs: Any) -> None:
        before = self.env_step
        super()._train_step_returns(batch_item, **kwargs)
        self.totals["env_steps"] = int(self.env_step)
        every = getattr(getattr(self, "_phase", None), "eval_every", 0)
        if every and self.env_step // every > before // every:
            self.evaluate()




# ----------------------------------------------------------------------------- preference variants

@dataclass
class JointPreferenceFields(JointConfigChecks):
    """The centralized switch on a workflow preference config: one joint actor, joint comparator candidates."""

    num_agents: int = 2  # logical roles of the joint action (one actor model)
    collaboration_mode: str = "centralized"  # must stay "centralized"

    def __post_init__(self) -> None:
        if self.collaboration_mode != "centralized":
            raise ValueError("collaboration_mode must be 'centralized' for the joint actor, got "
                             f"{self.collaboration_mode!r}")
        if int(getattr(self, "comparator_centralized_agent_index", 0)) != 0:
            raise ValueError("the joint actor is agent 0: comparator_centralized_agent_index must be 0")
        # the workflow preference fields validate a decentralized set-up; validate them as such, then switch
        self.collaboration_mode = "decentralized"
        if hasattr(self, "comparator_generation_mode"):
            self.comparator_generation_mode = "decentralized"
        try:
            super().__post_init__()
        finally:
            self.collaboration_mode = "centralized"
            if hasattr(self, "comparator_generation_mode"):
                self.comparator_generation_mode = "centralized"  # every comparator writes a joint action too


class JointPreferenceMixin(JointActorMixin):
    """The workflow preference trainers with one joint actor (mix in before them).

    CoMLRL's centralized mode (``collaboration_mode="centralized"``, the domain's joint adapter as
    ``centralized_comparator_adapter``) gives one actor and splits joint actions only for the task
    reward; the workflow preference machinery keeps the exact generated ids and value masks of
    every joint candidate (comparator candidates included) and scores them with the masked
    likelihood. Replay records carry ``"joint": true``; others are rejected."""

    def __init__(self, *pos: Any, workflow: Workflow | str | None = JOINT_WORKFLOW, lora_adapters: bool = False,
                 centralized_adapter: Any = None, centralized_comparator_adapter: Any = None, **kwargs: Any):
        require_centralized_api()
        if pos:
            raise TypeError(f"{type(self).__name__} takes keyword arguments only")
        args = kwargs.get("args") or self.default_config_cls()
        kwargs["args"] = args
        workflow = _joint_workflow(workflow)
        adapter = self._joint_setup(workflow, args, kwargs.get("agents"), centralized_adapter
                                    or centralized_comparator_adapter,
                                    lora_adapters)
        self._joint_roles = int(args.num_agents)
        super().__init__(workflow=self.workflow, lora_adapters=False, centralized_comparator_adapter=adapter, **kwargs)
        if self.centralized_collaboration is None or self.num_agents != 1:
            raise RuntimeError("CoMLRL did not build a centralized collaboration with one actor")
        self._joint_finish()

    # the workflow bridge plays the single joint role for every logical role index
    def _bridge_workflow(self, workflow: Any, args: Any, num_agents: int | None = None,
                         agents: Sequence[Any] | None = None) -> int:
        roles = int(args.num_agents)
        if num_agents is not None and int(num_agents) != roles:
            raise ValueError(f"num_agents={num_agents} but the joint action has {roles} roles")
        return roles

    def _agent_step(self, agent_idx: int):
        if not 0 <= int(agent_idx) < self._joint_roles:
            raise ValueError(f"agent index {agent_idx} outside the joint action's {self._joint_roles} roles")
        return self.workflow.decision_steps[0]

    def _generate_centralized_policy_output_for_agent(self, policy_agent: Any, batch_item: Mapping[str, Any], *,
                                                      prompt: str, num_candidates: int,
                                                      **kwargs: Any) -> list[dict[str, Any]]:
        """A comparator's joint candidates with their exact ids and value masks (CoMLRL keeps only text)."""
        rng_kwargs = {"agent_idx": 0} if getattr(self, "_comparator_rng_streams", None) is not None else {}
        with self._comparator_rng(policy_agent, **rng_kwargs):
            out = self._generate_completions(policy_agent, [batch_item], agent_idx=0,
                                             num_return_sequences=num_candidates,
                                             max_new_tokens=self.args.max_new_tokens, prompts_override=[prompt])
        if not out["completions"][0]:
            raise ValueError("the centralized comparator produced no candidates")
        return [out]

    # ----- replay records -------------------------------------------------------------------------
    def _preference_pair_to_record(self, pair: Any) -> dict[str, Any]:
        record = super()._preference_pair_to_record(pair)
        return dict(mark_joint(record))

    def _preference_pair_from_record(self, record: dict[str, Any]) -> Any:
        check_records([record], joint=True, source="preference replay")
        # the per-record token parsing of the base
        return super()._preference_pair_from_record({**record, "joint": False})


def joint_variant(trainer_cls: type, summary: str) -> tuple[type, type]:
    """The centralized joint-actor variant of a workflow preference trainer: ``Joint<algorithm>Config`` (its config
    with :class:`JointPreferenceFields`) and ``Joint<algorithm>Trainer`` (:class:`JointPreferenceMixin` before it)."""
    name = trainer_cls.algorithm_name
    config = dataclass(type(f"Joint{name}Config", (JointPreferenceFields, trainer_cls.default_config_cls),
                            {"__module__": __name__, "__qualname__": f"Joint{name}Config", "__doc__": summary}))
    trainer = type(f"Joint{name}Trainer", (JointPreferenceMixin, trainer_cls),
                   {"__module__": __name__, "__qualname__": f"Joint{name}Trainer", "__doc__": summary,
                    "default_config_cls": config, "algorithm_name": name})
    return config, trainer


JointMADPOConfig, JointMADPOTrainer = joint_variant(
    WorkflowMADPOTrainer, "Centralized MADPO: joint candidates of the one actor, task-reward pairs, DPO on "
                          "the joint completions.")
JointMARLHFConfig, JointMARLHFTrainer = joint_variant(
    WorkflowMARLHFTrainer, "Centralized MARLHF: a reward model on (joint prompt, joint action), then online "
                           "MAGRPO of the joint actor.")
JointMADPOIterConfig, JointMADPOIterTrainer = joint_variant(
    WorkflowMADPOIterTrainer, "Centralized iterative MADPO: current vs comparator joint candidates, "
                              "joint replay, joint DPO.")
JointMARLHFIterConfig, JointMARLHFIterTrainer = (joint_variant(WorkflowMARLHFIterTrainer, "Centralized "
                                                                                          "iterative MARLHF."))


__all__ = ["JointActorMixin", "JointMADPOConfig", "JointMADPOIterConfig", "JointMADPOIterTrainer", "JointMADPOTrainer",
           "JointMAGRPOConfig", "JointMAGRPOMixin", "JointMAGRPOTrainer", "JointMARLHFConfig", "JointMARLHFIterConfig",
           "JointMARLHFIterTrainer", "JointMARLHFTrainer", "JointPreferenceFields", "JointPreferenceMixin",
           "joint_variant"]
