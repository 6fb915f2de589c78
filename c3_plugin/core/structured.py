"""JSON skeletons for role-owned assignments: the schema is forced, only the values are sampled.

A role that owns some ``(day, field)`` slots of a plan writes exactly::

    {"assignments": [{"day": 1, "field": "current_city", "value": "..."}, {"day": 1, "field": ...}]}

(``json.dumps`` spacing). The prompt ends with :meth:`Skeleton.prefill`, so generation
starts inside the first value. :class:`SkeletonLogitsProcessor` lets the policy pick any
token that keeps the value a plain JSON string (no ``"``, backslash or control character)
or the close token (a lone ``"``); after a close it forces the token ids of the schema
text up to the next value's opening quote, and after the last value ``}]}`` then EOS.
:func:`loss_mask_for` replays a generated sequence through the same state machine: 1 for
the tokens the policy chose (value tokens and a close it chose), 0 for forced ones (schema
text, a close forced at ``max_value_tokens``, EOS). Forced segments are tokenized on their
own and recorded as ids, so the message's tokens may differ from a canonical tokenization
of its text; the tokenizer must decode each segment back to the same text (byte-level BPE
does).

For free-text generation of the same format, :func:`json_complete` and :class:`JsonStop`
stop a sequence once the top-level object closes, and :func:`parse_assignments` is the
strict parser rewards should use.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from transformers import LogitsProcessor, StoppingCriteria

_FORBIDDEN_IN_VALUE = re.compile(r'["\\\x00-\x1f\x7f]')


@dataclass(frozen=True)
class Skeleton:
    """The ordered ``(day, field)`` slots one agent owns, and the most tokens the policy may spend on one value."""

    slots: tuple[tuple[int, str], ...]  # (day, field) pairs in output order
    max_value_tokens: int = 64  # policy tokens per value; the close is forced after this many

    def __post_init__(self) -> None:
        slots = tuple((day, field) for day, field in self.slots)
        if not slots:
            raise ValueError("Skeleton needs at least one (day, field) slot; give the agent's owned slots")
        for day, field in slots:
            if isinstance(day, bool) or not isinstance(day, int) or not isinstance(field, str) or not field:
                raise ValueError(f"Skeleton slot {(day, field)!r} must be (int day, non-empty str field)")
        if int(self.max_value_tokens) < 1:
            raise ValueError(f"Skeleton max_value_tokens must be >= 1, got {self.max_value_tokens}")
        object.__setattr__(self, "slots", slots)

    def _open(self, k: int) -> str:
        day, field = self.slots[k]
        return '{"day": ' + json.dumps(day) + ', "field": ' + json.dumps(field) + ', "value": "'

    def prefill(self) -> str:
        """Text up to and including the opening quote of the first value (the role's response prefix)."""
        return '{"assignments": [' + self._open(0)

    def between(self, k: int) -> str:
        """Forced text after value ``k``'s closing quote up to value ``k + 1``'s opening quote."""
        if not 0 <= k < len(self.slots) - 1:
            raise IndexError(f"between({k}): the skeleton has {len(self.slots)} values, so k must be in [0, "
                             f"{len(self.slots) - 2}]")
        return "}, " + self._open(k + 1)

    def closing(self) -> str:
        """Forced text after the last value's closing quote."""
        return "}]}"

    def render(self, values: Sequence[str]) -> str:
        """The full action text for ``values`` (JSON-escaped), equal to ``json.dumps`` of the assignments."""
        if len(values) != len(self.slots):
            raise ValueError(f"render: got {len(values)} values for {len(self.slots)} slots")
        parts = [self.prefill()]
        for k, v in enumerate(values):
            parts += [json.dumps(v)[1:-1], '"', self.between(k) if k < len(values) - 1 else self.closing()]
        return "".join(parts)


# ---------------------------------------------------------------- per-tokenizer tables

@dataclass(frozen=True)
class _Compiled:
    """A skeleton as token ids: ``segments[k]`` is forced after value ``k`` closes (the last one ends with EOS)."""

    segments: tuple[tuple[int, ...], ...]
    max_value_tokens: int


class _TokenizerTables:
    """What the grammar needs from one tokenizer, computed once: the value vocabulary and the special ids."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer
        if tokenizer.eos_token_id is None:
            raise ValueError("structured generation needs a tokenizer with an eos_token_id")
        self.eos = int(tokenizer.eos_token_id)
        self.pad = int(tokenizer.pad_token_id) if tokenizer.pad_token_id is not None else self.eos
        close = tokenizer('"', add_special_tokens=False)["input_ids"]
        if len(close) != 1:
            raise ValueError(f'the tokenizer encodes a lone \'"\' as {close}; the skeleton grammar '
                             'needs it to be one token')
        self.close = int(close[0])
        self.value_ok = self._value_vocab(tokenizer)
        self.value_ok[self.close] = True
        self._masks: dict[tuple[str, int], torch.Tensor] = {}
        self.compiled: dict[tuple[Skeleton, int], _Compiled] = {}

    @staticmethod
    def _value_vocab(tokenizer: Any) -> list[bool]:
        """Per token id: may it appear inside a JSON string value (decoded text has no quote, backslash, control
        char)?"""
        size = len(tokenizer)
        texts = tokenizer.batch_decode([[i] for i in range(size)], skip_special_tokens=False,
                                       clean_up_tokenization_spaces=False)
        special = set(tokenizer.all_special_ids) | {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
        return [i not in special and not _FORBIDDEN_IN_VALUE.search(t) for i, t in enumerate(texts)]

    def mask(self, width: int, device: torch.device) -> torch.Tensor:
        """The value vocabulary (close token included) as a bool vector over ``width`` logits."""
        key = (str(device), width)
        if key not in self._masks:
            m = torch.zeros(width, dtype=torch.bool)
            n = min(width, len(self.value_ok))
            m[:n] = torch.tensor(self.value_ok[:n], dtype=torch.bool)
            self._masks[key] = m.to(device)
        return self._masks[key]

    def encode_exact(self, text: str) -> tuple[int, ...]:
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        back = self.tokenizer.decode(ids, clean_up_tokenization_spaces=False)
        if back != text:
            raise ValueError(f"the tokenizer does not round-trip the schema text {text!r} (decodes to {back!r}); "
                             "structured generation needs a byte-level tokenizer")
        return tuple(int(i) for i in ids)

    def compile(self, skeleton: Skeleton, max_value_tokens: int | None = None) -> _Compiled:
        limit = int(max_value_tokens or skeleton.max_value_tokens)
        key = (skeleton, limit)
        if key not in self.compiled:
            last = len(skeleton.slots) - 1
            segs = [self.encode_exact(skeleton.between(k)) for k in range(last)]
            segs.append(self.encode_exact(skeleton.closing()) + (self.eos,))
            self.compiled[key] = _Compiled(tuple(segs), limit)
        return self.compiled[key]


_TABLES: dict[int, _TokenizerTables] = {}


def _tables(tokenizer: Any) -> _TokenizerTables:
    """The cached tables of ``tokenizer`` (built on first use)."""
    t = _TABLES.get(id(tokenizer))
    if t is None or t.tokenizer is not tokenizer:
        t = _TABLES[id(tokenizer)] = _TokenizerTables(tokenizer)
    return t


def max_completion_tokens(tokenizer: Any, skeleton: Skeleton, max_value_tokens: int | None = None) -> int:
    """Worst-case message length under the skeleton: forced ids (EOS included) plus full values and their closes."""
    c = _tables(tokenizer).compile(skeleton, max_value_tokens)
    return sum(len(s) for s in c.segments) + len(c.segments) * (c.max_value_tokens + 1)


def value_vocabulary(tokenizer: Any) -> list[bool]:
    """Per token id, whether the policy may sample it inside a value (the close token included)."""
    return list(_tables(tokenizer).value_ok)


# ---------------------------------------------------------------- the state machine

class _Row:
    """Where one sequence stands in its skeleton: inside value ``value`` (``count`` tokens so far) or in a forced
    segment."""

    __slots__ = ("c", "t", "value", "count", "seg", "pos", "done")

    def __init__(self, compiled: _Compiled, tables: _TokenizerTables):
        self.c, self.t = compiled, tables
        self.value, self.count, self.seg, self.pos, self.done = 0, 0, None, 0, False

    def forced(self) -> int | None:
        """The token the grammar forces next, or None when the policy chooses (inside a value)."""
        if self.done:
            return self.t.pad
        if self.seg is not None:
            return self.seg[self.pos]
        return self.t.close if self.count >= self.c.max_value_tokens else None

    def advance(self, token: int) -> int:
        """Consume ``token``; 1 if the policy chose it, 0 if it was forced."""
        if self.done:
            return 0
        expected = self.forced()
        if expected is not None and token != expected:
            raise ValueError(f"token {token} breaks the skeleton: expected forced token {expected}")
        if self.seg is not None:
            self.pos += 1
            if self.pos == len(self.seg):
                self.done = self.value == len(self.c.segments) - 1
                self.seg, self.value, self.count = None, self.value + (not self.done), 0
            return 0
        if token == self.t.close:
            self.seg, self.pos = self.c.segments[self.value], 0
            return int(expected is None)
        if not self.t.value_ok[token]:
            raise ValueError(f"token {token} ({self.t.tokenizer.decode([token])!r}) is not allowed inside a JSON value")
        self.count += 1
        return 1


def loss_mask_for(tokenizer: Any, skeleton: Skeleton, token_ids: Sequence[int],
                  max_value_tokens: int | None = None) -> list[int]:
    """Per generated token: 1 chosen by the policy (value tokens, a close it chose), 0 forced by the skeleton.

    ``token_ids`` start inside the first value (the prompt ended with ``prefill()``); raises
    ValueError when they do not follow the skeleton."""
    t = _tables(tokenizer)
    row = _Row(t.compile(skeleton, max_value_tokens), t)
    return [row.advance(int(tok)) for tok in token_ids]


def encode_values(tokenizer: Any, skeleton: Skeleton, values: Sequence[str],
                  max_value_tokens: int | None = None) -> tuple[list[int], list[int]]:
    """The exact completion ids a role action with ``values`` has under ``skeleton`` after the
    prefill, and their loss mask (as :func:`loss_mask_for` gives it).

    Per value: its raw text tokenized on its own (no special tokens), the close token, then the
    forced segment (``between``; after the last value ``closing`` and EOS). The mask is 1 on
    value tokens and a close the policy would choose, 0 on forced ones. Raises ValueError for a
    wrong number of values, a value with a character a value may not hold (quote, backslash,
    control character), a value token outside the value vocabulary, or a value longer than the
    per-value token cap (the grammar would have forced its close earlier)."""
    if isinstance(values, str) or len(values) != len(skeleton.slots):
        raise ValueError(f"encode_values: got {0 if isinstance(values, str) else len(values)} values for "
                         f"{len(skeleton.slots)} slots")
    t = _tables(tokenizer)
    c = t.compile(skeleton, max_value_tokens)
    ids: list[int] = []
    for k, v in enumerate(values):
        if not isinstance(v, str):
            raise ValueError(f"encode_values: value {k} is {type(v).__name__}, not str")
        if _FORBIDDEN_IN_VALUE.search(v):
            raise ValueError(f"encode_values: value {k} {v!r} holds a character a JSON value may not "
                             "(quote, backslash, control)")
        vids = [int(i) for i in tokenizer(v, add_special_tokens=False)["input_ids"]] if v else []
        if tokenizer.decode(vids, clean_up_tokenization_spaces=False) != v:
            raise ValueError(f"encode_values: value {k} {v!r} does not round-trip through the tokenizer")
        if len(vids) > c.max_value_tokens:
            raise ValueError(f"encode_values: value {k} has {len(vids)} tokens, more than the cap {c.max_value_tokens}")
        ids += vids + [t.close] + list(c.segments[k])
    return ids, loss_mask_for(tokenizer, skeleton, ids, max_value_tokens)


class SkeletonLogitsProcessor(LogitsProcessor):
    """Constrain ``generate`` to the skeletons: free choice inside values, forced schema ids elsewhere.

    ``skeletons[p]`` is prompt ``p``'s skeleton; row ``r`` of the batch belongs to prompt
    ``r // num_return_sequences``. ``prompt_len`` is the (padded) prompt width, each prompt
    ending with its skeleton's ``prefill()``. ``max_value_tokens`` overrides the skeletons'
    own limit when given. Returns new scores (the raw logits ``generate`` records are untouched).
    """

    def __init__(self, tokenizer: Any, skeletons: Sequence[Skeleton], prompt_len: int,
                 max_value_tokens: int | None = None, num_return_sequences: int = 1):
        self.tables = _tables(tokenizer)
        compiled = [self.tables.compile(s, max_value_tokens) for s in skeletons]
        self.rows = [_Row(compiled[r // num_return_sequences], self.tables)
                     for r in range(len(compiled) * num_return_sequences)]
        self.seen = int(prompt_len)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[0] != len(self.rows):
            raise ValueError(f"SkeletonLogitsProcessor was built for {len(self.rows)} rows but generate has "
                             f"{input_ids.shape[0]}; pass one skeleton per prompt and the num_return_sequences used")
        if input_ids.shape[1] > self.seen:
            for row, new in zip(self.rows, input_ids[:, self.seen:].tolist()):
                for token in new:
                    row.advance(token)
            self.seen = input_ids.shape[1]
        return scores.masked_fill(~self._allowed(scores), float("-inf"))

    def _allowed(self, scores: torch.Tensor) -> torch.Tensor:
        """``[rows, vocab]`` bool: the value vocabulary for choosing rows, one id for forced rows."""
        forced = [row.forced() for row in self.rows]
        choose = torch.tensor([f is None for f in forced], dtype=torch.bool, device=scores.device)
        ids = torch.tensor([0 if f is None else f for f in forced], dtype=torch.long, device=scores.device)
        one = torch.zeros_like(scores, dtype=torch.bool).scatter_(1, ids.unsqueeze(1), True) & ~choose.unsqueeze(1)
        return one | (choose.unsqueeze(1) & self.tables.mask(scores.shape[-1], scores.device).unsqueeze(0))


# ---------------------------------------------------------------- free-text JSON

class _JsonScan:
    """Incremental bracket matcher: a stack of ``{``/``[`` outside strings (with escapes)."""

    __slots__ = ("stack", "in_string", "escape", "started", "closed", "bad")

    def __init__(self) -> None:
        self.stack: list[str] = []
        self.in_string = self.escape = self.started = self.closed = self.bad = False

    def feed(self, text: str) -> "_JsonScan":
        for ch in text:
            if self.bad:
                break
            if self.in_string:
                self.escape, self.in_string = (False, True) if self.escape else (ch == "\\", ch != '"')
            elif self.closed or not self.started:
                self._outside(ch)
            elif ch == '"':
                self.in_string = True
            elif ch in "{[":
                self.stack.append(ch)
            elif ch in "}]":
                self._close(ch)
        return self

    def _outside(self, ch: str) -> None:
        """Before the top-level object only whitespace then ``{``; after it only whitespace."""
        if ch.isspace():
            return
        if self.closed or ch != "{":
            self.bad = True
        else:
            self.started = True
            self.stack.append(ch)

    def _close(self, ch: str) -> None:
        if not self.stack or self.stack[-1] != ("{" if ch == "}" else "["):
            self.bad = True  # e.g. "}" while a "[" is open
            return
        self.stack.pop()
        self.closed = not self.stack

    @property
    def complete(self) -> bool:
        return self.closed and not self.bad


def json_complete(text: str) -> bool:
    """True when ``text`` is one top-level JSON object whose brackets all match in order (surrounding whitespace
    allowed)."""
    return _JsonScan().feed(text).complete


class JsonStop(StoppingCriteria):
    """Stop a row once ``prefill + generated text`` closes its top-level JSON object.

    ``prefill_text`` is one string for every row or one per row; ``prompt_len`` the padded
    prompt width. ``stop_lengths[r]`` is the number of generated tokens up to and including
    the one that closed row ``r``'s object (None while open). Rows whose brackets mismatch
    never complete and run on to EOS or the token cap.
    """

    def __init__(self, tokenizer: Any, prompt_len: int, prefill_text: str | Sequence[str] = ""):
        self.tokenizer = tokenizer
        self.prompt_len = int(prompt_len)
        self.prefill_text = prefill_text
        self.scans: list[_JsonScan] = []
        self.stop_lengths: list[int | None] = []
        self.seen = self.prompt_len

    def _start(self, rows: int) -> None:
        prefills = [self.prefill_text] * rows if isinstance(self.prefill_text, str) else list(self.prefill_text)
        if len(prefills) != rows:
            raise ValueError(f"JsonStop got {len(prefills)} prefill texts for {rows} rows; give one "
                             "per row or one string")
        self.scans = [_JsonScan().feed(p) for p in prefills]
        self.stop_lengths = [0 if s.closed else None for s in self.scans]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        if not self.scans:
            self._start(input_ids.shape[0])
        for step in range(self.seen, input_ids.shape[1]):
            texts = self.tokenizer.batch_decode(input_ids[:, step:step + 1].tolist(), skip_special_tokens=True)
            for r, (scan, text) in enumerate(zip(self.scans, texts)):
                if self.stop_lengths[r] is None and scan.feed(text).closed:
                    self.stop_lengths[r] = step + 1 - self.prompt_len
        self.seen = input_ids.shape[1]
        return torch.tensor([s is not None for s in self.stop_lengths], dtype=torch.bool, device=input_ids.device)


def parse_assignments(text: str) -> list[dict] | None:
    """The ``assignments`` list of a complete JSON object, or None for anything else (strict: no repair)."""
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("assignments"), list):
        return None
    items = obj["assignments"]
    return items if all(isinstance(a, dict) for a in items) else None


# ---------------------------------------------------------------- one row at a time (another engine's sampling)

class SkeletonRowMask:
    """One sequence's skeleton as a per-step logits mask, for an engine that asks per request (vLLM's logits
    processors): called with the sequence's output ids so far and its logits row, it advances the skeleton's
    state machine over the new ids and masks the row to the forced id, or to the value vocabulary while the
    policy chooses (:class:`SkeletonLogitsProcessor`'s rule for one row)."""

    def __init__(self, tokenizer: Any, skeleton: Skeleton):
        self.tables = _tables(tokenizer)
        self.row = _Row(self.tables.compile(skeleton), self.tables)
        self.seen = 0

    def __call__(self, output_ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        for token in output_ids[self.seen:]:
            self.row.advance(int(token))
        self.seen = len(output_ids)
        forced = self.row.forced()
        if forced is not None:
            keep = torch.full_like(logits, float("-inf"))
            keep[forced] = logits[forced]
            return keep
        return logits.masked_fill(~self.tables.mask(logits.shape[-1], logits.device), float("-inf"))


def json_stop_length(tokenizer: Any, prefill: str, token_ids: Sequence[int]) -> int | None:
    """Tokens up to and including the one after which ``prefill`` + the decoded tokens close one JSON
    object (0 when the prefill already does; None when they never do): :class:`JsonStop`'s ``stop_lengths``
    after sampling, each token decoded on its own as there."""
    scan = _JsonScan().feed(prefill)
    if scan.closed:
        return 0
    for i, text in enumerate(tokenizer.batch_decode([[int(t)] for t in token_ids], skip_special_tokens=True)):
        if scan.feed(text).closed:
            return i + 1
    return None
