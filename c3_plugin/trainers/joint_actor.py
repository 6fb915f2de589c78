"""Centralized joint-actor trainers (import through :mod:`c3_plugin.trainers.centralized`, which checks
CoMLRL's centralized APIs first): ``JointMAGRPOTrainer`` and the preference variants
``JointMADPOTrainer``, ``JointMARLHFTrainer``, ``JointMADPOIterTrainer``, ``JointMARLHFIterTrainer``.

:class:`JointMAGRPOTrainer` is :class:`~.bridge.WorkflowBridge` + CoMLRL's
``CentralizedMAGRPOTrainer``: one actor, one tokenizer, one optimizer; ``num_agents`` logical
roles. CoMLRL's MAGRPO loop samples ``num_generations`` joint actions per prompt through the
bridge (the joint workflow's single role, the joint JSON skeleton forced by the grammar),
scores each by splitting it with the domain adapter and calling the unchanged task reward
(``CentralizedCollaboration``), and trains the *joint completion tokens* with the skeleton's
value-only loss mask (:func:`~.joint_likelihood.masked_joint_log_prob`), streamed one sequence at a
time. Evaluation is the bridge's greedy workflow evaluation (fixed task reward; the eval logger
receives the split role actions).

The preference variants are the workflow preference trainers (:mod:`.preference`) in CoMLRL's
centralized mode (``collaboration_mode="centralized"`` with the domain's joint adapter): one
actor samples joint candidates (comparators too, with their exact ids and value masks), the
joint adapter splits them only for the task reward, DPO / the reward model / the online MAGRPO
stage train the joint completions with the masked likelihood, and replay records are joint.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from comlrl.trainers.reinforce import CentralizedMAGRPOConfig, CentralizedMAGRPOTrainer
from comlrl.utils.distributed import unwrap_model

from ..registry import Capabilities
from ..workflow import Workflow, load_workflow
from .base import WorkflowTrainer
from .bridge import WorkflowBridge
from .centralized_api import JOINT_WORKFLOW, default_joint_adapter, joint_domain, require_centralized_api
from .joint_likelihood import LOSS_AGGREGATIONS, masked_joint_log_prob
from .joint_records import check_records, mark_joint
from .preference import (WorkflowMADPOConfig, WorkflowMADPOIterConfig, WorkflowMADPOIterTrainer, WorkflowMADPOTrainer,
                         WorkflowMARLHFConfig, WorkflowMARLHFIterConfig, WorkflowMARLHFIterTrainer, WorkflowMARLHFTrainer)


def _joint_workflow(workflow: Workflow | str | None) -> Workflow | str | None:
    """``workflow``, with the default name resolved to the joint domain's workflow."""
    return joint_domain().workflow(JOINT_WORKFLOW) if isinstance(workflow, str) and workflow == JOINT_WORKFLOW else workflow


def _check_joint_workflow(workflow: Workflow) -> None:
    steps = workflow.decision_steps
    if workflow.num_agents != 1 or len(steps) != 1:
        raise ValueError(f"a centralized joint actor plays a one-role workflow with one decision point (e.g. 'travel_joint'); "
                         f"workflow '{workflow.name}' has {workflow.num_agents} agents and decisions {[s.name for s in steps]}. "
                         "Set workflow.name to the domain's joint workflow")


class JointActorMixin:
    """What every centralized trainer here shares: the joint workflow and adapter checks and the eval
    logger over the split role actions."""

    joint = True  # replay/record kind of the centralized trainers

    def _joint_setup(self, workflow: Any, args: Any, agents: Sequence[Any] | None, adapter: Any, lora_adapters: bool) -> Any:
        """Validate the one-actor set-up (before the CoMLRL constructor); returns the adapter."""
        if lora_adapters:
            raise ValueError("the centralized joint actor trains one full model: agents.policy=lora (per-role adapters) "
                             "does not apply; use agents.policy=per_agent")
        self.workflow = workflow if isinstance(workflow, Workflow) else load_workflow(workflow)
        _check_joint_workflow(self.workflow)
        if agents is not None and len(agents) != 1:
            raise ValueError(f"the centralized joint actor is one model; got {len(agents)} agent models")
        adapter = adapter if adapter is not None else default_joint_adapter(self.workflow)
        roles = int(getattr(adapter, "num_roles", args.num_agents))
        if int(args.num_agents) != roles:
            raise ValueError(f"num_agents={args.num_agents} but the joint adapter splits actions into {roles} roles; "
                             "num_agents counts the logical roles of the joint action")
        if getattr(args, "loss_aggregation", "sequence_mean") not in LOSS_AGGREGATIONS:
            raise ValueError(f"loss_aggregation must be one of {LOSS_AGGREGATIONS}, got {args.loss_aggregation!r}")
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


