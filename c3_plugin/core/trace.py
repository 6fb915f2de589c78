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

Besides the messages, the instance root records everything else that shapes what a policy
reads: every role's system prompt and response prefix, whether contexts were wrapped in the
chat template, and the sha256 of each agent's chat template. Decision entries record the
exact prompt token ids the policy conditioned on (``prompt_ids``; stored in full, not as a
hash, so a replay names the first token that differs: this roughly doubles a trace's size
next to the context text). Traces written before these fields existed load with ``None``
there, and the checks that need them are skipped.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from c3_plugin.core.protocol import Prompt, encode_prompt
from c3_plugin.core.workflow import Workflow

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
    # node id of the first entry holding the same sample (a copy under a sharing rollout); None: an original
    shared: int | None = None
    context: str = ""  # exact context text h_u (root: the question)
    prefix: str = ""  # response prefix recorded with the context (not part of the message)
    message: str = ""  # the policy's message (feedback: the environment's output)
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)  # behaviour log-probs, one per token
    loss_mask: list[int] | None = None  # per token: 1 chosen by the policy, 0 forced by a grammar (None: all chosen)
    # per token: the trainer's recomputation when the behaviour log-probs are a vLLM engine's (None: they are the
    # trainer's)
    trainer_logprobs: list[float] | None = None
    reward: float | None = None  # terminal reward (leaves only)
    # decision points only: the episode had ended on this path (a feedback step wrote workflow.EPISODE_END), so nothing
    # was sampled or trained
    ended: bool = False
    item: dict[str, Any] | None = None  # the task item (root only)
    # decision points: token ids the policy conditioned on (chat template, system prompt, context, prefix); None:
    # materialised without tokenizers
    prompt_ids: list[int] | None = None
    systems: dict[str, str | None] | None = None  # root only: every role's system prompt (None: not recorded)
    prefixes: dict[str, str] | None = None  # root only: every role's response prefix (None: not recorded)
    # root only: whether contexts were wrapped in the agents' chat templates (None: no tokenizers given)
    use_chat_template: bool | None = None
    # root only: per agent, sha256 of its tokenizer's chat template (None in the list: it has none)
    chat_templates: list[str | None] | None = None

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


