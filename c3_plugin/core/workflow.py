"""Workflows: roles, the schedule of decision points, validation and context assembly.

A workflow is data. Each role names the agent (model index) that plays it, a prompt
template and the roles it reads. The schedule is the ordered list of steps: decision
points (a role writes one message) and optional environment feedback steps (a
deterministic function of the trace writes one entry). Contexts are assembled only from
the task item, the templates and the outputs recorded earlier on the same path, which
is what makes the trace the whole state.

Template keys: ``{question}`` (task text), ``{context}`` (the ``"\\n\\n"``-joined outputs
of every step it reads, in schedule order), ``{<role>}`` or ``{<feedback>}`` (that
step's latest output) and any name listed in ``inputs`` (a field of the task item).
A missing value is the empty string; literal braces are doubled (``\\\\boxed{{}}``).
"""

from __future__ import annotations

import importlib
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import yaml

Merger = Callable[[Mapping[str, str]], str]
Feedback = Callable[[Mapping[str, Any], Mapping[str, str]], str]
ContextFn = Callable[[Mapping[str, Any], Mapping[str, str]], str]

# A feedback step's output that ends the episode on its path: later decision points sample nothing (their entries
# are marked ``ended``) and later feedback steps see it in what they read (CoMLRL's multi-turn early termination).
EPISODE_END = "\u241eepisode-ended"

_RESERVED = ("question", "context")
_ROLE_KEYS = {"agent", "template", "reads", "prefix", "system", "max_new_tokens", "temperature"}
_STEP_KEYS = {"role", "feedback", "reads", "template"}
_TOP_KEYS = {"name", "agents", "roles", "schedule", "final", "merger", "feedback", "inputs", "description"}


class WorkflowError(ValueError):
    """An invalid workflow; the message names the role and the problem."""


@dataclass(frozen=True)
class Role:
    """One role of the team."""

    name: str
    agent: int  # index of the agent (model) that plays this role
    template: str = "{question}"  # prompt template, format-string syntax
    reads: tuple[str, ...] = ()  # steps whose outputs this role reads
    prefix: str = ""  # assistant prefill: part of the context, not of the policy's message
    system: str | None = None  # optional system prompt for chat templates
    max_new_tokens: int | None = None  # per-role generation cap (None: the sampling default)
    # per-role sampling temperature (None: the algorithm's temperature); roles of one agent must agree
    temperature: float | None = None


@dataclass(frozen=True)
class Step:
    """One schedule entry: a decision point or an environment feedback step."""

    index: int  # position in the schedule
    name: str  # role name, or feedback name
    kind: str  # "decision" or "feedback"
    reads: tuple[str, ...]  # effective reads (declared reads plus step names used in the template)
    template: str  # prompt template (decision points only)
    decision: int | None  # decision index u among decision points (None for feedback)
    stage: int  # parallel stage: steps of one stage read nothing of each other
    keys: tuple[str, ...] = ()  # template field names, parsed once


