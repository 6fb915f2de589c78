"""The settings refused at config load (``c3_plugin.core.estimator_rules``): each refused with its reason and fix,
from a YAML config and from CoMLRL-style direct construction, and each proven numerically: a ``no-op`` rule's setting
gives the same advantages (or update) as the setting it is refused for, computed through the trainers' own credit hooks
and the trainers' scaling step, so the test fails if the rule is wrong; the ``estimator`` rule changes C3's
advantages into another estimator, and its acknowledgement field accepts it."""

import types
import warnings
from dataclasses import make_dataclass

import numpy as np
import pytest
import torch

from c3_plugin import load_workflow, materialize
from c3_plugin.core.config import ConfigError, load_config
from c3_plugin.core.credit import normalize_advantages, tree_advantages
from c3_plugin.core.estimator_rules import RULES, credit_fields, violations
from c3_plugin.core.loss import ppo_loss
from c3_plugin.core.synthetic import SyntheticBackend, SyntheticEnv
from c3_plugin.run.testing import experiment_config
from c3_plugin.trainers.base import WorkflowTrainer
from c3_plugin.trainers.c3 import C3Config, C3Trainer
from c3_plugin.trainers.magrpo import WorkflowMAGRPOConfig, WorkflowMAGRPOTrainer
from c3_plugin.trainers.mappo import MAPPOConfig, MAPPOTrainer

CLASSES = {"c3": C3Config, "magrpo": WorkflowMAGRPOConfig, "mappo": MAPPOConfig}
SCALINGS = ("none", "batch_scale", "batch_zscore", "group_zscore")
ITEMS = [{"id": f"q{i}", "question": f"Q{i % 3}"} for i in range(6)]

# one triggering example per rule: (algorithm, fields)
EXAMPLES = {
    "rloo_under_scaling": [("magrpo", {"advantage_mode": "rloo"}),  # under MAGRPO's default group_zscore
                           ("magrpo", {"advantage_mode": "rloo", "advantage_scaling": "batch_scale"}),
                           ("magrpo", {"advantage_mode": "rloo", "advantage_scaling": "batch_zscore"})],
    "mode_under_group_zscore": [("magrpo", {"advantage_mode": "max"}), ("magrpo", {"advantage_mode": "raw"})],
    "single_run_group": [("magrpo", {"plan": "independent 1", "advantage_scaling": "none"}),
                         ("magrpo", {"plan": "independent 1", "advantage_scaling": "batch_scale",
                                     "advantage_mode": "max"})],
    "advantage_mode_unread": [("c3", {"advantage_mode": "rloo"}), ("mappo", {"advantage_mode": "max"})],
    "clip_high_equals_clip": [("c3", {"clip_eps_high": 0.2}), ("magrpo", {"clip_eps": 0.3, "clip_eps_high": 0.3}),
                              ("mappo", {"clip_eps_high": 0.2})],
    "no_group": [("c3", {"plan": "tree [1, 1]"})],
    "group_zscore_changes_estimator": [("c3", {"advantage_scaling": "group_zscore"})],
    "value_assisted_changes_estimator": [("c3", {"credit": "value_assisted"}),
                                         ("c3", {"credit": "value_assisted", "q_critic_alpha": 0.5})],
}


