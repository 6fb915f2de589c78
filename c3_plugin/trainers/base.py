"""Workflow training on CoMLRL: the machinery C3, MAGRPO and MAPPO share.

:class:`WorkflowTrainer` is a :class:`comlrl.trainers.reinforce.MAGRPOTrainer` that keeps
its constructor keywords, outer epoch loop, checkpointing and W&B set-up, and replaces
the hooks that must change for a workflow of roles that read each other:

* ``_train_step_returns``: queue items; every ``instances_per_update`` items, materialise
  the rollout plan breadth-first (:func:`c3_plugin.core.rollout.materialize`), credit it
  (:meth:`compute_advantages`, the one hook an algorithm overrides) and update;
* ``_drain_ready_buffers``: flush the queue at each epoch's end, so checkpoints (written
  by CoMLRL at epoch boundaries) never hold a half-used rollout;
* ``evaluate``: greedy decoding of the workflow on the eval set, CoMLRL's eval logger
  and aggregator, ``eval/*`` logged against ``env_step`` (from :class:`~.bridge.WorkflowBridge`,
  which also supplies generation, ``policy``/``sampling``/``collect`` and ``log_metrics``).
"""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping, Sequence

import numpy as np
import torch
import wandb
from comlrl.trainers.reinforce.magrpo import MAGRPOConfig, MAGRPOTrainer
from tqdm import tqdm

from c3_plugin.core.credit import NORMALIZATIONS, normalize_advantages
from c3_plugin.core.protocol import Prompt, encode_prompt
from c3_plugin.core.plan import parse_plan
from c3_plugin.core.registry import WORKFLOW
from c3_plugin.core.rollout import Rollout
from c3_plugin.core.trace import write_jsonl
from c3_plugin.core.workflow import Workflow
from c3_plugin.trainers.bridge import WorkflowBridge, comlrl_constructor
from c3_plugin.trainers.update import PolicySample, ppo_update


