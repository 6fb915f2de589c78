"""Construction of a workflow trainer, in the order ``WorkflowTrainer.__init__`` runs it.

Before CoMLRL's constructor: CoMLRL's arguments honoured or refused (:func:`refuse_unused`), the per-agent
training settings (:func:`agent_training`) and the rollout plan (:func:`resolve_plan`). After it: the trained
policies (:func:`policy_groups`), their optimizers (:func:`build_optimizers`), data parallelism
(:func:`data_parallel`: the process group and one DeepSpeed engine per policy) and the learning-rate schedules
(:func:`lr_schedules`). Each function returns what the trainer keeps.
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction
from typing import Any, Callable, Mapping, Sequence

import torch

from c3_plugin.core.config import DeepSpeedSection
from c3_plugin.core.estimator_rules import check
from c3_plugin.core.plan import (
    Plan,
    comlrl_env_steps,
    default_plan,
    every_agent_branching,
    note_budget,
    parse_plan,
    plan_env_steps,
)
from c3_plugin.core.workflow import Workflow
from c3_plugin.scale import distributed as dp
from c3_plugin.scale.optimizers import make_adamw
from c3_plugin.trainers.optim import LRSchedule, adam_kwargs, policy_optimizer_steps

Params = Callable[[int], list]  # agent -> the parameters its optimizer updates


def refuse_unused(name: str, args: Any, workflow: Any, formatters: Any, external_transition: Any) -> None:
    """CoMLRL's arguments are honoured or refused, never dropped: ``formatters`` shape the default team's
    contexts (a given workflow has its own templates); ``num_turns > 1`` runs CoMLRL's team with its
    ``external_transition`` between turns (:mod:`.turns`), which one turn never calls. ``name``: the algorithm's."""
    if formatters is not None and workflow is not None:
        raise ValueError("formatters and a workflow were both given: formatters set the contexts of the default "
                         "parallel workflow (CoMLRL's independent agents); a workflow builds each role's context from "
                         "its templates. Drop formatters, or change the role templates (workflow.templates in a "
                         "config)")
    turns = int(args.num_turns)
    if turns > 1 and external_transition is None:
        raise ValueError(f"Multi-turn {name} requires an external_transition (num_turns={turns}, as CoMLRL); "
                         "pass external_transition=, or num_turns=1 (a workflow's own schedule may hold several turns)")
    if turns > 1 and workflow is not None:
        raise ValueError(f"num_turns={turns} runs CoMLRL's team of independent agents over turns, and a workflow was "
                         "given: a workflow's schedule holds its own turns (feedback steps between a role's acts, e.g. "
                         "the code domain's 'multi_turn'); give num_turns=1 with the workflow, or drop the workflow")
    if turns == 1 and external_transition is not None:
        raise ValueError("external_transition is called between turns, and num_turns=1 has none, so it would never "
                         "run: set num_turns > 1, or drop external_transition")
    if turns > 1 and float(args.discount) != 1.0:
        warnings.warn(f"discount={args.discount} discounts the turn rewards of {name}'s returns; CoMLRL "
                      "1.4.3's MAGRPOTrainer does not read discount (its returns are undiscounted sums)", stacklevel=3)
    for message in comlrl_differences(name, args):
        warnings.warn(message, stacklevel=3)


def comlrl_differences(name: str, args: Any) -> list[str]:
    """What the run does differently from CoMLRL 1.4.3 with the same fields (each printed as a warning when the
    trainer is built): ``early_termination_threshold`` with several turns (a path ends on its own turn reward, a
    CoMLRL node on its joint actions' mean, so the reward calls can differ), and ``top_k=None`` (no top-k cut
    here; CoMLRL then passes no top_k and the model's generation config, 50 by default, applies), except under the
    full softmax (temperature and top_p 1: the YAML configs' sampling, chosen for exact behaviour log-probs)."""
    out = []
    threshold = getattr(args, "early_termination_threshold", None)
    if int(args.num_turns) > 1 and threshold is not None:
        out.append(f"early_termination_threshold={threshold}: {name} ends each path after a turn whose own reward "
                   "exceeds it (a counterfactual continuation depends on its own trace only); CoMLRL 1.4.3 ends a "
                   "node when the mean reward of its num_generations joint actions exceeds it, so the two can spend "
                   "different env steps (reward calls) and train on different turns; set "
                   "early_termination_threshold=None to run every turn in both")
    full_softmax = float(args.temperature) == 1.0 and float(args.top_p) == 1.0  # a YAML config's exact log-probs
    if getattr(args, "top_k", 0) is None and not full_softmax:
        out.append(f"top_k=None: {name} samples from the whole vocabulary (no top-k cut); CoMLRL 1.4.3 passes no "
                   "top_k to generate, so the model's generation config applies (transformers' default: top_k=50); "
                   "set top_k explicitly (e.g. 50) for the same sampling in both")
    return out


