"""Data parallelism across processes launched by ``torchrun``: the process group, instance
sharding, the few cross-rank reductions a rollout batch needs, and DeepSpeed ZeRO engines.

Every rank holds a replica of the whole team. A rollout batch of ``instances_per_update``
instances (the same on every rank: the epoch's order is seeded) is split by position,
rank ``r`` taking instances ``r, r + N, ...``, so an instance's whole C3 group (its
alternatives and their continuations) lives on one rank and leave-one-out credit needs no
communication. Each agent's update runs under a DeepSpeed engine (:func:`make_engine`):
ZeRO shards the optimizer states (stage 1), the gradients (2) and the parameters (3);
gradients are averaged across ranks. The trainable parameters stay fp32 masters and the
forward runs under the compute dtype's autocast (:mod:`c3_plugin.scale.precision`), so the engine
runs in fp32 mode. Nothing here launches processes: ``torchrun`` sets ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK`` and the rendezvous, one node or many.

On a CPU the backend is gloo (DeepSpeed's CPU accelerator; without oneCCL it falls back
to gloo) and DeepSpeed compiles a small C++ op on first use (``make setup`` builds it).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Iterator, Sequence

import torch

from c3_plugin.core.config import ConfigError
from c3_plugin.core.registry import capabilities
from c3_plugin.scale.optimizers import make_adamw

_CONTEXT: "DistContext | None" = None


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    backend: str | None = None  # None: no process group (one process)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def device(self) -> str:
        """This rank's device: its local GPU, or the CPU."""
        return f"cuda:{self.local_rank}" if torch.cuda.is_available() else "cpu"


def launched_world() -> int:
    """The world size the launcher set (1 without torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def context() -> DistContext:
    """The current process's place in the job (rank 0 of 1 until :func:`init` ran under torchrun)."""
    return _CONTEXT or DistContext()


def init(dist_backend: str | None = None, timeout_minutes: int = 60, single: bool = False) -> DistContext:
    """Join the job ``torchrun`` launched (idempotent): the process group through DeepSpeed, which
    picks its accelerator; nccl with GPUs, gloo on CPU unless ``dist_backend`` says otherwise. One
    process without torchrun gets a group of one when ``single`` (DeepSpeed needs one, e.g. for CPU
    optimizer offload on a single GPU)."""
    global _CONTEXT
    world = launched_world()
    if world <= 1 and not single:
        _CONTEXT = DistContext()
        return _CONTEXT
    import torch.distributed as dist

    if world <= 1 and "MASTER_PORT" not in os.environ:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                           "MASTER_PORT": str(port)})

    if not dist.is_initialized():
        import deepspeed

        backend = dist_backend or ("nccl" if torch.cuda.is_available() else "gloo")
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        deepspeed.init_distributed(dist_backend=backend, timeout=timedelta(minutes=int(timeout_minutes)))
    _CONTEXT = DistContext(rank=dist.get_rank(), world=dist.get_world_size(),
                           local_rank=int(os.environ.get("LOCAL_RANK", "0")), backend=dist.get_backend())
    return _CONTEXT


def shard(items: Sequence[Any], ctx: DistContext | None = None) -> list[Any]:
    """This rank's share of a batch: positions ``rank, rank + world, ...`` (all of it on one process)."""
    ctx = ctx or context()
    return list(items[ctx.rank::ctx.world])


def all_sum(values: Sequence[float], op: str = "sum") -> list[float]:
    """Element-wise sum (or ``op="max"``) of ``values`` over the ranks (unchanged on one process)."""
    if not context().enabled:
        return [float(v) for v in values]
    import torch.distributed as dist

    device = context().device if context().backend == "nccl" else "cpu"  # nccl reduces GPU tensors only
    t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return t.cpu().tolist()


