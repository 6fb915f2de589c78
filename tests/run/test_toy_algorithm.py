"""A new algorithm is one trainer file plus one registry line (ARCHITECTURE.md, "A new algorithm"): a toy defined here,
outside the package, registered with ``registry.register``, dry-runs through the entry the ``train_*.py`` scripts use
(``c3_plugin.tools.cli.main --dry-run``) and trains one step through the run path, with its own credit."""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import yaml

from c3_plugin.core import registry
from c3_plugin.core.config import load_config
from c3_plugin.run.testing import template_config
from c3_plugin.run.train import train
from c3_plugin.tools.cli import main
from c3_plugin.trainers.magrpo import WorkflowMAGRPOConfig, WorkflowMAGRPOTrainer

OFFSET = 0.25  # the toy's credit: MAGRPO's group baseline, every advantage shifted by this much


@dataclass
class ToyConfig(WorkflowMAGRPOConfig):
    """MAGRPO's fields and one of its own."""

    credit_fields: ClassVar[tuple[str, ...]] = ("plan", "advantage_mode", "toy_offset")
    estimator_description: ClassVar[str] = "group baseline shifted by {toy_offset}"
    estimator_rules: ClassVar[tuple[str, ...]] = ("clip_high_equals_clip",)

    toy_offset: float = 0.0  # added to every message's advantage


class ToyTrainer(WorkflowMAGRPOTrainer):
    """MAGRPO's advantages plus ``toy_offset``: a credit no built-in algorithm produces."""

    default_config_cls = ToyConfig
    algorithm_name = "Toy"

    def compute_advantages(self, rollout):
        return [(nodes, adv + float(self.args.toy_offset)) for nodes, adv in super().compute_advantages(rollout)]


@pytest.fixture
def toy():
    registry.register("toy", ToyTrainer)  # the one registry line
    try:
        yield "toy"
    finally:
        registry.unregister("toy")
    assert "toy" not in registry.algorithms()


def toy_config(folder: Path) -> dict:
    section = {"num_train_epochs": 1, "max_new_tokens": 2, "instances_per_update": 4, "plan": "independent 2",
               "advantage_scaling": "none"}
    dataset = {"train": {"size": 4}, "eval": [{"name": "echo", "size": 2}]}
    return template_config(folder, algorithm="toy", dataset=dataset,
                           toy={**section, "toy_offset": OFFSET}, magrpo=section,
                           output={"base_dir": str(folder / "outputs"), "run_name": "toy", "verbose": False,
                                   "plot": False, "save_model": False, "checkpoint_interval": 0})


def test_register_refuses_a_taken_name_and_a_trainer_without_a_config(toy):
    assert toy in registry.algorithms() and registry.resolve(toy) == (ToyConfig, ToyTrainer)
    assert registry.capabilities(ToyConfig) == registry.WORKFLOW  # inherited from the workflow config it extends
    assert toy in registry.workflow_algorithms()
    with pytest.raises(ValueError, match="exists already"):
        registry.register("c3", ToyTrainer)
    with pytest.raises(ValueError, match="exists already"):
        registry.register(toy, ToyTrainer)
    with pytest.raises(TypeError, match="default_config_cls"):
        registry.register("other_toy", object)


def test_a_registered_toy_dry_runs_through_the_scripts_entry_and_trains_with_its_own_credit(toy, tmp_path, capsys):
    data = toy_config(tmp_path)
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(data))
    written = tmp_path / "report.json"
    assert main(["--config", str(path), "--dry-run", "--report", str(written)], algorithm=toy) == 0  # train_<name>.py
    assert "algorithms toy, magrpo differ in: " in capsys.readouterr().out  # the summary a person reads
    report = json.loads(written.read_text())
    assert report["algorithm"] == toy and report["status"] in ("ok", "unverified"), report.get("errors")
    assert report["expected_env_steps"] == 4 * 2 and report["trained_decisions"]  # a plan's budget, every decision
    assert report["cluster"]["launcher"] == "python" and report["gpu_hours"]["status"] == "ok"
    optimisation = report["optimisation"]  # the toy and the workflow algorithm whose section the config holds
    assert list(optimisation["settings"]) == [toy, "magrpo"]
    assert optimisation["settings"][toy]["estimator"] == f"group baseline shifted by {OFFSET}"
    assert "toy_offset" in optimisation["credit_fields"][toy] and "toy_offset" in optimisation["differ"]
    assert "toy_offset" not in optimisation["uncontrolled"]  # the toy's credit: a head-to-head may differ in it

    summary = train(load_config(data=data))  # the run path (train_<name>.py without --dry-run)
    assert summary["algorithm"] == toy and summary["updates"] == 1 and summary["env_steps"] == 4 * 2
    rows = [json.loads(line) for line in (Path(summary["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    updates = [r for r in rows if "train/update_step" in r]
    assert len(updates) == 1
    # MAGRPO's mean baseline averages to 0 over each instance's runs: the mean advantage is the toy's offset alone
    np.testing.assert_allclose(updates[0]["train/advantage_mean"], OFFSET, atol=1e-6)
