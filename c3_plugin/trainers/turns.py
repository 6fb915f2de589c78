"""CoMLRL's multi-turn team (``num_turns > 1`` with an ``external_transition``) as a workflow whose trace is the state.

CoMLRL's contract (``MAGRPOTrainer._train_step_returns``): at turn t every agent answers its prompt; the
turn's joint action is rewarded (``reward_func``, as at one turn); for t < T the ``external_transition`` is
called with ``prompt`` (the item's), ``agent_completions`` (the turn's joint action), ``num_agents``,
``prompt_history_per_agent`` and ``response_history_per_agent`` (every turn so far, this one included) and
returns each agent's next prompt, which reaches the model as it is (``external_prompt_passthrough``) or
through the agent's formatter, called with the item's ``prompt`` replaced by it and ``external_prompts=``.

Here each of these is a step of the schedule, so the trace holds the whole state: turn t's decision points
(roles ``Agent<a>`` at turn 1, ``Agent<a>_turn<t>`` later), then two environment steps, ``reward<t>``
(the turn's reward, as text) and ``transition<t>`` (the next prompts, a JSON list). A counterfactual
alternative at turn t is continued by re-running the later turns, rewards and transitions from the recorded
outputs, exactly as CoMLRL would have called them. The leaf's return is ``sum_t discount^(t-1) r_t`` (the last
turn's reward is the leaf's call). The transition and the formatters are user code and are re-run on the
recorded texts: they must be functions of their arguments (no hidden state that changes between calls, no
unseeded randomness), or two continuations of one state see different environments; a transition that
needs the task reads it from the item (``prompt``) or the histories.

Early termination (``early_termination_threshold``, training only, as CoMLRL's): a path whose turn reward
exceeds the threshold ends there; its later decisions are recorded as ended (nothing sampled, nothing
trained, no reward called). CoMLRL decides per node on the mean reward of the node's K siblings; a trace's
continuation may depend on its own state only, so here each path decides on its own reward.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Sequence

import numpy as np

from c3_plugin.core.rewards import leaf_rewards
from c3_plugin.core.workflow import EPISODE_END, Workflow, join_messages, workflow_from_dict


def turn_role(agent: int, turn: int) -> str:
    """The role agent ``agent`` plays at turn ``turn`` (1-based)."""
    return f"Agent{agent}" if turn == 1 else f"Agent{agent}_turn{turn}"


class Turns:
    """CoMLRL's multi-turn team for ``trainer``: :attr:`workflow`, the returns and the per-turn metrics."""

    def __init__(self, trainer: Any, num_agents: int, num_turns: int, formatters: Any, transition: Callable[..., Any]):
        from comlrl.utils.formatters import build_formatters

        self.trainer = trainer
        self.n, self.T = int(num_agents), int(num_turns)
        self.formatters = build_formatters(formatters, self.n)
        self.transition = transition
        # early termination applies to training rollouts only (CoMLRL's evaluation runs every turn)
        self.training = False
        self.workflow = self._build()

    @property
    def turns(self) -> list[int]:
        """Decision points per turn (the default plan splits each turn's budget over them)."""
        return [self.n] * self.T

    def _build(self) -> Workflow:
        roles: dict[str, dict[str, Any]] = {}
        schedule: list[Any] = []
        feedback: dict[str, Callable[..., str]] = {}
        contexts: dict[str, Callable[..., str]] = {}
        for t in range(1, self.T + 1):
            for a in range(self.n):
                name = turn_role(a, t)
                roles[name] = {"agent": a, "template": "{prompt}" if t == 1 else f"{{transition{t - 1}}}"}
                schedule.append({"role": name})
                if t > 1:
                    contexts[name] = self._context_fn(a, t)
            if t < self.T:
                feedback[f"reward{t}"] = self._reward_fn(t)
                schedule.append({"feedback": f"reward{t}", "reads": [turn_role(a, t) for a in range(self.n)]
                                 + ([f"transition{t - 1}"] if t > 1 else [])})
                feedback[f"transition{t}"] = self._transition_fn(t)
                reads = [turn_role(a, s) for s in range(1, t + 1) for a in range(self.n)]
                reads += [f"transition{s}" for s in range(1, t)] + [f"reward{t}"]
                schedule.append({"feedback": f"transition{t}", "reads": reads})
        spec = {"name": f"comlrl_{self.T}_turns", "agents": self.n, "roles": roles, "schedule": schedule,
                "inputs": ["prompt"]}
        first = {turn_role(a, 1): (lambda item, f=self.formatters[a]: f(item)) for a in range(self.n)}
        return workflow_from_dict(spec, feedback=feedback, merger=join_messages, formatters=first, contexts=contexts)

    # ----- prompts, as CoMLRL forms them --------------------------------------------------------------
    def _external(self, latest: dict[str, str], agent: int, turn: int) -> str:
        """The transition's prompt for ``agent`` at ``turn`` >= 2 (what CoMLRL records as that turn's prompt)."""
        return json.loads(latest[f"transition{turn - 1}"])[agent]

    def _context_fn(self, agent: int, turn: int) -> Callable[..., str]:
        def context(item: dict, latest: dict[str, str]) -> str:
            ext = self._external(latest, agent, turn)
            if self.trainer.args.external_prompt_passthrough:
                return str(ext)
            modified = {**dict(item), "_original_prompt": item.get("prompt", ""), "prompt": ext}
            return str(self.formatters[agent](modified, external_prompts=ext))
        return context

    def _recorded_prompt(self, item: dict, latest: dict[str, str], agent: int, turn: int) -> str:
        """The prompt CoMLRL records for ``agent`` at ``turn`` (its history entry and the reward's ``prompts``):
        the formatted item at turn 1, the transition's text afterwards."""
        return str(self.formatters[agent](item)) if turn == 1 else str(self._external(latest, agent, turn))

    # ----- environment steps -------------------------------------------------------------------------
    def _reward_fn(self, turn: int) -> Callable[..., str]:
        def reward(item: dict, latest: dict[str, str]) -> str:
            if turn > 1 and latest.get(f"transition{turn - 1}") == EPISODE_END:
                return EPISODE_END
            return repr(self.turn_rewards([dict(item)], [latest], turn)[0])
        return reward

    def _transition_fn(self, turn: int) -> Callable[..., str]:
        def transition(item: dict, latest: dict[str, str]) -> str:
            r = latest.get(f"reward{turn}")
            if r == EPISODE_END:
                return EPISODE_END
            threshold = self.trainer.args.early_termination_threshold
            if self.training and threshold is not None and float(r) > float(threshold):
                return EPISODE_END
            out = self.transition(
                prompt=item.get("prompt", ""), agent_completions=[latest[turn_role(a, turn)] for a in range(self.n)],
                num_agents=self.n,
                prompt_history_per_agent=[[self._recorded_prompt(item, latest, a, s) for s in range(1, turn + 1)]
                                          for a in range(self.n)],
                response_history_per_agent=[[latest[turn_role(a, s)] for s in range(1, turn + 1)]
                                            for a in range(self.n)])
            if not isinstance(out, (list, tuple)) or len(out) != self.n:
                count = "" if not isinstance(out, (list, tuple)) else f" of {len(out)}"
                raise ValueError(f"external_transition must return a list or tuple of {self.n} per-agent prompts "
                                 f"(CoMLRL's contract), got {type(out).__name__}{count}")
            return json.dumps([str(p) for p in out], ensure_ascii=False)
        return transition

    def turn_rewards(self, items: Sequence[dict], latest: Sequence[dict[str, str]], turn: int) -> list[float]:
        """The team reward of each joint action of ``turn``, called as CoMLRL calls it (``prompts``: agent 0's
        recorded prompt of the turn) and passed through the reward processor."""
        tr = self.trainer
        per_agent = [[lt[turn_role(a, turn)] for lt in latest] for a in range(self.n)]
        prompts = [self._recorded_prompt(it, lt, 0, turn) for it, lt in zip(items, latest)]
        raw = leaf_rewards(tr.reward_func, per_agent, list(items), prompts)
        return [float(tr.reward_processor(x)) for x in raw]

    # ----- returns, budget and metrics ---------------------------------------------------------------
    def path_rewards(self, outputs_per_leaf: Sequence[Sequence[str]], items: Sequence[dict]) -> np.ndarray:
        """``[leaves, T]`` per-turn rewards of each path (NaN after it ended); the last turn's reward is called
        here, once per batch for a ``@batched`` reward, for the paths still running."""
        wf = self.workflow
        latest = [wf.latest_outputs(o) for o in outputs_per_leaf]
        out = np.full((len(latest), self.T), np.nan)
        for t in range(1, self.T):
            for j, lt in enumerate(latest):
                if lt.get(f"reward{t}", EPISODE_END) != EPISODE_END:
                    out[j, t - 1] = float(lt[f"reward{t}"])
        running = [j for j, lt in enumerate(latest) if self.T == 1 or lt.get(f"transition{self.T - 1}") != EPISODE_END]
        if running:
            out[running, self.T - 1] = self.turn_rewards([items[j] for j in running], [latest[j] for j in running],
                                                         self.T)
        return out

    def returns(self, per_turn: np.ndarray) -> np.ndarray:
        """``sum_t discount^(t-1) r_t`` over the turns each path played."""
        weights = float(self.trainer.args.discount) ** np.arange(self.T)
        return np.nansum(per_turn * weights, axis=1)

    def env_steps(self, per_turn: np.ndarray, leaf_instance: np.ndarray, num_instances: int,
                  branching: Sequence[int]) -> np.ndarray:
        """Reward calls per instance: every turn's scored joint actions. A joint action of turn t is on
        ``prod(branching of the later turns' decisions)`` leaves, so each scored (leaf, turn) counts that fraction."""
        tail = np.array([float(np.prod(branching[self.n * (t + 1):])) for t in range(self.T)])
        scored = (~np.isnan(per_turn)) / tail  # [leaves, T]
        return np.rint(np.bincount(leaf_instance, weights=scored.sum(1), minlength=num_instances)).astype(np.int64)


def turn_metrics(per_turn: np.ndarray, prefix: str = "") -> dict[str, float]:
    """CoMLRL's per-turn keys from ``[paths, turns]`` rewards (NaN after a path ended): ``turn_<t>/reward_mean``
    (the turn's reward over the paths that played it) and ``turn_<t>/expected_return`` (the undiscounted reward
    from turn t on, CoMLRL's return); training logs them bare, evaluation under ``eval/``."""
    out: dict[str, float] = {}
    for t in range(per_turn.shape[1] if per_turn.ndim == 2 else 0):
        played = ~np.isnan(per_turn[:, t])
        if played.any():
            out[f"{prefix}turn_{t + 1}/reward_mean"] = float(per_turn[played, t].mean())
            out[f"{prefix}turn_{t + 1}/expected_return"] = float(np.nansum(per_turn[played, t:], axis=1).mean())
    return out
