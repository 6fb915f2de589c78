"""A learned critic trained online beside the policies: one implementation for MAPPO's centralized
state-value critic ``V(state)`` and C3's decision-value critic ``Q_hat(h_u, a)`` (``credit: value_assisted``).

:class:`ValueCritic` is a scalar head on one token's hidden state of a transformer backbone: a copy of
agent 0's model by default, or any model named by the config (its own tokenizer), such as the small
encoder the paper used (mmBERT-base). A decoder's value is read at the input's last token, an
encoder's at its first (``[CLS]``). :class:`OnlineCritic` holds the head with its tokenizer, its
encoding (left-truncated to a token cap; an encoder keeps its leading special token), its fp32 master
weights under the agents' compute dtype (:mod:`c3_plugin.scale.precision`) and its optimizer: AdamW on one
process, a DeepSpeed engine under data parallelism. A trainer exposes the module as ``critics[0]`` and
the optimizer as ``critic_optimizer``, the names CoMLRL's checkpoints save and restore.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Sequence

import numpy as np
import torch

from c3_plugin.scale.distributed import all_sum, make_engine
from c3_plugin.scale.optimizers import make_adamw
from c3_plugin.scale.policies import load_pretrained, load_tokenizer_for
from c3_plugin.scale.precision import check_trainable_fp32, keep_fp32_masters
from c3_plugin.trainers.optimizer_step import optimizer_step

POOLINGS = ("auto", "last", "first")
ENCODERS = ("bert", "roberta", "xlm-roberta", "camembert", "electra", "modernbert", "deberta", "deberta-v2",
            "distilbert")


def default_pooling(backbone: torch.nn.Module) -> str:
    """``"first"`` for an encoder (a known encoder type, or a type with a masked-LM head and no causal-LM
    head), else ``"last"``."""
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    kind = getattr(backbone.config, "model_type", "")
    masked_only = kind in MODEL_FOR_MASKED_LM_MAPPING_NAMES and kind not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    return "first" if kind in ENCODERS or masked_only else "last"


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
        h = self.backbone(input_ids=input_ids, attention_mask=attention_mask,
                          position_ids=position_ids).last_hidden_state
        width = attention_mask.shape[1]
        at = ((width - attention_mask.sum(-1)) if self.pooling == "first"
              else torch.full_like(attention_mask[:, 0], width - 1))
        return self.head(h[torch.arange(h.shape[0], device=h.device), at].float()).squeeze(-1)


class OnlineCritic:
    """A :class:`ValueCritic` built for a workflow trainer, with its tokenizer, encoding and optimizer.

    ``model``: a backbone name (None: a copy of agent 0's model, refused under ZeRO-3, whose shards the
    copy would not hold); ``field``: the config key that names it, for the error message."""

    def __init__(self, trainer: Any, model: str | None, learning_rate: float, max_tokens: int, pooling: str = "auto",
                 field: str = "critic_model"):
        self.tokenizer = trainer.tokenizers[0]
        if model:  # any transformers encoder or decoder, e.g. a small encoder as in the paper
            from transformers import AutoModel

            backbone = load_pretrained(AutoModel, model, field)
            self.tokenizer = load_tokenizer_for(model, field)
        else:
            if trainer.zero3:
                raise ValueError(f"{field}: None copies agent 0's backbone, whose parameters ZeRO-3 has already "
                                 "sharded; with deepspeed.zero_stage: 3 name a separate backbone in "
                                 f"{field} (or use stage 2)")
            base = trainer.agents[0]
            backbone = copy.deepcopy(base.get_base_model() if hasattr(base, "get_base_model") else base)
        for p in backbone.parameters():
            p.requires_grad_(True)
        pooling = default_pooling(backbone) if pooling == "auto" else pooling
        self.module = ValueCritic(backbone, pooling).to(trainer.device)
        keep_fp32_masters(self.module, compute_dtype=next((d for d in trainer.compute_dtypes if d is not None), None))
        check_trainable_fp32(self.module.parameters(), field)
        self.max_tokens = int(max_tokens)
        self.dist = trainer.dist
        self.optimizer: torch.optim.Optimizer | None = make_adamw(self.module.parameters(), learning_rate)
        self.engine = None
        if trainer.engines is not None:  # data parallelism: the critic's update under DeepSpeed as well
            self.engine = make_engine(self.module, list(self.module.parameters()), learning_rate, trainer.deepspeed,
                                      trainer.args.max_grad_norm, {"weight_decay": 0.01})
            self.optimizer = None

    @property
    def pad_id(self) -> int:
        tok = self.tokenizer
        return tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, left-truncated to ``max_tokens``; an encoder's (``first`` pooling) with its
        special tokens, the leading one kept through truncation."""
        limit = self.max_tokens
        if self.module.pooling == "first":
            ids = self.tokenizer(text, add_special_tokens=True)["input_ids"]
            return ids[:1] + ids[1:][-(limit - 1):] if len(ids) > limit else ids
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids[-limit:] or [self.pad_id]

    def forward(self, states: Sequence[Sequence[int]]) -> torch.Tensor:
        """Values of a batch of token-id lists (left-padded into one forward pass)."""
        width = max(len(s) for s in states)
        ids = torch.full((len(states), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for r, s in enumerate(states):
            ids[r, width - len(s):] = torch.as_tensor(list(s))
            mask[r, width - len(s):] = 1
        device = next(self.module.parameters()).device
        return self.module(ids.to(device), mask.to(device))

    @torch.no_grad()
    def predict(self, states: Sequence[Sequence[int]], micro_batch_size: int) -> np.ndarray:
        self.module.eval()
        out = [self.forward(states[s:s + micro_batch_size]).float().cpu()
               for s in range(0, len(states), micro_batch_size)]
        return torch.cat(out).numpy() if out else np.zeros(0)

    def fit(self, states: Sequence[Sequence[int]], targets: np.ndarray, epochs: int, rng: np.random.Generator,
            micro_batch_size: int, max_grad_norm: float) -> list[float]:
        """Regress on ``targets``: one optimizer step per pass (``epochs`` passes), mean squared error over
        every state of the batch (of every rank under data parallelism, where a rank without states joins
        with zero-weight passes). Returns the loss of each micro-batch with states, per state."""
        step = optimizer_step(self.module, self.optimizer, self.engine, list(self.module.parameters()), max_grad_norm,
                              check_finite=False)
        self.module.train()
        mb = int(micro_batch_size)
        total, passes = len(states), math.ceil(len(states) / mb)
        if step.world > 1:  # the states of every rank, and the passes of the rank with the most
            total, passes = int(all_sum([total])[0]), int(all_sum([passes], op="max")[0])
        losses = []
        for _ in range(int(epochs)):
            order = rng.permutation(len(states))
            step.zero_grad(passes)
            for m in range(passes):
                idx = order[m * mb:(m + 1) * mb]
                batch, target = ([states[i] for i in idx], targets[idx]) if len(idx) else ([[self.pad_id]], np.zeros(1))
                pred = self.forward(batch)
                target = torch.as_tensor(target, dtype=pred.dtype, device=pred.device)
                loss = torch.nn.functional.mse_loss(pred, target, reduction="sum") / max(total, 1) * float(len(idx) > 0)
                step.backward(loss)
                if len(idx):
                    losses.append(float(loss.detach()) * max(total, 1) / len(idx))
            step.step()
        return losses
