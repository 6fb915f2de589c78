"""Every GPU check in one script, for the device machine (one H200): a bf16 training step of
C3 and of MAGRPO on a ~0.9B-parameter Llama-architecture team (random weights: the machine
has no hub access) at the paper's learning rate 1e-6 (bf16 compute over fp32 masters: the share
of master weights the run changed), generation throughput, update time, peak GPU memory against
the dry-run's estimate (:mod:`c3_plugin.run.memory`), a bf16 DeepSpeed ZeRO-2 PPO step of one
Qwen3-4B-shaped agent against the cluster plan's estimate (:mod:`c3_plugin.run.cluster`, within 15%), and
whether vLLM is importable (the CUDA vLLM wheel is too large to carry to the device machine). Writes
gpu_check.json into --out and prints the figures.

Usage: python bench/gpu_check.py --out DIR [--instances 16] [--reasoner 256] [--actor 128]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch


def team(tok, n, cfg_kwargs, device):
    from transformers import LlamaConfig, LlamaForCausalLM

    models = []
    for seed in range(n):
        torch.manual_seed(seed)
        cfg = LlamaConfig(vocab_size=len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                          bos_token_id=None, **cfg_kwargs)
        with torch.device(device):
            m = LlamaForCausalLM(cfg).to(torch.bfloat16)
        m.generation_config.pad_token_id, m.generation_config.eos_token_id = tok.pad_token_id, tok.eos_token_id
        models.append(m)
    return models


def run(algorithm, tok, models, ds, args_kwargs):
    from c3_plugin.trainers import C3Config, C3Trainer, WorkflowMAGRPOConfig, WorkflowMAGRPOTrainer
    from domains.math import math_workflow

    cls, cfg_cls = (C3Trainer, C3Config) if algorithm == "c3" else (WorkflowMAGRPOTrainer, WorkflowMAGRPOConfig)
    wf = math_workflow("reasoner_actor").with_templates({}, max_new_tokens=args_kwargs.pop("per_role"))
    trainer = cls(agents=models, tokenizer=tok, train_dataset=ds, workflow=wf, args=cfg_cls(**args_kwargs),
                  reward_func=lambda *c, batch_items=None, prompts=None: [float(len(x) % 2) for x in c[-1]])
    trainer.verbose = False
    start = [torch.cat([p.detach().reshape(-1) for p in m.parameters()]).cpu() for m in trainer.agents]
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t = time.perf_counter()
    trainer.train()
    torch.cuda.synchronize()
    wall = time.perf_counter() - t
    changed = [float((torch.cat([p.detach().reshape(-1) for p in m.parameters()]).cpu() != s0).float().mean())
               for m, s0 in zip(trainer.agents, start)]
    rows = [h for h in trainer.history if "train/update_step" in h]
    tokens = trainer.totals["tokens_generated"]
    return {"algorithm": algorithm, "batches": len(rows), "env_steps": trainer.env_step,
            "messages": trainer.totals["messages"], "tokens_generated": tokens, "wall_s": wall,
            "rollout_s": sum(r["time/rollout_s"] for r in rows), "update_s": sum(r["time/update_s"] for r in rows),
            "gen_tokens_per_s": tokens / max(sum(r["time/rollout_s"] for r in rows), 1e-9),
            "peak_gpu_gib": torch.cuda.max_memory_allocated() / 2**30,
            "loss_finite": all(r.get("train/loss") is not None for r in rows),
            "master_dtype": str(next(trainer.agents[0].parameters()).dtype),
            "compute_dtype": str(trainer.compute_dtypes[0]), "share_of_master_weights_changed": changed}


def estimate(models, tok, args_kwargs, prompt_tokens=256):
    """The dry-run's memory estimate for this run (c3_plugin.run.memory), in GiB."""
    from c3_plugin.run.memory import ModelShape, estimate_memory

    cfg = models[0].config
    shape = ModelShape(params=sum(p.numel() for p in models[0].parameters()), layers=cfg.num_hidden_layers,
                       hidden=cfg.hidden_size, kv_heads=cfg.num_key_value_heads,
                       head_dim=cfg.hidden_size // cfg.num_attention_heads, vocab=cfg.vocab_size)
    caps = list(args_kwargs["per_role"].values())
    per_instance = 8  # both plans end with 8 sequences per instance at their widest depth
    return estimate_memory(shape, "bfloat16", "per_agent", len(models), args_kwargs["micro_batch_size"], max(caps),
                           prompt_tokens + sum(caps), args_kwargs["instances_per_update"] * per_instance)["total_gib"]


def zero_check(device: str, smoke: bool) -> dict:
    """One PPO update of a Qwen3-4B-shaped agent (random weights, bf16 compute over fp32 masters) under a
    one-process DeepSpeed ZeRO-2 engine: peak GPU memory against the cluster plan's estimate."""
    import numpy as np
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from c3_plugin.core.config import DeepSpeedSection
    from c3_plugin.run.cluster import zero_model_states
    from c3_plugin.run.memory import ModelShape, estimate_memory
    from c3_plugin.scale import distributed as dp
    from c3_plugin.scale.precision import keep_fp32_masters
    from c3_plugin.trainers.update import PolicySample, ppo_update

    dims = dict(vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                num_attention_heads=32, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True,
                max_position_embeddings=4096)
    prompt, completion, messages, micro = 512, 512, 4, 2
    if smoke:
        dims.update(vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                    num_key_value_heads=2, head_dim=16)
        prompt, completion = 16, 16
    cfg = Qwen3Config(**dims)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    keep_fp32_masters(model)
    params = [p for p in model.parameters() if p.requires_grad]
    count = sum(p.numel() for p in params)
    section = DeepSpeedSection(enabled=True, zero_stage=2)
    dp.init(section.dist_backend, single=True)
    torch.cuda.reset_peak_memory_stats()
    engine = dp.make_engine(model, params, 1e-6, section, 1.0, {"weight_decay": 0.01})
    rng = np.random.default_rng(0)
    samples = [PolicySample(rng.integers(10, dims["vocab_size"], size=prompt).tolist(),
                            rng.integers(10, dims["vocab_size"], size=completion).tolist(), [-5.0] * completion,
                            float(rng.normal())) for _ in range(messages)]
    args = type("A", (), dict(ppo_epochs=1, minibatch_size=None, micro_batch_size=micro, temperature=1.0, clip_eps=0.2,
                              clip_eps_high=None, max_grad_norm=1.0, loss_aggregation="token_mean",
                              importance_sampling_cap=None))()
    t = time.perf_counter()
    stats = ppo_update(model, None, samples, args, rng, pad_id=0, engine=engine)
    torch.cuda.synchronize()
    wall = time.perf_counter() - t
    shape = ModelShape(params=count, layers=dims["num_hidden_layers"], hidden=dims["hidden_size"],
                       kv_heads=dims["num_key_value_heads"], head_dim=dims["head_dim"], vocab=dims["vocab_size"])
    est = estimate_memory(shape, "bfloat16", "per_agent", 1, micro, completion, prompt + completion, 0,
                          device_memory_gb=141.0, model_states=zero_model_states(count, 2, 1))
    expected = est["total_gib"]
    peak = torch.cuda.max_memory_allocated() / 2**30
    return {"params": count, "zero_stage": 2, "world": 1, "update_s": wall,
            "loss_finite": bool(np.isfinite(stats["loss"])), "peak_gpu_gib": peak, "estimated_gib": expected,
            "measured_over_estimated": peak / expected if expected else None,
            "within_15_percent": bool(expected and abs(peak / expected - 1) <= 0.15)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--instances", type=int, default=16)
    ap.add_argument("--reasoner", type=int, default=256)
    ap.add_argument("--actor", type=int, default=128)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU: checks this script, not the GPU")
    args = ap.parse_args()
    device = "cpu" if args.smoke else "cuda"
    assert args.smoke or torch.cuda.is_available(), "no CUDA device"
    if args.smoke:
        for name in ("synchronize", "reset_peak_memory_stats", "empty_cache"):
            setattr(torch.cuda, name, lambda *a, **k: None)
        torch.cuda.max_memory_allocated = lambda *a, **k: 0
        torch.cuda.get_device_name = lambda *a: "cpu (smoke)"
        torch.cuda.is_bf16_supported = lambda *a: False
    from datasets import Dataset

    from c3_plugin.run.testing import tiny_tokenizer

    tok = tiny_tokenizer()
    if not args.smoke:
        tok.add_tokens([f"<w{i}>" for i in range(32000 - len(tok))])  # a realistic vocabulary size for the LM head
    arch = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=16, num_attention_heads=16,
                num_key_value_heads=8, max_position_embeddings=4096, tie_word_embeddings=False)
    if args.smoke:
        arch.update(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                    num_key_value_heads=2)
    ds = Dataset.from_list([{"id": f"p{i}", "prompt": f"What is {i} + {i}?", "question": f"What is {i} + {i}?",
                             "answer": str(2 * i)}
                            for i in range(2 * args.instances)])
    report = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
              "bf16": torch.cuda.is_bf16_supported()}
    results = []
    # a discarded warm-up (CUDA context, kernels, allocator), then MAGRPO before C3 so that any
    # residual warm-up favours the baseline
    for algorithm, plan in (("c3", "tree [2, 4]"), ("magrpo", "independent 8"), ("c3", "tree [2, 4]")):
        models = team(tok, 2, arch, device)
        report["params_per_agent_m"] = sum(p.numel() for p in models[0].parameters()) / 1e6
        kwargs = dict(num_train_epochs=1, plan=plan, instances_per_update=args.instances, max_new_tokens=args.actor,
                      micro_batch_size=32, agent_devices=f"{device}:0" if device == "cuda" else "cpu",
                      agent_learning_rate=1e-6, generation_batch_size=None,
                      per_role={"Reasoner": args.reasoner, "Actor": args.actor})
        if not results and not report.get("warmed_up"):
            kwargs.update(instances_per_update=2, max_new_tokens=8, per_role={"Reasoner": 8, "Actor": 8},
                          num_train_epochs=1)
            run(algorithm, tok, models, ds.select(range(2)), kwargs)
            report["warmed_up"] = True
        else:
            expected = estimate(models, tok, kwargs)
            results.append(run(algorithm, tok, models, ds, kwargs))
            results[-1]["estimated_gib"] = expected
            results[-1]["measured_over_estimated"] = results[-1]["peak_gpu_gib"] / expected
        del models
        torch.cuda.empty_cache()
    report["runs"] = results
    report["zero2_4b_step"] = zero_check(device, args.smoke)
    base, c3 = results
    report["tokens_ratio_c3_over_magrpo"] = c3["tokens_generated"] / base["tokens_generated"]
    report["wall_ratio_c3_over_magrpo"] = c3["wall_s"] / base["wall_s"]
    report["rollout_ratio_c3_over_magrpo"] = c3["rollout_s"] / base["rollout_s"]
    try:
        import vllm  # noqa: F401

        report["vllm"] = f"importable {vllm.__version__}"
    except ImportError as exc:
        report["vllm"] = f"not installed on the device ({exc}); the vllm extra was not exercised"
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "gpu_check.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