def template_keys(template: str, where: str) -> tuple[str, ...]:
    """Field names used by ``template``; raises WorkflowError on malformed templates."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise WorkflowError(f"{where}: malformed template ({exc}); escape literal braces as '{{{{' and '}}}}'") from exc
    keys = []
    for _, name, _, _ in parsed:
        if name is None:
            continue
        if not name.isidentifier():
            raise WorkflowError(f"{where}: template key '{{{name}}}' is not a plain name; escape literal braces "
                                f"as '{{{{' and '}}}}'")
        keys.append(name)
    return tuple(dict.fromkeys(keys))


@dataclass(frozen=True)
class Workflow:
    """A validated workflow; build with :func:`workflow_from_dict` or :func:`load_workflow`."""

    name: str
    roles: Mapping[str, Role]
    steps: tuple[Step, ...]
    num_agents: int
    final: str | None = None  # role whose latest output is the action (None when a merger joins)
    merger: Merger | None = None  # joins the latest outputs of ``merge_roles`` into one action
    merge_roles: tuple[str, ...] = ()
    feedback: Mapping[str, Feedback] = field(default_factory=dict)
    inputs: tuple[str, ...] = ()  # task-item fields templates may use
    # role -> CoMLRL formatter (item -> its whole context); only roles that read nothing
    formatters: Mapping[str, Callable[[Mapping[str, Any]], str]] = field(default_factory=dict)
    # role -> (item, latest outputs of the steps it reads) -> its whole context (CoMLRL's multi-turn prompts)
    contexts: Mapping[str, ContextFn] = field(default_factory=dict)

    @property
    def decision_steps(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.kind == "decision")

    @property
    def num_decisions(self) -> int:
        return len(self.decision_steps)

    def decision_points(self) -> list[str]:
        """Role names of the decision points, in schedule order."""
        return [s.name for s in self.decision_steps]

    def parallel_stages(self) -> list[list[str]]:
        stages: dict[int, list[str]] = {}
        for s in self.steps:
            stages.setdefault(s.stage, []).append(s.name)
        return [stages[k] for k in sorted(stages)]

    def context_decisions(self) -> tuple[tuple[int, ...], ...]:
        """Per step: the decision indices its context depends on, through everything it reads.

        Two paths whose messages agree at these decision points assemble the same context
        for the step (feedback steps count as deterministic functions of what they read).
        Parallel roles read nothing of each other, so neither depends on the other's decision.
        """
        out: list[frozenset[int]] = []  # per step: decisions its output depends on
        ctx: list[tuple[int, ...]] = []
        for s in self.steps:
            deps = frozenset().union(*(out[j] for j in range(s.index) if self.steps[j].name in s.reads))
            ctx.append(tuple(sorted(deps)))
            out.append(deps | {s.decision} if s.decision is not None else deps)
        return tuple(ctx)

    def assemble(self, step: Step, item: Mapping[str, Any], outputs: Sequence[str]) -> str:
        """The exact context text of ``step`` given the outputs of steps ``0..step.index-1``."""
        if len(outputs) < step.index:
            raise WorkflowError(f"{step.name}: needs {step.index} earlier outputs, got {len(outputs)}")
        if step.name in self.formatters:
            return str(self.formatters[step.name](item))
        if step.name in self.contexts:
            latest = {prev.name: text for prev, text in zip(self.steps[: step.index], outputs)
                      if prev.name in step.reads}
            return str(self.contexts[step.name](item, latest))
        latest: dict[str, str] = {}
        read = []
        for prev, text in zip(self.steps[: step.index], outputs):
            latest[prev.name] = text
            if prev.name in step.reads:
                read.append(text)
        values: dict[str, str] = {}
        for key in step.keys:
            if key == "question":
                values[key] = str(item.get("question", item.get("prompt", "")))
            elif key == "context":
                values[key] = "\n\n".join(read)
            elif key in latest:
                values[key] = latest[key]
            else:
                values[key] = "" if item.get(key) is None else str(item.get(key))
        return step.template.format(**values)

    def latest_outputs(self, outputs: Sequence[str]) -> dict[str, str]:
        """Latest output of every step name along one path."""
        return {s.name: text for s, text in zip(self.steps, outputs)}

    def final_action(self, outputs: Sequence[str]) -> str:
        """The action the terminal reward scores: the merger's join or the final role's output."""
        latest = self.latest_outputs(outputs)
        if self.merger is not None:
            return self.merger({r: latest.get(r, "") for r in self.merge_roles})
        return latest.get(self.final or "", "")

    def with_templates(self, templates: Mapping[str, str], **role_fields: Mapping[str, Any]) -> "Workflow":
        """A copy with new role templates (and optional per-role fields such as ``prefix``)."""
        spec = self.to_dict()
        for role, text in templates.items():
            if role not in spec["roles"]:
                raise WorkflowError(f"{role}: no such role in workflow '{self.name}' (roles: "
                                    f"{', '.join(spec['roles'])})")
            spec["roles"][role]["template"] = text
        for fname, per_role in role_fields.items():
            for role, value in per_role.items():
                if role not in spec["roles"]:
                    raise WorkflowError(f"{role}: no such role in workflow '{self.name}' for per-role '{fname}' "
                                        f"(roles: {', '.join(spec['roles'])})")
                spec["roles"][role][fname] = value
        for item in spec["schedule"]:
            if isinstance(item, dict) and "role" in item and item["role"] in templates:
                item.pop("template", None)
        return workflow_from_dict(spec, feedback=self.feedback, merger=self.merger, formatters=self.formatters,
                                  contexts=self.contexts)

    def per_agent(self, values: Mapping[Any, Any] | None, what: str) -> dict[int, Any]:
        """A per-role setting (``{role name or agent index: value}``) as ``{agent: value}``; an unknown role or
        agent, or two roles of one agent with different values, is a :class:`WorkflowError` naming it."""
        out: dict[int, Any] = {}
        for key, value in (values or {}).items():
            if isinstance(key, int) and not isinstance(key, bool):
                if not 0 <= key < self.num_agents:
                    raise WorkflowError(f"{what}: agent {key} does not exist; workflow '{self.name}' has agents "
                                        f"0..{self.num_agents - 1}")
                agent = key
            elif key in self.roles:
                agent = self.roles[key].agent
            else:
                raise WorkflowError(f"{what}: no role '{key}' in workflow '{self.name}' (roles: "
                                    f"{', '.join(self.roles)})")
            if agent in out and out[agent] != value:
                raise WorkflowError(f"{what}: agent {agent} is given {out[agent]!r} and {value!r} (its roles: "
                                    f"{', '.join(r.name for r in self.roles.values() if r.agent == agent)}); one value "
                                    "per agent")
            out[agent] = value
        return out

    def agent_temperatures(self) -> dict[int, float]:
        """Per agent, the sampling temperature its roles set (agents whose roles set none are left out). The PPO
        ratio of an agent's messages is taken at that temperature, so the roles one agent plays must agree."""
        out: dict[int, float] = {}
        for r in self.roles.values():
            if r.temperature is None:
                continue
            other = [o.name for o in self.roles.values() if o.agent == r.agent and o.temperature != r.temperature]
            if other:
                raise WorkflowError(f"{r.name}: temperature {r.temperature} differs from that of {', '.join(other)}, "
                                    f"played by the same agent {r.agent}; give every role of one agent "
                                    "the same temperature")
            out[r.agent] = r.temperature
        return out

    def to_dict(self) -> dict[str, Any]:
        roles = {
            r.name: {k: v for k, v in (("agent", r.agent), ("template", r.template), ("reads", list(r.reads)),
                                       ("prefix", r.prefix), ("system", r.system), ("max_new_tokens", r.max_new_tokens),
                                       ("temperature", r.temperature))
                     if v not in (None, "", [])}
            for r in self.roles.values()
        }
        schedule: list[Any] = []
        for s in self.steps:
            if s.kind == "feedback":
                schedule.append({"feedback": s.name, "reads": list(s.reads)})
            else:
                role = self.roles[s.name]
                entry: dict[str, Any] = {"role": s.name}
                if s.template != role.template:
                    entry["template"] = s.template
                entry["reads"] = list(s.reads)
                schedule.append(entry)
        out: dict[str, Any] = {"name": self.name, "agents": self.num_agents, "roles": roles, "schedule": schedule}
        if self.inputs:
            out["inputs"] = list(self.inputs)
        if self.final and self.merger is None:
            out["final"] = self.final
        return out


