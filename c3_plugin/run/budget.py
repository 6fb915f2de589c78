"""What a run will spend, from its config alone: env steps, messages and optimizer updates per agent
(curriculum-aware), and which decision points get a gradient. Read by the dry-run, ``c3 compare`` and
the cluster plan before anything loads.
"""

from __future__ import annotations

import math
from typing import Any

from c3_plugin.core.config import RunConfig
from c3_plugin.core.curriculum import epoch_rows
from c3_plugin.core.errors import ConfigError
from c3_plugin.core.plan import parse_plan
from c3_plugin.core.registry import capabilities, learned_critic, section
from c3_plugin.core.rollout import unique_samples
from c3_plugin.core.workflow import Workflow
from c3_plugin.trainers.optim import policy_optimizer_steps


def credited_decisions(algorithm: str, plan: Any, workflow: Workflow) -> list[int]:
    """Decision points whose messages are trained on: C3's groups; every decision for MAGRPO/MAPPO."""
    plan = parse_plan(plan)
    if plan.kind == "independent":
        return list(range(workflow.num_decisions))
    return plan.credit_points(workflow.num_decisions)


def decision_gradients(algorithm: str, plan: Any, workflow: Workflow, acknowledged: Any = None) -> dict[str, Any]:
    """Which decision points get a gradient (``<role>_u<u>``, as in the ``credit/*`` keys), and a warning
    for each that MAGRPO (``independent B``, every decision trained) would train but this plan does not:
    C3 forms no group where a context has a single alternative (``b_u = 1``). ``acknowledged`` (the algorithm
    section's ``untrained_decisions``) names decision points the config leaves untrained on purpose: they are
    listed (``untrained_acknowledged``) without the warning; a name that is no decision point of the workflow
    raises :class:`ConfigError`."""
    names = [f"{s.name}_u{u}" for u, s in enumerate(workflow.decision_steps)]
    acknowledged = [acknowledged] if isinstance(acknowledged, str) else list(acknowledged or [])
    unknown = [n for n in acknowledged if n not in names]
    if unknown:
        raise ConfigError(f"untrained_decisions names {', '.join(map(repr, unknown))}, which is no decision point of "
                          f"the workflow '{workflow.name}' (its decision points: {', '.join(names)}); list the plan's "
                          f"untrained decisions as the dry-run names them, or remove the field "
                          f"(--override {section(algorithm)}.untrained_decisions=null)")
    trained = set(credited_decisions(algorithm, plan, workflow))
    untrained = [names[u] for u in range(len(names)) if u not in trained]
    out: dict[str, Any] = {"trained_decisions": [names[u] for u in sorted(trained)], "untrained_decisions": untrained}
    if acknowledged:
        out["untrained_acknowledged"] = [n for n in untrained if n in acknowledged]
    unexplained = [n for n in untrained if n not in acknowledged]
    if unexplained:
        out["warnings"] = [f"{algorithm} with plan '{parse_plan(plan).describe()}': no gradient for "
                           f"{', '.join(unexplained)} (one alternative per context, so no group), while MAGRPO trains "
                           "every decision; give a decision 2 or more alternatives in the plan to train it, or list it "
                           "under the algorithm section's untrained_decisions (with the reason in a comment) "
                           "if that is the intent"]
    return out


def policy_groups(cfg: RunConfig, workflow: Workflow) -> list[list[int]]:
    """The agents each trained policy plays, as the trainer forms them: every agent one model under
    ``agents.policy: shared`` (one optimizer, one update on all roles' messages), else one agent each (LoRA
    adapters over one base are separate policies)."""
    if getattr(cfg.agents, "policy", "per_agent") == "shared":
        return [list(range(workflow.num_agents))]
    return [[agent] for agent in range(workflow.num_agents)]


def roles_of(workflow: Workflow, agents: list[int]) -> list[str]:
    """The roles the agents play, in schedule order, each once."""
    names = [s.name for s in workflow.decision_steps if workflow.roles[s.name].agent in agents]
    return list(dict.fromkeys(names))


