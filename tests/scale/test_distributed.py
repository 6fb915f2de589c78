"""Data parallelism for real: torchrun processes on gloo with DeepSpeed ZeRO (CPU), tiny models.

Every test launches ``python -m torch.distributed.run`` on the scripts in ``tests/distributed/``."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "tests" / "distributed"
pytestmark = [pytest.mark.timeout(900), pytest.mark.torchrun]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1", "WANDB_MODE": "offline", "PYTHONPATH": str(ROOT)}


def torchrun(script: str, *args: str, nproc: int = 2, check: bool = True, extra: tuple[str, ...] = (),
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    launch = extra or ("--nproc_per_node", str(nproc), "--master_addr", "127.0.0.1", "--master_port", str(_port()))
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", *launch, str(SCRIPTS / script), *args],
                          cwd=ROOT, env={**_env(), **(env or {})}, capture_output=True, text=True, timeout=800)
    if check and proc.returncode != 0:
        raise AssertionError(f"torchrun {script} failed "
                             f"({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return proc


def tiny_config(out: Path, algorithm: str = "c3", epochs: int = 2, rows: int = 8, deepspeed: dict | None = None,
                **algo) -> str:
    section = {"num_train_epochs": epochs, "max_new_tokens": 3, "instances_per_update": 2, "eval_num_samples": 0,
               "temperature": 1.0, **({"plan": "tree [2, 2]"} if algorithm == "c3" else {}), **algo}
    return json.dumps({"algorithm": algorithm, "domain": "template", "workflow": {"name": "echo_pair"},
                       "dataset": {"train": {"size": rows}, "eval": [{"name": "echo", "size": 5}]},
                       "output": {"base_dir": str(out), "run_name": "run", "verbose": False, "plot": False,
                                  "resume": "auto"},
                       "deepspeed": deepspeed or {}, algorithm: section})


def final_weights(run: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    out = {}
    for agent in sorted((run / "final").glob("agent_*")):
        out.update({f"{agent.name}.{k}": v for k, v in load_file(str(agent / "model.safetensors")).items()})
    assert out, f"no final weights under {run}"
    return out


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def equivalence_runs(tmp_path_factory):
    """The one-process reference, and one torchrun launch of 2 ranks running every ZeRO case in turn."""
    folder = tmp_path_factory.mktemp("equivalence")
    subprocess.run([sys.executable, str(SCRIPTS / "update_equivalence.py"), str(folder / "one.pt")], cwd=ROOT,
                   env=_env(), check=True)
    torchrun("update_equivalence.py", str(folder / "two.pt"), "2,3,2o")
    return folder


@pytest.mark.parametrize("case", ["2", "3", "2o"], ids=["zero2", "zero3", "zero2-cpu-offload"])
def test_two_ranks_update_equals_one_process_on_the_combined_batch(equivalence_runs, case):
    """3 PPO updates (2 epochs each, micro-batches of 2, token-mean, clipping at 1.0) of a tiny model on 8 fixed
    messages: 2 ZeRO ranks holding 4 each end with the parameters one process gets from all 8."""
    a, b = torch.load(equivalence_runs / "one.pt"), torch.load(equivalence_runs / f"two.{case}.pt")
    assert b["world"] == 2 and a["world"] == 1
    from c3_plugin.run.testing import tiny_model, tiny_tokenizer

    init = tiny_model(tiny_tokenizer(), seed=0).state_dict()
    moved = max(float((a["state"][k] - init[k]).abs().max()) for k in init)
    assert moved > 1e-3  # the updates did change the weights
    diff = max(float((a["state"][k] - b["state"][k]).abs().max()) for k in a["state"])
    assert diff < 1e-5, diff
    assert b["scaled"] == pytest.approx(a["scaled"], abs=1e-9)  # batch_zscore over both ranks = over the whole batch
    from c3_plugin.core.credit import normalize_advantages

    assert a["scaled"] == pytest.approx(normalize_advantages(np.array(a["advantages"]), "batch_zscore").tolist())
    for sa, sb in zip(a["stats"], b["stats"]):  # the logged statistics are the global ones
        assert sb["samples"] == sa["samples"] == 8 and sb["optimizer_steps"] == sa["optimizer_steps"]
        assert sb["loss"] == pytest.approx(sa["loss"],
                                           abs=1e-5) and sb["grad_norm"] == pytest.approx(sa["grad_norm"], rel=1e-4)
    assert b["offload"] == case.endswith("o")  # the case ran as named


@pytest.mark.parametrize("stage,scaling", [(2, "none"), (3, "batch_zscore")], ids=["zero2", "zero3-batch_zscore"])
def test_two_ranks_train_the_same_budget_and_log_once(tmp_path, stage, scaling):
    """A whole C3 run on 2 ranks: the one-process budget, one log row per update, gathered evaluation; under ZeRO-3
    generation runs on gathered weights (ranks decode different numbers of tokens) and batch z-scoring is global."""
    from c3_plugin.core.config import load_config
    from c3_plugin.run.budget import expected_budget
    from c3_plugin.run.dry_run import prepare

    cfg_json = tiny_config(tmp_path, deepspeed={"zero_stage": stage}, advantage_scaling=scaling)
    torchrun("train_tiny.py", cfg_json)
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    cfg = load_config(data=json.loads(cfg_json))
    _, workflow, train, _ = prepare(cfg)
    budget = expected_budget(cfg, workflow, train)
    assert summary["world_size"] == 2
    assert summary["env_steps"] == budget["expected_env_steps"] == 64
    assert summary["totals"]["messages"] == budget["expected_messages"]
    rows = metrics(run)
    train_rows = [r for r in rows if "train/update_step" in r]
    assert [r["train/update_step"] for r in train_rows] == list(range(1, 9))  # rank 0 alone logs, once per update
    assert [r["env_step"] for r in train_rows] == [8.0 * k for k in range(1, 9)]
    assert all(r["budget/env_steps"] == 8 for r in train_rows)  # this batch's env steps, summed over both ranks
    assert all(r["train/agent0/samples"] == 4 for r in train_rows)  # 2 instances x 2 Planner alternatives, both ranks
    assert sum("eval/reward_mean" in r for r in rows) == 2  # before and after, the eval shards gathered on rank 0
    assert not list(run.glob("traces*"))
    ckpt = run / "checkpoints" / "checkpoint-2" / "deepspeed"
    assert {p.name for p in ckpt.glob("rng_rank*.pt")} == {"rng_rank0.pt", "rng_rank1.pt"}
    assert (ckpt / "agent0").is_dir() and (ckpt / "agent1").is_dir()
    final_weights(run)


def test_killed_rank_resumes_from_its_checkpoint_with_no_lost_rollout(tmp_path):
    """A rank SIGKILLed mid-way through epoch 2 (update 6 of 8): the run resumes from checkpoint-1 and ends with the
    parameters, budget and log of a run that was never interrupted (every rank's RNG streams are restored)."""
    whole, crashed = tmp_path / "whole", tmp_path / "crashed"
    torchrun("train_tiny.py", tiny_config(whole))
    proc = torchrun("train_tiny.py", tiny_config(crashed), "1:6", check=False)
    assert proc.returncode != 0
    run = crashed / "run"
    assert not (run / "summary.json").exists() and (run / "checkpoints" / "checkpoint-1").is_dir()
    assert not (run / "checkpoints" / "checkpoint-2").exists()
    assert max(r["env_step"] for r in metrics(run)) > 32  # it had logged updates of epoch 2 before dying
    torchrun("train_tiny.py", tiny_config(crashed))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_steps"] == 64 and summary["updates"] == 8
    steps = [r["env_step"] for r in metrics(run) if "train/update_step" in r]
    assert steps == [8.0 * k for k in range(1, 9)]  # the interrupted epoch's rows were replaced, none lost or doubled
    a, b = final_weights(whole / "run"), final_weights(run)
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < 1e-6


def test_two_node_loopback_rendezvous_trains_mappo(tmp_path):
    """Two "nodes" (one process each) meet through a c10d rendezvous on 127.0.0.1 and train MAPPO: its critic
    runs under DeepSpeed too."""
    port = _port()
    cfg_json = tiny_config(tmp_path, algorithm="mappo", epochs=1, critic_warmup_updates=1)
    common = ["--nnodes", "2", "--nproc_per_node", "1", "--rdzv_backend", "c10d", "--rdzv_endpoint",
              f"127.0.0.1:{port}", "--rdzv_id", "loopback"]
    procs = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *common, "--node_rank", str(n),
                               str(SCRIPTS / "train_tiny.py"), cfg_json], cwd=ROOT, env=_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for n in range(2)]
    outs = [p.communicate(timeout=800)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][-4000:] + outs[1][-4000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["env_steps"] == 8 * 8
    rows = [r for r in metrics(tmp_path / "run") if "train/update_step" in r]
    assert len(rows) == 4 and rows[0]["critic/warmup"] == 1.0 and "train/agent0/loss" in rows[-1]
    assert all(r["critic/value_loss"] >= 0 for r in rows)


def test_torchrun_refuses_what_it_cannot_split(tmp_path):
    proc = torchrun("train_tiny.py", tiny_config(tmp_path, instances_per_update=3), check=False)
    assert proc.returncode != 0
    assert "instances_per_update" in proc.stderr and "multiple of 2" in proc.stderr


def test_the_equal_steps_setting_leaves_no_step_empty_over_the_ranks(tmp_path):
    """minibatches_per_ppo_epoch: 3 on ranks holding 1 and 2 messages: each rank's larger minibatches start after the
    messages of the ranks before it, so every step trains on one message (split per rank alone: 2, 1, 0)."""
    torchrun("minibatch_split.py", str(tmp_path / "split.json"))
    out = json.loads((tmp_path / "split.json").read_text())
    assert out["per_rank"] == [[1, 0, 0], [0, 1, 1]] and out["global"] == [1, 1, 1]
