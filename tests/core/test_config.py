import pytest

from c3_plugin.core.config import ConfigError, apply_overrides, load_config, parse_value, read_yaml


def test_extends_merges_child_over_parent_and_rejects_cycles(tmp_path):
    (tmp_path / "base.yaml").write_text("seed: 1\nc3: {ppo_epochs: 2, clip_eps: 0.1}\nwandb: {project: p}\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "child.yaml").write_text("extends: ../base.yaml\nc3: {ppo_epochs: 3}\n")
    data = read_yaml(tmp_path / "sub" / "child.yaml")
    assert data["c3"] == {"ppo_epochs": 3, "clip_eps": 0.1} and data["seed"] == 1 and "extends" not in data
    (tmp_path / "a.yaml").write_text("extends: b.yaml\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    with pytest.raises(ConfigError, match="extends: cycle a.yaml -> b.yaml -> a.yaml"):
        read_yaml(tmp_path / "a.yaml")


@pytest.mark.parametrize("text, value", [("true", True), ("False", False), ("none", None), ("null", None), ("3", 3),
                                         ("2e-5", 2e-5), ("[2, 4]", [2, 4]), ("tree [2, 4]", "tree [2, 4]"),
                                         ("abc", "abc")])
def test_override_values(text, value):
    assert parse_value(text) == value


def test_overrides_reach_nested_keys():
    out = apply_overrides({"c3": {"ppo_epochs": 1}}, ["c3.ppo_epochs=4", "workflow.prefix.Actor=\\boxed{"])
    assert out == {"c3": {"ppo_epochs": 4}, "workflow": {"prefix": {"Actor": "\\boxed{"}}}
    with pytest.raises(ConfigError, match="a.b=value"):
        apply_overrides({}, ["c3.ppo_epochs"])


def test_sections_bind_to_dataclasses_with_nearest_key_errors():
    cfg = load_config(data={"algorithm": "c3", "c3": {"ppo_epochs": 2}, "output": {"run_name": "x"}})
    assert cfg.algo.ppo_epochs == 2 and cfg.algo.plan == "tree [2, 4]" and cfg.output.run_name == "x"
    assert cfg.resolved()["c3"]["ppo_epochs"] == 2
    with pytest.raises(ConfigError, match="unknown key 'output.run_nme'; did you mean 'output.run_name'"):
        load_config(data={"output": {"run_nme": "x"}})
    with pytest.raises(ConfigError, match="unknown key 'magrpo.advantage_mod'; did you mean 'magrpo.advantage_mode'"):
        load_config(data={"algorithm": "c3", "magrpo": {"advantage_mod": "mean"}})  # every algorithm section is checked
    with pytest.raises(ConfigError, match="unknown key 'agent_modle'; did you mean 'agent_model'"):
        load_config(data={"agent_modle": {}})
    with pytest.raises(ConfigError, match="unknown domain 'chess'"):
        load_config(data={"domain": "chess"})
    with pytest.raises(ConfigError, match="agents.policy"):
        load_config(data={"agents": {"policy": "joint"}})  # "shared" is valid: one model for every role


def test_dataset_paths_resolve_against_the_file_that_names_them(tmp_path):
    """A user's config that extends a shipped one finds its own data next to itself, as model paths do."""
    shipped = tmp_path / "shipped"
    (shipped / "data").mkdir(parents=True)
    (shipped / "data" / "eval.jsonl").write_text("{}\n")
    (shipped / "base.yaml").write_text("dataset:\n  train: {source: data/train.jsonl}\n  eval: "
                                       "[{source: data/eval.jsonl}]\n")
    mine = tmp_path / "mine"
    (mine / "data").mkdir(parents=True)
    (mine / "data" / "my_problems.jsonl").write_text("{}\n")
    (mine / "my.yaml").write_text("extends: ../shipped/base.yaml\ndataset:\n  train: {source: "
                                  "data/my_problems.jsonl}\n")
    dataset = read_yaml(mine / "my.yaml")["dataset"]
    assert dataset["train"]["source"] == str((mine / "data" / "my_problems.jsonl").resolve())
    assert dataset["eval"][0]["source"] == str((shipped / "data" / "eval.jsonl").resolve())  # the shipped file's own
    assert dataset["base_dir"] == str(mine.resolve())  # what no file's folder holds: the loaded config's folder
    (mine / "flat.yaml").write_text("dataset:\n  train: {source: hub/name}\n  eval: [{source: nowhere.jsonl}]\n")
    flat = read_yaml(mine / "flat.yaml")["dataset"]  # hub names and missing files are kept as written
    assert flat["train"]["source"] == "hub/name" and flat["eval"][0]["source"] == "nowhere.jsonl"
