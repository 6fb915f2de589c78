"""The centralized joint action contract: one planner writes every day and all seven fields.

One model sees both roles' contexts (the request, the conventions, the shared route scaffold,
BOTH role catalogs, both day checklists and both budget contracts: the precomputed prompt
fields of :func:`~domains.travel.prompts.prompt_fields`, unchanged) and emits one JSON action
``{"assignments": [...]}`` with one assignment per ``(day, field)`` slot, day-major, each
day's fields in :data:`~domains.travel.actions.FIELDS` order. Under structured generation
the schema is forced exactly as for a role (:func:`joint_grammar`): the policy writes only
value text, with the same per-value token cap.

Output budget: a joint action has ``7 x days`` values, exactly the Logistics role's
``3 x days`` plus the Experience role's ``4 x days``, each under the same
``travel.max_value_tokens``; its worst-case length
(:func:`c3_plugin.core.structured.max_completion_tokens` of the joint skeleton, which the
generation backend uses as the token cap, so a joint message is never cut mid-schema) is the
sum of the two roles' worst cases plus one forced ``between`` segment and minus one closing
segment (:func:`output_budget`). The nominal ``max_new_tokens`` of a centralized run is the
sum of the two role budgets (2 x 1024 = 2048 in the specification's configs).

Rewards and metrics never see the joint text directly: :func:`split_joint` turns it into the
two role actions, which the unchanged travel reward and evaluator score. The split is
deterministic and strict (never a repair):

1. The whole text must be one JSON object whose only key is ``"assignments"``, a list, and
   every entry must be a well-formed assignment: an object with exactly the keys ``day``
   (int, not bool), ``field`` (one of the seven FIELDS) and ``value`` (str). Anything else
   (unclosed array, trailing text, garbage, an unknown field, a non-string value) is a
   failed joint action: ``("", "")``, which the reward scores as two unparsable role actions
   (-0.10). No exception reaches the caller.
2. Otherwise each entry goes to the role that owns its field. A role whose entries are
   exactly its owned slots for the trip, each once (any order), is rendered canonically with
   :func:`~domains.travel.actions.render_action` (values as written). A role with a
   duplicated slot, a day outside ``1..days`` or a missing slot is rendered *verbatim*
   (``json.dumps`` of its entries, in the order written), so the strict role parser rejects
   it exactly as it would reject a decentralized role that wrote the same entries: that role
   is invalid, never silently fixed.

C3 is not defined for the centralized actor: there is one decision point per episode, so
there is no other role's message to hold fixed and no counterfactual continuation.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from c3_plugin.core.workflow import Workflow, workflow_from_dict

from .actions import EMPTY, FIELDS, ROLE_FIELDS, ROLE_NAMES, owned_slots, owner, render_action
from .eval_log import eval_logger
from .prompts import CONVENTIONS, prompt_fields, skeleton_days
from .reward import RANGE, reward

JOINT_ROLE = "Planner"  # the single role of the joint workflow (agent 0)
JOINT_WORKFLOW = "travel_joint"
INPUTS = ("route_scaffold", "logistics_catalog", "experience_catalog", "logistics_checklist", "experience_checklist",
          "logistics_budget", "experience_budget")


def _fields(agent: int) -> str:
    return ", ".join(ROLE_FIELDS[agent])


JOINT_TEMPLATE = """Request: {{question}}

{conventions}

Route scaffold:
{{route_scaffold}}

{lo} catalog ({lo_fields}; exact values; costs are for the whole party):
{{logistics_catalog}}

{ex} catalog ({ex_fields}; exact values; costs are for the whole party):
{{experience_catalog}}

{lo} day checklist:
{{logistics_checklist}}

{ex} day checklist:
{{experience_checklist}}

Budget contracts (as given to each role; you write both roles' fields):
{lo}: {{logistics_budget}}
{ex}: {{experience_budget}}

Reply with one JSON object {{{{"assignments": [...]}}}}: one {{{{"day", "field", "value"}}}} assignment for every slot of both checklists, day by day, each day's fields in the order {order}.""".format(  # noqa: E501 (the prompt's text, verbatim)
    conventions=CONVENTIONS, lo=ROLE_NAMES[0], ex=ROLE_NAMES[1], lo_fields=_fields(0), ex_fields=_fields(1),
    order=", ".join(FIELDS))

JOINT_SYSTEM = (f"You are the single planner of a travel team: you write both the {ROLE_NAMES[0]} fields "
                f"({_fields(0)}) and the {ROLE_NAMES[1]} fields ({_fields(1)}) of every day, in one JSON action.")


