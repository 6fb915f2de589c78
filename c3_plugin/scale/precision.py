"""Mixed precision for training: fp32 master weights, half-precision compute.

An Adam step at a learning rate of 1e-6 moves a weight by about 1e-6, far below half the
bfloat16 spacing of typical weights (about 6e-5 near 0.02), so updating bf16 weights in
place rounds most updates away. :func:`keep_fp32_masters` therefore

* upcasts every trainable parameter stored in bf16/fp16 to fp32 in place (the Parameter
  objects stay the same, so optimizers built over them keep working and their state is
  created in fp32 at the first step): these are the master weights;
* leaves frozen weights (a LoRA base, a reference model) in their loaded dtype;
* wraps the forward of the module that computes (for a peft model its base model, so
  ``generate`` is covered too) in ``torch.autocast(compute_dtype)``: matmuls run in bf16,
  gradients flow into the fp32 masters.

The compute dtype is the model's lowest floating precision unless given. fp16 compute is
refused: it needs loss scaling, which these trainers do not do; use bfloat16.
:func:`compute_context` opens one autocast region around a whole ``generate`` call, so
bf16 copies of the weights are cast once per call, not once per decode step.
"""

from __future__ import annotations

import contextlib
import functools
from types import MethodType
from typing import Any, Iterable, Iterator

import torch

HALF = (torch.bfloat16, torch.float16)
_ATTR = "_c3_compute_dtype"


def compute_module(model: torch.nn.Module) -> torch.nn.Module:
    """The module whose forward does the work: a peft model's base model, else ``model``."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def compute_dtype_of(model: torch.nn.Module) -> torch.dtype | None:
    """The autocast dtype installed on ``model`` by :func:`keep_fp32_masters` (None: plain fp32)."""
    return getattr(compute_module(model), _ATTR, None)


def _device_type(model: torch.nn.Module) -> str:
    p = next(model.parameters(), None)
    return p.device.type if p is not None else "cpu"


def _lowest_precision(model: torch.nn.Module) -> torch.dtype | None:
    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    for d in HALF:
        if d in dtypes:
            return d
    return None


def keep_fp32_masters(model: torch.nn.Module, trainable: Iterable[torch.nn.Parameter] | None = None,
                      compute_dtype: torch.dtype | None = None) -> torch.dtype | None:
    """Make ``model`` train on fp32 masters with ``compute_dtype`` autocast; returns the compute dtype.

    ``trainable`` are the parameters an optimizer updates (default: those with ``requires_grad``).
    Idempotent: a model already prepared keeps its compute dtype."""
    inner = compute_module(model)
    if hasattr(inner, _ATTR):
        dtype = getattr(inner, _ATTR)
    else:
        dtype = compute_dtype if compute_dtype is not None else _lowest_precision(model)
        if dtype == torch.float32:
            dtype = None
        if dtype == torch.float16:
            raise ValueError("float16 training needs loss scaling, which these trainers do not do; load the model in "
                             "bfloat16 (agent_model.dtype: bfloat16) or float32")
        if dtype is not None:
            current = vars(inner).get("forward")  # a forward already wrapped per instance (accelerate does this)
            base = current.__func__ if isinstance(current, MethodType) else type(inner).forward
            # bound with MethodType so that a deepcopy (reference models, critics) calls its own weights
            inner.forward = MethodType(_autocast_forward(base, dtype), inner)
        setattr(inner, _ATTR, dtype)
    params = list(trainable) if trainable is not None else [p for p in model.parameters() if p.requires_grad]
    for p in params:
        if p.dtype in HALF:
            p.data = p.data.float()
            if p.grad is not None:
                p.grad = p.grad.float()
    return dtype


def _autocast_forward(forward: Any, dtype: torch.dtype) -> Any:
    @functools.wraps(forward)
    def wrapped(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        with torch.autocast(_device_type(self), dtype=dtype):
            return forward(self, *args, **kwargs)

    return wrapped


@contextlib.contextmanager
def compute_context(model: torch.nn.Module) -> Iterator[None]:
    """One autocast region for ``model``'s compute dtype (no-op for fp32 models)."""
    dtype = compute_dtype_of(model)
    if dtype is None:
        yield
        return
    with torch.autocast(_device_type(model), dtype=dtype):
        yield


def check_trainable_fp32(params: Iterable[torch.nn.Parameter], who: str) -> None:
    """Refuse to build an optimizer over half-precision parameters (their updates would round away)."""
    bad = sorted({str(p.dtype) for p in params if p.dtype in HALF})
    if bad:
        raise ValueError(f"{who}: trainable parameters are {', '.join(bad)}; Adam updates at small learning rates "
                         "round away in half precision. Call c3_plugin.scale.precision.keep_fp32_masters(model) first "
                         "(the workflow trainers do it for the models they are given)")