def gather(obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order, on every rank (``[obj]`` on one process)."""
    if not context().enabled:
        return [obj]
    import torch.distributed as dist

    out: list[Any] = [None] * context().world
    dist.all_gather_object(out, obj)
    return out


def broadcast(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank."""
    if not context().enabled:
        return obj
    import torch.distributed as dist

    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier() -> None:
    if context().enabled:
        import torch.distributed as dist

        dist.barrier()


# ----- the rules a data-parallel split must satisfy (the dry-run's cluster plan reports them too) ----------
def divisibility_errors(algo_cfg: Any, world: int) -> list[str]:
    """Every rule of the split over ``world`` ranks that ``algo_cfg`` breaks, each naming its fix (empty: none)."""
    errors: list[str] = []
    if world <= 1 or not capabilities(algo_cfg).data_parallel:
        return errors
    ipu = int(algo_cfg.instances_per_update)
    if ipu % world:
        errors.append(f"instances_per_update={ipu} does not split evenly over {world} ranks: set instances_per_update "
                      f"to a multiple of {world}, e.g. {_multiples(ipu, world)}")
    mb, micro = getattr(algo_cfg, "minibatch_size", None), int(getattr(algo_cfg, "micro_batch_size", 1))
    if mb is not None and int(mb) % (world * micro):
        step = world * micro
        fix = f"set minibatch_size to a multiple of {step}, e.g. {_multiples(int(mb), step)}"
        if int(mb) % world == 0:
            per_rank = int(mb) // world
            divisors = [d for d in range(1, micro + 1) if per_rank % d == 0]
            fix += f", or micro_batch_size to a divisor of {per_rank}, e.g. {divisors[-1]}"
        errors.append(f"minibatch_size={mb} is not a multiple of ranks x micro_batch_size = {world} x {micro} = {step} "
                      f"(each rank takes minibatch_size / {world} messages per optimizer step in "
                      f"micro-batches of {micro}): {fix}")
    return errors


def placement_errors(algo_cfg: Any, world: int) -> list[str]:
    """CoMLRL's own placement keys, which spread one process's agents over devices, refused with ``world > 1``."""
    if world <= 1:
        return []
    errors = []
    devices = getattr(algo_cfg, "agent_devices", None)
    if devices is not None and devices != "auto":
        errors.append(f"agent_devices={devices!r} places one process's agents on several devices; with {world} ranks "
                      "every rank holds the whole team on its own GPU (cuda:LOCAL_RANK): remove agent_devices")
    if str(getattr(algo_cfg, "parallel_training", "none")).lower() == "mp":
        errors.append(f"parallel_training: mp is CoMLRL's one-process model parallelism; with {world} ranks the team "
                      "is data-parallel: set parallel_training: none")
    return errors + vllm_placement_errors(algo_cfg, world)


def _cuda_index(device: Any) -> int | None:
    """N of "cuda:N" (0 for "cuda"); None for any other device."""
    name, _, index = str(device).partition(":")
    return (int(index) if index.isdigit() else 0) if name == "cuda" else None


def missing_devices(algo_cfg: Any, section: str) -> list[str]:
    """The CUDA devices CoMLRL's placement keys (``agent_devices``, ``reference_devices``, ``critic_devices``) name
    that this machine lacks: caught before any model is loaded (CoMLRL would fail moving the first agent)."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    errors = []
    for key in ("agent_devices", "reference_devices", "critic_devices"):
        devices = getattr(algo_cfg, key, None)
        if not isinstance(devices, (list, tuple)):
            continue
        absent = [str(d) for d in devices if _cuda_index(d) is not None and _cuda_index(d) >= count]
        if absent:
            errors.append(f"{section}.{key}={list(devices)!r} names {', '.join(absent)}, but this machine has {count} "
                          f"CUDA device(s): set {section}.{key} to devices it has (e.g. ['cpu']) or remove it")
    return errors


def vllm_placement_errors(algo_cfg: Any, world: int) -> list[str]:
    """What ``generation_backend: vllm`` cannot do with ``world > 1`` ranks (each rank runs its own engine)."""
    if world <= 1 or getattr(algo_cfg, "generation_backend", "hf") != "vllm":
        return []
    errors = []
    if getattr(algo_cfg, "vllm_server_url", None):
        errors.append(f"vllm_server_url with {world} ranks: a generation server takes one trainer process's weight "
                      "pushes; under torchrun drop vllm_server_url (each rank then runs its own colocated "
                      "engine), or run one process")
    if int(getattr(algo_cfg, "vllm_tensor_parallel_size", 1)) > 1:
        errors.append(f"vllm_tensor_parallel_size={algo_cfg.vllm_tensor_parallel_size} with {world} ranks: each rank "
                      "runs its own engine on its own GPU over its own shard of the rollout "
                      "(vllm_tensor_parallel_size: 1); an engine sharded over a group of ranks would need every rank "
                      "of the group to generate in lock-step, which the ranks' different rollouts do not. Set "
                      "vllm_tensor_parallel_size: 1, or run one process")
    return errors


def _multiples(value: int, step: int) -> str:
    lower, upper = value // step * step, -(-value // step) * step
    return f"{lower} or {upper}" if 0 < lower < upper else str(upper)


def use_deepspeed(enabled: str | bool, world: int | None = None) -> bool:
    """Whether the updates run under DeepSpeed: ``enabled`` true, or ``"auto"`` with more than one process."""
    world = launched_world() if world is None else world
    if enabled is False and world > 1:
        raise ConfigError(f"deepspeed.enabled: false but torchrun launched {world} processes: data parallelism runs on "
                          "DeepSpeed ZeRO; set deepspeed.enabled: auto (or launch one process)")
    return enabled is True or (enabled == "auto" and world > 1)


def engine_config(section: Any, max_grad_norm: float) -> dict[str, Any]:
    """The DeepSpeed config of one agent's engine. Batch sizes are nominal (the update loop sets the
    accumulation boundary itself); fp32 mode, because the masters are fp32 and the compute dtype is
    applied by autocast."""
    zero: dict[str, Any] = {"stage": int(section.zero_stage), "reduce_bucket_size": int(section.reduce_bucket_size),
                            "overlap_comm": False, "contiguous_gradients": True}
    if section.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": torch.cuda.is_available()}
    if section.offload_params:
        zero["offload_param"] = {"device": "cpu", "pin_memory": torch.cuda.is_available()}
    if int(section.zero_stage) == 3:
        zero.update({"stage3_gather_16bit_weights_on_model_save": False, "stage3_param_persistence_threshold": 0})
    return {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
            "gradient_clipping": float(max_grad_norm or 0.0), "zero_optimization": zero,
            "zero_allow_untested_optimizer": True, "wall_clock_breakdown": False, "steps_per_print": 10**12}


def make_engine(model: torch.nn.Module, params: Sequence[torch.nn.Parameter], lr: float, section: Any,
                max_grad_norm: float, optimizer_kwargs: dict[str, Any] | None = None):
    """A DeepSpeed engine over ``model`` that optimises ``params`` with AdamW (torch's, or DeepSpeed's
    CPU Adam when the optimizer is offloaded), the same hyper-parameters as the one-process run
    (``optimizer_kwargs``: :func:`c3_plugin.trainers.optim.adam_kwargs` for a policy). The engine gets no
    DeepSpeed scheduler: a policy's learning-rate schedule writes ``engine.optimizer.param_groups`` before
    each step (:class:`c3_plugin.trainers.optim.LRSchedule`)."""
    import deepspeed

    optimizer = make_adamw(params, lr, cpu_offload=bool(section.offload_optimizer), **(optimizer_kwargs or {}))
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=engine_config(section, max_grad_norm))
    return engine


@contextlib.contextmanager
def gathered(engines: Sequence[Any] | None, enabled: bool) -> Iterator[None]:
    """ZeRO-3: the whole parameters of the ``engines``' modules on this rank, with ZeRO-3's per-module
    hooks removed for the duration (DeepSpeed's ``unwrap_model_for_generation``): generation and
    evaluation call ``generate`` a rank-dependent number of times, so no per-layer collective may run
    inside. Entering and leaving are collectives: every rank must pass through. A no-op otherwise."""
    if not enabled or not engines:
        yield
        return
    from deepspeed.runtime.zero.stage3 import unwrap_model_for_generation

    with contextlib.ExitStack() as stack:
        for engine in engines:
            stack.enter_context(unwrap_model_for_generation(engine))
        yield
