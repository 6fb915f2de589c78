"""Estimator to learning: what better credit buys when small policies train on it, exactly.

The fidelity studies (:mod:`bench.studies.fidelity`) score advantage estimators against the exact
``Q - V`` of a synthetic environment. This module closes the loop: a team of tabular softmax
policies (one logit vector per (role, exact context text)) trains on C3, MAGRPO-style and
critic-based advantages at equal env steps, and after every few updates the *exact* expected
success of the current policies is enumerated, so the learning curves carry no evaluation noise.

The environment (:class:`DecisiveFirstEnv`) is a :class:`~c3_plugin.core.synthetic.SyntheticEnv`
whose policies are the trainable ones and whose reward law makes the first decision point
decisive: one of its messages gives success probability ``high``, the others ``low``; every
later message shifts that probability by a small seeded amount that never changes which first
message is best. Two variants share it (:data:`ENV_VARIANTS`):

* ``decisive first`` (``actor_penalty = 0``): the later agents have nothing to learn beyond that noise;
* ``masked later mistake`` (``actor_penalty > 0``): the second decision point (the Actor) instead has
  one harmful message (a seeded index per task, the same in every context) that lowers the success
  probability by exactly ``actor_penalty`` whatever came before, and no other effect; the agents after
  it add noise as before. The near-uniform initial Actor writes it about once in ``vocab`` runs; in a
  run's reward its effect is masked by the first agent's larger one (and by the Bernoulli outcome).

A second environment (:class:`MatchChainEnv`) is a chain whose later agents must answer the message they
read (a seeded good reply per message read, worth ``gains[u - 1]``), after a first agent whose messages are
worth ``first_values``. Two regimes of the C3-vs-MAGRPO study use it (:data:`REGIMES`): a learner downstream of
a teammate whose variance persists (frozen, or learning at 0.1x the step size: ``LearningSetup.lr_scale``,
per agent, 0 = never updated), and an all-trained 4-agent chain whose first agent decides.
:func:`exact_diagnosis` gives what ``c3 diagnose`` would estimate there, exactly, for ``c3 advise``.

Rollouts go through the real machinery: :func:`~c3_plugin.core.rollout.materialize`
with :class:`~c3_plugin.core.synthetic.SyntheticBackend`, whose behaviour log-probs are the log
softmax of the current logits because the environment's ``policy`` is the trainable one.

The estimators see the same number of terminal reward calls per update:

* ``c3``: :func:`~c3_plugin.core.credit.tree_advantages` on the plan ``tree setup.tree``;
* ``magrpo``: ``independent B`` with ``B`` = the tree's leaves, each run's reward minus its
  group mean (:func:`~c3_plugin.core.credit.group_advantages`, mode ``mean``), the same advantage for
  every message of the run;
* ``critic``: the same independent runs, advantage = run return - ``V_hat(role, context)`` of a
  tabular critic that regresses logged returns (MAPPO's state-value critic without bootstrapping:
  one reward at the end, so the Monte Carlo return is the regression target);
* ``oracle`` (a reference, not a method one can run): the same independent runs, advantage = the
  exact ``Q(h, a) - V(h)`` of each message, enumerated. It is the ceiling of what credit can buy on
  these samples: the learning curve of noise-free per-agent credit.

The update is the exact softmax policy gradient (times the agent's ``lr_scale``) of ``sum_u mean_{messages at u} A * log
pi``: per decision point a mean over its messages, so every unbiased estimator's expected step is the same
``lr * sum_u E[(Q - V) grad log pi]`` (the group-mean baseline's is ``(B - 1) / B`` of it, because a run
is part of its own baseline) and the methods differ in the noise of their advantages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from c3_plugin.core.credit import group_advantages, tree_advantages
from c3_plugin.core.plan import parse_plan
from c3_plugin.core.rollout import Rollout, materialize
from c3_plugin.core.synthetic import SyntheticBackend, SyntheticEnv, _seeded
from c3_plugin.core.trace import path_to
from c3_plugin.core.workflow import Workflow, load_workflow

METHODS = ("c3", "magrpo", "critic", "oracle")


@dataclass(frozen=True)
class LearningSetup:
    """One study's environment, plans and step sizes (shared by every method)."""

    workflow: str = "reasoner_actor_verifier"  # builtin workflow; its first decision point decides the outcome
    vocab: int = 4  # messages per role (m0..m{vocab-1}); exactly one first message is the good one
    high: float = 0.7  # success probability after the good first message (before the later agents' noise)
    low: float = 0.3  # success probability after any other first message
    noise: float = 0.08  # each later message shifts the success probability by a seeded amount in [-noise, noise]
    # success lost when the second decision point (the Actor) writes its harmful message; 0: none
    actor_penalty: float = 0.0
    init_scale: float = 0.1  # std of the seeded initial logits: near-uniform policies
    lr: float = 2.0  # policy-gradient step size on the logits, the same for every method
    tree: tuple[int, ...] = (2, 2, 2)  # C3's plan: alternatives per decision point
    # MAGRPO's group baseline (credit.GROUP_MODES); no std scaling, which would change the step size
    group_mode: str = "mean"
    # critic step: V_hat += critic_lr * (mean logged return at the context - V_hat), once per update
    critic_lr: float = 0.3
    critic_init: float = 0.5  # V_hat of a context never seen (the middle of the reward range)
    copies: int = 1  # instances of the task per update (each runs the whole plan)
    eval_every: int = 4  # updates between exact evaluations of the success probability
    # per agent (workflow agent index) multiplier of lr; 0 = frozen (never updated); () = 1 for all
    lr_scale: tuple[float, ...] = ()
    # environment class (ENVIRONMENTS): decisive_first, or match_chain (first_values, gains)
    env: str = "decisive_first"
    # match_chain: success probability of each first message (a seeded permutation per task)
    first_values: tuple[float, ...] = ()
    # match_chain: what decision point u >= 1 adds by writing the good reply to the message it reads
    gains: tuple[float, ...] = ()

    @property
    def leaves(self) -> int:
        """Terminal reward calls per instance and update, for every method (equal env steps)."""
        return math.prod(self.tree)

    def agent_scales(self, workflow: Workflow) -> dict[str, float]:
        """Each role's multiplier of ``lr``: ``lr_scale[agent]`` of the agent that plays it (1 without ``lr_scale``)."""
        if self.lr_scale and len(self.lr_scale) != workflow.num_agents:
            raise ValueError(f"lr_scale has {len(self.lr_scale)} entries but the workflow has "
                             f"{workflow.num_agents} agents")
        if any(x < 0 for x in self.lr_scale):
            raise ValueError(f"lr_scale {self.lr_scale}: multipliers must be >= 0 (0 freezes an agent)")
        return {name: float(self.lr_scale[role.agent]) if self.lr_scale
                else 1.0 for name, role in workflow.roles.items()}

    def plan(self, method: str) -> str:
        """The rollout plan a method samples: C3's tree, or as many independent runs as it has leaves."""
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}; use one of {METHODS}")
        return f"tree {list(self.tree)}" if method == "c3" else f"independent {self.leaves}"


