"""``c3 compare`` end to end on tiny models saved to a folder (each run is its own ``python -m c3_plugin train``
process), and the ``c3`` console script."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from c3_plugin.compare import aggregate, compare
from c3_plugin.config import ConfigError
from c3_plugin.stats import summarize
from c3_plugin.testing import template_config

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def base_config(tmp_path_factory):
    folder = tmp_path_factory.mktemp("compare")
    cfg = template_config(
        folder, dataset={"train": {"size": 4}, "eval": [{"name": "echo", "size": 3}, {"name": "copy", "size": 2, "seed": 9}]},
        output={"verbose": False, "plot": False, "save_model": False},
        c3={"num_train_epochs": 1, "max_new_tokens": 3, "instances_per_update": 2, "plan": "tree [2, 4]"},
        magrpo={"num_train_epochs": 1, "max_new_tokens": 3, "instances_per_update": 2, "plan": "independent 8"})
    path = folder / "base.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.fixture(scope="module")
def comparison(base_config, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "h2h"
    logs: list[str] = []
    result = compare(base_config, ["c3", "magrpo"], [0, 1], out, log=logs.append)
    return out, result, logs


def test_compare_runs_every_algorithm_and_seed_once_and_aggregates(base_config, comparison):
    out, result, logs = comparison
    assert "effective_settings" in logs[0] and '"differ"' in logs[0]  # what differs is printed first
    for run in ("c3-s0", "c3-s1", "magrpo-s0", "magrpo-s1"):
        summary = json.loads((out / run / "summary.json").read_text())
        assert summary["env_steps"] == 4 * 8 and summary["wall_s"] > 0 and summary["peak_rss_gib"] > 0
        assert json.loads((out / run / "config.json").read_text())["wandb"]["group"] == "h2h"
    assert result["metrics"] == ["eval/copy/accuracy", "eval/echo/accuracy"]
    for metric in result["metrics"]:
        finals = {algo: [json.loads((out / f"{algo}-s{s}" / "summary.json").read_text())["eval_after"][metric] for s in (0, 1)]
                  for algo in ("c3", "magrpo")}
        for algo, values in finals.items():
            assert result["final"][metric]["algorithms"][algo] == summarize(values)
        pair = result["final"][metric]["pairs"]["c3 vs magrpo"]
        assert pair["n"] == 2 and "p_holm" in pair
        assert pair["diffs"] == pytest.approx([c - m for c, m in zip(finals["c3"], finals["magrpo"])])  # paired by seed
    assert result["costs"]["env_steps"]["c3"]["mean"] == 32
    assert json.loads((out / "summary.json").read_text())["metrics"] == result["metrics"]
    assert "| eval/echo/accuracy |" in (out / "summary.md").read_text()
    # a finished comparison is not redone; a run without its summary (killed) runs again, alone
    (out / "magrpo-s1" / "summary.json").unlink()
    logs = []
    compare(base_config, ["c3", "magrpo"], [0, 1], out, log=logs.append)
    assert sum("finished, kept" in line for line in logs) == 3 and any("magrpo-s1: " in line for line in logs)
    assert (out / "magrpo-s1" / "summary.json").exists()


def test_dashboard_is_one_self_contained_page(comparison):
    from c3_plugin.dashboard import write_dashboard

    out, result, _ = comparison
    page = write_dashboard(out).read_text()
    assert page.count("<svg") >= 4  # two suites' eval curves, training curves, cost bars
    for text in ("eval/echo/accuracy", "c3 vs magrpo", "Credit diagnostics", "Costs per run", "href='c3-s0/'"):
        assert text in page, text
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org", "")  # nothing to fetch or run
    one_run = write_dashboard(out / "c3-s0")  # a single run folder (make demo writes the demo run's)
    assert "<svg" in one_run.read_text() and "Results" not in one_run.read_text()


@pytest.mark.browser
def test_dashboard_renders_in_headless_chromium_without_console_errors(comparison, tmp_path):
    """Chromium from Debian's packages (installed here when missing, with apt and root) loads the page: no console
    errors, and the screenshot is not blank (the charts are drawn)."""
    import os
    import shutil

    import numpy as np
    from PIL import Image

    from c3_plugin.dashboard import write_dashboard

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        assert shutil.which("apt-get") and os.geteuid() == 0, "no Chromium and no apt/root to install it: apt-get install chromium"
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, capture_output=True, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], check=True, capture_output=True, env=env)
        browser = shutil.which("chromium")
    page = write_dashboard(comparison[0])
    shot = tmp_path / "dashboard.png"
    proc = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
                           "--window-size=1280,2400", f"--screenshot={shot}", page.resolve().as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert shot.exists(), proc.stderr[-3000:]
    console = [line for line in proc.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == [], console
    pixels = np.asarray(Image.open(shot).convert("L"), dtype=float)
    assert pixels.std() > 10 and (pixels < 128).mean() > 0.005  # lines, text and bars drawn on the white page


def test_compare_refuses_runs_with_different_budgets(base_config, tmp_path):
    with pytest.raises(ConfigError, match="expected_env_steps: c3 has 32, magrpo has 16"):
        compare(base_config, ["c3", "magrpo"], [0], tmp_path / "bad", overrides=["magrpo.plan=independent 4"], run=False)
    with pytest.raises(ConfigError, match="at least two algorithms"):
        compare(base_config, ["c3"], [0], tmp_path / "bad")


def test_aggregate_without_finished_runs_names_the_fix(tmp_path):
    with pytest.raises(ConfigError, match="no finished run"):
        aggregate(tmp_path, ["c3", "magrpo"], [0])


def test_console_script_lists_its_commands_and_dry_runs(tmp_path):
    out = subprocess.run([sys.executable, "-m", "c3_plugin", "--help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert all(cmd in out for cmd in ("train", "dry-run", "compare", "dashboard", "diagnose", "plan-budget", "audit"))
    spec = tmp_path / "ws.json"  # offline, the W&B workspace is written as its specification
    subprocess.run([sys.executable, "-m", "c3_plugin", "dashboard", "--wandb", "me/proj", "--group", "h2h", "--metric",
                    "eval/math500/accuracy", "--out", str(spec)], cwd=ROOT, capture_output=True, text=True, check=True)
    written = json.loads(spec.read_text())
    assert written["entity"] == "me" and "h2h" in json.dumps(written["spec"]) and "eval/math500/accuracy" in json.dumps(written)
    dry = subprocess.run([sys.executable, "-m", "c3_plugin", "dry-run", "--config", "configs/math/demo_cpu.yaml"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(dry)["status"] == "ok"


def test_compare_hands_each_run_to_the_launcher(base_config, tmp_path):
    """--launcher: each run is a torchrun job of 2 data-parallel ranks (the same budget, rank 0's summary)."""
    out = tmp_path / "launched"
    launcher = f"{sys.executable} -m torch.distributed.run --standalone --nproc_per_node 2"
    result = compare(base_config, ["c3", "magrpo"], [0], out, launcher=launcher, log=lambda *_: None)
    for run in ("c3-s0", "magrpo-s0"):
        summary = json.loads((out / run / "summary.json").read_text())
        assert summary["world_size"] == 2 and summary["env_steps"] == 32
    assert result["costs"]["env_steps"]["magrpo"]["mean"] == 32
