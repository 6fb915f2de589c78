"""Traces: the record of every run, and the whole state of the system.

One :class:`TraceEntry` per instance root, decision point and environment feedback step.
Ids are explicit: ``instance`` and ``node`` identify an entry, ``parent`` links it to the
entry before it on its path (``-1`` for an instance root), ``step`` is its schedule
position and ``decision`` its decision index ``u``. ``alternative`` is the entry's index
among its siblings; ``continuation`` is its index among the continuations of the
shallowest alternative above it (0 where nothing above it branched). Leaves carry the
terminal reward. ``shared`` marks a copy: when a rollout shares one sample among paths
whose contexts are identical (parallel roles), every path keeps its own entry and the
copies name the node of the first entry holding the sample; budgets and training count
the sample once. :func:`replay_check` re-assembles every context from its trace prefix.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from .workflow import Workflow

KINDS = ("instance", "decision", "feedback")


@dataclass
class TraceEntry:
    kind: str  # "instance" (root: the task item), "decision" or "feedback"
    instance: str  # instance id
    node: int  # node id, unique within the instance (0 is the root)
    parent: int  # parent node id (-1 for the root)
    step: int = -1  # schedule index (-1 for the root)
    decision: int | None = None  # decision index u (decision points only)
    role: str | None = None  # acting role, or feedback name
    agent: int | None = None  # agent index (decision points only)
    alternative: int = 0  # index among siblings
    continuation: int = 0  # index among the continuations of the shallowest alternative above
    shared: int | None = None  # node id of the first entry holding the same sample (a copy under a sharing rollout); None: an original
    context: str = ""  # exact context text h_u (root: the question)
    prefix: str = ""  # response prefix recorded with the context (not part of the message)
    message: str = ""  # the policy's message (feedback: the environment's output)
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)  # behaviour log-probs, one per token
    loss_mask: list[int] | None = None  # per token: 1 chosen by the policy, 0 forced by a grammar (None: all chosen)
    reward: float | None = None  # terminal reward (leaves only)
    item: dict[str, Any] | None = None  # the task item (root only)

    @property
    def output(self) -> str:
        """What downstream roles and the reward read: the prefix followed by the message."""
        return self.prefix + self.message

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TraceEntry":
        names = {f.name for f in fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"trace entry has unknown field(s) {sorted(unknown)}")
        if data.get("kind") not in KINDS:
            raise ValueError(f"trace entry kind must be one of {KINDS}, got {data.get('kind')!r}")
        return cls(**data)


def write_jsonl(entries: Iterable[TraceEntry], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for entry in entries:
            fh.write(json.dumps(entry.to_dict(), ensure_ascii=False, allow_nan=False) + "\n")
    return path


def read_jsonl(path: str | Path) -> list[TraceEntry]:
    out = []
    with Path(path).open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if line.strip():
                try:
                    out.append(TraceEntry.from_dict(json.loads(line)))
                except (ValueError, TypeError) as exc:
                    raise ValueError(f"{path}:{lineno}: {exc}") from exc
    return out


def path_to(entry: TraceEntry, by_node: Mapping[tuple[str, int], TraceEntry]) -> list[TraceEntry]:
    """Entries from the instance root down to ``entry`` (inclusive)."""
    chain = [entry]
    while chain[-1].parent >= 0:
        key = (chain[-1].instance, chain[-1].parent)
        if key not in by_node:
            raise ValueError(f"instance {entry.instance}: node {chain[-1].node} has missing parent {chain[-1].parent}")
        chain.append(by_node[key])
    return chain[::-1]


def _first_difference(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def replay_check(entries: Sequence[TraceEntry], workflow: Workflow) -> list[str]:
    """Re-assemble each context (and re-run each feedback step) from its trace prefix.

    Returns one message per mismatch; an empty list means the trace is the state. A
    mismatch is hidden state: something the context depended on was not recorded.
    """
    by_node = {(e.instance, e.node): e for e in entries}
    problems = []
    for entry in entries:
        if entry.kind == "instance":
            continue
        chain = path_to(entry, by_node)
        root, prefix = chain[0], chain[1:-1]
        where = f"instance {entry.instance} node {entry.node} ({entry.role}, step {entry.step})"
        if root.kind != "instance":
            problems.append(f"{where}: path does not start at an instance root")
            continue
        if [e.step for e in prefix] != list(range(entry.step)):
            problems.append(f"{where}: trace prefix skips steps {[e.step for e in prefix]}")
            continue
        step = workflow.steps[entry.step]
        if step.name != entry.role:
            problems.append(f"{where}: schedule step {entry.step} is {step.name}, trace says {entry.role}")
            continue
        item = root.item or {"question": root.context}
        outputs = [e.output for e in prefix]
        if entry.kind == "decision":
            expected = workflow.assemble(step, item, outputs)
            if expected != entry.context:
                at = _first_difference(expected, entry.context)
                problems.append(f"{where}: hidden state: recorded context differs from its re-assembly at char {at}: "
                                f"recorded {entry.context[at:at + 40]!r}, re-assembled {expected[at:at + 40]!r}")
            if entry.prefix != workflow.roles[entry.role].prefix:
                problems.append(f"{where}: hidden state: recorded prefix {entry.prefix!r} is not the role's prefix")
        else:
            latest = workflow.latest_outputs(outputs)
            expected = workflow.feedback[step.name](item, {r: latest.get(r, "") for r in step.reads})
            if expected != entry.message:
                problems.append(f"{where}: hidden state: feedback re-run from the trace gives a different output")
    return problems
