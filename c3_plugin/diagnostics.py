"""Per-batch credit diagnostics of a materialised rollout, as flat metric dicts.

Every key is defined in ``docs/metrics.md``. For each decision point ``u`` whose plan
samples 2 or more alternatives per context, the groups are the children of each
depth-``u`` context and an alternative's continuations are the leaves below it. Where the
rollout shared a parallel role's samples, a group is the set of unique samples (counted
once) and a sample's continuations are the leaves below all of its copies.
"""

from __future__ import annotations

from typing import Callable, Hashable

import numpy as np

from . import credit
from .rollout import Rollout
from .trace import path_to

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


def decision_diagnostics(groups: np.ndarray, outcomes: np.ndarray | None = None) -> dict[str, float]:
    """Diagnostics of one decision point from its groups ``[G, n, c]`` (and optional categorical
    downstream outcomes of the same shape, for influence)."""
    g, n, c = groups.shape
    adv = credit.loo_advantages_batch(groups)
    out = {"groups": float(g), "alternatives": float(n), "continuations": float(c),
           "within_group_variance": credit.within_group_variance(adv),
           "zero_signal_share": credit.zero_signal_share(groups),
           "advantage_abs_mean": float(np.abs(adv).mean())}
    if c >= 2:
        sigma2 = credit.pooled_return_variance(groups)
        out["return_variance"] = sigma2
        out["noise_predicted"] = credit.noise_variance(sigma2, n, n * c)
        rho, used = credit.split_half_reliability(groups)
        out["split_half_reliability"], out["split_half_groups"], out["split_half_excluded"] = rho, float(used), float(g - used)
        if c % 2 == 0:
            observed = credit.observed_noise_variance(credit.loo_advantages_batch(groups[..., 0::2]),
                                                      credit.loo_advantages_batch(groups[..., 1::2]))
            out["noise_ratio"] = observed / credit.noise_variance(sigma2, n, n * c // 2) if sigma2 > 0 else float("nan")
    if outcomes is not None:
        out["influence"] = float(np.mean([credit.influence([[y for y in alt if y is not _PAD] for alt in grp]) for grp in outcomes]))
    return out


def rollout_diagnostics(rollout: Rollout, outcome: Callable[[str], Hashable] | None = None) -> dict[str, float]:
    """Budget and credit diagnostics of one batch, keyed ``budget/*`` and ``credit/<role>_u<u>/*``.

    ``outcome`` maps a leaf's final action to a categorical outcome for influence (for example
    the extracted answer); by default the action text itself.
    """
    metrics = {f"budget/{k}": float(v) for k, v in rollout.budget.totals().items()}
    metrics["budget/tokens_per_instance"] = float(rollout.budget.tokens.mean())
    metrics["budget/messages_per_instance"] = float(rollout.budget.messages.mean())
    leaves = [rollout.entries[i] for i in rollout.depth_nodes[-1]]
    actions = np.empty(len(leaves), dtype=object)
    fn = outcome or (lambda a: a)
    by_node = {(e.instance, e.node): e for e in rollout.entries}
    actions[:] = [fn(rollout.workflow.final_action([e.output for e in path_to(leaf, by_node)[1:]])) for leaf in leaves]
    actions = actions.reshape(rollout.rewards.shape)
    roles = rollout.workflow.decision_points()
    for u in rollout.plan.credit_points(rollout.workflow.num_decisions):
        d = decision_diagnostics(decision_groups(rollout, rollout.rewards, u), decision_groups(rollout, actions, u, _PAD))
        metrics.update({f"credit/{roles[u]}_u{u}/{k}": v for k, v in d.items()})
    return metrics