class TabularSoftmaxPolicy:
    """One logit vector per (role, exact context text), created on first use from a seeded near-uniform law.

    ``version`` counts updates so that cached exact values can tell they are stale.
    """

    def __init__(self, vocab: int, seed: int = 0, init_scale: float = 0.1):
        self.vocab, self.seed, self.init_scale = vocab, seed, init_scale
        self.logits: dict[tuple[str, str], np.ndarray] = {}
        self.version = 0

    def logit(self, role: str, context: str) -> np.ndarray:
        key = (role, context)
        if key not in self.logits:
            self.logits[key] = self.init_scale * _seeded(self.seed, "logits", role, context).standard_normal(self.vocab)
        return self.logits[key]

    def log_probs(self, role: str, context: str) -> np.ndarray:
        z = self.logit(role, context)
        return z - (z.max() + np.log(np.exp(z - z.max()).sum()))

    def probs(self, role: str, context: str) -> np.ndarray:
        return np.exp(self.log_probs(role, context))

    def step(self, steps: Mapping[tuple[str, str], np.ndarray]) -> None:
        """Add ``steps[(role, context)]`` to those logits."""
        for key, delta in steps.items():
            self.logits[key] = self.logit(*key) + delta
        self.version += 1


class TrainableEnv(SyntheticEnv):
    """A :class:`SyntheticEnv` whose policies are a trainable :class:`TabularSoftmaxPolicy` (``self.learner``):
    cached exact values are dropped whenever the policies move. Subclasses set ``learner`` and ``_cached_version``
    and define ``good_index`` (the first agent's best message)."""

    learner: TabularSoftmaxPolicy

    def policy(self, role: str, context: str) -> np.ndarray:
        return self.learner.probs(role, context)

    def value(self, item: Mapping[str, Any], outputs: Sequence[str] = ()) -> float:
        if self._cached_version != self.learner.version:  # the policies moved: every cached V is stale
            self._value.clear()
            self._cached_version = self.learner.version
        return super().value(item, outputs)

    def good_index(self, item: Mapping[str, Any]) -> int:
        raise NotImplementedError

    def first_good(self, item: Mapping[str, Any]) -> float:
        """The first agent's probability of writing its best message (the part of success it controls)."""
        return float(self.policy(*self.context(item, ()))[self.good_index(item)])


