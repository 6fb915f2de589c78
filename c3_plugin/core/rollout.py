"""Materialise rollout trees breadth-first through a generation backend.

All contexts of one schedule step go to the backend in a single call. The tree is
uniform (one branching factor per decision point, see :mod:`c3_plugin.core.plan`), so the
leaf rewards form a dense array ``[instances, b_0, ..., b_{K-1}]`` and the nodes of each
depth come out in the matching row-major order: credit is pure array work afterwards.
With ``share_identical_contexts`` a parallel role is sampled once per distinct context and
its samples are copied under every alternative of its sibling (the leaves are then the
cross product of the two roles' samples).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import numpy as np

from c3_plugin.core.credit import average_copies
from c3_plugin.core.plan import Plan, parse_plan
from c3_plugin.core.protocol import GenerationBackend, Prompt, Sampling, encode_prompt, role_sampling
from c3_plugin.core.trace import TraceEntry, context_settings
from c3_plugin.core.workflow import EPISODE_END, Step, Workflow


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
    messages: np.ndarray  # policy messages written per instance (a shared sample once)
    tokens: np.ndarray  # tokens generated per instance (a shared sample's once)

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
    leaves: list[Leaf] = field(default_factory=list, repr=False)  # what the reward scored, row-major like ``rewards``
    budget: Budget = field(init=False)
    # per entry: index of the entry holding its sample (itself unless a copy)
    owner: np.ndarray = field(init=False, repr=False)
    # leading schedule steps copied from a recorded trace (``materialize(given=...)``), not sampled: outside the budget
    replayed_steps: int = 0
    # CoMLRL's multi-turn team: [leaves, turns] per-turn rewards, row-major like ``rewards`` (NaN after a path ended)
    turn_rewards: np.ndarray | None = None

    def __post_init__(self) -> None:
        inst_of = {str(it["id"]): i for i, it in enumerate(self.items)}
        index = {(e.instance, e.node): k for k, e in enumerate(self.entries)}
        self.owner = np.fromiter((k if e.shared is None else index[(e.instance, e.shared)]
                                  for k, e in enumerate(self.entries)),
                                 dtype=np.int64, count=len(self.entries))
        decisions = [e for e in self.entries if e.kind == "decision" and e.shared is None
                     and e.step >= self.replayed_steps
                     and not e.ended]
        idx = np.fromiter((inst_of[e.instance] for e in decisions), dtype=np.int64, count=len(decisions))
        ntok = np.fromiter((len(e.token_ids) for e in decisions), dtype=np.int64, count=len(decisions))
        num = len(self.items)
        self.budget = Budget(leaves=np.full(num, math.prod(self.branching), dtype=np.int64),
                             messages=np.bincount(idx, minlength=num),
                             tokens=np.bincount(idx, weights=ntok, minlength=num).astype(np.int64))

    def decision_entries(self, u: int) -> list[TraceEntry]:
        """Entries of decision point ``u`` in row-major tree order."""
        step = self.workflow.decision_steps[u].index
        return [self.entries[i] for i in self.depth_nodes[step]]

    def unique_credit(self, indices: np.ndarray, advantages: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Entry indices and advantages with each shared sample once: its original entry, credited
        with the mean advantage of its copies (:func:`c3_plugin.core.credit.average_copies`)."""
        return average_copies(self.owner[np.asarray(indices, dtype=np.int64)], advantages)


class _Node(NamedTuple):
    """A frontier node of the breadth-first expansion."""

    item: int  # item index
    entry: int  # entry index of the node
    outputs: tuple[str, ...]  # every step's output along the path
    cont: int  # continuation index
    branched: bool  # some decision above branched
    choices: tuple[int, ...]  # alternative index at each decision point so far


def _share_classes(workflow: Workflow, step: Step, frontier: Sequence[_Node], contexts: Sequence[str]) -> np.ndarray:
    """Class id per frontier node: nodes of one instance whose paths agree at every decision
    the step's context depends on (:meth:`Workflow.context_decisions`) and whose contexts are
    identical. A parallel role's context reads nothing of its sibling, so all of the sibling's
    alternatives fall in one class; two alternatives that merely write the same text do not."""
    deps = workflow.context_decisions()[step.index]
    ids: dict[tuple, int] = {}
    return np.fromiter((ids.setdefault((f.item, tuple(f.choices[d] for d in deps), c), len(ids))
                        for f, c in zip(frontier, contexts)), dtype=np.int64, count=len(frontier))


def unique_samples(workflow: Workflow, branching: Sequence[int], share: bool) -> list[int]:
    """Messages sampled per instance at each decision point (shared samples counted once)."""
    deps = workflow.context_decisions()
    return [b * (math.prod(branching[d] for d in deps[s.index]) if share else math.prod(branching[: u]))
            for u, (s, b) in enumerate(zip(workflow.decision_steps, branching))]


