"""From credit to policy samples: each credited message once, per agent, its advantage scaled.

``WorkflowTrainer.build_samples`` runs these on a rollout batch's credit (``compute_advantages``: per
decision point, entry indices and advantages). A sample shared by several paths (``TraceEntry.shared``)
is trained once, on its original entry, with the mean of its copies' advantages
(:meth:`c3_plugin.core.rollout.Rollout.unique_credit`); a message after its episode ended was never
sampled and is left out.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from c3_plugin.core.credit import normalize_advantages
from c3_plugin.core.protocol import Prompt, encode_prompt
from c3_plugin.core.rollout import Rollout
from c3_plugin.core.workflow import Workflow
from c3_plugin.trainers.ranks import global_batch_scaling
from c3_plugin.trainers.update import PolicySample

Row = tuple[Any, float, int]  # (trace entry, advantage, group id)


def credited_rows(rollout: Rollout | None, credited: Sequence[tuple[np.ndarray, np.ndarray]],
                  group_key: Callable[[Any], tuple]) -> dict[int, list[Row]]:
    """Per agent, in credit order: every credited message once with its advantage and the id of the group it is
    normalised in (``group_key`` of its entry). ``credited`` is empty when this rank had no instances."""
    per_agent: dict[int, list[Row]] = {}
    groups: dict[tuple, int] = {}  # group key -> group id
    for indices, adv in credited:
        for i, a in zip(*rollout.unique_credit(indices, adv)):
            e = rollout.entries[int(i)]
            if e.ended:  # after its episode ended (multi-turn early termination): nothing was sampled
                continue
            gid = groups.setdefault(group_key(e), len(groups))
            per_agent.setdefault(int(e.agent), []).append((e, float(a), gid))
    return per_agent


def scale_advantages(rows: Sequence[Row], mode: str, distributed: bool) -> np.ndarray:
    """One agent's advantages scaled as ``advantage_scaling`` (``mode``) says. Under data parallelism
    ``batch_scale``/``batch_zscore`` take the mean and std of every rank's share (a collective: every rank calls
    it for every agent, with or without rows); a group stays on one rank."""
    raw = np.array([r[1] for r in rows], dtype=np.float64)
    if distributed and mode in ("batch_scale", "batch_zscore"):
        return global_batch_scaling(raw, mode)
    return normalize_advantages(raw, mode, groups=np.array([r[2] for r in rows]))


def entry_prompt_ids(entry: Any, tokenizer: Any, workflow: Workflow, use_chat_template: bool) -> list[int]:
    """The ids a trace entry's message was sampled after: recorded, else its prompt encoded again."""
    if entry.prompt_ids is not None:
        return list(entry.prompt_ids)
    prompt = Prompt(entry.context, entry.role, int(entry.agent), entry.prefix, workflow.roles[entry.role].system)
    return encode_prompt(tokenizer, prompt, use_chat_template)


def policy_sample(entry: Any, advantage: float, prompt_ids: list[int]) -> PolicySample:
    """A trace entry's message as a sample of its agent's update."""
    return PolicySample(prompt_ids=prompt_ids, completion_ids=list(entry.token_ids), old_logprobs=list(entry.logprobs),
                        advantage=float(advantage), loss_mask=entry.loss_mask, trainer_logprobs=entry.trainer_logprobs)
