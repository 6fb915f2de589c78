"""Rollout plans: how many alternatives each decision point samples from each context.

Every plan reduces to one branching factor per decision point:

* ``tree [n_1, ..., n_K]``: ``n_u`` alternatives from every context at decision ``u``
  (C3's training default is ``[2, 4]``: 2 Reasoner alternatives, each continued by 4
  Actor alternatives: 8 leaves, 10 messages);
* ``independent B``: ``B`` full runs, i.e. ``[B, 1, ..., 1]`` (the MAGRPO/MAPPO
  arrangement: 8 leaves and 16 messages on 2 roles);
* ``diagnostic n u c``: one base run up to ``u``, ``n`` alternatives at ``u``, ``c``
  continuations of each, then one sample per later decision point:
  ``[1]*u + [n, c] + [1]*(K-u-2)``.
"""

from __future__ import annotations

import itertools
import math
import re
import warnings
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

DEFAULT_C3_TREE = (2, 4)


class PlanError(ValueError):
    """An invalid rollout plan."""


@dataclass(frozen=True)
class Plan:
    kind: str  # "tree", "independent" or "diagnostic"
    tree: tuple[int, ...] = DEFAULT_C3_TREE  # tree: alternatives per decision point
    runs: int = 8  # independent: full runs per instance
    n: int = 4  # diagnostic: alternatives at decision point u
    u: int = 0  # diagnostic: the decision point under study
    c: int = 4  # diagnostic: continuations per alternative

    def branching(self, num_decisions: int) -> tuple[int, ...]:
        """Alternatives sampled from each context at every decision point."""
        k = num_decisions
        if self.kind == "tree":
            if len(self.tree) != k:
                raise PlanError(f"tree {list(self.tree)} has {len(self.tree)} levels but the workflow "
                                f"has {k} decision points")
            return tuple(self.tree)
        if self.kind == "independent":
            return (self.runs,) + (1,) * (k - 1)
        if not 0 <= self.u < k:
            raise PlanError(f"diagnostic u={self.u} is outside the workflow's decision points 0..{k - 1}")
        if self.u == k - 1 and self.c > 1:
            raise PlanError(f"diagnostic at the last decision point (u={self.u}) needs c=1: nothing "
                            "follows it but the reward")
        tail = (self.c,) + (1,) * (k - self.u - 2) if self.u < k - 1 else ()
        return (1,) * self.u + (self.n,) + tail

    def leaves(self, num_decisions: int) -> int:
        """Leaves per instance: terminal reward calls, i.e. env steps."""
        return math.prod(self.branching(num_decisions))

    def messages(self, num_decisions: int) -> int:
        """Messages written per instance (every path its own; with a rollout's context sharing
        fewer, see :func:`c3_plugin.core.rollout.unique_samples`)."""
        total, width = 0, 1
        for b in self.branching(num_decisions):
            width *= b
            total += width
        return total

    def credit_points(self, num_decisions: int) -> list[int]:
        """Decision indices at which C3 forms groups (2 or more alternatives per context)."""
        return [u for u, b in enumerate(self.branching(num_decisions)) if b >= 2]

    def independent_points(self, num_decisions: int) -> list[int]:
        """Credit points whose alternatives' continuations are independent draws of the rest of the run.

        The leaves below an alternative at ``u`` share no message below it only when all the
        branching below ``u`` happens at ``u + 1`` (``b_v == 1`` for every ``v >= u + 2``): the
        level above the leaves of a tree, or the decision point of a diagnostic plan. Deeper in a
        tree, leaves under one alternative share the messages of the levels between, so the
        even and odd halves of its continuations are correlated."""
        b = self.branching(num_decisions)
        return [u for u in self.credit_points(num_decisions) if all(x == 1 for x in b[u + 2:])]

    def describe(self) -> str:
        if self.kind == "tree":
            return f"tree {list(self.tree)}"
        if self.kind == "independent":
            return f"independent {self.runs}"
        return f"diagnostic n={self.n} u={self.u} c={self.c}"


