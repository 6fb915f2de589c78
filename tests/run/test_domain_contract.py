"""A domain written from the template is exercised by the dry-run on its own rows: each deliberate mistake (a reward
with the wrong signature or values, rows without a task or a gold, a merger, hook or eval logger that raises, a seed
the run refuses) is refused in seconds, naming the hook, the row and the fix; and the run's own reward call refuses a
value that is not a finite number instead of coercing it."""

import math
import re
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml

from c3_plugin.core.config import ConfigError, load_config
from c3_plugin.core.rewards import RewardValueError, batched, leaf_rewards
from c3_plugin.run.dry_run import dry_run_report

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((ROOT / "domains" / "template" / "example.yaml").read_text())


@pytest.fixture
def domain_package(tmp_path, monkeypatch):
    """Install (on sys.path, with its entry point) a package ``mistake_domain`` registering the domain ``mistake``:
    the template with the given source appended (the mistake); returns the config that dry-runs it."""
    site = tmp_path / "site"
    (site / "mistake_domain-0.0.1.dist-info").mkdir(parents=True)
    (site / "mistake_domain-0.0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: mistake-domain\n"
                                                                     "Version: 0.0.1\n")
    (site / "mistake_domain-0.0.1.dist-info" / "entry_points.txt").write_text(
        "[c3_plugin.domains]\nmistake = mistake_domain:DOMAIN\n")
    monkeypatch.syspath_prepend(str(site))

    def install(mistake: str = "", **raw):
        (site / "mistake_domain").mkdir(exist_ok=True)
        (site / "mistake_domain" / "__init__.py").write_text(
            "import dataclasses, math\nfrom domains.template import *\nfrom domains.template import DOMAIN as BASE\n"
            "import domains.template as T\nDOMAIN = dataclasses.replace(BASE, name='mistake')\n"
            + textwrap.dedent(mistake))
        sys.modules.pop("mistake_domain", None)
        config = {k: v for k, v in EXAMPLE.items() if k != "template"}
        config.update({"domain": "mistake", "mistake": {"case_sensitive": False}, **raw})
        return config

    yield install
    sys.modules.pop("mistake_domain", None)


def refused(config, *needles):
    with pytest.raises(ConfigError) as info:
        dry_run_report(load_config(data=config))
    for needle in needles:
        assert needle in str(info.value), str(info.value)
    return str(info.value)


def test_the_template_passes_and_its_reward_is_scored_on_made_up_completions(domain_package):
    report = dry_run_report(load_config(data=domain_package()))
    assert report["contract"]["reward_on"] == {"gold": [1.0, 1.0, 1.0], "empty": [0.0, 0.0, 0.0],
                                               "wrong": [0.0, 0.0, 0.0]}
    assert report["contract"]["rows_checked"] == 3 and report["status"] == "ok"


@pytest.mark.parametrize("body, needles", [
    # the wrong signature: more positional parameters than agents and prompts
    ("def reward(a, b, c, d):\n    return [1.0]\n", ["reward raised TypeError", "reward(*agent_completions"]),
    ("def reward(*c, batch_items=None, prompts=None):\n    return [float('nan')]\n", ["returned nan", "finite"]),
    ("def reward(*c, batch_items=None, prompts=None):\n    return [math.inf]\n", ["returned inf"]),
    ("def reward(*c, batch_items=None, prompts=None):\n    return ['1.0']\n", ["returned '1.0' (str)"]),
    ("def reward(*c, batch_items=None, prompts=None):\n    return None\n", ["returned None"]),
    ("@T.batched\ndef reward(*c, batch_items=None, prompts=None):\n    return [1.0]\n",
     ["returned 1 rewards for 3 joint actions"]),
    ("def reward(*c, batch_items=None, prompts=None):\n    return [len(c[-1][0]) / c[-1][0].count('x')]\n",
     ["reward raised ZeroDivisionError", "never raises on model output"]),
])
def test_a_bad_reward_is_refused_at_the_dry_run(domain_package, body, needles):
    config = domain_package(body + "DOMAIN = dataclasses.replace(DOMAIN, make_reward=lambda cfg: reward)\n")
    refused(config, "domain 'mistake'", *needles)