def agent_training(wf: Workflow, args: Any, n: int, learning_rates: Mapping[Any, float] | None,
                   scales: Mapping[Any, float] | None,
                   trainable: Mapping[Any, bool] | None) -> tuple[list[float], set[int], dict[int, float]]:
    """Per-agent learning rates, frozen agents and PPO temperatures from per-role settings (keys: role names
    or agent indices; the ``agents`` section of a config): ``(agent_lrs, frozen, agent_temperature)``. A frozen
    agent samples and is credited as usual but is never updated."""
    lrs, mult = wf.per_agent(learning_rates, "learning_rate"), wf.per_agent(scales, "learning_rate_scale")
    both = sorted(set(lrs) & set(mult))
    if both:
        raise ValueError(f"agents {both} have both a learning_rate and a learning_rate_scale; give one of them")
    for what, table in (("learning_rate", lrs), ("learning_rate_scale", mult)):
        for a, v in table.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"{what} of agent {a} must be a number > 0, got {v!r} "
                                 "(freeze an agent with trainable: false)")
    frozen = wf.per_agent(trainable, "trainable")
    for a, v in frozen.items():
        if not isinstance(v, bool):
            raise ValueError(f"trainable of agent {a} must be true or false, got {v!r}")
    base = float(args.agent_learning_rate)
    agent_lrs = [float(lrs.get(a, base * float(mult.get(a, 1.0)))) for a in range(n)]
    off = {a for a, v in frozen.items() if v is False}
    if len(off) == n:
        raise ValueError("trainable: false for every agent leaves nothing to train; keep at least one agent trainable")
    return agent_lrs, off, {a: wf.agent_temperatures().get(a, float(args.temperature)) for a in range(n)}


def resolve_plan(args: Any, plan: Any, wf: Workflow, turns: list[int], name: str,
                 frozen: Sequence[int] = ()) -> tuple[Plan, list[int], Fraction]:
    """``(plan, branching, share)``: the ``plan`` given, else ``args.plan``, else the algorithm's default plan
    (:func:`c3_plugin.core.plan.default_plan`: CoMLRL's env steps for ``num_generations``, written back to
    ``args.plan``); a plan of another budget is printed; ``joint_mode: cross`` needs C3's shared parallel samples.
    ``turns``: the decision points per turn. Where the default tree leaves a trained agent (not in ``frozen``)
    without a group, the cheapest tree that gives every one a group replaces it (:func:`every_agent_plan`), and
    ``share`` (else 1) is the part of each epoch's prompts it visits to stay within the reference's env steps."""
    explicit = plan is not None or args.plan is not None
    share = Fraction(1)
    if not explicit:
        args.plan = default_plan(args, turns, wf.num_agents)
        share = every_agent_plan(args, wf, turns, frozen)
        check(args, name.lower())
    parsed = parse_plan(plan if plan is not None else args.plan)
    branching = parsed.branching(wf.num_decisions)
    if explicit:
        note_budget(args, branching, turns, wf.num_agents, name)
    message = untrained_warning(name, args, parsed, wf, explicit)
    if message:
        warnings.warn(message, stacklevel=3)
    if args.joint_mode == "cross" and wf.num_agents > 1 and not (
            parsed.kind == "tree" and getattr(args, "share_parallel_samples", False)):
        raise ValueError(f"joint_mode: cross scores every combination of the agents' samples; {name} with "
                         f"plan '{args.plan}' draws each joint action's messages for it (aligned). Under C3 the tree "
                         "over parallel agents with share_parallel_samples: true is the cross product; else use "
                         "joint_mode: aligned")
    reference_batch(args, branching, turns, wf.num_agents)
    return parsed, branching, share


