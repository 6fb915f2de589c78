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
in the agents' compute dtype (:mod:`c3_plugin.precision`).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from ..rollout import Rollout
from ..trace import path_to
from .base import WorkflowConfig, WorkflowTrainer
from ..precision import keep_fp32_masters
from .update import PolicySample, trained_tokens


@dataclass
class MAPPOConfig(WorkflowConfig):
    """MAPPO's fields."""

    plan: str = "independent 8"  # B full runs per instance, as MAGRPO
    gae_lambda: float = 0.95  # GAE lambda over decision points
    gamma: float = 1.0  # discount between decision points
    critic_model: str | None = None  # backbone for the critic (None: a copy of agent 0's model)
    critic_learning_rate: float = 1e-5  # critic AdamW learning rate
    critic_epochs: int = 1  # critic passes per rollout batch
    critic_warmup_updates: int = 1  # rollout batches that train only the critic
    critic_max_tokens: int = 1024  # the state is left-truncated to this many tokens (an encoder keeps its leading special token)
    critic_pooling: str = "auto"  # where the value is read: "last" token (decoders), "first" token (encoders' [CLS]); "auto" picks by model type
    advantage_scaling: str = "batch_zscore"  # the usual PPO advantage normalisation (standardised over the batch)
    advantage_per_token: bool = False  # divide each message's advantage, after scaling, by its trained token count (the paper's MAPPO)

    def __post_init__(self) -> None:
        super().__post_init__()
        from ..plan import parse_plan

        if parse_plan(self.plan).kind != "independent":
            raise ValueError(f"MAPPO runs independent full runs; plan '{self.plan}' is not 'independent B'")
        if not 0.0 <= self.gae_lambda <= 1.0 or not 0.0 < self.gamma <= 1.0:
            raise ValueError("gae_lambda must be in [0, 1] and gamma in (0, 1]")
        if self.critic_pooling not in POOLINGS:
            raise ValueError(f"critic_pooling must be one of {POOLINGS}, got {self.critic_pooling!r}")


POOLINGS = ("auto", "last", "first")