def test_every_rule_has_an_example_and_a_reason_and_fix():
    assert set(EXAMPLES) == {r.name for r in RULES}
    for rule in RULES:
        assert rule.kind in ("no-op", "estimator") and rule.reason and rule.fix
        assert (rule.acknowledge is not None) == (rule.kind == "estimator")
    # each config class names the rules its configs are checked against, and every rule is some class's
    assert set().union(*(cls.estimator_rules for cls in CLASSES.values())) == {r.name for r in RULES}
    assert all(name in CLASSES[algorithm].estimator_rules for name, cases in EXAMPLES.items() for algorithm, _ in cases)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_each_rule_refuses_direct_construction_and_yaml_with_reason_and_fix(name, tmp_path):
    rule = next(r for r in RULES if r.name == name)
    for algorithm, values in EXAMPLES[name]:
        with pytest.raises(ValueError, match=rf"\[{name}\].*Fix: ") as info:  # CoMLRL style: C3Config(...)
            experiment_config(CLASSES[algorithm], **values)
        assert rule.fix.split(" ")[0] in str(info.value)
        data = {"domain": "math", "algorithm": algorithm, algorithm: values,
                "dataset": {"train": {"source": "synthetic", "task": "compare", "size": 4}}}
        with pytest.raises(ConfigError, match=rf"^{algorithm}: \[{name}\]"):  # a YAML section: ConfigError via bind
            load_config(data=data)
        other = "magrpo" if algorithm != "magrpo" else "c3"  # a section of another algorithm is checked as well
        with pytest.raises(ConfigError, match=rf"\[{name}\]"):
            load_config(data={**data, "algorithm": other})


def test_defaults_and_the_other_modes_and_scalings_are_accepted():
    for cls in CLASSES.values():
        assert violations(cls(), "c3" if cls is C3Config else "magrpo" if cls is WorkflowMAGRPOConfig
                          else "mappo") == []
    for scaling in SCALINGS:
        experiment_config(WorkflowMAGRPOConfig, advantage_scaling=scaling)  # mean under every scaling
    # the one scaling where rloo differs
    experiment_config(WorkflowMAGRPOConfig, advantage_mode="rloo", advantage_scaling="none")
    for mode in ("max", "raw"):
        for scaling in ("none", "batch_scale", "batch_zscore"):
            experiment_config(WorkflowMAGRPOConfig, advantage_mode=mode, advantage_scaling=scaling)
    experiment_config(WorkflowMAGRPOConfig, plan="independent 1", advantage_mode="raw", advantage_scaling="none")
    experiment_config(C3Config, clip_eps_high=0.28)
    experiment_config(C3Config, plan="tree [1, 4]")
    for scaling in ("none", "batch_scale", "batch_zscore"):
        experiment_config(C3Config, advantage_scaling=scaling)


# ----- the numeric proofs ----------------------------------------------------------------------------------

def rollout(plan, items=ITEMS, seed=0, workflow="reasoner_actor"):
    """A real materialised rollout with continuous returns (no ties), on the synthetic environment."""
    wf = load_workflow(workflow)
    env = SyntheticEnv(wf, vocab=3, seed=seed)
    rng = np.random.default_rng(seed)
    return materialize(wf, plan, items, SyntheticBackend(env, seed=seed),
                       lambda leaves: list(rng.normal(size=len(leaves))))


def scaled(trainer_cls, args, ro):
    """The trainer's credit hook, then its scaling step as ``WorkflowTrainer.build_samples`` runs it on one process:
    per agent, the groups of :meth:`WorkflowTrainer._group_key`. Returns {agent: advantages in entry order}."""
    from c3_plugin import parse_plan

    stub = types.SimpleNamespace(args=args, plan=parse_plan(args.plan))
    stub._group_key = types.MethodType(WorkflowTrainer._group_key, stub)
    credited = trainer_cls.compute_advantages(stub, ro)
    groups, per_agent = {}, {}
    for indices, adv in credited:
        indices, adv = ro.unique_credit(indices, adv)
        for i, a in zip(indices, adv):
            e = ro.entries[int(i)]
            per_agent.setdefault(int(e.agent),
                                 []).append((float(a), groups.setdefault(stub._group_key(e), len(groups))))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # group_zscore's +-1 warning
        return {agent: normalize_advantages(np.array([r[0] for r in rows]), args.advantage_scaling,
                                            groups=np.array([r[1] for r in rows]))
                for agent, rows in per_agent.items()}


def magrpo_args(**fields):
    return types.SimpleNamespace(**{"plan": "independent 8", "advantage_mode": "mean", "advantage_scaling": "none",
                                    **fields})


def assert_same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-9, atol=1e-12)


def assert_differ(a, b):
    assert any(not np.allclose(a[k], b[k]) for k in a)


