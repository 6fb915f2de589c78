"""The failures a user meets print one line with the next step, not a traceback (--debug shows it): Ctrl-C during
training (the env step and how the same command resumes), an output folder that cannot be written or is full, a
checkpoint of another config (the differing fields, the two ways out), a domain hook that raises during the run, and
c3 dashboard --wandb --online without a key; a resumed run says so."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from c3_plugin.core.errors import DomainHookError
from c3_plugin.run.testing import template_config
from c3_plugin.tools.cli import console, main

ROOT = Path(__file__).resolve().parents[2]
TINY = {"dataset": {"train": {"size": 4}, "eval": [{"name": "echo", "size": 2}]},
        "c3": {"num_train_epochs": 2, "max_new_tokens": 2, "instances_per_update": 2, "plan": "tree [2, 2]"}}


def config_file(tmp_path: Path, name: str = "run.yaml", **output) -> Path:
    data = template_config(tmp_path, **TINY, output={"base_dir": str(tmp_path / "outputs"), "run_name": "run",
                                                      "verbose": False, "plot": False, "save_model": False,
                                                      "checkpoint_interval": 1, **output})
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def _ctrl_c_as_a_terminal_has_it() -> None:
    """The child's SIGINT as a shell started from a terminal gives it: handled by default and not blocked. A pytest
    worker may hand its children SIGINT blocked or ignored (inherited through exec): in CI the run then never saw the
    signal and trained to its end."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def last_line(capsys) -> str:
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    return out.out.strip().splitlines()[-1]


def test_an_output_folder_that_cannot_be_written_or_is_full_is_one_line(tmp_path, capsys):
    config = config_file(tmp_path, base_dir="/sys/c3-outputs")  # not writable, even by root
    assert main(["--config", str(config)], algorithm="c3") == 2
    line = last_line(capsys)
    assert line.startswith("error: cannot write /sys/c3-outputs") and "output.base_dir" in line
    run = tmp_path / "outputs" / "run"  # a disk with no room: its config.json is /dev/full
    run.mkdir(parents=True)
    (run / "config.json").symlink_to("/dev/full")
    assert main(["--config", str(config_file(tmp_path))], algorithm="c3") == 2
    line = last_line(capsys)
    assert "No space left on device" in line and "free space there" in line
    with pytest.raises(OSError):  # --debug: the traceback
        main(["--config", str(config_file(tmp_path)), "--debug"], algorithm="c3")


def test_a_checkpoint_of_another_config_is_refused_before_any_model_loads(tmp_path, capsys):
    assert main(["--config", str(config_file(tmp_path))], algorithm="c3") == 0
    assert (tmp_path / "outputs" / "run" / "checkpoints" / "checkpoint-1").is_dir()
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["--config", str(config_file(tmp_path, resume="auto")), "--override", "c3.agent_learning_rate=0.001",
              "--override", "seed=3"], algorithm="c3")
    line = last_line(capsys)
    assert exc.value.code == 2 and "holds checkpoint-" in line and "of a run with another config" in line
    assert "c3.agent_learning_rate: " in line and "vs 0.001" in line and "seed: 0 (checkpoint) vs 3" in line
    assert "undo those overrides" in line and "another output.run_name" in line


def test_a_domain_hook_that_raises_during_the_run_names_the_domain_hook_and_rows(tmp_path, capsys, monkeypatch):
    """The template's reward made to raise on model output the dry-run's made-up completions never are."""
    import domains.template as template

    def reward_factory(config):
        real = template.make_reward(config)

        def reward(*completions, batch_items=None, prompts=None):
            if any(c not in ("", "apple", "river", "stone", "cloud", "maple", "ember", "quartz", "meadow")
                   and not c.startswith("c3 dry-run") for c in completions[-1]):
                raise IndexError("no word in the completion")
            return real(*completions, batch_items=batch_items, prompts=prompts)

        reward.reward_range = (0.0, 1.0)
        return reward

    monkeypatch.setattr(template, "DOMAIN", template.DOMAIN.__class__(
        **{**template.DOMAIN.__dict__, "make_reward": reward_factory}))
    config = config_file(tmp_path)
    assert main(["--config", str(config), "--dry-run"], algorithm="c3") == 0  # the dry-run's completions pass
    assert main(["--config", str(config)], algorithm="c3") == 2
    line = last_line(capsys)
    assert line.startswith("error: domain 'template': the reward raised IndexError: no word in the completion (on row ")
    assert "fix the hook" in line and "--debug" in line
    with pytest.raises(DomainHookError):
        main(["--config", str(config), "--debug"], algorithm="c3")


def test_dashboard_online_without_a_wandb_key_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    (tmp_path / "netrc").write_text("")
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    with pytest.raises(SystemExit) as exc:
        console(["dashboard", "--wandb", "me/proj", "--group", "g", "--online", "--out", str(tmp_path / "ws.json")])
    line = last_line(capsys)
    assert exc.value.code == 2 and "needs an API key" in line and "wandb login" in line
    assert not (tmp_path / "ws.json").exists()


def test_ctrl_c_says_where_and_how_to_resume_and_the_resume_says_so(tmp_path):
    config = config_file(tmp_path, resume="auto")
    data = yaml.safe_load(config.read_text())
    # far longer than the test waits (it interrupts after the first checkpoint): 40 epochs ended first once in CI
    data["c3"]["num_train_epochs"] = 2000
    config.write_text(yaml.safe_dump(data))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "c3_plugin", "train", "--config", str(config)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_ctrl_c_as_a_terminal_has_it)
    checkpoints = tmp_path / "outputs" / "run" / "checkpoints"
    deadline = time.time() + 300
    while not any(checkpoints.glob("checkpoint-*")) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130 and "Traceback" not in err, err[-3000:]
    line = out.strip().splitlines()[-1]
    assert line.startswith("interrupted: interrupted at env step ") and "the same command resumes from checkpoint-" \
        in line, out[-2000:]
    step = int(line.split("env step ")[1].split(";")[0])
    ckpt = line.split("resumes from ")[1].split(" ")[0]
    assert step > 0
    data["c3"]["num_train_epochs"] = int(ckpt.split("-")[1]) + 1  # a portable field: the resume trains one more epoch
    config.write_text(yaml.safe_dump(data))
    again = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"[c3] resuming run from {ckpt} at env step " in again.stdout
    summary = json.loads((tmp_path / "outputs" / "run" / "summary.json").read_text())
    assert summary["env_steps"] > 0


def test_a_reward_value_that_is_not_a_finite_number_stops_the_run_in_one_line(tmp_path, capsys, monkeypatch):
    """Never coerced: before, CoMLRL's call turned "1.0" into 1.0 and train/reward_mean showed 1.0."""
    import domains.template as template

    def reward_factory(config):
        def reward(*completions, batch_items=None, prompts=None):
            return ["1.0"]

        return reward

    monkeypatch.setattr(template, "DOMAIN", template.DOMAIN.__class__(
        **{**template.DOMAIN.__dict__, "make_reward": reward_factory}))
    assert main(["--config", str(config_file(tmp_path))], algorithm="c3") == 2
    line = last_line(capsys)
    assert line.startswith("error: reward_func 'reward' returned '1.0' (str) for joint action 0 (item 'echo-")
    assert not (tmp_path / "outputs" / "run" / "metrics.jsonl").exists()