def default_pooling(backbone: torch.nn.Module) -> str:
    """``"first"`` for an encoder (a known encoder type, or a type with a masked-LM head and no causal-LM
    head), else ``"last"``."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES

    kind = getattr(backbone.config, "model_type", "")
    masked_only = kind in MODEL_FOR_MASKED_LM_MAPPING_NAMES and kind not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    return "first" if kind in ENCODERS or masked_only else "last"


ENCODERS = ("bert", "roberta", "xlm-roberta", "camembert", "electra", "modernbert", "deberta", "deberta-v2", "distilbert")


class ValueCritic(torch.nn.Module):
    """A scalar value head on one token's hidden state of a transformer backbone: the last token
    (``pooling="last"``, decoders) or the first (``"first"``, an encoder's ``[CLS]``). Inputs are
    left-padded; positions count from each row's first real token."""

    def __init__(self, backbone: torch.nn.Module, pooling: str = "last"):
        super().__init__()
        if pooling not in ("last", "first"):
            raise ValueError(f"pooling must be 'last' or 'first', got {pooling!r}")
        self.backbone = getattr(backbone, "base_model", backbone)
        self.pooling = pooling
        hidden = self.backbone.config.hidden_size
        self.head = torch.nn.Linear(hidden, 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        h = self.backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).last_hidden_state
        width = attention_mask.shape[1]
        at = (width - attention_mask.sum(-1)) if self.pooling == "first" else torch.full_like(attention_mask[:, 0], width - 1)
        return self.head(h[torch.arange(h.shape[0], device=h.device), at].float()).squeeze(-1)


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
        self.critic_tokenizer = self.tokenizers[0]
        if self.args.critic_model:  # any transformers encoder or decoder, e.g. a small encoder as in the paper
            from transformers import AutoModel, AutoTokenizer

            backbone = AutoModel.from_pretrained(self.args.critic_model)
            self.critic_tokenizer = AutoTokenizer.from_pretrained(self.args.critic_model)
        else:
            if self.zero3:
                raise ValueError("MAPPO's critic copies agent 0's backbone, whose parameters ZeRO-3 has already sharded; "
                                 "with deepspeed.zero_stage: 3 name a separate backbone in mappo.critic_model (or use stage 2)")
            base = self.agents[0]
            backbone = copy.deepcopy(base.get_base_model() if hasattr(base, "get_base_model") else base)
        for p in backbone.parameters():
            p.requires_grad_(True)
        pooling = default_pooling(backbone) if self.args.critic_pooling == "auto" else self.args.critic_pooling
        critic = ValueCritic(backbone, pooling).to(self.device)
        keep_fp32_masters(critic, compute_dtype=next((d for d in self.compute_dtypes if d is not None), None))
        self.critics = [critic]
        self.critic_optimizer = torch.optim.AdamW(self.critics[0].parameters(), lr=self.args.critic_learning_rate)
        self.critic_engine = None
        if self.engines is not None:  # data parallelism: the critic's update under DeepSpeed as well
            from ..distributed import make_engine

            self.critic_engine = make_engine(critic, list(critic.parameters()), self.args.critic_learning_rate, self.deepspeed,
                                             self.args.max_grad_norm, {"weight_decay": 0.01})
            self.critic_optimizer = None
        self._critic_batch: tuple[list[list[int]], np.ndarray] | None = None

    def critic_states(self, rollout: Rollout) -> list[list[int]]:
        """Token ids of the centralized state at every decision entry, runs-major ``[runs x K]``."""
        tok = self.critic_tokenizer
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
        """The state's token ids, left-truncated to ``critic_max_tokens``; an encoder's (``first`` pooling)
        with its special tokens, the leading one kept through truncation."""
        limit = int(self.args.critic_max_tokens)
        if self.critics[0].pooling == "first":
            ids = self.critic_tokenizer(text, add_special_tokens=True)["input_ids"]
            return ids[:1] + ids[1:][-(limit - 1):] if len(ids) > limit else ids
        ids = self.critic_tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids[-limit:] or [self._critic_pad()]

    @torch.no_grad()
    def values(self, states: Sequence[Sequence[int]]) -> np.ndarray:
        critic = self.critics[0]
        critic.eval()
        out = [self._critic_forward(states[s:s + self.args.micro_batch_size]).float().cpu()
               for s in range(0, len(states), self.args.micro_batch_size)]
        return torch.cat(out).numpy() if out else np.zeros(0)

    def _critic_forward(self, states: Sequence[Sequence[int]]) -> torch.Tensor:
        width = max(len(s) for s in states)
        ids = torch.full((len(states), width), self._critic_pad(), dtype=torch.long)
        mask = torch.zeros_like(ids)
        for r, s in enumerate(states):
            ids[r, width - len(s):] = torch.as_tensor(list(s))
            mask[r, width - len(s):] = 1
        return self.critics[0](ids.to(self.device), mask.to(self.device))

    def _critic_pad(self) -> int:
        tok = self.critic_tokenizer
        return tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

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
        return {**engines, "critic": self.critic_engine} if getattr(self, "critic_engine", None) is not None else engines

    def update_critic(self) -> dict[str, float]:
        """Regress the critic on the GAE returns: one step per ``critic_epochs`` pass, mean squared error over
        every state of the batch (of every rank under data parallelism, where a rank without states joins
        with zero-weight passes)."""
        from ..distributed import all_sum

        states, returns = self._critic_batch or ([], np.zeros(0))
        critic, engine = self.critics[0], self.critic_engine
        critic.train()
        world = self.dist.world if engine is not None else 1
        mb = self.args.micro_batch_size
        total = int(all_sum([len(states)])[0]) if world > 1 else len(states)
        passes = int(all_sum([math.ceil(len(states) / mb)], op="max")[0]) if world > 1 else math.ceil(len(states) / mb)
        losses = []
        for _ in range(int(self.args.critic_epochs)):
            order = self.rng.permutation(len(states))
            if engine is None:
                self.critic_optimizer.zero_grad(set_to_none=True)
            for m in range(passes):
                idx = order[m * mb:(m + 1) * mb]
                batch, target = ([states[i] for i in idx], returns[idx]) if len(idx) else ([[self._critic_pad()]], np.zeros(1))
                pred = self._critic_forward(batch)
                target = torch.as_tensor(target, dtype=pred.dtype, device=pred.device)
                loss = torch.nn.functional.mse_loss(pred, target, reduction="sum") / max(total, 1) * float(len(idx) > 0)
                if engine is None:
                    loss.backward()
                else:  # DeepSpeed averages over the ranks: scale back to the global sum
                    engine.set_gradient_accumulation_boundary(m == passes - 1)
                    engine.backward(loss * world)
                if len(idx):
                    losses.append(float(loss.detach()) * max(total, 1) / len(idx))
            if engine is None:
                torch.nn.utils.clip_grad_norm_(critic.parameters(), self.args.max_grad_norm or float("inf"))
                self.critic_optimizer.step()
            else:
                engine.step()
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
