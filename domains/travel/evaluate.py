"""The reward-independent joint evaluator: grounding, route, commonsense and hard constraints of
a merged itinerary against the row's reference catalog and its dated route scaffold.

Everything here is a function of the two actions and the row (never of a target plan and
never of the reward weights), so the end metrics do not move when the reward changes.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Mapping, Sequence

from .actions import EMPTY, FIELDS, ROLE_FIELDS, Merge, ParsedAction, merge, owned_slots, parse_action
from .catalog import Catalog, DayPlan, norm_city, norm_name, parse_reference, route_scaffold

MEALS = ("breakfast", "lunch", "dinner")
HOUSE_RULES = {"smoking": "no smoking", "parties": "no parties", "children under 10": "no children under 10",
               "visitors": "no visitors", "pets": "no pets"}
ROOM_TYPES = {"entire room": "entire home/apt", "private room": "private room", "shared room": "shared room"}
COMMONSENSE = ("route_continuity", "closed_loop", "city_count", "city_consistency", "grounded", "required_information",
               "restaurant_diversity", "attraction_diversity", "transportation_consistency", "minimum_nights")
COPY_MARKERS = ("average cost", "aggregate rating", "latitude", "longitude", "house_rules", "minimum nights",
                "maximum occupancy", "flightdate", "origincityname", "actualelapsedtime", "review rate number")


@dataclass(frozen=True)
class Task:
    """A row's parsed, target-free context: what both prompts and the evaluator share."""

    id: str
    org: str
    days: int
    cities: int  # visiting_city_number
    people: int
    budget: float
    constraints: Mapping[str, Any]  # house rule / cuisine / room type / transportation (None when unset)
    catalog: Catalog
    scaffold: tuple[DayPlan, ...]

    def required(self, day: int, field_name: str) -> str:
        """``"exact"``, ``"required"``, ``"empty"`` (intentionally ``-``) or ``"optional"`` for one slot."""
        dp = self.scaffold[day - 1]
        if field_name == "current_city":
            return "exact"
        if field_name == "transportation":
            return "required" if dp.leg else "empty"
        if field_name == "accommodation":
            return "empty" if dp.last else "required"
        return "optional" if dp.leg else "required"

    def required_slots(self, agent: int) -> list[tuple[int, str]]:
        return [s for s in owned_slots(agent, self.days) if self.required(*s) in ("exact", "required")]

    @property
    def scaffold_cities(self) -> dict[int, str]:
        return {dp.day: dp.current_city for dp in self.scaffold}


def _literal(value: Any, default: Any) -> Any:
    if isinstance(value, str):
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return default
    return default if value is None else value


@lru_cache(maxsize=512)
def _task_cached(key: str, org: str, days: int, cities: int, people: int, budget: float, constraints: str,
                 reference: str, dates: str) -> Task:
    cat = parse_reference(reference, list(_literal(dates, [])))
    return Task(id=key, org=org, days=days, cities=cities, people=people, budget=budget,
                constraints=_literal(constraints, {}), catalog=cat, scaffold=tuple(route_scaffold(cat, days, org)))


def task_of(item: Mapping[str, Any]) -> Task:
    """The parsed task of a normalised row (parsed once per row, then cached)."""
    return _task_cached(str(item.get("id", "")), str(item["org"]), int(item["days"]), int(item["visiting_city_number"]),
                        int(item["people_number"]), float(item["budget"]),
                        repr(_literal(item.get("local_constraint"), {})), str(item["reference_information"]),
                        repr(list(_literal(item["date"], []))))


# ----- one slot -------------------------------------------------------------------------------------


@dataclass
class Slot:
    grounded: bool  # every entity in the value exists in the catalog in one of the day's cities
    entities: list[tuple[Any, bool, bool]]  # (catalog entry or None, in catalog, in the day's cities)
    cost: float | None  # full-party cost (None: not costable; 0.0 for "-")
    mode: str | None = None  # transportation mode