def rollout_batch_sizes(cfg: RunConfig, train: Any) -> list[int]:
    """Instances in each rollout batch of the run, in order (curriculum-aware): each epoch's rows in batches of
    ``instances_per_update``, the epoch's last batch smaller where they do not divide. ``train`` is the training
    dataset or its row count."""
    a = cfg.algo
    ipu = int(a.instances_per_update)
    _, rows_per_epoch = epoch_rows(getattr(a, "curriculum", None), int(a.num_train_epochs), train)
    return [min(ipu, rows - s) for rows in rows_per_epoch for s in range(0, rows, ipu)]


def instances_by_rank(batch_sizes: list[int], world: int) -> list[int]:
    """Instances each of ``world`` ranks runs over these batches: rank ``r`` takes positions ``r, r + world, ...``
    of every batch (:func:`c3_plugin.scale.distributed.shard`), so a batch that does not split evenly gives its
    remainder to the lowest ranks, one instance each."""
    return [sum(len(range(r, size, world)) for size in batch_sizes) for r in range(world)]


def preference_budget(cfg: RunConfig, rows: int) -> dict[str, Any]:
    """What a preference run (MADPO, MARLHF and their iterative forms) collects and trains on.

    Collection: every prompt of every refresh samples ``preference_num_candidates`` joint
    candidates (plus as many comparator candidates in the iterative forms). MADPO then trains on
    at most ``pairs_per_sample`` pairs per prompt per epoch, each pair counting
    ``environment_steps_per_pair`` env steps (replayed pairs included: an upper bound, ties give
    fewer); MARLHF runs ``num_generations`` online joint rollouts per prompt per epoch."""
    a = cfg.algo
    iterative = capabilities(a).iterative
    refreshes = int(a.num_iterations) if iterative else 1
    target = int(a.preference_num_candidates)
    comparator = int(getattr(a, "comparator_num_candidates", None) or target) if iterative else 0
    epochs = int(a.num_train_epochs)
    out: dict[str, Any] = {"refreshes": refreshes,
                           "candidates_per_prompt": {"target": target, "comparator": comparator},
                           "preference_joint_rollouts": refreshes * rows * (target + comparator),
                           "epochs_per_refresh": epochs}
    if capabilities(a).learned_reward:  # MARLHF: a learned reward, then online MAGRPO
        out["online_joint_rollouts"] = refreshes * epochs * rows * int(a.num_generations)
        out["expected_env_steps"] = out["online_joint_rollouts"]
        out["reward_model"] = {"name": a.reward_model_name or cfg.agent_model.name, "refits": refreshes,
                               "device": a.reward_model_device}
    else:
        pairs = int(a.preference_pairs_per_sample or 0)
        per_pair = int(a.environment_steps_per_pair)
        out["pair_counted_env_steps_upper_bound"] = refreshes * epochs * rows * pairs * per_pair
        out["expected_env_steps"] = out["pair_counted_env_steps_upper_bound"]
    if iterative:
        out["comparator"] = {"policy": a.comparator_policy, "generation_mode": a.comparator_generation_mode,
                             "devices": a.comparator_devices, "history_k": a.comparator_history_k,
                             "model": a.comparator_model_name}
        out["replay"] = {"mode": a.preference_replay_mode, "lambda": a.preference_replay_lambda}
    return out