class DecisiveFirstEnv(TrainableEnv):
    """A :class:`SyntheticEnv` whose first decision point decides the outcome and whose policies train.

    Success probability of a path: ``high`` if the first message is the task's good one (a seeded
    index per question), else ``low``, plus one seeded shift in ``[-noise, noise]`` per later
    message (seeded by the path up to it). With ``actor_penalty > 0`` the second decision point (the
    Actor) adds no shift; its harmful message (a seeded index per question) subtracts ``actor_penalty``.
    With ``J`` noisy agents, ``high - low > actor_penalty + 2 J noise`` keeps the good first message
    best whatever the later policies do, and ``actor_penalty > 2 (J - J_before_actor) noise`` keeps the
    harmful message the Actor's worst after every first message whatever the agents after it do.
    ``policy`` is the trainable :class:`TabularSoftmaxPolicy`, so :meth:`value` enumerates the exact
    success of the current team.
    """

    def __init__(self, workflow: Workflow, learner: TabularSoftmaxPolicy, seed: int = 0, high: float = 0.7,
                 low: float = 0.3, noise: float = 0.08, actor_penalty: float = 0.0):
        decisions = workflow.decision_steps
        if workflow.steps[0].kind != "decision":
            raise ValueError("DecisiveFirstEnv: the workflow must open with a decision point (the decisive agent)")
        if actor_penalty < 0 or (actor_penalty > 0 and len(decisions) < 2):
            raise ValueError("DecisiveFirstEnv: actor_penalty must be >= 0, and > 0 needs a second decision point")
        self.actor_step = decisions[1] if actor_penalty > 0 else None  # the decision point that can make the mistake
        later = [s for s in decisions[1:] if s is not self.actor_step]  # the noisy agents
        spread = actor_penalty + 2 * len(later) * noise  # the most the later agents can move a first message's value
        if not high - low > spread:
            raise ValueError(f"DecisiveFirstEnv: high - low = {high - low:g} must exceed actor_penalty + 2 (noisy "
                             f"agents) noise = {spread:g}, or a later agent could change which first message is best")
        after = sum(s.index > self.actor_step.index for s in later) if self.actor_step else 0
        if actor_penalty > 0 and not actor_penalty > 2 * after * noise:
            raise ValueError(f"DecisiveFirstEnv: actor_penalty = {actor_penalty:g} must exceed 2 (noisy agents after "
                             f"the Actor) noise = {2 * after * noise:g}, or the harmful message might not "
                             "be the Actor's worst")
        if low - len(later) * noise - actor_penalty < 0 or high + len(later) * noise > 1:
            raise ValueError("DecisiveFirstEnv: low - (noisy agents) noise - actor_penalty and high + (noisy agents) "
                             "noise must stay within [0, 1]")
        super().__init__(workflow, vocab=learner.vocab, seed=seed, reward_low=low, reward_high=high)
        self.learner, self.noise, self.actor_penalty = learner, noise, actor_penalty
        self._first_prefix = workflow.roles[workflow.steps[0].name].prefix
        self._later = [s.index for s in later]  # schedule positions of the noisy agents
        self._reward_prob: dict[tuple[str, tuple[str, ...]], float] = {}
        self._cached_version = learner.version

    def good_index(self, item: Mapping[str, Any]) -> int:
        """Index in ``self.messages`` of the first agent's good message for this task (seeded by the question)."""
        return int(_seeded(self.seed, "good", item["question"]).integers(len(self.messages)))

    def harmful_index(self, item: Mapping[str, Any]) -> int:
        """Index in ``self.messages`` of the Actor's harmful message for this task (seeded by the question;
        it costs ``actor_penalty``, so nothing when that is 0)."""
        return int(_seeded(self.seed, "harmful", item["question"]).integers(len(self.messages)))

    def harmful(self, item: Mapping[str, Any]) -> float | None:
        """The team's probability of writing the Actor's harmful message in a run (exact, over the first
        agent's messages); ``None`` when there is no penalty."""
        if not self.actor_penalty:
            return None
        return self._message_prob(item, (), self.actor_step.index, self.harmful_index(item))

    def _message_prob(self, item: Mapping[str, Any], outputs: tuple[str, ...], position: int, k: int) -> float:
        """Probability that the decision point at schedule ``position`` writes message ``k``, given ``outputs``."""
        step = self.workflow.steps[len(outputs)]
        if step.kind == "feedback":
            text = self.workflow.feedback[step.name](item,
                                                     {r: self.workflow.latest_outputs(outputs).get(r, "")
                                                      for r in step.reads})
            return self._message_prob(item, outputs + (text,), position, k)
        p = self.policy(step.name, self.workflow.assemble(step, item, outputs))
        if step.index == position:
            return float(p[k])
        prefix = self.workflow.roles[step.name].prefix
        return float(sum(p[j] * self._message_prob(item, outputs + (prefix + m,), position, k)
                         for j, m in enumerate(self.messages)))

    def reward_prob(self, item: Mapping[str, Any], outputs: Sequence[str]) -> float:
        key = (str(item["question"]), tuple(outputs))
        if key not in self._reward_prob:  # a fixed law: seeding it once per path keeps training cheap
            good = self._first_prefix + self.messages[self.good_index(item)]
            p = self.reward_high if outputs[0] == good else self.reward_low
            shifts = (_seeded(self.seed, "noise", item["question"], *outputs[: s + 1]).uniform(-1.0, 1.0)
                      for s in self._later)
            p = p + self.noise * sum(shifts)
            if self.actor_penalty:
                harmful = self.workflow.roles[self.actor_step.name].prefix + self.messages[self.harmful_index(item)]
                p -= self.actor_penalty * (outputs[self.actor_step.index] == harmful)
            self._reward_prob[key] = float(p)
        return self._reward_prob[key]


