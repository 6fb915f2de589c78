"""MAPL preference trainers on workflows: MADPO, MARLHF and their iterative forms over CoMLRL.

Each trainer is :class:`~.bridge.WorkflowBridge` plus CoMLRL's trainer (``MADPOTrainer``,
``MARLHFTrainer``, ``MADPOIterTrainer``, ``MARLHFIterTrainer``): CoMLRL keeps its collection
loop, pair selection, replay schedule, comparator policies, reward-model recipe and MAGRPO
online stage; the bridge makes every sample a role message of the workflow (forced JSON
skeletons, value-token loss masks) and evaluates with the workflow's greedy decoding on the
fixed task reward. What changes against CoMLRL:

* **labels**: preferences come only from the task reward (``reward_func``, never a target
  plan, never a learned score); ties give no pair; a run in which every candidate tied
  raises :class:`RuntimeError` instead of returning silently;
* **exact tokens**: every pair, including comparator candidates and replayed pairs, keeps
  the generated continuation ids (EOS kept) and their value-token loss masks
  (:class:`MaskedPreferenceTensors`); replay records carry prompt/winner/loser ids and masks
  and ``"joint": false`` (the centralized joint actor writes ``"joint": true``); a record of
  the other kind, or a text-only CoMLRL record, is rejected; with
  ``comparator_generation_mode=centralized`` (iterative trainers) one teacher, policy index 0's
  comparator model, writes the joint action, which is split into the role actions and encoded
  under each actor's own prompt and skeleton (:func:`~c3_plugin.structured.encode_values`); a
  projection that is not a valid role action is scored but forms no pair;
* **likelihood**: a sequence's log-prob covers exactly its stored continuation ids, the final
  selected token included, restricted to value tokens by the loss mask, summed
  (``loss_aggregation: token_sum``) or length-normalised (``sequence_mean``); the assistant
  prefill sits in the prompt ids and is never a target;
* **streamed joint DPO**: per agent and pair one winner/loser graph, backward at once (loss
  scaled by 1/batch), the other agents' deltas detached as in CoMLRL; a non-finite loss
  raises; zero dropout is required (checked at construction);
* **MARLHF**: the reward model is a backbone without LM vocabulary logits
  (:class:`BackboneRewardModel`) fitted while the actors sit on CPU; its optimizer is
  released after fitting and the fixed model scores (no grad) the online MAGRPO stage, whose policy
  loss uses the same masked log-probs (one live graph per sequence); evaluation always uses
  the task reward;
* **logging**: ``train/dpo_loss``, ``train/dpo_margin``, ``train/dpo_accuracy``,
  ``train/reward_gap``; ``train/reward_model_loss``, ``train/reward_model_accuracy``;
  ``turn_1/*`` once per joint step; ``iter/*`` per refresh (x-axis ``iter/current_iteration``);
  everything also in ``metrics.jsonl``; replay shards, reward-distribution JSON and policy
  checkpoints under the run directory.
"""

from __future__ import annotations

import copy
import math
import random
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
import wandb
from comlrl.trainers.preference.iterative import MADPOIterConfig, MADPOIterTrainer, MARLHFIterConfig, MARLHFIterTrainer
from comlrl.trainers.preference.madpo import AgentPreferenceTensors, MADPOConfig, MADPOTrainer, PreferencePair
from comlrl.trainers.preference.marlhf import MARLHFConfig, MARLHFTrainer
from comlrl.utils.distributed import unwrap_model

from .bridge import WorkflowBridge

AGGREGATIONS = ("sequence_mean", "token_sum")
RECORD_KIND = False  # the "joint" marker of this trainer family's replay records (decentralized actors)


# ----------------------------------------------------------------------------- configs
@dataclass
class PreferenceFields:
    """Fields every workflow preference config adds to CoMLRL's."""

    loss_aggregation: str = "sequence_mean"  # "sequence_mean": length-normalised value-token log-probs; "token_sum": summed
    use_chat_template: bool = True  # wrap role contexts in the tokenizer's chat template when it has one
    generation_batch_size: int | None = None  # cap on sequences per generate call (None: all candidates of a prompt at once)
    json_stop: bool = False  # stop free-text generation once the message is one complete JSON object
    wandb_keys: list[str] | None = None  # glob patterns of the metric keys published to W&B (None: all); metrics.jsonl keeps everything
    final_eval_num_samples: int | None = None  # items of the before/after evaluations (None: eval_num_samples; 0: all)
    offload_inactive_actor: bool = True  # during one actor's DPO update, keep the other actors and their optimizer states on the CPU (accelerators only)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.loss_aggregation not in AGGREGATIONS:
            raise ValueError(f"loss_aggregation must be one of {AGGREGATIONS}, got {self.loss_aggregation!r}")
        if getattr(self, "collaboration_mode", "decentralized") != "decentralized":
            raise ValueError("workflow preference trainers train one actor per role (collaboration_mode=decentralized); "
                             "use a centralized_* algorithm for the joint actor")
        rl = getattr(self, "rl_algorithm", None)
        if rl is not None and rl in ("maac", "iac"):
            raise ValueError(f"rl_algorithm={rl!r}: the workflow MARLHF trainers run CoMLRL's MAGRPO family online "
                             "(magrpo, mareinforce, maremax, marloo); actor-critic children bypass workflow generation")
        if hasattr(self, "comparator_policy"):
            if self.comparator_policy == "api":
                raise ValueError("comparator_policy=api is disabled: API comparators return text, not the exact token "
                                 "ids and value masks the preference records keep")
            if self.comparator_generation_mode not in ("decentralized", "centralized"):
                raise ValueError(f"comparator_generation_mode must be decentralized or centralized, "
                                 f"got {self.comparator_generation_mode!r}")
            if self.comparator_generation_mode == "centralized" and int(self.comparator_centralized_agent_index) != 0:
                raise ValueError("comparator_generation_mode=centralized: the teacher is policy index 0 "
                                 f"(comparator_centralized_agent_index=0), got {self.comparator_centralized_agent_index}")
            if getattr(self, "preference_scoring_reward", "task") != "task":
                raise ValueError("preference_scoring_reward must be 'task': preferences come only from the task reward")


@dataclass
class WorkflowMADPOConfig(PreferenceFields, MADPOConfig):
    """MADPO: task-reward preferences collected once, then joint DPO on that fixed set."""

    num_train_epochs: int = 7  # passes of joint DPO over the fixed preference set
    preference_num_candidates: int = 20  # joint candidates sampled per prompt
    preference_pairs_per_sample: int | None = 6  # at most this many non-tied pairs per prompt (largest reward gaps)
    environment_steps_per_pair: int = 2  # env steps a trained pair counts (its two joint actions)


