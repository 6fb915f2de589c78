"""Memory per device, estimated before a run (``--dry-run``) from the model's shape and the config.

The arithmetic (bytes; ``P`` parameters of one agent's model, ``b`` bytes per element of the
compute dtype: 2 for bfloat16, 4 for float32):

Held for the whole run, per agent on the device (once for ``agents.policy: shared``, one model for every role)
  * ``weights_fp32_master``: ``4 P`` (fp32 master weights; a LoRA agent: ``4 P_lora``)
  * ``optimizer_states``: ``8 P`` (Adam's two fp32 moments; LoRA: ``8 P_lora``)
Held once
  * ``lora_base``: ``b P`` (the frozen base all adapters share, in the compute dtype)
  * ``reference``: ``b P`` per agent (per model) when a reference KL is enabled or ``kl_reward_coef`` > 0
  * ``critic``: ``16 P_critic`` (a critic state per run and decision point, ``Capabilities.decision_critic``: MAPPO's;
    fp32 weights, gradients, Adam moments)
Transient, one agent at a time (gradients are freed after each agent's update)
  * ``gradients_fp32``: ``4 P`` (LoRA: ``4 P_lora``)
  * ``compute_copy``: ``2 P`` under bf16 autocast over fp32 masters (the cast weights), 0 otherwise
  * ``logits_micro_batch``: ``m (T + 1) V (b + c + 4)``: one micro-batch of ``m`` sequences, ``T``
    completion tokens (the largest role cap), vocabulary ``V``; the logits in the compute dtype, their
    fp32 copy (``c = 4`` when ``b = 2``, else 0) and one fp32 buffer for the softmax and its gradient
  * ``activations_micro_batch``: ``17 b m S H L``: the usual no-recompute estimate of saved activations
    (34 bytes per token, hidden unit and layer in 16-bit), ``S`` tokens per sequence, ``H`` hidden, ``L`` layers
  * ``kv_cache_generation``: ``2 L K D b N S``: keys and values of the largest ``generate`` call, ``N``
    sequences of ``S`` tokens, ``K`` key-value heads of size ``D``
``S`` is the assumed task prompt (``agent_model.prompt_tokens``) plus every role's token cap (the
last role's context holds all earlier messages): an upper bound. The total is the held memory plus the
larger of the two phases (generation: ``compute_copy + kv_cache_generation``; update:
``gradients_fp32 + compute_copy + logits_micro_batch + activations_micro_batch``). Framework overhead
(CUDA context, allocator fragmentation, a few GiB) is not included: keep headroom.

With ``generation_backend: vllm`` the engine generates instead of ``generate``: it takes
``vllm_gpu_memory_utilization`` of each device (weights and KV cache), or ``b P + vllm_kv_cache_gb``
when a KV cache size is given, and the HF generation phase is gone. Per device class the total is
``held + max(engine, update + engine)``, the engine's share dropping out of the update phase when it
sleeps (``vllm_enable_sleep_mode``): ``held + max(engine, update)``.

Under DeepSpeed ZeRO (data parallelism, :mod:`c3_plugin.run.cluster`) the per-agent model states and the
gradients are sharded over the ranks: :func:`estimate_memory` takes them as ``model_states`` (computed
there) and keeps every other term above.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from c3_plugin.core.cache import cache_path, cached_json
from c3_plugin.core.model_paths import resolve_model_path
from c3_plugin.core.plan import parse_plan
from c3_plugin.core.registry import capabilities, learned_critic

GIB = 2**30
DEVICE_CLASSES = {"h100": 80.0, "h200": 141.0, "a100-80": 80.0, "a800": 80.0, "a100-40": 40.0, "l40s": 48.0,
                  "b200": 180.0}
DEFAULT_CLASSES = ("h100", "h200")
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class ModelShape:
    params: float  # parameter count
    layers: int
    hidden: int
    kv_heads: int
    head_dim: int
    vocab: int


def _qwen3(hidden: int, layers: int, heads: int, inter: int, tied: bool) -> dict[str, Any]:
    return {"vocab_size": 151936, "hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
            "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": inter, "tie_word_embeddings": tied}


# Shapes of the models the shipped configs name, so an offline dry-run can plan without their config files.
KNOWN = {
    "Qwen/Qwen3-0.6B": _qwen3(1024, 28, 16, 3072, True),
    "Qwen/Qwen3-1.7B": _qwen3(2048, 28, 16, 6144, True),
    "Qwen/Qwen3-4B": _qwen3(2560, 36, 32, 9728, True),
    "Qwen/Qwen3-4B-Base": _qwen3(2560, 36, 32, 9728, True),
    "Qwen/Qwen3-4B-Instruct-2507": _qwen3(2560, 36, 32, 9728, True),
    "Qwen/Qwen3-4B-Thinking-2507": _qwen3(2560, 36, 32, 9728, True),
    "Qwen/Qwen3-8B": _qwen3(4096, 36, 32, 12288, False),
    "HuggingFaceTB/SmolLM2-135M-Instruct": {"vocab_size": 49152, "hidden_size": 576, "num_hidden_layers": 30,
                                            "num_attention_heads": 9, "num_key_value_heads": 3,
                                            "intermediate_size": 1536, "tie_word_embeddings": True},
    "jhu-clsp/mmBERT-base": {"params": 3.07e8, "vocab_size": 256000, "hidden_size": 768, "num_hidden_layers": 22,
                             "num_attention_heads": 12, "num_key_value_heads": 12, "intermediate_size": 1152},
}


def shape_from_config(config: Mapping[str, Any]) -> ModelShape:
    """The shape of a dense decoder (or encoder) from its ``config.json`` fields; ``params`` when given."""
    c = dict(config)
    h, layers, v = int(c["hidden_size"]), int(c["num_hidden_layers"]), int(c["vocab_size"])
    heads = int(c["num_attention_heads"])
    kv = int(c.get("num_key_value_heads") or heads)
    hd = int(c.get("head_dim") or h // heads)
    params = c.get("params")
    if params is None:
        inter = int(c.get("intermediate_size") or 4 * h)
        per_layer = h * heads * hd + 2 * h * kv * hd + heads * hd * h + 3 * h * inter + 2 * h
        params = v * h * (1 if c.get("tie_word_embeddings", True) else 2) + layers * per_layer + h
    return ModelShape(params=float(params), layers=layers, hidden=h, kv_heads=kv, head_dim=hd, vocab=v)


def model_shape(name: str, revision: str | None = None, gguf_file: str | None = None) -> ModelShape:
    """The shape of ``name``: from the built-in table, else its config read locally (a folder, the HF
    cache, a GGUF header); never downloads. Raises ``LookupError`` naming what is missing."""
    if name in KNOWN:
        return shape_from_config(KNOWN[name])
    return shape_from_config(_local_config(name, revision, gguf_file))


@functools.lru_cache(maxsize=32)
def _local_config(name: str, revision: str | None, gguf_file: str | None) -> dict[str, Any]:
    """A local model's text config as a dict. A GGUF header is read once per machine: its metadata holds the
    whole tokenizer (seconds to parse), so the config it gives is cached by the file's path, size and time."""
    kwargs: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file else {"revision": revision}

    def read() -> dict[str, Any]:
        from transformers import AutoConfig  # the dry-run's typo path stays free of transformers

        try:
            cfg = AutoConfig.from_pretrained(resolve_model_path(name), local_files_only=True, **kwargs)
        except Exception as exc:  # noqa: BLE001 - any failure means: shape unknown offline
            raise LookupError(f"the config of '{name}' is not available locally ({type(exc).__name__}); download it "
                              "once (huggingface-cli download <name> config.json) for a memory estimate") from exc
        cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        return {k: v for k, v in cfg.to_dict().items() if k in SHAPE_KEYS}

    try:
        file = Path(resolve_model_path(name)) / gguf_file if gguf_file else None
    except Exception:  # noqa: BLE001 - read() names what is missing
        file = None
    if file is None or not file.is_file():
        return read()
    stat = file.stat()
    return cached_json(cache_path("gguf-config", [str(file.resolve()), stat.st_size, stat.st_mtime_ns]), read)