def _resolve_callable(ref: Any, what: str) -> Callable:
    if callable(ref):
        return ref
    if not isinstance(ref, str) or ":" not in ref:
        raise WorkflowError(f"{what}: expected a callable or 'module:function', got {ref!r}")
    module, _, attr = ref.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise WorkflowError(f"{what}: cannot import '{ref}' ({exc})") from exc


def _as_names(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise WorkflowError(f"{where}: 'reads' must be a list of role names, got {value!r}")
    return tuple(value)


def _parse_roles(raw: Any, num_agents: int | None) -> dict[str, Role]:
    if not isinstance(raw, Mapping) or not raw:
        raise WorkflowError("workflow: 'roles' must be a non-empty mapping of role name to role spec")
    roles = {}
    for name, spec in raw.items():
        spec = dict(spec or {})
        unknown = set(spec) - _ROLE_KEYS
        if unknown:
            raise WorkflowError(f"{name}: unknown role field(s) {sorted(unknown)}; valid: {sorted(_ROLE_KEYS)}")
        if name in _RESERVED or not str(name).isidentifier():
            raise WorkflowError(f"{name}: role names must be identifiers other than {_RESERVED}")
        agent = spec.get("agent")
        if (not isinstance(agent, int) or isinstance(agent, bool) or agent < 0
                or (num_agents is not None and agent >= num_agents)):
            raise WorkflowError(f"{name}: unknown agent index {agent!r}; agents are 0..{(num_agents or 1) - 1}")
        roles[name] = Role(name=name, agent=agent, template=spec.get("template", "{question}"),
                           reads=_as_names(spec.get("reads"), name), prefix=spec.get("prefix", "") or "",
                           system=spec.get("system"), max_new_tokens=spec.get("max_new_tokens"),
                           temperature=_temperature(spec.get("temperature"), name))
    return roles


def _temperature(value: Any, role: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise WorkflowError(f"{role}: temperature must be a number > 0, got {value!r}")
    return float(value)


def _topological_schedule(roles: Mapping[str, Role]) -> list[str]:
    """Kahn's order over the read graph, stable in declaration order; cycles are errors."""
    deps = {r: {d for d in roles[r].reads if d in roles} for r in roles}
    order: list[str] = []
    while len(order) < len(roles):
        ready = [r for r in roles if r not in order and deps[r] <= set(order)]
        if not ready:
            left = [r for r in roles if r not in order]
            cycle, node = [left[0]], left[0]
            while True:
                node = next(d for d in sorted(deps[node]) if d not in order)
                if node in cycle:
                    cycle = cycle[cycle.index(node):] + [node]
                    break
                cycle.append(node)
            raise WorkflowError(f"{cycle[0]}: cycle in reads: {' -> '.join(cycle)}; give an explicit 'schedule' for "
                                "multi-turn workflows")
        order.extend(ready[:1])
    return order


def _build_steps(schedule: Sequence[Any], roles: Mapping[str, Role], feedback_names: set[str],
                 inputs: tuple[str, ...]) -> tuple[Step, ...]:
    steps: list[Step] = []
    acted: dict[str, int] = {}  # step name -> stage of its latest occurrence
    decision = 0
    for index, item in enumerate(schedule):
        if isinstance(item, str):
            item = {"role": item}
        if not isinstance(item, Mapping):
            raise WorkflowError(f"schedule[{index}]: expected a role name or a mapping, got {item!r}")
        unknown = set(item) - _STEP_KEYS
        if unknown:
            raise WorkflowError(f"schedule[{index}]: unknown field(s) {sorted(unknown)}; valid: {sorted(_STEP_KEYS)}")
        if "feedback" in item:
            name, kind, template = item["feedback"], "feedback", ""
            if name not in feedback_names:
                raise WorkflowError(f"{name}: feedback step has no function; pass feedback={{'{name}': fn}} or "
                                    "list it under 'feedback'")
            reads = _as_names(item.get("reads"), name)
        else:
            name = item.get("role")
            if name not in roles:
                raise WorkflowError(f"{name}: unknown role in schedule[{index}]; roles: {', '.join(roles)}")
            kind = "decision"
            template = item.get("template", roles[name].template)
            reads = _as_names(item["reads"], name) if "reads" in item else roles[name].reads
        keys = template_keys(template, name) if kind == "decision" else ()
        known = set(roles) | feedback_names
        for key in keys:
            if key not in _RESERVED and key not in known and key not in inputs:
                raise WorkflowError(f"{name}: unknown template key '{{{key}}}'; use question, context, a role name, "
                                    f"a feedback name, or declare it under 'inputs'")
        reads = tuple(dict.fromkeys(reads + tuple(k for k in keys if k in known)))
        for r in reads:
            if r not in known:
                raise WorkflowError(f"{name}: reads unknown role '{r}'")
            if r not in acted:
                raise WorkflowError(f"{name}: reads '{r}', which has not acted before schedule[{index}]")
        stage = 1 + max((acted[r] for r in reads), default=-1)
        steps.append(Step(index=index, name=name, kind=kind, reads=reads, template=template,
                          decision=decision if kind == "decision" else None, stage=stage, keys=keys))
        decision += kind == "decision"
        acted[name] = stage
    return tuple(steps)


def workflow_from_dict(spec: Mapping[str, Any], *, feedback: Mapping[str, Feedback] | None = None,
                       merger: Merger | None = None,
                       formatters: Mapping[str, Callable[[Mapping[str, Any]], str]] | None = None,
                       contexts: Mapping[str, ContextFn] | None = None) -> Workflow:
    """Build and validate a workflow from a plain mapping (the YAML form); ``formatters`` give roles that
    read nothing their whole context from the task item (CoMLRL's formatters), ``contexts`` give a role its
    whole context from the item and the latest outputs of the steps it reads."""
    if not isinstance(spec, Mapping):
        raise WorkflowError(f"workflow: expected a mapping, got {type(spec).__name__}")
    unknown = set(spec) - _TOP_KEYS
    if unknown:
        raise WorkflowError(f"workflow: unknown field(s) {sorted(unknown)}; valid: {sorted(_TOP_KEYS)}")
    name = str(spec.get("name", "workflow"))
    num_agents = spec.get("agents")
    roles = _parse_roles(spec.get("roles"), num_agents)
    if num_agents is None:
        num_agents = 1 + max(r.agent for r in roles.values())
    fb = {k: _resolve_callable(v, f"feedback '{k}'") for k, v in dict(spec.get("feedback") or {}).items()}
    fb.update(feedback or {})
    inputs = _as_names(spec.get("inputs"), "inputs")
    schedule = spec.get("schedule") or _topological_schedule(roles)
    steps = _build_steps(schedule, roles, set(fb), inputs)
    scheduled = {s.name for s in steps}
    for r in roles:
        if r not in scheduled:
            raise WorkflowError(f"{r}: role is declared but never scheduled")
    merge_spec = spec.get("merger")
    merge_roles: tuple[str, ...] = ()
    if merger is None and merge_spec is not None:
        ref = merge_spec.get("fn") if isinstance(merge_spec, Mapping) else merge_spec
        merger = _resolve_callable(ref, "merger")
        if isinstance(merge_spec, Mapping):
            merge_roles = _as_names(merge_spec.get("roles"), "merger")
    decisions = [s for s in steps if s.kind == "decision"]
    if not decisions:
        raise WorkflowError(f"{name}: no final role: the schedule has no decision point")
    last_stage = [s.name for s in decisions if s.stage == decisions[-1].stage]
    final = spec.get("final")
    if merger is not None:
        merge_roles = merge_roles or tuple(dict.fromkeys(last_stage))
        for r in merge_roles:
            if r not in roles:
                raise WorkflowError(f"{r}: merger joins an unknown role")
        final = None
    elif final is not None:
        if final not in roles:
            raise WorkflowError(f"{final}: final role is not a role of the workflow")
    elif len(set(last_stage)) > 1:
        raise WorkflowError(f"{', '.join(last_stage)}: no final role: these roles end the workflow in parallel; "
                            "declare 'final:' or a merger")
    else:
        final = decisions[-1].name
    for r in formatters or {}:
        if r not in roles or any(s.reads for s in steps if s.name == r):
            raise WorkflowError(f"{r}: a formatter gives the whole context from the task item, so its role must "
                                "exist and read nothing")
    for r in contexts or {}:
        if r not in roles:
            raise WorkflowError(f"{r}: a context function is given for a role the workflow does not have")
    return Workflow(name=name, roles=roles, steps=steps, num_agents=int(num_agents), final=final,
                    merger=merger, merge_roles=merge_roles, feedback=fb, inputs=inputs,
                    formatters=dict(formatters or {}), contexts=dict(contexts or {}))


def join_messages(outputs: Mapping[str, str]) -> str:
    """The parallel team's joint action as one text: each role's message under its name."""
    return "\n\n".join(f"[{role}]\n{text}" for role, text in outputs.items())


def parallel_workflow(num_agents: int, formatters: Sequence[Callable[..., str]] | None = None) -> Workflow:
    """CoMLRL's team: ``num_agents`` independent agents (roles ``Agent0``, ``Agent1``, ...) in one parallel
    stage, each reading only the task: the item's ``prompt`` (CoMLRL's default formatter) or its own
    formatter's text. The joint reward sees every agent's message; the recorded action joins them
    (:func:`join_messages`). The default of a trainer built without a workflow."""
    if int(num_agents) < 1:
        raise WorkflowError(f"parallel workflow: num_agents must be >= 1, got {num_agents}")
    if formatters is not None and len(formatters) != num_agents:
        raise WorkflowError(f"parallel workflow: {len(formatters)} formatters for {num_agents} "
                            "agents; give one per agent")
    roles = {f"Agent{a}": {"agent": a, "template": "{prompt}"} for a in range(int(num_agents))}
    spec = {"name": "parallel", "agents": int(num_agents), "roles": roles, "inputs": ["prompt"]}
    fmt = {f"Agent{a}": f for a, f in enumerate(formatters)} if formatters is not None else None
    return workflow_from_dict(spec, merger=join_messages, formatters=fmt)


BUILTIN_DIR = Path(__file__).with_name("workflows")


def builtin_workflows() -> list[str]:
    """Names of the workflows shipped with the plugin (the paper's six topologies)."""
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.yaml"))


def load_workflow(source: str | Path | Mapping[str, Any], **kwargs: Any) -> Workflow:
    """Load a workflow from a built-in name, a YAML path or a mapping."""
    if isinstance(source, Mapping):
        return workflow_from_dict(source, **kwargs)
    path = Path(source)
    if not path.suffix and (BUILTIN_DIR / f"{source}.yaml").exists():
        path = BUILTIN_DIR / f"{source}.yaml"
    if not path.exists():
        raise WorkflowError(f"workflow: '{source}' is neither a built-in "
                            f"({', '.join(builtin_workflows())}) nor a YAML file")
    return workflow_from_dict(yaml.safe_load(path.read_text()), **kwargs)