@dataclass
class WorkflowMARLHFConfig(PreferenceFields, MARLHFConfig):
    """MARLHF: task-reward preferences once, a joint reward model fitted on them, then online MAGRPO on it."""

    num_train_epochs: int = 21  # online MAGRPO epochs over the training prompts
    num_generations: int = 4  # online joint rollouts per prompt
    preference_num_candidates: int = 20  # joint candidates sampled per prompt for the preference set
    preference_pairs_per_sample: int | None = 6  # at most this many non-tied pairs per prompt
    reward_model_device: str | None = None  # reward-model device (None: the actors' device)
    reward_model_name: str | None = None  # reward backbone source (None: a snapshot of agent 0's initial backbone)


@dataclass
class WorkflowMADPOIterConfig(PreferenceFields, MADPOIterConfig):
    """Iterative MADPO: per refresh, current vs current-copy comparator candidates, lambda-decay replay, joint DPO."""

    num_iterations: int = 6  # preference refreshes
    num_train_epochs: int = 1  # joint DPO passes per refresh
    preference_num_candidates: int = 20  # current-policy joint candidates per prompt
    comparator_num_candidates: int | None = 20  # comparator joint candidates per prompt
    preference_pairs_per_sample: int | None = 6  # at most this many non-tied pairs per prompt
    environment_steps_per_pair: int = 2  # env steps a trained pair counts
    comparator_policy: str = "current_copy"  # pre-update weights of the current actors, an independent RNG stream
    preference_replay_mode: str = "lambda_decay"  # replay over all refreshes, newer ones weighted more
    preference_replay_lambda: float | None = 0.8  # lambda of the decay
    log_reward_distribution: bool = True  # iter/*reward_distribution panels and reward_distributions/*.json


@dataclass
class WorkflowMARLHFIterConfig(PreferenceFields, MARLHFIterConfig):
    """Iterative MARLHF: per refresh, new comparisons, a refitted joint reward model, then MAGRPO epochs."""

    num_iterations: int = 6  # preference and reward-model refreshes
    num_train_epochs: int = 3  # online MAGRPO epochs per refresh
    num_generations: int = 4  # online joint rollouts per prompt
    preference_num_candidates: int = 20  # current-policy joint candidates per prompt
    comparator_num_candidates: int | None = 20  # comparator joint candidates per prompt
    preference_pairs_per_sample: int | None = 6  # at most this many non-tied pairs per prompt
    comparator_policy: str = "current_copy"  # pre-update weights of the current actors, an independent RNG stream
    preference_replay_mode: str = "lambda_decay"  # replay over all refreshes, newer ones weighted more
    preference_replay_lambda: float | None = 0.8  # lambda of the decay
    log_reward_distribution: bool = True  # iter/*reward_distribution panels and reward_distributions/*.json
    reward_model_device: str | None = None  # reward-model device (None: the actors' device)
    reward_model_name: str | None = None  # reward backbone source (None: a snapshot of agent 0's initial backbone)


# ----------------------------------------------------------------------------- tensors and likelihood
@dataclass
class MaskedPreferenceTensors(AgentPreferenceTensors):
    """One agent's side of a pair: prompt ids (prefill included), exact winner/loser continuation ids
    and their loss masks (1 on sampled value tokens, 0 on forced schema tokens)."""

    winner_loss_mask: torch.Tensor | None = None
    loser_loss_mask: torch.Tensor | None = None


def _allow_in_checkpoints(cls: type) -> None:
    """CoMLRL's training checkpoints store only allow-listed dataclasses (MADPO's progress holds the pairs)."""
    from comlrl.utils import checkpoint

    checkpoint._DATACLASSES.add(f"{cls.__module__}.{cls.__qualname__}")


_allow_in_checkpoints(MaskedPreferenceTensors)


def masked_sequence_log_prob(model: torch.nn.Module, prompt_ids: torch.Tensor, completion_ids: torch.Tensor,
                             loss_mask: torch.Tensor | Sequence[int] | None = None, aggregation: str = "token_sum") -> torch.Tensor:
    """log pi(completion | prompt) over exactly ``completion_ids`` (every token, the last included), each
    token weighted by ``loss_mask``; ``token_sum`` sums, ``sequence_mean`` divides by the mask's sum.
    One forward pass of ``prompt + completion[:-1]``; float32 log-softmax."""
    device = next(model.parameters()).device
    prompt_ids = torch.as_tensor(prompt_ids, dtype=torch.long).reshape(-1).to(device)
    completion_ids = torch.as_tensor(completion_ids, dtype=torch.long).reshape(-1).to(device)
    c = completion_ids.numel()
    if prompt_ids.numel() == 0:
        raise ValueError("a scored sequence needs a non-empty prompt")
    if c == 0:
        return torch.zeros((), device=device)
    mask = (torch.ones(c, device=device) if loss_mask is None
            else torch.as_tensor(loss_mask, dtype=torch.float32).reshape(-1).to(device))
    if mask.numel() != c:
        raise ValueError(f"loss mask has {mask.numel()} entries for {c} completion tokens")
    input_ids = torch.cat([prompt_ids, completion_ids[:-1]]).unsqueeze(0)
    attention = torch.ones_like(input_ids)
    try:
        logits = model(input_ids=input_ids, attention_mask=attention, use_cache=False, logits_to_keep=c).logits
    except TypeError:
        logits = model(input_ids=input_ids, attention_mask=attention, use_cache=False).logits
    logits = logits[0, -c:].float()
    logp = torch.log_softmax(logits, dim=-1).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)
    total = (logp * mask).sum()
    if aggregation == "sequence_mean":
        return total / mask.sum().clamp(min=1.0)
    if aggregation != "token_sum":
        raise ValueError(f"loss_aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    return total


def dropout_fields(model: torch.nn.Module) -> dict[str, float]:
    """Non-zero dropout settings of ``model``: config fields (``*dropout*``, ``*pdrop``) and Dropout modules."""
    found: dict[str, float] = {}
    cfg = getattr(unwrap_model(model), "config", None)
    values = cfg.to_dict() if hasattr(cfg, "to_dict") else {}
    for k, v in values.items():
        if ("dropout" in k or k.endswith("pdrop")) and isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
            found[f"config.{k}"] = float(v)
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Dropout) and mod.p > 0:
            found[f"module {name}"] = float(mod.p)
    return found