def _split_entity(value: str) -> tuple[str, str]:
    name, sep, city = value.rpartition(",")
    return (name.strip(), city.strip()) if sep else (value.strip(), "")


def entity_key(cat: Catalog, table: str, value: str) -> tuple[str, ...]:
    """What a value *means*, for duplicate detection and stay runs: its catalogue entry however it is spelled
    (``Name, City(5)``, ``Name,City``, ``NAME, city`` and a bare ``Name`` are one place), else its name
    without city or suffix. Grounding never uses this: it takes exact spellings only (:meth:`Catalog.resolve`)."""
    entry = cat.identify(table, value)
    if entry is not None:
        return (table, norm_name(entry.name), norm_city(entry.city))
    return (table, norm_name(_split_entity(re.sub(r"\(.*?\)\s*$", "", value))[0]))


def _parts(value: str) -> list[str]:
    """The entities of an attraction list ``A, City;B, City;`` (spaces around ``;`` dropped)."""
    return [p.strip() for p in value.split(";") if p.strip() and p.strip() != EMPTY]


def slot_of(task: Task, day: int, field_name: str, value: str, current: str | None = None) -> Slot:
    """Grounding and cost of one assigned value on ``day`` (in the scaffold's cities for that day)."""
    dp = task.scaffold[day - 1]
    cat = task.catalog
    if value == EMPTY:
        return Slot(grounded=True, entities=[], cost=0.0)
    if field_name == "transportation":
        return _transport(task, dp, value)
    table = {"accommodation": "accommodations", "attraction": "attractions"}.get(field_name, "restaurants")
    cities = (dp.city,) if field_name == "accommodation" else dp.cities
    parts = _parts(value) if field_name == "attraction" else [value]
    found = [cat.resolve(table, p) for p in parts]  # exact spellings only: anything else is not grounded
    in_cities = {norm_city(c) for c in cities}
    entities = [(e, e is not None, e is not None and norm_city(e.city) in in_cities) for e in found]
    grounded = bool(entities) and all(ok for _, _, ok in entities)
    cost: float | None = 0.0
    if field_name in MEALS:
        e = entities[0][0]
        cost = e.cost * task.people if e is not None and not math.isnan(e.cost) else None
    elif field_name == "accommodation":
        e = entities[0][0]
        cost = e.price * e.rooms(task.people) if e is not None and not math.isnan(e.price) else None
    return Slot(grounded=grounded, entities=entities, cost=cost)


def _transport(task: Task, dp: DayPlan, value: str) -> Slot:
    low = value.strip().lower()
    leg = dp.leg
    if low.startswith(("self-driving", "taxi")):
        mode = "self-driving" if low.startswith("self-driving") else "taxi"
        m = re.search(r"from (.+?) to (.+?)(,|$)", value)
        origin, dest = (m.group(1), m.group(2)) if m else ("", "")
        g = task.catalog.ground_for(mode, origin, dest) if m else None
        ok = (g is not None and leg is not None and norm_city(origin) == norm_city(leg.origin)
              and norm_city(dest) == norm_city(leg.dest))
        cost = g.cost * g.vehicles(task.people) if g is not None else None
        return Slot(grounded=ok, entities=[(g, g is not None, ok)], cost=cost, mode=mode)
    m = re.search(r"\bF\d{5,}\b", value)
    if m:
        number = m.group(0)
        found = [f for fl in task.catalog.flights.values() for f in fl if f.number == number]
        f = found[0] if found else None
        ok = f is not None and leg is not None and norm_city(f.origin) == norm_city(leg.origin) and \
            norm_city(f.dest) == norm_city(leg.dest) and f.date == leg.date
        return Slot(grounded=ok, entities=[(f, f is not None, ok)], cost=f.price * task.people if f is not None
                    else None, mode="flight")
    return Slot(grounded=False, entities=[(None, False, False)], cost=None, mode="unknown")


# ----- the whole plan -----------------------------------------------------------------------------


