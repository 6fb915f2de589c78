"""Every config value is type- and range-checked when the config loads, naming the field."""

import subprocess
import sys
from pathlib import Path

import pytest

from c3_plugin.core.config import ConfigError, load_config
from c3_plugin.core.config_types import FieldTypeError, coerce

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "configs" / "math" / "demo_cpu.yaml"


@pytest.mark.parametrize("override, message", [
    ("c3.agent_learning_rate=abc", "c3.agent_learning_rate: expected a number, got 'abc'"),
    ("c3.agent_learning_rate=-1", "c3.agent_learning_rate must be a finite number >= 0"),
    ("c3.agent_learning_rate=nan", "c3.agent_learning_rate is NaN"),
    ("c3.num_train_epochs=1.5", "c3.num_train_epochs: expected an integer, got 1.5"),
    ("c3.eval_batch_size=-4", "c3.eval_batch_size must be an integer >= 0"),
    ("c3.save_traces=3", "c3.save_traces: expected true or false, got 3"),
    ("agent_model.dtype=true", "agent_model.dtype: expected a string, got True"),
    ("agents.learning_rate={'Actor': 'fast'}", "agents.learning_rate: ['Actor']: expected a number, got 'fast'"),
    ("workflow.max_new_tokens={'Actor': 'many'}", "workflow.max_new_tokens: ['Actor']: expected an integer"),
    ("dataset.eval=3", "dataset.eval: expected a list of mappings, got 3"),
])
def test_a_bad_value_fails_at_load_naming_the_field(override, message):
    with pytest.raises(ConfigError) as err:
        load_config(DEMO, [override])
    assert message in str(err.value)


@pytest.mark.parametrize("override, message", [
    ("c3.temperature=-0.5", "c3.temperature must be a finite number > 0, got -0.5"),
    ("c3.temperature=0", "c3.temperature must be a finite number > 0"),
    ("c3.top_p=0", "c3.top_p must be in (0, 1], got 0.0"),
    ("c3.top_p=1.5", "c3.top_p must be in (0, 1], got 1.5"),
    ("c3.top_k=0", "c3.top_k must be an integer >= 1 or null, got 0"),
    ("c3.max_new_tokens=0", "c3.max_new_tokens must be an integer >= 1, got 0"),
    ("workflow.temperature={'Reasoner': -1.0}", "workflow.temperature for 'Reasoner' must be a finite number > 0"),
    ("workflow.max_new_tokens={'Actor': 0}", "workflow.max_new_tokens for 'Actor' must be an integer >= 1"),
])
def test_an_unusable_sampling_value_fails_at_load_with_the_fix(override, message):
    with pytest.raises(ConfigError) as err:
        load_config(DEMO, [override])
    assert message in str(err.value) and "(" in str(err.value).split(message)[-1]  # what the value means follows
    ok = load_config(DEMO, ["c3.top_k=None", "c3.top_p=1.0", "c3.temperature=1.3", "c3.max_new_tokens=1"])
    assert (ok.algo.top_k, ok.algo.top_p, ok.algo.temperature, ok.algo.max_new_tokens) == (None, 1.0, 1.3, 1)


def test_numbers_written_as_strings_become_numbers():
    """YAML 1.1 reads 1e-6 (no dot) as a string; an integral float fills an int field."""
    cfg = load_config(DEMO, ["c3.agent_learning_rate='1e-6'", "deepspeed.reduce_bucket_size=2.0e8",
                             "c3.eval_batch_size='4'"])
    assert cfg.algo.agent_learning_rate == 1e-6 and isinstance(cfg.algo.agent_learning_rate, float)
    assert cfg.deepspeed.reduce_bucket_size == 200_000_000 and isinstance(cfg.deepspeed.reduce_bucket_size, int)
    assert cfg.algo.eval_batch_size == 4


def test_unions_keep_a_number_a_number_and_a_name_a_name():
    assert coerce("1e-6", float | str | None) == 1e-6
    assert coerce("h100", float | str | None) == "h100" and coerce(None, float | None) is None
    assert coerce(True, str | bool) is True and coerce(["a"], list[str] | None) == ["a"]
    with pytest.raises(FieldTypeError, match="expected a number or null"):
        coerce("abc", float | None)


def test_a_key_typo_fails_before_any_trainer_or_torch_is_imported():
    """The keys are checked first: a typo in an algorithm or domain section is named without importing the trainers
    (which import torch, CoMLRL and transformers: about 10 s on 2 cores)."""
    code = ("import sys\nfrom c3_plugin.core.config import ConfigError, load_config\n"
            "for override in ('c3.agent_learning_rat=1', 'math.answer_timeout=1', 'mapl.num_iteration=2'):\n"
            "    try:\n        load_config(sys.argv[1], [override])\n    except ConfigError as exc:\n        "
            "print(exc)\nprint('torch' in sys.modules, 'c3_plugin.trainers' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code, str(DEMO)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    lines = out.stdout.splitlines()
    assert lines[0] == "unknown key 'c3.agent_learning_rat'; did you mean 'c3.agent_learning_rate'?", out.stderr
    assert lines[1].startswith("unknown key 'math.answer_timeout'; did you mean 'math.answer_timeout_s'")
    # the shared section: every reader's fields
    assert lines[2].startswith("unknown key 'mapl.num_iteration'; did you mean 'mapl.num_iterations'")
    assert lines[3] == "False False"


def test_values_that_loaded_before_still_load():
    """null keeps its class's meaning (a mode's "none", no eval suites), a number names a string field (an override
    like wandb.group=2024, as c3 compare writes it), a plan may be a mapping, big integers stay exact."""
    cfg = load_config(DEMO, ["wandb.group=2024", "output.run_name=7", "dataset.eval=none", "c3.plan={'tree': [2, 4]}",
                             "c3.seed=9007199254740993", "c3.parallel_training=none"])
    assert (cfg.wandb.group, cfg.output.run_name, cfg.dataset.eval) == ("2024", "7", None)
    assert cfg.algo.plan == {"tree": [2, 4]} and cfg.algo.seed == 9007199254740993
    code = load_config(ROOT / "configs" / "code" / "c3.yaml", ["code.isolation=none"])
    assert code.domain_cfg.isolation is None or code.domain_cfg.isolation == "none"


def test_a_mistyped_domain_is_named_as_a_domain():
    with pytest.raises(ConfigError, match="unknown domain 'maths'; registered: code, math, template, travel"):
        load_config(DEMO, ["domain=maths"])