class JointMAGRPOMixin(JointActorMixin):
    """Centralized MAGRPO's update: value-masked joint likelihoods, streamed one completion at a time,
    and CoMLRL's train logs routed through ``log_metrics``."""

    # ----- the joint loss -----------------------------------------------------------------------
    def _pack_completions_for_buffer(self, completions_data: Mapping[str, Any]) -> dict[str, Any]:
        packed = super()._pack_completions_for_buffer(completions_data)
        masks = completions_data.get("completion_loss_masks")
        if masks is None:
            raise ValueError("joint completions carry no loss masks: generation must go through the WorkflowBridge")
        packed["completion_loss_masks"] = [[list(m) for m in masks[0]]]
        return packed

    def _joint_advantages(self, completions_data: Mapping[str, Any], returns: Sequence[float], device: Any) -> torch.Tensor:
        returns_tensor = torch.as_tensor(list(returns), dtype=torch.float, device=device)
        effective = self._apply_reference_kl_to_returns(returns_tensor, completions_data)
        adv = self._compute_advantages(effective)
        if self.args.advantage_normalization and adv.numel() > 1:
            adv = (adv - adv.mean()) / adv.std(unbiased=False).clamp(min=1e-6)
        return adv

    def _joint_terms(self, agent: Any, completions_data: Mapping[str, Any], returns: Sequence[float]):
        """Per sequence: (advantage, a closure giving its value-masked log-likelihood)."""
        device = next(unwrap_model(agent).parameters()).device
        sequences = completions_data["completion_input_ids"][0]
        masks = completions_data.get("completion_loss_masks")
        if masks is None:
            raise ValueError("joint completions carry no loss masks: generation must go through the WorkflowBridge")
        masks = masks[0]
        if not (len(sequences) == len(masks) == len(returns)):
            raise ValueError(f"{len(sequences)} joint completions, {len(masks)} masks and {len(returns)} returns must align")
        adv = self._joint_advantages(completions_data, returns, device)
        prompt_ids = completions_data["prompt_input_ids"][0]
        agg = getattr(self.args, "loss_aggregation", "sequence_mean")
        self._joint_stats["value_tokens"] += float(sum(sum(m) for m in masks))
        self._joint_stats["tokens"] += float(sum(len(s) for s in sequences))
        return [(a, (lambda s=s, m=m: masked_joint_log_prob(agent, prompt_ids, s, m, agg))) for s, m, a in zip(sequences, masks, adv)]

    def _compute_loss_with_gradients(self, agent: Any, completions_data: Mapping[str, Any], returns: Sequence[float]) -> torch.Tensor:
        """Mean over the joint completions of ``-A * log pi(values)`` (value-masked, whole graph at once)."""
        terms = self._joint_terms(agent, completions_data, returns)
        if not terms:
            return torch.zeros((), device=next(unwrap_model(agent).parameters()).device, requires_grad=True)
        return torch.stack([-logp() * a for a, logp in terms]).mean()

    def _update_from_samples(self, agent_idx: int, samples: list) -> None:
        """CoMLRL's update (shuffle, ``train_batch_size`` samples per optimizer step, mean over samples
        and their completions) with one live joint graph at a time: each completion's term is
        back-propagated on its own, scaled by ``1 / (batch x completions)``."""
        if not samples:
            return
        random.shuffle(samples)
        size = int(getattr(self.args, "train_batch_size", len(samples)) or 1)
        agent = self.agents[agent_idx]
        for start in range(0, len(samples), size):
            batch = samples[start:start + size]
            self.optimizers[agent_idx].zero_grad()
            loss_sum = 0.0
            for sample in batch:
                terms = self._joint_terms(agent, sample.completions_data, sample.returns)
                for a, logp in terms:
                    loss = -logp() * a / (len(batch) * len(terms))
                    if not torch.isfinite(loss):
                        raise FloatingPointError(f"non-finite joint policy loss {float(loss)}")
                    loss.backward()
                    loss_sum += float(loss.detach())
            self.optimizers[agent_idx].step()
            self.update_step += 1
            self._joint_stats["loss"] = loss_sum

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