def reference_batch(args: Any, branching: Sequence[int], turns: Sequence[int], num_agents: int) -> None:
    """Standing in for IAC or MAAC (``comlrl_reference``), where the script does not set ``instances_per_update``: its
    ``rollout_buffer_size`` counts each agent's samples (one per prompt and joint action, or per turn), so one of
    its updates spends ``ceil(buffer / per prompt) * per prompt`` env steps; a rollout batch takes as many prompts
    as fit in them under the plan (at least one), so C3 updates (and logs) at the reference's env steps."""
    if getattr(args, "comlrl_reference", "magrpo") not in ("iac", "maac") or \
            "instances_per_update" in args.__dict__.get("_given", ()):
        return
    theirs, ours = comlrl_env_steps(args, num_agents), plan_env_steps(branching, turns)
    update = math.ceil(int(args.rollout_buffer_size) / theirs) * theirs
    args.instances_per_update = max(1, update // ours)


def every_agent_plan(args: Any, wf: Workflow, turns: list[int], frozen: Sequence[int]) -> Fraction:
    """A default tree plan (``args.plan``) that leaves a trained agent without a group (one turn at
    ``num_generations=2`` over two agents, IAC's and MAAC's ``num_generations=1``, three agents over two turns) is
    replaced by the cheapest tree that gives every trained agent a group
    (:func:`c3_plugin.core.plan.every_agent_branching`), and each epoch then visits the share of its prompts that
    keeps the run within the reference's env steps: ``reference per prompt / plan per prompt`` (the prompts rounded
    down, :func:`prompts_per_epoch`; ``eval_interval`` scaled by it, so the evaluations fall at the reference's env
    steps); printed. The share (1: the default plan kept)."""
    parsed = parse_plan(args.plan)
    if parsed.kind != "tree" or getattr(args, "untrained_decisions", None):
        return Fraction(1)
    agents = [wf.roles[s.name].agent for s in wf.decision_steps]
    trained = [a for a in range(wf.num_agents) if a not in set(frozen)]
    branched = {agents[u] for u in parsed.credit_points(wf.num_decisions)}
    if all(a in branched for a in trained):
        return Fraction(1)
    branching = every_agent_branching(turns, agents, trained)
    ours, theirs = plan_env_steps(branching, turns), comlrl_env_steps(args, wf.num_agents)
    args.plan = "tree " + str(branching)
    share = min(Fraction(1), Fraction(theirs, ours))
    if int(args.eval_interval) > 0:  # the evaluations at the reference's env steps: counted in the prompts visited
        args.eval_interval = max(1, round(int(args.eval_interval) * share))
    warnings.warn(f"CoMLRL's budget (num_generations={args.num_generations}, num_turns={args.num_turns}: {theirs} env "
                  f"steps per prompt) gives no plan that branches every trained agent {trained}; C3 runs plan "
                  f"'{args.plan}' ({ours} env steps per prompt, each agent 2 alternatives at one decision point) on "
                  f"{share} of each epoch's prompts (eval_interval {args.eval_interval} of them), so the run stays "
                  "within the reference's env steps; set plan (or untrained_decisions) to choose otherwise",
                  UserWarning, stacklevel=4)
    return share


def prompts_per_epoch(rows: int, share: Fraction) -> int:
    """Prompts an epoch of ``rows`` visits at ``share`` (rounded down: never more env steps than the reference)."""
    return int(rows * share)


def check_share(share: Fraction, train: Any, args: Any, name: str) -> None:
    """Refuse, before training, a share that leaves an epoch without a prompt, naming the smallest budget that would
    give every trained agent a group."""
    if train is None or share >= 1 or prompts_per_epoch(len(train), share) >= 1:
        return
    need = math.ceil(1 / share)
    raise ValueError(f"{name} plan '{args.plan}' is the cheapest that gives every trained agent a group, and it spends "
                     f"{need} times the reference's env steps per prompt (num_generations={args.num_generations}, "
                     f"num_turns={args.num_turns}); a train set of {len(train)} prompt(s) leaves no prompt within the "
                     f"reference's env steps: give at least {need} prompts, raise num_generations, or set plan (or "
                     "untrained_decisions) to choose the budget")


def untrained_warning(name: str, args: Any, plan: Plan, wf: Workflow, explicit: bool) -> str | None:
    """The warning for decision points a tree (or diagnostic) plan leaves without a group, so without a gradient
    (None when every one is credited, or each such one is listed in ``untrained_decisions``): the agents that get
    no update at all are named, and for the default plan why no plan of CoMLRL's budget does better. An
    independent plan (MAGRPO, MAPPO) trains every decision."""
    if plan.kind == "independent":
        return None
    names = [f"{s.name}_u{u}" for u, s in enumerate(wf.decision_steps)]
    credited = set(plan.credit_points(wf.num_decisions))
    acknowledged = set(getattr(args, "untrained_decisions", None) or [])
    unexplained = [names[u] for u in range(len(names)) if u not in credited and names[u] not in acknowledged]
    if not unexplained:
        return None
    trained = {wf.roles[wf.decision_steps[u].name].agent for u in credited}
    idle = [a for a in range(wf.num_agents) if a not in trained]
    text = (f"{name} with plan '{plan.describe()}': no gradient for {', '.join(unexplained)} (one alternative per "
            "context, so no group)")
    if idle:
        text += f"; agent(s) {idle} get no update at all (no train/agent<a>/* metrics), where MAGRPO trains every agent"
    if not explicit and idle:
        text += (f". At CoMLRL's budget (num_generations={args.num_generations}, num_turns={args.num_turns}: "
                 f"{plan.leaves(wf.num_decisions)} joint actions per prompt) no plan gives every agent a group: the "
                 "budget's factors cover fewer decision points than there are agents (each later turn rotates them "
                 "to the next agents); raise num_generations (e.g. 2 per agent: 4 for two agents) or num_turns")
    return text + ("; list a decision under untrained_decisions to leave it untrained on purpose, or give it 2 or "
                   "more alternatives in the plan")


def policy_groups(agents: Sequence[Any], lora_adapters: bool, wf: Workflow, agent_lrs: Sequence[float],
                  temperatures: Mapping[int, float], frozen: set[int]) -> list[list[int]]:
    """The agents each trained policy plays, in agent order: one agent each, or every agent of one model shared
    by the roles (``agents.policy: shared``, or one module given for several agents; LoRA adapters over one base
    stay separate policies). The group's first agent leads it: its optimizer, DeepSpeed engine, schedule and
    ``train/agent<a>/*`` metrics are the group's. A shared model trains on every role's messages in one update,
    as the reference launcher's single actor, so its roles need one learning rate and one temperature, and none
    of them can be frozen."""
    groups: dict[int, list[int]] = {}
    for a in range(len(agents)):
        groups.setdefault(a if lora_adapters else id(agents[a]), []).append(a)
    for g in (g for g in groups.values() if len(g) > 1):
        roles = [s.name for s in wf.decision_steps if wf.roles[s.name].agent in g]
        for what, values in (("learning rates", [agent_lrs[a] for a in g]),
                             ("temperatures", [temperatures[a] for a in g])):
            if len(set(values)) > 1:
                raise ValueError(f"agents {g} (roles {roles}) share one model but have different {what} {values}; "
                                 f"one model trains at one rate and scores its samples at one temperature: give "
                                 f"them the same value, or agents.policy: per_agent")
        if frozen & set(g):
            raise ValueError(f"trainable: false for agent(s) {sorted(frozen & set(g))} of a model shared by roles "
                             f"{roles}: freezing one role of a shared model would freeze them all; use "
                             "agents.policy: per_agent to freeze one role")
    return list(groups.values())


def per_agent(groups: Sequence[Sequence[int]], built: Mapping[int, Any]) -> list[Any]:
    """``built`` (one object per group, keyed by its first agent) as a list over agents: a group's object for each."""
    leader = {a: g[0] for g in groups for a in g}
    return [built[leader[a]] for a in range(len(leader))]


def build_optimizers(groups: Sequence[Sequence[int]], params: Params, agent_lrs: Sequence[float],
                     args: Any) -> list[Any]:
    """Every policy optimizer from the one factory (:func:`c3_plugin.scale.optimizers.make_adamw` with the
    ``adam_*``/``weight_decay`` fields, :func:`~.optim.adam_kwargs`), one per policy at its agent's learning rate,
    replacing CoMLRL's (torch AdamW at ``agent_learning_rate``, torch's defaults: the fields' defaults); entry
    ``a`` is its group's, one object for every agent of a shared model."""
    return per_agent(groups, {g[0]: make_adamw(params(g[0]), agent_lrs[g[0]], **adam_kwargs(args)) for g in groups})


def data_parallel(section: Any, args: Any, agents: Sequence[Any], groups: Sequence[Sequence[int]], params: Params,
                  agent_lrs: Sequence[float], lora_adapters: bool) -> tuple[Any, dp.DistContext, list[Any] | None]:
    """``(deepspeed section, dist context, engines)``: under ``torchrun`` (or ``deepspeed.enabled: true``) the
    process group and one DeepSpeed engine per policy (:mod:`c3_plugin.scale.distributed`, entry ``a`` its
    group's), which then owns the optimizer states; else no engines (None)."""
    section = section if section is not None else DeepSpeedSection()
    world = dp.launched_world()
    use = dp.use_deepspeed(section.enabled, world)  # deepspeed.enabled: true on one process: a group of one
    dist = dp.init(section.dist_backend, section.timeout_minutes, single=use) if use or world > 1 else dp.context()
    if not use:
        return section, dist, None
    errors = dp.divisibility_errors(args, world)
    if errors:
        raise ValueError("; ".join(errors))
    if lora_adapters:
        raise ValueError("agents.policy: lora shares one model between the agents' adapters, which one DeepSpeed "
                         "engine per agent cannot shard; under DeepSpeed (torchrun, deepspeed.enabled) use "
                         "agents.policy: per_agent")
    errors = dp.vllm_placement_errors(args, world)
    if errors:
        raise ValueError("; ".join(errors))
    if int(section.zero_stage) == 3 and any(len(g) > 1 for g in groups):
        raise ValueError("a model shared by several roles (agents.policy: shared) runs under one DeepSpeed engine, "
                         "whose ZeRO-3 parameter gathering the per-agent generation paths would enter once per role; "
                         "use deepspeed.zero_stage: 1 or 2 with a shared model (or agents.policy: per_agent)")
    built = {g[0]: dp.make_engine(agents[g[0]], params(g[0]), agent_lrs[g[0]], section, args.max_grad_norm,
                                  adam_kwargs(args)) for g in groups}
    return section, dist, per_agent(groups, built)


def lr_schedules(args: Any, wf: Workflow, train: Any, phases: Any, groups: Sequence[Sequence[int]],
                 agent_lrs: Sequence[float], share: Fraction = Fraction(1)) -> list[LRSchedule] | None:
    """Entry ``a``: the :class:`~.optim.LRSchedule` of agent ``a``'s optimizer (its group's), over the run's
    optimizer steps of that policy (:func:`~.optim.policy_optimizer_steps`, from the train set, the ``share`` of it an
    epoch visits, :func:`every_agent_plan`); None when the
    rate stays constant over the run (``lr_scheduler: constant`` without a warm-up), so a constant rate steps as
    before and its checkpoints keep their components."""
    if args.lr_scheduler == "constant" and not args.lr_warmup_ratio:
        return None
    try:
        rows = prompts_per_epoch(len(train), share) if not phases else train
    except TypeError as exc:
        raise ValueError(f"lr_scheduler: {args.lr_scheduler} with lr_warmup_ratio {args.lr_warmup_ratio} needs the "
                         "run's number of optimizer steps, counted from a train_dataset with a length") from exc
    totals = policy_optimizer_steps(args, wf, rows, groups)
    return per_agent(groups, {lead: LRSchedule(agent_lrs[lead], total, args.lr_scheduler, args.lr_warmup_ratio,
                                               args.lr_min_ratio) for lead, total in totals.items()})


def trainable_parameters(model: Any, agent: int, lora_adapters: bool) -> list[torch.nn.Parameter]:
    """The parameters agent ``agent``'s optimizer steps: its model's trainable ones, or under ``lora_adapters`` (one
    PeftModel, adapters ``agent0``, ``agent1``, ...) its own adapter's, switched to trainable."""
    if not lora_adapters:
        return [p for p in model.parameters() if p.requires_grad]
    tag = f".agent{agent}."
    params = [p for name, p in model.named_parameters() if tag in name]
    if not params:
        raise ValueError(f"no LoRA parameters named '{tag}' for agent {agent}")
    for p in params:
        p.requires_grad_(True)
    return params
