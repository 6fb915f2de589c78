"""The CPU demo's config (configs/math/demo_cpu.yaml, ``make demo``): its evaluation schedule gives the dashboard's
eval curve a point at every evaluation, and the head-to-heads that extend it keep their own schedule."""

from pathlib import Path

import pytest

from c3_plugin.core.config import load_config
from c3_plugin.core.curriculum import epoch_rows, phase_at
from c3_plugin.core.plan import parse_plan
from c3_plugin.run.budget import expected_budget
from c3_plugin.run.dry_run import prepare

ROOT = Path(__file__).resolve().parents[2]


def evaluation_steps(path: Path) -> tuple[list[int], object]:
    """The env steps of a workflow run's evaluations as its trainer schedules them, from the config alone: before
    training; CoMLRL's loop every ``eval_interval`` training items (item 0 of every epoch included); after the rollout
    batch that passes each multiple of the epoch's curriculum ``eval_every`` (env steps over the run); after
    training."""
    cfg = load_config(path)
    _, workflow, train, _ = prepare(cfg)
    a = cfg.algo
    phases, rows_per_epoch = epoch_rows(a.curriculum, int(a.num_train_epochs), train)
    leaves, ipu = parse_plan(a.plan).leaves(workflow.num_decisions), int(a.instances_per_update)
    steps, env = [0], 0
    for epoch, rows in enumerate(rows_per_epoch):
        every = phase_at(phases, epoch).eval_every if phases else 0
        for item in range(rows):
            if a.eval_interval and item % a.eval_interval == 0:
                steps.append(env)
            if (item + 1) % ipu == 0 or item + 1 == rows:  # a full batch, or the epoch's rest
                before, env = env, env + (item % ipu + 1) * leaves
                if every and env // every > before // every:
                    steps.append(env)
    assert env == expected_budget(cfg, workflow, train)["expected_env_steps"]  # the schedule walks the run's budget
    steps.append(env)
    return steps, cfg


def test_the_demo_evaluates_during_training_on_a_subset_and_before_after_on_all():
    """Five evaluations (the env steps a run of the demo profile logged eval/* at, with the tiny test model in place
    of SmolLM2): the dashboard's curve has five points; the ones during training cover 16 of the 48 eval items."""
    steps, cfg = evaluation_steps(ROOT / "configs/math/demo_cpu.yaml")
    assert steps == [0, 96, 160, 224, 248] and len(set(steps)) >= 4
    a = cfg.algo
    assert (a.eval_num_samples, a.final_eval_num_samples, a.eval_batch_size) == (16, 0, 8)
    assert [s["size"] for s in cfg.dataset.eval] == [48]
    for name in ("magrpo", "mappo"):  # c3 compare on the demo: every algorithm gets the same schedule
        other = load_config(ROOT / "configs/math/demo_cpu.yaml", overrides=[f"algorithm={name}"]).algo
        assert (other.curriculum, other.eval_num_samples, other.final_eval_num_samples) == (a.curriculum, 16, 0)


@pytest.mark.parametrize("name, expected", [("h2h_cpu", [0, 128, 280, 408, 496]), ("h2h_frozen_cpu", [0, 128, 248])])
def test_the_head_to_heads_extending_the_demo_keep_their_own_schedule(name, expected):
    """Their curriculum replaces the demo's, and every evaluation covers all 48 items (as their comments say). h2h_cpu's
    second epoch starts at 248 env steps (31 rows), so the batches that pass 256 and 384 end at 280 and 408."""
    steps, cfg = evaluation_steps(ROOT / f"configs/math/{name}.yaml")
    assert steps == expected
    assert (cfg.algo.eval_num_samples, cfg.algo.final_eval_num_samples, cfg.algo.eval_batch_size) == (0, 0, 48)
