"""Per-batch credit diagnostics of a materialised rollout, as flat metric dicts.

Every key is defined in ``docs/metrics.md``. For each decision point ``u`` whose plan
samples 2 or more alternatives per context, the groups are the children of each
depth-``u`` context and an alternative's continuations are the leaves below it. Where the
rollout shared a parallel role's samples, a group is the set of unique samples (counted
once) and a sample's continuations are the leaves below all of its copies. The noise law
and split-half reliability assume independent continuations; they are logged only where
the continuations are (:func:`independent_continuations`).
"""

from __future__ import annotations

from typing import Callable, Hashable, Sequence

import numpy as np

from c3_plugin.core import credit
from c3_plugin.core.rollout import Leaf, Rollout

_PAD = object()  # fills ragged shared groups of categorical outcomes


def group_returns(rewards: np.ndarray, u: int) -> np.ndarray:
    """Leaf rewards ``[instances, *branching]`` as the groups of decision ``u``: ``[G, b_u, leaves per child]``."""
    shape = rewards.shape
    return rewards.reshape(int(np.prod(shape[: 1 + u])), shape[1 + u], -1)


def shared_groups(groups: np.ndarray, parent_class: np.ndarray, fill: object = np.nan) -> np.ndarray:
    """Per-parent groups ``[P, b, L]`` as groups of unique samples ``[C, b, m L]``.

    The parents of one class (``parent_class``) hold copies of the same ``b`` samples; each
    sample's continuations are the leaves below all of its copies. A class with fewer than
    ``m`` (the largest class) parents is padded with ``fill``."""
    p, b, leaves = groups.shape
    _, cls, size = np.unique(parent_class, return_inverse=True, return_counts=True)
    order = np.argsort(cls, kind="stable")
    rank = np.empty(p, dtype=np.int64)
    rank[order] = np.arange(p) - np.repeat(np.cumsum(size) - size, size)
    out = np.full((len(size), int(size.max()), b, leaves), fill, dtype=groups.dtype)
    out[cls, rank] = groups
    return out.transpose(0, 2, 1, 3).reshape(len(size), b, -1)


def decision_groups(rollout: Rollout, values: np.ndarray, u: int, fill: object = np.nan) -> np.ndarray:
    """Groups ``[G, n, c]`` of decision ``u`` over per-leaf ``values`` shaped like the rewards: the
    children of each context, or, where the rollout shared the samples (parallel roles), each set
    of unique samples once with every copy's leaves as its continuations."""
    per_parent = group_returns(values, u)
    nodes = rollout.depth_nodes[rollout.workflow.decision_steps[u].index]
    owners = rollout.owner[nodes].reshape(per_parent.shape[:2])
    if np.array_equal(owners.reshape(-1), nodes):
        return per_parent
    return shared_groups(per_parent, owners[:, 0], fill)


def independent_continuations(rollout: Rollout, u: int) -> bool:
    """Whether every alternative's continuations at decision ``u`` are independent draws of the rest
    of the run: the plan branches below ``u`` only at ``u + 1`` (:meth:`~c3_plugin.core.plan.Plan.independent_points`)
    and no sample at or below ``u`` is shared among paths (shared parallel samples make the
    continuations of different alternatives common, which the noise law does not describe)."""
    if u not in rollout.plan.independent_points(rollout.workflow.num_decisions):
        return False
    nodes = np.concatenate([rollout.depth_nodes[s.index] for s in rollout.workflow.decision_steps[u:]])
    return bool(np.array_equal(rollout.owner[nodes], nodes))


def decision_diagnostics(groups: np.ndarray, outcomes: np.ndarray | None = None,
                         independent: bool = True) -> dict[str, float]:
    """Diagnostics of one decision point from its groups ``[G, n, c]`` (and optional categorical
    downstream outcomes of the same shape, for influence, which needs ``c >= 2``: from one
    continuation per alternative the plug-in ``I(J; Y)`` is just the entropy of ``Y``). The noise
    law and the split-half statistics are computed only when the continuations are ``independent``."""
    g, n, c = groups.shape
    adv = credit.loo_advantages_batch(groups)
    out = {"groups": float(g), "alternatives": float(n), "continuations": float(c),
           "within_group_variance": credit.within_group_variance(adv),
           "zero_signal_share": credit.zero_signal_share(groups),
           "advantage_abs_mean": float(np.abs(adv).mean()), "independent_continuations": float(independent)}
    if c >= 2:
        sigma2 = credit.pooled_return_variance(groups)
        out["return_variance"] = sigma2
    if c >= 2 and independent:
        out["noise_predicted"] = credit.noise_variance(sigma2, n, n * c)
        rho, used = credit.split_half_reliability(groups)
        out["split_half_reliability"], out["split_half_groups"] = rho, float(used)
        out["split_half_excluded"] = float(g - used)
        if c % 2 == 0:
            observed = credit.observed_noise_variance(credit.loo_advantages_batch(groups[..., 0::2]),
                                                      credit.loo_advantages_batch(groups[..., 1::2]))
            out["noise_ratio"] = observed / credit.noise_variance(sigma2, n, n * c // 2) if sigma2 > 0 else float("nan")
    if outcomes is not None and c >= 2:
        out["influence"] = float(np.mean([credit.influence([[y for y in alt if y is not _PAD] for alt in grp])
                                          for grp in outcomes]))
    return out


def leaf_outcomes(rollout: Rollout, outcome: Callable[[Sequence[Leaf]], Sequence[Hashable]]) -> np.ndarray:
    """The domain's categorical outcome of every leaf, as an object array shaped like the rewards."""
    values = list(outcome(rollout.leaves))
    if len(values) != len(rollout.leaves):
        raise ValueError(f"outcome extractor returned {len(values)} outcomes for {len(rollout.leaves)} leaves")
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):  # element-wise: tuple outcomes must stay single objects
        out[i] = v
    return out.reshape(rollout.rewards.shape)


def rollout_diagnostics(rollout: Rollout,
                        outcome: Callable[[Sequence[Leaf]], Sequence[Hashable]] | None = None) -> dict[str, float]:
    """Budget and credit diagnostics of one batch, keyed ``budget/*`` and ``credit/<role>_u<u>/*``.

    ``outcome`` is the domain's outcome extractor (:attr:`c3_plugin.core.domain.Domain.outcome`: leaves
    -> one hashable outcome each, such as the extracted answer); influence is logged only with
    one, never at the last decision point (its alternatives' outcomes are functions of their own
    messages) and only where an alternative has 2 or more continuations.
    """
    metrics = {f"budget/{k}": float(v) for k, v in rollout.budget.totals().items()}
    metrics["budget/tokens_per_instance"] = float(rollout.budget.tokens.mean())
    metrics["budget/messages_per_instance"] = float(rollout.budget.messages.mean())
    k = rollout.workflow.num_decisions
    roles = rollout.workflow.decision_points()
    outcomes = None
    for u in rollout.plan.credit_points(k):
        groups = decision_groups(rollout, rollout.rewards, u)
        influence = None
        if outcome is not None and u < k - 1 and groups.shape[-1] >= 2:
            outcomes = leaf_outcomes(rollout, outcome) if outcomes is None else outcomes
            influence = decision_groups(rollout, outcomes, u, _PAD)
        d = decision_diagnostics(groups, influence, independent_continuations(rollout, u))
        metrics.update({f"credit/{roles[u]}_u{u}/{key}": v for key, v in d.items()})
    return metrics
