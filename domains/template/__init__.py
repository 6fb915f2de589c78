"""A copy-me domain: the smallest complete implementation of the domain contract.

Task: repeat a word. One workflow, ``echo_pair``: a Planner says which word to repeat, a
Writer writes it. Copy this folder to ``domains/<yours>/``, replace the data, prompts and
reward, and register ``DOMAIN`` under the ``c3_plugin.domains`` entry-point group of your
package (see README.md beside this file).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from c3_plugin.core.domain import Domain, probe_only, single_train_source
from c3_plugin.core.rewards import batched
from c3_plugin.core.workflow import Workflow, workflow_from_dict

WORDS = ("apple", "river", "stone", "cloud", "maple", "ember", "quartz", "meadow")


@dataclass
class TemplateConfig:
    """The config's ``template:`` section."""

    case_sensitive: bool = False  # whether the repeated word must match its case


def load_datasets(section: Mapping[str, Any], seed: int = 0, config: Any = None):
    """Synthetic rows ``{id, prompt, question, answer, datasource}``; sizes from the dataset section."""
    import datasets

    def rows(name: str, size: int, s: int) -> list[dict]:
        rng = np.random.default_rng(s)
        words = rng.choice(WORDS, size=size)
        return [{"id": f"{name}-{i}", "prompt": f"Repeat the word: {w}", "question": f"Repeat the word: {w}",
                 "answer": str(w), "datasource": name} for i, w in enumerate(words)]

    train = single_train_source(section, "template")
    train_rows = rows(train.get("name", "train"), int(train.get("size", 32)), int(train.get("seed", seed)))
    eval_rows = [r for spec in section.get("eval") or []
                 for r in rows(spec.get("name", "eval"), int(spec.get("size", 16)), int(spec.get("seed", seed + 1)))]
    return datasets.Dataset.from_list(train_rows), (datasets.Dataset.from_list(eval_rows) if eval_rows else None)


def merger(outputs: Mapping[str, str]) -> str:
    """Optional: join the messages of roles that end a workflow in parallel into the one action the reward and
    ``outcome`` see (``{role: message}`` -> text); never raises on model output. Here the word most of them wrote
    (a tie: the first role's)."""
    words = [str(text).strip().strip(".") for text in outputs.values()]
    return max(words, key=words.count) if words else ""


def workflows() -> dict[str, Workflow]:
    spec = {"name": "echo_pair", "agents": 2, "roles": {
        "Planner": {"agent": 0, "template": "{question}\nSay which word must be repeated."},
        "Writer": {"agent": 1, "reads": ["Planner"],
                   "template": "{question}\nPlanner: {Planner}\nWrite only the word."}}}
    # two Writers in parallel, their words joined by the merger (workflow.name: echo_vote)
    vote = {"name": "echo_vote", "agents": 2, "roles": {
        "Writer": {"agent": 0, "template": "{question}\nWrite only the word."},
        "Checker": {"agent": 1, "template": "{question}\nWrite only the word, checked letter by letter."}}}
    return {"echo_pair": workflow_from_dict(spec), "echo_vote": workflow_from_dict(vote, merger=merger)}


def make_reward(config: TemplateConfig | None = None):
    """The reward of a ``template:`` section (the domain config reaches the reward through this factory):
    1.0 when the last agent's message, stripped, is the word (``case_sensitive``: with its case). CoMLRL
    contract, batched (one call scores a batch of joint actions); never raises on model output."""
    exact = bool((config or TemplateConfig()).case_sensitive)

    @batched
    def reward(*agent_completions: Sequence[str], batch_items: Sequence[Mapping[str, Any]] | None = None,
               prompts: Sequence[str] | None = None) -> list[float]:
        if batch_items is None:
            raise ValueError("template reward: batch_items with an 'answer' per completion are required")
        fold = (lambda t: t) if exact else str.lower
        return [float(fold(str(c).strip().strip(".")) == fold(str(it["answer"])))
                for c, it in zip(agent_completions[-1], batch_items)]

    reward.reward_range = (0.0, 1.0)
    return reward


reward = make_reward()


def outcome(leaves: Sequence[Any]) -> list[str]:
    """Optional: one hashable outcome per leaf (``Leaf``: item, final action, path outputs), coarser than
    the action text, for the influence diagnostic. Here the word written, as the reward compares it."""
    return [str(leaf.action).strip().strip(".").lower() for leaf in leaves]


def eval_logger(agent_completions_turns, batch_items=None, prompts=None) -> list[dict]:
    """Per eval item: its datasource and whether the final message is right (under the default config)."""
    final = agent_completions_turns[-1]
    return [{"datasource": it.get("datasource", "eval"), "correct": reward([t[-1] if t else ""], batch_items=[it])[0]}
            for t, it in zip(final, batch_items or [])]


def eval_aggregator(rows: Sequence[Mapping[str, Any]], num_turns: int = 1) -> dict[str, float]:
    out: dict[str, float] = {}
    for suite in sorted({r["datasource"] for r in rows}):
        vals = [r["correct"] for r in rows if r["datasource"] == suite]
        out[f"{suite}/accuracy"] = float(np.mean(vals))
    return out


def dry_run_probe(config: TemplateConfig | None = None) -> dict[str, Any]:
    """Model-free checks of the config's reward: the right word scores 1, another word 0."""
    score = make_reward(config)
    right = score(["x"], ["apple"], batch_items=[{"answer": "apple"}])[0]
    wrong = score(["x"], ["river"], batch_items=[{"answer": "apple"}])[0]
    return {"probe_reward": right, "probe_wrong_reward": wrong, "probe_ok": right == 1.0 and wrong == 0.0}


DOMAIN = Domain(name="template", load_datasets=load_datasets, workflows=workflows, make_reward=make_reward,
                make_eval_logger=lambda workflow: eval_logger, eval_aggregator=eval_aggregator,
                dry_run=probe_only(dry_run_probe), config_cls=TemplateConfig, default_workflow="echo_pair",
                outcome=outcome, gold="answer", merger=merger)
