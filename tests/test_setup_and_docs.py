"""What the docs promise holds: --override takes YAML flow style as well as Python literals, make setup says what it
compiles while DeepSpeed's ops build, the README names wandb.enabled as the W&B switch, and the template shows a
merger that the dry-run exercises."""

import subprocess
from pathlib import Path

from c3_plugin.core.config import load_config, parse_value
from c3_plugin.run.dry_run import dry_run_report

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "domains" / "template" / "example.yaml"


def test_override_takes_yaml_as_well_as_python_literals():
    assert parse_value("{Planner: 8, Writer: 4}") == {"Planner": 8, "Writer": 4}
    assert parse_value("[a, b]") == ["a", "b"] and parse_value("{'A': 4}") == {"A": 4} and parse_value("2e-6") == 2e-6
    assert parse_value("{not yaml") == "{not yaml" and parse_value("plain") == "plain"
    cfg = load_config(TEMPLATE, ["workflow.max_new_tokens={Planner: 6, Writer: 3}"])
    assert cfg.raw["workflow"]["max_new_tokens"] == {"Planner": 6, "Writer": 3}


def test_make_setup_prints_progress_while_deepspeeds_ops_compile():
    out = subprocess.run(["make", "-n", "--no-print-directory", "deepspeed-ops", "PY=python", "DS_OPS=A B"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60).stdout
    assert "[setup] compiling DeepSpeed's CPU ops (A B), once: 40-60 s each on 2 cores" in out
    command = next(line for line in out.splitlines() if line.startswith("python -c"))
    assert 'print(f"[setup]   {i}/{len(sys.argv) - 1} building {n} ...", flush=True)' in command
    assert 'print(f"[setup]   {n} ready ({time.time() - t:.0f} s)", flush=True)' in command


def test_readme_names_wandb_enabled_as_the_switch():
    readme = (ROOT / "README.md").read_text()
    assert "`wandb.enabled: true` is the switch that logs to W&B" in readme
    assert "YAML flow style (`{Planner: 8, Writer: 4}`" in readme


def test_the_template_shows_a_merger_the_dry_run_exercises():
    from domains.template import DOMAIN, merger

    assert DOMAIN.merger is merger and merger({"Writer": "apple.", "Checker": " apple"}) == "apple"
    assert DOMAIN.workflow("echo_vote").merger is merger
    report = dry_run_report(load_config(TEMPLATE, ["workflow.name=echo_vote", "workflow.max_new_tokens=null"]))
    assert report["status"] == "ok" and report["contract"]["reward_on"]["gold"] == [1.0, 1.0, 1.0]
    assert "`echo_vote` workflow" in (ROOT / "domains" / "template" / "README.md").read_text()