def _positive(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise PlanError(f"{what} must be a positive integer, got {value!r}")
    return value


PLAN_SYNTAX = {  # the whole text after the kind, so a malformed plan is refused instead of read as another
    "tree": (r"\[\s*-?\d+(\s*,\s*-?\d+)*\s*\]|\[\s*\]", "a bracketed list of alternatives per decision point"),
    "diagnostic": (r"(\w+\s*=\s*-?\d+([\s,]+\w+\s*=\s*-?\d+)*)?", "n=, u= and c= integers"),
}


def _check_plan_syntax(kind: str, rest: str, text: str) -> None:
    """Refuse a plan string whose arguments do not parse whole (``tree [2, 4`` is not ``tree [2, 4]``)."""
    if kind in PLAN_SYNTAX and not re.fullmatch(PLAN_SYNTAX[kind][0], rest.strip()):
        example = {"tree": "tree [2, 4]", "diagnostic": "diagnostic n=4 u=0 c=4"}[kind]
        raise PlanError(f"malformed plan {text!r}: {kind} takes {PLAN_SYNTAX[kind][1]}, e.g. {example!r}")


def parse_plan(spec: Any) -> Plan:
    """Parse ``"tree [2, 4]"``, ``"independent 8"``, ``"diagnostic n=4 u=0 c=4"`` or the mapping forms
    ``{"tree": [2, 4]}``, ``{"independent": 8}``, ``{"diagnostic": {"n": 4, "u": 0, "c": 4}}``."""
    if isinstance(spec, Plan):
        return spec
    if isinstance(spec, str):
        text = spec.strip()
        kind, _, rest = text.partition(" ")
        _check_plan_syntax(kind, rest, text)
        if kind == "tree":
            nums = [int(x) for x in re.findall(r"-?\d+", rest)]
            spec = {"tree": nums}
        elif kind == "independent":
            spec = {"independent": int(rest) if rest.strip().lstrip("-").isdigit() else rest}
        elif kind == "diagnostic":
            spec = {"diagnostic": {k: int(v) for k, v in re.findall(r"(\w+)\s*=\s*(-?\d+)", rest)}}
        else:
            raise PlanError(f"unknown plan {text!r}; use 'tree [2, 4]', 'independent 8' or 'diagnostic n=4 u=0 c=4'")
    if not isinstance(spec, Mapping) or len(spec) != 1:
        raise PlanError(f"a plan is one of tree / independent / diagnostic, got {spec!r}")
    (kind, value), = spec.items()
    if kind == "tree":
        if not isinstance(value, (list, tuple)) or not value:
            raise PlanError(f"tree needs a non-empty list of alternatives per decision point, got {value!r}")
        return Plan(kind="tree", tree=tuple(_positive(v, "tree level") for v in value))
    if kind == "independent":
        return Plan(kind="independent", runs=_positive(value, "independent runs"))
    if kind == "diagnostic":
        value = dict(value or {})
        unknown = set(value) - {"n", "u", "c"}
        if unknown:
            raise PlanError(f"diagnostic plan has unknown field(s) {sorted(unknown)}; valid: n, u, c")
        n = _positive(value.get("n", 4), "diagnostic n")
        if n < 2:
            raise PlanError("diagnostic n must be at least 2: leave-one-out needs another alternative")
        u = value.get("u", 0)
        if not isinstance(u, int) or u < 0:
            raise PlanError(f"diagnostic u must be a decision index >= 0, got {u!r}")
        return Plan(kind="diagnostic", n=n, u=u, c=_positive(value.get("c", 4), "diagnostic c"))
    raise PlanError(f"unknown plan kind {kind!r}; use tree, independent or diagnostic")


# ----- the default plan: CoMLRL's budget (c3_plugin/trainers/comlrl_compat.py) ---------------------------------
def split_budget(total: int, slots: int) -> list[int]:
    """``total`` as ``slots`` factors whose product is ``total``, as even as its prime factors allow, larger
    factors later and 1s last (8 over 2: [2, 4]; 4: [2, 2]; 2: [2, 1]; 12 over 2: [3, 4])."""
    factors, n, p = [], int(total), 2
    while n > 1:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    out = [1] * slots
    for f in sorted(factors, reverse=True):
        k = min(range(slots), key=lambda i: (out[i], i))
        out[k] *= f
    big = sorted(x for x in out if x > 1)
    return big + [1] * (slots - len(big))


def joint_actions_per_node(cfg: Any, num_agents: int) -> int:
    """J: joint actions CoMLRL scores per turn node (``num_generations``, or its N-th power under ``cross``)."""
    k = int(cfg.num_generations)
    return k ** num_agents if cfg.joint_mode == "cross" and num_agents > 1 else k


def comlrl_env_steps(cfg: Any, num_agents: int) -> int:
    """Reward calls CoMLRL spends on one prompt: ``J + J^2 + ... + J^T``."""
    j = joint_actions_per_node(cfg, num_agents)
    return sum(j ** t for t in range(1, int(cfg.num_turns) + 1))


def default_plan(cfg: Any, turns: Sequence[int], num_agents: int) -> str:
    """The plan of a config without one: ``turns`` lists the decision points of each turn (one entry for a
    single-turn workflow). Tree: J split over each turn's decision points; independent: ``independent J``."""
    j = joint_actions_per_node(cfg, num_agents)
    if cfg.default_plan_kind == "independent":
        return f"independent {j}"
    return "tree " + str([b for t, d in enumerate(turns) for b in rotate_split(split_budget(j, d), t)])


def rotate_split(split: Sequence[int], turn: int) -> list[int]:
    """Turn ``turn``'s (0-based) split of J over its decision points, rotated right by the branching points of the
    earlier turns, so the agents a turn leaves without a group branch at the next one ([2, 1] then [1, 2]: at two
    turns each of two agents gets groups, at the same env steps)."""
    m = sum(1 for b in split if b > 1)
    k = (m * turn) % len(split) if split else 0
    return list(split[len(split) - k:]) + list(split[:len(split) - k])


def plan_env_steps(branching: Sequence[int], turns: Sequence[int]) -> int:
    """Reward calls a uniform plan spends on one prompt when every turn is scored: the joint actions of each
    turn, ``prod(branching up to the end of turn t)`` summed over the turns."""
    total, end = 0, 0
    for d in turns:
        end += d
        total += math.prod(branching[:end])
    return total


def every_agent_branching(turns: Sequence[int], decision_agents: Sequence[int], agents: Sequence[int]) -> list[int]:
    """The cheapest tree plan that gives every agent of ``agents`` a group: 2 alternatives at one of its decision points
    (``decision_agents``: the agent of each decision point, in schedule order), 1 everywhere else. It is the one of
    fewest env steps per prompt (:func:`plan_env_steps`; branching a decision point twice, or more of them, only costs
    more) over every choice of one decision point per agent; among equals, the earliest decision points."""
    choices = [[u for u, a in enumerate(decision_agents) if a == agent] for agent in agents]
    missing = [agent for agent, c in zip(agents, choices) if not c]
    if missing:
        raise PlanError(f"agent(s) {missing} have no decision point in the workflow to branch")
    best: tuple[int, list[int]] | None = None
    for pick in itertools.product(*choices):
        branching = [2 if u in pick else 1 for u in range(len(decision_agents))]
        key = (plan_env_steps(branching, turns), sorted(pick))
        if best is None or key < (best[0], sorted(u for u, b in enumerate(best[1]) if b > 1)):
            best = (key[0], branching)
    return best[1] if best is not None else [1] * len(decision_agents)


def note_budget(cfg: Any, branching: Sequence[int], turns: Sequence[int], num_agents: int, algorithm: str) -> int:
    """Warn when the plan's env steps per prompt differ from CoMLRL's for the same config; returns the plan's."""
    ours, theirs = plan_env_steps(branching, turns), comlrl_env_steps(cfg, num_agents)
    if ours != theirs:
        warnings.warn(f"{algorithm} plan '{cfg.plan}' spends {ours} env steps (reward calls) per prompt; CoMLRL with "
                      f"num_generations={cfg.num_generations}, num_turns={cfg.num_turns}, joint_mode={cfg.joint_mode} "
                      f"would spend {theirs} (drop plan to spend CoMLRL's budget)", stacklevel=4)
    return ours
