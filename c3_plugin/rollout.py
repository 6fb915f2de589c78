"""Materialise rollout trees breadth-first through a generation backend.

All contexts of one schedule step go to the backend in a single call. The tree is
uniform (one branching factor per decision point, see :mod:`c3_plugin.plan`), so the
leaf rewards form a dense array ``[instances, b_0, ..., b_{K-1}]`` and the nodes of each
depth come out in the matching row-major order: credit is pure array work afterwards.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np

from .plan import Plan, parse_plan
from .trace import TraceEntry
from .workflow import Workflow


@dataclass(frozen=True)
class Sampling:
    temperature: float = 1.0  # softmax temperature
    top_p: float = 1.0  # nucleus mass
    top_k: int | None = None  # keep the k most likely tokens (None: all)
    max_new_tokens: int = 256  # default cap when the role sets none
    greedy: bool = False  # argmax decoding (evaluation)


@dataclass(frozen=True)
class Prompt:
    text: str  # the context h_u
    role: str
    agent: int
    prefix: str = ""  # assistant prefill
    system: str | None = None
    max_new_tokens: int | None = None  # per-role cap; None: the sampling default


@dataclass
class Generation:
    text: str
    token_ids: list[int]
    logprobs: list[float]
    loss_mask: list[int] | None = None  # 1 for tokens the policy chose (trained on), 0 for forced schema tokens; None: all 1


class GenerationBackend(Protocol):
    """Anything that samples ``n`` messages for each prompt, with behaviour log-probs."""

    def generate(self, prompts: Sequence[Prompt], n: int, sampling: Sampling) -> list[list[Generation]]: ...


@dataclass(frozen=True)
class Leaf:
    """What the terminal reward sees for one path."""

    item: Mapping[str, Any]
    action: str  # the final role's output, or the merger's join
    outputs: tuple[str, ...]  # every step's output along the path, schedule order


RewardFn = Callable[[Sequence[Leaf]], Sequence[float]]


@dataclass
class Budget:
    """Exact per-instance accounting of one materialised batch."""

    leaves: np.ndarray  # terminal reward calls (= env steps) per instance
    messages: np.ndarray  # policy messages written per instance
    tokens: np.ndarray  # tokens generated per instance

    def totals(self) -> dict[str, int]:
        return {"env_steps": int(self.leaves.sum()), "messages": int(self.messages.sum()),
                "tokens_generated": int(self.tokens.sum())}


@dataclass
class Rollout:
    workflow: Workflow
    plan: Plan
    branching: tuple[int, ...]
    items: list[Mapping[str, Any]]
    entries: list[TraceEntry]  # every entry, breadth-first
    depth_nodes: list[np.ndarray]  # per schedule step: entry indices, row-major over the tree
    rewards: np.ndarray  # [instances, *branching] leaf rewards
    budget: Budget = field(init=False)

    def __post_init__(self) -> None:
        inst_of = {str(it["id"]): i for i, it in enumerate(self.items)}
        decisions = [e for e in self.entries if e.kind == "decision"]
        idx = np.fromiter((inst_of[e.instance] for e in decisions), dtype=np.int64, count=len(decisions))
        ntok = np.fromiter((len(e.token_ids) for e in decisions), dtype=np.int64, count=len(decisions))
        num = len(self.items)
        self.budget = Budget(leaves=np.full(num, math.prod(self.branching), dtype=np.int64),
                             messages=np.bincount(idx, minlength=num), tokens=np.bincount(idx, weights=ntok, minlength=num).astype(np.int64))

    def decision_entries(self, u: int) -> list[TraceEntry]:
        """Entries of decision point ``u`` in row-major tree order."""
        step = self.workflow.decision_steps[u].index
        return [self.entries[i] for i in self.depth_nodes[step]]


def materialize(workflow: Workflow, plan: Plan | Any, items: Sequence[Mapping[str, Any]],
                backend: GenerationBackend, reward_fn: RewardFn, sampling: Sampling = Sampling()) -> Rollout:
    """Run the plan on every item; every item needs a unique ``id``."""
    plan = parse_plan(plan)
    branching = plan.branching(workflow.num_decisions)
    ids = [str(it["id"]) for it in items]
    if len(set(ids)) != len(ids):
        raise ValueError("materialize: item ids must be unique within a batch")
    entries: list[TraceEntry] = []
    next_node = [1] * len(items)
    # frontier: (item index, entry index, outputs so far, continuation index, branched above)
    frontier: list[tuple[int, int, tuple[str, ...], int, bool]] = []
    for i, it in enumerate(items):
        entries.append(TraceEntry(kind="instance", instance=ids[i], node=0, parent=-1,
                                  context=str(it.get("question", it.get("prompt", ""))), item=dict(it)))
        frontier.append((i, len(entries) - 1, (), 0, False))
    depth_nodes = []
    for step in workflow.steps:
        new_frontier = []
        if step.kind == "feedback":
            fn = workflow.feedback[step.name]
            for i, parent, outs, cont, branched in frontier:
                latest = workflow.latest_outputs(outs)
                text = fn(items[i], {r: latest.get(r, "") for r in step.reads})
                entries.append(TraceEntry(kind="feedback", instance=ids[i], node=next_node[i], parent=entries[parent].node,
                                          step=step.index, role=step.name, continuation=cont, message=text))
                next_node[i] += 1
                new_frontier.append((i, len(entries) - 1, outs + (text,), cont, branched))
        else:
            role = workflow.roles[step.name]
            b = branching[step.decision]
            contexts = [workflow.assemble(step, items[i], outs) for i, _, outs, _, _ in frontier]
            prompts = [Prompt(text=c, role=role.name, agent=role.agent, prefix=role.prefix, system=role.system,
                              max_new_tokens=role.max_new_tokens) for c in contexts]
            generations = backend.generate(prompts, b, sampling)
            if len(generations) != len(prompts) or any(len(g) != b for g in generations):
                raise RuntimeError(f"backend returned {[len(g) for g in generations]} generations for {len(prompts)} prompts x n={b}")
            for (i, parent, outs, cont, branched), context, gens in zip(frontier, contexts, generations):
                for a, gen in enumerate(gens):
                    child_cont = cont * b + a if branched else 0
                    entries.append(TraceEntry(kind="decision", instance=ids[i], node=next_node[i], parent=entries[parent].node,
                                              step=step.index, decision=step.decision, role=role.name, agent=role.agent,
                                              alternative=a, continuation=child_cont, context=context, prefix=role.prefix,
                                              message=gen.text, token_ids=list(gen.token_ids), logprobs=[float(x) for x in gen.logprobs],
                                              loss_mask=None if gen.loss_mask is None else [int(x) for x in gen.loss_mask]))
                    next_node[i] += 1
                    new_frontier.append((i, len(entries) - 1, outs + (role.prefix + gen.text,), child_cont, branched or b > 1))
        frontier = new_frontier
        depth_nodes.append(np.fromiter((f[1] for f in frontier), dtype=np.int64, count=len(frontier)))
    leaves = [Leaf(item=items[i], action=workflow.final_action(outs), outputs=outs) for i, _, outs, _, _ in frontier]
    rewards = np.asarray(reward_fn(leaves), dtype=np.float64)
    if rewards.shape != (len(leaves),):
        raise RuntimeError(f"reward function returned {rewards.shape} rewards for {len(leaves)} leaves")
    if not np.all(np.isfinite(rewards)):
        bad = int(np.flatnonzero(~np.isfinite(rewards))[0])
        raise ValueError(f"reward function returned a non-finite reward for leaf {bad} (instance {ids[frontier[bad][0]]})")
    for (_, e, _, _, _), r in zip(frontier, rewards):
        entries[e].reward = float(r)
    return Rollout(workflow=workflow, plan=plan, branching=branching, items=list(items), entries=entries,
                   depth_nodes=depth_nodes, rewards=rewards.reshape((len(items),) + branching))
