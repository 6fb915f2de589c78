"""Workflow training on CoMLRL: the machinery C3, MAGRPO and MAPPO share.

:class:`WorkflowTrainer` is a :class:`comlrl.trainers.reinforce.MAGRPOTrainer` that keeps
its constructor keywords, outer epoch loop, checkpointing and W&B set-up, and replaces
the hooks that must change for a workflow of roles that read each other:

* ``_train_step_returns``: queue items; every ``instances_per_update`` items, one rollout batch
  (:meth:`WorkflowTrainer._flush`): collect the rollout plan breadth-first
  (:func:`c3_plugin.core.rollout.materialize`), the KL penalty in the reward, credit
  (:meth:`compute_advantages`, the one hook an algorithm overrides), policy samples, the update, the log;
* ``_drain_ready_buffers``: flush the queue at each epoch's end, so checkpoints (written
  by CoMLRL at epoch boundaries) never hold a half-used rollout;
* ``evaluate``: greedy decoding of the workflow on the eval set, CoMLRL's eval logger
  and aggregator, ``eval/*`` logged against ``env_step`` (from :class:`~.bridge.WorkflowBridge`,
  which also supplies generation, ``policy``/``sampling``/``collect`` and ``log_metrics``).

The concerns around the loop live in their own modules: the config's checks (:mod:`.config_checks`), construction
(:mod:`.setup`), the training bar (:mod:`.progress`), the KL reward (:mod:`.kl_reward`), what is summed or gathered over
the ranks (:mod:`.ranks`), policy samples (:mod:`.samples`), the update (:mod:`.update`, :mod:`.optimizer_step`), the
batch's metrics and traces (:mod:`.batch_log`), CoMLRL's W&B cadence (:mod:`.cadence`) and checkpoints
(:mod:`.checkpoints`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping, Sequence

import numpy as np
import torch
from comlrl.trainers.reinforce.magrpo import MAGRPOConfig, MAGRPOTrainer

from c3_plugin.core.credit_diagnostics import rollout_diagnostics
from c3_plugin.core.curriculum import check_rows, parse_curriculum, phase_at
from c3_plugin.core.registry import WORKFLOW, Inert
from c3_plugin.core.rollout import Rollout
from c3_plugin.core.workflow import Workflow
from c3_plugin.scale.distributed import gathered, shard
from c3_plugin.trainers import batch_log, cadence, config_checks, kl_reward, progress, ranks, setup
from c3_plugin.trainers.bridge import WorkflowBridge, comlrl_constructor
from c3_plugin.trainers.checkpoints import WorkflowCheckpoints
from c3_plugin.trainers.comlrl_compat import COMLRL_INERT
from c3_plugin.trainers.samples import credited_rows, entry_prompt_ids, policy_sample, scale_advantages
from c3_plugin.trainers.turns import Turns
from c3_plugin.trainers.update import PolicySample, update_policies


@dataclass
class WorkflowConfig(MAGRPOConfig):
    """Fields shared by the workflow trainers (C3, MAGRPO, MAPPO); MAGRPOConfig's own fields keep
    their meaning and CoMLRL's defaults except where noted."""

    capabilities = WORKFLOW  # a rollout plan over the workflow; data-parallel (registry.Capabilities)
    normalization_scaling: ClassVar[str] = "batch_zscore"  # what advantage_normalization=True means for this algorithm
    default_plan_kind: ClassVar[str] = "independent"  # the default plan's kind ("tree" or "independent")
    inert_fields: ClassVar[tuple[Inert, ...]] = COMLRL_INERT  # fields accepted where they change nothing (registry)

    # rollout plan: "tree [2, 4]", "independent 8" or "diagnostic n=4 u=0 c=4" (None: the algorithm's default plan over
    # the team, spending CoMLRL's env steps for num_generations; c3_plugin/trainers/comlrl_compat.py default_plan)
    plan: str | dict[str, Any] | None = None
    # decision points the plan leaves without a gradient on purpose, named as the dry-run names them ("Reasoner_u2"):
    # the dry-run lists them under untrained_decisions without its warning; a name that is no decision point of the
    # workflow is refused (None: warn for every untrained decision). Trains nothing differently
    untrained_decisions: list[str] | None = None
    # task instances per rollout batch (one materialisation, one update; None: rollout_buffer_size, CoMLRL's prompts per
    # update)
    instances_per_update: int | None = None
    ppo_epochs: int = 1  # passes over each rollout batch
    minibatch_size: int | None = None  # messages per optimizer step (None: all of an agent's messages in the batch)
    # the equal-steps setting: each policy's messages of a rollout batch split into this many minibatches (optimizer
    # steps per PPO epoch; fewer only when it has fewer messages), whatever its message count; the same value in both
    # arms of a head-to-head gives every agent the same optimizer steps (None: minibatch_size decides; the two are
    # exclusive)
    minibatches_per_ppo_epoch: int | None = None
    # messages per forward(/backward) pass: of the update (gradient accumulation) and of the behaviour log-prob
    # recomputation after sampling; bounds the full-vocabulary logits held at once
    micro_batch_size: int = 8
    clip_eps: float = 0.2  # PPO clip range (lower side, and upper side unless clip_eps_high is set)
    clip_eps_high: float | None = None  # optional larger upper clip (None: clip_eps)
    max_grad_norm: float = 1.0  # gradient clipping per optimizer step (0 disables)
    # "token_mean" (mean over all trained tokens), "sequence_mean" (each message's mean over its trained tokens, i.e.
    # its value tokens under a JSON skeleton, then mean over messages) or "token_sum"
    loss_aggregation: str = "token_mean"
    # "none", "batch_scale", "batch_zscore" or "group_zscore" (population z-score per group: an instance's runs at one
    # decision point under an independent plan, the siblings of one context under a tree), per agent and batch (None:
    # from advantage_normalization, see normalization_scaling)
    advantage_scaling: str | None = None
    # wrap contexts in the tokenizer's chat template (False, as CoMLRL: the context text is tokenized as it is)
    use_chat_template: bool = False
    # decode evaluation greedily (False, as CoMLRL: one sampled run per eval item at the training
    # temperature/top_p/top_k)
    eval_greedy: bool = False
    generation_batch_size: int | None = None  # cap on sequences per generate call (None: a whole depth at once)
    save_traces: bool = False  # append every rollout batch's trace to <run dir>/traces.jsonl
    seed: int = 0  # seeds data order and sampling
    # MAGRPOConfig fields, CoMLRL's defaults, given workflow meanings (c3_plugin/trainers/comlrl_compat.py walks every
    # one):

    # CoMLRL turns: > 1 runs CoMLRL's multi-turn team with its external_transition as steps of the trace (YAML configs
    # default to 1: their workflow's schedule holds the turns)
    num_turns: int = 2
    # joint actions per prompt (per turn) CoMLRL would sample: the env-step budget of the default plan
    num_generations: int = 4
    temperature: float = 0.6  # sampling temperature; behaviour log-probs use the same scaling
    top_p: float = 0.6  # nucleus sampling mass (1.0: exact behaviour log-probs)
    top_k: int | None = 50  # top-k sampling (None: off)
    # CoMLRL's advantage z-score: under C3 one scale per agent and batch (batch_scale, keeps leave-one-out), under
    # MAGRPO per group (group_zscore), under MAPPO over the batch (batch_zscore)
    advantage_normalization: bool = True
    eval_num_samples: int = 4  # eval items per evaluation (0: the whole eval set)
    eval_interval: int = 16  # evaluate every this many training items (0: only before and after training)
    # items of the before/after evaluations (None: eval_num_samples; 0: all); W&B still gets the first eval_num_samples
    final_eval_num_samples: int | None = None
    # phases [{epochs, where: {field: [values]}, eval_every: env steps}]; epochs sum to num_train_epochs
    curriculum: list[dict[str, Any]] | None = None
    # glob patterns of the metric keys published to W&B (None: all); metrics.jsonl keeps everything
    wandb_keys: list[str] | None = None
    # W&B steps of the training rows: "comlrl" (the steps CoMLRL's MAGRPOTrainer logs at for the same items,
    # rollout_buffer_size and logging_steps: turn_<t>/* where it logs turn t, every other key at the batch's last such
    # step, none when it logs nothing; c3_plugin/trainers/cadence.py) or "batch" (every rollout batch, all keys, at its
    # env step); metrics.jsonl keeps every batch either way
    wandb_cadence: str = "comlrl"
    json_stop: bool = False  # stop free-text generation once the message is one complete JSON object
    # "hf" (transformers generate) or "vllm" (a colocated vLLM engine, weights pushed after every update; needs the vLLM
    # environment, make setup-vllm)
    generation_backend: str = "hf"
    vllm_gpu_memory_utilization: float = 0.5  # vLLM: share of GPU memory the engine may take (weights + KV cache)
    # vLLM: KV cache size in GiB (None: 1 GiB on CPU, where vLLM would otherwise reserve vllm_gpu_memory_utilization of
    # the RAM; on a GPU what the utilization leaves)
    vllm_kv_cache_gb: float | None = None
    vllm_tensor_parallel_size: int = 1  # vLLM: GPUs the engine shards the model over
    # vLLM: free the engine's GPU memory during each update (sleep/wake_up; skipped on CPU)
    vllm_enable_sleep_mode: bool = False
    # vLLM: longest prompt + message the engine serves (None: the model's maximum)
    vllm_max_model_len: int | None = None
    # vLLM: serve agents.policy: lora adapters as vLLM LoRA adapters (False: push the base with each agent's adapter
    # merged in)
    vllm_lora_adapters: bool = True
    vllm_enforce_eager: bool = True  # vLLM: no graph capture (faster start-up, slower GPU decoding)
    # vLLM: each shared prefix of the rollout tree computed once (partial KV blocks shared; the same samples); None: on
    # for a CPU engine, off on a GPU, where it is not yet checked (bench/tree_cost.py --parts prefix checks it)
    vllm_tree_prefill: bool | None = None
    # vLLM: sample through this running generation server on its own GPUs (python -m c3_plugin.generation.server; e.g.
    # http://gen-node:8000) instead of a colocated engine; one trainer process
    vllm_server_url: str | None = None
    # vLLM server: folder for the weight pushes, readable by the server at the same path (None: a temporary folder, for
    # a server on this machine)
    vllm_server_weights_dir: str | None = None
    # vLLM: recompute the trainer's log-probs of every sample and log the sampler/trainer mismatch
    logprob_mismatch: bool = True
    # vLLM: truncated importance-sampling correction, weight min(pi_trainer / pi_vllm, cap) per token (None: off; needs
    # logprob_mismatch)
    importance_sampling_cap: float | None = None
    # The policy optimizers (c3_plugin/trainers/optim.py; MAPPO's critic keeps its own AdamW at critic_learning_rate,
    # unscheduled):

    # policy learning rate over the run's optimizer steps (counted per policy from the train set, plan,
    # instances_per_update, minibatch_size and ppo_epochs): "constant", "cosine" or "linear" (decay to lr_min_ratio),
    # each after lr_warmup_ratio
    lr_scheduler: str = "constant"
    # share of the run's optimizer steps (rounded up) spent in linear warm-up from 0 to the agent's own learning rate
    lr_warmup_ratio: float = 0.0
    # floor of the cosine/linear decay, as a share of each agent's own learning rate (OpenRLHF's min_lr = 0.1 x lr: 0.1)
    lr_min_ratio: float = 0.0
    adam_beta1: float = 0.9  # AdamW beta1 of every policy optimizer (default: torch's, as CoMLRL's optimizers)
    adam_beta2: float = 0.999  # AdamW beta2 (default: torch's)
    adam_eps: float = 1e-8  # AdamW epsilon (default: torch's)
    weight_decay: float = 0.01  # AdamW decoupled weight decay (default: torch's 0.01, as CoMLRL's optimizers)
    # KL penalty in the reward: each leaf's return becomes R - coef * KL(path) before credit, KL(path) the sum over the
    # path's messages of their summed per-token KL (trained tokens) between the temperature-scaled full-vocabulary
    # sampling policy (the behaviour log-probs) and a frozen reference copy of the starting policy at the same
    # temperature:
    kl_reward_coef: float = 0.0  # the (initial) coefficient (0: off)
    # target mean KL per path of the adaptive coefficient (None: the coefficient stays fixed)
    kl_reward_target: float | None = None
    # adaptive controller's horizon: coef *= 1 + clip(kl / target - 1, -0.2, 0.2) * env_steps / horizon after each
    # rollout batch
    kl_reward_horizon: int = 10000
    # per-token estimator, r = log pi - log pi_ref at the sampled token: "k1" (r), "k2" (r^2 / 2) or "k3" (exp(-r) - 1 +
    # r)
    kl_reward_estimator: str = "k3"

    def __post_init__(self) -> None:
        super().__post_init__()
        config_checks.check_workflow_config(self)


