"""Role prompts: the shared route scaffold, compact per-role catalogs (exact values, full-party
costs, hard-constraint eligibility), the per-role day checklist, the role budget contract and
the plan conventions. Everything is derived from the row's reference slice and request,
never from a target plan; every piece is precomputed once per row into prompt fields."""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

from c3_plugin.core.workflow import Workflow, workflow_from_dict

from .actions import EMPTY, ROLE_FIELDS, ROLE_NAMES, owned_slots
from .catalog import Accommodation, Ground
from .evaluate import HOUSE_RULES, MEALS, ROOM_TYPES, Task, task_of

CONVENTIONS = """Plan conventions:
- A travel day uses current_city = "from A to B" and requires the matching transportation.
- A stay day uses one city, has no transportation ("-"), and requires breakfast, lunch, dinner and an attraction.
- Accommodation is required every night, i.e. on every day except the final return day ("-").
- The route starts and ends at the origin and visits the requested number of cities.
- Choose entities only from the catalog below, copying each value exactly."""
TRIP_LINE = re.compile(r"^Trip length: (\d+) days$", re.M)


def _stay_nights(task: Task) -> dict[str, int]:
    nights: dict[str, int] = {}
    for dp in task.scaffold:
        if not dp.last:
            nights[dp.city] = nights.get(dp.city, 0) + 1
    return nights


def _stay_problems(task: Task, acc: Accommodation, nights: int) -> list[str]:
    c = task.constraints
    out = []
    if c.get("house rule"):
        banned = HOUSE_RULES.get(str(c["house rule"]).lower(), f"no {str(c['house rule']).lower()}")
        if banned in acc.house_rules.lower():
            out.append(f"house rule ({acc.house_rules})")
    if c.get("room type"):
        want = str(c["room type"]).lower()
        ok = (acc.room_type.lower() != "shared room" if want == "not shared room"
              else acc.room_type.lower() == ROOM_TYPES.get(want, want))
        if not ok:
            out.append(f"room type ({acc.room_type})")
    if acc.min_nights > nights:
        out.append(f"minimum {acc.min_nights} nights > {nights}")
    return out


def _transport_allowed(task: Task, mode: str) -> bool:
    banned = {"no flight": "flight", "no self-driving": "self-driving"}.get(
        str(task.constraints.get("transportation") or "").lower())
    return banned != mode


def _leg_options(task: Task, dp) -> list[tuple[str, float, bool]]:
    """(exact value, full-party cost, allowed) of every transport for a move day."""
    leg = dp.leg
    out = [(f.value, f.price * task.people, _transport_allowed(task, "flight"))
           for f in task.catalog.flights_for(leg.origin, leg.dest, leg.date)]
    for mode in ("self-driving", "taxi"):
        g: Ground | None = task.catalog.ground_for(mode, leg.origin, leg.dest)
        if g is not None:
            out.append((g.value, g.cost * g.vehicles(task.people), _transport_allowed(task, mode)))
    return out


def route_scaffold_text(task: Task) -> str:
    lines = []
    for dp in task.scaffold:
        kind = f"move {dp.current_city}" if dp.leg else f"stay in {dp.city}"
        lines.append(f"Day {dp.day}: {kind}" + (" (return)" if dp.last else ""))
    return "\n".join(lines)


def logistics_catalog(task: Task) -> str:
    lines = []
    for dp in task.scaffold:
        if dp.leg:
            lines.append(f"Transportation for day {dp.day} ({dp.current_city}, {dp.leg.date}):")
            options = _leg_options(task, dp)
            lines += [f'  - "{v}" | ${c:.0f} for the party'
                      + ("" if ok else " | NOT ALLOWED by the request") for v, c, ok in options]
            if not options:
                lines.append("  (no transportation available in the reference)")
    for city, nights in _stay_nights(task).items():
        lines.append(f"Accommodations in {city} ({nights} night{'s' if nights > 1 else ''}):")
        for acc in task.catalog.accommodations.get(city.casefold(), []) or _by_display(task, city):
            problems = _stay_problems(task, acc, nights)
            lines.append(f'  - "{acc.value}" | ${acc.price * acc.rooms(task.people):.0f}/night for the party | '
                         f'{acc.room_type} | '
                         f"min {acc.min_nights} nights | "
                         + ("eligible" if not problems else "ineligible: " + "; ".join(problems)))
    return "\n".join(lines)


def _by_display(task: Task, city: str) -> list[Accommodation]:
    from .catalog import norm_city

    return task.catalog.accommodations.get(norm_city(city), [])


def experience_catalog(task: Task) -> str:
    from .catalog import norm_city

    wanted = [str(c).lower() for c in (task.constraints.get("cuisine") or [])]
    lines = []
    cities = list(dict.fromkeys(c for dp in task.scaffold for c in dp.cities if norm_city(c) != norm_city(task.org)))
    for city in cities:
        lines.append(f"Restaurants in {city}:")
        for r in task.catalog.restaurants.get(norm_city(city), []):
            hit = [c for c in r.cuisines if c.lower() in wanted]
            lines.append(f'  - "{r.value}" | ${r.cost * task.people:.0f} for the party | {", ".join(r.cuisines)}'
                         + (f" | requested cuisine: {', '.join(hit)}" if hit else ""))
        lines.append(f"Attractions in {city}:")
        lines += [f'  - "{a.value}"' for a in task.catalog.attractions.get(norm_city(city), [])]
    return "\n".join(lines)


