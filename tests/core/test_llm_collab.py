"""LLM_Collab's config layout (core/llm_collab.py): the two YAMLs of tests/fixtures/llm_collab load as their train
scripts read them, with the same defaults, and every key that means nothing under C3 is named."""

from pathlib import Path

import pytest
import yaml

from c3_plugin.core.config import ConfigError, load_config
from c3_plugin.core.llm_collab import markers

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llm_collab"
TLDR = FIXTURES / "magrpo_tldr_config.yaml"
BFCL = FIXTURES / "native_parallel_magrpo_config.yaml"

TLDR_UNMAPPED = [
    "agent_model.type", "agent_model.max_length", "agent_model.torch_dtype", "tokenizer.padding_side",
    "output.save_path", "wandb.enabled", "dataset.type"]
BFCL_UNMAPPED = [
    "agent_model.type", "agent_model.attn_implementation", "dataset.version", "dataset.categories", "wandb.enabled",
    "dataset.type", "bfcl", "bfcl_reward"]


def keys(cfg) -> list[str]:
    return [line.partition(":")[0] for line in cfg.unmapped]


def test_the_writing_yaml_maps_as_its_script_reads_it():
    cfg = load_config(TLDR, ["domain=math"], default_algorithm="c3")
    assert cfg.layout == "llm_collab" and keys(cfg) == TLDR_UNMAPPED
    c3 = cfg.algo
    # agent_model's sampling is the trainer's, as train_magrpo.py passes it to MAGRPOConfig
    assert (c3.temperature, c3.top_p, c3.top_k) == (0.7, 0.9, None)
    assert (c3.num_train_epochs, c3.agent_learning_rate, c3.logging_steps, c3.num_generations) == (2, 5e-6, 50, 4)
    assert (c3.eval_interval, c3.eval_num_samples, c3.rollout_buffer_size, c3.train_batch_size) == (20, 4, 1, 1)
    assert c3.num_turns == 1 and c3.plan == "tree [2, 2]"  # the default plan of the YAML's 4 generations
    assert cfg.agent_model.name == "Qwen/Qwen3-1.7B" and cfg.agent_model.dtype == "float32"  # torch_dtype auto
    assert cfg.dataset.train == {"name": "tldr", "source": "trl-lib/tldr", "split": "train[:1100]"}
    assert cfg.dataset.eval == [{"name": "tldr", "source": "trl-lib/tldr", "split": "test[:1100]"}]
    assert (cfg.reward_processor.scale, cfg.reward_processor.shift) == (1.0, 0.0)
    assert cfg.output.base_dir == "output_magrpo_tldr" and cfg.output.save_model and not cfg.output.verbose
    # the script logs to W&B whenever it runs (no wandb.enabled key)
    assert cfg.wandb.enabled and (cfg.wandb.project, cfg.wandb.name) == ("comlrl", "magrpo_tldr")
    assert "magrpo" not in cfg.raw and "c3" in cfg.raw  # the trainer section became c3's


def test_the_bfcl_yaml_maps_with_its_null_shift_and_disabled_processor():
    cfg = load_config(BFCL, ["domain=math"], default_algorithm="c3")
    assert keys(cfg) == BFCL_UNMAPPED
    assert cfg.seed == 42 and cfg.agent_model.dtype == "bfloat16"
    assert (cfg.reward_processor.scale, cfg.reward_processor.shift) == (1.0, 0.0)  # enabled: false, shift: null
    c3 = cfg.algo
    assert (c3.parallel_training, c3.agent_devices, c3.num_train_epochs) == ("mp", ["cuda:0", "cuda:1"], 4)
    assert (c3.temperature, c3.top_p, c3.eval_num_samples, c3.early_termination_threshold) == (0.7, 0.8, 16, None)
    assert cfg.dataset.train["split"] == "train" and cfg.dataset.eval[0]["split"] == "eval"
    assert not cfg.output.save_model and cfg.wandb.dir == "output_native_parallel_magrpo"