def rows_mistake(change: str) -> str:
    return f"""
    def load(section, seed=0, config=None):
        train, evals = T.load_datasets(section, seed, config)
        return train.map(lambda row, i: {change}, with_indices=True), evals
    DOMAIN = dataclasses.replace(DOMAIN, load_datasets=load)
    """


def test_rows_without_a_task_or_a_gold_are_refused(domain_package):
    message = refused(domain_package(rows_mistake("{'prompt': '', 'question': ''}")), "train row 1", "empty task")
    assert "32 of 32 rows" in message
    missing = rows_mistake("{'prompt': None, 'question': None}").replace(
        "with_indices=True)", "with_indices=True).remove_columns(['prompt', 'question'])")
    refused(domain_package(missing), "no 'prompt' or 'question' field", "load_datasets")
    refused(domain_package(rows_mistake("{'answer': '' if i == 4 else row['answer']}")),
            "train row 5", "has no gold", "1 of 32 rows")
    refused(domain_package(rows_mistake("{'answer': ''}")), "every train row's 'answer' (the gold) is empty")


def test_a_merger_a_hook_or_an_eval_logger_that_raises_is_refused(domain_package):
    refused(domain_package("def merge(roles):\n    return roles['Critic']\n"
                           "DOMAIN = dataclasses.replace(DOMAIN, merger=merge)\n"),
            "merger raised KeyError", "'Critic'", "never raises on model output")
    refused(domain_package("DOMAIN = dataclasses.replace(DOMAIN, outcome=lambda leaves: [l.item['label'] "
                           "for l in leaves])\n"), "outcome(leaves) raised KeyError", "train rows 1-3")
    message = refused(domain_package("def logger(completions, items):\n    return []\n"
                                     "DOMAIN = dataclasses.replace(DOMAIN, make_eval_logger=lambda wf: logger)\n"),
                      "the eval logger raised TypeError", "agent_completions_turns=")
    assert "eval_aggregator(rows, num_turns=1)" in message


@pytest.mark.parametrize("seed", [-1, 2 ** 32, True, 1.5])
def test_a_seed_the_run_refuses_is_refused_when_the_config_loads(domain_package, seed):
    with pytest.raises(ConfigError, match="seed must be an integer from 0 to"):
        load_config(data=domain_package(seed=seed))


@pytest.mark.parametrize("value, shown", [("1.0", "'1.0' (str)"), (None, "None"), (math.nan, "nan"),
                                          (np.float32("inf"), "inf")])
def test_the_runs_reward_call_refuses_a_value_that_is_not_a_finite_number(value, shown):
    """The run gathers rewards through leaf_rewards: CoMLRL's call coerced "1.0" to 1.0; now it stops the run."""
    def reward(a, b):
        return [value]

    with pytest.raises(RewardValueError, match=f"returned {re.escape(shown)}.*joint action 0 .item 'x0'"):
        leaf_rewards(reward, [["a", "b"], ["c", "d"]], [{"id": "x0"}, {"id": "x1"}], ["p", "q"])

    @batched
    def many(*completions, batch_items=None, prompts=None):
        return np.array([0.5, value], dtype=object)

    with pytest.raises(RewardValueError, match=f"returned {re.escape(shown)}.*joint action 1 .item 'x1'"):
        leaf_rewards(many, [["a", "b"], ["c", "d"]], [{"id": "x0"}, {"id": "x1"}], ["p", "q"])


@pytest.mark.parametrize("override, message", [
    ("agents.trainable={Planner: false, Writer: false}", "agents: trainable: false for every agent leaves nothing"),
    ("agents.learning_rate={Writer: -1}", "agents: learning_rate of agent 1 must be a number > 0, got -1"),
])
def test_agent_settings_the_trainer_refuses_after_loading_models_fail_the_dry_run(override, message):
    """Before, the dry-run said OK and the trainer refused them once the models were loaded."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        dry_run_report(load_config(ROOT / "domains" / "template" / "example.yaml", [override]))