class MatchChainEnv(TrainableEnv):
    """A chain whose later agents must answer the message they read, with trainable policies.

    Every decision point after the first reads decision points before it (in a chain, only the one before it; a
    point that reads several answers them together; one that reads none has one good message per task). Success
    probability of a path: ``first_values[perm(k)]`` for the first message ``m_k`` (``perm`` a seeded permutation
    per question), plus ``gains[u - 1]`` for every later decision point ``u`` whose message is the good reply to the
    message it reads (a seeded index per (question, u, message read)), nothing otherwise. So a later
    agent's best message depends on its teammate's, and the first agent's choice moves success by the
    spread of ``first_values`` whatever the others do. Two regimes of the bench use it
    (:data:`REGIMES`): a wide spread upstream with a frozen or slow first agent (its variance persists)
    in front of a learning second agent; and a decisive first agent in an all-trained 4-agent chain.
    ``policy`` is the trainable :class:`TabularSoftmaxPolicy`, so :meth:`value` enumerates the exact
    success of the current team.
    """

    def __init__(self, workflow: Workflow, learner: TabularSoftmaxPolicy, first_values: Sequence[float],
                 gains: Sequence[float], seed: int = 0):
        steps = workflow.steps
        if any(st.kind != "decision" for st in steps):
            raise ValueError("MatchChainEnv: the workflow must be decision points only (no feedback steps)")
        names = [st.name for st in steps]
        for u, st in enumerate(steps[1:], 1):
            if not set(st.reads) <= set(names[:u]):
                raise ValueError(f"MatchChainEnv: decision point {st.name} must read only decision points before it "
                                 f"({names[:u]}), not {list(st.reads)}")
        if len(first_values) != learner.vocab:
            raise ValueError(f"MatchChainEnv: {len(first_values)} first_values for {learner.vocab} messages; "
                             "give one per message")
        if len(gains) != len(steps) - 1 or any(g < 0 for g in gains):
            raise ValueError("MatchChainEnv: gains needs one value >= 0 per later decision point "
                             f"({len(steps) - 1}), got {list(gains)}")
        if min(first_values) < 0 or max(first_values) + sum(gains) > 1:
            raise ValueError("MatchChainEnv: first_values must be >= 0 and max(first_values) + sum(gains) <= 1")
        super().__init__(workflow, vocab=learner.vocab, seed=seed, reward_low=min(first_values),
                         reward_high=max(first_values) + sum(gains))
        self.learner, self.first_values, self.gains = (learner, tuple(float(x) for x in first_values),
                                                       tuple(float(g) for g in gains))
        self.actor_step = None  # no harmful message (DecisiveFirstEnv's masked variant)
        self._prefix = [workflow.roles[st.name].prefix for st in steps]
        self._reads = [[names.index(r) for r in st.reads] for st in steps]  # the positions each point reads
        self._reward_prob: dict[tuple[str, tuple[str, ...]], float] = {}
        self._cached_version = learner.version

    def first_value(self, item: Mapping[str, Any], k: int) -> float:
        """Success probability the first message ``m_k`` contributes (before the later agents' gains)."""
        perm = _seeded(self.seed, "first", item["question"]).permutation(len(self.messages))
        return self.first_values[int(perm[k])]

    def good_index(self, item: Mapping[str, Any]) -> int:
        """Index of the first agent's best message (the largest ``first_values`` entry; the later gains cannot change
        it)."""
        return int(np.argmax([self.first_value(item, k) for k in range(len(self.messages))]))

    def reply_index(self, item: Mapping[str, Any], u: int, *read: str) -> int:
        """Index of decision point ``u``'s good reply to the messages it ``read`` (in a chain its predecessor's output;
        none for a point that reads only the question: one good message per task)."""
        return int(_seeded(self.seed, "reply", item["question"], u, *read).integers(len(self.messages)))

    def harmful(self, item: Mapping[str, Any]) -> None:
        return None

    def reward_prob(self, item: Mapping[str, Any], outputs: Sequence[str]) -> float:
        key = (str(item["question"]), tuple(outputs))
        if key not in self._reward_prob:
            first = self.messages.index(outputs[0][len(self._prefix[0]):])
            p = self.first_value(item, first)
            for u in range(1, len(outputs)):
                read = [outputs[v] for v in self._reads[u]]
                good = self._prefix[u] + self.messages[self.reply_index(item, u, *read)]
                p += self.gains[u - 1] * (outputs[u] == good)
            self._reward_prob[key] = float(p)
        return self._reward_prob[key]