# ----------------------------------------------------------------------------- shared trainer machinery
class PreferenceBridge(WorkflowBridge):
    """What the four workflow preference trainers share (mix in before the CoMLRL trainer)."""

    def __init__(self, agent_model: Any = None, agents: Sequence[Any] | None = None, num_agents: int | None = None,
                 tokenizer: Any = None, model_config: Mapping[str, Any] | None = None, train_dataset: Any = None,
                 eval_dataset: Any = None, reward_func: Any = None, reward_processor: Any = None, formatters: Any = None,
                 external_transition: Any = None, wandb_config: Mapping[str, Any] | None = None, eval_logger: Any = None,
                 eval_aggregator: Any = None, args: Any = None, *, workflow: Any = None, run_dir: str | Path | None = None,
                 lora_adapters: bool = False, grammar: Any = None, plan: Any = None, **kwargs: Any):
        if lora_adapters:
            raise ValueError("shared LoRA adapters (agents.policy=lora) are not supported by the preference trainers; "
                             "use agents.policy=per_agent")
        args = args or self.default_config_cls()
        n = self._bridge_workflow(workflow, args, num_agents, agents)
        for a in range(n):
            self._agent_step(a)  # one parallel stage, one decision per agent: checked before loading anything
        if getattr(args, "comparator_generation_mode", "decentralized") == "centralized":
            if grammar is None:
                raise ValueError("comparator_generation_mode=centralized needs structured generation (a value-only JSON "
                                 "grammar): central teacher projections are encoded under each actor's skeleton")
            if kwargs.get("centralized_comparator_adapter") is None:
                from domains.travel.joint import TravelJointAdapter

                kwargs["centralized_comparator_adapter"] = TravelJointAdapter()
            if not hasattr(kwargs["centralized_comparator_adapter"], "workflow"):
                raise ValueError("comparator_generation_mode=centralized needs a joint adapter with a one-role joint "
                                 "workflow (the domain's extras['joint_adapter'], e.g. TravelJointAdapter)")
        if formatters is None:  # the role contexts: what the reward model reads as each agent's prompt
            formatters = [partial(_role_context, self, a) for a in range(n)]
        super().__init__(agent_model=agent_model, agents=agents, num_agents=n, tokenizer=tokenizer, model_config=model_config,
                         train_dataset=train_dataset, eval_dataset=eval_dataset, reward_func=reward_func,
                         reward_processor=reward_processor, formatters=formatters, external_transition=external_transition,
                         wandb_config=wandb_config, eval_logger=eval_logger, eval_aggregator=eval_aggregator, args=args, **kwargs)
        self._bridge_setup(args, grammar=grammar, run_dir=run_dir)
        bad = {f"agent {i} {k}": v for i, m in enumerate(self.agents) for k, v in dropout_fields(m).items()}
        if bad:
            raise ValueError(f"the streamed joint-DPO / policy gradient needs zero dropout (one graph is rebuilt per pair, so "
                             f"dropout would draw different masks than the detached deltas); found {bad}")

    # ----- likelihood ---------------------------------------------------------------------------
    def _sequence_log_prob(self, agent_idx: int, prompt_input_ids: torch.Tensor, completion_ids: torch.Tensor,
                           loss_mask: Any = None) -> torch.Tensor:
        """Masked log-prob of exactly ``completion_ids`` (final token included), aggregated per ``loss_aggregation``."""
        agent = self.agents[agent_idx]
        agent.train()
        return masked_sequence_log_prob(unwrap_model(agent), prompt_input_ids, completion_ids, loss_mask,
                                        self.args.loss_aggregation)

    def _agent_logprob_delta(self, agent_idx: int, pair: PreferencePair) -> torch.Tensor:
        t = pair.agent_tensors[agent_idx]
        if not isinstance(t, MaskedPreferenceTensors):
            raise TypeError("preference pairs of the workflow trainers carry MaskedPreferenceTensors (exact ids and masks)")
        return (self._sequence_log_prob(agent_idx, t.prompt_input_ids, t.winner_completion_ids, t.winner_loss_mask)
                - self._sequence_log_prob(agent_idx, t.prompt_input_ids, t.loser_completion_ids, t.loser_loss_mask))

    # ----- pairs --------------------------------------------------------------------------------
    @staticmethod
    def _side(gen: Mapping[str, Any], idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        ids = gen["completion_input_ids"][0][idx].detach().cpu().long()
        masks = gen.get("completion_loss_masks")
        if masks is None:
            raise ValueError("a generation without completion_loss_masks did not come from the workflow backend")
        return ids, torch.tensor(masks[0][idx], dtype=torch.long)

    def _pair_tensors(self, winner_gen: Mapping[str, Any], winner_idx: int, loser_gen: Mapping[str, Any],
                      loser_idx: int) -> MaskedPreferenceTensors:
        prompt = winner_gen["prompt_input_ids"][0].detach().cpu().long()
        if not torch.equal(prompt, loser_gen["prompt_input_ids"][0].detach().cpu().long()):
            raise ValueError("winner and loser of a pair were sampled from different prompt ids")
        w_ids, w_mask = self._side(winner_gen, winner_idx)
        l_ids, l_mask = self._side(loser_gen, loser_idx)
        return MaskedPreferenceTensors(prompt_input_ids=prompt, winner_completion_ids=w_ids, loser_completion_ids=l_ids,
                                       winner_loss_mask=w_mask, loser_loss_mask=l_mask)

    def _make_pair(self, prompts: Sequence[str], winner_outs: Sequence[Mapping], winner_idx: int, loser_outs: Sequence[Mapping],
                   loser_idx: int, **fields: Any) -> PreferencePair:
        n = self.num_agents
        return PreferencePair(prompts=list(prompts),
                              winner_completions=[str(winner_outs[a]["completions"][0][winner_idx]) for a in range(n)],
                              loser_completions=[str(loser_outs[a]["completions"][0][loser_idx]) for a in range(n)],
                              agent_tensors=[self._pair_tensors(winner_outs[a], winner_idx, loser_outs[a], loser_idx) for a in range(n)],
                              **fields)

    def _sample_candidates(self, agents: Sequence[Any], batch_item: Mapping[str, Any], num_candidates: int) -> list[dict]:
        return self._run_agent_tasks(lambda a: self._generate_completions(agents[a], [batch_item], agent_idx=a,
                                                                          num_return_sequences=num_candidates,
                                                                          max_new_tokens=self.args.max_new_tokens))

    def _generate_preference_pairs_for_item(self, batch_item: dict, **kwargs: Any) -> list[PreferencePair]:
        """CoMLRL's one-round collection: N joint candidates, task rewards, non-tied pairs by reward gap,
        each pair keeping the generated ids and masks."""
        outs = self._sample_candidates(self.agents, batch_item, int(self.args.preference_num_candidates))
        prompts = [outs[a]["prompts"][0] for a in range(self.num_agents)]
        rewards = self._compute_rewards([prompts[0]], [list(o["completions"][0]) for o in outs], batch_items=[batch_item])
        mean = float(np.mean(rewards)) if rewards else 0.0
        return [self._make_pair(prompts, outs, w, outs, l, winner_reward=float(rewards[w]), loser_reward=float(rewards[l]),
                                candidate_reward_mean=mean)
                for w, l in self._select_preference_pair_indices(rewards)]

    def _build_preference_dataset(self, **kwargs: Any) -> list[PreferencePair]:
        pairs = super()._build_preference_dataset(**kwargs)
        if not pairs and "iteration_idx" not in kwargs:
            raise RuntimeError(all_tied_message(self.algorithm_name, self))
        return pairs

    # ----- joint DPO ------------------------------------------------------------------------------
    def _update_from_preference_batch(self, batch: list[PreferencePair]) -> dict[str, float]:
        """Streamed joint DPO: for each agent, per pair one winner/loser graph, backward at once (scaled
        by 1/len(batch)), then the agent's optimizer step; other agents' deltas are the detached
        pre-update ones (CoMLRL's factorisation)."""
        if not batch:
            return {}
        detached = self._detached_agent_deltas(batch)
        if not all(math.isfinite(d) for row in detached for d in row):
            raise FloatingPointError(f"non-finite preference log-prob delta in a batch of {len(batch)} pairs: {detached}")
        beta = float(self.args.dpo_beta)
        scale = 1.0 / len(batch)
        for a in range(self.num_agents):
            opt = self.optimizers[a]
            self._park_inactive(a)
            opt.zero_grad(set_to_none=True)
            for p, pair in enumerate(batch):
                own = self._agent_logprob_delta(a, pair)
                joint = own + float(sum(detached[p]) - detached[p][a])
                loss = -F.logsigmoid(beta * joint) * scale
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"non-finite joint-DPO loss for agent {a}, pair {p}: {float(loss)}")
                if loss.requires_grad:
                    loss.backward()
                del own, joint, loss
            opt.step()
        self._park_inactive(None)
        joint_deltas = np.array([sum(row) for row in detached], dtype=np.float64)
        losses = -np.log(1.0 / (1.0 + np.exp(-beta * joint_deltas)))
        reward_mean = float(np.mean([pair.candidate_reward_mean for pair in batch]))
        return {"train/dpo_loss": float(losses.mean()), "train/dpo_margin": float(joint_deltas.mean()),
                "train/dpo_accuracy": float((joint_deltas > 0).mean()),
                "train/reward_gap": float(np.mean([p.winner_reward - p.loser_reward for p in batch])),
                "train/preference_pairs": float(len(batch)),
                "turn_1/reward_mean": reward_mean, "turn_1/expected_return": reward_mean}

    def _park_inactive(self, active: int | None) -> None:
        """With ``offload_inactive_actor`` on an accelerator: every actor but ``active`` (and its optimizer
        state) on the CPU, ``active`` on its device; ``None`` puts every actor back on its device."""
        if not getattr(self.args, "offload_inactive_actor", False):
            return
        for a, agent in enumerate(self.agents):
            device = torch.device(str(self.agent_devices[a]))
            if device.type == "cpu":
                continue
            target = device if active is None or a == active else torch.device("cpu")
            agent.to(target)
            _move_optimizer_state(self.optimizers[a], target)
        if active is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()

    def _train_preference_pairs(self, preference_pairs: list[PreferencePair], *, updates_seen: int = 0, desc: str = "MADPO",
                                start_epoch: int = 0, epoch_callback: Any = None) -> int:
        """CoMLRL's epoch loop, logged through :meth:`log_metrics` (``env_step`` x-axis): ``train/*`` every
        update, ``turn_1/*`` throttled by ``logging_steps``; evaluation every ``eval_interval`` updates
        (not before the first: the caller evaluates before training)."""
        interval = int(self.args.eval_interval)
        for epoch in range(start_epoch, int(self.args.num_train_epochs)):
            random.shuffle(preference_pairs)
            size = int(self.args.train_batch_size)
            for start in range(0, len(preference_pairs), size):
                if interval > 0 and updates_seen > 0 and updates_seen % interval == 0:
                    self.evaluate(num_eval_samples=int(self.args.eval_num_samples))
                batch = preference_pairs[start:start + size]
                metrics = self._update_from_preference_batch(batch)
                updates_seen += 1
                self.update_step += 1
                if self.args.use_environment_step:
                    self.env_step += int(self.args.environment_steps_per_pair) * len(batch)
                self.totals["env_steps"] = int(self.env_step)
                if not self._should_log_train(int(self.env_step)):
                    metrics = {k: v for k, v in metrics.items() if not k.startswith("turn_1/")}
                self.log_metrics({**metrics, "train/update_step": float(self.update_step), "env_step": float(self.env_step)})
            if epoch_callback is not None:
                epoch_callback(epoch + 1, updates_seen)
        return updates_seen

    # ----- run ----------------------------------------------------------------------------------
    def train(self, *args: Any, **kwargs: Any) -> Any:
        if self.wandb_config is not None and not self.wandb_initialized:
            self._init_wandb()
        try:
            return super().train(*args, **kwargs)
        finally:
            self.totals["env_steps"] = int(self.env_step)

    def _init_wandb(self) -> None:
        super()._init_wandb()
        if wandb.run is not None:
            wandb.define_metric("iter/current_iteration", hidden=True, summary="none")
            wandb.define_metric("iter/*", step_metric="iter/current_iteration")