class WorkflowTrainer(WorkflowBridge, WorkflowCheckpoints, MAGRPOTrainer):
    """Shared machinery; algorithms override :meth:`compute_advantages` (and MAPPO its update)."""

    default_config_cls = WorkflowConfig
    algorithm_name = "workflow"

    # ----- construction (the steps: .setup) ---------------------------------------------------------
    @comlrl_constructor
    def __init__(self, comlrl: dict[str, Any], *, workflow: Workflow | str | Mapping | None = None, plan: Any = None,
                 run_dir: str | Path | None = None, lora_adapters: bool = False, grammar: Any = None,
                 outcome: Any = None, deepspeed: Any = None, learning_rates: Mapping[Any, float] | None = None,
                 learning_rate_scales: Mapping[Any, float] | None = None, trainable: Mapping[Any, bool] | None = None):
        args = comlrl["args"] = comlrl["args"] or self.default_config_cls()
        agents, formatters, external_transition = comlrl["agents"], comlrl["formatters"], comlrl["external_transition"]
        setup.refuse_unused(self.algorithm_name, args, workflow, formatters, external_transition)
        self.turns = None  # CoMLRL's multi-turn team (num_turns > 1): .turns.Turns
        if int(args.num_turns) > 1:
            team = len(agents) if agents is not None else int(comlrl["num_agents"] or args.num_agents)
            self.turns = Turns(self, team, int(args.num_turns), formatters, external_transition)
        n = self._bridge_workflow(self.turns.workflow if self.turns else workflow, args, comlrl["num_agents"], agents,
                                  None if self.turns else formatters)
        self.agent_lrs, self.frozen, self.agent_temperature = setup.agent_training(
            self.workflow, args, n, learning_rates, learning_rate_scales, trainable)
        turns = self.turns.turns if self.turns else [self.workflow.num_decisions]
        self.plan, self.branching, self.prompt_share = setup.resolve_plan(args, plan, self.workflow, turns,
                                                                          self.algorithm_name, self.frozen)
        setup.check_share(self.prompt_share, comlrl["train_dataset"], args, self.algorithm_name)
        self.lora_adapters = lora_adapters  # agents share one PeftModel with adapters "agent0", "agent1", ...
        # the domain's outcome extractor (Domain.outcome) for the influence diagnostic; None: no influence
        self.outcome = outcome
        super().__init__(**{**comlrl, "num_agents": n})
        self.policy_groups = setup.policy_groups(self.agents, lora_adapters, self.workflow, self.agent_lrs,
                                                 self.agent_temperature, self.frozen)
        self.policy_leader = {a: g[0] for g in self.policy_groups for a in g}  # a's group's first agent
        self.optimizers = setup.build_optimizers(self.policy_groups, self._trainable_parameters, self.agent_lrs, args)
        self.reference_models = kl_reward.reference_models(self.agents, getattr(self, "reference_models", None), args,
                                                           self.agent_devices)
        self.kl_controller = kl_reward.kl_controller(args)
        self._bridge_setup(args, grammar=grammar, run_dir=run_dir)
        self.phases = parse_curriculum(args.curriculum, int(args.num_train_epochs))
        if self.phases and comlrl["train_dataset"] is not None:
            check_rows(self.phases, comlrl["train_dataset"])
        self.deepspeed, self.dist, self.engines = setup.data_parallel(
            deepspeed, args, self.agents, self.policy_groups, self._trainable_parameters, self.agent_lrs, lora_adapters)
        if self.engines is not None:
            self.optimizers = None  # the engines hold the (sharded) optimizer states; DeepSpeed checkpoints them
        self._build_critics()
        # torchrun: every rank's vLLM engine starts here, together
        if self.dist.enabled and hasattr(self.backend, "start"):
            with gathered(self.engines, self.zero3):
                self.backend.start()
        schedules = setup.lr_schedules(args, self.workflow, self.train_dataset, self.phases, self.policy_groups,
                                       self.agent_lrs, self.prompt_share)
        if schedules is not None:
            self.lr_schedulers = schedules
        self.rng = np.random.default_rng([args.seed, self.dist.rank] if self.dist.enabled else args.seed)
        self._pending: list[dict] = []
        self._progress: dict[str, Any] = {}  # the training bar's postfix (_show_progress)
        self._epoch = 0
        self._rank_state: dict[str, Any] | None = None

    def _build_critics(self) -> None:
        """An algorithm's learned critics, built here: after the policies' DeepSpeed engines (a critic's engine
        follows theirs), before a vLLM engine starts; none by default."""

    def ds_engines(self) -> dict[str, Any]:
        """Every DeepSpeed engine by checkpoint tag (``agent<a>``, a shared model's once under its first agent;
        MAPPO adds its critic); empty without DeepSpeed."""
        if self.engines is None:
            return {}
        groups = getattr(self, "policy_groups", [[a] for a in range(len(self.engines))])
        return {f"agent{g[0]}": self.engines[g[0]] for g in groups}

    @property
    def zero3(self) -> bool:
        return self.engines is not None and int(self.deepspeed.zero_stage) == 3

    def _trainable_parameters(self, agent: int) -> list[torch.nn.Parameter]:
        return setup.trainable_parameters(self.agents[agent], agent, self.lora_adapters)

    def _pad_id(self, agent: int) -> int:
        tok = self.tokenizers[agent]
        return tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

    def _entry_prompt_ids(self, entry: Any) -> list[int]:
        """The ids a trace entry's message was sampled after (:func:`.samples.entry_prompt_ids`)."""
        return entry_prompt_ids(entry, self.tokenizers[int(entry.agent)], self.workflow, self.args.use_chat_template)

    # ----- CoMLRL's multi-turn team ------------------------------------------------------------------
    def reward_leaves(self, leaves: Sequence[Any]) -> list[float]:
        """Multi-turn (:mod:`.turns`): each path's return ``sum_t discount^(t-1) r_t``, its per-turn rewards kept for
        :meth:`collect`; one turn: the bridge's terminal reward."""
        if self.turns is None:
            return super().reward_leaves(leaves)
        self._turn_rewards = self.turns.path_rewards([leaf.outputs for leaf in leaves],
                                                     [dict(leaf.item) for leaf in leaves])
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
        rollout.budget.leaves = self.turns.env_steps(self._turn_rewards, leaf_instance, len(rollout.items),
                                                     rollout.branching)
        return rollout

    # ----- CoMLRL's epoch loop ---------------------------------------------------------------------------
    def get_train_dataloader(self):
        """A seeded shuffle per epoch, reproducible on resume (the epoch index seeds it); with a curriculum, the
        rows of the epoch's phase; the first ``prompt_share`` of them (:func:`.setup.every_agent_plan`)."""
        self._phase = phase_at(self.phases, self._epoch) if self.phases else None
        rows = self._phase.rows(self.train_dataset) if self.phases else list(range(len(self.train_dataset)))
        order = np.random.default_rng([self.args.seed, self._epoch]).permutation(len(rows))
        order = order[:setup.prompts_per_epoch(len(rows), self.prompt_share)]
        self._epoch += 1
        subset = torch.utils.data.Subset(self.train_dataset, [rows[i] for i in order])
        return torch.utils.data.DataLoader(subset, batch_size=1, collate_fn=lambda examples: examples, shuffle=False)

    def _train_step_returns(self, batch_item: Mapping[str, Any], **kwargs: Any) -> None:
        self._pending.append(dict(batch_item))
        if len(self._pending) >= int(self.args.instances_per_update):
            self._flush()
        else:
            self._show_progress(phase=f"queue {len(self._pending)}/{int(self.args.instances_per_update)}")

    def _drain_ready_buffers(self, ready_agents: list[int]) -> None:
        """At an epoch's end: the queued items' batch, and CoMLRL's last log entries of the epoch (its buffers
        drained: ``wandb_cadence: comlrl``, the last batch's ``turn_<t>/*`` at their steps)."""
        if self._pending:
            self._flush(final=True)
        elif (self.args.wandb_cadence == "comlrl" and getattr(self, "_last_train_row", None) is not None
              and self.wandb_rows(self.env_step, 0, final=True)):
            last = self._last_train_row
            self.log_metrics({k: v for k, v in last.items() if k.startswith("turn_")}, wandb_rows=self._rows,
                             record=False)
        super()._drain_ready_buffers(ready_agents)

    def wandb_rows(self, start: int, items: int, final: bool = False, rollout: Rollout | None = None) -> bool:
        """The W&B rows of a batch of ``items`` instances from env step ``start`` under ``wandb_cadence``, kept in
        ``self._rows`` (:func:`.cadence.wandb_rows`); whether there is any."""
        return cadence.wandb_rows(self, start, items, final, rollout)

    def evaluate(self, num_eval_samples: int | None = None) -> dict[str, float]:
        """The bridge's evaluation, with ``phase=eval`` on the training bar while it runs. Items still queued (an
        ``eval_interval`` that is no multiple of ``instances_per_update``) are trained on first, in a short batch:
        the evaluation then sees the policy after every item before it, at their env steps, as CoMLRL's does."""
        if self._pending:
            self._flush()
        self._show_progress(phase="eval")
        return super().evaluate(num_eval_samples)

    # ----- one rollout batch -------------------------------------------------------------------------
    def _flush(self, final: bool = False) -> None:
        """One rollout batch of the queued instances, every rank in step (each on its share of them; all of
        them on one process): collect -> KL -> advantages -> samples -> update -> log (``final``: the epoch's
        last, after which CoMLRL drains its buffers)."""
        items = [{**it, "id": str(it.get("id", f"item{k}"))} for k, it in enumerate(self._pending)]
        self._pending, before, t0 = [], self.env_step, time.perf_counter()
        with gathered(list(self.ds_engines().values()), self.zero3):  # ZeRO-3: whole weights, no per-layer collectives
            # 1. collect: this rank's share of the instances (a short last batch may leave a rank without any)
            local = shard(items, self.dist)
            rollout = self.collect(local, **self._ticking(self._rollout_ticks())) if local else None
            t1 = time.perf_counter()
            self._show_progress(phase="credit")
            task_rewards = rollout.rewards if rollout is not None else None  # what metrics and the trace report
            # 2. KL: the penalty in the reward, on every rank (it changes the returns credit sees)
            kl_metrics = self.apply_kl_reward(rollout)
            # 3. advantages: the algorithm's credit
            credited = self.compute_advantages(rollout) if rollout is not None else []
        ranks.add_budget(self.totals, rollout.budget.totals() if rollout is not None else {})
        self.env_step += ranks.env_steps(rollout.budget.leaves if rollout is not None else 0)
        # 4. samples: every rank (batch scaling sums over the ranks)
        samples, advantages = self.build_samples(rollout, credited)
        # 5. update
        self._show_progress(phase="update")
        stats = self.update_policies(samples)
        t2 = time.perf_counter()
        self.update_step += 1
        # 6. log: the metrics combined over the ranks
        metrics = batch_log.batch_metrics(self, rollout, task_rewards, advantages, len(items),
                                      {**stats, **kl_metrics, "time/rollout_s": t1 - t0, "time/update_s": t2 - t1})
        if self.args.save_traces and self.run_dir is not None and rollout is not None:
            batch_log.append_trace(self, rollout)
        if self.update_step == 1 and self.run_dir is not None and rollout is not None and self.dist.is_main:
            batch_log.write_example_trace(self, rollout, credited)
        combined = ranks.combine_ranks(metrics, self.dist)
        self.wandb_rows(before, len(items), final, rollout)
        self._last_train_row = combined
        self.log_metrics(combined, wandb_rows=self._rows)
        self._show_progress(phase=f"queue 0/{int(self.args.instances_per_update)}", env_step=self.env_step,
                            reward=combined.get("train/reward_mean"), loss=combined.get("train/loss"))
        every = getattr(getattr(self, "_phase", None), "eval_every", 0)
        if every and self.env_step // every > before // every:
            self.evaluate()

    def compute_advantages(self, rollout: Rollout) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per decision point: (entry indices, advantages) of the messages to train on."""
        raise NotImplementedError(f"{type(self).__name__}: WorkflowTrainer is a base class; an algorithm subclass "
                                  "(C3Trainer, WorkflowMAGRPOTrainer, MAPPOTrainer) defines compute_advantages")

    def apply_kl_reward(self, rollout: Rollout | None) -> dict[str, float]:
        """The KL penalty in the reward (``kl_reward_coef`` > 0; nothing otherwise) between collection and credit,
        a collective (:func:`.kl_reward.apply_kl_reward`)."""
        return kl_reward.apply_kl_reward(self, rollout) if self.kl_controller is not None else {}

    def build_samples(self, rollout: Rollout | None, credited: list[tuple[np.ndarray, np.ndarray]]):
        """Policy samples per trained agent (:mod:`.samples`), advantages scaled per agent as ``advantage_scaling``
        says, and every sample's scaled advantage; a shared sample once, its group (:meth:`_group_key`) the
        original's. Every rank, with or without a rollout (the batch scalings are collectives)."""
        per_agent = credited_rows(rollout, credited, self._group_key)
        out: dict[int, list[PolicySample]] = {}
        scaled = []
        for agent in (range(self.num_agents) if self.dist.enabled else list(per_agent)):
            if agent in self.frozen:  # a fixed teammate: credited (diagnostics) but not trained
                continue
            rows = per_agent.get(agent, [])
            adv = scale_advantages(rows, self.args.advantage_scaling, self.dist.enabled)
            if rows:
                scaled.append(adv)
                out[agent] = [policy_sample(e, a, self._entry_prompt_ids(e)) for (e, _, _), a in zip(rows, adv)]
        return out, (np.concatenate(scaled) if scaled else np.zeros(0))

    def _group_key(self, entry: Any) -> tuple:
        """The group an entry's advantage is normalised in (``group_zscore``): under an independent plan
        the B runs of its instance at its decision point (CoMLRL's group of joint runs); under a tree or
        diagnostic plan its siblings, the alternatives sampled from one context."""
        if self.plan.kind == "independent":
            return (entry.instance, entry.step)
        return (entry.instance, entry.parent, entry.step)

    def update_policies(self, samples: Mapping[int, list[PolicySample]]) -> dict[str, float]:
        """One PPO update per trained policy, then the new weights to a vLLM engine
        (:func:`.update.update_policies`)."""
        return update_policies(self, samples)

    def rollout_metrics(self, rollout: Rollout) -> dict[str, float]:
        return rollout_diagnostics(rollout, outcome=self.outcome)

    # ----- progress on CoMLRL's training bar (.progress) ---------------------------------------------
    def _training_bar(self) -> Any:
        """CoMLRL's training bar (:func:`.progress.training_bar`): none with ``verbose`` off or on ranks > 0."""
        return progress.training_bar(getattr(self, "verbose", True) and self.dist.is_main)

    def _show_progress(self, **fields: Any) -> None:
        """Put ``fields`` on the training bar's postfix (:func:`.progress.show`; None drops one): ``phase``, and the
        last update's ``env_step``, ``reward`` (``train/reward_mean``) and ``loss`` (``train/loss``)."""
        progress.show(self._progress, fields, self._training_bar())

    def _rollout_ticks(self) -> Callable[[], None]:
        """A :meth:`collect` tick that shows ``phase=rollout d/D`` on the training bar
        (:func:`.progress.rollout_ticks`)."""
        return progress.rollout_ticks(self._show_progress, self.workflow.num_decisions)