def per_prompt_budget(args: Any, train: Any) -> dict[str, Any]:
    """Env steps (joint actions), optimizer updates of the one actor and the curriculum of a CoMLRL per-prompt loop
    (``Capabilities.budget == "per_prompt"``: the centralized joint actor): per epoch every row of its phase yields
    ``num_generations`` joint actions; a buffer of ``rollout_buffer_size`` prompts (and the epoch's remainder) is one
    update of ``ceil(prompts / train_batch_size)`` optimizer steps. ``train`` is the training dataset (or a row count
    without a curriculum)."""
    epochs = int(args.num_train_epochs)
    phases, rows_per_epoch = epoch_rows(getattr(args, "curriculum", None), epochs, train)
    gens, buffer = int(args.num_generations), int(args.rollout_buffer_size)
    batch = int(getattr(args, "train_batch_size", None) or buffer)
    steps = 0
    for rows in rows_per_epoch:
        chunks = [buffer] * (rows // buffer) + ([rows % buffer] if rows % buffer else [])
        steps += sum(math.ceil(c / batch) for c in chunks)
    out: dict[str, Any] = {"actors": 1, "roles": int(args.num_agents), "epochs": epochs,
                           "joint_actions_per_prompt": gens, "expected_env_steps": sum(rows_per_epoch) * gens,
                           "expected_optimizer_updates": steps}
    if phases:
        out["curriculum"] = [{"name": p.name, "epochs": p.epochs,
                              "where": {f: list(v) for f, v in (p.where or {}).items()}, "rows": len(p.rows(train)),
                              "env_steps": p.epochs * len(p.rows(train)) * gens, "eval_every_env_steps": p.eval_every}
                             for p in phases]
    return out


def expected_budget(cfg: RunConfig, workflow: Workflow, train: Any) -> dict[str, Any]:
    """Env steps, messages and optimizer updates per agent the run will spend (curriculum-aware);
    ``train`` is the training dataset or its row count."""
    a = cfg.algo
    if capabilities(a).budget == "preference":
        return preference_budget(cfg, train if isinstance(train, int) else len(train))
    # the centralized joint actor: one decision point, num_generations joint actions
    if capabilities(a).budget == "per_prompt":
        return per_prompt_budget(a, train)
    plan = parse_plan(a.plan)
    k = workflow.num_decisions
    branching = plan.branching(k)
    epochs = int(a.num_train_epochs)
    phases, rows_per_epoch = epoch_rows(getattr(a, "curriculum", None), epochs, train)
    batches = rollout_batch_sizes(cfg, train)
    shared = bool(getattr(a, "share_parallel_samples", False)) and plan.kind != "independent"
    unique = unique_samples(workflow, branching, shared)  # messages sampled (and trained) per instance per decision
    groups = policy_groups(cfg, workflow)
    per_policy = policy_optimizer_steps(a, workflow, train, groups)
    leader = {agent: g[0] for g in groups for agent in g}
    updates = [per_policy[leader[agent]] for agent in range(workflow.num_agents)]
    critic = learned_critic(a)
    if critic and critic.policy_warmup_updates:  # the steps had the critic's warm-up batches trained the policy too
        beside = policy_optimizer_steps(a, workflow, train, groups, warmup=False)
        extra = {"optimizer_updates_per_agent_beside_warmup": [beside[leader[x]] for x in range(workflow.num_agents)]}
    else:
        extra = {}
    instances = sum(rows_per_epoch)
    messages = sum(unique)  # a shared sample counts once
    out = {"plan": plan.describe(), "branching": list(branching), "epochs": epochs, "rollout_batches": len(batches),
           "expected_env_steps": instances * plan.leaves(k), "expected_messages": instances * messages,
           "leaves_per_instance": plan.leaves(k), "messages_per_instance": messages,
           "expected_optimizer_updates_per_agent": updates,
           "optimizer_updates_per_policy": [{"agents": g, "roles": roles_of(workflow, g), "updates": per_policy[g[0]]}
                                            for g in groups], **extra}
    if phases:
        out["curriculum"] = [{"name": p.name, "epochs": p.epochs,
                              "where": {f: list(v) for f, v in (p.where or {}).items()}, "rows": len(p.rows(train)),
                              "env_steps": p.epochs * len(p.rows(train)) * plan.leaves(k),
                              "eval_every_env_steps": p.eval_every} for p in phases]
    return out