def _role_context(trainer: WorkflowBridge, agent_idx: int, item: Mapping[str, Any], **_: Any) -> str:
    """Agent ``agent_idx``'s context for ``item`` (CoMLRL formatter signature)."""
    return trainer.agent_prompt(agent_idx, item).text


def all_tied_message(name: str, trainer: Any) -> str:
    rows = len(trainer.train_dataset) if trainer.train_dataset is not None else 0
    return (f"{name}: no preference pair: on all {rows} training prompts every sampled joint candidate tied on the task "
            f"reward ({int(trainer.args.preference_num_candidates)} candidates per prompt), so there is nothing to "
            "train on. Sample more or more diverse candidates (preference_num_candidates, temperature, top_p, "
            "max_value_tokens) or check that the task reward separates the sampled actions.")


# ----------------------------------------------------------------------------- MARLHF pieces
class BackboneRewardModel(torch.nn.Module):
    """A transformer backbone without LM vocabulary logits and a scalar head on the last non-pad token."""

    def __init__(self, backbone: torch.nn.Module):
        super().__init__()
        self.backbone = backbone
        hidden = getattr(backbone.config, "hidden_size", None) or getattr(backbone.config, "n_embd", None)
        if hidden is None:
            raise ValueError("could not infer the reward backbone's hidden size")
        p = next(backbone.parameters())
        self.reward_head = torch.nn.Linear(int(hidden), 1).to(device=p.device, dtype=torch.float32)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        h = self.backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                          use_cache=False).last_hidden_state
        positions = torch.arange(attention_mask.shape[1], device=h.device).expand_as(attention_mask)
        last = positions.masked_fill(attention_mask == 0, -1).max(dim=1).values.clamp(min=0)
        pooled = h[torch.arange(h.shape[0], device=h.device), last]
        return self.reward_head(pooled.float()).squeeze(-1)