@dataclass
class Evaluation:
    """Per-sample end metrics (names as published) and the reward's inputs."""

    metrics: dict[str, float] = field(default_factory=dict)
    contributions: tuple[float, float] = (0.0, 0.0)  # per role: grounded share of its required slots
    commonsense: dict[str, bool] = field(default_factory=dict)
    hard: dict[str, float] = field(default_factory=dict)  # applicable constraint -> soft score (1.0 = pass)
    quality: float = 0.0  # Q
    bottleneck: float = 0.0  # B
    total_cost: float = 0.0


def bottleneck(values: Sequence[float]) -> float:
    """0.20 x mean + 0.80 x min: a weak role cannot hide behind a strong one."""
    return 0.2 * (sum(values) / len(values)) + 0.8 * min(values) if values else 0.0


def composite(b: float, q: float) -> float:
    """C = B^0.65 x Q^0.35 (zero when either is zero)."""
    return (b ** 0.65) * (q ** 0.35) if b > 0 and q > 0 else 0.0


def evaluate_plan(task: Task, values: Mapping[tuple[int, str], str], assigned: int) -> Evaluation:
    """Evaluate a merged itinerary given as ``{(day, field): value}``; ``assigned`` counts accepted
    assignments (for assignment coverage)."""
    ev = Evaluation()
    slots = {(d, f): slot_of(task, d, f, values.get((d, f), EMPTY)) for d in range(1, task.days + 1) for f in FIELDS
             if f != "current_city"}
    route_ok = {d: same_route(values.get((d, "current_city"), EMPTY), dp.current_city)
                for d, dp in enumerate(task.scaffold, 1)}
    required = [(d, f) for a in (0, 1) for d, f in task.required_slots(a)]

    def good(d: int, f: str) -> bool:
        if f == "current_city":
            return route_ok[d]
        return values.get((d, f), EMPTY) != EMPTY and slots[(d, f)].grounded

    ev.contributions = tuple(_share([good(*s) for s in task.required_slots(a)]) for a in (0, 1))  # type: ignore[assignment]
    recall = _share([good(*s) for s in required])
    emitted = [ent for s in slots.values() for ent in s.entities]
    precision = _share([in_cat and in_city for _, in_cat, in_city in emitted]) if emitted else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    priced_required = [(d, f) for d, f in required if f not in ("current_city", "attraction")]
    priced_emitted = set(priced_required) | {(d, f) for (d, f), s in slots.items() if f != "attraction"
                                             and values.get((d, f), EMPTY) != EMPTY}
    known = [slots[s].cost is not None for s in priced_emitted]
    total = sum(s.cost for s in slots.values() if s.cost is not None)
    margin = 1.0 if total <= task.budget else max(0.0, 2.0 - total / task.budget)
    emitted_completeness = _share(known) if known else 0.0
    budget_soft = recall * emitted_completeness * margin
    budget_pass = (recall == 1.0 and all(known) and all(s.cost is not None for s in slots.values())
                   and total <= task.budget)
    ev.commonsense = _commonsense(task, values, slots, route_ok, required, emitted)
    ev.hard = _hard(task, values, slots, budget_soft, budget_pass)
    cs_soft = _share(list(ev.commonsense.values()))
    hard_soft = sum(ev.hard.values()) / len(ev.hard)
    s_gate = 0.10 + 0.90 * recall
    coverage = assigned / (task.days * len(FIELDS))
    ev.quality = s_gate * 0.20 * coverage + 0.25 * recall + 0.15 * f1 + s_gate * (0.25 * cs_soft + 0.15 * hard_soft)
    ev.bottleneck = bottleneck(list(ev.contributions))
    ev.total_cost = total
    hard_pass = [v >= 1.0 for v in ev.hard.values()]
    ev.metrics = {
        "required_cooperative_contribution": min(ev.contributions), "required_grounded_recall": recall,
        "entity_grounding_precision": precision, "grounding_f1": f1,
        "required_cost_completeness": _share([slots[s].cost is not None
                                              and values.get(s, EMPTY) != EMPTY for s in priced_required]),
        "reference_budget_soft": budget_soft, "reference_budget_pass": float(budget_pass),
        "route_scaffold_match": _share(list(route_ok.values())),
        "reference_plan_delivery": float(any(v != EMPTY for v in values.values())),
        "reference_commonsense_micro": cs_soft, "reference_hard_micro": _share(hard_pass),
        "reference_plan_success": float(all(ev.commonsense.values()) and all(hard_pass)),
    }
    return ev