@dataclass
class JointMAGRPOConfig(CentralizedMAGRPOConfig):
    """Centralized MAGRPO on a joint workflow; CoMLRL's MAGRPOConfig fields keep their meaning
    (``num_generations`` joint actions per prompt, ``rollout_buffer_size`` prompts per update)."""

    capabilities = Capabilities(budget="per_prompt")  # registry.Capabilities

    num_agents: int = 2  # logical roles of the joint action (one actor model)
    num_turns: int = 1  # must stay 1
    collaboration_mode: str = "centralized"  # must stay "centralized"
    loss_aggregation: str = "sequence_mean"  # "sequence_mean" (each joint message's mean value-token log-prob) or "token_sum" (summed value-token log-probs)
    eval_interval: int = 0  # CoMLRL's per-item eval interval (0: off; phases' eval_every counts env steps instead)
    curriculum: list[dict[str, Any]] | None = None  # phases [{epochs, where: {field: [values]}, eval_every: env steps}]; epochs sum to num_train_epochs
    final_eval_num_samples: int | None = None  # items of the before/after evaluations (None: eval_num_samples; 0: all)
    wandb_keys: list[str] | None = None  # glob patterns of the metric keys published to W&B (None: all); metrics.jsonl keeps everything
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
        if self.loss_aggregation not in LOSS_AGGREGATIONS:
            raise ValueError(f"loss_aggregation must be one of {LOSS_AGGREGATIONS}, got {self.loss_aggregation!r}")
        from ..curriculum import parse_curriculum

        parse_curriculum(self.curriculum, int(self.num_train_epochs))


class JointMAGRPOTrainer(JointMAGRPOMixin, WorkflowBridge, CentralizedMAGRPOTrainer):
    """MAGRPO with one joint actor (see the module docstring)."""

    default_config_cls = JointMAGRPOConfig
    algorithm_name = "MAGRPO"

    def __init__(self, agent_model: Any = None, agents: Sequence[Any] | None = None, num_agents: int | None = None,
                 tokenizer: Any = None, model_config: Mapping[str, Any] | None = None, train_dataset: Any = None,
                 eval_dataset: Any = None, reward_func: Any = None, reward_processor: Any = None, formatters: Any = None,
                 external_transition: Any = None, wandb_config: Mapping[str, Any] | None = None, eval_logger: Any = None,
                 eval_aggregator: Any = None, args: JointMAGRPOConfig | None = None, *, workflow: Workflow | str | None = JOINT_WORKFLOW,
                 plan: Any = None, run_dir: str | Path | None = None, lora_adapters: bool = False, grammar: Any = None,
                 centralized_adapter: Any = None):
        require_centralized_api()
        args = args or self.default_config_cls()
        workflow = _joint_workflow(workflow)
        adapter = self._joint_setup(workflow, args, agents, centralized_adapter, lora_adapters)
        if num_agents is not None and int(num_agents) != int(args.num_agents):
            raise ValueError(f"num_agents={num_agents} but args.num_agents={args.num_agents} (the joint action's roles)")
        self._joint_stats = _fresh_stats()
        super().__init__(centralized_adapter=adapter, num_agents=int(args.num_agents), agents=agents, tokenizer=tokenizer,
                         reward_func=reward_func, formatters=formatters, args=args, agent_model=agent_model,
                         model_config=model_config, train_dataset=train_dataset, eval_dataset=eval_dataset,
                         reward_processor=reward_processor, external_transition=external_transition, wandb_config=wandb_config,
                         eval_logger=eval_logger, eval_aggregator=eval_aggregator)
        self._bridge_setup(args, grammar=grammar, run_dir=run_dir)
        self._joint_finish()
        from ..curriculum import check_rows, parse_curriculum

        self.phases = parse_curriculum(args.curriculum, int(args.num_train_epochs))
        if self.phases and train_dataset is not None:
            check_rows(self.phases, train_dataset)
        self._epoch = 0

    # the workflow trainers' seeded, curriculum-aware data order (and its resume hook)
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
class JointPreferenceFields:
    """The centralized switch on a workflow preference config: one joint actor, joint comparator candidates."""

    num_agents: int = 2  # logical roles of the joint action (one actor model)
    collaboration_mode: str = "centralized"  # must stay "centralized"

    def __post_init__(self) -> None:
        if self.collaboration_mode != "centralized":
            raise ValueError(f"collaboration_mode must be 'centralized' for the joint actor, got {self.collaboration_mode!r}")
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


