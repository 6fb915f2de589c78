"""The shared training reward ``reference_constraint_learnable_budget_dense`` (variant ``specified``,
the default) and its stricter variant ``reference_constraint_strict_dense`` (``strict``); pick one with
:func:`make_reward`.

    R = 0.02 P + 0.03 E + 0.04 V + 0.02 J + 0.14 J B + 0.57 J C + 0.08 J G + 0.10 U
        - 0.10 invalid - 0.05 conflict - 0.05 overlap - 0.10 copy - 0.05 overlength,
    clamped to [-0.25, 1.0].

V: mean exact action validity of the two agents; J: strict joint validity; B: the 0.20-mean /
0.80-min bottleneck over each role's grounded share of its required slots; C = B^0.65 Q^0.35
with Q the strict plan quality; G: strict required grounded recall; U: collaboration success.
P and E are the two bounded learning channels below the strict gate: P is the bottleneck over
each role's format progress and soft action validity, E the same composite over the
*recovered* assignments (:func:`~domains.travel.actions.recover_assignments`). Recovery feeds
only P and E, never Q, B, G, U or an end metric.

The specified formula gives constraints little weight: a fully grounded plan that breaks every
constraint (budget, minimum nights, room type, house rule, cuisine, transport, diversity) still scores
0.84-0.88, above a human plan with one invented lunch (about 0.82). The ``strict`` variant keeps every
term but lets constraint passes carry partial credit:

    R_strict = R - (1 - F) (1 - K) (0.14 J B + 0.57 J C + 0.08 J G),   F = 0.45,

K the share of the constraint checks that pass (restaurant and attraction diversity, transportation
consistency, minimum nights, and every applicable hard constraint: budget, house rule, room type,
cuisine, transportation mode). A plan that passes them all scores as under the specified formula (the
human plans still 1.0, all-dash still 0.08); one that breaks them all keeps 45 % of its quality terms
(about 0.5). Figures on the 45 train rows: ``bench/RESULTS.md`` ("Reward integrity").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .actions import EMPTY, FIELDS, TRIPLE, owned_slots, recover_assignments
from .evaluate import COPY_MARKERS, Task, bottleneck, composite, evaluate_joint, evaluate_plan, same_route, task_of

NAME = "reference_constraint_learnable_budget_dense"
STRICT_NAME = "reference_constraint_strict_dense"
VARIANTS = ("specified", "strict")
RANGE = (-0.25, 1.0)
# the strict variant: the gated quality terms (JB, JC, JG) earn FLOOR + (1 - FLOOR) x K, K the share of
# constraint checks that pass (binary), so a grounded plan that breaks every constraint keeps about half
CONSTRAINT_CHECKS = ("restaurant_diversity", "attraction_diversity", "transportation_consistency", "minimum_nights")
FLOOR = 0.45
WEIGHTS = {"P": 0.02, "E": 0.03, "V": 0.04, "J": 0.02, "JB": 0.14, "JC": 0.57, "JG": 0.08, "U": 0.10,
           "invalid": -0.10, "conflict": -0.05, "overlap": -0.05, "copy": -0.10, "overlength": -0.05}


@dataclass(frozen=True)
class RewardLimits:
    max_value_chars: int = 240  # a value longer than this counts as overlength
    max_action_chars: int = 16000  # an action text longer than this counts as overlength


def _format_progress(text: str, agent: int, days: int) -> float:
    """Share of the agent's owned slots written as a complete (day, field, value) triple."""
    owned = set(owned_slots(agent, days))
    seen = {(int(m.group(1)), m.group(2)) for m in TRIPLE.finditer(str(text)[:200_000])} & owned
    return len(seen) / len(owned)


def _values(texts: Sequence[str]) -> list[str]:
    return [m.group(3) for t in texts for m in TRIPLE.finditer(str(t)[:200_000])]


def is_copy(value: str) -> bool:
    """A value that pastes a raw reference table (its column headers) rather than choosing an entry."""
    low = value.lower()
    return sum(marker in low for marker in COPY_MARKERS) >= 1


def constraint_share(ev) -> float:
    """K: the share of constraint checks of an evaluation that pass (see :data:`CONSTRAINT_CHECKS`, plus
    every applicable hard constraint)."""
    flags = [bool(ev.commonsense.get(k)) for k in CONSTRAINT_CHECKS] + [v >= 1.0 for v in ev.hard.values()]
    return sum(flags) / len(flags)