def test_keys_left_out_get_the_scripts_defaults_and_an_enabled_processor_scales_and_shifts(tmp_path):
    data = yaml.safe_load(TLDR.read_text())
    for key in ("eval_interval", "rollout_buffer_size", "num_train_epochs"):
        del data["magrpo"][key]
    data["reward_processor"] = {"enabled": True, "scale_factor": 2.0, "shift": None}
    data["magrpo"]["not_a_field"] = 1
    cfg = load_config(data={**data, "domain": "math"}, default_algorithm="c3")
    # train_magrpo.py's own defaults (20, 1, 2), not CoMLRL's class defaults (16, 2, 20)
    assert (cfg.algo.eval_interval, cfg.algo.rollout_buffer_size, cfg.algo.num_train_epochs) == (20, 1, 2)
    assert (cfg.reward_processor.scale, cfg.reward_processor.shift) == (2.0, 0.0)
    assert "magrpo.not_a_field: c3 has no such setting" in cfg.unmapped


def test_an_llm_collab_task_without_a_domain_here_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"dataset.type: 'tldr' is an LLM_Collab task that comlrl-c3 has no domain "
                                          r"for.*add domain: <one of .*math"):
        load_config(TLDR, default_algorithm="c3")
    with pytest.raises(ConfigError, match="dataset.type: 'bfcl'"):
        load_config(BFCL, default_algorithm="c3")


def test_an_unreachable_hub_dataset_names_the_dataset_name_override():
    # conftest sets HF_HUB_OFFLINE: the hub dataset cannot be had
    with pytest.raises(ConfigError, match=r"offline .*'OpenMLRL/BFCL-V4-Parallel-Native'.*override dataset.name with "
                                          r"a local copy.*BFCL-V4-Parallel-Native/train.jsonl and "
                                          r"BFCL-V4-Parallel-Native/eval.jsonl"):
        load_config(BFCL, ["domain=math"], default_algorithm="c3", hub_preflight=True)


def test_this_projects_layout_is_not_taken_for_llm_collab():
    root = Path(__file__).resolve().parents[2]
    for path in sorted((root / "configs").rglob("*.yaml")):
        assert markers(yaml.safe_load(path.read_text())) == [], path
    assert markers(yaml.safe_load(TLDR.read_text()))[:7] == [
        "critic_model", "critics", "tokenizer", "dataset.name", "dataset.type", "dataset.train_split",
        "dataset.eval_split"]
    # with dataset.train given (an override) and no LLM_Collab-only section, the shared sections' keys still tell it
    bfcl = yaml.safe_load(BFCL.read_text())
    bfcl["dataset"]["train"] = {"source": "x.jsonl"}
    assert markers(bfcl) == ["agent_model.temperature", "agent_model.top_p", "agent_model.top_k",
                             "agent_model.torch_dtype", "agent_model.type", "agent_model.special_tokens",
                             "agent_model.attn_implementation",
                             "reward_processor.enabled", "reward_processor.scale_factor", "output.save_final_model"]


def test_an_iac_yamls_critic_settings_are_named_as_unread_under_c3():
    data = yaml.safe_load(TLDR.read_text())
    data["iac"] = {**data.pop("magrpo"), "critic_learning_rate": 5e-6, "value_loss_coef": 0.6,
                   "use_separate_critic": True}
    data["critic_model"] = {"name": "Qwen/Qwen3-1.7B", "torch_dtype": "auto"}
    cfg = load_config(data={**data, "domain": "math"}, default_algorithm="c3")
    assert keys(cfg)[:3] == ["iac.critic_learning_rate", "iac.value_loss_coef", "iac.use_separate_critic"]
    assert "critic_model: c3 learns no critic" in cfg.unmapped
    assert cfg.algo.num_train_epochs == 2 and "critic_learning_rate" not in cfg.raw["c3"]  # the section became c3's
    data["magrpo"] = {"num_generations": 4}
    with pytest.raises(ConfigError, match=r"2 trainer sections \(magrpo, iac\).*keep the one to train"):
        load_config(data={**data, "domain": "math"}, default_algorithm="c3")


def test_a_reward_processor_left_out_is_the_scripts_own_default():
    for path, scale in ((TLDR, 3.0), (BFCL, 1.0)):  # Writing's scripts scale by default, BFCL's do not
        data = yaml.safe_load(path.read_text())
        data["reward_processor"] = {"scale_factor": 3.0}
        cfg = load_config(data={**data, "domain": "math"}, default_algorithm="c3")
        assert cfg.reward_processor.scale == scale, path.name
