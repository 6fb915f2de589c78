"""The two LLM_Collab YAMLs of tests/fixtures/llm_collab, with ``algorithm: c3`` as the one added line, dry-run and
train through single_turn/train_c3.py. Offline and on CPU, the command line (not the file) changes what this
machine cannot have: the task (``domain=math``: neither tldr's nor BFCL's reward exists here), the model (a tiny
local one), the dataset (a local folder of JSONL splits), the agents' devices (CPU), and, for speed, one epoch of
8-token messages without W&B."""

import json
from pathlib import Path

import pytest

from c3_plugin.run.testing import tiny_model, tiny_tokenizer

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "llm_collab"
CASES = {"tldr": ("magrpo_tldr_config.yaml", ("train", "test"), "['cpu']"),
         "bfcl": ("native_parallel_magrpo_config.yaml", ("train", "eval"), "['cpu', 'cpu']")}


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """A tiny model, and per case its YAML with ``algorithm: c3`` added and a local folder of its two splits."""
    folder = tmp_path_factory.mktemp("llm_collab")
    tok = tiny_tokenizer()
    tiny_model(tok).save_pretrained(folder / "model")
    tok.save_pretrained(folder / "model")
    rows = (ROOT / "data" / "gsm8k" / "test.jsonl").read_text().splitlines()[:4]
    for case, (name, splits, _) in CASES.items():
        text = (FIXTURES / name).read_text()
        (folder / f"{case}.yaml").write_text("algorithm: c3\n" + text)  # the one line a user changes
        (folder / case).mkdir()
        for i, split in enumerate(splits):
            (folder / case / f"{split}.jsonl").write_text("\n".join(rows[2 * i:2 * i + 2]) + "\n")
    return folder


def overrides(local: Path, case: str, *, train: bool, cpu: bool = True) -> list[str]:
    args = ["domain=math", f"agent_model.name={local / 'model'}", f"dataset.name={local / case}"]
    if train:
        args += [f"magrpo.agent_devices={CASES[case][2]}"] if cpu else []
        args += ["magrpo.max_new_tokens=8", "magrpo.num_train_epochs=1",
                 "wandb.enabled=false", f"output.base_dir={local / 'out'}", "output.plot=false"]
    return [a for o in args for a in ("--override", o)]


# the dry-run's; training (wandb.enabled=false) has all but wandb.enabled
EXPECTED_NOTES = {"tldr": ["agent_model.type", "agent_model.max_length", "agent_model.torch_dtype",
                           "tokenizer.padding_side", "output.save_path", "wandb.enabled", "dataset.type"],
                  "bfcl": ["agent_model.type", "agent_model.attn_implementation", "dataset.version",
                           "dataset.categories", "wandb.enabled", "dataset.type", "bfcl", "bfcl_reward"]}


def noted(out: str) -> list[str]:
    return [line.removeprefix("note:   ").partition(":")[0] for line in out.splitlines()
            if line.startswith("note:   ")]


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_yaml_dry_runs_and_names_each_key_without_meaning(case, local, entry_point):
    code, out, err = entry_point("single_turn/train_c3.py", "--config", str(local / f"{case}.yaml"), "--dry-run",
                                 *overrides(local, case, train=False))
    assert code == 0, out + err
    assert "dry-run: OK  c3 on math" in out and "plan tree [2, 2]" in out
    assert f"{len(EXPECTED_NOTES[case])} key(s) mean nothing under c3 or act otherwise here:" in out
    assert noted(out) == EXPECTED_NOTES[case]


def test_the_unreachable_hub_dataset_is_one_line_naming_the_fix(local, entry_point):
    code, out, _ = entry_point("single_turn/train_c3.py", "--config", str(local / "tldr.yaml"), "--dry-run",
                               "--override", "domain=math")
    assert code != 0
    assert "'trl-lib/tldr'" in out and "override dataset.name with a local copy" in out
    assert "tldr/train.jsonl and tldr/test.jsonl" in out


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_yaml_trains(case, local, entry_point):
    code, out, err = entry_point("single_turn/train_c3.py", "--config", str(local / f"{case}.yaml"),
                                 *overrides(local, case, train=True))
    assert code == 0, out + err
    assert noted(out) == [k for k in EXPECTED_NOTES[case] if k != "wandb.enabled"]  # printed before training too
    run = next(p for p in (local / "out").iterdir() if (p / "summary.json").exists()
               and json.loads((p / "config.json").read_text())["dataset"]["train"]["name"] == case)
    summary = json.loads((run / "summary.json").read_text())
    config = json.loads((run / "config.json").read_text())
    assert summary["algorithm"] == "c3" and summary["updates"] >= 1
    assert summary["env_steps"] == 2 * 4  # 2 train rows x the YAML's num_generations (4 leaves of tree [2, 2])
    assert config["c3"]["temperature"] == 0.7 and config["c3"]["top_p"] == {"tldr": 0.9, "bfcl": 0.8}[case]
    assert f"eval/{case}/n" in summary["eval_after"]


def test_cuda_devices_this_machine_lacks_are_one_line_before_training(local, entry_point, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the YAML's cuda:0 and cuda:1 on a CPU machine
    code, out, _ = entry_point("single_turn/train_c3.py", "--config", str(local / "bfcl.yaml"),
                               *overrides(local, "bfcl", train=True, cpu=False))
    assert code != 0
    assert "c3.agent_devices=['cuda:0', 'cuda:1'] names cuda:0, cuda:1, but this machine has 0 CUDA" in out
    assert "magrpo.agent_devices" in out and "Traceback" not in out
