"""A synthetic environment with exact ground truth, for verifying credit estimators.

Roles of a real :class:`~c3_plugin.core.workflow.Workflow` draw their messages from known
categorical policies over a small vocabulary ``m0, m1, ...``; the policy of a role is a
seeded function of its exact context text, so it reacts to everything upstream,
including a null (empty) message that the policies never produce. The terminal reward
of a path is Bernoulli with a known probability, seeded by the question text and the
path, so copies of one question (distinct ids) share one law. Because everything is finite,
``V(h)`` and ``Q(h, a)`` are computed exactly by enumeration.

The same objects drive the real rollout machinery (:class:`SyntheticBackend` implements
the generation protocol; :meth:`SyntheticEnv.reward` the terminal reward), and
:meth:`SyntheticEnv.sample_groups` draws a decision point's groups directly from their
exact law (a continuation's return given ``(h, a)`` is Bernoulli(Q(h, a))) for large
statistical studies.
"""

from __future__ import annotations

import hashlib
from typing import Any, Mapping, Sequence

import numpy as np

from c3_plugin.core.protocol import Generation, Prompt, Sampling
from c3_plugin.core.rollout import Leaf
from c3_plugin.core.workflow import Workflow

NULL_MESSAGE = ""


def _seeded(*parts: Any) -> np.random.Generator:
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return np.random.default_rng(int.from_bytes(digest, "little"))


class SyntheticEnv:
    def __init__(self, workflow: Workflow, vocab: int = 3, seed: int = 0, concentration: float = 1.0,
                 reward_low: float = 0.05, reward_high: float = 0.95):
        if vocab < 2:
            raise ValueError("SyntheticEnv: vocab must be at least 2")
        self.workflow = workflow
        self.messages = tuple(f"m{k}" for k in range(vocab))
        self.seed = seed
        self.concentration = concentration  # Dirichlet concentration of every policy row
        self.reward_low, self.reward_high = reward_low, reward_high  # range of the Bernoulli reward probabilities
        self._policy: dict[tuple[str, str], np.ndarray] = {}
        self._value: dict[tuple[str, tuple[str, ...]], float] = {}

    def policy(self, role: str, context: str) -> np.ndarray:
        """Probabilities of ``self.messages`` for ``role`` at exact context text ``context``."""
        key = (role, context)
        if key not in self._policy:
            p = _seeded(self.seed, "policy", role, context).dirichlet(np.full(len(self.messages), self.concentration))
            self._policy[key] = np.clip(p, 1e-6, None) / np.clip(p, 1e-6, None).sum()
        return self._policy[key]

    def reward_prob(self, item: Mapping[str, Any], outputs: Sequence[str]) -> float:
        """Probability that the terminal reward of this complete path is 1."""
        u = _seeded(self.seed, "reward", item["question"], *outputs).random()
        return float(self.reward_low + (self.reward_high - self.reward_low) * u)

    def value(self, item: Mapping[str, Any], outputs: Sequence[str] = ()) -> float:
        """V after the steps whose outputs are given: the exact expected terminal reward."""
        outputs = tuple(outputs)
        key = (str(item["question"]), outputs)
        if key in self._value:
            return self._value[key]
        steps = self.workflow.steps
        if len(outputs) == len(steps):
            v = self.reward_prob(item, outputs)
        else:
            step = steps[len(outputs)]
            if step.kind == "feedback":
                latest = self.workflow.latest_outputs(outputs)
                text = self.workflow.feedback[step.name](item, {r: latest.get(r, "") for r in step.reads})
                v = self.value(item, outputs + (text,))
            else:
                v = float(self.policy(step.name, self.workflow.assemble(step, item, outputs))
                          @ self.q_values(item, outputs))
        self._value[key] = v
        return v

    def q(self, item: Mapping[str, Any], outputs: Sequence[str], message: str) -> float:
        """Q(h, a): the exact value of writing ``message`` at the next decision point."""
        step = self.workflow.steps[len(outputs)]
        return self.value(item, tuple(outputs) + (self.workflow.roles[step.name].prefix + message,))

    def q_values(self, item: Mapping[str, Any], outputs: Sequence[str]) -> np.ndarray:
        return np.array([self.q(item, outputs, m) for m in self.messages])

    def context(self, item: Mapping[str, Any], outputs: Sequence[str]) -> tuple[str, str]:
        """(role, context text) of the next step after ``outputs``."""
        step = self.workflow.steps[len(outputs)]
        return step.name, self.workflow.assemble(step, item, outputs)

    def reward(self, leaves: Sequence[Leaf], rng: np.random.Generator) -> np.ndarray:
        """Bernoulli terminal rewards for a batch of leaves."""
        p = np.fromiter((self.reward_prob(leaf.item, leaf.outputs) for leaf in leaves), dtype=np.float64,
                        count=len(leaves))
        return (rng.random(len(leaves)) < p).astype(np.float64)

    def sample_groups(self, item: Mapping[str, Any], outputs: Sequence[str], n: int, counts: Sequence[int],
                      size: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``size`` groups at the decision point after ``outputs``: ``n`` alternatives drawn
        from the policy, alternative ``j`` continued ``counts[j]`` times. Returns the message
        indices ``[size, n]`` and the returns ``[size, n, max(counts)]`` (NaN-padded)."""
        counts = np.broadcast_to(np.asarray(counts, dtype=np.int64), (n,))
        role, ctx = self.context(item, outputs)
        alt = rng.choice(len(self.messages), size=(size, n), p=self.policy(role, ctx))
        q = self.q_values(item, outputs)[alt]
        ret = (rng.random((size, n, int(counts.max()))) < q[..., None]).astype(np.float64)
        ret[..., np.arange(int(counts.max()))[None, :] >= counts[:, None]] = np.nan
        return alt, ret


class SyntheticBackend:
    """The generation protocol over a :class:`SyntheticEnv`: one token per message."""

    def __init__(self, env: SyntheticEnv, seed: int = 0):
        self.env = env
        self.rng = np.random.default_rng(seed)

    def generate(self, prompts: Sequence[Prompt], n: int, sampling: Sampling) -> list[list[Generation]]:
        out = []
        for prompt in prompts:
            p = self.env.policy(prompt.role, prompt.text)
            if sampling.greedy:
                idx, q = np.full(n, int(np.argmax(p))), p
            else:
                q = p ** (1.0 / max(sampling.temperature, 1e-6))
                q = q / q.sum()
                idx = self.rng.choice(len(p), size=n, p=q)
            out.append([Generation(text=self.env.messages[k], token_ids=[int(k)], logprobs=[float(np.log(q[k]))])
                        for k in idx])
        return out
