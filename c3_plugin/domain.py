"""The domain contract and domain discovery.

A domain package exports ``DOMAIN`` (a :class:`Domain`) and registers it under the
entry-point group ``c3_plugin.domains``, so another package can add a domain without
touching this one. ``domains/template`` is a copy-me skeleton.

``outcome`` (optional) maps a batch of :class:`~c3_plugin.rollout.Leaf` (task item, final
action, every output on the path) to one hashable outcome per leaf: what the run achieved,
coarser than the action text (math: the normalised boxed answer; code: the per-test pass/fail
vector). The credit diagnostics use it for the influence ``I(J; Y)`` of a decision on the
outcome; with the action text itself every alternative's outcome is unique and influence is
the constant ``log n``, so a domain without an extractor gets no influence metric.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module
from importlib.metadata import entry_points
from typing import Any, Callable, Hashable, Mapping, Sequence

from .rollout import Leaf
from .workflow import Workflow


@dataclass(frozen=True)
class Domain:
    name: str
    load_datasets: Callable[[Mapping[str, Any], int], tuple[Any, Any]]  # (dataset section, seed) -> (train, eval)
    workflows: Callable[[], Mapping[str, Workflow]]  # named workflows with this domain's prompts
    reward: Callable[..., list[float]]  # CoMLRL contract; has a ``reward_range`` attribute
    eval_logger: Callable[..., list[dict]]  # CoMLRL 1.4.3 form
    eval_aggregator: Callable[..., dict[str, float]]
    dry_run_probe: Callable[[], dict[str, Any]]  # checks that load no model; includes "probe_reward"
    config_cls: type | None = None  # dataclass validating the config's <domain> section
    merger: Callable[[Mapping[str, str]], str] | None = None
    formatters: Callable[[Workflow], list[Callable]] | None = None  # CoMLRL formatters for plain MAGRPOTrainer use
    make_eval_logger: Callable[[Workflow], Callable[..., list[dict]]] | None = None  # role-aware eval logger
    outcome: Callable[[Sequence[Leaf]], Sequence[Hashable]] | None = None  # leaves -> one categorical outcome each (the extracted answer, the test results), for the credit/*/influence diagnostic; None: influence is not logged
    extras: Mapping[str, Any] = field(default_factory=dict)

    def workflow(self, name: str) -> Workflow:
        flows = self.workflows()
        if name not in flows:
            raise KeyError(f"domain '{self.name}' has no workflow '{name}'; available: {', '.join(sorted(flows))}")
        return flows[name]


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