@dataclass
class WorkflowConfig(MAGRPOConfig):
    """Fields shared by the workflow trainers (C3, MAGRPO, MAPPO); MAGRPOConfig's own fields keep
    their meaning and CoMLRL's defaults except where noted."""

    capabilities = WORKFLOW  # a rollout plan over the workflow; data-parallel (registry.Capabilities)
    normalization_scaling: ClassVar[str] = "batch_zscore"  # what advantage_normalization=True means for this algorithm
    default_plan_kind: ClassVar[str] = "independent"  # the default plan's kind ("tree" or "independent")

    plan: str | dict[str, Any] | None = None  # rollout plan: "tree [2, 4]", "independent 8" or "diagnostic n=4 u=0 c=4" (None: the algorithm's default plan over the team, spending CoMLRL's env steps for num_generations; c3_plugin/trainers/comlrl_compat.py default_plan)
    untrained_decisions: list[str] | None = None  # decision points the plan leaves without a gradient on purpose, named as the dry-run names them ("Reasoner_u2"): the dry-run lists them under untrained_decisions without its warning; a name that is no decision point of the workflow is refused (None: warn for every untrained decision). Trains nothing differently
    instances_per_update: int | None = None  # task instances per rollout batch (one materialisation, one update; None: rollout_buffer_size, CoMLRL's prompts per update)
    ppo_epochs: int = 1  # passes over each rollout batch
    minibatch_size: int | None = None  # messages per optimizer step (None: all of an agent's messages in the batch)
    minibatches_per_ppo_epoch: int | None = None  # the equal-steps setting: each policy's messages of a rollout batch split into this many minibatches (optimizer steps per PPO epoch; fewer only when it has fewer messages), whatever its message count; the same value in both arms of a head-to-head gives every agent the same optimizer steps (None: minibatch_size decides; the two are exclusive)
    micro_batch_size: int = 8  # messages per forward(/backward) pass: of the update (gradient accumulation) and of the behaviour log-prob recomputation after sampling; bounds the full-vocabulary logits held at once
    clip_eps: float = 0.2  # PPO clip range (lower side, and upper side unless clip_eps_high is set)
    clip_eps_high: float | None = None  # optional larger upper clip (None: clip_eps)
    max_grad_norm: float = 1.0  # gradient clipping per optimizer step (0 disables)
    loss_aggregation: str = "token_mean"  # "token_mean" (mean over all trained tokens), "sequence_mean" (each message's mean over its trained tokens, i.e. its value tokens under a JSON skeleton, then mean over messages) or "token_sum"
    advantage_scaling: str | None = None  # "none", "batch_scale", "batch_zscore" or "group_zscore" (population z-score per group: an instance's runs at one decision point under an independent plan, the siblings of one context under a tree), per agent and batch (None: from advantage_normalization, see normalization_scaling)
    use_chat_template: bool = False  # wrap contexts in the tokenizer's chat template (False, as CoMLRL: the context text is tokenized as it is)
    eval_greedy: bool = False  # decode evaluation greedily (False, as CoMLRL: one sampled run per eval item at the training temperature/top_p/top_k)
    generation_batch_size: int | None = None  # cap on sequences per generate call (None: a whole depth at once)
    save_traces: bool = False  # append every rollout batch's trace to <run dir>/traces.jsonl
    seed: int = 0  # seeds data order and sampling
    # MAGRPOConfig fields, CoMLRL's defaults, given workflow meanings (c3_plugin/trainers/comlrl_compat.py walks every one):
    num_turns: int = 2  # CoMLRL turns: > 1 runs CoMLRL's multi-turn team with its external_transition as steps of the trace (YAML configs default to 1: their workflow's schedule holds the turns)
    num_generations: int = 4  # joint actions per prompt (per turn) CoMLRL would sample: the env-step budget of the default plan
    temperature: float = 0.6  # sampling temperature; behaviour log-probs use the same scaling
    top_p: float = 0.6  # nucleus sampling mass (1.0: exact behaviour log-probs)
    top_k: int | None = 50  # top-k sampling (None: off)
    advantage_normalization: bool = True  # CoMLRL's advantage z-score: under C3 one scale per agent and batch (batch_scale, keeps leave-one-out), under MAGRPO per group (group_zscore), under MAPPO over the batch (batch_zscore)
    eval_num_samples: int = 4  # eval items per evaluation (0: the whole eval set)
    eval_interval: int = 16  # evaluate every this many training items (0: only before and after training)
    final_eval_num_samples: int | None = None  # items of the before/after evaluations (None: eval_num_samples; 0: all); W&B still gets the first eval_num_samples
    curriculum: list[dict[str, Any]] | None = None  # phases [{epochs, where: {field: [values]}, eval_every: env steps}]; epochs sum to num_train_epochs
    wandb_keys: list[str] | None = None  # glob patterns of the metric keys published to W&B (None: all); metrics.jsonl keeps everything
    json_stop: bool = False  # stop free-text generation once the message is one complete JSON object
    generation_backend: str = "hf"  # "hf" (transformers generate) or "vllm" (a colocated vLLM engine, weights pushed after every update; needs the vLLM environment, make setup-vllm)
    vllm_gpu_memory_utilization: float = 0.5  # vLLM: share of GPU memory the engine may take (weights + KV cache)
    vllm_kv_cache_gb: float | None = None  # vLLM: KV cache size in GiB (None: 1 GiB on CPU, where vLLM would otherwise reserve vllm_gpu_memory_utilization of the RAM; on a GPU what the utilization leaves)
    vllm_tensor_parallel_size: int = 1  # vLLM: GPUs the engine shards the model over
    vllm_enable_sleep_mode: bool = False  # vLLM: free the engine's GPU memory during each update (sleep/wake_up; skipped on CPU)
    vllm_max_model_len: int | None = None  # vLLM: longest prompt + message the engine serves (None: the model's maximum)
    vllm_lora_adapters: bool = True  # vLLM: serve agents.policy: lora adapters as vLLM LoRA adapters (False: push the base with each agent's adapter merged in)
    vllm_enforce_eager: bool = True  # vLLM: no graph capture (faster start-up, slower GPU decoding)
    vllm_server_url: str | None = None  # vLLM: sample through this running generation server on its own GPUs (python -m c3_plugin.generation.server; e.g. http://gen-node:8000) instead of a colocated engine; one trainer process
    vllm_server_weights_dir: str | None = None  # vLLM server: folder for the weight pushes, readable by the server at the same path (None: a temporary folder, for a server on this machine)
    logprob_mismatch: bool = True  # vLLM: recompute the trainer's log-probs of every sample and log the sampler/trainer mismatch
    importance_sampling_cap: float | None = None  # vLLM: truncated importance-sampling correction, weight min(pi_trainer / pi_vllm, cap) per token (None: off; needs logprob_mismatch)
    # The policy optimizers (c3_plugin/trainers/optim.py; MAPPO's critic keeps its own AdamW at critic_learning_rate, unscheduled):
    lr_scheduler: str = "constant"  # policy learning rate over the run's optimizer steps (counted per policy from the train set, plan, instances_per_update, minibatch_size and ppo_epochs): "constant", "cosine" or "linear" (decay to lr_min_ratio), each after lr_warmup_ratio
    lr_warmup_ratio: float = 0.0  # share of the run's optimizer steps (rounded up) spent in linear warm-up from 0 to the agent's own learning rate
    lr_min_ratio: float = 0.0  # floor of the cosine/linear decay, as a share of each agent's own learning rate (OpenRLHF's min_lr = 0.1 x lr: 0.1)
    adam_beta1: float = 0.9  # AdamW beta1 of every policy optimizer (default: torch's, as CoMLRL's optimizers)
    adam_beta2: float = 0.999  # AdamW beta2 (default: torch's)
    adam_eps: float = 1e-8  # AdamW epsilon (default: torch's)
    weight_decay: float = 0.01  # AdamW decoupled weight decay (default: torch's 0.01, as CoMLRL's optimizers)
    # KL penalty in the reward: each leaf's return becomes R - coef * KL(path) before credit, KL(path) the sum over the path's messages of their summed per-token KL (trained tokens) between the temperature-scaled full-vocabulary sampling policy (the behaviour log-probs) and a frozen reference copy of the starting policy at the same temperature:
    kl_reward_coef: float = 0.0  # the (initial) coefficient (0: off)
    kl_reward_target: float | None = None  # target mean KL per path of the adaptive coefficient (None: the coefficient stays fixed)
    kl_reward_horizon: int = 10000  # adaptive controller's horizon: coef *= 1 + clip(kl / target - 1, -0.2, 0.2) * env_steps / horizon after each rollout batch
    kl_reward_estimator: str = "k3"  # per-token estimator, r = log pi - log pi_ref at the sampled token: "k1" (r), "k2" (r^2 / 2) or "k3" (exp(-r) - 1 + r)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_recipe()
        from c3_plugin.trainers.comlrl_compat import resolve_comlrl_fields

        resolve_comlrl_fields(self)  # advantage_normalization, rollout_buffer_size, train_batch_size, joint_mode, discount, ...
        if self.advantage_scaling not in NORMALIZATIONS:
            raise ValueError(f"advantage_scaling must be one of {NORMALIZATIONS}, got {self.advantage_scaling!r}")
        for name in ("instances_per_update", "ppo_epochs", "micro_batch_size"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.minibatch_size is not None and self.minibatch_size < 1:
            raise ValueError(f"minibatch_size must be >= 1 or None, got {self.minibatch_size}")
        if self.minibatches_per_ppo_epoch is not None:
            if self.minibatches_per_ppo_epoch < 1:
                raise ValueError(f"minibatches_per_ppo_epoch must be >= 1 or None, got {self.minibatches_per_ppo_epoch}")
            if self.minibatch_size is not None:
                raise ValueError(f"minibatch_size ({self.minibatch_size} messages per step) and minibatches_per_ppo_epoch "
                                 f"({self.minibatches_per_ppo_epoch} steps per PPO epoch) both size the minibatches: keep "
                                 "one (minibatch_size: null for the equal-steps setting)")
        if not 0 < self.clip_eps < 1:
            raise ValueError(f"clip_eps must be in (0, 1), got {self.clip_eps}")
        if self.generation_backend not in ("hf", "vllm"):
            raise ValueError(f"generation_backend must be 'hf' or 'vllm', got {self.generation_backend!r}")
        if self.importance_sampling_cap is not None and not (self.generation_backend == "vllm" and self.logprob_mismatch
                                                             and self.importance_sampling_cap >= 1.0):
            raise ValueError("importance_sampling_cap needs generation_backend: vllm, logprob_mismatch: true and a cap >= 1, "
                             f"got backend {self.generation_backend!r}, logprob_mismatch {self.logprob_mismatch}, "
                             f"cap {self.importance_sampling_cap}")
        if self.vllm_server_url is not None and self.generation_backend != "vllm":
            raise ValueError("vllm_server_url needs generation_backend: vllm (it names the vLLM server to sample through)")
        if self.plan is not None:
            parse_plan(self.plan)
        from c3_plugin.core.curriculum import parse_curriculum

        parse_curriculum(self.curriculum, int(self.num_train_epochs))

    def _check_recipe(self) -> None:
        """The learning-rate schedule, AdamW and KL-in-reward fields."""
        from c3_plugin.trainers.optim import KL_ESTIMATORS, SCHEDULES

        if self.lr_scheduler not in SCHEDULES:
            raise ValueError(f"lr_scheduler must be one of {SCHEDULES}, got {self.lr_scheduler!r}")
        for name in ("lr_warmup_ratio", "lr_min_ratio"):
            if not 0.0 <= float(getattr(self, name)) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if not (0.0 <= self.adam_beta1 < 1.0 and 0.0 <= self.adam_beta2 < 1.0 and self.adam_eps > 0 and self.weight_decay >= 0):
            raise ValueError(f"adam_beta1 and adam_beta2 must be in [0, 1), adam_eps > 0 and weight_decay >= 0; got "
                             f"{self.adam_beta1}, {self.adam_beta2}, {self.adam_eps}, {self.weight_decay}")
        if self.kl_reward_coef < 0:
            raise ValueError(f"kl_reward_coef must be >= 0 (0: off), got {self.kl_reward_coef}")
        if self.kl_reward_target is not None and not (self.kl_reward_target > 0 and self.kl_reward_coef > 0):
            raise ValueError(f"kl_reward_target={self.kl_reward_target} adapts the coefficient multiplicatively: it needs "
                             f"kl_reward_target > 0 and kl_reward_coef > 0 (the initial coefficient), got {self.kl_reward_coef}")
        if int(self.kl_reward_horizon) < 1:
            raise ValueError(f"kl_reward_horizon must be >= 1, got {self.kl_reward_horizon}")
        if self.kl_reward_estimator not in KL_ESTIMATORS:
            raise ValueError(f"kl_reward_estimator must be one of {KL_ESTIMATORS}, got {self.kl_reward_estimator!r}")


def _global_batch_scaling(adv: np.ndarray, mode: str, eps: float = 1e-6) -> np.ndarray:
    """``batch_scale`` / ``batch_zscore`` (:func:`c3_plugin.core.credit.normalize_advantages`) with the mean and
    population std of every rank's advantages (a collective: every rank calls it, with or without rows)."""
    from c3_plugin.scale.distributed import all_sum

    n, total, squares = all_sum([adv.size, float(adv.sum()), float((adv ** 2).sum())])
    if n == 0:
        return adv.copy()
    mean = total / n
    std = max(float(np.sqrt(max(squares / n - mean ** 2, 0.0))), eps)
    return (adv - mean) / std if mode == "batch_zscore" else adv / std


RANK_COUNTS = ("/groups", "/split_half_groups", "/split_half_excluded")  # per-rank diagnostic counts, summed over ranks


class WorkflowTrainer(WorkflowBridge, MAGRPOTrainer):
    """Shared machinery; algorithms override :meth:`compute_advantages` (and MAPPO its update)."""

    default_config_cls = WorkflowConfig
    algorithm_name = "workflow"

    @comlrl_constructor
    def __init__(self, comlrl: dict[str, Any], *, workflow: Workflow | str | Mapping | None = None, plan: Any = None, run_dir: str | Path | None = None, lora_adapters: bool = False, grammar: Any = None,
                 outcome: Any = None, deepspeed: Any = None, learning_rates: Mapping[Any, float] | None = None,
                 learning_rate_scales: Mapping[Any, float] | None = None, trainable: Mapping[Any, bool] | None = None):
        args = comlrl["args"] = comlrl["args"] or self.default_config_cls()
        agents, formatters, external_transition = comlrl["agents"], comlrl["formatters"], comlrl["external_transition"]
        self._refuse_unused(args, workflow, formatters, external_transition)
        self.turns = None  # CoMLRL's multi-turn team (num_turns > 1): .turns.Turns
        if int(args.num_turns) > 1:
            from c3_plugin.trainers.turns import Turns

            team = len(agents) if agents is not None else int(comlrl["num_agents"] or args.num_agents)
            self.turns = Turns(self, team, int(args.num_turns), formatters, external_transition)
        n = self._bridge_workflow(self.turns.workflow if self.turns else workflow, args, comlrl["num_agents"], agents,
                                  None if self.turns else formatters)
        self._agent_training(args, n, learning_rates, learning_rate_scales, trainable)
        self._resolve_plan(args, plan)
        self.lora_adapters = lora_adapters  # agents share one PeftModel with adapters "agent0", "agent1", ...
        self.outcome = outcome  # the domain's outcome extractor (Domain.outcome) for the influence diagnostic; None: no influence
        super().__init__(**{**comlrl, "num_agents": n})
        self._policy_groups()
        self._build_optimizers()
        self._reference_for_kl_reward()
        self._bridge_setup(args, grammar=grammar, run_dir=run_dir)
        from c3_plugin.core.curriculum import check_rows, parse_curriculum

        self.phases = parse_curriculum(args.curriculum, int(args.num_train_epochs))
        if self.phases and comlrl["train_dataset"] is not None:
            check_rows(self.phases, comlrl["train_dataset"])
        self._setup_data_parallel(deepspeed)
        if self.dist.enabled and hasattr(self.backend, "start"):  # torchrun: every rank's vLLM engine starts here, together
            from c3_plugin.scale.distributed import gathered

            with gathered(self.engines, self.zero3):
                self.backend.start()
        self._setup_lr_schedules()
        self.rng = np.random.default_rng([args.seed, self.dist.rank] if self.dist.enabled else args.seed)
        self._pending: list[dict] = []
        self._progress: dict[str, Any] = {}  # the training bar's postfix (_show_progress)
        self._epoch = 0
        self._rank_state: dict[str, Any] | None = None

    def _agent_training(self, args: Any, n: int, learning_rates: Mapping[Any, float] | None,
                        scales: Mapping[Any, float] | None, trainable: Mapping[Any, bool] | None) -> None:
        """Per-agent learning rates, frozen agents and PPO temperatures from per-role settings (keys: role names
        or agent indices; the ``agents`` section of a config): ``self.agent_lrs``, ``self.frozen``,
        ``self.agent_temperature``. A frozen agent samples and is credited as usual but is never updated."""
        wf = self.workflow
        lrs, mult = wf.per_agent(learning_rates, "learning_rate"), wf.per_agent(scales, "learning_rate_scale")
        both = sorted(set(lrs) & set(mult))
        if both:
            raise ValueError(f"agents {both} have both a learning_rate and a learning_rate_scale; give one of them")
        for what, table in (("learning_rate", lrs), ("learning_rate_scale", mult)):
            for a, v in table.items():
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                    raise ValueError(f"{what} of agent {a} must be a number > 0, got {v!r} (freeze an agent with trainable: false)")
        frozen = wf.per_agent(trainable, "trainable")
        for a, v in frozen.items():
            if not isinstance(v, bool):
                raise ValueError(f"trainable of agent {a} must be true or false, got {v!r}")
        base = float(args.agent_learning_rate)
        self.agent_lrs = [float(lrs.get(a, base * float(mult.get(a, 1.0)))) for a in range(n)]
        self.frozen = {a for a, v in frozen.items() if v is False}
        if len(self.frozen) == n:
            raise ValueError("trainable: false for every agent leaves nothing to train; keep at least one agent trainable")
        self.agent_temperature = {a: wf.agent_temperatures().get(a, float(args.temperature)) for a in range(n)}

    def _refuse_unused(self, args: Any, workflow: Any, formatters: Any, external_transition: Any) -> None:
        """CoMLRL's arguments are honoured or refused, never dropped: ``formatters`` shape the default team's
        contexts (a given workflow has its own templates); ``num_turns > 1`` runs CoMLRL's team with its
        ``external_transition`` between turns (:mod:`.turns`), which one turn never calls."""
        if formatters is not None and workflow is not None:
            raise ValueError("formatters and a workflow were both given: formatters set the contexts of the default parallel "
                             "workflow (CoMLRL's independent agents); a workflow builds each role's context from its "
                             "templates. Drop formatters, or change the role templates (workflow.templates in a config)")
        turns = int(args.num_turns)
        if turns > 1 and external_transition is None:
            raise ValueError(f"Multi-turn {self.algorithm_name} requires an external_transition (num_turns={turns}, as CoMLRL); "
                             "pass external_transition=, or num_turns=1 (a workflow's own schedule may hold several turns)")
        if turns > 1 and workflow is not None:
            raise ValueError(f"num_turns={turns} runs CoMLRL's team of independent agents over turns, and a workflow was "
                             "given: a workflow's schedule holds its own turns (feedback steps between a role's acts, e.g. "
                             "the code domain's 'multi_turn'); give num_turns=1 with the workflow, or drop the workflow")
        if turns == 1 and external_transition is not None:
            raise ValueError("external_transition is called between turns, and num_turns=1 has none, so it would never "
                             "run: set num_turns > 1, or drop external_transition")
        if turns > 1 and float(args.discount) != 1.0:
            warnings.warn(f"discount={args.discount} discounts the turn rewards of {self.algorithm_name}'s returns; CoMLRL "
                          "1.4.3's MAGRPOTrainer does not read discount (its returns are undiscounted sums)", stacklevel=3)

    def _resolve_plan(self, args: Any, plan: Any) -> None:
        """``self.plan``/``self.branching``: the ``plan`` given, else ``args.plan``, else the algorithm's default plan
        (:func:`c3_plugin.core.plan.default_plan`: CoMLRL's env steps for ``num_generations``, written back to
        ``args.plan``); a plan of another budget is printed; ``joint_mode: cross`` needs C3's shared parallel samples."""
        from c3_plugin.core.estimator_rules import check
        from c3_plugin.core.plan import default_plan, note_budget

        turns = self.turns.turns if self.turns else [self.workflow.num_decisions]
        explicit = plan is not None or args.plan is not None
        if not explicit:
            args.plan = default_plan(args, turns, self.workflow.num_agents)
            check(args, self.algorithm_name.lower())
        self.plan = parse_plan(plan if plan is not None else args.plan)
        self.branching = self.plan.branching(self.workflow.num_decisions)
        if explicit:
            note_budget(args, self.branching, turns, self.workflow.num_agents, self.algorithm_name)
        if args.joint_mode == "cross" and self.workflow.num_agents > 1 and not (
                self.plan.kind == "tree" and getattr(args, "share_parallel_samples", False)):
            raise ValueError(f"joint_mode: cross scores every combination of the agents' samples; {self.algorithm_name} with "
                             f"plan '{args.plan}' draws each joint action's messages for it (aligned). Under C3 the tree over "
                             "parallel agents with share_parallel_samples: true is the cross product; else use joint_mode: aligned")

    # ----- policies, optimizers, learning-rate schedules, KL reference --------------------------------
    def _policy_groups(self) -> None:
        """``self.policy_groups``: the agents each trained policy plays, in agent order: one agent each, or
        every agent of one model shared by the roles (``agents.policy: shared``, or one module given for several
        agents; LoRA adapters over one base stay separate policies). ``self.policy_leader[a]``: the group's first
        agent, whose optimizer, DeepSpeed engine, schedule and ``train/agent<a>/*`` metrics the group uses. A
        shared model trains on every role's messages in one update, as the reference launcher's single actor, so
        its roles need one learning rate and one temperature, and none of them can be frozen."""
        groups: dict[int, list[int]] = {}
        for a in range(self.num_agents):
            groups.setdefault(a if self.lora_adapters else id(self.agents[a]), []).append(a)
        self.policy_groups = list(groups.values())
        self.policy_leader = {a: g[0] for g in self.policy_groups for a in g}
        for g in (g for g in self.policy_groups if len(g) > 1):
            roles = [s.name for s in self.workflow.decision_steps if self.workflow.roles[s.name].agent in g]
            for what, values in (("learning rates", [self.agent_lrs[a] for a in g]),
                                 ("temperatures", [self.agent_temperature[a] for a in g])):
                if len(set(values)) > 1:
                    raise ValueError(f"agents {g} (roles {roles}) share one model but have different {what} {values}; "
                                     f"one model trains at one rate and scores its samples at one temperature: give "
                                     f"them the same value, or agents.policy: per_agent")
            if self.frozen & set(g):
                raise ValueError(f"trainable: false for agent(s) {sorted(self.frozen & set(g))} of a model shared by roles "
                                 f"{roles}: freezing one role of a shared model would freeze them all; use "
                                 "agents.policy: per_agent to freeze one role")

    def _build_optimizers(self) -> None:
        """Every policy optimizer from the one factory (:func:`c3_plugin.scale.optimizers.make_adamw` with the
        ``adam_*``/``weight_decay`` fields, :func:`~.optim.adam_kwargs`), one per policy at its agent's learning rate, replacing CoMLRL's
        (torch AdamW at ``agent_learning_rate``, torch's defaults: the fields' defaults); ``self.optimizers[a]``
        is its group's, one object for every agent of a shared model."""
        from c3_plugin.scale.optimizers import make_adamw
        from c3_plugin.trainers.optim import adam_kwargs

        built = {g[0]: make_adamw(self._trainable_parameters(g[0]), self.agent_lrs[g[0]], **adam_kwargs(self.args))
                 for g in self.policy_groups}
        self.optimizers = [built[self.policy_leader[a]] for a in range(self.num_agents)]

    def _reference_for_kl_reward(self) -> None:
        """One frozen reference copy of each distinct starting model, shared by the agents it plays
        (``reference_models[a]``): CoMLRL's (built when its ``reference_kl_enabled``), else, for the KL penalty
        in the reward (``kl_reward_coef`` > 0), CoMLRL's ``clone_reference_models`` of each distinct model on
        ``reference_devices``. A LoRA team's copy is the base with its zero-initialised adapters."""
        from c3_plugin.trainers.optim import KLController

        first = {}
        for a in range(self.num_agents):
            first.setdefault(id(self.agents[a]), a)
        owner = [first[id(self.agents[a])] for a in range(self.num_agents)]
        refs = list(getattr(self, "reference_models", None) or [])
        if refs:
            self.reference_models = [refs[owner[a]] for a in range(self.num_agents)]
        elif float(self.args.kl_reward_coef) > 0:
            from comlrl.utils.reference_kl import clone_reference_models, resolve_reference_devices

            devices = resolve_reference_devices(self.args, self.agent_devices, self.num_agents)
            distinct = sorted(set(owner))
            clones = dict(zip(distinct, clone_reference_models([self.agents[a] for a in distinct],
                                                               devices=[devices[a] for a in distinct])))
            self.reference_models = [clones[owner[a]] for a in range(self.num_agents)]
        a = self.args
        self.kl_controller = KLController(a.kl_reward_coef, a.kl_reward_target, a.kl_reward_horizon) if a.kl_reward_coef > 0 else None

    def _setup_lr_schedules(self) -> None:
        """``self.lr_schedulers[a]``: the :class:`~.optim.LRSchedule` of agent ``a``'s optimizer (its group's), over
        the run's optimizer steps of that policy (:func:`~.optim.policy_optimizer_steps`, from the train set);
        set only when the rate changes over the run (``lr_scheduler`` not constant, or a warm-up), so a constant
        rate steps as before and its checkpoints keep their components."""
        from c3_plugin.trainers.optim import LRSchedule, policy_optimizer_steps

        a = self.args
        if a.lr_scheduler == "constant" and not a.lr_warmup_ratio:
            return
        try:
            train = len(self.train_dataset) if not self.phases else self.train_dataset
        except TypeError as exc:
            raise ValueError(f"lr_scheduler: {a.lr_scheduler} with lr_warmup_ratio {a.lr_warmup_ratio} needs the run's number "
                             "of optimizer steps, counted from a train_dataset with a length") from exc
        totals = policy_optimizer_steps(a, self.workflow, train, self.policy_groups)
        built = {lead: LRSchedule(self.agent_lrs[lead], total, a.lr_scheduler, a.lr_warmup_ratio, a.lr_min_ratio)
                 for lead, total in totals.items()}
        self.lr_schedulers = [built[self.policy_leader[x]] for x in range(self.num_agents)]

    # ----- data parallelism -------------------------------------------------------------------------
    def _setup_data_parallel(self, section: Any) -> None:
        """Under ``torchrun`` (or ``deepspeed.enabled: true``): one DeepSpeed engine per agent
        (:mod:`c3_plugin.scale.distributed`), which then owns the optimizer states; ``self.optimizers`` is None."""
        from c3_plugin.scale import distributed as dp
        from c3_plugin.core.config import DeepSpeedSection

        self.deepspeed = section if section is not None else DeepSpeedSection()
        world = dp.launched_world()
        use = dp.use_deepspeed(self.deepspeed.enabled, world)  # deepspeed.enabled: true on one process: a group of one
        self.dist = dp.init(self.deepspeed.dist_backend, self.deepspeed.timeout_minutes, single=use) if use or world > 1 else dp.context()
        self.engines: list[Any] | None = None
        if not use:
            return
        errors = dp.divisibility_errors(self.args, world)
        if errors:
            raise ValueError("; ".join(errors))
        if self.lora_adapters:
            raise ValueError("agents.policy: lora shares one model between the agents' adapters, which one DeepSpeed engine "
                             "per agent cannot shard; under DeepSpeed (torchrun, deepspeed.enabled) use agents.policy: per_agent")
        errors = dp.vllm_placement_errors(self.args, world)
        if errors:
            raise ValueError("; ".join(errors))
        if int(self.deepspeed.zero_stage) == 3 and any(len(g) > 1 for g in self.policy_groups):
            raise ValueError("a model shared by several roles (agents.policy: shared) runs under one DeepSpeed engine, whose "
                             "ZeRO-3 parameter gathering the per-agent generation paths would enter once per role; use "
                             "deepspeed.zero_stage: 1 or 2 with a shared model (or agents.policy: per_agent)")
        from c3_plugin.trainers.optim import adam_kwargs

        built = {g[0]: dp.make_engine(self.agents[g[0]], self._trainable_parameters(g[0]), self.agent_lrs[g[0]], self.deepspeed,
                                      self.args.max_grad_norm, adam_kwargs(self.args)) for g in self.policy_groups}
        self.engines = [built[self.policy_leader[a]] for a in range(self.num_agents)]  # a shared model: one engine
        self.optimizers = None  # the engines hold the (sharded) optimizer states; DeepSpeed checkpoints them

    def ds_engines(self) -> dict[str, Any]:
        """Every DeepSpeed engine by checkpoint tag (``agent<a>``, a shared model's once under its first agent;
        MAPPO adds its critic); empty without DeepSpeed."""
        if self.engines is None:
            return {}
        return {f"agent{g[0]}": self.engines[g[0]] for g in getattr(self, "policy_groups", [[a] for a in range(len(self.engines))])}

    @property
    def zero3(self) -> bool:
        return self.engines is not None and int(self.deepspeed.zero_stage) == 3

    # ----- policies -------------------------------------------------------------------------
    def _trainable_parameters(self, agent: int) -> list[torch.nn.Parameter]:
        if not self.lora_adapters:
            return [p for p in self.agents[agent].parameters() if p.requires_grad]
        tag = f".agent{agent}."
        params = [p for name, p in self.agents[agent].named_parameters() if tag in name]
        if not params:
            raise ValueError(f"no LoRA parameters named '{tag}' for agent {agent}")
        for p in params:
            p.requires_grad_(True)
        return params

    # ----- CoMLRL's multi-turn team ------------------------------------------------------------------
    def reward_leaves(self, leaves: Sequence[Any]) -> list[float]:
        """Multi-turn (:mod:`.turns`): each path's return ``sum_t discount^(t-1) r_t``, its per-turn rewards kept for
        :meth:`collect`; one turn: the bridge's terminal reward."""
        if self.turns is None:
            return super().reward_leaves(leaves)
        self._turn_rewards = self.turns.path_rewards([leaf.outputs for leaf in leaves], [dict(leaf.item) for leaf in leaves])
        return self.turns.returns(self._turn_rewards).tolist()

    def collect(self, items: Sequence[Mapping[str, Any]], plan: Any = None, greedy: bool = False, sampling: Any = None,
                tick: Callable[[], None] | None = None) -> Rollout:
        """The bridge's rollout (``tick``: called after each decision step); multi-turn: early termination in training
        rollouts only (``plan`` None), the per-turn rewards on ``rollout.turn_rewards`` and the env steps counted per
        scored turn."""
        if self.turns is None:
            return super().collect(items, plan=plan, greedy=greedy, sampling=sampling, tick=tick)
        self.turns.training = plan is None
        try:
            rollout = super().collect(items, plan=plan, greedy=greedy, sampling=sampling, tick=tick)
        finally:
            self.turns.training = False
        rollout.turn_rewards = self._turn_rewards
        per_instance = len(rollout.depth_nodes[-1]) // max(1, len(rollout.items))
        leaf_instance = np.arange(len(rollout.depth_nodes[-1])) // max(1, per_instance)
        rollout.budget.leaves = self.turns.env_steps(self._turn_rewards, leaf_instance, len(rollout.items), rollout.branching)
        return rollout

    def compute_advantages(self, rollout: Rollout) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per decision point: (entry indices, advantages) of the messages to train on."""
        raise NotImplementedError(f"{type(self).__name__}: WorkflowTrainer is a base class; an algorithm "
                                  "subclass (C3Trainer, WorkflowMAGRPOTrainer, MAPPOTrainer) defines compute_advantages")

    def _train_step_returns(self, batch_item: Mapping[str, Any], **kwargs: Any) -> None:
        self._pending.append(dict(batch_item))
        if len(self._pending) >= int(self.args.instances_per_update):
            self._flush()
        else:
            self._show_progress(phase=f"queue {len(self._pending)}/{int(self.args.instances_per_update)}")

    # ----- progress on CoMLRL's training bar ---------------------------------------------------------
    def _training_bar(self) -> Any:
        """CoMLRL's bar over the epoch's items (its tqdm with desc ``Epoch e/E``; the newest in tqdm's registry of
        open bars), or None: ``verbose`` off (CoMLRL opens none), not rank 0, or no bar open (an epoch's last short
        batch is flushed after CoMLRL closed its bar)."""
        if not getattr(self, "verbose", True) or not self.dist.is_main:
            return None
        with tqdm.get_lock():
            bars = [bar for bar in list(getattr(tqdm, "_instances", ())) if str(getattr(bar, "desc", "")).startswith("Epoch ")]
        return max(bars, key=lambda bar: getattr(bar, "start_t", 0.0), default=None)

    def _show_progress(self, **fields: Any) -> None:
        """Put ``fields`` on the training bar's postfix, replacing those of the same name (None drops one): ``phase``,
        what the run waits on (``queue k/N`` items for the next update, ``rollout d/D`` decision steps generated,
        ``credit``, ``update``, ``eval``), and the last update's ``env_step``, ``reward`` (``train/reward_mean``) and
        ``loss`` (``train/loss``). A display, not a metric; nothing without a training bar."""
        for key, value in fields.items():
            if value is None:
                self._progress.pop(key, None)
            else:
                self._progress[key] = value
        bar = self._training_bar()
        if bar is not None:
            bar.set_postfix(self._progress)

    def _rollout_ticks(self) -> Callable[[], None]:
        """A :meth:`collect` tick that shows ``phase=rollout d/D`` on the training bar, ``d`` of the workflow's ``D``
        decision steps generated (shown at ``0/D`` now)."""
        steps, done = self.workflow.num_decisions, 0

        def tick() -> None:
            nonlocal done
            done = min(done + 1, steps)
            self._show_progress(phase=f"rollout {done}/{steps}")

        self._show_progress(phase=f"rollout 0/{steps}")
        return tick

    def evaluate(self, num_eval_samples: int | None = None) -> dict[str, float]:
        """The bridge's evaluation, with ``phase=eval`` on the training bar while it runs."""
        self._show_progress(phase="eval")
        return super().evaluate(num_eval_samples)

    def _drain_ready_buffers(self, ready_agents: list[int]) -> None:
        if self._pending:
            self._flush()
        super()._drain_ready_buffers(ready_agents)

    def get_train_dataloader(self):
        """A seeded shuffle per epoch, reproducible on resume (the epoch index seeds it); with a
        curriculum, the rows of the epoch's phase."""
        from c3_plugin.core.curriculum import phase_at

        rows = phase_at(self.phases, self._epoch).rows(self.train_dataset) if self.phases else list(range(len(self.train_dataset)))
        order = np.random.default_rng([self.args.seed, self._epoch]).permutation(len(rows))
        self._phase = phase_at(self.phases, self._epoch) if self.phases else None
        self._epoch += 1
        return torch.utils.data.DataLoader(torch.utils.data.Subset(self.train_dataset, [rows[i] for i in order]), batch_size=1,
                                           collate_fn=lambda examples: examples, shuffle=False)

    def _flush(self) -> None:
        """One rollout batch: this rank's share of the queued instances (all of them on one process)
        is materialised, credited and trained on; budgets are summed and metrics combined over ranks."""
        from c3_plugin.scale.distributed import all_sum, gather, gathered, shard

        items = [{**it, "id": str(it.get("id", f"item{k}"))} for k, it in enumerate(self._pending)]
        self._pending = []
        local = shard(items, self.dist)
        t0 = time.perf_counter()
        with gathered(list(self.ds_engines().values()), self.zero3):  # ZeRO-3: whole weights, no per-layer collectives
            # a short last batch may leave a rank without instances
            rollout = self.collect(local, **self._ticking(self._rollout_ticks())) if local else None
            t1 = time.perf_counter()
            self._show_progress(phase="credit")
            task_rewards = rollout.rewards if rollout is not None else None  # what metrics and the trace report
            kl_metrics = self.apply_kl_reward(rollout)  # every rank; the returns credit sees
            credited = self.compute_advantages(rollout) if rollout is not None else []
        before = self.env_step
        budget = rollout.budget.totals() if rollout is not None else {}
        keys = sorted(self.totals)
        for k, v in zip(keys, all_sum([budget.get(k, 0) for k in keys])):
            self.totals[k] += int(v)
        self.env_step += int(all_sum([rollout.budget.leaves.sum() if rollout is not None else 0])[0])
        samples, adv_all = self.build_samples(rollout, credited)  # every rank: batch scaling sums over the ranks
        self._show_progress(phase="update")
        stats = self.update_policies(samples)
        t2 = time.perf_counter()
        self.update_step += 1
        rewards = np.concatenate([np.asarray(r, dtype=float) for r in gather(
            task_rewards.reshape(-1).tolist() if rollout is not None else [])])
        metrics = {"env_step": float(self.env_step), "train/update_step": float(self.update_step),
                   "train/reward_mean": float(rewards.mean()), "train/reward_std": float(rewards.std()),
                   **{f"budget/total_{k}": float(v) for k, v in self.totals.items()}, **stats, **kl_metrics,
                   "time/rollout_s": t1 - t0, "time/update_s": t2 - t1}
        adv_all = np.concatenate([np.asarray(a, dtype=float) for a in gather(adv_all.tolist())])
        if len(adv_all):
            metrics.update({"train/advantage_mean": float(adv_all.mean()), "train/advantage_std": float(adv_all.std()),
                            "train/advantage_abs_mean": float(np.abs(adv_all).mean())})
        if rollout is not None:
            metrics.update({k: v for k, v in self.rollout_metrics(rollout).items() if k not in metrics})
        if self.update_step % max(1, int(self.args.logging_steps)) == 0 or self.update_step == 1:
            if self.turns is not None and rollout is not None:
                from c3_plugin.trainers.turns import turn_metrics

                metrics.update(turn_metrics(rollout.turn_rewards))
            else:
                metrics.update({"turn_1/reward_mean": float(rewards.mean()),
                                "turn_1/expected_return": float(rewards.reshape(len(items), -1).mean(1).mean())})
        if self.args.save_traces and self.run_dir is not None and rollout is not None:
            self._append_trace(rollout)
        combined = self._combine_ranks(metrics)
        self.log_metrics(combined)
        self._show_progress(phase=f"queue 0/{int(self.args.instances_per_update)}", env_step=self.env_step,
                            reward=combined.get("train/reward_mean"), loss=combined.get("train/loss"))
        every = getattr(getattr(self, "_phase", None), "eval_every", 0)
        if every and self.env_step // every > before // every:
            self.evaluate()

    def apply_kl_reward(self, rollout: Rollout | None) -> dict[str, float]:
        """The KL penalty in the reward (``kl_reward_coef`` > 0; nothing otherwise), between collection and credit:
        every leaf's return in ``rollout.rewards`` becomes ``R - coef * KL(path)`` (:meth:`path_kl`), whichever
        algorithm credits it; then an adaptive coefficient (``kl_reward_target``) moves with this batch's mean KL
        per path over every rank (a collective: every rank calls it, with or without a rollout). Budgets, the
        trace's rewards and ``train/reward_mean`` stay the task reward's."""
        if getattr(self, "kl_controller", None) is None:
            return {}
        from c3_plugin.scale.distributed import all_sum

        kl = self.path_kl(rollout) if rollout is not None else np.zeros(0)
        coef = self.kl_controller.value
        if rollout is not None:
            rollout.rewards = rollout.rewards - coef * kl.reshape(rollout.rewards.shape)
        n, total = all_sum([kl.size, float(kl.sum())])
        mean = total / max(n, 1.0)
        self.kl_controller.update(mean, int(n))
        return {"train/kl_reward_coef": coef, "train/kl_path_mean": mean, "train/kl_penalty_mean": coef * mean}

    def path_kl(self, rollout: Rollout) -> np.ndarray:
        """KL(path) per leaf, row-major like ``rollout.rewards``: over the path's messages, the sum of the
        ``kl_reward_estimator`` estimates of ``KL(pi || pi_ref)`` at each trained token (a grammar's forced tokens
        excluded), ``pi`` the temperature-scaled full-vocabulary sampling policy (the recorded behaviour log-probs,
        before any top-p/top-k truncation) and ``pi_ref`` the agent's frozen reference at the same temperature. A
        shared sample is scored once and counts on every path it is on."""
        from c3_plugin.core.loss import token_logprobs
        from c3_plugin.trainers.optim import kl_per_token

        owners: dict[int, list[int]] = {}
        for k, e in enumerate(rollout.entries):
            if e.kind == "decision" and e.shared is None and not e.ended:
                owners.setdefault(int(e.agent), []).append(k)
        message_kl: dict[int, float] = {}
        for agent, idx in owners.items():
            entries = [rollout.entries[k] for k in idx]
            prompts = [list(e.prompt_ids) if e.prompt_ids is not None else
                       encode_prompt(self.tokenizers[agent], Prompt(e.context, e.role, agent, e.prefix, self.workflow.roles[e.role].system),
                                     self.args.use_chat_template) for e in entries]
            ref = token_logprobs(self.reference_models[agent], prompts, [list(e.token_ids) for e in entries], self._pad_id(agent),
                                 self.agent_temperature[agent], int(self.args.micro_batch_size))
            for k, e, r in zip(idx, entries, ref):
                per_token = kl_per_token(e.logprobs, r, self.args.kl_reward_estimator)
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

    def _combine_ranks(self, metrics: dict[str, Any]) -> dict[str, Any]:
        """Under data parallelism: per-rank counts (this batch's ``budget/env_steps``, ``budget/messages``,
        ``budget/tokens_generated``, and the diagnostics' group counts) are summed over the ranks, every other
        key is its mean over the ranks that report it (budget totals, rewards and advantages are already
        global, the same on every rank; per-rank diagnostics become their mean)."""
        if not self.dist.enabled:
            return metrics
        from c3_plugin.scale.distributed import gather

        numeric = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float, np.number)) and np.isfinite(float(v))}
        merged: dict[str, list[float]] = {}
        for row in gather(numeric):
            for k, v in row.items():
                merged.setdefault(k, []).append(v)
        media = {k: v for k, v in metrics.items() if k not in numeric and self.dist.is_main}  # W&B media: rank 0's
        summed = ("budget/env_steps", "budget/messages", "budget/tokens_generated")
        out = {k: float(np.sum(v) if k in summed or k.endswith(RANK_COUNTS) else np.mean(v)) for k, v in merged.items()}
        return {**out, **media}

    def rollout_metrics(self, rollout: Rollout) -> dict[str, float]:
        from c3_plugin.core.credit_diagnostics import rollout_diagnostics

        return rollout_diagnostics(rollout, outcome=self.outcome)

    def _append_trace(self, rollout: Rollout) -> None:
        """Append the batch's trace to ``traces.jsonl`` (``traces.rank<r>.jsonl`` per rank under data parallelism)."""
        path = self.run_dir / ("traces.jsonl" if not self.dist.enabled else f"traces.rank{self.dist.rank}.jsonl")
        tmp = path.with_suffix(".batch.jsonl")
        write_jsonl(rollout.entries, tmp)
        with path.open("a", encoding="utf-8") as out:
            out.write(tmp.read_text(encoding="utf-8"))
        tmp.unlink()

    def _group_key(self, entry: Any) -> tuple:
        """The group an entry's advantage is normalised in (``group_zscore``): under an independent plan
        the B runs of its instance at its decision point (CoMLRL's group of joint runs); under a tree or
        diagnostic plan its siblings, the alternatives sampled from one context."""
        if self.plan.kind == "independent":
            return (entry.instance, entry.step)
        return (entry.instance, entry.parent, entry.step)

    def build_samples(self, rollout: Rollout, credited: list[tuple[np.ndarray, np.ndarray]]):
        """Policy samples per agent, advantages scaled per agent as ``advantage_scaling`` says.

        A sample shared by several paths (``TraceEntry.shared``) is trained once, on its original
        entry, with the mean of its copies' advantages; its group (:meth:`_group_key`) is the original's."""
        per_agent: dict[int, list[tuple[Any, float, int]]] = {}
        sibling_groups: dict[tuple, int] = {}  # group key -> group id
        for indices, adv in credited:  # empty when this rank had no instances in the batch (rollout None)
            indices, adv = rollout.unique_credit(indices, adv)
            for i, a in zip(indices, adv):
                e = rollout.entries[int(i)]
                if e.ended:  # after its episode ended (multi-turn early termination): nothing was sampled
                    continue
                gid = sibling_groups.setdefault(self._group_key(e), len(sibling_groups))
                per_agent.setdefault(int(e.agent), []).append((e, float(a), gid))
        samples: dict[int, list[PolicySample]] = {}
        all_adv = []
        mode = self.args.advantage_scaling
        for agent in (range(self.num_agents) if self.dist.enabled else list(per_agent)):
            if agent in self.frozen:  # a fixed teammate: credited (diagnostics) but not trained
                continue
            rows = per_agent.get(agent, [])
            raw = np.array([r[1] for r in rows], dtype=np.float64)
            if self.dist.enabled and mode in ("batch_scale", "batch_zscore"):
                adv = _global_batch_scaling(raw, mode)  # the batch is every rank's share: its mean and std are global
            else:
                adv = normalize_advantages(raw, mode, groups=np.array([r[2] for r in rows]))  # a group stays on one rank
            if not rows:
                continue
            all_adv.append(adv)
            tok = self.tokenizers[agent]
            samples[agent] = [PolicySample(prompt_ids=list(e.prompt_ids) if e.prompt_ids is not None else
                                           encode_prompt(tok, Prompt(e.context, e.role, agent, e.prefix, self.workflow.roles[e.role].system),
                                                         self.args.use_chat_template),
                                           completion_ids=list(e.token_ids), old_logprobs=list(e.logprobs), advantage=float(a),
                                           loss_mask=e.loss_mask, trainer_logprobs=e.trainer_logprobs)
                              for (e, _, _), a in zip(rows, adv)]
        return samples, (np.concatenate(all_adv) if all_adv else np.zeros(0))

    def update_policies(self, samples: Mapping[int, list[PolicySample]]) -> dict[str, float]:
        """One PPO update per policy (per agent; a model shared by several roles once, on all their messages
        together, logged under its first agent); then a vLLM engine gets the new weights (``time/sync_s``).
        ``train/agent<a>/lr`` is the learning rate of the update's last optimizer step."""
        metrics: dict[str, float] = {}
        agg: dict[str, list[float]] = {}
        engine = getattr(self.backend, "sync", None) is not None
        if engine:
            self.backend.sleep()
        schedules = getattr(self, "lr_schedulers", None)
        for group in getattr(self, "policy_groups", [[a] for a in range(self.num_agents)]):
            agent = group[0]
            if agent in self.frozen:
                continue
            batch = [s for a in group for s in samples.get(a, [])]
            if not batch and self.engines is None:  # under DeepSpeed every rank joins every policy's step
                continue
            ref = self.reference_models[agent] if getattr(self.args, "reference_kl_enabled", False) and self.reference_models else None
            stats = ppo_update(self.policy(agent), self.optimizers[agent] if self.engines is None else None, batch, self.args,
                               self.rng, pad_id=self._pad_id(agent), ref_model=ref, params=self._trainable_parameters(agent),
                               engine=self.engines[agent] if self.engines is not None else None,
                               temperature=self.agent_temperature[agent],
                               schedule=schedules[agent] if schedules is not None else None)
            if stats:
                optimizer = self.optimizers[agent] if self.engines is None else self.engines[agent].optimizer
                stats["lr"] = float(optimizer.param_groups[0]["lr"])
            for k, v in stats.items():
                metrics[f"train/agent{agent}/{k}"] = v
                if k != "lr":
                    agg.setdefault(k, []).append(v)
        metrics.update({f"train/{k}": float(np.mean(v)) for k, v in agg.items()})
        if engine:
            t0 = time.perf_counter()
            self.backend.wake_up()
            from c3_plugin.scale.distributed import gathered

            with gathered(self.engines, self.zero3):  # ZeRO-3: the engine gets whole weights
                self.backend.sync()
            metrics["time/sync_s"] = time.perf_counter() - t0
        return metrics

    def _pad_id(self, agent: int) -> int:
        tok = self.tokenizers[agent]
        return tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

    def save_model(self, output_dir: str) -> None:
        """Per-agent models as CoMLRL saves them; shared LoRA adapters once, under ``adapters/``. Under
        data parallelism rank 0 writes (ZeRO-3 gathers the parameters on every rank first)."""
        from c3_plugin.scale.distributed import barrier, gathered

        with gathered(self.engines, self.zero3):
            if self.dist.is_main:
                self._save_model(output_dir)
        barrier()

    def _save_model(self, output_dir: str) -> None:
        if not self.lora_adapters:
            return super().save_model(output_dir)
        out = Path(output_dir) / "adapters"
        out.mkdir(parents=True, exist_ok=True)
        self.agents[0].save_pretrained(str(out))
        self.tokenizers[0].save_pretrained(str(out))
        if self.wandb_initialized and wandb.run is not None:
            wandb.finish()

    # ----- checkpoints ---------------------------------------------------------------------------
    def _agent_training_record(self) -> dict[str, Any]:
        """The per-agent training settings a resume must keep: base learning rates, frozen agents, PPO temperatures."""
        return {"learning_rates": [float(x) for x in self.agent_lrs], "frozen": sorted(int(a) for a in self.frozen),
                "temperatures": [float(self.agent_temperature[a]) for a in sorted(self.agent_temperature)]}

    def _checkpoint_extra_state(self) -> dict[str, Any]:
        extra = {"update_step": self.update_step, "totals": dict(self.totals), "rng": self.rng.bit_generator.state,
                 "agent_training": self._agent_training_record()}
        if getattr(self, "kl_controller", None) is not None:
            extra["kl_controller"] = self.kl_controller.state_dict()  # the adaptive coefficient
        return extra

    def _restore_checkpoint_extra_state(self, extra: Mapping[str, Any] | None, checkpoint_dir: Any) -> None:
        if not extra:
            return
        saved, now = extra.get("agent_training"), self._agent_training_record()
        if saved is not None and saved != now:  # constructor settings CoMLRL's config check does not see
            raise ValueError(f"checkpoint {checkpoint_dir} was trained with per-agent settings {saved}, this run has {now} "
                             "(agents.learning_rate / learning_rate_scale / trainable, workflow.temperature); resume with "
                             "the same settings, or start a new run (output.resume: null)")
        self.update_step = int(extra["update_step"])
        self.totals = {k: int(v) for k, v in extra["totals"].items()}
        self.rng.bit_generator.state = extra["rng"]
        if getattr(self, "kl_controller", None) is not None and "kl_controller" in extra:
            self.kl_controller.load_state_dict(extra["kl_controller"])

    # Under DeepSpeed, CoMLRL's checkpoint (written by rank 0: models, trainer state, rank 0's RNG) holds
    # no optimizer; the engines' sharded states go in its ``deepspeed/`` folder, written by every rank,
    # with each rank's RNG streams, and are restored by every rank (a shared file system, as DeepSpeed's).
    def save_checkpoint(self, output_dir: Any) -> Any:
        if self.engines is None:
            return super().save_checkpoint(output_dir)
        from c3_plugin.scale.distributed import barrier, broadcast

        if self.dist.is_main:
            target = super().save_checkpoint(output_dir)  # calls _checkpoint_save_assets on the staging folder
        else:
            self._save_rank_state(Path(broadcast(None)))
            target = None
        barrier()
        return broadcast(target)

    def _truncate_metrics(self) -> None:
        """On resume: drop the ``metrics.jsonl`` rows an interrupted run logged after its last checkpoint
        (their rollouts are run again), so every env step appears once."""
        path = self.run_dir / "metrics.jsonl" if self.run_dir is not None else None
        if path is None or not self.dist.is_main or not path.exists():
            return
        rows = path.read_text(encoding="utf-8").splitlines()

        def kept_row(row: str) -> bool:
            try:
                return json.loads(row).get("env_step", 0) <= self.env_step
            except ValueError:  # a line cut short by the crash
                return False

        kept = [r for r in rows if r.strip() and kept_row(r)]
        if len(kept) != len(rows):
            path.write_text("".join(r + "\n" for r in kept), encoding="utf-8")

    def _checkpoint_save_assets(self, staging: Path) -> dict[str, Any] | None:
        if self.engines is None:
            return None
        from c3_plugin.scale.distributed import broadcast

        broadcast(str(staging))
        self._save_rank_state(staging)
        return {"deepspeed": {"world_size": self.dist.world, "zero_stage": int(self.deepspeed.zero_stage),
                              "engines": sorted(self.ds_engines())}}

    def _save_rank_state(self, staging: Path) -> None:
        """Every rank: the engines' shards, then this rank's RNG streams (sampling differs per rank)."""
        import random

        from c3_plugin.scale.distributed import barrier

        for tag, engine in self.ds_engines().items():
            engine.save_checkpoint(str(staging / "deepspeed"), tag=tag)
        state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate(),
                 "trainer": self.rng.bit_generator.state,
                 "cuda": torch.cuda.get_rng_state() if torch.cuda.is_available() else None}
        torch.save(state, staging / "deepspeed" / f"rng_rank{self.dist.rank}.pt")
        barrier()

    def _checkpoint_validate_assets(self, checkpoint_dir: Any, assets: Mapping[str, Any]) -> None:
        saved = (assets or {}).get("deepspeed")
        if saved is None and self.engines is None:
            return
        if saved is None or self.engines is None:
            raise ValueError(f"checkpoint {checkpoint_dir} was written {'with' if saved else 'without'} DeepSpeed; resume it "
                             f"the same way ({'torchrun with ' + str(saved['world_size']) + ' processes' if saved else 'one process, deepspeed.enabled: auto'})")
        if int(saved["world_size"]) != self.dist.world or int(saved["zero_stage"]) != int(self.deepspeed.zero_stage):
            raise ValueError(f"checkpoint {checkpoint_dir} holds ZeRO-{saved['zero_stage']} shards of {saved['world_size']} ranks; "
                             f"this run has ZeRO-{self.deepspeed.zero_stage} on {self.dist.world}: resume with the same "
                             "--nproc_per_node/--nnodes and deepspeed.zero_stage")

    def _checkpoint_load_assets(self, checkpoint_dir: Any, assets: Mapping[str, Any]) -> None:
        if self.engines is None:
            return
        folder = Path(checkpoint_dir) / "deepspeed"
        for tag, engine in self.ds_engines().items():
            engine.load_checkpoint(str(folder), tag=tag, load_module_strict=True, load_optimizer_states=True,
                                   load_lr_scheduler_states=False)
        self._rank_state = torch.load(folder / f"rng_rank{self.dist.rank}.pt", weights_only=False)

    def _on_checkpoint_train_start(self, start_epoch: int, total_epochs: int) -> None:
        self._epoch = start_epoch
        if start_epoch > 0 and hasattr(self, "dist"):
            self._truncate_metrics()
        if getattr(self, "_rank_state", None) is not None:  # after CoMLRL restored rank 0's streams everywhere: this rank's own
            import random

            st, self._rank_state = self._rank_state, None
            torch.set_rng_state(st["torch"])
            np.random.set_state(st["numpy"])
            random.setstate(st["python"])
            self.rng.bit_generator.state = st["trainer"]
            if st["cuda"] is not None and torch.cuda.is_available():
                torch.cuda.set_rng_state(st["cuda"])