def terms(task: Task, texts: Sequence[str], limits: RewardLimits = RewardLimits(),
          variant: str = "specified") -> dict[str, float]:
    """Every term of the formula for one joint action, plus the reward itself (``variant``: see :data:`VARIANTS`)."""
    _check_variant(variant)
    joint = evaluate_joint(task, texts)
    actions, strict = joint.actions, joint.strict
    validity = [float(a.valid) for a in actions]
    v = sum(validity) / 2
    j = joint.metrics["team_action_success"]
    p = bottleneck([0.5 * _format_progress(t, a, task.days) + 0.5 * act.soft_validity(task.days)
                    for a, (t, act) in enumerate(zip(texts, actions))])
    recovered = {}
    for a, t in enumerate(texts):
        recovered.update(recover_assignments(t, a, task.days, task.scaffold_cities, same_route))
    values = {(d, f): recovered.get((d, f), EMPTY) for d in range(1, task.days + 1) for f in FIELDS}
    rec = evaluate_plan(task, values, len(recovered))
    e = composite(rec.bottleneck, rec.quality)
    b, q, g = strict.bottleneck, strict.quality, joint.metrics["required_grounded_recall"]
    c = composite(b, q)
    u = joint.metrics["collaboration_success"]
    written = _values(texts)
    slots = joint.merged.slots
    over = [len(str(t)) > limits.max_action_chars
            or any(len(m.group(3)) > limits.max_value_chars for m in TRIPLE.finditer(str(t)[:200_000]))
            for t in texts]
    out = {"P": p, "E": e, "V": v, "J": j, "B": b, "Q": q, "C": c, "G": g, "U": u,
           "invalid": 1.0 - v, "conflict": joint.merged.conflicts / slots, "overlap": joint.merged.overlaps / slots,
           "copy": (sum(is_copy(x) for x in written) / len(written)) if written else 0.0,
           "overlength": sum(over) / len(over)}
    quality = WEIGHTS["JB"] * j * b + WEIGHTS["JC"] * j * c + WEIGHTS["JG"] * j * g
    out["K"] = constraint_share(strict)
    if variant == "strict":
        quality *= FLOOR + (1.0 - FLOOR) * out["K"]
    raw = (WEIGHTS["P"] * p + WEIGHTS["E"] * e + WEIGHTS["V"] * v + WEIGHTS["J"] * j + quality + WEIGHTS["U"] * u
           + sum(WEIGHTS[k] * out[k] for k in ("invalid", "conflict", "overlap", "copy", "overlength")))
    out["reward"] = min(RANGE[1], max(RANGE[0], raw))
    return out


def _check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise ValueError(f"travel reward: unknown variant {variant!r}; valid variants: {', '.join(VARIANTS)}")


def joint_reward(item: Mapping[str, Any], logistics: str, experience: str, limits: RewardLimits = RewardLimits(),
                 variant: str = "specified") -> float:
    """The reward of one joint action; malformed output scores low, it never raises."""
    try:
        task = task_of(item)
    except Exception as exc:  # the row itself is broken: that is a data error, not model output
        raise ValueError(f"travel reward: row {item.get('id')!r} cannot be parsed ({exc}); check the dataset") from exc
    return float(terms(task, [str(logistics or ""), str(experience or "")], limits, variant)["reward"])


def make_reward(variant: str = "specified"):
    """The CoMLRL-contract reward of ``variant``: ``"specified"`` (the published formula, the default) or
    ``"strict"`` (constraint passes carry partial credit); ValueError for anything else."""
    _check_variant(variant)

    def reward(*agent_completions: Sequence[str], batch_items: Sequence[Mapping[str, Any]] | None = None,
               prompts: Sequence[str] | None = None) -> list[float]:
        """CoMLRL contract: ``reward(logistics_completions, experience_completions, batch_items=...)``."""
        if len(agent_completions) != 2:
            raise ValueError("travel reward: expected completions of 2 agents (Logistics, Experience), got "
                             f"{len(agent_completions)}")
        first, second = ([c] if isinstance(c, str) else list(c) for c in agent_completions)
        if batch_items is None or not (len(batch_items) == len(first) == len(second)):
            raise ValueError("travel reward: batch_items must give one row per joint action")
        return [joint_reward(item, a, b, variant=variant) for item, a, b in zip(batch_items, first, second)]

    reward.reward_range = RANGE
    reward.backend = NAME if variant == "specified" else STRICT_NAME
    reward.variant = variant
    return reward


reward = make_reward("specified")  # the published formula: what users of the original travel domain compare against