def variance_decomposition(env: SyntheticEnv, item: Mapping[str, Any]) -> dict[str, Any]:
    """The variance of a run's reward, split exactly (law of total variance) by who causes it:
    ``decisions[u] = E[Var_{a ~ pi}(Q(h_u, a))]`` (decision point ``u``'s own choice, given what came before),
    ``outcome = E[p (1 - p)]`` (the Bernoulli draw of a complete path), ``total = V (1 - V)`` = their sum.

    A later agent's credit signal is its ``decisions[u]``; a broadcast run score hands it every other term as noise."""
    wf = env.workflow
    decisions = [0.0] * wf.num_decisions
    outcome = 0.0

    def walk(outputs: tuple[str, ...], weight: float) -> None:
        nonlocal outcome
        if len(outputs) == len(wf.steps):
            p = env.reward_prob(item, outputs)
            outcome += weight * p * (1.0 - p)
            return
        step = wf.steps[len(outputs)]
        if step.kind == "feedback":
            latest = wf.latest_outputs(outputs)
            walk(outputs + (wf.feedback[step.name](item, {r: latest.get(r, "") for r in step.reads}),), weight)
            return
        pi, q = env.policy(*env.context(item, outputs)), env.q_values(item, outputs)
        decisions[step.decision] += weight * float(pi @ (q - pi @ q) ** 2)
        prefix = wf.roles[step.name].prefix
        for k, m in enumerate(env.messages):
            walk(outputs + (prefix + m,), weight * float(pi[k]))

    walk((), 1.0)
    v = env.value(item)
    return {"decisions": decisions, "outcome": outcome, "total": v * (1.0 - v)}


