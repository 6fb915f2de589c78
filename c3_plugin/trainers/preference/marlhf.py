"""MARLHF on a workflow: task-reward preferences once, a joint reward model fitted on them while the actors
sit on CPU, then CoMLRL's online MAGRPO stage on the fixed reward model with masked, streamed policy gradients."""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from comlrl.trainers.preference.madpo import PreferencePair
from comlrl.trainers.preference.marlhf import MARLHFConfig, MARLHFTrainer

from c3_plugin.core.registry import Capabilities
from c3_plugin.scale.optimizers import make_adamw
from c3_plugin.scale.policies import load_pretrained, load_tokenizer_for
from c3_plugin.scale.precision import keep_fp32_masters
from c3_plugin.trainers.preference.fields import PreferenceFields
from c3_plugin.trainers.preference.reward_model import BackboneRewardModel, backbone_of
from c3_plugin.trainers.preference.shared import PreferenceBridge, move_optimizer_state
from c3_plugin.trainers.streamed_pg import StreamedPolicyGradient


@dataclass
class WorkflowMARLHFConfig(PreferenceFields, MARLHFConfig):
    """MARLHF: task-reward preferences once, a joint reward model fitted on them, then online MAGRPO on it."""

    capabilities = Capabilities(budget="preference", learned_reward=True)  # registry.Capabilities

    num_train_epochs: int = 21  # online MAGRPO epochs over the training prompts
    num_generations: int = 4  # online joint rollouts per prompt
    preference_num_candidates: int = 20  # joint candidates sampled per prompt for the preference set
    preference_pairs_per_sample: int | None = 6  # at most this many non-tied pairs per prompt
    reward_model_device: str | None = None  # reward-model device (None: the actors' device)
    reward_model_name: str | None = None  # reward backbone source (None: a snapshot of agent 0's initial backbone)


class MARLHFBridge(StreamedPolicyGradient, PreferenceBridge):
    """Reward model and MAGRPO online stage of the workflow MARLHF trainers."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._reward_template = None
        if not self.args.reward_model_name:  # the initial backbone, kept on CPU so every refit starts from it
            base = backbone_of(self.agents[0])
            self._reward_template = (copy.deepcopy(base.config),
                                     {k: v.detach().to("cpu", copy=True) for k, v in base.state_dict().items()},
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
            move_optimizer_state(self.optimizers[a], "cpu")
        self._actors_offloaded = True
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def _restore_actors(self) -> None:
        for a, agent in enumerate(self.agents):
            agent.to(self.agent_devices[a])
            move_optimizer_state(self.optimizers[a], self.agent_devices[a])
        self._actors_offloaded = False

    # ----- reward model -------------------------------------------------------------------------
    def _init_reward_model(self) -> None:
        """A fresh :class:`BackboneRewardModel` on CPU: ``reward_model_name`` loaded with ``AutoModel`` (no LM
        head), or the snapshot of agent 0's initial backbone. It moves to ``reward_model_device`` when it is
        fitted (after the actors went to CPU) or first scores."""
        from transformers import AutoModel

        source = self.args.reward_model_name
        if source:
            backbone = load_pretrained(AutoModel, source, "reward_model_name", **self._model_kwargs_from_config())
            tokenizer = load_tokenizer_for(source, "reward_model_name")
        else:
            config, state, dtype = self._reward_template
            backbone = AutoModel.from_config(copy.deepcopy(config), dtype=dtype)
            backbone.load_state_dict(state, strict=True)
            tokenizer = self.tokenizers[0]
        model = BackboneRewardModel(backbone)
        if self.args.reward_freeze_backbone:
            model.backbone.requires_grad_(False)
        keep_fp32_masters(model, compute_dtype=self.compute_dtypes[0])  # fp32 masters, the agents' compute dtype
        self.reward_model = model
        self.reward_tokenizer = tokenizer
        self.reward_optimizer = make_adamw([p for p in model.parameters() if p.requires_grad],
                                           self.args.reward_learning_rate)

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
                    lose = (self._score_reward_texts([self._format_joint_reward_text(p, use_winner=False)
                                                      for p in batch]))
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
                              "train/reward_model_pairs": float(len(preference_pairs)),
                              "env_step": float(self.env_step)})
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

    # ----- online MAGRPO stage: StreamedPolicyGradient ------------------------------------------
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


class WorkflowMARLHFTrainer(MARLHFBridge, MARLHFTrainer):
    """MARLHF on a workflow's parallel roles (online stage: CoMLRL's MAGRPO)."""

    default_config_cls = WorkflowMARLHFConfig
    algorithm_name = "MARLHF"
