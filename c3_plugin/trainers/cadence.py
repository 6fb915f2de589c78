"""CoMLRL's W&B cadence: the steps at which CoMLRL 1.4.3's ``MAGRPOTrainer`` logs its training metrics, replayed
for a workflow trainer's rollout batches (``wandb_cadence: comlrl``), so two arms of a head-to-head put their points
at the same W&B steps.

CoMLRL's rule (``MAGRPOTrainer._train_step_returns``, ``_drain_ready_buffers``, ``_should_log_train``): a prompt is a
tree of turn nodes, built depth first; a node of turn t scores J_t joint actions and the env-step counter moves on
by J_t as it does (the node's step is the counter then); every node gives each agent one sample, appended to the
agent's buffer in node-step order; when a buffer holds ``rollout_buffer_size`` samples it is drained: one log entry
per turn in it, at the largest node step of that turn; the entries go to W&B in (step, agent) order, each only if
it is ``logging_steps`` env steps or more after the last one logged (always the first; every one when
``logging_steps <= 1``). At each epoch's end every non-empty buffer is drained. A workflow trainer's batch of P
instances is P such prompts, J_t the product of turn t's branching factors (CoMLRL's J for the default plan).

The nodes replayed are the batch's own (:func:`realized_nodes`): a turn node for every context of a turn whose
joint actions were scored, with as many reward calls as were scored, so the replay counts the env steps the batch
really spent. Under ``early_termination_threshold`` a workflow path ends on its own reward where CoMLRL ends a node
on its joint actions' mean (a warning says so), so there the two runs' trees, and steps, can differ.

A config standing in for IAC or MAAC (``comlrl_reference``) replays their rule instead (:class:`ActorCriticCadence`:
one entry per turn each time an agent's buffer of samples fills, and at the epoch's end). Where the plan is not the
reference's budget (``prompt_share`` < 1: the cheapest plan that branches every agent, on fewer prompts), the replay
runs over the reference's prompts, full trees of its J per turn, that the env steps so far stand for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from c3_plugin.core.plan import joint_actions_per_node
from c3_plugin.scale.distributed import gather

Entry = tuple[int, int]  # (W&B step, turn index from 0) of one training log entry


def turn_joint_actions(branching: Sequence[int], turns: Sequence[int]) -> list[int]:
    """J_t per turn: the product of the branching factors of turn t's decision points (``turns``: decision points
    per turn)."""
    out, start = [], 0
    for d in turns:
        out.append(math.prod(branching[start:start + d]))
        start += d
    return out


def prompt_nodes(joint: Sequence[int], start: int, steps: bool = True) -> list[Entry]:
    """A prompt's full tree of turn nodes in CoMLRL's depth-first build order, as (node step, turn): the counter
    from ``start`` moves on by J_t at each node of turn t, and each of its J_t joint actions opens a node of turn
    t + 1 (``steps`` False: (J_t, turn) instead of the step)."""
    out: list[Entry] = []
    counter = start

    def build(turn: int) -> None:
        nonlocal counter
        counter += int(joint[turn])
        out.append((counter if steps else int(joint[turn]), turn))
        if turn + 1 < len(joint):
            for _ in range(int(joint[turn])):
                build(turn + 1)

    build(0)
    return out


def realized_nodes(per_turn: np.ndarray, joint: Sequence[int]) -> list[Entry]:
    """One instance's turn nodes in CoMLRL's depth-first order, as (joint actions scored, turn), from its leaves'
    per-turn rewards (``[leaves, T]`` in tree order, NaN after a path ended; one turn: ``[leaves, 1]``). A joint
    action of turn t lies on ``prod(J_t+1 ...)`` leaves; a node none of whose joint actions was scored is absent."""
    per_turn = np.asarray(per_turn, dtype=float).reshape(-1, len(joint))
    tails = [math.prod(joint[t + 1:]) for t in range(len(joint))]
    out: list[Entry] = []

    def visit(turn: int, lo: int) -> None:
        block = per_turn[lo:lo + int(joint[turn]) * tails[turn], turn]
        scored = int(round(np.sum(~np.isnan(block)) / tails[turn]))
        if scored == 0:
            return
        out.append((scored, turn))
        if turn + 1 < len(joint):
            for j in range(int(joint[turn])):
                visit(turn + 1, lo + j * tails[turn])

    visit(0, 0)
    return out


@dataclass
class ComlrlCadence:
    """The replay's state over a run: each agent's buffer of (turn, node step) and the last logged step."""

    num_agents: int
    joint: list[int]  # J_t per turn
    buffer_size: int  # CoMLRL's rollout_buffer_size
    logging_steps: int
    buffers: list[list[Entry]] = field(default_factory=list)
    last: int = -1

    def __post_init__(self) -> None:
        self.buffers = self.buffers or [[] for _ in range(self.num_agents)]

    @property
    def per_prompt(self) -> int:
        """Env steps of one prompt: J_1 + J_1 J_2 + ..."""
        return sum(math.prod(self.joint[:t + 1]) for t in range(len(self.joint)))

    def batch(self, start: int, prompts: int, end: int | None = None, final: bool = False,
              nodes: Sequence[Sequence[Entry]] | None = None) -> list[Entry]:
        """The entries CoMLRL logs over ``prompts`` prompts from env step ``start`` (and at the epoch's end when
        ``final``): each prompt's ``nodes`` ((reward calls, turn) in build order, :func:`realized_nodes`; None: the
        full tree), steps capped at ``end`` (the env steps the batch reached)."""
        logged: list[Entry] = []
        counter = start
        for p in range(int(prompts)):
            built = []
            for calls, turn in (nodes[p] if nodes is not None else prompt_nodes(self.joint, 0, steps=False)):
                counter += int(calls)
                built.append((counter, turn))
            for step, turn in built:
                ready = []
                for agent, buffer in enumerate(self.buffers):
                    buffer.append((step, turn))
                    if len(buffer) >= max(1, int(self.buffer_size)):
                        ready.append(agent)
                logged += self._drain(ready)
        if final:
            logged += self._drain([a for a, buffer in enumerate(self.buffers) if buffer])
        return [(min(step, end), turn) for step, turn in logged] if end is not None else logged

    def _drain(self, agents: Sequence[int]) -> list[Entry]:
        entries = []
        for agent in sorted(set(agents)):
            last_of_turn: dict[int, int] = {}
            for step, turn in self.buffers[agent]:
                last_of_turn[turn] = max(last_of_turn.get(turn, step), step)
            self.buffers[agent].clear()
            entries += [(step, agent, turn) for turn, step in sorted(last_of_turn.items())]
        entries.sort(key=lambda e: (e[0], e[1]))
        return [(step, turn) for step, _, turn in entries if self._should_log(step)]

    def _should_log(self, step: int) -> bool:
        interval = int(self.logging_steps)
        if interval <= 1 or self.last < 0 or step - self.last >= interval:
            self.last = step
            return True
        return False


@dataclass
class ActorCriticCadence(ComlrlCadence):
    """IAC's and MAAC's rule (CoMLRL 1.4.3 ``ActorCriticTrainerBase._run_batch``, ``_drain_ready_agent_buffers``,
    ``_should_log_train``), for a config standing in for them (``comlrl_reference``): each prompt gives every agent
    one sample per joint action of each turn (:attr:`per_prompt`, as its env steps: IAC's multi-turn runs one joint
    action per turn); an agent's buffer of ``rollout_buffer_size`` samples is drained (one update) after the prompt
    that fills it, and at the epoch's end, logged as one entry per turn at the env step then, gated by
    ``logging_steps`` as MAGRPO's; each prompt's step also gets an entry of turn -1, where its ``metrics_callback``
    keys go (:func:`.bridge.wandb_row_split`)."""

    pending: int = 0  # samples in each agent's buffer
    prompt_rows: bool = False  # a metrics_callback's keys logged after every prompt (IAC's _log_domain_metrics)

    def batch(self, start: int, prompts: int, end: int | None = None, final: bool = False,
              nodes: Sequence[Sequence[Entry]] | None = None) -> list[Entry]:
        logged: list[Entry] = []
        counter = start
        for _ in range(int(prompts)):
            counter += self.per_prompt
            if self.prompt_rows:  # the prompt's metrics_callback keys, ungated
                logged.append((counter, -1))
            self.pending += self.per_prompt
            if self.pending >= max(1, int(self.buffer_size)):
                logged += self._entries(counter)
        if final and self.pending:
            logged += self._entries(counter if end is None else int(end))
        return logged

    def _entries(self, step: int) -> list[Entry]:
        self.pending = 0
        return [(step, turn) for turn in range(len(self.joint))] if self._should_log(step) else []


def replay(trainer: Any) -> ComlrlCadence:
    """The replay of the reference's W&B steps: IAC's/MAAC's (:class:`ActorCriticCadence`) for a config standing in
    for them, else MAGRPO's (:class:`ComlrlCadence`), over the plan's J_t per turn, or over the reference's J per turn
    where the plan is not the reference's budget (``prompt_share`` < 1, :func:`.setup.every_agent_plan`)."""
    turns = trainer.turns.turns if trainer.turns else [trainer.workflow.num_decisions]
    reference = getattr(trainer.args, "comlrl_reference", "magrpo") in ("iac", "maac")
    joint = turn_joint_actions(trainer.branching, turns)
    if reference or trainer.prompt_share < 1:
        joint = [joint_actions_per_node(trainer.args, trainer.num_agents)] * len(turns)
    args = (trainer.num_agents, joint, int(trainer.args.rollout_buffer_size), int(trainer.args.logging_steps))
    if reference:
        return ActorCriticCadence(*args, prompt_rows=getattr(trainer, "metrics_callback", None) is not None)
    return ComlrlCadence(*args)


