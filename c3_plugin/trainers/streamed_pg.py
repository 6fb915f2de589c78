"""The streamed policy-gradient update of the trainers that keep CoMLRL's MAGRPO online stage: the
centralized joint actor and MARLHF's online stage on its learned reward.

:class:`StreamedPolicyGradient` (mix in before the CoMLRL trainer) gives CoMLRL's update (shuffle the
samples, ``train_batch_size`` of them per optimizer step, the mean over samples and over their
completions of ``-A log pi(y)``) with one sequence's graph alive at a time: each completion's term is
back-propagated before the next is built. The advantages are CoMLRL's (returns less a reference KL when
enabled, its group baseline, an optional z-score); the log-likelihood of a completion is
``_sequence_log_prob`` (:func:`train_mode_log_prob`): the value tokens only (its loss mask), on the unwrapped module in
train mode.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch
from comlrl.utils.distributed import unwrap_model

from c3_plugin.core.loss import masked_sequence_log_prob


def train_mode_log_prob(model: Any, prompt_ids: torch.Tensor, completion_ids: torch.Tensor,
                        loss_mask: Sequence[int] | torch.Tensor | None,
                        aggregation: str = "sequence_mean") -> torch.Tensor:
    """A completion's masked log-likelihood under ``model`` (DDP/DeepSpeed unwrapped, dropout as in training):
    every completion token conditioned on the prompt and the earlier completion tokens; only the tokens the
    policy chose (mask 1) enter."""
    module = unwrap_model(model)
    module.train()
    return masked_sequence_log_prob(module, prompt_ids, completion_ids, loss_mask, aggregation)


class StreamedPolicyGradient:
    """CoMLRL's MAGRPO update, streamed one completion at a time (see the module docstring)."""

    def _pack_completions_for_buffer(self, completions_data: Mapping[str, Any]) -> dict[str, Any]:
        packed = super()._pack_completions_for_buffer(completions_data)
        masks = completions_data.get("completion_loss_masks")
        if masks is None:
            raise ValueError("completions carry no loss masks: generation must go through the WorkflowBridge")
        packed["completion_loss_masks"] = [[list(m) for m in masks[0]]]
        return packed

    def _pg_advantages(self, completions_data: Mapping[str, Any], returns: Sequence[float]) -> torch.Tensor:
        """CoMLRL's advantages: returns (minus a reference KL when enabled), group baseline, optional z-score."""
        r = torch.tensor(list(returns), dtype=torch.float32)
        adv = self._compute_advantages(self._apply_reference_kl_to_returns(r, completions_data))
        if self.args.advantage_normalization and adv.numel() > 1:
            adv = (adv - adv.mean()) / adv.std(unbiased=False).clamp(min=1e-6)
        return adv

    def _pg_log_probs(self, agent_idx: int, completions_data: Mapping[str, Any]) -> list[Callable[[], torch.Tensor]]:
        """Per completion, a closure building its masked log-likelihood (called when its term is back-propagated)."""
        masks = completions_data.get("completion_loss_masks")
        if masks is None:
            raise ValueError("completions carry no loss masks: generation must go through the WorkflowBridge")
        prompt = completions_data["prompt_input_ids"][0]
        return [lambda s=s, m=m: self._sequence_log_prob(agent_idx, prompt, s, m)
                for s, m in zip(completions_data["completion_input_ids"][0], masks[0])]

    def _pg_terms(self, agent_idx: int, completions_data: Mapping[str, Any],
                  returns: Sequence[float]) -> Iterator[torch.Tensor]:
        """Each completion's policy-gradient loss ``-A_j log pi(y_j) / n``, one graph at a time."""
        log_probs = self._pg_log_probs(agent_idx, completions_data)
        adv = self._pg_advantages(completions_data, returns)
        n = min(len(log_probs), adv.numel())
        for j in range(n):
            yield -log_probs[j]() * float(adv[j]) / n

    def _compute_loss_with_gradients(self, agent: Any, completions_data: Mapping[str, Any],
                                     returns: Sequence[float]) -> torch.Tensor:
        """The whole sample's loss at once (CoMLRL's contract); training uses the streamed
        :meth:`_update_from_samples`."""
        agent_idx = next(i for i, a in enumerate(self.agents) if a is agent)
        terms = list(self._pg_terms(agent_idx, completions_data, returns))
        if not terms:
            return torch.zeros((), device=next(unwrap_model(agent).parameters()).device, requires_grad=True)
        loss = torch.stack(terms).sum()
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite policy loss for agent {agent_idx}: {float(loss)}")
        return loss

    def _update_from_samples(self, agent_idx: int, samples: list[Any]) -> None:
        if not samples:
            return
        random.shuffle(samples)
        size = int(getattr(self.args, "train_batch_size", len(samples)) or 1)
        opt = self.optimizers[agent_idx]
        for start in range(0, len(samples), size):
            batch = samples[start:start + size]
            opt.zero_grad(set_to_none=True)
            loss_sum = 0.0
            for sample in batch:
                for term in self._pg_terms(agent_idx, sample.completions_data, sample.returns):
                    loss = term / len(batch)
                    if not torch.isfinite(loss):
                        raise FloatingPointError(f"non-finite policy loss for agent {agent_idx}: {float(loss)}")
                    if loss.requires_grad:
                        loss.backward()
                    loss_sum += float(loss.detach())
            opt.step()
            self._after_policy_step(loss_sum)

    def _after_policy_step(self, loss: float) -> None:
        """Called after each optimizer step with the step's summed loss (a trainer's counters and logs)."""
