"""Domains are pleasant to write: the template copied into a new package, installed and trained from its
example config as a user would; the domain's config section reaches its datasets, reward and probe; a
config without workflow.name runs the domain's own workflow."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from c3_plugin.core.config import ConfigError, build_workflow, load_config
from c3_plugin.core.domain import load_domain
from c3_plugin.run.dry_run import dry_run_report, prepare
from c3_plugin.run.testing import tiny_model, tiny_tokenizer

ROOT = Path(__file__).resolve().parents[2]


def test_template_copied_into_a_new_package_installs_and_trains(tmp_path):
    pkg = tmp_path / "src" / "echo_domain"
    shutil.copytree(ROOT / "domains" / "template", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    for path in (pkg / "__init__.py", pkg / "example.yaml"):  # the rename a user makes: the domain's name is "echo"
        path.write_text(path.read_text().replace('name="template"', 'name="echo"').replace("domain: "
                                                                                           "template", "domain: echo")
                        .replace("\ntemplate:", "\necho:"))
    (tmp_path / "src" / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "echo-domain"\nversion = "0.0.1"\n\n'
        '[project.entry-points."c3_plugin.domains"]\necho = "echo_domain:DOMAIN"\n\n'
        '[tool.setuptools]\npackages = ["echo_domain"]\n[tool.setuptools.package-data]\necho_domain = ["*.yaml"]\n')
    site = tmp_path / "site"
    out = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                          "--no-index", "--target", str(site), str(tmp_path / "src")], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    config = site / "echo_domain" / "example.yaml"  # the config as installed with the package
    tok = tiny_tokenizer()
    tiny_model(tok).save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "OMP_NUM_THREADS": "1",
           "TQDM_DISABLE": "1"}
    run = lambda *args: subprocess.run([sys.executable, "-m", "c3_plugin", *args], cwd=tmp_path, env=env,  # noqa: E731
                                       capture_output=True, text=True, timeout=600)
    dry = run("dry-run", "--config", str(config), "--json")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    report = json.loads(dry.stdout)
    assert report["domain"] == "echo" and report["workflow"]["name"] == "echo_pair"  # the domain's default workflow
    assert report["probe"]["probe_ok"] and report["train_rows"] == 32
    trained = run("train", "--config", str(config), "--override", f"agent_model.name={tmp_path / 'model'}",
                  "--override", "agent_model.gguf_file=null", "--override", "dataset.train.size=8",
                  "--override", "dataset.eval=[{'name': 'echo', 'size': 4}]", "--override", "c3.max_new_tokens=3",
                  "--override", f"output.base_dir={tmp_path / 'runs'}", "--override", "output.save_model=false")
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    summary = json.loads((tmp_path / "runs" / "echo-c3-echo_pair-s0" / "summary.json").read_text())
    assert summary["env_steps"] == 8 * 8 and summary["updates"] >= 1 and "eval/echo/accuracy" in summary["eval_after"]


def template_cfg(*overrides):
    return load_config(data={"domain": "template",
                             "dataset": {"train": {"size": 4}, "eval": [{"name": "e", "size": 2}]}},
                       overrides=list(overrides))


def test_the_domain_section_reaches_datasets_reward_and_probe(monkeypatch):
    lenient, strict = template_cfg(), template_cfg("template.case_sensitive=true")
    domain = load_domain("template")
    item = [{"answer": "apple"}]
    assert domain.make_reward(lenient.domain_cfg)(["x"], ["Apple"], batch_items=item) == [1.0]
    assert domain.make_reward(strict.domain_cfg)(["x"], ["Apple"], batch_items=item) == [0.0]
    seen = {}

    def loads(section, seed, config):
        seen["config"] = config
        return domain.load_datasets(section, seed, config)

    def probe(cfg, train, evals):
        seen["probe"] = cfg.domain_cfg
        return domain.dry_run(cfg, train, evals)

    spy = dataclasses.replace(domain, load_datasets=loads, dry_run=probe)
    monkeypatch.setattr("c3_plugin.run.dry_run.load_domain", lambda name: spy)
    dry_run_report(strict)
    assert (seen["config"] is strict.domain_cfg and seen["probe"] is strict.domain_cfg
            and strict.domain_cfg.case_sensitive)

    import domains.math as dm

    timeouts = []
    monkeypatch.setattr(dm, "score", lambda text, gold, timeout_s: timeouts.append(timeout_s) or 1.0)
    math_cfg = load_config(ROOT / "configs" / "math" / "c3.yaml", ["math.answer_timeout_s=0.25"])
    assert dm.DOMAIN.make_reward(math_cfg.domain_cfg)(["p"], ["\\boxed{1}"], batch_items=[{"answer": "1"}]) == [1.0]
    assert timeouts == [0.25]
    with pytest.raises(ConfigError, match="answer_timeout_s must be > 0"):
        load_config(ROOT / "configs" / "math" / "c3.yaml", ["math.answer_timeout_s=0"])


def test_without_workflow_name_the_domain_workflow_runs_and_unknown_names_list_it():
    assert build_workflow(template_cfg(), load_domain("template")).name == "echo_pair"
    math_cfg = load_config(data={"domain": "math", "dataset": {"train": {"source": "synthetic", "size": 4}}})
    assert math_cfg.workflow.name is None and build_workflow(math_cfg, load_domain("math")).name == "reasoner_actor"
    with pytest.raises(ConfigError, match=r"'echo_par' is not a workflow of domain 'template' \(echo_pair, "
                                          r"echo_vote\), a built-in \(.*chain5"):
        prepare(template_cfg("workflow.name=echo_par"))


def test_the_travel_config_chooses_its_reward_variant():
    from domains.travel import DOMAIN

    specified = load_config(ROOT / "configs" / "travel" / "c3.yaml")
    strict = load_config(ROOT / "configs" / "travel" / "c3.yaml", ["travel.reward=strict"])
    assert DOMAIN.make_reward(specified.domain_cfg).variant == "specified"
    chosen = DOMAIN.make_reward(strict.domain_cfg)
    assert chosen.variant == "strict" and chosen.backend == "reference_constraint_strict_dense" and chosen.batched
    with pytest.raises(ConfigError, match="reward must be one of specified, strict"):
        load_config(ROOT / "configs" / "travel" / "c3.yaml", ["travel.reward=lenient"])