def test_rloo_is_mean_under_every_scaling_that_divides_by_a_std_and_differs_only_under_none():
    ro = rollout("independent 8")
    for scaling in ("batch_scale", "batch_zscore", "group_zscore"):
        assert_same(scaled(WorkflowMAGRPOTrainer, magrpo_args(advantage_mode="rloo", advantage_scaling=scaling), ro),
                    scaled(WorkflowMAGRPOTrainer, magrpo_args(advantage_mode="mean", advantage_scaling=scaling), ro))
    rloo, mean = (scaled(WorkflowMAGRPOTrainer, magrpo_args(advantage_mode=m), ro) for m in ("rloo", "mean"))
    for k in rloo:
        np.testing.assert_allclose(rloo[k], mean[k] * 8 / 7)  # under none: the B/(B-1) factor the scalings remove


def test_every_mode_is_mean_under_group_zscore_and_max_raw_differ_under_the_other_scalings():
    ro = rollout("independent 8", seed=1)
    mean = scaled(WorkflowMAGRPOTrainer, magrpo_args(advantage_scaling="group_zscore"), ro)
    for mode in ("rloo", "max", "raw"):
        assert_same(scaled(WorkflowMAGRPOTrainer, magrpo_args(advantage_mode=mode, advantage_scaling="group_zscore"),
                           ro), mean)
    for mode in ("max", "raw"):
        for scaling in ("none", "batch_scale", "batch_zscore"):
            other = magrpo_args(advantage_mode=mode, advantage_scaling=scaling)
            assert_differ(scaled(WorkflowMAGRPOTrainer, other, ro),
                          scaled(WorkflowMAGRPOTrainer, magrpo_args(advantage_scaling=scaling), ro))


def test_one_run_per_instance_gives_zero_advantages_except_raw():
    ro = rollout("independent 1")
    for mode in ("mean", "rloo", "max"):
        for scaling in ("none", "batch_scale", "batch_zscore"):
            adv = scaled(WorkflowMAGRPOTrainer, magrpo_args(plan="independent 1", advantage_mode=mode,
                                                            advantage_scaling=scaling), ro)
            assert all(np.all(a == 0) for a in adv.values())  # no advantage, no policy gradient: nothing trains
    raw = scaled(WorkflowMAGRPOTrainer, magrpo_args(plan="independent 1", advantage_mode="raw"), ro)
    assert all(np.any(a != 0) for a in raw.values())


def test_c3_and_mappo_do_not_read_advantage_mode():
    ro = rollout("tree [2, 4]")
    c3 = {m: scaled(C3Trainer, types.SimpleNamespace(plan="tree [2, 4]", advantage_mode=m, advantage_scaling="none",
                                                         credit="loo"), ro)
          for m in ("mean", "rloo", "max", "raw")}
    for m in ("rloo", "max", "raw"):
        assert_same(c3[m], c3["mean"])
    ro = rollout("independent 8")
    values = np.random.default_rng(3).normal(size=ro.rewards.size * ro.workflow.num_decisions)

    def mappo(mode):
        stub = types.SimpleNamespace(args=types.SimpleNamespace(advantage_mode=mode, gamma=1.0, gae_lambda=0.95),
                                     critic_states=lambda r: list(range(len(values))), values=lambda s: values)
        return {u: adv for u, (_, adv) in enumerate(MAPPOTrainer.compute_advantages(stub, ro))}

    for m in ("rloo", "max", "raw"):
        assert_same(mappo(m), mappo("mean"))


def test_an_upper_clip_equal_to_clip_eps_is_the_symmetric_clip():
    torch.manual_seed(0)
    old = torch.randn(6, 5)
    mask = torch.ones(6, 5)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0])
    grads = {}
    for high in (None, 0.2, 0.28):
        ratios = torch.linspace(0.6, 1.6, 30).reshape(5, 6).T  # every row's ratios cross 1 +- 0.2 and 1.28
        new = (old + torch.log(ratios)).requires_grad_(True)
        loss, stats = ppo_loss(new, old, adv, mask, clip=0.2, clip_high=high)
        loss.backward()
        grads[high] = (float(loss.detach()), stats.clip_fraction, new.grad.clone())
    assert grads[None][0] == grads[0.2][0] and grads[None][1] == grads[0.2][1] > 0
    assert torch.equal(grads[None][2], grads[0.2][2])
    assert not torch.equal(grads[None][2], grads[0.28][2])  # a larger upper clip is a real change