def joint_slots(days: int) -> list[tuple[int, str]]:
    """Every ``(day, field)`` slot of a ``days``-day trip, day-major, fields in FIELDS order."""
    return [(d, f) for d in range(1, int(days) + 1) for f in FIELDS]


def joint_prefill() -> str:
    """The joint planner's assistant prefill: the JSON up to the first value's opening quote."""
    from c3_plugin.core.structured import Skeleton

    return Skeleton(tuple(joint_slots(1))).prefill()


def joint_workflow(structured: bool = True) -> Workflow:
    """One role, ``Planner`` (agent 0), reading both roles' prompt fields; prefilled with the first
    joint assignment when ``structured``."""
    role = {"agent": 0, "template": JOINT_TEMPLATE, "system": JOINT_SYSTEM,
            "prefix": joint_prefill() if structured else ""}
    return workflow_from_dict({"name": JOINT_WORKFLOW if structured else f"{JOINT_WORKFLOW}_free", "agents": 1,
                               "roles": {JOINT_ROLE: role}, "inputs": list(INPUTS)})


def is_joint(workflow: Workflow) -> bool:
    """Whether ``workflow`` is a joint-planner workflow (one role, ``Planner``)."""
    return set(workflow.roles) == {JOINT_ROLE}


def joint_grammar(prompt: Any, max_value_tokens: int = 64):
    """The forced skeleton of the joint planner's prompt: all ``7 x days`` slots (None for other prompts).

    The trip length comes from the prompt's ``Trip length: N days`` line, as for a role."""
    from c3_plugin.core.structured import Skeleton

    if prompt.role != JOINT_ROLE or prompt.prefix != joint_prefill():
        return None
    days = skeleton_days(prompt.text)
    if days is None:
        raise ValueError(f"travel joint grammar: the {JOINT_ROLE} prompt states no 'Trip length: N days' line")
    return Skeleton(tuple(joint_slots(days)), max_value_tokens=max_value_tokens)


def output_budget(tokenizer: Any, days: int, max_value_tokens: int) -> dict[str, int]:
    """Worst-case completion tokens of each role's skeleton and of the joint skeleton."""
    from c3_plugin.core.structured import Skeleton, max_completion_tokens

    roles = [max_completion_tokens(tokenizer, Skeleton(tuple(owned_slots(a, days)), max_value_tokens))
             for a in range(2)]
    joint = max_completion_tokens(tokenizer, Skeleton(tuple(joint_slots(days)), max_value_tokens))
    return {"logistics": roles[0], "experience": roles[1], "roles_sum": sum(roles), "joint": joint}


def render_joint(values: Mapping[tuple[int, str], str], days: int) -> str:
    """The canonical joint action text for ``values`` (missing slots become ``"-"``)."""
    items = [{"day": d, "field": f, "value": values.get((d, f), EMPTY)} for d, f in joint_slots(days)]
    return json.dumps({"assignments": items}, ensure_ascii=False)


def plan_to_joint(plan: Sequence[Mapping[str, Any]], days: int) -> str:
    """A per-day plan (TravelPlanner format) as one joint action."""
    values = {}
    for i, day in enumerate(list(plan)[:days]):
        for f in FIELDS:
            v = day.get(f, EMPTY) if isinstance(day, Mapping) else EMPTY
            values[(i + 1, f)] = str(v).strip() or EMPTY
    return render_joint(values, days)


def _entry(a: Any) -> tuple[int, str, str] | None:
    """``(day, field, value)`` of a well-formed joint assignment, else None."""
    if not isinstance(a, dict) or set(a) != {"day", "field", "value"}:
        return None
    day, fld, value = a["day"], a["field"], a["value"]
    if isinstance(day, bool) or not isinstance(day, int) or not isinstance(value, str) or fld not in FIELDS:
        return None
    return day, fld, value


def split_joint(text: str, days: int) -> tuple[str, str]:
    """``(logistics_text, experience_text)`` of a joint action (the rule is in the module docstring)."""
    try:
        data = json.loads(str(text))
    except (ValueError, TypeError, RecursionError):
        return "", ""
    if not isinstance(data, dict) or set(data) != {"assignments"} or not isinstance(data["assignments"], list):
        return "", ""
    per_role: list[list[tuple[int, str, str]]] = [[], []]
    for a in data["assignments"]:
        e = _entry(a)
        if e is None:
            return "", ""
        per_role[owner(e[1])].append(e)
    out = []
    for agent, entries in enumerate(per_role):
        slots = [(d, f) for d, f, _ in entries]
        if len(slots) == len(set(slots)) and set(slots) == set(owned_slots(agent, days)):
            out.append(render_action({(d, f): v for d, f, v in entries}, agent, days))
        else:  # invalid for the strict role parser, exactly as written
            out.append(json.dumps({"assignments": [{"day": d, "field": f, "value": v} for d, f, v in entries]},
                                  ensure_ascii=False))
    return out[0], out[1]