def _backbone_of(model: torch.nn.Module) -> torch.nn.Module:
    model = unwrap_model(model)
    base = getattr(model, "base_model", None)
    if base is None or base is model:
        base = getattr(model, "model", None)
    if base is None:
        raise ValueError(f"cannot find the backbone of {type(model).__name__} (no base_model / model attribute)")
    return base


def _move_optimizer_state(opt: torch.optim.Optimizer, device: Any) -> None:
    for state in opt.state.values():
        for k, v in state.items():
            if torch.is_tensor(v):
                state[k] = v.to(device)


class MARLHFBridge(PreferenceBridge):
    """Reward model and MAGRPO online stage of the workflow MARLHF trainers."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._reward_template = None
        if not self.args.reward_model_name:  # the initial backbone, kept on CPU so every refit starts from it
            base = _backbone_of(self.agents[0])
            self._reward_template = (copy.deepcopy(base.config), {k: v.detach().to("cpu", copy=True) for k, v in base.state_dict().items()},
                                     next(base.parameters()).dtype)
        self._actors_offloaded = False

    def _resolve_reward_model_device(self) -> torch.device:
        configured = getattr(self.args, "reward_model_device", None)
        return torch.device(str(configured)) if configured else torch.device(str(self.agent_devices[0]))

    # ----- actor offload ------------------------------------------------------------------------
    def _offload_actors(self) -> None:
        """Actors and their optimizer states to CPU (while the reward model is fitted)."""
        for a, agent in enumerate(self.agents):
            agent.to("cpu")
            _move_optimizer_state(self.optimizers[a], "cpu")
        self._actors_offloaded = True
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def _restore_actors(self) -> None:
        for a, agent in enumerate(self.agents):
            agent.to(self.agent_devices[a])
            _move_optimizer_state(self.optimizers[a], self.agent_devices[a])
        self._actors_offloaded = False

    # ----- reward model -------------------------------------------------------------------------
    def _init_reward_model(self) -> None:
        """A fresh :class:`BackboneRewardModel` on CPU: ``reward_model_name`` loaded with ``AutoModel`` (no LM
        head), or the snapshot of agent 0's initial backbone. It moves to ``reward_model_device`` when it is
        fitted (after the actors went to CPU) or first scores."""
        from transformers import AutoModel, AutoTokenizer

        source = self.args.reward_model_name
        if source:
            backbone = AutoModel.from_pretrained(source, **self._model_kwargs_from_config())
            tokenizer = AutoTokenizer.from_pretrained(source)
            if tokenizer.pad_token_id is None:
                tokenizer.pad_token = tokenizer.eos_token
        else:
            config, state, dtype = self._reward_template
            backbone = AutoModel.from_config(copy.deepcopy(config), dtype=dtype)
            backbone.load_state_dict(state, strict=True)
            tokenizer = self.tokenizers[0]
        model = BackboneRewardModel(backbone)
        if self.args.reward_freeze_backbone:
            model.backbone.requires_grad_(False)
        self.reward_model = model
        self.reward_tokenizer = tokenizer
        self.reward_optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],
                                                  lr=float(self.args.reward_learning_rate))

    def _train_reward_model(self, preference_pairs: list[PreferencePair]) -> None:
        """Bradley-Terry fit on the joint texts; then the optimizer is released, the model frozen for
        online scoring, and the actors moved back."""
        if self.reward_model is None or self.reward_optimizer is None:
            raise RuntimeError("the reward model has not been initialised")
        self._offload_actors()
        try:
            self.reward_model.to(self.reward_device)
            self.reward_model.train()
            size = int(self.args.reward_train_batch_size)
            losses: list[float] = []
            correct: list[float] = []
            for _ in range(int(self.args.reward_num_train_epochs)):
                losses, correct = [], []
                order = list(range(len(preference_pairs)))
                random.shuffle(order)
                for s in range(0, len(order), size):
                    batch = [preference_pairs[i] for i in order[s:s + size]]
                    win = self._score_reward_texts([self._format_joint_reward_text(p, use_winner=True) for p in batch])
                    lose = self._score_reward_texts([self._format_joint_reward_text(p, use_winner=False) for p in batch])
                    loss = -F.logsigmoid(win - lose).mean()
                    if not torch.isfinite(loss):
                        raise FloatingPointError(f"non-finite reward-model loss {float(loss)}")
                    self.reward_optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    self.reward_optimizer.step()
                    losses.append(float(loss.detach()))
                    correct.extend((win > lose).float().tolist())
            self.log_metrics({"train/reward_model_loss": float(np.mean(losses)) if losses else None,
                              "train/reward_model_accuracy": float(np.mean(correct)) if correct else None,
                              "train/reward_model_pairs": float(len(preference_pairs)), "env_step": float(self.env_step)})
        finally:
            self.reward_optimizer = None  # released: only the model is kept, for online (no-grad) scoring
            self.reward_model.eval()
            self._restore_actors()

    def _score_reward_texts(self, texts: Sequence[str]) -> torch.Tensor:
        """Scores of whole joint texts: nothing is truncated unless ``reward_max_length`` is set (then the
        last ``reward_max_length`` tokens are kept); a text longer than the backbone's positions raises."""
        if self.reward_model is None or self.reward_tokenizer is None:
            raise RuntimeError("the reward model has not been initialised")
        if next(self.reward_model.parameters()).device != self.reward_device:  # built on CPU, or restored there
            self.reward_model.to(self.reward_device)
        tok = self.reward_tokenizer
        rows = [list(tok(t)["input_ids"]) for t in texts]
        limit = self.args.reward_max_length
        if limit:
            rows = [r[-int(limit):] for r in rows]
        max_pos = getattr(self.reward_model.backbone.config, "max_position_embeddings", None)
        longest = max(len(r) for r in rows)
        if max_pos is not None and longest > int(max_pos):
            raise ValueError(f"a joint reward text has {longest} tokens, more than the reward backbone's {max_pos} "
                             "positions; set reward_max_length to keep only the last tokens")
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        ids = torch.full((len(rows), longest), int(pad), dtype=torch.long)
        att = torch.zeros((len(rows), longest), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
            att[i, : len(r)] = 1
        return self.reward_model(input_ids=ids.to(self.reward_device), attention_mask=att.to(self.reward_device))

    # ----- online MAGRPO stage ------------------------------------------------------------------
    def _pack_completions_for_buffer(self, completions_data: dict[str, Any]) -> dict[str, Any]:
        packed = super()._pack_completions_for_buffer(completions_data)
        packed["completion_loss_masks"] = [list(m) for m in completions_data["completion_loss_masks"][0]]
        return packed

    def _pg_advantages(self, completions_data: Mapping[str, Any], returns: Sequence[float]) -> torch.Tensor:
        """CoMLRL's advantages: returns (minus a reference KL when enabled), group baseline, optional z-score."""
        r = torch.tensor(list(returns), dtype=torch.float32)
        adv = self._compute_advantages(self._apply_reference_kl_to_returns(r, completions_data))
        if self.args.advantage_normalization and adv.numel() > 1:
            adv = (adv - adv.mean()) / adv.std(unbiased=False).clamp(min=1e-6)
        return adv

    def _pg_terms(self, agent_idx: int, completions_data: Mapping[str, Any], returns: Sequence[float]):
        """Yield each sequence's policy-gradient loss ``-A_j log pi(y_j) / n`` (masked log-probs), one graph at a time."""
        adv = self._pg_advantages(completions_data, returns)
        prompt = completions_data["prompt_input_ids"][0]
        seqs = completions_data["completion_input_ids"][0]
        masks = completions_data["completion_loss_masks"]
        n = min(len(seqs), adv.numel())
        for j in range(n):
            lp = self._sequence_log_prob(agent_idx, prompt, seqs[j], masks[j])
            yield -lp * float(adv[j]) / n

    def _compute_loss_with_gradients(self, agent: Any, completions_data: Mapping[str, Any], returns: Sequence[float]) -> torch.Tensor:
        """The whole node's loss at once (CoMLRL's contract); training uses the streamed :meth:`_update_from_samples`."""
        agent_idx = next(i for i, a in enumerate(self.agents) if a is agent)
        terms = list(self._pg_terms(agent_idx, completions_data, returns))
        loss = torch.stack(terms).sum() if terms else torch.zeros(())
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite policy loss for agent {agent_idx}: {float(loss)}")
        return loss

    def _update_from_samples(self, agent_idx: int, samples: list[Any]) -> None:
        """CoMLRL's per-agent update (batches of ``train_batch_size`` nodes, mean over nodes), streamed:
        each sequence's graph is backpropagated before the next is built."""
        if not samples:
            return
        random.shuffle(samples)
        size = int(getattr(self.args, "train_batch_size", len(samples)) or 1)
        opt = self.optimizers[agent_idx]
        for start in range(0, len(samples), size):
            batch = samples[start:start + size]
            opt.zero_grad(set_to_none=True)
            for sample in batch:
                for term in self._pg_terms(agent_idx, sample.completions_data, sample.returns):
                    loss = term / len(batch)
                    if not torch.isfinite(loss):
                        raise FloatingPointError(f"non-finite policy loss for agent {agent_idx}: {float(loss)}")
                    if loss.requires_grad:
                        loss.backward()
            opt.step()

    def _drain_ready_buffers(self, ready_agents: list[int]) -> None:
        """Update the ready agents; log ``turn_1/*`` (learned-reward scores) once per joint step."""
        if not ready_agents:
            return
        ready = sorted({int(a) for a in ready_agents})
        results = self._run_agent_tasks(lambda a: self._process_buffer(a, self.rollout_buffers[a]), agent_indices=ready,
                                        parallel=self._parallel_agent_mode_enabled())
        self.update_step += 1
        self.totals["env_steps"] = int(self.env_step)
        per_step: dict[int, dict[str, float]] = {}
        for result in results:
            for entry in result.get("log_entries", []):
                per_step.setdefault(int(entry["step"]), dict(entry.get("metrics") or {}))
        for step in sorted(per_step):
            if per_step[step] and self._should_log_train(step):
                self.log_metrics({**per_step[step], "env_step": float(step)})


# ----------------------------------------------------------------------------- iterative pieces
class IterativeBridge:
    """Refresh-loop overrides of the iterative trainers (mix in before :class:`PreferenceBridge`)."""

    def _generate_preference_pairs_for_item(self, batch_item: dict, **kwargs: Any) -> list[PreferencePair]:
        """CoMLRL's current-vs-comparator comparison (same index, ties dropped, ``pair_selection``), with
        both sides' exact generated ids and masks (CoMLRL re-tokenizes comparator text)."""
        iteration_idx = int(kwargs.pop("iteration_idx", 0))
        n_cur = int(self.args.preference_num_candidates)
        n_cmp = int(self.args.comparator_num_candidates or n_cur)
        cur = self._generate_policy_outputs_for_item(self.agents, batch_item, num_candidates=n_cur)
        cmp = self._generate_comparator_outputs_for_item(batch_item, iteration_idx=iteration_idx, num_candidates=n_cmp)
        prompts = [cur[a]["prompts"][0] for a in range(self.num_agents)]
        cur_raw, cur_r = self._compute_raw_and_processed_rewards([prompts[0]], [list(o["completions"][0]) for o in cur],
                                                                 batch_items=[batch_item])
        cmp_raw, cmp_r = self._compute_raw_and_processed_rewards([prompts[0]], [list(o["completions"][0]) for o in cmp],
                                                                 batch_items=[batch_item])
        self._record_iteration_reward_distribution(target_rewards=cur_raw, comparator_rewards=cmp_raw)
        everything = list(cur_r) + list(cmp_r)
        mean = float(np.mean(everything)) if everything else 0.0
        pools = {"current": (cur, cur_r, cur_raw), "comparator": (cmp, cmp_r, cmp_raw)}
        # central-teacher projections that are not valid role actions keep their reward (distribution)
        # but form no pair: they have no token ids under the actors' skeletons
        valid = [all(o.get("completion_valid", [[True] * len(cmp_r)])[0][j] for o in cmp) for j in range(len(cmp_r))]
        keep = [j for j in range(min(len(cur_r), len(cmp_r))) if valid[j]]
        selected = self._select_policy_comparison_pairs([cur_r[j] for j in keep], [cmp_r[j] for j in keep])
        pairs = []
        for (w_src, w), (l_src, l) in [((ws, keep[w]), (ls, keep[l])) for (ws, w), (ls, l) in selected]:
            t_idx = w if w_src == "current" else l
            c_idx = w if w_src == "comparator" else l
            pairs.append(self._make_pair(prompts, pools[w_src][0], w, pools[l_src][0], l,
                                         winner_reward=float(pools[w_src][1][w]), loser_reward=float(pools[l_src][1][l]),
                                         candidate_reward_mean=mean,
                                         raw_rewards=[float(pools[w_src][2][w]), float(pools[l_src][2][l])],
                                         target_raw_reward=float(cur_raw[t_idx]), comparator_raw_reward=float(cmp_raw[c_idx])))
        return pairs

    # ----- centralized comparator (one teacher, projected onto the actors) --------------------------
    def _generate_centralized_policy_output_for_agent(self, policy_agent: Any, batch_item: dict, *, prompt: str,
                                                      num_candidates: int, **kwargs: Any) -> list[dict[str, Any]]:
        """``comparator_generation_mode=centralized``: ``policy_agent`` (policy index 0's comparator
        weights, chosen by CoMLRL's comparator policy: live, current copy, history or model) samples
        ``num_candidates`` joint actions for the joint prompt (``prompt``, the adapter's
        ``build_prompt``) under the joint workflow role's system prompt, prefill and grammar, with
        the aggregate output budget of the role calls, on the comparator RNG stream. Each joint
        text is split by the adapter into the role actions, which the unchanged task reward scores.

        Per role the result is a workflow generation dict whose prompt ids are the actor's own
        prompt (as for a native generation) and whose completion ids/masks are
        :func:`~c3_plugin.structured.encode_values` of the projected values under the role's
        skeleton. A projection that is not a strictly valid role action (failed split, missing or
        duplicated slots, a value the role grammar could not produce) keeps its text and reward
        but has no ids: ``completion_valid[0][j]`` is False and the pair builder excludes it
        from pairs."""
        from c3_plugin.generation import encode_prompt
        from c3_plugin.rollout import Prompt

        adapter = self.centralized_comparator_adapter
        wf = adapter.workflow
        role = wf.roles[wf.decision_steps[0].name]
        teacher = self._centralized_comparator_agent_index()
        n = self.num_agents
        role_prompts = [self.agent_prompt(a, batch_item) for a in range(n)]
        budget = sum(int(p.max_new_tokens or self.args.max_new_tokens) for p in role_prompts)
        joint = Prompt(text=prompt, role=role.name, agent=teacher, prefix=role.prefix, system=role.system,
                       max_new_tokens=budget)
        if self.grammar is None or self.grammar(joint) is None:
            raise ValueError(f"centralized comparator: the grammar gives no skeleton for the joint role {role.name!r}")
        backend = self._centralized_comparator_backend(policy_agent)
        rng_kwargs = {"agent_idx": teacher} if getattr(self, "_comparator_rng_streams", None) is not None else {}
        with self._comparator_rng(policy_agent, **rng_kwargs):
            gens = backend.generate([joint], int(num_candidates), self.sampling())[0]
        self.totals["messages"] += len(gens)
        self.totals["tokens_generated"] += sum(len(g.token_ids) for g in gens)
        joint_texts = [joint.prefix + g.text for g in gens]
        splits = [list(adapter.parse_completion(t, batch_item, n)) for t in joint_texts]
        outs = []
        for a, rp in enumerate(role_prompts):
            tok = self.tokenizers[a]
            skeleton = self.grammar(rp)
            texts, ids, masks, valid = [], [], [], []
            for split in splits:
                text = str(split[a])
                encoded = _project(tok, skeleton, text)
                texts.append(text)
                valid.append(encoded is not None)
                ids.append(torch.tensor(encoded[0] if encoded else [], dtype=torch.long))
                masks.append(list(encoded[1]) if encoded else [])
            prompt_ids = encode_prompt(tok, rp, self.backend.use_chat_template)
            outs.append({"prompts": [rp.text], "batch_items": [batch_item],
                         "prompt_input_ids": torch.tensor([prompt_ids], dtype=torch.long),
                         "prompt_attention_mask": torch.ones((1, len(prompt_ids)), dtype=torch.long),
                         "completions": [texts], "completion_input_ids": [ids],
                         "completion_attention_mask": [[torch.ones(len(i), dtype=torch.long) for i in ids]],
                         "completion_loss_masks": [masks], "completion_valid": [valid],
                         "response_lens": [len(i) for i in ids], "reference_kls": [],
                         "joint_completions": [joint_texts]})
        return outs

    def _centralized_comparator_backend(self, policy_agent: Any) -> Any:
        """The generation backend of the central teacher: ``policy_agent`` plays the joint role (agent 0's tokenizer)."""
        from c3_plugin.generation import HFBackend

        return HFBackend(lambda _a: policy_agent, self.tokenizers, use_chat_template=self.backend.use_chat_template,
                         max_batch=self.backend.max_batch, grammar=self.grammar, json_stop=self.backend.json_stop)

    # ----- replay records -----------------------------------------------------------------------
    def _preference_pair_to_record(self, pair: PreferencePair) -> dict[str, Any]:
        """CoMLRL's text record plus ``"joint": false`` and per agent the exact prompt ids and winner/loser ids and masks."""
        record = MADPOIterTrainer._preference_pair_to_record(pair)
        record["joint"] = RECORD_KIND
        record["agent_tokens"] = [{"prompt_ids": t.prompt_input_ids.tolist(), "winner_ids": t.winner_completion_ids.tolist(),
                                   "winner_mask": t.winner_loss_mask.tolist(), "loser_ids": t.loser_completion_ids.tolist(),
                                   "loser_mask": t.loser_loss_mask.tolist()} for t in pair.agent_tensors]
        return record

    def _preference_pair_from_record(self, record: dict[str, Any]) -> PreferencePair:
        """The pair of a record written by :meth:`_preference_pair_to_record`; other kinds are rejected."""
        kind = record.get("joint", None)
        if kind is not RECORD_KIND:
            what = "a joint-actor record (\"joint\": true)" if kind is True else "a record without token ids (CoMLRL's text-only replay)"
            raise ValueError(f"preference replay: this decentralized trainer reads only its own records (\"joint\": false, "
                             f"exact ids and masks per agent), got {what}; give each trainer kind its own replay dir")
        tokens = record.get("agent_tokens")
        if not isinstance(tokens, list) or len(tokens) != self.num_agents:
            raise ValueError(f"preference replay record has {len(tokens) if isinstance(tokens, list) else 'no'} agent token "
                             f"entries; the trainer has {self.num_agents} agents")
        tensors = []
        for a, t in enumerate(tokens):
            parts = {k: torch.tensor(t[k], dtype=torch.long) for k in ("prompt_ids", "winner_ids", "winner_mask", "loser_ids", "loser_mask")}
            if parts["winner_ids"].numel() != parts["winner_mask"].numel() or parts["loser_ids"].numel() != parts["loser_mask"].numel():
                raise ValueError(f"preference replay record, agent {a}: ids and loss mask lengths differ")
            tensors.append(MaskedPreferenceTensors(prompt_input_ids=parts["prompt_ids"], winner_completion_ids=parts["winner_ids"],
                                                   loser_completion_ids=parts["loser_ids"], winner_loss_mask=parts["winner_mask"],
                                                   loser_loss_mask=parts["loser_mask"]))
        text_pair = PreferencePair(prompts=list(record["prompts"]), winner_completions=list(record["winner_completions"]),
                                   loser_completions=list(record["loser_completions"]), agent_tensors=tensors,
                                   winner_reward=float(record["winner_reward"]), loser_reward=float(record["loser_reward"]),
                                   candidate_reward_mean=float(record["candidate_reward_mean"]),
                                   raw_rewards=[float(v) for v in record.get("raw_rewards") or []],
                                   target_raw_reward=_maybe_float(record.get("target_raw_reward")),
                                   comparator_raw_reward=_maybe_float(record.get("comparator_raw_reward")))
        return text_pair

    def _resolve_output_dir(self, directory: str, *, cache_attribute: str, config_attribute: str | None = None) -> str:
        """Replay shards, reward distributions and policy checkpoints live in the run directory unless configured."""
        configured = getattr(self.args, config_attribute, None) if config_attribute else None
        if not configured and not getattr(self, cache_attribute, None) and self.run_dir is not None:
            path = self.run_dir / directory
            path.mkdir(parents=True, exist_ok=True)
            setattr(self, cache_attribute, str(path))
        return super()._resolve_output_dir(directory, cache_attribute=cache_attribute, config_attribute=config_attribute)

    # ----- logging and the run ------------------------------------------------------------------
    def _log_iteration_replay(self, iteration_idx: int, *, train_pairs: Sequence[PreferencePair], current_pair_count: int,
                              train_pair_count: int) -> None:
        """``iter/*`` through :meth:`log_metrics` (distribution JSON written beside the replay first)."""
        self._iterative_pairs_trained += int(train_pair_count)
        self._iterations_run += 1
        distribution = self._log_reward_distribution_enabled()
        if distribution:
            self._write_iteration_reward_distribution(iteration_idx, train_pairs)
        shards = getattr(self, "_preference_replay_shards_state", [])
        metrics: dict[str, Any] = {"iter/current_iteration": float(iteration_idx + 1),
                                   "iter/current_preference_pairs": float(current_pair_count),
                                   "iter/total_preference_pairs": float(sum(int(s.num_pairs) for s in shards)),
                                   "iter/train_preference_pairs": float(train_pair_count), "env_step": float(self.env_step)}
        if distribution:
            metrics.update(self._iteration_reward_distribution_metrics(iteration_idx))
            metrics.update(self._selected_reward_distribution_metrics(iteration_idx, train_pairs))
        self.log_metrics(metrics)

    def train(self, *args: Any, **kwargs: Any) -> Any:
        self._iterative_pairs_trained = 0
        self._iterations_run = 0
        out = super().train(*args, **kwargs)
        if self._iterations_run and not self._iterative_pairs_trained:
            raise RuntimeError(all_tied_message(self.algorithm_name, self).replace(
                "on all", f"in all {self._iterations_run} refreshes, on all"))
        return out


def _project(tokenizer: Any, skeleton: Any, text: str) -> tuple[list[int], list[int]] | None:
    """Exact ids and mask of a role action text under ``skeleton``, or None when the text is not
    exactly ``skeleton.render(values)`` for values the role grammar can produce."""
    import json

    from c3_plugin.structured import encode_values

    try:
        data = json.loads(text)
        entries = data["assignments"]
        if [(e["day"], e["field"]) for e in entries] != [tuple(s) for s in skeleton.slots]:
            return None
        values = [e["value"] for e in entries]
        if not all(isinstance(v, str) for v in values):
            return None
        rendered = json.dumps({"assignments": [{"day": d, "field": f, "value": v}
                                               for (d, f), v in zip(skeleton.slots, values)]}, ensure_ascii=False)
        if rendered != text:
            return None
        return encode_values(tokenizer, skeleton, values)
    except (ValueError, TypeError, KeyError):
        return None


def _maybe_float(v: Any) -> float | None:
    return None if v is None else float(v)


# ----------------------------------------------------------------------------- the trainers
class WorkflowMADPOTrainer(PreferenceBridge, MADPOTrainer):
    """MADPO on a workflow's parallel roles."""

    default_config_cls = WorkflowMADPOConfig
    algorithm_name = "MADPO"


class WorkflowMARLHFTrainer(MARLHFBridge, MARLHFTrainer):
    """MARLHF on a workflow's parallel roles (online stage: CoMLRL's MAGRPO)."""

    default_config_cls = WorkflowMARLHFConfig
    algorithm_name = "MARLHF"


class WorkflowMADPOIterTrainer(IterativeBridge, PreferenceBridge, MADPOIterTrainer):
    """Iterative MADPO on a workflow's parallel roles."""

    default_config_cls = WorkflowMADPOIterConfig
    algorithm_name = "MADPOIter"


class WorkflowMARLHFIterTrainer(IterativeBridge, MARLHFBridge, MARLHFIterTrainer):
    """Iterative MARLHF on a workflow's parallel roles."""

    default_config_cls = WorkflowMARLHFIterConfig
    algorithm_name = "MARLHFIter"


__all__ = ["BackboneRewardModel", "MaskedPreferenceTensors", "PreferenceFields", "WorkflowMADPOConfig", "WorkflowMADPOIterConfig",
           "WorkflowMADPOIterTrainer", "WorkflowMADPOTrainer", "WorkflowMARLHFConfig", "WorkflowMARLHFIterConfig",
           "WorkflowMARLHFIterTrainer", "WorkflowMARLHFTrainer", "dropout_fields", "masked_sequence_log_prob"]