def _share(flags: Sequence[bool]) -> float:
    return sum(bool(x) for x in flags) / len(flags) if flags else 0.0


def route_key(current: str) -> tuple[str, ...]:
    """A ``current_city`` value as normalised cities: ``("a", "b")`` for a move, ``("a",)`` for a stay."""
    m = re.fullmatch(r"\s*from (.+) to (.+?)\s*", current)
    return (norm_city(m.group(1)), norm_city(m.group(2))) if m else (norm_city(current),)


def same_route(value: str, scaffold: str) -> bool:
    """The plan's ``current_city`` names the scaffold's move or stay (``from X to X`` never does)."""
    return value != EMPTY and route_key(value) == route_key(scaffold) and _not_loop(value)


def _not_loop(current: str) -> bool:
    m = re.fullmatch(r"from (.+) to (.+)", current)
    return not m or norm_city(m.group(1)) != norm_city(m.group(2))


def _plan_route(values: Mapping[tuple[int, str], str], days: int) -> list[tuple[str, str] | None]:
    """Per day (start city, end city) as the plan itself says, None when unreadable."""
    out = []
    for d in range(1, days + 1):
        cur = values.get((d, "current_city"), EMPTY)
        m = re.fullmatch(r"from (.+) to (.+)", cur)
        out.append((norm_city(m.group(1)), norm_city(m.group(2))) if m
                   else ((norm_city(cur),) * 2 if cur != EMPTY else None))
    return out


def _commonsense(task: Task, values, slots, route_ok, required, emitted) -> dict[str, bool]:
    route = _plan_route(values, task.days)
    readable = all(r is not None for r in route)
    continuity = readable and all(route[i][0] == route[i - 1][1] for i in range(1, len(route)))
    closed = readable and route[0][0] == norm_city(task.org) and route[-1][1] == norm_city(task.org)
    visited = {c for r in route if r for c in r} - {norm_city(task.org)}
    cat = task.catalog
    restaurants = [entity_key(cat, "restaurants", values[(d, f)]) for d in range(1, task.days + 1) for f in MEALS
                   if values.get((d, f), EMPTY) != EMPTY]
    attractions = [entity_key(cat, "attractions", p) for d in range(1, task.days + 1)
                   for p in _parts(values.get((d, "attraction"), EMPTY))]
    modes = {s.mode for s in slots.values() if s.mode}
    return {
        "route_continuity": continuity and all(_not_loop(values.get((d, "current_city"), EMPTY))
                                               for d in range(1, task.days + 1)),
        "closed_loop": closed,
        "city_count": readable and len(visited) == task.cities,
        "city_consistency": all(route_ok.values()) and all(in_city for _, in_cat, in_city in emitted if in_cat),
        "grounded": bool(emitted) and all(in_cat and in_city for _, in_cat, in_city in emitted),
        "required_information": all(values.get(s, EMPTY) != EMPTY for s in required),
        "restaurant_diversity": len(restaurants) == len(set(restaurants)),
        "attraction_diversity": len(attractions) == len(set(attractions)),
        "transportation_consistency": not ("self-driving" in modes and ({"flight", "taxi"} & modes)),
        "minimum_nights": _minimum_nights(task, values),
    }


