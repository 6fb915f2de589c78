"""One optimizer step accumulated over micro-batch passes, the same calls on one process and under DeepSpeed.

An update loop (:func:`c3_plugin.trainers.update.ppo_update`, the critic's
:meth:`~c3_plugin.trainers.critic.OnlineCritic.fit`) runs every step as ``zero_grad(passes)``, then one
``backward(loss, weight)`` per pass, then ``step()``, which returns the gradient norm, and never asks
which engine it runs on:

* :class:`PlainStep`: a torch optimizer; ``step`` clips the gradients to ``max_grad_norm`` (0: no clipping,
  the norm is still measured), sets the learning-rate schedule's rate, steps and frees the gradients;
* :class:`DeepSpeedStep`: a DeepSpeed engine (:func:`c3_plugin.scale.distributed.make_engine`), which
  averages the gradients over the ranks, so ``backward`` scales the loss back to the ranks' sum and marks the
  last pass of the step as its accumulation boundary; ``step`` clips by the global norm (the engine's
  ``gradient_clipping``) and zeroes the gradients.

:func:`optimizer_step` picks one. ``check_finite`` raises on a non-finite gradient norm (the policies'
update; the critics step without the check, as before).
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

import torch

from c3_plugin.scale.distributed import context


class OptimizerStep(Protocol):
    module: Any  # what the forward passes run on (the model, or the DeepSpeed engine wrapping it)
    world: int  # ranks whose gradients one step combines (1: one process)

    def zero_grad(self, passes: int = 1) -> None:
        """Begin a step of ``passes`` backward passes."""

    def backward(self, loss: torch.Tensor, weight: float = 1.0) -> None:
        """Accumulate the gradient of ``loss * weight`` (``weight``: this pass's share of the step)."""

    def step(self) -> float:
        """Apply the accumulated gradient; the gradient norm (before clipping)."""

    @property
    def lr(self) -> float:
        """The learning rate of the optimizer's first parameter group."""


def _finite(norm: float) -> float:
    if not torch.isfinite(torch.as_tensor(norm)):
        raise FloatingPointError(f"non-finite gradient norm ({float(norm)}); lower the learning rate or check the "
                                 "inputs")
    return norm


class PlainStep:
    """A torch optimizer's step over ``params`` (see the module docstring)."""

    world = 1

    def __init__(self, model: Any, optimizer: torch.optim.Optimizer, params: Sequence[torch.nn.Parameter],
                 max_grad_norm: float, schedule: Any = None, check_finite: bool = True):
        self.module, self.optimizer, self.params = model, optimizer, list(params)
        self.max_grad_norm, self.schedule, self.check_finite = max_grad_norm, schedule, check_finite

    def zero_grad(self, passes: int = 1) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def backward(self, loss: torch.Tensor, weight: float = 1.0) -> None:
        (loss * weight).backward()

    def step(self) -> float:
        clip = self.max_grad_norm
        norm = torch.nn.utils.clip_grad_norm_(self.params, clip) if clip else _norm(self.params)
        norm = _finite(float(norm)) if self.check_finite else float(norm)
        if self.schedule is not None:
            self.schedule.apply(self.optimizer)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)  # free the gradients before the next model's update
        if self.schedule is not None:
            self.schedule.advance()
        return norm

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])


class DeepSpeedStep:
    """A DeepSpeed engine's step (see the module docstring); ``world``: the ranks it averages over."""

    def __init__(self, engine: Any, world: int, schedule: Any = None, check_finite: bool = True):
        self.module, self.engine, self.world = engine, engine, int(world)
        self.schedule, self.check_finite = schedule, check_finite
        self.passes = self.done = 0

    def zero_grad(self, passes: int = 1) -> None:
        self.passes, self.done = int(passes), 0  # the engine zeroes the gradients in its step

    def backward(self, loss: torch.Tensor, weight: float = 1.0) -> None:
        self.done += 1
        self.engine.set_gradient_accumulation_boundary(self.done >= self.passes)
        self.engine.backward(loss * (weight * self.world))  # the engine averages over the ranks: back to their sum

    def step(self) -> float:
        if self.schedule is not None:
            self.schedule.apply(self.engine.optimizer)
        self.engine.step()
        norm = float(self.engine.get_global_grad_norm() or 0.0)
        norm = _finite(norm) if self.check_finite else norm
        if self.schedule is not None:
            self.schedule.advance()
        return norm

    @property
    def lr(self) -> float:
        return float(self.engine.optimizer.param_groups[0]["lr"])


def optimizer_step(model: Any, optimizer: torch.optim.Optimizer | None, engine: Any,
                   params: Sequence[torch.nn.Parameter], max_grad_norm: float, schedule: Any = None,
                   check_finite: bool = True) -> OptimizerStep:
    """The step of a DeepSpeed ``engine`` when there is one, else ``optimizer``'s over ``params`` of ``model``."""
    if engine is not None:
        return DeepSpeedStep(engine, context().world, schedule, check_finite)
    return PlainStep(model, optimizer, params, max_grad_norm, schedule, check_finite)


def _norm(params: Sequence[torch.nn.Parameter]) -> torch.Tensor:
    grads = [p.grad.detach().norm() for p in params if p.grad is not None]
    return torch.norm(torch.stack(grads)) if grads else torch.tensor(0.0)