SHAPE_KEYS = ("hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads", "num_key_value_heads",
              "head_dim", "intermediate_size", "tie_word_embeddings", "params")  # what shape_from_config reads


def device_budgets(device_memory_gb: float | str | None) -> dict[str, float]:
    """``{label: GiB}`` to check against: a number, a named class, or (None) the H100 and H200 classes."""
    if device_memory_gb is None:
        return {f"{k}-{DEVICE_CLASSES[k]:g}": DEVICE_CLASSES[k] for k in DEFAULT_CLASSES}
    if isinstance(device_memory_gb, str):
        key = device_memory_gb.lower()
        if key not in DEVICE_CLASSES:
            raise ValueError(f"agent_model.device_memory_gb: unknown device class {device_memory_gb!r}; use a number "
                             f"of GiB or one of {sorted(DEVICE_CLASSES)}")
        size = DEVICE_CLASSES[key]
        return {key if key.endswith(f"-{size:g}") else f"{key}-{size:g}": size}  # a100-80 stays a100-80
    if float(device_memory_gb) <= 0:
        raise ValueError(f"agent_model.device_memory_gb must be positive, got {device_memory_gb}")
    return {f"{float(device_memory_gb):g}": float(device_memory_gb)}


def estimate_memory(shape: ModelShape, compute_dtype: str, policy: str, agents: int, micro_batch_size: int,
                    completion_tokens: int, seq_tokens: int, generation_sequences: int, lora_params: float = 0.0,
                    reference: bool = False, critic: ModelShape | None = None,
                    device_memory_gb: float | str | None = None, engine: Mapping[str, Any] | None = None,
                    model_states: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, Any]:
    """Memory on one device holding every agent (see the module docstring for each term), in GiB.
    ``engine``: a colocated vLLM engine, ``{"fraction", "kv_cache_gib" (or None), "sleeps"}``.
    ``model_states``: bytes that replace the unsharded model states, ``{"per_agent": held per agent,
    "update": transient during one agent's update (instead of ``gradients_fp32``), "generation": transient
    while sampling}`` (DeepSpeed ZeRO: :func:`c3_plugin.run.cluster.zero_model_states`)."""
    if compute_dtype not in DTYPE_BYTES:
        raise ValueError(f"compute dtype must be one of {sorted(DTYPE_BYTES)}, got {compute_dtype!r}")
    b = DTYPE_BYTES[compute_dtype]
    p = shape.params
    lora = policy == "lora"
    trained = lora_params if lora else p
    per_agent = {"weights_fp32_master": 4 * trained, "optimizer_states": 8 * trained}
    in_update: dict[str, float] = {"gradients_fp32": 4 * trained}
    in_generation: dict[str, float] = {}
    if model_states is not None:
        per_agent = dict(model_states["per_agent"])
        in_update = dict(model_states.get("update", {}))
        in_generation = dict(model_states.get("generation", {}))
    # one copy per distinct model
    shared = {"lora_base": b * p if lora else 0.0, "reference": b * p * (1 if lora else agents) if reference else 0.0,
              "critic": 16 * critic.params if critic is not None else 0.0}
    copy = 2 * p if b == 2 and not lora else 0.0
    transient = {
        **in_update,
        "compute_copy": copy,
        "logits_micro_batch": micro_batch_size * (completion_tokens + 1) * shape.vocab * (b + (4 if b == 2 else 0) + 4),
        "activations_micro_batch": 17 * b * micro_batch_size * seq_tokens * shape.hidden * shape.layers,
        "kv_cache_generation": (2 * shape.layers * shape.kv_heads * shape.head_dim * b * generation_sequences
                                * seq_tokens),
        **in_generation,
    }
    held = agents * sum(per_agent.values()) + sum(shared.values())
    gathered = sum(in_generation.values())
    generation = transient["compute_copy"] + transient["kv_cache_generation"] + gathered
    update = sum(v for k, v in transient.items() if k != "kv_cache_generation" and k not in in_generation)
    total = (held + max(generation, update)) / GIB
    budgets = device_budgets(device_memory_gb)
    totals = {label: total for label in budgets}
    engine_gib: dict[str, float] = {}
    if engine is not None:
        for label, gib in budgets.items():
            kv = engine.get("kv_cache_gib")
            engine_gib[label] = (b * p / GIB + float(kv)) if kv is not None else float(engine["fraction"]) * gib
            during_update = update / GIB + (0.0 if engine.get("sleeps") else engine_gib[label])
            totals[label] = held / GIB + max(engine_gib[label] + gathered / GIB, during_update)
    out: dict[str, Any] = {
        "params_per_agent": p, "compute_dtype": compute_dtype, "policy": policy, "agents_on_device": agents,
        "per_agent_gib": {k: v / GIB for k, v in per_agent.items()},
        "shared_gib": {k: v / GIB for k, v in shared.items()},
        "transient_gib": {k: v / GIB for k, v in transient.items()},
        "phase_gib": {"generation": generation / GIB, "update": update / GIB},
        "total_gib": max(totals.values()),
        "fits": {label: totals[label] <= gib for label, gib in budgets.items()},
        "note": "excludes framework overhead (CUDA context, fragmentation): keep a few GiB of headroom",
    }
    if engine is not None:
        out.update(engine_gib=engine_gib, total_gib_by_device=totals,
                   phase_gib={"generation": None, "update": update / GIB})
    return out


