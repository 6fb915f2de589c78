"""The decentralized action contract and the deterministic merger.

Agent 0 (Logistics) owns ``current_city``, ``transportation`` and ``accommodation``; agent 1
(Experience) owns ``breakfast``, ``attraction``, ``lunch`` and ``dinner``, for every day. An
action is one JSON object ``{"assignments": [{"day": d, "field": f, "value": v}, ...]}`` with
exactly one assignment per owned slot (``"-"`` where a slot is intentionally empty).

Three readings of an action:

* :func:`parse_action` (strict): the whole text is one JSON object of that shape. Assignments
  for a slot the agent does not own, outside the trip, duplicated, or with a non-string value
  are *rejected*; the action is *valid* only when nothing is rejected and every owned slot is
  assigned once.
* :func:`recover_assignments` (reward-only): complete ``(day, field, value)`` triples found
  anywhere in malformed text, used only to rank malformed actions (the learning channel E);
  never for a strict or ultimate metric.
* :func:`merge`: joins the two agents' parsed assignments into one plan, counting overlaps
  (a slot assigned by both agents), conflicts (a slot given two different values) and
  capacity overflow (more assignments than the agent owns slots).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

FIELDS = ("current_city", "transportation", "breakfast", "attraction", "lunch", "dinner", "accommodation")
ROLE_FIELDS = (("current_city", "transportation", "accommodation"), ("breakfast", "attraction", "lunch", "dinner"))
ROLE_NAMES = ("Logistics", "Experience")
EMPTY = "-"
TRIPLE = re.compile(r'\{\s*"day"\s*:\s*(\d+)\s*,\s*"field"\s*:\s*"([a-z_]+)"\s*,'
                    r'\s*"value"\s*:\s*"((?:[^"\\\n]|\\.)*)"\s*\}')


def owned_slots(agent: int, days: int) -> list[tuple[int, str]]:
    """The (day, field) slots agent ``agent`` must assign, in skeleton order (day-major)."""
    return [(d, f) for d in range(1, days + 1) for f in ROLE_FIELDS[agent]]


def owner(field_name: str) -> int | None:
    for agent, fields in enumerate(ROLE_FIELDS):
        if field_name in fields:
            return agent
    return None


@dataclass
class ParsedAction:
    agent: int
    parsed: bool  # the text is one JSON object with an "assignments" list
    assignments: dict[tuple[int, str], str] = field(default_factory=dict)  # accepted (first) assignment per owned slot
    emitted: int = 0  # assignments in the text
    rejected: int = 0  # wrong-role, out-of-trip, malformed or overflowing assignments
    duplicates: int = 0  # a second assignment of an already assigned slot
    conflicting: int = 0  # duplicates with a different value
    missing: int = 0  # owned slots with no assignment

    @property
    def valid(self) -> bool:
        """Exact action validity: parsed, nothing rejected or duplicated, every owned slot assigned."""
        return self.parsed and self.rejected == 0 and self.duplicates == 0 and self.missing == 0

    def soft_validity(self, days: int) -> float:
        """Share of owned slots with an accepted, well-formed assignment (0 unless parsed)."""
        if not self.parsed:
            return 0.0
        penalty = self.rejected + self.duplicates
        return max(0.0, (len(self.assignments) - penalty) / max(1, len(owned_slots(self.agent, days))))


def parse_action(text: str, agent: int, days: int) -> ParsedAction:
    """Strict reading of one agent's action; never raises on model output."""
    out = ParsedAction(agent=agent, parsed=False)
    try:
        data = json.loads(text)
    except (ValueError, TypeError, RecursionError):
        return out
    if not isinstance(data, dict) or set(data) != {"assignments"} or not isinstance(data["assignments"], list):
        return out
    out.parsed = True
    owned = set(owned_slots(agent, days))
    for a in data["assignments"]:
        out.emitted += 1
        slot = _slot(a)
        if slot is None or slot not in owned:
            out.rejected += 1
            continue
        _accept(out, slot, a["value"])
    out.missing = len(owned - set(out.assignments))
    return out


def _slot(a: Any) -> tuple[int, str] | None:
    if not isinstance(a, dict) or set(a) != {"day", "field", "value"} or not isinstance(a["value"], str):
        return None
    if not isinstance(a["day"], int) or isinstance(a["day"], bool) or not isinstance(a["field"], str):
        return None
    return a["day"], a["field"]


