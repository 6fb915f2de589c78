"""The dry-run's cluster plan: what each rank of a data-parallel run does and holds, before anything loads.

Ranks. The world size ``N`` is ``WORLD_SIZE`` when a launcher set it (``torchrun``; the nodes are
``N / LOCAL_WORLD_SIZE``), else ``cluster.nnodes x cluster.nproc_per_node``. ``N > 1`` runs under
``torchrun``: every rank holds a replica of the whole team on its own GPU (``cuda:LOCAL_RANK``), so
the data-parallel size of every agent is ``N``. CoMLRL's placement keys (the algorithm section's
``agent_devices`` and ``parallel_training: mp``), which spread the agents of one process over several
devices, are refused with ``N > 1``. Only the workflow trainers (``Capabilities.data_parallel``) run data-parallel.

Work. Each rollout batch of ``I = instances_per_update`` instances is split evenly over the ranks
(an instance's whole C3 group stays on one rank), so a rank runs ``I / N`` instances per update,
``I / N x leaves`` env steps and ``I / N x messages`` messages (per instance, as in
:func:`~c3_plugin.run.budget.expected_budget`); the run's totals do not depend on ``N``. A batch that
does not split evenly (an epoch's last, smaller one) gives its remainder to the lowest ranks, one instance
each, so the ranks' totals differ: the plan lists each rank's (``per_rank.by_rank``: instances, env steps,
messages, all integers) and gives the busiest rank's as ``per_rank``'s totals. Divisibility
(:func:`divisibility_errors`): ``I`` must be a multiple of ``N``, and with ``N > 1`` a set
``minibatch_size`` (messages per optimizer step, all ranks together) a multiple of ``N x micro_batch_size``.

Memory per GPU (bytes; ``P`` trainable parameters of one agent, ``P_lora`` for a LoRA agent whose frozen
base, ``b P`` in the compute dtype, is held whole on every rank). Without DeepSpeed (one process) it is
:mod:`c3_plugin.run.memory`'s estimate. Under DeepSpeed ZeRO over ``N`` ranks (``deepspeed.enabled: true``,
or ``auto`` with ``N > 1``) the trainable parameters stay fp32 (compute under bf16 autocast), and per
agent (:func:`zero_model_states`):

==========================  ===========  ===========  ===========
term                        stage 1      stage 2      stage 3
==========================  ===========  ===========  ===========
``weights_fp32``            ``4P``       ``4P``       ``4P/N``
``master_partition_fp32``   ``4P/N``     ``4P/N``     0
``optimizer_states``        ``8P/N``     ``8P/N``     ``8P/N``
``gradients_fp32``          ``4P``       ``4P/N``     ``4P/N``
==========================  ===========  ===========  ===========

``master_partition_fp32`` is DeepSpeed's own fp32 copy of the rank's partition, which the optimizer
steps: ZeRO-1/2 clone it even when the model is already fp32 (``stage_1_and_2.py``); ZeRO-3 uses the
fp32 parameter partition itself. So the model states of stage 2 are ``4P + 16P/N`` (``20P`` on one GPU,
more than the ``16P`` of a plain fp32 AdamW). Weights, master and Adam are held for the run; gradients
(and one ``reduce_bucket`` of ``4 min(reduce_bucket_size, P)`` bytes) only during that agent's update,
one agent at a time. ZeRO-3 gathers every agent's whole parameters for a rollout
(``gathered_params_fp32``: ``4P`` per agent, all agents at once, generation phase only).
``offload_optimizer`` moves Adam, the master partition and the gradient partition to CPU RAM (ZeRO-1/2
add a staging buffer of the partition, ``4P/N``): per rank per agent ``16P/N`` (stage 3) or ``20P/N``
(stages 1/2) of host memory, ``offload_params`` (ZeRO-3) adds the ``4P/N`` weights; CPU RAM per node is that
times agents times ranks per node. Every other term (compute copy, one micro-batch's logits and
activations, the KV cache of one rank's ``generate`` call or the vLLM engine's share) is memory.py's,
with ``I / N`` instances per ``generate`` call. The verdict compares the held memory plus the larger
phase (generation or update) with the GPU class:
``cluster.gpu``, else ``agent_model.device_memory_gb``, else H100-80 and H200-141. Framework overhead
(CUDA context, NCCL buffers, fragmentation) is not counted.

Traffic (GiB received per rank, ring approximations). Weight sync to a vLLM engine, per update: every
updated agent's weights enter the rank's engine once (``b P``; a served LoRA adapter: its fp32 file,
``4 P_lora``); HF ``generate`` pushes nothing. ZeRO per optimizer step and agent: the parameter all-gather
``4P (N - 1) / N`` (stages 1/2; ZeRO-3 gathers that much for every forward and every backward pass of a
micro-batch and once per rollout), the gradient reduction ``4P (N - 1) / N`` (reduce-scatter; stage 1
all-reduces, twice that). None of it with ``N = 1``.

GPU-hours (:func:`gpu_hours`, the dry-run's ``gpu_hours``). FLOPs per run, ``P`` the agent model's
parameters: decode ``2 P`` per generated token (every message at its cap), forward ``2 P`` per token of
each message's context (prefill; at most the assumed prompt plus every earlier cap), of the behaviour
log-prob recomputation and of a reference model (context + message), train ``6 P`` per trained token
(context + message of every credited message, ``x ppo_epochs``), a critic's reads and fits at ``2`` and
``6`` times its own parameters (the config's ``learned_critic``, a
:class:`c3_plugin.core.registry.Critic`). Each kind is divided by the GPU class's peak bf16 throughput times an
assumed MFU (:data:`PEAK_BF16_TFLOPS`, :data:`MFU`, printed with the estimate); the experiment is every
workflow algorithm the config holds, once per seed.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from comlrl.utils.reference_kl import reference_kl_enabled

from c3_plugin.core.config import ConfigError, load_config
from c3_plugin.core.plan import parse_plan
from c3_plugin.core.registry import capabilities, head_to_head, learned_critic, listed, workflow_algorithms
from c3_plugin.core.rollout import unique_samples
from c3_plugin.run.budget import credited_decisions, expected_budget, instances_by_rank, rollout_batch_sizes
from c3_plugin.run.memory import DTYPE_BYTES, GIB, device_budgets, estimate_memory, memory_inputs, model_shape
from c3_plugin.scale.distributed import divisibility_errors, placement_errors  # noqa: F401 (the split rules, checked at run time too)


def workflow_algorithm_names() -> str:
    """``c3, magrpo and mappo``: the data-parallel workflow trainers, as the messages name them (the registry's)."""
    return listed(workflow_algorithms())


def is_workflow_algorithm(algo_cfg: Any) -> bool:
    """The workflow trainers (a rollout plan over the workflow): the ones that run data-parallel."""
    return capabilities(algo_cfg).data_parallel


def world_layout(cluster: Any, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``{"world_size", "nodes", "ranks_per_node", "source"}``: the launcher's ``WORLD_SIZE`` (and
    ``LOCAL_WORLD_SIZE``) when set, else the ``cluster:`` section."""
    env = os.environ if env is None else env
    if env.get("WORLD_SIZE"):
        world = int(env["WORLD_SIZE"])
        local = int(env["LOCAL_WORLD_SIZE"]) if env.get("LOCAL_WORLD_SIZE") else None
        if local is None and int(cluster.nnodes) * int(cluster.nproc_per_node) == world:
            local = int(cluster.nproc_per_node)
        local = local or world
        return {"world_size": world, "nodes": max(1, world // local), "ranks_per_node": local, "source": "WORLD_SIZE"}
    nodes, per_node = int(cluster.nnodes), int(cluster.nproc_per_node)
    return {"world_size": nodes * per_node, "nodes": nodes, "ranks_per_node": per_node, "source": "cluster"}


def deepspeed_used(section: Any, world: int) -> bool:
    """Whether the updates run under DeepSpeed: ``enabled: true``, or ``"auto"`` with more than one rank."""
    return section.enabled is True or (section.enabled == "auto" and world > 1)


def zero_model_states(trained: float, stage: int, world: int, offload_optimizer: bool = False,
                      offload_params: bool = False, reduce_bucket_size: float = 2e8,
                      agents: int = 1) -> dict[str, dict[str, float]]:
    """Bytes of one agent's model states on one GPU under ZeRO ``stage`` over ``world`` ranks (module
    docstring): ``per_agent`` (held), ``update`` (during its update), ``generation`` (all ``agents``
    gathered, ZeRO-3) and ``cpu_per_agent`` (host memory with offload)."""
    if stage not in (1, 2, 3):
        raise ValueError(f"zero stage must be 1, 2 or 3, got {stage!r}")
    n, t = float(world), float(trained)
    weights = 4 * t / n if stage == 3 else 4 * t
    master = 4 * t / n if stage in (1, 2) else 0.0
    cpu: dict[str, float] = {}
    if offload_optimizer:
        cpu = {"optimizer_states": 8 * t / n, "master_partition_fp32": 4 * t / n, "gradient_partition_fp32": 4 * t / n}
        if stage in (1, 2):
            cpu["offload_staging"] = 4 * t / n
    if offload_params:
        cpu["weights_fp32"] = weights
    per_agent = {"weights_fp32": 0.0 if offload_params else weights,
                 "master_partition_fp32": 0.0 if offload_optimizer else master,
                 "optimizer_states": 0.0 if offload_optimizer else 8 * t / n}
    update = {"gradients_fp32": 4 * t if stage == 1 else 4 * t / n,
              "reduce_bucket": 4 * min(float(reduce_bucket_size), t)}
    generation = {"gathered_params_fp32": 4 * t * agents} if stage == 3 else {}
    return {"per_agent": per_agent, "update": update, "generation": generation, "cpu_per_agent": cpu}


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() else round(float(x), 2)


def _gib(x: float) -> float:
    return round(x / GIB, 2)


def _agent_devices(cfg: Any, agents: int, world: int) -> dict[str, str]:
    if world > 1:
        return {f"agent{i}": "cuda:LOCAL_RANK on every rank" for i in range(agents)}
    spec = getattr(cfg.algo, "agent_devices", None)
    spec = cfg.agent_model.device if spec is None else spec
    if isinstance(spec, str):
        spec = [spec]
    spec = ["cuda:0 (cpu without a GPU)" if s == "auto" else str(s) for s in spec]
    return {f"agent{i}": spec[i] if len(spec) == agents else spec[0] for i in range(agents)}


def _generator(cfg: Any, world: int, sequences: int | None) -> dict[str, Any]:
    a = cfg.algo
    if getattr(a, "generation_backend", "hf") != "vllm":
        return {"backend": "hf", "engines": 0, "where": "transformers generate on every rank, on the rank's replica",
                "sequences_per_generate_call_per_rank": sequences}
    if getattr(a, "vllm_server_url", None):
        return {"backend": "vllm", "colocated": False, "server": a.vllm_server_url, "engines_per_rank": 0,
                "engines_total": 1, "where": "a vLLM server on its own GPUs (python -m c3_plugin.generation.server), "
                                             "weights pushed after every update through vllm_server_weights_dir",
                "sequences_per_rollout_depth_per_rank": sequences}
    lora = cfg.agents.policy == "lora" and a.vllm_lora_adapters
    tp = int(a.vllm_tensor_parallel_size)
    out = {"backend": "vllm", "colocated": True, "engines_per_rank": 1, "engines_total": world,
           "tensor_parallel_size": tp, "gpu_memory_utilization": a.vllm_gpu_memory_utilization,
           "kv_cache_gib": a.vllm_kv_cache_gb, "sleep_mode": bool(a.vllm_enable_sleep_mode),
           "sequences_per_rollout_depth_per_rank": sequences,
           "serves": ("the frozen base with one LoRA adapter per agent" if lora else
                      "one agent's weights at a time (swapped in at each agent's turn)")}
    if tp > 1 and world > 1:
        out["note"] = (f"tensor_parallel_size {tp} under {world} ranks: each rank's engine would span {tp} GPUs that "
                       "other ranks train on; with data parallelism keep 1")
    return out


def _memory(cfg: Any, workflow: Any, layout: Mapping[str, Any], ds: bool) -> dict[str, Any]:
    world = int(layout["world_size"])
    try:
        inputs = memory_inputs(cfg, workflow, ranks=world)
    except LookupError as exc:
        return {"status": "unknown", "reason": str(exc)}
    gpu = cfg.cluster.gpu if cfg.cluster.gpu is not None else cfg.agent_model.device_memory_gb
    try:
        budgets = device_budgets(gpu)
    except ValueError as exc:
        raise ConfigError(f"cluster.gpu: {exc}") from exc
    inputs["device_memory_gb"] = gpu
    lora = inputs["policy"] == "lora"
    trained = inputs["lora_params"] if lora else inputs["shape"].params
    agents = int(inputs["agents"])
    cpu: dict[str, float] = {}
    if ds:
        d = cfg.deepspeed
        states = zero_model_states(trained, int(d.zero_stage), world, bool(d.offload_optimizer), bool(d.offload_params),
                                   float(d.reduce_bucket_size), agents)
        inputs["model_states"] = states
        model_states = {**states["per_agent"], "gradients_fp32": states["update"]["gradients_fp32"]}
        cpu = states["cpu_per_agent"]
    else:
        model_states = {"weights_fp32_master": 4 * trained, "gradients_fp32": 4 * trained,
                        "optimizer_states": 8 * trained}
    est = estimate_memory(**inputs)
    totals = est.get("total_gib_by_device") or {label: est["total_gib"] for label in budgets}
    out: dict[str, Any] = {
        "status": "ok", "model": cfg.agent_model.name, "params_per_agent": inputs["shape"].params,
        "trainable_params_per_agent": trained, "agents_per_gpu": agents, "compute_dtype": inputs["compute_dtype"],
        "generation_sequences_per_call_per_rank": inputs["generation_sequences"],
        "model_states_per_agent_gib": {**{k: _gib(v) for k, v in model_states.items()},
                                       "total": _gib(sum(model_states.values()))},
        "held_per_agent_gib": {k: _gib(v * GIB) for k, v in est["per_agent_gib"].items()},
        "shared_gib": {k: _gib(v * GIB) for k, v in est["shared_gib"].items() if v},
        "transient_gib": {k: _gib(v * GIB) for k, v in est["transient_gib"].items()},
        "phase_gib": {k: (None if v is None else _gib(v * GIB)) for k, v in est["phase_gib"].items()},
    }
    if "engine_gib" in est:
        out["engine_gib"] = {k: _gib(v * GIB) for k, v in est["engine_gib"].items()}
    out["total_gib"] = {label: _gib(v * GIB) for label, v in totals.items()}
    out["verdict"] = {label: "fits" if totals[label] <= gib else "does not fit" for label, gib in budgets.items()}
    if cpu:
        per_rank = agents * sum(cpu.values())
        out["cpu_ram_gib"] = {"per_rank": _gib(per_rank), "per_node": _gib(per_rank * int(layout["ranks_per_node"])),
                              "per_agent_per_rank": {k: _gib(v) for k, v in cpu.items()}}
    out["note"] = est["note"]
    return out


def _traffic(cfg: Any, budget: Mapping[str, Any], layout: Mapping[str, Any], ds: bool, mem: Mapping[str, Any],
             agents: int) -> dict[str, Any]:
    a, world = cfg.algo, int(layout["world_size"])
    updates = list(budget.get("expected_optimizer_updates_per_agent") or [1] * agents)
    updated = [i for i, u in enumerate(updates) if u > 0]
    out: dict[str, Any] = {}
    if mem.get("status") != "ok":
        return {"status": "unknown", "reason": mem.get("reason")}
    p, trained = float(mem["params_per_agent"]), float(mem["trainable_params_per_agent"])
    b = DTYPE_BYTES[mem["compute_dtype"]]
    if getattr(a, "generation_backend", "hf") == "vllm":
        adapters = cfg.agents.policy == "lora" and a.vllm_lora_adapters
        per_agent = 4 * trained if adapters else b * p
        out["engine_push_per_update_per_rank_gib"] = _gib(per_agent * len(updated))
        out["engine_push"] = ("each updated agent's LoRA adapter file (fp32) once per update" if adapters else
                              f"each updated agent's weights in {mem['compute_dtype']} into the rank's "
                              "engine once per update")
    else:
        out["engine_push_per_update_per_rank_gib"] = 0.0
        out["engine_push"] = "none: HF generate samples from the trained modules themselves"
    batches = max(1, int(budget.get("rollout_batches") or 1))
    steps = [_num(u / batches) for u in updates]
    if ds:
        stage = int(cfg.deepspeed.zero_stage)
        share = 4 * trained * (world - 1) / world
        zero = {"stage": stage, "optimizer_steps_per_update_per_agent": steps,
                "param_allgather_per_step_per_agent_gib": _gib(share) if stage in (1, 2) else 0.0,
                "gradient_reduce_per_step_per_agent_gib": _gib(2 * share if stage == 1 else share)}
        if stage == 3:
            zero["param_allgather_per_micro_batch_pass_per_agent_gib"] = _gib(2 * share)
            zero["param_allgather_per_rollout_gib"] = _gib(share * agents)
        per_step = {1: 3 * share, 2: 2 * share, 3: share}[stage]  # all-gather + reduction (ZeRO-3: the reduction)
        zero["per_update_per_rank_gib"] = _gib(sum(s * per_step for s in steps)
                                               + (share * agents if stage == 3 else 0.0))
        if stage == 3:
            zero["per_update_per_rank_note"] = "plus the all-gathers of every micro-batch pass (forward and backward)"
        out["zero"] = zero
    return out


def _rank_counts(cfg: Any, budget: Mapping[str, Any], train: Any, world: int,
                 workflow_algo: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The cluster plan's ``per_rank`` and ``total`` counts: instances, env steps and messages per update and over
    the run, the busiest rank's share (and each rank's), optimizer updates per agent."""
    a = cfg.algo
    steps_total, messages_total = budget.get("expected_env_steps"), budget.get("expected_messages")
    total: dict[str, Any] = {}
    per_rank: dict[str, Any] = {}
    if workflow_algo:  # counts, so integers: instances_per_update is a multiple of the ranks (divisibility_errors)
        ipu = int(a.instances_per_update)
        leaves, messages = int(budget["leaves_per_instance"]), int(budget["messages_per_instance"])
        total = {"instances_per_update": ipu, "env_steps_per_update": ipu * leaves,
                 "messages_per_update": ipu * messages}
        per_rank = {k: v // world for k, v in total.items()}
        sizes = rollout_batch_sizes(cfg, train)
        instances = instances_by_rank(sizes, world)  # an uneven batch's remainder goes to the lowest ranks
        by_rank = {"instances_total": instances, "env_steps_total": [n * leaves for n in instances],
                   "messages_total": [n * messages for n in instances]}
        total["instances_total"] = sum(instances)
        per_rank.update({k: max(v) for k, v in by_rank.items()})  # the busiest rank's (rank 0's): what a rank must run
        per_rank["by_rank"] = by_rank
        uneven = [s for s in sizes if s % world]
        if uneven:
            per_rank["note"] = (f"{len(uneven)} of the {len(sizes)} rollout batches "
                                f"({', '.join(map(str, sorted(set(uneven))))} instances) do not split evenly over the "
                                f"{world} ranks: the lowest ranks take one instance more of each, so the ranks' totals "
                                "differ (by_rank; the totals here are the busiest rank's)")
    else:  # one process (the other trainers do not run data-parallel): its share is the whole run
        if steps_total is not None:
            per_rank["env_steps_total"] = steps_total
        if messages_total is not None:
            per_rank["messages_total"] = messages_total
    if steps_total is not None:
        total["env_steps_total"] = steps_total
    if messages_total is not None:
        total["messages_total"] = messages_total
    if "expected_optimizer_updates_per_agent" in budget:
        total["optimizer_updates_per_agent"] = budget["expected_optimizer_updates_per_agent"]
        total["rollout_batches"] = budget["rollout_batches"]
    return per_rank, total


def cluster_plan(cfg: Any, workflow: Any, train: Any) -> dict[str, Any]:
    """The dry-run's plan of the cluster for ``cfg`` (see the module docstring); ``train`` is the training
    dataset or its row count. Raises :class:`~c3_plugin.core.errors.ConfigError` listing every rule the
    configured world size breaks, each with its fix. Loads nothing."""
    layout = world_layout(cfg.cluster)
    world = int(layout["world_size"])
    a = cfg.algo
    workflow_algo = is_workflow_algorithm(a)
    if world > 1 and not workflow_algo:
        raise ConfigError(f"{cfg.algorithm} with {world} ranks: data parallelism covers the workflow trainers "
                          f"({workflow_algorithm_names()}); launch {cfg.algorithm} as one process")
    errors = divisibility_errors(a, world) + placement_errors(a, world)
    if cfg.deepspeed.enabled is False and world > 1:
        errors.append(f"deepspeed.enabled: false with {world} ranks: data parallelism runs on DeepSpeed ZeRO; set "
                      "deepspeed.enabled: auto")
    if workflow_algo and deepspeed_used(cfg.deepspeed, world) and cfg.agents.policy == "lora":
        errors.append("agents.policy: lora shares one model between the agents' adapters, which one DeepSpeed engine "
                      "per agent cannot shard: use agents.policy: per_agent under DeepSpeed")
    if errors:
        raise ConfigError(f"{world} ranks: " + "; ".join(errors))
    ds = workflow_algo and deepspeed_used(cfg.deepspeed, world)
    agents = int(workflow.num_agents)
    budget = expected_budget(cfg, workflow, train)
    plan: dict[str, Any] = {
        **{k: layout[k] for k in ("world_size", "nodes", "ranks_per_node")}, "world_size_from": layout["source"],
        "launcher": "torchrun" if world > 1 else "python",
        "launcher_args": (f"--nnodes {layout['nodes']} --nproc_per_node {layout['ranks_per_node']}"
                          + (" --rdzv_backend c10d --rdzv_endpoint HOST:29500 (on every node)" if layout["nodes"] > 1
                             else "")
                          if world > 1 else ""),
        "data_parallel_size_per_agent": world, "agent_devices": _agent_devices(cfg, agents, world),
    }
    if world == 1 and str(getattr(a, "parallel_training", "none")).lower() == "mp":
        plan["placement"] = "CoMLRL parallel_training: mp (one process, agents on their agent_devices)"
    d = cfg.deepspeed
    plan["deepspeed"] = {"enabled": ds, "zero_stage": int(d.zero_stage) if ds else None,
                         "offload_optimizer": bool(d.offload_optimizer) if ds else False,
                         "offload_params": bool(d.offload_params) if ds else False,
                         "precision": "fp32 trainable parameters and Adam, compute under "
                                      f"{cfg.agent_model.dtype}"
                         + (" autocast" if cfg.agent_model.dtype != "float32" else "")}
    if ds:
        plan["deepspeed"]["dist_backend"] = d.dist_backend or "nccl on GPUs, gloo on CPU"
    elif not workflow_algo and d.enabled is True:
        plan["deepspeed"]["note"] = (f"DeepSpeed runs the updates of the workflow trainers "
                                     f"({workflow_algorithm_names()}) only")
    mem = _memory(cfg, workflow, layout, ds)
    plan["generator"] = _generator(cfg, world, mem.get("generation_sequences_per_call_per_rank"))
    per_rank, total = _rank_counts(cfg, budget, train, world, workflow_algo)
    plan["per_rank"], plan["total"] = per_rank, total
    plan["weight_sync"] = _traffic(cfg, budget, layout, ds, mem, agents)
    plan["memory_per_gpu"] = mem
    return plan


# ----- GPU-hours ----------------------------------------------------------------------------------------
# Peak dense bfloat16 tensor throughput per GPU class (TFLOP/s, no sparsity; vendor data sheets: H100 and
# H200 SXM 989, A100 and A800 312, L40S 362), the memory.py classes.
PEAK_BF16_TFLOPS = {"h100": 989.0, "h200": 989.0, "a100-80": 312.0, "a800": 312.0, "a100-40": 312.0, "l40s": 362.0}
DEFAULT_GPU_CLASS = "h100"  # when cluster.gpu (or agent_model.device_memory_gb) names GiB or nothing
# Assumed model FLOP utilisation (achieved / peak) per kind of work. Training and the other full-sequence
# passes are compute-bound: 0.30 is what DeepSpeed ZeRO-2 on HF models of a few billion parameters reaches
# with small micro-batches. Decoding at tens of sequences per call is bound by reading the weights (and
# under HF generate by its per-step Python overhead), not by FLOPs: about 1% of peak under HF generate and
# 5% under vLLM (eager) for a 4B model with 8-32 sequences per call; more sequences per call raise both.
MFU = {"train": 0.30, "forward": 0.30, "decode_hf": 0.01, "decode_vllm": 0.05}


def _sig(x: float) -> float:
    return float(f"{float(x):.4g}")


def _gpu_class(cfg: Any) -> tuple[str, str | None]:
    """The GPU class whose peak the estimate uses, and a note when it is assumed."""
    for value in (cfg.cluster.gpu, cfg.agent_model.device_memory_gb):
        if isinstance(value, str) and value.lower() in PEAK_BF16_TFLOPS:
            return value.lower(), None
    given = cfg.cluster.gpu if cfg.cluster.gpu is not None else cfg.agent_model.device_memory_gb
    return DEFAULT_GPU_CLASS, ("GPU class not named "
                               f"({'cluster.gpu: ' + str(given) if given is not None else 'cluster.gpu unset'}): "
                               f"assumed {DEFAULT_GPU_CLASS} (H200 has the same peak); set cluster.gpu to one of "
                               f"{sorted(PEAK_BF16_TFLOPS)}")


def run_tokens(cfg: Any, workflow: Any, train: Any) -> dict[str, Any]:
    """Token counts of one run of a workflow trainer (module function :func:`gpu_hours`): per decision point
    ``u`` with cap ``T_u`` and ``m_u`` messages per instance (shared samples once), the context is at most
    the assumed task prompt plus every earlier cap, ``S_u = agent_model.prompt_tokens + sum_{v<u} T_v``; a learned
    critic (the config's ``learned_critic``) reads each decision state of every run, or each credited alternative."""
    a, m = cfg.algo, cfg.agent_model
    budget = expected_budget(cfg, workflow, train)
    plan = parse_plan(a.plan)
    branching = plan.branching(workflow.num_decisions)
    shared = bool(getattr(a, "share_parallel_samples", False)) and plan.kind != "independent"
    msgs = unique_samples(workflow, branching, shared)
    default_cap = int(getattr(a, "max_new_tokens", 256))
    caps = [int(workflow.roles[s.name].max_new_tokens or default_cap) for s in workflow.decision_steps]
    ctx = [int(m.prompt_tokens) + sum(caps[:u]) for u in range(len(caps))]
    instances = budget["expected_env_steps"] // budget["leaves_per_instance"]
    ipu, batches = int(a.instances_per_update), int(budget["rollout_batches"])
    critic = learned_critic(a)
    warmup = min(critic.policy_warmup_updates if critic else 0, batches)  # MAPPO: batches that train only the critic
    trained_instances = max(0, instances - warmup * ipu)
    credited = credited_decisions(cfg.algorithm, a.plan, workflow)
    epochs = int(a.ppo_epochs)
    backend = getattr(a, "generation_backend", "hf")
    recompute = (backend == "hf" or bool(getattr(a, "logprob_mismatch", False)) or float(a.top_p) < 1.0
                 or a.top_k is not None)
    sequence = sum(msgs[u] * (ctx[u] + caps[u]) for u in range(len(caps)))
    trained = sum(msgs[u] * (ctx[u] + caps[u]) for u in credited)
    out = {"instances": instances, "trained_instances": trained_instances,
           "generated_upper_bound": instances * sum(msgs[u] * caps[u] for u in range(len(caps))),
           "prefill": instances * sum(msgs[u] * ctx[u] for u in range(len(caps))),
           "logprob_recompute": instances * sequence if recompute else 0,
           "trained": epochs * trained_instances * trained,
           "reference_forward": epochs * trained_instances * trained if reference_kl_enabled(a) else 0,
           "critic_read": 0, "critic_trained": 0, "critic_params": 0.0}
    if critic is None:
        return out
    if critic.reads == "decision_states":  # MAPPO: a state per run and decision point, each at most max_tokens
        runs = instances * budget["leaves_per_instance"]
        read = runs * sum(min(critic.max_tokens, ctx[u]) for u in range(len(caps)))
    elif critic.reads == "alternatives":  # C3's Q_hat: every credited alternative, context + message
        read = instances * sum(msgs[u] * min(critic.max_tokens, ctx[u] + caps[u]) for u in credited)
    else:
        raise ValueError(f"{cfg.algorithm}'s learned_critic reads {critic.reads!r}: give "
                         "'decision_states' or 'alternatives'")
    out.update(critic_read=read, critic_trained=critic.epochs * read,
               critic_params=model_shape(critic.model).params if critic.model else None)
    return out


def gpu_hours(cfg: Any, workflow: Any, train: Any) -> dict[str, Any]:
    """GPU-hours of one run on the configured cluster, and of the experiment (every workflow algorithm whose
    section the config holds, once per seed). Loads nothing.

    FLOPs: ``2 P`` per token of inference (decoding each generated token, prefilling each message's context,
    the behaviour log-prob recomputation over context + message under HF generate or whenever the trainer
    recomputes them, a reference model's forward), ``6 P`` per token trained (forward + backward over context
    + message, ``x ppo_epochs``); a critic (MAPPO's, C3's ``value_assisted`` Q_hat) likewise with its own
    parameter count. ``P`` is the agent model's parameter count (:func:`c3_plugin.run.memory.model_shape`).
    GPU-seconds = FLOPs / (peak bf16 throughput of the GPU class x the assumed MFU of that kind of work,
    :data:`PEAK_BF16_TFLOPS`, :data:`MFU`); wall-clock hours = GPU-hours / GPUs, since the ranks split every
    batch evenly. Generated tokens are counted at every message's cap: an upper bound, and under HF generate
    the compute itself, which runs every row of a call until its longest row stops. Not counted: attention's
    ``O(S^2)`` FLOPs, evaluation, model loading, reward calls (code execution) and idle time."""
    if not is_workflow_algorithm(cfg.algo):
        return {"status": "unknown",
                "reason": f"estimated for the workflow trainers ({workflow_algorithm_names()}) only"}
    m = cfg.agent_model
    try:
        p = model_shape(m.name, m.revision, m.gguf_file).params
    except LookupError as exc:
        return {"status": "unknown", "reason": str(exc)}
    world = int(world_layout(cfg.cluster)["world_size"])
    gpu, note = _gpu_class(cfg)
    peak = PEAK_BF16_TFLOPS[gpu] * 1e12

    def one_run(run_cfg: Any) -> dict[str, Any]:
        tok = run_tokens(run_cfg, workflow, train)
        pc = tok["critic_params"] if tok["critic_params"] is not None else p
        decode_mfu = MFU["decode_vllm" if getattr(run_cfg.algo, "generation_backend", "hf") == "vllm" else "decode_hf"]
        flops = {"decode": 2 * p * tok["generated_upper_bound"],
                 "forward": 2 * p * (tok["prefill"] + tok["logprob_recompute"] + tok["reference_forward"])
                 + 2 * pc * tok["critic_read"],
                 "train": 6 * p * tok["trained"] + 6 * pc * tok["critic_trained"]}
        mfu = {"decode": decode_mfu, "forward": MFU["forward"], "train": MFU["train"]}
        hours = {k: v / (peak * mfu[k]) / 3600 for k, v in flops.items()}
        tokens = {k: tok[k] for k in ("generated_upper_bound", "prefill", "logprob_recompute", "reference_forward",
                                      "trained")}
        if tok["critic_read"]:
            tokens.update(critic_read=tok["critic_read"], critic_trained=tok["critic_trained"])
        return {"tokens": tokens, "tokens_per_gpu": {k: _num(v / world) for k, v in tokens.items()},
                "flops": {k: _sig(v) for k, v in flops.items()},
                "gpu_hours": {**{k: _sig(v) for k, v in hours.items()}, "total": _sig(sum(hours.values()))},
                "wall_clock_hours": _sig(sum(hours.values()) / world)}

    run = one_run(cfg)
    per_algorithm = {cfg.algorithm: run["gpu_hours"]["total"]}
    for name in head_to_head(cfg.algorithm, getattr(cfg, "raw", {}))[1:]:
        other = load_config(data={**cfg.raw, "algorithm": name})
        if is_workflow_algorithm(other.algo):
            per_algorithm[name] = one_run(other)["gpu_hours"]["total"]
    per_seed = _sig(sum(per_algorithm.values()))
    out = {"status": "ok", "gpu_class": gpu, "gpus": world, "params": p, **run,
           "experiment": {"gpu_hours_per_run": per_algorithm, "gpu_hours_per_seed": per_seed,
                          "gpu_hours_5_seeds": _sig(5 * per_seed),
                          "rule": "c3 compare --seeds S runs each algorithm once per seed: S x gpu_hours_per_seed "
                                  "(5 seeds, as the paper's main setting, shown)"},
           "assumptions": {"peak_bf16_tflops": PEAK_BF16_TFLOPS[gpu], "mfu": dict(MFU),
                           "flops_per_token": "2 P inference (decode, prefill, log-prob recompute, "
                                              "reference), 6 P trained",
                           "context_tokens": f"agent_model.prompt_tokens ({int(m.prompt_tokens)}) + "
                                             "every earlier role's cap",
                           "generated_tokens": "every message at its role's cap (HF generate computes every row until "
                                               "the call's longest stops; under vLLM the real count is lower)",
                           "excluded": "attention's O(S^2) FLOPs, evaluation, loading, reward calls, idle time"}}
    if note:
        out["assumptions"]["gpu_class_note"] = note
    return out