def _expand_decision(workflow: Workflow, step: Step, b: int, items: Sequence[Mapping[str, Any]], ids: Sequence[str],
                     frontier: Sequence[_Node], entries: list[TraceEntry], next_node: list[int],
                     backend: GenerationBackend, sampling: Sampling, share: bool,
                     encode: Callable[[Prompt], list[int]] | None = None) -> list[_Node]:
    """Sample ``b`` alternatives per frontier node (per share class when ``share``) and append their entries
    (with each prompt's token ids when ``encode`` is given)."""
    role = workflow.roles[step.name]
    ended = [f for f in frontier if EPISODE_END in f.outputs]
    if ended:
        return _expand_ended(workflow, step, b, items, ids, frontier, entries, next_node, backend, sampling, share,
                             encode)
    contexts = [workflow.assemble(step, items[f.item], f.outputs) for f in frontier]
    classes = _share_classes(workflow, step, frontier, contexts) if share else np.arange(len(frontier))
    _, first = np.unique(classes, return_index=True)
    prompts = [Prompt(text=contexts[k], role=role.name, agent=role.agent, prefix=role.prefix, system=role.system,
                      max_new_tokens=role.max_new_tokens, item=items[frontier[k].item]) for k in first]
    generations = backend.generate(prompts, b, role_sampling(sampling, role))
    prompt_ids = [encode(p) for p in prompts] if encode is not None else [None] * len(prompts)
    if len(generations) != len(prompts) or any(len(g) != b for g in generations):
        raise RuntimeError(f"backend returned {[len(g) for g in generations]} generations for "
                           f"{len(prompts)} prompts x n={b}")
    originals: dict[int, list[int]] = {}  # class -> node ids of its samples' first entries
    new_frontier = []
    for f, context, cls in zip(frontier, contexts, classes):
        owners = originals.get(int(cls))
        nodes = []
        for a, gen in enumerate(generations[int(cls)]):
            child_cont = f.cont * b + a if f.branched else 0
            node = next_node[f.item]
            entries.append(TraceEntry(kind="decision", instance=ids[f.item], node=node, parent=entries[f.entry].node,
                                      step=step.index, decision=step.decision, role=role.name, agent=role.agent,
                                      alternative=a, continuation=child_cont,
                                      shared=None if owners is None else owners[a], context=context, prefix=role.prefix,
                                      message=gen.text, token_ids=list(gen.token_ids),
                                      logprobs=[float(x) for x in gen.logprobs],
                                      loss_mask=None if gen.loss_mask is None else [int(x) for x in gen.loss_mask],
                                      trainer_logprobs=None if gen.trainer_logprobs is None
                                      else [float(x) for x in gen.trainer_logprobs],
                                      prompt_ids=list(gen.prompt_ids) if gen.prompt_ids is not None else
                                      None if prompt_ids[int(cls)] is None else list(prompt_ids[int(cls)])))
            next_node[f.item] += 1
            nodes.append(node)
            new_frontier.append(_Node(f.item, len(entries) - 1, f.outputs + (role.prefix + gen.text,), child_cont,
                                      f.branched or b > 1, f.choices + (a,)))
        originals.setdefault(int(cls), nodes)
    return new_frontier


def _expand_ended(workflow: Workflow, step: Step, b: int, items: Sequence[Mapping[str, Any]], ids: Sequence[str],
                  frontier: Sequence[_Node], entries: list[TraceEntry], next_node: list[int],
                  backend: GenerationBackend, sampling: Sampling, share: bool,
                  encode: Callable[[Prompt], list[int]] | None) -> list[_Node]:
    """:func:`_expand_decision` when some paths have ended: the running ones are sampled as usual, each ended
    node gets ``b`` entries marked ``ended`` (no context, no message, no tokens), in frontier order."""
    running = [k for k, f in enumerate(frontier) if EPISODE_END not in f.outputs]
    sampled = _expand_decision(workflow, step, b, items, ids, [frontier[k] for k in running], entries, next_node,
                               backend, sampling, share, encode) if running else []
    role = workflow.roles[step.name]
    out: list[_Node] = []
    pos = 0
    for f in frontier:
        if EPISODE_END not in f.outputs:
            out.extend(sampled[pos * b:(pos + 1) * b])
            pos += 1
            continue
        for a in range(b):
            child_cont = f.cont * b + a if f.branched else 0
            entries.append(TraceEntry(kind="decision", instance=ids[f.item], node=next_node[f.item],
                                      parent=entries[f.entry].node, step=step.index, decision=step.decision,
                                      role=role.name, agent=role.agent, alternative=a, continuation=child_cont,
                                      ended=True))
            next_node[f.item] += 1
            out.append(_Node(f.item, len(entries) - 1, f.outputs + ("",), child_cont, f.branched or b > 1,
                             f.choices + (a,)))
    return out