class TabularCritic:
    """``V_hat(role, context)``: a table regressed onto logged returns, one step per update."""

    def __init__(self, lr: float, init: float):
        self.lr, self.init = lr, init
        self.values: dict[tuple[str, str], float] = {}

    def predict(self, keys: Sequence[tuple[str, str]]) -> np.ndarray:
        return np.array([self.values.get(k, self.init) for k in keys])

    def update(self, keys: Sequence[tuple[str, str]], returns: np.ndarray) -> None:
        """One gradient step on the per-context mean squared error: ``V += lr (mean return - V)``."""
        uniq, inverse = _index(keys)
        mean = np.bincount(inverse, weights=returns, minlength=len(uniq)) / np.bincount(inverse, minlength=len(uniq))
        for key, target in zip(uniq, mean):
            v = self.values.get(key, self.init)
            self.values[key] = v + self.lr * (float(target) - v)


def _index(keys: Sequence[tuple[str, str]]) -> tuple[list[tuple[str, str]], np.ndarray]:
    """Distinct keys in order of first appearance and each key's position among them."""
    ids: dict[tuple[str, str], int] = {}
    inverse = np.fromiter((ids.setdefault(k, len(ids)) for k in keys), dtype=np.int64, count=len(keys))
    return list(ids), inverse


def _keys(rollout: Rollout, u: int) -> list[tuple[str, str]]:
    return [(e.role, e.context) for e in rollout.decision_entries(u)]


def exact_advantages(env: SyntheticEnv, rollout: Rollout) -> list[np.ndarray]:
    """Per decision point, the exact ``Q(h, a) - V(h)`` of each of its messages under the current policies."""
    by_node = {(e.instance, e.node): e for e in rollout.entries}
    out = []
    for u in range(rollout.workflow.num_decisions):
        adv = []
        for entry in rollout.decision_entries(u):
            chain = path_to(entry, by_node)
            item, outputs = chain[0].item, tuple(e.output for e in chain[1:-1])
            adv.append(env.q(item, outputs, entry.message) - env.value(item, outputs))
        out.append(np.array(adv))
    return out


def advantages(method: str, rollout: Rollout, setup: LearningSetup, critic: TabularCritic | None = None,
               env: SyntheticEnv | None = None) -> list[np.ndarray | None]:
    """Per decision point, the advantage of each of its messages (``rollout.decision_entries(u)`` order)
    or ``None`` where the method credits nothing. ``critic`` (method ``critic``) is read, then updated;
    ``env`` (method ``oracle``) supplies the exact values."""
    k = rollout.workflow.num_decisions
    if method == "c3":
        return tree_advantages(rollout.rewards)
    if method == "oracle":
        if env is None:
            raise ValueError("advantages: method 'oracle' needs the environment")
        return exact_advantages(env, rollout)
    runs = rollout.rewards.reshape(len(rollout.items), -1)  # [instances, B]: independent plans only
    if method == "magrpo":
        return [group_advantages(runs, setup.group_mode).reshape(-1)] * k
    if method == "critic":
        if critic is None:
            raise ValueError("advantages: method 'critic' needs a TabularCritic")
        returns = runs.reshape(-1)
        keys = [_keys(rollout, u) for u in range(k)]
        out = [returns - critic.predict(ks) for ks in keys]
        for ks in keys:
            critic.update(ks, returns)
        return out
    raise ValueError(f"unknown method {method!r}; use one of {METHODS}")


def policy_gradient(learner: TabularSoftmaxPolicy, rollout: Rollout,
                    adv: Sequence[np.ndarray | None]) -> dict[tuple[str, str], np.ndarray]:
    """Exact gradient of ``sum_u mean_{messages at u} A * log pi(message | context)`` with respect to the
    logits: ``A (onehot(message) - pi(. | context))`` per message, summed per context."""
    grads: dict[tuple[str, str], np.ndarray] = {}
    for u, a in enumerate(adv):
        if a is None:
            continue
        entries = rollout.decision_entries(u)
        uniq, inverse = _index([(e.role, e.context) for e in entries])
        chosen = np.array([e.token_ids[0] for e in entries])
        g = np.zeros((len(uniq), learner.vocab))
        np.add.at(g, (inverse, chosen), a)
        g -= np.bincount(inverse, weights=a, minlength=len(uniq))[:, None] * np.array([learner.probs(*k) for k in uniq])
        for key, row in zip(uniq, g / len(entries)):
            grads[key] = grads.get(key, 0.0) + row
    return grads