@dataclass
class JointMADPOConfig(JointPreferenceFields, WorkflowMADPOConfig):
    """Centralized MADPO: joint candidates of the one actor, task-reward pairs, DPO on the joint completions."""


@dataclass
class JointMARLHFConfig(JointPreferenceFields, WorkflowMARLHFConfig):
    """Centralized MARLHF: a reward model on (joint prompt, joint action), then online MAGRPO of the joint actor."""


@dataclass
class JointMADPOIterConfig(JointPreferenceFields, WorkflowMADPOIterConfig):
    """Centralized iterative MADPO: current vs comparator joint candidates, joint replay, joint DPO."""


@dataclass
class JointMARLHFIterConfig(JointPreferenceFields, WorkflowMARLHFIterConfig):
    """Centralized iterative MARLHF."""


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
        adapter = self._joint_setup(workflow, args, kwargs.get("agents"), centralized_adapter or centralized_comparator_adapter,
                                    lora_adapters)
        self._joint_roles = int(args.num_agents)
        super().__init__(workflow=self.workflow, lora_adapters=False, centralized_comparator_adapter=adapter, **kwargs)
        if self.centralized_collaboration is None or self.num_agents != 1:
            raise RuntimeError("CoMLRL did not build a centralized collaboration with one actor")
        self._joint_finish()

    # the workflow bridge plays the single joint role for every logical role index
    def _bridge_workflow(self, workflow: Any, args: Any, num_agents: int | None = None, agents: Sequence[Any] | None = None) -> int:
        roles = int(args.num_agents)
        if num_agents is not None and int(num_agents) != roles:
            raise ValueError(f"num_agents={num_agents} but the joint action has {roles} roles")
        return roles

    def _agent_step(self, agent_idx: int):
        if not 0 <= int(agent_idx) < self._joint_roles:
            raise ValueError(f"agent index {agent_idx} outside the joint action's {self._joint_roles} roles")
        return self.workflow.decision_steps[0]

    def _generate_centralized_policy_output_for_agent(self, policy_agent: Any, batch_item: Mapping[str, Any], *, prompt: str,
                                                      num_candidates: int, **kwargs: Any) -> list[dict[str, Any]]:
        """A comparator's joint candidates with their exact ids and value masks (CoMLRL keeps only text)."""
        rng_kwargs = {"agent_idx": 0} if getattr(self, "_comparator_rng_streams", None) is not None else {}
        with self._comparator_rng(policy_agent, **rng_kwargs):
            out = self._generate_completions(policy_agent, [batch_item], agent_idx=0, num_return_sequences=num_candidates,
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
        return super()._preference_pair_from_record({**record, "joint": False})  # the per-record token parsing of the base


class JointMADPOTrainer(JointPreferenceMixin, WorkflowMADPOTrainer):
    default_config_cls = JointMADPOConfig
    algorithm_name = "MADPO"


class JointMARLHFTrainer(JointPreferenceMixin, WorkflowMARLHFTrainer):
    default_config_cls = JointMARLHFConfig
    algorithm_name = "MARLHF"


class JointMADPOIterTrainer(JointPreferenceMixin, WorkflowMADPOIterTrainer):
    default_config_cls = JointMADPOIterConfig
    algorithm_name = "MADPOIter"


class JointMARLHFIterTrainer(JointPreferenceMixin, WorkflowMARLHFIterTrainer):
    default_config_cls = JointMARLHFIterConfig
    algorithm_name = "MARLHFIter"


__all__ = ["JointActorMixin", "JointMADPOConfig", "JointMADPOIterConfig", "JointMADPOIterTrainer", "JointMADPOTrainer",
           "JointMAGRPOConfig", "JointMAGRPOMixin", "JointMAGRPOTrainer", "JointMARLHFConfig", "JointMARLHFIterConfig",
           "JointMARLHFIterTrainer", "JointMARLHFTrainer", "JointPreferenceFields", "JointPreferenceMixin"]
