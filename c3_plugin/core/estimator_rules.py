"""What makes up each algorithm's estimator, and the settings refused because they change nothing or change it.

What is credit, what is ignored and what is refused, read by the algorithm configs (:meth:`check`, from each
``__post_init__``, so a YAML config and a CoMLRL-style ``C3Config(...)`` are refused alike) and by ``c3 compare``
(through :func:`c3_plugin.run.dry_run.optimisation_settings`):

* :func:`credit_fields`: the fields that are an algorithm's credit (and the plan that credit needs), as its config
  class declares them (``credit_fields``, globs allowed; :mod:`c3_plugin.core.registry`). A head-to-head may differ
  in these and nothing else.
* :data:`NOT_OPTIMISATION`: fields that change neither the update nor what is measured (output, logging,
  throughput, memory placement); the controlled comparison ignores them.
* :data:`RULES`: each a predicate, the reason and the fix; a config class names the rules its configs are checked
  against (``estimator_rules``). ``no-op`` rules refuse a setting that gives the same advantages (and so the same
  update) as another one, named in ``same_as`` where there is one (the tests compute
  both and assert they are equal); ``estimator`` rules refuse a setting that turns the credit into another
  estimator unless the config's acknowledgement field is set.

Layer: core (imports nothing of this package but the plan parser), like :mod:`c3_plugin.core.credit`.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from c3_plugin.core.plan import Plan, parse_plan

NOT_OPTIMISATION: tuple[str, ...] = (
    "save_traces", "wandb_keys", "logging_steps",  # output and logging
    # the dry-run's acknowledgement of the plan's untrained decisions (the plan itself is diffed)
    "untrained_decisions",
    "eval_batch_size", "generation_batch_size",  # sequences per generate call: throughput (the same decoding)
    "micro_batch_size",  # gradient accumulation: the step equals the one-batch step (tests/core/test_loss.py)
    "logprob_mismatch",  # a measurement (importance_sampling_cap, which it enables, is diffed)
    "vllm_gpu_memory_utilization", "vllm_kv_cache_gb", "vllm_enable_sleep_mode", "vllm_enforce_eager",
    "vllm_tensor_parallel_size", "vllm_tree_prefill",  # the engine's memory and speed (the same samples)
    "agent_devices", "reference_devices",  # placement
    # only the default plan's budget: the resolved plan is diffed (a credit field) and the budgets compared
    "num_generations",
    "critic_learning_rate", "value_loss_coef", "value_clip_range", "use_separate_critic", "critic_type",
    # IAC's/MAAC's critic fields: accepted and unread by C3 (trainers/actor_critic_fields.py); MAPPO's own critic_* are
    # its credit
    "critic_value_head_hidden_dim", "value_head_hidden_dim", "critic_devices",
    # which CoMLRL config a C3Config stands in for: it sets the defaults of fields that are diffed themselves
    "comlrl_reference",
)


def credit_fields(config_cls: type | None) -> set[str]:
    """The fields of ``config_cls`` that are its algorithm's credit: the ``credit_fields`` its class declares (globs
    expanded; only ``plan`` for a class that declares none)."""
    patterns = tuple(getattr(config_cls, "credit_fields", None) or ("plan",))
    names = [f.name for f in dataclasses.fields(config_cls)] if config_cls is not None else []
    out = {p for p in patterns if not any(c in p for c in "*?[")}
    out.update(n for n in names for p in patterns if fnmatch.fnmatchcase(n, p))
    return out


def _default(cfg: Any, name: str) -> Any:
    for f in dataclasses.fields(cfg):
        if f.name == name:
            return f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
    return None


def _leave_one_out(cfg: Any) -> bool:
    """C3 with its own credit (leave-one-out over continuations), not a variant another field selects."""
    return getattr(cfg, "credit", None) == _default(cfg, "credit")


def _plan(cfg: Any) -> Any:
    """The config's plan; a config without one (the trainer picks the default plan, then checks again) matches
    no plan rule."""
    return parse_plan(cfg.plan) if cfg.plan is not None else Plan(kind="default")


@dataclass(frozen=True)
class Rule:
    name: str  # short id, in the message, the tests and a config class's estimator_rules (the configs it checks)
    # "no-op": gives the same advantages as another setting; "estimator": turns the credit into another estimator
    kind: str
    applies: Callable[[Any], bool]  # the predicate on the config
    reason: str  # why, formatted with the config's fields (and {algorithm})
    fix: str  # what to write instead
    same_as: Mapping[str, Any] | None = None  # no-op: the setting it is identical to (None: it trains nothing at all)
    acknowledge: str | None = None  # estimator: the field that accepts the change

    def message(self, cfg: Any, algorithm: str) -> str:
        values = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
        values["algorithm"] = algorithm
        values["B"] = _plan(cfg).runs if _plan(cfg).kind == "independent" else "B"
        return f"[{self.name}] {self.reason.format(**values)} Fix: {self.fix.format(**values)}"


RULES: tuple[Rule, ...] = (
    Rule("rloo_under_scaling", "no-op",
         lambda c: c.advantage_mode == "rloo" and c.advantage_scaling != "none",
         "advantage_mode: rloo under advantage_scaling: {advantage_scaling} changes nothing: rloo is mean's advantage "
         "times {B}/({B}-1) (every group holds the {B} runs of one instance), and {advantage_scaling} divides by a "
         "standard deviation, which removes that factor, so rloo and mean give the same advantages.",
         "advantage_mode: mean (the same update), or advantage_scaling: none, the one scaling "
         "under which rloo differs.",
         same_as={"advantage_mode": "mean"}),
    Rule("mode_under_group_zscore", "no-op",
         lambda c: c.advantage_scaling == "group_zscore" and c.advantage_mode in ("max", "raw"),
         "advantage_mode: {advantage_mode} under advantage_scaling: group_zscore changes nothing: {advantage_mode} "
         "differs from mean by one constant per group (the group's max, or its mean), and z-scoring each group "
         "removes any such shift, so it gives mean's advantages.",
         "advantage_mode: mean (the same update), or advantage_scaling: none, batch_scale or batch_zscore, under "
         "which {advantage_mode} differs from mean.",
         same_as={"advantage_mode": "mean"}),
    Rule("single_run_group", "no-op",
         lambda c: _plan(c).kind == "independent" and _plan(c).runs == 1 and c.advantage_mode != "raw",
         "plan '{plan}' with advantage_mode: {advantage_mode} trains nothing: a group of one run is its own baseline, "
         "so every advantage is 0 (and group_zscore cannot scale a group of one).",
         "plan: 'independent B' with B >= 2 (the baselines run 8), or advantage_mode: raw (no baseline)."),
    Rule("advantage_mode_unread", "no-op",
         lambda c: c.advantage_mode != _default(c, "advantage_mode"),
         "advantage_mode: {advantage_mode} changes nothing under {algorithm}: it is MAGRPO's group baseline "
         "(CoMLRL's field), and {algorithm} credits with its own estimator (C3: leave-one-out over counterfactual "
         "continuations; MAPPO: a critic and GAE).",
         "drop advantage_mode from the {algorithm} section (set it in magrpo:, where it is read).",
         same_as={"advantage_mode": "mean"}),
    Rule("clip_high_equals_clip", "no-op",
         lambda c: c.clip_eps_high is not None and float(c.clip_eps_high) == float(c.clip_eps),
         "clip_eps_high: {clip_eps_high} equal to clip_eps changes nothing: the upper clip is clip_eps when "
         "clip_eps_high is None.",
         "drop clip_eps_high, or give a larger upper clip (e.g. 0.28, the asymmetric clip it exists for).",
         same_as={"clip_eps_high": None}),
    Rule("no_group", "no-op",
         lambda c: _leave_one_out(c) and _plan(c).kind == "tree" and max(_plan(c).tree) < 2,
         "plan '{plan}' trains nothing under C3: every decision point samples one alternative per context, so no "
         "group forms and no message gets a leave-one-out advantage.",
         "branch at least one decision point, e.g. plan: 'tree [2, 4]'."),
    Rule("group_zscore_changes_estimator", "estimator",
         lambda c: _leave_one_out(c) and c.advantage_scaling == "group_zscore"
         and not getattr(c, "allow_estimator_change", False),
         "advantage_scaling: group_zscore changes C3's estimator: z-scoring each context's alternatives divides "
         "that group's leave-one-out advantages by the group's own spread, which leaves a per-context mean baseline "
         "in units of the spread (the n/(n-1) factor and the size of each difference are gone) and turns every "
         "2-alternative group into +-1, whatever the returns.",
         "keep advantage_scaling: none (or batch_scale, one scale for the whole batch, which keeps every sign, zero "
         "and ratio), or set allow_estimator_change: true in the c3 section to train that estimator on purpose.",
         acknowledge="allow_estimator_change"),
    Rule("value_assisted_changes_estimator", "estimator",
         lambda c: getattr(c, "credit", None) == "value_assisted" and not getattr(c, "allow_estimator_change", False),
         "credit: value_assisted (the reference code's default) is another estimator than C3's leave-one-out: it "
         "z-scores each context's alternatives (every 2-alternative group becomes +-1, whatever the returns), and its "
         "critic is no baseline there: with equal continuations per alternative, A_j is, up to one constant per group "
         "(which the z-score removes), ((n - alpha) mean(R_j) + alpha Q_hat_j) / (n - 1), so Q_hat enters the credit "
         "of the very alternative it rates, a bonus for the alternatives it rates highly (alpha = {q_critic_alpha}).",
         "credit: loo (the paper's estimator), or set allow_estimator_change: true in the c3 section to train the "
         "reference code's estimator on purpose.",
         acknowledge="allow_estimator_change"),
)


def violations(cfg: Any, algorithm: str) -> list[Rule]:
    """The rules ``cfg`` (an ``algorithm`` config dataclass) breaks, of those its class names (``estimator_rules``)."""
    names = {f.name for f in dataclasses.fields(cfg)}
    needed = {"plan", "advantage_mode", "advantage_scaling", "clip_eps", "clip_eps_high"}
    if not needed <= names:  # not a workflow algorithm's config
        return []
    checked = set(getattr(type(cfg), "estimator_rules", ()))
    return [r for r in RULES if r.name in checked and r.applies(cfg)]


def check(cfg: Any, algorithm: str) -> None:
    """Raise ``ValueError`` naming every broken rule with its reason and fix (a config's ``__post_init__`` calls it;
    :func:`c3_plugin.core.config.bind` turns it into a ``ConfigError``)."""
    broken = violations(cfg, algorithm)
    if broken:
        raise ValueError(" ".join(r.message(cfg, algorithm) for r in broken))