WORKFLOWS: dict[str, dict[str, Any]] = {  # workflows of the studies that are not builtins (LearningSetup.workflow)
    "chain3": {"name": "chain3", "agents": 3, "roles": {
        "Reasoner": {"agent": 0, "template": "{question}"},
        "Actor": {"agent": 1, "reads": ["Reasoner"], "template": "{question}\n\n{context}"},
        "Verifier": {"agent": 2, "reads": ["Actor"], "template": "{question}\n\n{context}"}}},
    # two solvers answer the question independently, a judge reads both
    "solvers_judge": {"name": "solvers_judge", "agents": 3, "roles": {
        "SolverA": {"agent": 0, "template": "{question}"},
        "SolverB": {"agent": 1, "template": "{question}"},
        "Judge": {"agent": 2, "reads": ["SolverA", "SolverB"], "template": "{question}\n\n{context}"}}},
    "chain4": {"name": "chain4", "agents": 4, "roles": {
        "Planner": {"agent": 0, "template": "{question}"},
        "Solver": {"agent": 1, "reads": ["Planner"], "template": "{question}\n\n{context}"},
        "Critic": {"agent": 2, "reads": ["Solver"], "template": "{question}\n\n{context}"},
        "Verifier": {"agent": 3, "reads": ["Critic"], "template": "{question}\n\n{context}"}}},
}
ENVIRONMENTS = ("decisive_first", "match_chain")  # LearningSetup.env


def make_env(setup: LearningSetup, seed: int) -> TrainableEnv:
    """The study's environment for one seed, with fresh policies."""
    learner = TabularSoftmaxPolicy(setup.vocab, seed=seed, init_scale=setup.init_scale)
    wf = load_workflow(WORKFLOWS.get(setup.workflow, setup.workflow))
    if setup.env == "match_chain":
        return MatchChainEnv(wf, learner, setup.first_values, setup.gains, seed=seed)
    if setup.env != "decisive_first":
        raise ValueError(f"unknown env {setup.env!r}; use one of {ENVIRONMENTS}")
    return DecisiveFirstEnv(wf, learner, seed=seed, high=setup.high, low=setup.low, noise=setup.noise,
                            actor_penalty=setup.actor_penalty)


def train(method: str, seed: int, env_steps: int, setup: LearningSetup = LearningSetup(), question: str = "task",
          env: TrainableEnv | None = None) -> list[dict]:
    """Train one team with ``method`` for ``env_steps`` terminal reward calls, each agent's step ``lr`` times its
    ``setup.lr_scale`` multiplier (an agent at 0 is frozen: its logits never change). Rows: ``env_step``, ``messages``
    (written so far), ``seed``, the exact ``success`` probability, ``first_good`` (the first agent's
    probability of the good message) and ``harmful`` (the team's probability of writing the Actor's harmful
    message; ``None`` without a penalty), every ``setup.eval_every`` updates and at the start and the end. ``env``: the
    environment to train (default ``make_env(setup, seed)``), so a caller can read its policies afterwards."""
    env = env if env is not None else make_env(setup, seed)
    plan = parse_plan(setup.plan(method))
    wf = env.workflow
    scale = setup.agent_scales(wf)  # role -> lr multiplier; 0: the role's logits are never updated
    sample_seed, reward_seed = np.random.SeedSequence([seed, 1]).spawn(2)
    backend = SyntheticBackend(env, seed=int(sample_seed.generate_state(1)[0]))
    rng = np.random.default_rng(reward_seed)
    critic = TabularCritic(setup.critic_lr, setup.critic_init) if method == "critic" else None
    item = {"question": question}
    per_update = setup.copies * plan.leaves(wf.num_decisions)
    updates = env_steps // per_update

    def row(step: int, messages: int) -> dict:
        return {"method": method, "env_step": step, "messages": messages, "seed": seed, "success": env.value(item),
                "first_good": env.first_good(item), "harmful": env.harmful(item)}

    rows = [row(0, 0)]
    messages = 0
    for t in range(1, updates + 1):
        items = [{"id": f"{t}#{c}", **item} for c in range(setup.copies)]
        rollout = materialize(wf, plan, items, backend, lambda leaves: env.reward(leaves, rng))
        spent = rollout.budget.totals()
        if spent["env_steps"] != per_update:
            raise RuntimeError(f"{method}: {spent['env_steps']} env steps in an update, expected {per_update}")
        messages += spent["messages"]
        grads = policy_gradient(env.learner, rollout, advantages(method, rollout, setup, critic, env))
        env.learner.step({k: setup.lr * scale[k[0]] * g for k, g in grads.items() if scale[k[0]] > 0})
        if t % setup.eval_every == 0 or t == updates:
            rows.append(row(t * per_update, messages))
    return rows