def materialize(workflow: Workflow, plan: Plan | Any, items: Sequence[Mapping[str, Any]],
                backend: GenerationBackend, reward_fn: RewardFn, sampling: Sampling = Sampling(), *,
                share_identical_contexts: bool = False, tokenizers: Sequence[Any] | None = None,
                use_chat_template: bool = True, given: Sequence[Sequence[TraceEntry]] | None = None) -> Rollout:
    """Run the plan on every item; every item needs a unique ``id``.

    ``share_identical_contexts``: at a decision point, frontier nodes of one instance whose
    contexts are identical because they read nothing that differs between them (a parallel
    role under each alternative of its sibling) are sampled once with ``b`` alternatives, and
    each such node gets those ``b`` samples as children. The trace stays a tree (copies are
    marked ``shared``), the leaves stay the full cross product, and the budget counts each
    sample once. Refused for independent plans: ``independent B`` must keep ``B`` independent joint actions.

    Every instance root records the context-shaping settings (each role's system prompt and
    prefix). With ``tokenizers`` (one per agent, as the backend encodes prompts) it also records
    ``use_chat_template`` and each agent's chat template hash, and every decision entry records
    its prompt token ids (:func:`~c3_plugin.core.protocol.encode_prompt`), so that
    :func:`~c3_plugin.core.trace.replay_check` can compare token ids as well as text.

    ``given`` re-enters recorded runs: per item, the recorded entries of the first ``s`` schedule steps
    of one path (the same ``s`` for every item; replay-checked by the caller). Those steps are copied,
    not sampled (the plan must branch 1 at their decisions), and are left out of the budget; sampling
    starts at step ``s`` from the recorded context, as if the run had just reached it.
    """
    plan = parse_plan(plan)
    if share_identical_contexts and plan.kind == "independent":
        raise ValueError("materialize: share_identical_contexts would correlate the runs of an independent plan")
    branching = plan.branching(workflow.num_decisions)
    ids = [str(it["id"]) for it in items]
    if len(set(ids)) != len(ids):
        raise ValueError("materialize: item ids must be unique within a batch")
    encode = None
    if tokenizers is not None:
        encode = lambda p: encode_prompt(tokenizers[p.agent], p, use_chat_template)  # noqa: E731
    settings = context_settings(workflow, tokenizers, use_chat_template)
    entries: list[TraceEntry] = []
    next_node = [1] * len(items)
    frontier: list[_Node] = []
    for i, it in enumerate(items):
        entries.append(TraceEntry(kind="instance", instance=ids[i], node=0, parent=-1,
                                  context=str(it.get("question", it.get("prompt", ""))), item=dict(it),
                                  **{k: copy.copy(v) for k, v in settings.items()}))
        frontier.append(_Node(i, len(entries) - 1, (), 0, False, ()))
    replayed = _check_given(given, items, branching, workflow)
    depth_nodes = []
    for step in workflow.steps:
        if step.index < replayed:
            frontier = _copy_step(step, [g[step.index] for g in given], ids, frontier, entries, next_node)
        elif step.kind == "feedback":
            frontier = _expand_feedback(workflow, step, items, ids, frontier, entries, next_node)
        else:
            frontier = _expand_decision(workflow, step, branching[step.decision], items, ids, frontier, entries,
                                        next_node, backend, sampling, share_identical_contexts, encode)
        depth_nodes.append(np.fromiter((f.entry for f in frontier), dtype=np.int64, count=len(frontier)))
    leaves = [Leaf(item=items[f.item], action=workflow.final_action(f.outputs), outputs=f.outputs) for f in frontier]
    rewards = np.asarray(reward_fn(leaves), dtype=np.float64)
    if rewards.shape != (len(leaves),):
        raise RuntimeError(f"reward function returned {rewards.shape} rewards for {len(leaves)} leaves")
    if not np.all(np.isfinite(rewards)):
        bad = int(np.flatnonzero(~np.isfinite(rewards))[0])
        raise ValueError(f"reward function returned a non-finite reward for leaf {bad} (instance "
                         f"{ids[frontier[bad].item]})")
    for f, r in zip(frontier, rewards):
        entries[f.entry].reward = float(r)
    return Rollout(workflow=workflow, plan=plan, branching=branching, items=list(items), entries=entries,
                   depth_nodes=depth_nodes, rewards=rewards.reshape((len(items),) + branching), leaves=leaves,
                   replayed_steps=replayed)


