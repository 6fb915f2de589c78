"""Each algorithm's config declares what the run path needs to know (registry.Capabilities); no module tells
algorithm families apart by the fields a config happens to have."""

import re
from dataclasses import replace
from pathlib import Path

from c3_plugin.core.registry import (
    _BUILTIN,
    UNDECLARED,
    WORKFLOW,
    WORKFLOW_KEYWORDS,
    Capabilities,
    capabilities,
    resolve,
)

ROOT = Path(__file__).resolve().parents[2]
MARKERS = ("plan", "preference_num_candidates", "num_iterations", "reward_model_name", "critic_max_tokens",
           "instances_per_update", "default_plan_kind")


def test_every_builtin_algorithm_declares_its_capabilities():
    caps = {name: capabilities(resolve(name)[0]) for name in _BUILTIN}
    assert all(c is not UNDECLARED for c in caps.values())
    assert caps["c3"] == caps["magrpo"] == WORKFLOW and caps["mappo"] == replace(WORKFLOW, decision_critic=True)
    assert WORKFLOW.workflow_trainer and WORKFLOW.trainer_keywords == WORKFLOW_KEYWORDS
    assert "outcome" in WORKFLOW_KEYWORDS
    assert caps["centralized_magrpo"] == Capabilities("per_prompt")
    for name in ("madpo", "marlhf", "madpo_iter", "marlhf_iter"):
        for n in (name, f"centralized_{name}"):
            c = caps[n]
            assert c.budget == "preference" and not c.data_parallel
            assert c.learned_reward == ("marlhf" in n) and c.iterative == n.endswith("_iter")
            assert not c.workflow_trainer and c.trainer_keywords == ()
    assert capabilities(resolve("c3")[0]()) is caps["c3"]  # an instance answers as its class


def test_a_config_that_declares_nothing_is_a_comlrl_loop():
    class Other:
        plan = "tree [2, 4]"  # a field with a family's name does not make it one

    assert capabilities(Other) is UNDECLARED and capabilities(Other()).budget == "per_prompt"


def test_no_module_dispatches_on_a_config_s_fields():
    pattern = re.compile(r"hasattr\([^)]*,\s*[\"'](%s)[\"']\)" % "|".join(MARKERS))
    found = [f"{p.relative_to(ROOT)}:{i}" for p in (ROOT / "c3_plugin").rglob("*.py")
             for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == [], found


def test_inert_fields_are_read_from_the_config_class_declaration():
    """registry.inert_fields evaluates a config class's own Inert declarations (globs, a condition on the config and
    the workflow, the reason formatted with its fields): no list of names outside the class."""
    from dataclasses import dataclass
    from typing import ClassVar

    from c3_plugin.core.registry import Inert, inert_fields
    from c3_plugin.trainers.c3 import C3Config

    @dataclass
    class Toy:
        inert_fields: ClassVar[tuple] = (Inert(("extra_*",), lambda c, w: c.mode != "extra", "unread under {mode}"),)
        mode: str = "plain"
        extra_weight: float = 1.0
        extra_steps: int = 2
        lr: float = 0.1

    assert inert_fields(Toy()) == {"extra_weight": "unread under plain", "extra_steps": "unread under plain"}
    assert inert_fields(Toy(mode="extra")) == {}
    loo = inert_fields(C3Config(plan="tree [2, 4]"))
    assert {k for k in loo if k.startswith("q_critic_")} == {"q_critic_model", "q_critic_alpha",
                                                             "q_critic_learning_rate", "q_critic_epochs",
                                                             "q_critic_max_tokens", "q_critic_warmup_updates"}
    assert "allow_estimator_change" in loo and "credit" not in loo and "plan" not in loo
    assert "share_parallel_samples" not in loo  # the workflow is not known: it may have parallel roles
    assigned = inert_fields(C3Config(plan="tree [2, 4]", credit="value_assisted", allow_estimator_change=True))
    assert not any(k.startswith("q_critic_") or k == "allow_estimator_change" for k in assigned)