def learning_curves(method: str, seeds: Sequence[int], env_steps: int,
                    setup: LearningSetup = LearningSetup()) -> list[dict]:
    """:func:`train` for every seed (a seed fixes the environment, the initial policies, the sampling and the
    rewards; the methods share seeds, so their curves pair by seed)."""
    return [row for seed in seeds for row in train(method, seed, env_steps, setup)]


ENV_VARIANTS: dict[str, dict[str, Any]] = {  # name -> LearningSetup overrides of the environment
    "decisive first": {},  # only the first agent matters; the later ones add +-noise
    # the first agent still moves success by high - low = 0.4; the Actor's harmful message costs 0.2 whatever came
    # before and the Actor adds no noise (0.4 > 0.2 + 2 * 0.08 and 0.2 > 2 * 0.08: both orders hold whatever the others
    # do)
    "masked later mistake": {"actor_penalty": 0.2},
}

# The two regimes of the C3-vs-MAGRPO study (bench/estimator_to_learning.py --study regimes): name -> LearningSetup
# overrides. MatchChainEnv in both; each method at its own best lr.
REGIMES: dict[str, dict[str, Any]] = {
    # Reasoner -> Actor: the Reasoner's messages are worth 0, 0.1, 0.7, 0.8 (variance 0.125 under a uniform
    # Reasoner) and it is frozen, so that variance persists; the Actor gains 0.2 by answering its Reasoner's message
    # with the good reply, which depends on that message. C3's tree [2, 4] against independent 8.
    "downstream learner (frozen upstream)": {"env": "match_chain", "workflow": "reasoner_actor",
                                             "first_values": (0.0, 0.1, 0.7, 0.8), "gains": (0.2,), "tree": (2, 4),
                                             "lr_scale": (0.0, 1.0)},
    # the same with the Reasoner learning at 0.1x the step size
    "downstream learner (slow upstream)": {"env": "match_chain", "workflow": "reasoner_actor",
                                           "first_values": (0.0, 0.1, 0.7, 0.8), "gains": (0.2,), "tree": (2, 4),
                                           "lr_scale": (0.1, 1.0)},
    # Planner -> Solver -> Critic -> Verifier, all trained: the Planner decides (0.7 for one message, 0.3 for the
    # others),
    # each later agent gains 0.05 by the good reply. At 16 env steps C3's tree [2, 2, 2, 2] gives the Planner 2
    # alternatives per update, independent 16 gives it 16 runs.
    "all-trained 4-agent chain": {"env": "match_chain", "workflow": "chain4", "first_values": (0.7, 0.3, 0.3, 0.3),
                                  "gains": (0.05, 0.05, 0.05), "tree": (2, 2, 2, 2)},
}


def exact_diagnosis(env: SyntheticEnv, item: Mapping[str, Any]) -> dict[str, Any]:
    """What ``c3 diagnose`` estimates, exactly, for the current policies, in diagnose.json's shape (the fields
    :mod:`c3_plugin.tools.advise` reads): per decision point ``u`` the signal ``signal_S = E[Var_a Q(h_u, a)]`` and,
    before the last, ``return_variance`` = sigma_u^2 = ``E[Var(R | h_u, a_u)]`` (every later choice and the outcome);
    at the last, ``reward_variance`` = its signal + the outcome variance (what diagnose measures there, c = 1); and
    the Bernoulli ``outcome_variance`` E[p (1 - p)], which a diagnosis cannot split from the last signal."""
    d = variance_decomposition(env, item)
    dec, outcome = d["decisions"], d["outcome"]
    k = len(dec)
    rows = []
    for u, role in enumerate(env.workflow.decision_points()):
        row: dict[str, Any] = {"u": u, "role": role, "signal_S": dec[u]}
        if u < k - 1:
            row["return_variance"] = float(sum(dec[u + 1:]) + outcome)
        else:
            row["reward_variance"] = float(dec[u] + outcome)
        rows.append(row)
    return {"workflow": env.workflow.name, "decision_points": env.workflow.decision_points(), "source": "exact",
            "decisions": rows, "outcome_variance": float(outcome), "reward_variance_total": d["total"]}