def _accept(out: ParsedAction, slot: tuple[int, str], value: str) -> None:
    value = value.strip() or EMPTY
    if slot in out.assignments:
        out.duplicates += 1
        out.conflicting += int(out.assignments[slot] != value)
    else:
        out.assignments[slot] = value


def recover_assignments(text: str, agent: int, days: int, scaffold_cities: Mapping[int, str],
                        same_route: Any = None) -> dict[tuple[int, str], str]:
    """Reward-only recovery: complete triples anywhere in ``text`` for the agent's own slots.

    Wrong-role and out-of-trip triples are rejected, only the first triple of a slot counts
    (overflow is dropped), and a ``current_city`` that differs from the scaffold (a route
    change) is rejected."""
    owned = set(owned_slots(agent, days))
    out: dict[tuple[int, str], str] = {}
    for m in TRIPLE.finditer(str(text)[:200_000]):
        slot = (int(m.group(1)), m.group(2))
        if slot not in owned or slot in out:
            continue
        try:
            value = json.loads(f'"{m.group(3)}"').strip() or EMPTY
        except ValueError:
            continue
        if slot[1] == "current_city" and not (same_route or str.__eq__)(value, scaffold_cities.get(slot[0], "")):
            continue
        out[slot] = value
    return out


@dataclass
class Merge:
    plan: list[dict[str, Any]]  # one dict per day with "days" and the seven fields ("-" where unassigned)
    overlaps: int  # slots assigned by both agents
    conflicts: int  # slots given two different values (across or within agents)
    overflow: int  # assignments beyond an agent's owned slot count
    slots: int  # total slots (days x 7)


def merge(actions: Sequence[ParsedAction], days: int, raw: Sequence[str] = ()) -> Merge:
    """The team itinerary: each agent's accepted assignments in its own slots.

    Overlap and conflict are measured on what the agents *wrote* (``raw``: their texts), so an
    agent that writes its teammate's slots is counted even though ownership rejects the write."""
    plan = [{"days": d, **{f: EMPTY for f in FIELDS}} for d in range(1, days + 1)]
    for act in actions:
        for (d, f), v in act.assignments.items():
            plan[d - 1][f] = v
    written: list[dict[tuple[int, str], str]] = ([_written(t) for t in raw] if raw
                                                 else [dict(a.assignments) for a in actions])
    overlaps = conflicts = 0
    if len(written) >= 2:
        common = set(written[0]) & set(written[1])
        overlaps = len(common)
        conflicts = sum(written[0][s] != written[1][s] for s in common)
    conflicts += sum(a.conflicting for a in actions)
    overflow = sum(max(0, a.emitted - len(owned_slots(a.agent, days))) for a in actions)
    return Merge(plan=plan, overlaps=overlaps, conflicts=conflicts, overflow=overflow, slots=days * len(FIELDS))


def _written(text: str) -> dict[tuple[int, str], str]:
    try:
        data = json.loads(text)
        items = data.get("assignments", []) if isinstance(data, dict) else []
    except (ValueError, TypeError, RecursionError):
        return {}
    out = {}
    for a in items if isinstance(items, list) else []:
        slot = _slot(a)
        if slot is not None and slot not in out:
            out[slot] = a["value"].strip() or EMPTY
    return out


def render_action(values: Mapping[tuple[int, str], str], agent: int, days: int) -> str:
    """The canonical action text for ``values`` (missing slots become ``"-"``)."""
    items = [{"day": d, "field": f, "value": values.get((d, f), EMPTY)} for d, f in owned_slots(agent, days)]
    return json.dumps({"assignments": items}, ensure_ascii=False)


def plan_to_actions(plan: Sequence[Mapping[str, Any]], days: int) -> tuple[str, str]:
    """Split a per-day plan (TravelPlanner format) into the two role actions."""
    values = {}
    for i, day in enumerate(list(plan)[:days]):
        for f in FIELDS:
            v = day.get(f, EMPTY) if isinstance(day, Mapping) else EMPTY
            values[(i + 1, f)] = str(v).strip() or EMPTY
    return render_action(values, 0, days), render_action(values, 1, days)


def merger(outputs: Mapping[str, str]) -> str:
    """Workflow merger: the two role texts as one JSON record (the reward re-parses them with the task)."""
    return json.dumps({role: outputs.get(role, "") for role in ROLE_NAMES}, ensure_ascii=False)
