"""The domain contract and domain discovery.

A domain package exports ``DOMAIN`` (a :class:`Domain`) and registers it under the
entry-point group ``c3_plugin.domains``, so another package can add a domain without
touching this one. ``domains/template`` is a copy-me skeleton (its README tables the contract).

The config's ``<domain>:`` section, validated by ``config_cls``, is handed to the domain's code:
``load_datasets(section, seed, config)``, ``make_reward(config)`` and the optional hooks (``grammar``,
``wandb_keys``); ``validate_config`` and ``dry_run`` get the whole run config. Every hook is a named field,
one per concern (the reward, the eval logger, the dry-run's checks); there is no untyped bag of extras.

``outcome`` (optional) maps a batch of :class:`~c3_plugin.core.rollout.Leaf` (task item, final
action, every output on the path) to one hashable outcome per leaf: what the run achieved,
coarser than the action text (math: the normalised boxed answer; code: the per-test pass/fail
vector). The credit diagnostics use it for the influence ``I(J; Y)`` of a decision on the
outcome; with the action text itself every alternative's outcome is unique and influence is
the constant ``log n``, so a domain without an extractor gets no influence metric.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from importlib.metadata import entry_points
from importlib.util import find_spec
from typing import Any, Callable, Hashable, Mapping, Sequence

from c3_plugin.core.errors import ConfigError
from c3_plugin.core.rollout import Leaf
from c3_plugin.core.workflow import Workflow


@dataclass(frozen=True)
class Domain:
    """What a domain gives the trainers. The config's ``<name>:`` section, validated by ``config_cls``
    (a dict when ``config_cls`` is None), reaches the domain's code: ``load_datasets``, ``make_reward`` and the
    optional hooks below receive it (``dry_run`` and ``validate_config`` get the whole run config)."""

    name: str
    # (dataset section, seed, domain config) -> (train, eval); the section's "dry_run": True means the dry-run calls:
    # count and check, but leave what the run computes once and caches (reference outputs, timings) for the run, and say
    # what it will cost in the dry_run hook
    load_datasets: Callable[[Mapping[str, Any], int, Any], tuple[Any, Any]]
    workflows: Callable[[], Mapping[str, Workflow]]  # named workflows with this domain's prompts
    # (domain config) -> the reward (CoMLRL's reward contract, with a ``reward_range`` attribute)
    make_reward: Callable[[Any], Callable[..., list[float]]]
    # (workflow) -> its eval logger (CoMLRL 1.4.3 form)
    make_eval_logger: Callable[[Workflow], Callable[..., list[dict]]]
    # rows -> metrics; accuracy-like ones named "<datasource>/accuracy" (plots and c3 compare use eval/*/accuracy, else
    # eval/reward_mean)
    eval_aggregator: Callable[..., dict[str, float]]
    # (run config, train, eval) -> fields of the --dry-run report, from checks that load no model; "probe" (a dict with
    # "probe_reward") is required (:func:`probe_only` builds the hook from a probe of the domain config)
    dry_run: Callable[[Any, Any, Any], dict[str, Any]]
    config_cls: type | None = None  # dataclass validating the config's <domain> section
    # the workflow a config without workflow.name runs (None: the built-in parallel team)
    default_workflow: str | None = None
    merger: Callable[[Mapping[str, str]], str] | None = None
    # the row field holding the gold the reward compares with (None: no single gold field); the dry-run checks every
    # row has one, not all empty, and scores the gold itself as a made-up completion
    gold: str | None = None
    formatters: Callable[[Workflow], list[Callable]] | None = None  # CoMLRL formatters for plain MAGRPOTrainer use
    # leaves -> one categorical outcome each (the extracted answer, the test results), for the credit/*/influence
    # diagnostic; None: influence is not logged
    outcome: Callable[[Sequence[Leaf]], Sequence[Hashable]] | None = None
    # (run config, workflow) -> raises ConfigError/ValueError on a config this domain cannot run; also the place to
    # apply domain settings that live outside the reward
    validate_config: Callable[[Any, Workflow], None] | None = None
    # (domain config) -> forced JSON skeleton grammar (Prompt -> Skeleton | None) or None for free text
    grammar: Callable[[Any], Any] | None = None
    # (domain config) -> metric globs published to W&B when the algorithm section sets none
    wandb_keys: Callable[[Any], list[str]] | None = None
    # (joint workflow or None) -> the centralized joint actor's adapter (CoMLRL's CentralizedComparatorAdapter: joint
    # prompt, split of a joint action into role actions)
    joint_adapter: Callable[[Workflow | None], Any] | None = None

    def workflow(self, name: str | None = None) -> Workflow:
        """The domain's workflow ``name`` (None: ``default_workflow``)."""
        flows = self.workflows()
        name = name or self.default_workflow
        if name not in flows:
            raise KeyError(f"domain '{self.name}' has no workflow '{name}'; its workflows: {', '.join(sorted(flows))}")
        return flows[name]


def probe_only(probe: Callable[[Any], dict[str, Any]]) -> Callable[[Any, Any, Any], dict[str, Any]]:
    """A ``Domain.dry_run`` hook from a probe of the domain config alone: the report's ``probe`` is
    ``probe(config)``."""
    return lambda cfg, train, evals: {"probe": probe(cfg.domain_cfg)}


def domain_names() -> list[str]:
    """The registered domains' names (entry points of ``c3_plugin.domains``)."""
    return sorted({ep.name for ep in entry_points(group="c3_plugin.domains")})


def check_domain_name(name: str) -> None:
    """A ``KeyError`` naming the registered domains when ``name`` is none of them (found, not imported)."""
    known = sorted({ep.name for ep in entry_points(group="c3_plugin.domains")})
    if name in known:
        return
    try:
        found = find_spec(f"domains.{name}") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise KeyError(f"unknown domain '{name}'; registered: {', '.join(known) or 'none'}")


def load_domain(name: str) -> Domain:
    """The ``DOMAIN`` of a registered domain (entry point) or of the package ``domains.<name>``."""
    for ep in entry_points(group="c3_plugin.domains"):
        if ep.name == name:
            return ep.load()
    try:
        return import_module(f"domains.{name}").DOMAIN
    except ModuleNotFoundError as exc:
        known = sorted({ep.name for ep in entry_points(group="c3_plugin.domains")})
        raise KeyError(f"unknown domain '{name}'; registered: {', '.join(known) or 'none'}") from exc


def single_train_source(section: Mapping[str, Any], domain: str) -> dict[str, Any]:
    """``dataset.train`` of a domain that reads one train source: the mapping (empty when unset); a list of
    sources (the math domain's weighted mix) is refused by name."""
    train = section.get("train") or {}
    if not isinstance(train, Mapping):
        raise ConfigError(f"dataset.train: the {domain} domain reads one train source (a mapping), got a list of "
                          f"{len(train)}; mixing several sources by weight is the math domain's (domains/math/data.py)")
    return dict(train)