def checklist(task: Task, agent: int) -> str:
    lines = []
    for d in range(1, task.days + 1):
        dp = task.scaffold[d - 1]
        parts = []
        for f in ROLE_FIELDS[agent]:
            need = task.required(d, f)
            if need == "exact":
                parts.append(f'{f} = "{dp.current_city}" (exact)')
            elif need == "empty":
                parts.append(f'{f} = "{EMPTY}" (intentionally empty)')
            elif need == "required":
                where = dp.city if f == "accommodation" else " or ".join(dict.fromkeys(dp.cities))
                parts.append(f"{f}: required (in {where})")
            else:
                parts.append(f'{f}: optional ("{EMPTY}" allowed)')
        lines.append(f"Day {d}: " + "; ".join(parts))
    lines.append(f"Trip length: {task.days} days")
    return "\n".join(lines)


def budget_floors(task: Task) -> tuple[float, float]:
    """Cheapest constraint-compatible logistics and experience costs for the whole party."""
    logistics = 0.0
    for dp in task.scaffold:
        if dp.leg:
            allowed = [c for _, c, ok in _leg_options(task, dp) if ok]
            logistics += min(allowed) if allowed else 0.0
    for city, nights in _stay_nights(task).items():
        stays = [a.price * a.rooms(task.people) for a in _by_display(task, city) if not _stay_problems(task, a, nights)]
        logistics += (min(stays) if stays else 0.0) * nights
    from .catalog import norm_city

    experience, used = 0.0, set()
    for dp in task.scaffold:
        if dp.leg:
            continue
        menu = sorted(task.catalog.restaurants.get(norm_city(dp.city), []), key=lambda r: r.cost)
        for r in [r for r in menu if r.name not in used][: len(MEALS)]:
            used.add(r.name)
            experience += r.cost * task.people
    return logistics, experience


def budget_caps(task: Task) -> tuple[int, int]:
    """Role caps that sum exactly to the user budget: each floor plus a floor-proportional share of the slack."""
    lo, ex = budget_floors(task)
    total = int(round(task.budget))
    slack = total - lo - ex
    share = lo / (lo + ex) if lo + ex > 0 else 0.5
    cap_lo = int(math.floor(lo + slack * share))
    return cap_lo, total - cap_lo


def budget_contract(task: Task, agent: int) -> str:
    caps = budget_caps(task)
    lo, ex = budget_floors(task)
    floor = (lo, ex)[agent]
    mine = ("transportation and accommodation", "meals")[agent]
    return (f"The party's total budget is ${task.budget:.0f}. Your share for {mine} is at most ${caps[agent]} "
            f"(cheapest eligible choice: ${floor:.0f}); your teammate's share is ${caps[1 - agent]}. The two "
            "shares sum to the budget.")


def prompt_fields(item: Mapping[str, Any]) -> dict[str, str]:
    """The precomputed prompt fields of one normalised row."""
    task = task_of(item)
    return {"route_scaffold": route_scaffold_text(task), "logistics_catalog": logistics_catalog(task),
            "experience_catalog": experience_catalog(task), "logistics_checklist": checklist(task, 0),
            "experience_checklist": checklist(task, 1), "logistics_budget": budget_contract(task, 0),
            "experience_budget": budget_contract(task, 1)}


TEMPLATE = """Request: {{question}}

{conventions}

Route scaffold (shared with your teammate):
{{route_scaffold}}

Your catalog (exact values; costs are for the whole party):
{{{key}_catalog}}

Your day checklist:
{{{key}_checklist}}

Budget contract: {{{key}_budget}}

Reply with one JSON object {{{{"assignments": [...]}}}}: one {{{{"day", "field", "value"}}}} assignment for every slot in your checklist, in checklist order."""  # noqa: E501 (the prompt's text, verbatim)

SYSTEM = ("You are the {role} planner of a two-agent travel team. You own {fields} for every day; your teammate owns "
          "the rest and acts at the same time without seeing your answer.")


def prefill(agent: int) -> str:
    """The assistant prefill: the JSON up to the opening quote of the first owned value."""
    from c3_plugin.core.structured import Skeleton

    return Skeleton(tuple(owned_slots(agent, 1))).prefill()


def travel_workflow(structured: bool = True) -> Workflow:
    """Two planners in one parallel stage, joined by the deterministic merger."""
    roles = {}
    for agent, name in enumerate(ROLE_NAMES):
        key = name.lower()
        roles[name] = {"agent": agent, "template": TEMPLATE.format(conventions=CONVENTIONS, key=key),
                       "system": SYSTEM.format(role=name, fields=", ".join(ROLE_FIELDS[agent])),
                       "prefix": prefill(agent) if structured else ""}
    return workflow_from_dict({"name": "travel_planners" if structured else "travel_planners_free", "agents": 2,
                               "roles": roles, "merger": "domains.travel.actions:merger",
                               "inputs": ["route_scaffold", "logistics_catalog", "experience_catalog",
                                          "logistics_checklist", "experience_checklist", "logistics_budget",
                                          "experience_budget"]})


def workflows() -> dict[str, Workflow]:
    return {"travel_planners": travel_workflow(True), "travel_planners_free": travel_workflow(False)}


def skeleton_days(prompt_text: str) -> int | None:
    """The trip length a prompt's checklist states (the grammar's only input besides the role)."""
    m = TRIP_LINE.search(prompt_text)
    return int(m.group(1)) if m else None