def lora_parameter_estimate(shape: ModelShape, rank: int, target_modules: int) -> float:
    """Adapter parameters of one agent: ``rank x (in + out)`` per adapted module, each taken as ``H x H``."""
    return float(shape.layers * target_modules * rank * 2 * shape.hidden)


def memory_report(cfg: Any, workflow: Any) -> dict[str, Any]:
    """The dry-run's memory estimate for a run config (see the module docstring), or why there is none."""
    try:
        inputs = memory_inputs(cfg, workflow)
    except LookupError as exc:
        return {"status": "unknown", "reason": str(exc)}
    est = estimate_memory(**inputs)
    return {"status": "ok", "model": cfg.agent_model.name,
            "generation_sequences_per_call": inputs["generation_sequences"],
            "assumed_prompt_tokens": int(cfg.agent_model.prompt_tokens), **est}


def memory_inputs(cfg: Any, workflow: Any, ranks: int = 1) -> dict[str, Any]:
    """The keyword arguments of :func:`estimate_memory` for a run config; ``ranks`` data-parallel ranks
    share each rollout batch, so one ``generate`` call holds one rank's share of the instances.
    Raises ``LookupError`` when the model's shape is not available offline."""
    from comlrl.utils.reference_kl import reference_kl_enabled  # CoMLRL's import loads torch: only when planning

    m, a = cfg.agent_model, cfg.algo
    shape = model_shape(m.name, m.revision, m.gguf_file)
    critic = None
    if capabilities(a).decision_critic:  # MAPPO's critic: its own model, or a copy of agent 0's
        model = learned_critic(a).model
        critic = model_shape(model) if model else shape
    default_cap = int(getattr(a, "max_new_tokens", 256))
    caps = [int(workflow.roles[s.name].max_new_tokens or default_cap) for s in workflow.decision_steps]
    if capabilities(a).budget == "plan":
        widths = parse_plan(a.plan).branching(workflow.num_decisions)
        per_instance = max(int(_prod(widths[: u + 1])) for u in range(len(widths)))
        sequences = -(-int(a.instances_per_update) // int(ranks)) * per_instance
    else:  # CoMLRL's own sampling loops: one item at a time, num_generations samples
        sequences = int(getattr(a, "num_generations", 1))
    if getattr(a, "generation_batch_size", None):
        sequences = min(sequences, int(a.generation_batch_size))
    lora = cfg.agents.policy == "lora"
    # agents.policy: shared holds one model's states
    models = 1 if cfg.agents.policy == "shared" else workflow.num_agents
    return dict(shape=shape, compute_dtype=m.dtype, policy=cfg.agents.policy, agents=models,
                micro_batch_size=int(getattr(a, "micro_batch_size", 1)), completion_tokens=max(caps),
                seq_tokens=int(m.prompt_tokens) + sum(caps), generation_sequences=sequences,
                lora_params=lora_parameter_estimate(shape, cfg.agents.lora_r, len(cfg.agents.lora_target_modules))
                if lora else 0.0,
                reference=reference_kl_enabled(a) or float(getattr(a, "kl_reward_coef", 0.0) or 0.0) > 0, critic=critic,
                device_memory_gb=m.device_memory_gb,
                engine=({"fraction": a.vllm_gpu_memory_utilization, "kv_cache_gib": a.vllm_kv_cache_gb,
                         "sleeps": a.vllm_enable_sleep_mode}
                        if getattr(a, "generation_backend", "hf") == "vllm" and not getattr(a, "vllm_server_url", None)
                        else None))  # a vLLM server's engine lives on its own GPUs


def _prod(values: Any) -> float:
    out = 1.0
    for v in values:
        out *= v
    return out
