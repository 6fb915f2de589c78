"""What the four workflow preference trainers share: construction checks, the masked likelihood hooks,
pairs that keep the generated ids and masks, task-reward collection, streamed joint DPO and its epoch loop."""

from __future__ import annotations

import math
import random
from functools import partial
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
import wandb
from comlrl.trainers.preference.madpo import PreferencePair

from c3_plugin.trainers.bridge import WorkflowBridge, comlrl_constructor
from c3_plugin.trainers.joint.api import default_joint_adapter
from c3_plugin.trainers.preference.likelihood import MaskedPreferenceTensors, dropout_fields


class PreferenceBridge(WorkflowBridge):
    """What the four workflow preference trainers share (mix in before the CoMLRL trainer)."""

    @comlrl_constructor
    def __init__(self, comlrl: dict[str, Any], *, workflow: Any = None, run_dir: str | Path | None = None,
                 lora_adapters: bool = False, grammar: Any = None, plan: Any = None, **kwargs: Any):
        if lora_adapters:
            raise ValueError("shared LoRA adapters (agents.policy=lora) are not supported by the preference trainers; "
                             "use agents.policy=per_agent")
        args = comlrl["args"] = comlrl["args"] or self.default_config_cls()
        n = self._bridge_workflow(workflow, args, comlrl["num_agents"], comlrl["agents"])
        for a in range(n):
            self._agent_step(a)  # one parallel stage, one decision per agent: checked before loading anything
        if getattr(args, "comparator_generation_mode", "decentralized") == "centralized":
            if grammar is None:
                raise ValueError("comparator_generation_mode=centralized needs structured generation (a value-only "
                                 "JSON grammar): central teacher projections are encoded under each actor's skeleton")
            if kwargs.get("centralized_comparator_adapter") is None:
                kwargs["centralized_comparator_adapter"] = default_joint_adapter(None)
            if not hasattr(kwargs["centralized_comparator_adapter"], "workflow"):
                raise ValueError("comparator_generation_mode=centralized needs a joint adapter with a one-role joint "
                                 "workflow (e.g. domains.travel.TravelJointAdapter)")
        if comlrl["formatters"] is None:  # the role contexts: what the reward model reads as each agent's prompt
            comlrl["formatters"] = [partial(_role_context, self, a) for a in range(n)]
        super().__init__(**{**comlrl, "num_agents": n}, **kwargs)
        self._bridge_setup(args, grammar=grammar, run_dir=run_dir)
        bad = {f"agent {i} {k}": v for i, m in enumerate(self.agents) for k, v in dropout_fields(m).items()}
        if bad:
            raise ValueError("the streamed joint-DPO / policy gradient needs zero dropout (one graph is rebuilt per "
                             f"pair, so dropout would draw different masks than the detached deltas); found {bad}")

    # ----- likelihood (WorkflowBridge._sequence_log_prob) ---------------------------------------
    def _agent_logprob_delta(self, agent_idx: int, pair: PreferencePair) -> torch.Tensor:
        t = pair.agent_tensors[agent_idx]
        if not isinstance(t, MaskedPreferenceTensors):
            raise TypeError("preference pairs of the workflow trainers carry MaskedPreferenceTensors "
                            "(exact ids and masks)")
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

    def _make_pair(self, prompts: Sequence[str], winner_outs: Sequence[Mapping], winner_idx: int,
                   loser_outs: Sequence[Mapping], loser_idx: int, **fields: Any) -> PreferencePair:
        n = self.num_agents
        return PreferencePair(prompts=list(prompts),
                              winner_completions=[str(winner_outs[a]["completions"][0][winner_idx]) for a in range(n)],
                              loser_completions=[str(loser_outs[a]["completions"][0][loser_idx]) for a in range(n)],
                              agent_tensors=[self._pair_tensors(winner_outs[a], winner_idx, loser_outs[a], loser_idx)
                                             for a in range(n)],
                              **fields)

    def _sample_candidates(self, agents: Sequence[Any], batch_item: Mapping[str, Any],
                           num_candidates: int) -> list[dict]:
        return self._run_agent_tasks(lambda a: self._generate_completions(agents[a], [batch_item], agent_idx=a,
                                                                          num_return_sequences=num_candidates,
                                                                          max_new_tokens=self.args.max_new_tokens))

    def _generate_preference_pairs_for_item(self, batch_item: dict, **kwargs: Any) -> list[PreferencePair]:
        """CoMLRL's one-round collection: N joint candidates, task rewards, non-tied pairs by reward gap,
        each pair keeping the generated ids and masks."""
        outs = self._sample_candidates(self.agents, batch_item, int(self.args.preference_num_candidates))
        prompts = [outs[a]["prompts"][0] for a in range(self.num_agents)]
        rewards = self._compute_rewards([prompts[0]], [list(o["completions"][0]) for o in outs],
                                        batch_items=[batch_item])
        mean = float(np.mean(rewards)) if rewards else 0.0
        return [self._make_pair(prompts, outs, w, outs, lo, winner_reward=float(rewards[w]),
                                loser_reward=float(rewards[lo]), candidate_reward_mean=mean)
                for w, lo in self._select_preference_pair_indices(rewards)]

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
            raise FloatingPointError("non-finite preference log-prob delta in a batch of "
                                     f"{len(batch)} pairs: {detached}")
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
            move_optimizer_state(self.optimizers[a], target)
        if active is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()

    def _train_preference_pairs(self, preference_pairs: list[PreferencePair], *, updates_seen: int = 0,
                                desc: str = "MADPO", start_epoch: int = 0, epoch_callback: Any = None) -> int:
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
                self.log_metrics({**metrics, "train/update_step": float(self.update_step),
                                  "env_step": float(self.env_step)})
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
    return (f"{name}: no preference pair: on all {rows} training prompts every sampled joint candidate tied on the "
            f"task reward ({int(trainer.args.preference_num_candidates)} candidates per prompt), so there is nothing "
            "to train on. Sample more or more diverse candidates (preference_num_candidates, temperature, top_p, "
            "max_value_tokens) or check that the task reward separates the sampled actions.")


def move_optimizer_state(opt: torch.optim.Optimizer, device: Any) -> None:
    """Every tensor of ``opt``'s state to ``device`` (beside the actor it updates)."""
    for state in opt.state.values():
        for k, v in state.items():
            if torch.is_tensor(v):
                state[k] = v.to(device)