def item_days(item: Mapping[str, Any]) -> int:
    return int(item["days"])


class TravelJointAdapter:
    """CoMLRL's ``CentralizedComparatorAdapter`` for travel: the joint planner's prompt, and the
    strict split of a joint action into the two role actions.

    ``build_prompt`` returns the joint workflow's context text (the ``Planner`` template filled
    from the row; the role prompts CoMLRL passes are not needed, every field comes from the
    row); the workflow's system prompt and prefill are added by the generation backend from the
    ``Planner`` role. ``parse_completion`` never raises: an invalid joint action is two empty
    role actions (a failed action the reward scores low)."""

    num_roles = len(ROLE_NAMES)

    def __init__(self, workflow: Workflow | None = None):
        self.workflow = workflow or joint_workflow(True)
        if not is_joint(self.workflow):
            raise ValueError(f"TravelJointAdapter needs a joint workflow (one role '{JOINT_ROLE}'); "
                             f"'{self.workflow.name}' has roles {sorted(self.workflow.roles)}")
        self.step = self.workflow.decision_steps[0]

    def build_prompt(self, batch_item: Mapping[str, Any], agent_prompts: Sequence[str] = ()) -> str:
        item = dict(batch_item)
        if any(k not in item for k in INPUTS):
            item.update(prompt_fields(item))
        return self.workflow.assemble(self.step, item, [])

    def parse_completion(self, completion: str, batch_item: Mapping[str, Any], num_agents: int = 2) -> list[str]:
        if int(num_agents) != len(ROLE_NAMES):
            raise ValueError(f"travel joint actions split into {len(ROLE_NAMES)} roles "
                             f"({', '.join(ROLE_NAMES)}), not {num_agents}")
        return list(split_joint(completion, item_days(batch_item)))


def joint_reward(*completions: Sequence[str], batch_items: Sequence[Mapping[str, Any]] | None = None,
                 prompts: Sequence[str] | None = None) -> list[float]:
    """The unchanged travel reward of joint actions: ``joint_reward(joint_texts, batch_items=...)``."""
    if len(completions) != 1:
        raise ValueError(f"travel joint reward: expected one list of joint actions, got {len(completions)} lists")
    texts = [completions[0]] if isinstance(completions[0], str) else list(completions[0])
    if batch_items is None or len(batch_items) != len(texts):
        raise ValueError("travel joint reward: batch_items must give one row per joint action")
    pairs = [split_joint(t, item_days(it)) for t, it in zip(texts, batch_items)]
    return reward([p[0] for p in pairs], [p[1] for p in pairs], batch_items=batch_items)


def joint_eval_logger(agent_completions_turns: Sequence[Sequence[Sequence[str]]],
                      batch_items: Sequence[Mapping[str, Any]],
                      prompts: Sequence[str] | None = None) -> list[dict[str, float]]:
    """The travel eval logger for a joint actor: one agent's joint texts are split into the two
    role actions first (two role lists, e.g. already split by CoMLRL, pass through unchanged)."""
    if len(agent_completions_turns) == 1:
        roles: list[list[list[str]]] = [[], []]
        for turns, item in zip(agent_completions_turns[0], batch_items):
            split = [split_joint(t, item_days(item)) for t in turns]
            for a in range(2):
                roles[a].append([s[a] for s in split])
        agent_completions_turns = roles
    return eval_logger(agent_completions_turns, batch_items, prompts)


joint_reward.reward_range = RANGE


def joint_probe(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Model-free checks of the joint contract on ``rows[0]``: the all-dash joint action splits into the
    all-dash role pair (0.08); an unclosed joint array is a failed action (-0.10, two empty roles)."""
    item = rows[0]
    days = item_days(item)
    dash = render_joint({}, days)
    ok_split = split_joint(dash, days) == (render_action({}, 0, days), render_action({}, 1, days))
    dash_reward = joint_reward([dash], batch_items=[item])[0]
    broken_reward = joint_reward([dash[:-2]], batch_items=[item])[0]
    return {"joint_workflow": JOINT_WORKFLOW, "joint_slots": len(joint_slots(days)), "joint_probe_days": days,
            "joint_all_dash_reward": round(dash_reward, 6), "joint_malformed_reward": round(broken_reward, 6),
            "joint_probe_ok": ok_split and abs(dash_reward - 0.08) < 1e-9 and broken_reward < 0.0}