def _check_given(given: Sequence[Sequence[TraceEntry]] | None, items: Sequence[Any], branching: Sequence[int],
                 workflow: Workflow) -> int:
    """The number of recorded steps ``given`` fixes (0 without it); refuses ragged or branching prefixes."""
    if given is None:
        return 0
    depths = {len(g) for g in given}
    if len(given) != len(items) or len(depths) != 1:
        raise ValueError(f"materialize: given needs one recorded prefix per item, all of one length; got lengths "
                         f"{sorted(depths)} for {len(items)} items")
    s = depths.pop()
    if s > len(workflow.steps):
        raise ValueError(f"materialize: a recorded prefix of {s} steps is longer than the schedule "
                         f"({len(workflow.steps)} steps)")
    fixed = [st.decision for st in workflow.steps[:s] if st.kind == "decision"]
    if any(branching[u] != 1 for u in fixed):
        raise ValueError(f"materialize: the plan branches at decision points {fixed} that the recorded prefix fixes; "
                         f"branching must be 1 there, got {[branching[u] for u in fixed]}")
    for g in given:
        for k, e in enumerate(g):
            if e.step != k or e.role != workflow.steps[k].name:
                raise ValueError(f"materialize: recorded entry {e.instance} node {e.node} is step {e.step} ({e.role}), "
                                 f"expected step {k} ({workflow.steps[k].name})")
    return s


def _copy_step(step: Step, recorded: Sequence[TraceEntry], ids: Sequence[str], frontier: Sequence[_Node],
               entries: list[TraceEntry], next_node: list[int]) -> list[_Node]:
    """Copy one recorded step into every frontier node (one node per item: nothing above it branched)."""
    new_frontier = []
    for f, rec in zip(frontier, recorded):
        entries.append(dataclasses.replace(rec, instance=ids[f.item], node=next_node[f.item],
                                           parent=entries[f.entry].node, alternative=0, continuation=0, shared=None,
                                           reward=None))
        next_node[f.item] += 1
        new_frontier.append(f._replace(entry=len(entries) - 1, outputs=f.outputs + (rec.output,),
                                       choices=f.choices + ((0,) if step.kind == "decision" else ())))
    return new_frontier


def _expand_feedback(workflow: Workflow, step: Step, items: Sequence[Mapping[str, Any]], ids: Sequence[str],
                     frontier: Sequence[_Node], entries: list[TraceEntry], next_node: list[int]) -> list[_Node]:
    """Run a feedback step on every frontier node and append its entries."""
    fn = workflow.feedback[step.name]
    new_frontier = []
    for f in frontier:
        latest = workflow.latest_outputs(f.outputs)
        text = fn(items[f.item], {r: latest.get(r, "") for r in step.reads})
        entries.append(TraceEntry(kind="feedback", instance=ids[f.item], node=next_node[f.item],
                                  parent=entries[f.entry].node, step=step.index, role=step.name, continuation=f.cont,
                                  message=text))
        next_node[f.item] += 1
        new_frontier.append(f._replace(entry=len(entries) - 1, outputs=f.outputs + (text,)))
    return new_frontier


EXAMPLE_MESSAGE_CHARS = 600  # an example trace's message is cut to this many characters (the trace keeps it whole)


def credited_path(rollout: Rollout, credited: Sequence[tuple[np.ndarray, np.ndarray]], instance: int = 0,
                  leaf: int = 0) -> dict[str, Any]:
    """One root-to-leaf path of a credited rollout, as the run folder's ``example_trace.json`` holds it: the task
    (the root's context), every message and feedback on the path with its credit (``credited``: per decision point
    the entry indices and their advantages, as ``compute_advantages`` returns them; a shared copy takes its
    original's; a per-token advantage is shown as its mean; None: not credited) and the leaf's return."""
    credit: dict[int, float] = {}
    for indices, advantages in credited:
        for k, a in zip(np.asarray(indices).tolist(), advantages):
            credit[int(k)] = float(np.mean(a))
    index = {(e.instance, e.node): k for k, e in enumerate(rollout.entries)}
    width = math.prod(rollout.branching)
    k = int(rollout.depth_nodes[-1][instance * width + leaf])
    path = []
    while k >= 0:
        path.append(k)
        e = rollout.entries[k]
        k = index.get((e.instance, e.parent), -1)
    path.reverse()
    root, last = rollout.entries[path[0]], rollout.entries[path[-1]]
    messages = []
    for k in path[1:]:
        e = rollout.entries[k]
        adv = credit.get(k, credit.get(int(rollout.owner[k])))
        messages.append({"step": e.step, "kind": e.kind, "role": e.role, "agent": e.agent, "decision": e.decision,
                         "alternative": e.alternative, "message": e.message[:EXAMPLE_MESSAGE_CHARS],
                         "truncated": len(e.message) > EXAMPLE_MESSAGE_CHARS, "advantage": adv})
    reward = last.reward if last.reward is not None else float(rollout.rewards[instance].flat[leaf])
    return {"instance": root.instance, "task": root.context[:EXAMPLE_MESSAGE_CHARS],
            "branching": list(rollout.branching), "leaf": leaf, "return": reward, "messages": messages}
