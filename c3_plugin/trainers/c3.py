"""C3: credit by counterfactual continuation.

``C3Trainer`` overrides one hook of the shared workflow trainer, :meth:`compute_advantages`:
at every decision point whose plan samples two or more alternatives from a context, each
alternative is credited with its mean return minus the continuation-weighted mean return
of the other alternatives (:func:`c3_plugin.credit.tree_advantages`).

Parallel roles (``share_parallel_samples``): a role that reads nothing of its sibling is
sampled once per context and its ``n1`` samples continue every one of the sibling's ``n0``
alternatives, so the leaves are the cross product. The sibling's credit is the tree
leave-one-out over common continuations; each shared sample is trained once with the mean of
its per-copy advantages, ``mean_j R[j,k] - mean_{k'!=k} mean_j R[j,k']``
(:meth:`c3_plugin.rollout.Rollout.unique_credit`, applied in ``build_samples``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..credit import tree_advantages
from ..rollout import Rollout
from .base import WorkflowConfig, WorkflowTrainer


@dataclass
class C3Config(WorkflowConfig):
    """C3's fields; everything else is WorkflowConfig's and MAGRPOConfig's."""

    plan: str = "tree [2, 4]"  # C3 needs groups: a tree (or diagnostic) plan; the paper's default is [2, 4]
    advantage_scaling: str = "none"  # keep the leave-one-out values (z-scoring a 2-alternative group gives +-1)
    credit_diagnostics: bool = True  # log credit/* diagnostics (variance, reliability, influence, noise law) per batch
    share_parallel_samples: bool = True  # sample a parallel role once per distinct context, reuse it under each sibling alternative, train it once

    def __post_init__(self) -> None:
        super().__post_init__()
        from ..plan import parse_plan

        if parse_plan(self.plan).kind == "independent":
            raise ValueError(f"C3 needs alternatives that share a context; plan '{self.plan}' has none. Use 'tree [2, 4]'")


class C3Trainer(WorkflowTrainer):
    """MAGRPOTrainer with C3 credit: leave-one-out advantages over counterfactual continuations."""

    default_config_cls = C3Config
    algorithm_name = "C3"

    @property
    def share_identical_contexts(self) -> bool:
        return bool(self.args.share_parallel_samples)

    def compute_advantages(self, rollout: Rollout) -> list[tuple[np.ndarray, np.ndarray]]:
        out = []
        for u, adv in enumerate(tree_advantages(rollout.rewards)):
            if adv is not None:
                out.append((rollout.depth_nodes[rollout.workflow.decision_steps[u].index], adv))
        return out

    def rollout_metrics(self, rollout: Rollout) -> dict[str, float]:
        return super().rollout_metrics(rollout) if self.args.credit_diagnostics else {}