def wandb_rows(trainer: Any, start: int, items: int, final: bool = False, rollout: Any = None) -> bool:
    """The W&B rows of a batch of ``items`` instances from env step ``start`` under ``wandb_cadence``, kept in
    ``trainer._rows`` (the :func:`replay`'s entries over the ``rollout``'s nodes, every rank's; where the replay is the
    reference's, over the reference's prompts the env steps so far stand for, each a full tree; None: one row at the
    batch's env step); whether there is any."""
    if trainer.args.wandb_cadence != "comlrl":
        trainer._rows = None
        return True
    if getattr(trainer, "_cadence", None) is None:
        trainer._cadence = replay(trainer)
    if isinstance(trainer._cadence, ActorCriticCadence) or trainer.prompt_share < 1:
        # the reference's prompts replayed so far (a resumed run: those its env steps stand for)
        done = getattr(trainer, "_reference_prompts", start // trainer._cadence.per_prompt)
        trainer._reference_prompts = int(trainer.env_step) // trainer._cadence.per_prompt
        trainer._rows = trainer._cadence.batch(done * trainer._cadence.per_prompt, trainer._reference_prompts - done,
                                               end=int(trainer.env_step), final=final)
        return bool(trainer._rows)
    mine = []
    if rollout is not None:  # each instance's turn nodes (its leaves' per-turn rewards, in tree order)
        per_turn = rollout.turn_rewards if trainer.turns is not None else rollout.rewards.reshape(-1, 1)
        rows = np.asarray(per_turn, dtype=float).reshape(len(rollout.items), -1, len(trainer._cadence.joint))
        mine = [realized_nodes(r, trainer._cadence.joint) for r in rows]
    nodes = [n for part in gather(mine) for n in part] if items else []
    trainer._rows = trainer._cadence.batch(start, items, end=int(trainer.env_step), final=final,
                                           nodes=nodes if len(nodes) == items else None)
    return bool(trainer._rows)