def test_a_tree_of_ones_forms_no_group_so_c3_trains_nothing():
    ro = rollout("tree [1, 1]")
    assert C3Trainer.compute_advantages(types.SimpleNamespace(args=C3Config()), ro) == []
    assert len(C3Trainer.compute_advantages(types.SimpleNamespace(args=C3Config()), rollout("tree [1, 4]"))) == 1


def test_group_zscore_turns_c3_leave_one_out_into_another_estimator_unless_acknowledged():
    ro = rollout("tree [2, 4]", seed=4)
    def args(s):
        return types.SimpleNamespace(plan="tree [2, 4]", advantage_scaling=s, advantage_mode="mean", credit="loo")

    loo, z = scaled(C3Trainer, args("none"), ro), scaled(C3Trainer, args("group_zscore"), ro)
    reasoner, actor = 0, 1
    assert np.allclose(np.abs(z[reasoner]), 1.0)  # 2 alternatives per context: +-1 whatever the returns
    assert not np.allclose(np.abs(loo[reasoner]), np.abs(loo[reasoner][0]))
    ratio = z[actor] / loo[actor]  # not one positive scale of the leave-one-out values: a per-context rescaling
    assert np.all(ratio > 0) and ratio.std() > 0.1 * ratio.mean()
    # what it equals: each context's mean baseline over its alternatives, divided by the context's own spread
    rewards = ro.rewards.reshape(len(ITEMS), 2, 4)
    centred = rewards - rewards.mean(-1, keepdims=True)
    np.testing.assert_allclose(z[actor], (centred / rewards.std(-1, keepdims=True)).reshape(-1))
    np.testing.assert_allclose(loo[actor], tree_advantages(ro.rewards)[1])
    # batch_scale keeps the estimator: one positive scale for the whole batch
    b = scaled(C3Trainer, args("batch_scale"), ro)
    np.testing.assert_allclose(b[actor] / loo[actor], (b[actor] / loo[actor])[0])
    with pytest.raises(ValueError, match=r"changes C3's estimator.*allow_estimator_change: true"):
        experiment_config(C3Config, advantage_scaling="group_zscore")
    assert experiment_config(C3Config, advantage_scaling="group_zscore",
                             allow_estimator_change=True).allow_estimator_change
    cfg = load_config(data={"domain": "math", "algorithm": "c3",
                            "c3": {"advantage_scaling": "group_zscore", "allow_estimator_change": True},
                            "dataset": {"train": {"source": "synthetic", "task": "compare", "size": 4}}})
    assert cfg.algo.advantage_scaling == "group_zscore"


def test_credit_fields_expand_globs_and_name_real_fields():
    c3 = credit_fields(C3Config)
    assert {"plan", "share_parallel_samples", "credit_diagnostics", "allow_estimator_change"} <= c3
    assert {n for n in c3 if n.startswith("q_critic_")} == {f for f in C3Config.__dataclass_fields__
                                                            if f.startswith("q_critic_")}
    assert credit_fields(WorkflowMAGRPOConfig) == {"plan", "advantage_mode"}
    mappo = credit_fields(MAPPOConfig)
    assert {"critic_model", "critic_learning_rate", "gae_lambda", "gamma", "advantage_per_token"} <= mappo
    assert credit_fields(make_dataclass("Undeclared", [("plan", str), ("x", int)])) == {"plan"}  # none declared
    for cls in CLASSES.values():  # every literal name a class declares is a field of that config
        literal = {p for p in cls.credit_fields if "*" not in p}
        assert literal <= set(cls.__dataclass_fields__), literal - set(cls.__dataclass_fields__)