def _minimum_nights(task: Task, values) -> bool:
    """Each run of consecutive nights at one place (however spelled) lasts at least its listing's minimum."""
    runs: list[list] = []  # [key, entry, nights]
    for d in range(1, task.days + 1):
        v = values.get((d, "accommodation"), EMPTY)
        if v == EMPTY:
            continue
        key = entity_key(task.catalog, "accommodations", v)
        if runs and runs[-1][0] == key:
            runs[-1][2] += 1
        else:
            runs.append([key, task.catalog.identify("accommodations", v), 1])
    return all(entry is None or nights >= entry.min_nights for _, entry, nights in runs)


def _hard(task: Task, values, slots, budget_soft: float, budget_pass: bool) -> dict[str, float]:
    """Applicable hard constraints and their soft scores (1.0 = satisfied)."""
    c = task.constraints
    out = {"budget": 1.0 if budget_pass else min(budget_soft, 0.999)}
    stays = [e for (d, f), s in slots.items() if f == "accommodation" for e, _, _ in s.entities]
    if c.get("house rule"):
        banned = HOUSE_RULES.get(str(c["house rule"]).lower(), f"no {str(c['house rule']).lower()}")
        out["house_rule"] = (_share([e is not None and banned not in e.house_rules.lower() for e in stays]) if stays
                             else 0.0)
    if c.get("room type"):
        want = str(c["room type"]).lower()
        ok = ((lambda e: e.room_type.lower() != "shared room") if want == "not shared room"
              else (lambda e: e.room_type.lower() == ROOM_TYPES.get(want, want)))
        out["room_type"] = _share([e is not None and ok(e) for e in stays]) if stays else 0.0
    if c.get("cuisine"):
        wanted = [str(x).lower() for x in c["cuisine"]]
        served = {cu.lower() for (d, f), s in slots.items() if f in MEALS for e, _, _ in s.entities
                  if e is not None for cu in e.cuisines}
        out["cuisine"] = _share([w in served for w in wanted])
    if c.get("transportation"):
        banned_mode = {"no flight": "flight", "no self-driving": "self-driving"}.get(str(c["transportation"]).lower())
        modes = {s.mode for s in slots.values() if s.mode}
        out["transportation"] = float(banned_mode not in modes)
    return out


# ----- the joint action -----------------------------------------------------------------------------


@dataclass
class JointResult:
    task: Task
    actions: tuple[ParsedAction, ParsedAction]
    merged: Merge
    strict: Evaluation
    metrics: dict[str, float]


def evaluate_joint(task: Task, texts: Sequence[str]) -> JointResult:
    """Strict evaluation of the two agents' actions (reward-independent)."""
    actions = (parse_action(texts[0], 0, task.days), parse_action(texts[1], 1, task.days))
    merged = merge(actions, task.days, raw=texts)
    values = {(row["days"], f): row[f] for row in merged.plan for f in FIELDS}
    assigned = sum(len(a.assignments) for a in actions)
    strict = evaluate_plan(task, values, assigned)
    valid = [float(a.valid) for a in actions]
    team = float(all(valid) and merged.conflicts == 0 and merged.overlaps == 0)
    complete = float(team == 1.0 and all(values.get(s, EMPTY) != EMPTY for a in (0, 1) for s in task.required_slots(a)))
    full_contribution = min(strict.contributions) >= 1.0
    metrics = {"action_validity": sum(valid) / 2, "team_action_success": team, "required_plan_completion": complete,
               **strict.metrics}
    # success needs valid actions: the merged plan of the first accepted assignments of an invalid joint action
    # (duplicates, wrong-role writes, rejected entries) is not a plan the team delivered
    metrics["reference_plan_success"] = float(strict.metrics["reference_plan_success"] == 1.0 and team == 1.0)
    metrics["collaboration_success"] = float(metrics["reference_plan_success"] == 1.0 and full_contribution)
    return JointResult(task=task, actions=actions, merged=merged, strict=strict, metrics=metrics)


def role_values(values: Mapping[tuple[int, str], str], agent: int) -> dict[tuple[int, str], str]:
    return {s: v for s, v in values.items() if s[1] in ROLE_FIELDS[agent]}