def _first_difference(a: Sequence, b: Sequence) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def chat_template_hash(tokenizer: Any) -> str | None:
    """sha256 (hex) of a tokenizer's chat template; None when it has none. A tokenizer with
    several named templates (a mapping) is hashed as its key-sorted JSON."""
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        return None
    text = template if isinstance(template, str) else json.dumps(template, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def context_settings(workflow: Workflow, tokenizers: Sequence[Any] | None = None,
                     use_chat_template: bool | None = None) -> dict[str, Any]:
    """The instance root's context-shaping fields: every role's system prompt and prefix and, with
    ``tokenizers`` (one per agent), ``use_chat_template`` and each agent's chat template hash."""
    roles = workflow.roles.values()
    out: dict[str, Any] = {"systems": {r.name: r.system for r in roles}, "prefixes": {r.name: r.prefix for r in roles}}
    if tokenizers is not None:
        out["use_chat_template"] = True if use_chat_template is None else bool(use_chat_template)
        out["chat_templates"] = [chat_template_hash(t) for t in tokenizers]
    return out


def _root_problems(root: TraceEntry, workflow: Workflow, tokenizers: Sequence[Any] | None,
                   use_chat_template: bool | None) -> list[str]:
    """Recorded context-shaping settings of one root that differ from the workflow's (and the tokenizers')."""
    where = f"instance {root.instance} node {root.node} (root)"
    out = []
    roles = workflow.roles.values()
    for name, recorded, now in (("system prompt", root.systems, {r.name: r.system for r in roles}),
                                ("response prefix", root.prefixes, {r.name: r.prefix for r in roles})):
        if recorded is None:
            continue
        for role in sorted(set(recorded) | set(now)):
            if role not in now:
                out.append(f"{where}: hidden state: the trace records a {name} for role {role}, which the "
                           "workflow does not have")
            elif role not in recorded:
                out.append(f"{where}: hidden state: the trace records no {name} for role {role}")
            elif recorded[role] != now[role]:
                out.append(f"{where}: hidden state: role {role}'s {name} is recorded as {str(recorded[role])[:60]!r}, "
                           f"the workflow has {str(now[role])[:60]!r}")
    if (use_chat_template is not None and root.use_chat_template is not None
        and root.use_chat_template != use_chat_template):
        out.append(f"{where}: hidden state: recorded use_chat_template={root.use_chat_template}, replayed "
                   f"with {use_chat_template}")
    if tokenizers is not None and root.chat_templates is not None:
        if len(root.chat_templates) != len(tokenizers):
            out.append(f"{where}: hidden state: chat templates recorded for {len(root.chat_templates)} agents, "
                       f"{len(tokenizers)} tokenizers given")
        for agent, (recorded_hash, tok) in enumerate(zip(root.chat_templates, tokenizers)):
            if chat_template_hash(tok) != recorded_hash:
                out.append(f"{where}: hidden state: agent {agent}'s chat template (sha256 {str(recorded_hash)[:12]}) "
                           f"differs from its tokenizer's (sha256 {str(chat_template_hash(tok))[:12]})")
    return out


def replay_check(entries: Sequence[TraceEntry], workflow: Workflow, tokenizers: Sequence[Any] | None = None,
                 use_chat_template: bool | None = None) -> list[str]:
    """Re-assemble each context (and re-run each feedback step) from its trace prefix.

    Returns one message per mismatch, naming the entry; an empty list means the trace is the
    state. A mismatch is hidden state: something the context depended on was not recorded.
    Each root's recorded system prompts and prefixes must be the workflow's. With ``tokenizers``
    (one per agent), token ids are checked too: each agent's chat template hash, each decision's
    recorded ``prompt_ids`` against :func:`~c3_plugin.core.protocol.encode_prompt` of the recorded
    context (with the workflow's system prompt and ``use_chat_template``: the argument, else the
    root's recorded value, else True), and each message's token ids, decoded without special
    tokens, against its text. Checks whose fields a trace lacks (older traces) are skipped.
    """
    by_node = {(e.instance, e.node): e for e in entries}
    problems = []
    encoded: dict[tuple, list[int]] = {}
    for entry in entries:
        if entry.kind == "instance":
            problems.extend(_root_problems(entry, workflow, tokenizers, use_chat_template))
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
            if tokenizers is not None:
                chat = use_chat_template if use_chat_template is not None else root.use_chat_template
                problems.extend(_token_problems(where, entry, workflow, tokenizers, True if chat is None else chat,
                                                encoded))
        else:
            latest = workflow.latest_outputs(outputs)
            expected = workflow.feedback[step.name](item, {r: latest.get(r, "") for r in step.reads})
            if expected != entry.message:
                problems.append(f"{where}: hidden state: feedback re-run from the trace gives a different output")
    return problems


def _token_problems(where: str, entry: TraceEntry, workflow: Workflow, tokenizers: Sequence[Any],
                    use_chat_template: bool, cache: dict[tuple, list[int]]) -> list[str]:
    """A decision entry's recorded token ids against its re-encoded prompt and its message text."""
    if entry.agent is None or not 0 <= entry.agent < len(tokenizers):
        return [f"{where}: agent {entry.agent} has no tokenizer among the {len(tokenizers)} given"]
    tok = tokenizers[entry.agent]
    out = []
    if entry.prompt_ids is not None:
        system = workflow.roles[entry.role].system
        key = (entry.agent, entry.context, entry.prefix, system, use_chat_template)
        if key not in cache:
            cache[key] = encode_prompt(tok, Prompt(entry.context, entry.role, entry.agent, entry.prefix, system),
                                       use_chat_template)
        ids = cache[key]
        if ids != list(entry.prompt_ids):
            at = _first_difference(ids, entry.prompt_ids)
            out.append(f"{where}: hidden state: recorded prompt token ids differ from the re-encoded context at token "
                       f"{at} (recorded {list(entry.prompt_ids[at:at + 5])}, re-encoded {ids[at:at + 5]}; "
                       f"{len(entry.prompt_ids)} vs {len(ids)} tokens)")
    text = tok.decode(list(entry.token_ids), skip_special_tokens=True)
    if text != entry.message:
        at = _first_difference(text, entry.message)
        out.append(f"{where}: message token ids decode to a different text at char {at}: "
                   f"recorded {entry.message[at:at + 40]!r}, decoded {text[at:at + 40]!r}")
    return out
