"""The repository stands alone: shipped configs, the README's commands and the docs use only data inside
it, and long first-run work shows progress."""

import os
import re
import shlex
from pathlib import Path

import pytest
from datasets import Dataset

from c3_plugin.core.config import load_config
from c3_plugin.core.sources import local_path
from c3_plugin.run.dry_run import dry_run_report
from c3_plugin.run.testing import experiment_config, tiny_model, tiny_tokenizer
from c3_plugin.trainers import C3Config, C3Trainer

ROOT = Path(__file__).resolve().parents[2]
SKIP_DIRS = {".git", ".venv", "outputs", "wandb", "build", "__pycache__", ".pytest_cache"}


def readme_dry_runs():
    """(script, argv) of every ``--dry-run`` command in the README's bash blocks, continuation lines joined."""
    text = (ROOT / "README.md").read_text()
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for command in block.replace("\\\n", " ").splitlines():
            argv = shlex.split(command.split("#")[0])
            # with its config named (one on a script's default config: tests/test_readme_commands.py checks its options)
            if "--dry-run" in argv and argv[0] == "python" and "--config" in argv:
                commands.append((argv[1], argv[2:]))
    return commands


def test_the_readme_has_math_code_and_travel_dry_runs():
    configs = {argv[argv.index("--config") + 1] for _, argv in readme_dry_runs()}
    assert {"configs/math/c3.yaml", "configs/code/c3.yaml", "configs/code/multi_turn_c3.yaml",
            "configs/travel/c3.yaml"} <= configs


@pytest.mark.parametrize("script, argv", readme_dry_runs(), ids=lambda v: v if isinstance(v, str) else None)
def test_readme_dry_run_commands_pass_with_data_inside_the_repo(script, argv, monkeypatch):
    """Each README dry-run, as typed from the repository root, through the dry-run function: only bundled data."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    assert (ROOT / script).exists()
    algorithm = Path(script).stem.removeprefix("train_")
    config = argv[argv.index("--config") + 1]
    overrides = [argv[i + 1] for i, a in enumerate(argv) if a == "--override"]
    cfg = load_config(config, overrides, default_algorithm=algorithm)
    for spec in [cfg.dataset.train, *cfg.dataset.eval]:
        path = local_path(spec.get("source", ""), cfg.dataset.base_dir)
        assert path is not None, f"{config}: {spec.get('source')} is not a bundled file"
        assert path.resolve().is_relative_to(ROOT / "data"), (config, spec["source"])
    report = dry_run_report(cfg)
    assert report["status"] == "unverified" and not report["errors"] and report["train_rows"] > 0  # fits; Qwen offline


def test_every_local_source_in_a_shipped_config_resolves_inside_the_repo(tmp_path, monkeypatch):
    """From any working directory, not only the repository root."""
    monkeypatch.chdir(tmp_path)
    checked = 0
    for path in sorted((ROOT / "configs").rglob("*.yaml")):
        cfg = load_config(path)
        for spec in [*cfg.dataset.train_sources(), *cfg.dataset.eval]:
            local = local_path(str(spec.get("source", "")), cfg.dataset.base_dir)
            if local is None:  # a Hugging Face name or a synthetic set
                continue
            assert local.exists() and local.resolve().is_relative_to(ROOT / "data"), (path, spec["source"])
            checked += 1
    assert checked >= 9  # math and code bases and everything that extends them


def test_bundled_data_is_documented_and_not_ignored_by_git():
    doc = (ROOT / "data" / "README.md").read_text()
    files = sorted(p.relative_to(ROOT / "data").as_posix() for p in (ROOT / "data").rglob("*.jsonl"))
    for name in ("math500/test.jsonl", "gsm8k/train.jsonl", "gsm8k/test.jsonl", "cmath/test.jsonl", "aime24/test.jsonl",
                 "aime25/test.jsonl", "amc23/test.jsonl", "minerva_math/test.jsonl", "mbpp/full.jsonl",
                 "mbpp/test.jsonl", "mbpp/sanitized.jsonl", "mbppplus/test.jsonl", "travelplanner/train.jsonl"):
        assert name in files, name
    for name in files:
        assert f"`{name}`" in doc, f"data/README.md does not describe {name}"
    ignored = [line.strip() for line in (ROOT / ".gitignore").read_text().splitlines()]
    assert not any(line.strip("/") in ("data", "*.jsonl") for line in ignored)


def test_no_file_reaches_outside_the_repository():
    needles = ("../" + "shared", "shared/" + "data")  # split so that this file does not match itself
    hits = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".venv") and not d.endswith(".egg-info")]
        for name in files:
            path = Path(folder) / name
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue  # binary
            hits += [f"{path.relative_to(ROOT)}: {n}" for n in needles if n in text]
    assert not hits, hits


def test_evaluation_shows_a_progress_bar_unless_quiet(capsys):
    tok = tiny_tokenizer()
    items = [{"id": f"e{i}", "prompt": f"q{i}", "question": f"q{i}", "answer": "1"} for i in range(5)]
    args = experiment_config(C3Config, num_train_epochs=1, max_new_tokens=3, instances_per_update=4, eval_batch_size=2,
                             agent_devices="cpu")
    tr = C3Trainer(agents=[tiny_model(tok, seed=0), tiny_model(tok, seed=1)], tokenizer=tok,
                   train_dataset=Dataset.from_list(items), eval_dataset=Dataset.from_list(items),
                   reward_func=lambda *c, **k: [0.0] * len(c[-1]), args=args)
    capsys.readouterr()
    tr.verbose = True
    tr.evaluate(0)
    err = capsys.readouterr().err
    assert re.search(r"eval @ env_step 0: +100%\|.*\| 5\.0/5 item \[\d\d:\d\d<\d\d:\d\d", err), err  # elapsed<remaining
    tr.verbose = False  # output.verbose: false
    tr.evaluate(0)
    assert "eval @ env_step" not in capsys.readouterr().err
