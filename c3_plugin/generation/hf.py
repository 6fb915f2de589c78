"""The Hugging Face generation backend behind :class:`~c3_plugin.core.protocol.GenerationBackend`.

All prompts of one schedule step are sampled in one batched ``generate`` call per agent
(left padding, ``n`` return sequences per prompt). Each prompt token is computed once
(:func:`prefill_once_generate`): the prefix all the call's prompts share once for the batch
(:func:`shared_pad`), each prompt's remainder once, and the KV cache repeated for its ``n`` samples,
where ``generate(num_return_sequences=n)`` would prefill each prompt ``n`` times; the samples are the
same for the same seed. The prompt is the role's chat
template (when the tokenizer has one) with the context as the user turn, followed by
the role's response prefix as an assistant prefill.

Exact tokens. Sampling runs from an explicit :func:`sampling_config` (temperature, top-p,
top-k and nothing else), with the model's own ``generation_config`` set aside for the call,
so no setting shipped with a checkpoint (repetition penalty, min-p, a default top-k) shapes
the samples without being in the recorded log-probs. Generation stops at every
end-of-sequence id the model's generation config declares and the tokenizer's EOS
(:func:`stop_ids`: Qwen declares two, one of them also its pad token). A message is cut
right after its first stop token, which it keeps; no token inside a message is ever
removed.

Behaviour log-probs are those of the sampled tokens under the policy's temperature-scaled
softmax over the full vocabulary (before top-p / top-k truncation), which is what the PPO
ratio's denominator must be. They are recomputed after sampling by the same padded forward
pass the update uses (:func:`c3_plugin.core.loss.token_logprobs`), ``micro_batch_size``
sequences at a time: full-vocabulary logits are never held for more than one micro-batch,
and the recorded values equal what the update recomputes before it changes the weights.
Generation runs in one autocast region of the policy's compute dtype
(:func:`c3_plugin.scale.precision.compute_context`).

Structured roles: when ``grammar(prompt)`` returns a :class:`~c3_plugin.core.structured.Skeleton`,
that prompt is sampled under :class:`~c3_plugin.core.structured.SkeletonLogitsProcessor` (schema
tokens forced, values sampled) and its generations carry a ``loss_mask`` (0 on forced
tokens). Its token cap is raised to the skeleton's worst case
(:func:`~c3_plugin.core.structured.max_completion_tokens`) so a message is never cut mid-schema;
``max_value_tokens`` is what bounds a structured message. Prompts with and without a
skeleton go to separate ``generate`` calls. Behaviour log-probs stay those of the raw
policy (forced tokens are out of the loss). With ``json_stop`` a free-text row stops once
its prefix plus text closes a JSON object (:class:`~c3_plugin.core.structured.JsonStop`).
"""

from __future__ import annotations

import copy
import inspect
from typing import Any, Callable, Mapping, Sequence

import torch
from transformers import DynamicCache, GenerationConfig, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

from c3_plugin.core.loss import token_logprobs
from c3_plugin.core.protocol import Generation, Prompt, Sampling, encode_prompt
from c3_plugin.core.structured import JsonStop, Skeleton, SkeletonLogitsProcessor, loss_mask_for, max_completion_tokens
from c3_plugin.scale.precision import compute_context, compute_module


class HFBackend:
    """Batched sampling from ``transformers`` causal LMs, one model (or adapter) per agent.

    ``policy(agent)`` returns the module that plays ``agent`` (for per-role LoRA adapters it
    activates the agent's adapter first); ``tokenizers[agent]`` its tokenizer.
    """

    def __init__(self, policy: Callable[[int], torch.nn.Module], tokenizers: Sequence[Any],
                 use_chat_template: bool = True, max_batch: int | None = None, micro_batch_size: int = 8,
                 grammar: Callable[[Prompt], Skeleton | None] | None = None, json_stop: bool = False,
                 prefill_once: bool = True):
        self.policy = policy
        self.tokenizers = list(tokenizers)
        self.use_chat_template = use_chat_template
        self.max_batch = max_batch  # cap on sequences per generate call (None: all at once)
        # sequences per forward pass of the behaviour log-prob recomputation
        self.micro_batch_size = int(micro_batch_size)
        self.grammar = grammar  # per prompt: the JSON skeleton its message must follow (None: free text)
        self.json_stop = json_stop  # stop a free-text message once prefix + text is a complete JSON object
        # prefill each prompt once and sample n from its KV cache (False: generate's n prefills per prompt)
        self.prefill_once = prefill_once

    def for_policy(self, policy: Callable[[int], torch.nn.Module]) -> "HFBackend":
        """The same backend (settings, grammar, tokenizers) sampling from another ``policy``."""
        clone = copy.copy(self)
        clone.policy = policy
        return clone

    @torch.no_grad()
    def generate(self, prompts: Sequence[Prompt], n: int, sampling: Sampling,
                 generate_kwargs: Mapping[str, Any] | None = None) -> list[list[Generation]]:
        """``n`` messages per prompt; ``generate_kwargs``: a generation hook's extra HF ``generate`` kwargs
        (:func:`merge_generate_kwargs`)."""
        out: list[list[Generation] | None] = [None] * len(prompts)
        skeletons = [self._skeleton(p) for p in prompts]
        groups: dict[tuple[int, bool], list[int]] = {}
        for i, p in enumerate(prompts):
            groups.setdefault((p.agent, skeletons[i] is not None), []).append(i)
        for (agent, structured), idx in groups.items():
            per_call = max(1, (self.max_batch or len(idx) * n) // n)
            for start in range(0, len(idx), per_call):
                chunk = idx[start:start + per_call]
                gens = self._generate_agent(agent, [prompts[i] for i in chunk], n, sampling,
                                            [skeletons[i] for i in chunk] if structured else None, generate_kwargs)
                for i, g in zip(chunk, gens):
                    out[i] = g
        return out  # type: ignore[return-value]

    def _skeleton(self, prompt: Prompt) -> Skeleton | None:
        """The prompt's skeleton under ``grammar``; its prefix must be the skeleton's prefill."""
        skeleton = self.grammar(prompt) if self.grammar is not None else None
        if skeleton is not None and prompt.prefix != skeleton.prefill():
            raise ValueError(f"role {prompt.role!r}: a structured prompt's prefix must equal its skeleton's prefill() "
                             f"({skeleton.prefill()!r}), got {prompt.prefix!r}; set the role's prefix to the prefill")
        return skeleton

    def _caps(self, tok: Any, prompts: Sequence[Prompt], sampling: Sampling,
              skeletons: Sequence[Skeleton] | None) -> list[int]:
        """Per prompt token cap: the role's (or the default), raised to the skeleton's worst case."""
        caps = [p.max_new_tokens or sampling.max_new_tokens for p in prompts]
        if skeletons is not None:
            caps = [max(c, max_completion_tokens(tok, s)) for c, s in zip(caps, skeletons)]
        return caps

    def _generate_agent(self, agent: int, prompts: Sequence[Prompt], n: int, sampling: Sampling,
                        skeletons: Sequence[Skeleton] | None = None,
                        generate_kwargs: Mapping[str, Any] | None = None) -> list[list[Generation]]:
        tok = self.tokenizers[agent]
        model = self.policy(agent)
        device = next(model.parameters()).device
        pad = pad_id(tok)
        encoded = [encode_prompt(tok, p, self.use_chat_template) for p in prompts]
        input_ids, attention, shared = shared_pad(encoded, pad) if self.prefill_once else (*_left_pad(encoded, pad), 0)
        width = input_ids.shape[1]
        caps = self._caps(tok, prompts, sampling, skeletons)
        max_new = max(caps)
        rows_per_prompt = 1 if sampling.greedy else n
        stops = stop_ids(model, tok)
        config = sampling_config(sampling, max_new, stops, pad, rows_per_prompt)
        kwargs: dict[str, Any] = {}
        json_stop = None
        if skeletons is not None:
            kwargs["logits_processor"] = LogitsProcessorList([SkeletonLogitsProcessor(
                tok, skeletons, width, num_return_sequences=rows_per_prompt)])
        elif self.json_stop:
            json_stop = JsonStop(tok, width, [p.prefix for p in prompts for _ in range(rows_per_prompt)])
            kwargs["stopping_criteria"] = StoppingCriteriaList([json_stop])
        hook_stop = None
        if generate_kwargs:
            kwargs, hook_stop = merge_generate_kwargs(kwargs, generate_kwargs, width)
        was_training = model.training
        model.eval()
        inner = compute_module(model)
        own_config = inner.generation_config
        # the model's shipped defaults must not fill what the explicit config leaves unset
        inner.generation_config = config
        try:
            with compute_context(model):
                if self.prefill_once:
                    seqs = prefill_once_generate(model, input_ids.to(device), attention.to(device), config, shared,
                                                 **kwargs)
                else:
                    seqs = _generate(model, input_ids.to(device), attention.to(device), config, **kwargs)
                seqs = seqs[:, width:].cpu()
        finally:
            inner.generation_config = own_config
            if was_training:
                model.train()
        json_stops = json_stop.stop_lengths if json_stop is not None else [None] * seqs.shape[0]
        if hook_stop is not None:  # a row ends where the hook's stopping criteria stopped it
            json_stops = hook_stop.merged(json_stops, seqs.shape[0])
        if sampling.greedy and n > 1:
            seqs = seqs.repeat_interleave(n, dim=0)
            json_stops = [s for s in json_stops for _ in range(n)]
        completions = [_trim(seqs[row].tolist(), caps[row // n], json_stops[row], stops)
                       for row in range(seqs.shape[0])]
        prompt_ids = [encoded[row // n] for row in range(seqs.shape[0])]  # re-derivable: encode_prompt is deterministic
        logprobs = self.behaviour_logprobs(agent, prompt_ids, completions,
                                           1.0 if sampling.greedy else sampling.temperature)
        masks = ([loss_mask_for(tok, skeletons[row // n], ids) for row, ids in enumerate(completions)]
                 if skeletons is not None else [None] * len(completions))
        gens = [Generation(text=tok.decode(ids, skip_special_tokens=True), token_ids=ids, logprobs=lp, loss_mask=m)
                for ids, lp, m in zip(completions, logprobs, masks)]
        return [gens[k * n:(k + 1) * n] for k in range(len(prompts))]

    def behaviour_logprobs(self, agent: int, prompt_ids: list[list[int]], completions: list[list[int]],
                           temperature: float) -> list[list[float]]:
        """Log-probs of ``completions`` under ``policy(agent)``, one micro-batch per forward pass."""
        model = self.policy(agent)
        was_training = model.training
        model.eval()
        try:
            return token_logprobs(model, prompt_ids, completions, pad_id(self.tokenizers[agent]), temperature,
                                  self.micro_batch_size)
        finally:
            if was_training:
                model.train()


def pad_id(tok: Any) -> int:
    """The id that pads batches: the tokenizer's pad token, else its EOS."""
    return tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id


def stop_ids(model: Any, tok: Any) -> list[int]:
    """Every end-of-sequence id: those the model's generation config declares, then the tokenizer's EOS."""
    declared = getattr(getattr(compute_module(model), "generation_config", None), "eos_token_id", None)
    ids = list(declared) if isinstance(declared, (list, tuple)) else ([declared] if declared is not None else [])
    if tok.eos_token_id is not None:
        ids.append(tok.eos_token_id)
    out = list(dict.fromkeys(int(i) for i in ids))
    if not out:
        raise ValueError("the tokenizer has no EOS token and the model's generation config declares none; "
                         "set tokenizer.eos_token or model.generation_config.eos_token_id")
    return out


def sampling_config(sampling: Sampling, max_new_tokens: int, stops: Sequence[int], pad: int,
                    num_return_sequences: int) -> GenerationConfig:
    """The complete sampling specification of one ``generate`` call: temperature, top-p and top-k
    (0 = off) when sampling, argmax when greedy, every other logits processor off."""
    if sampling.greedy:
        shape: dict[str, Any] = {"do_sample": False}  # argmax: the sampling knobs are unused (and unset, so unflagged)
    else:
        shape = {"do_sample": True, "temperature": float(sampling.temperature), "top_p": float(sampling.top_p),
                 "top_k": int(sampling.top_k or 0)}
    return GenerationConfig(**shape, num_beams=1, max_new_tokens=int(max_new_tokens), min_new_tokens=0,
                            eos_token_id=list(stops), pad_token_id=pad, num_return_sequences=num_return_sequences,
                            repetition_penalty=1.0, typical_p=1.0, epsilon_cutoff=0.0, eta_cutoff=0.0,
                            no_repeat_ngram_size=0, renormalize_logits=False, return_dict_in_generate=False)


def prefill_once_generate(model: Any, input_ids: torch.Tensor, attention: torch.Tensor, config: GenerationConfig,
                          shared: int = 0, **kwargs: Any) -> torch.Tensor:
    """``model.generate``'s sequences (``config.num_return_sequences`` rows per prompt, prompt included), each
    prompt token's keys and values computed once. The first ``shared`` columns, the prefix every row starts with
    (:func:`shared_pad`), run forward once for the batch, their cache repeated for the rows; each row's remainder
    but its last token once per prompt (positions from the attention mask, as ``generate`` derives them); the cache
    repeated for the samples; then ``generate`` from it computes each sample's last prompt token and samples.
    Sampling draws the same random numbers as ``generate(num_return_sequences=n)`` (which prefills every sample
    whole), so a seed gives the same samples up to floating-point differences of the cached prefill."""
    rows, batch, width = int(config.num_return_sequences or 1), input_ids.shape[0], input_ids.shape[1]
    if width < 2 or (rows == 1 and (shared == 0 or batch == 1)):
        return _generate(model, input_ids, attention, config, **kwargs)
    # transformers >= 5.20 names the cache argument ``cache``, earlier versions ``past_key_values``
    key = "cache" if "cache" in inspect.signature(compute_module(model).forward).parameters else "past_key_values"
    cache = DynamicCache()
    head = attention[:, :-1]
    positions = (head.long().cumsum(-1) - 1).masked_fill(head == 0, 0)
    shared = min(int(shared), width - 1)
    if shared:
        model(input_ids=input_ids[:1, :shared], attention_mask=head[:1, :shared], position_ids=positions[:1, :shared],
              use_cache=True, logits_to_keep=1, **{key: cache})
        cache.batch_repeat_interleave(batch)
    if width - 1 > shared:
        model(input_ids=input_ids[:, shared:-1], attention_mask=head, position_ids=positions[:, shared:],
              use_cache=True, logits_to_keep=1, **{key: cache})
    cache.batch_repeat_interleave(rows)
    expanded = copy.deepcopy(config)
    expanded.num_return_sequences = 1
    return model.generate(input_ids=input_ids.repeat_interleave(rows, dim=0),
                          attention_mask=attention.repeat_interleave(rows, dim=0), generation_config=expanded,
                          **{key: cache}, **kwargs)


def _generate(model: Any, input_ids: torch.Tensor, attention: torch.Tensor, config: GenerationConfig,
              **kwargs: Any) -> torch.Tensor:
    """``model.generate`` as is: ``num_return_sequences`` rows per prompt, each prefilling the whole prompt."""
    return model.generate(input_ids=input_ids, attention_mask=attention, generation_config=config, **kwargs)


def shared_pad(encoded: Sequence[Sequence[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``(input_ids, attention_mask, shared)``: the prefix all prompts start with (``shared`` tokens, short of every
    prompt's last token) first, then each prompt's remainder, left-padded: ``[shared][pads][rest]``, so the shared
    columns are one computation for the batch. With nothing shared it is :func:`_left_pad`'s layout; the positions
    (from the mask) and what each token attends to are the same in both."""
    shared = min(len(e) for e in encoded) - 1
    first = encoded[0]
    for e in encoded[1:]:
        shared = next((i for i in range(shared) if e[i] != first[i]), shared)
    shared = max(shared, 0)
    input_ids, attention = _left_pad([e[shared:] for e in encoded], pad)
    if shared:
        head = torch.tensor([list(first[:shared])] * len(encoded), dtype=torch.long)
        input_ids = torch.cat([head, input_ids], dim=1)
        attention = torch.cat([torch.ones_like(head), attention], dim=1)
    return input_ids, attention, shared


def _left_pad(encoded: Sequence[Sequence[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` of the prompts, left-padded to a common width."""
    width = max(len(e) for e in encoded)
    input_ids = torch.full((len(encoded), width), pad, dtype=torch.long)
    attention = torch.zeros((len(encoded), width), dtype=torch.long)
    for r, ids in enumerate(encoded):
        input_ids[r, width - len(ids):] = torch.tensor(ids)
        attention[r, width - len(ids):] = 1
    return input_ids, attention


def _trim(ids: list[int], cap: int, json_stop: int | None, stops: Sequence[int]) -> list[int]:
    """A row's message tokens: up to the cap, a JSON stop, or its first stop token (kept), whichever
    comes first. Whatever follows is padding; nothing before it is removed."""
    ids = ids[: cap if json_stop is None else min(cap, json_stop)]
    stop_set = set(stops)
    end = next((i + 1 for i, t in enumerate(ids) if t in stop_set), len(ids))
    return ids[:end]


# ----- a generation hook's extra HF generate kwargs (``generation_hook``): merged into the backend's own

HOOK_KWARGS = ("logits_processor", "stopping_criteria", "prefix_allowed_tokens_fn", "bad_words_ids", "suppress_tokens",
               "sequence_bias", "streamer")


class RecordedStop(StoppingCriteria):
    """A hook's stopping criteria, recording how many tokens each row had generated when they first stopped it."""

    def __init__(self, criteria: Any, prompt_len: int):
        self.criteria = StoppingCriteriaList(_as_list(criteria))
        self.prompt_len = int(prompt_len)
        self.stop_lengths: list[int | None] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        done = self.criteria(input_ids, scores, **kwargs)  # one flag per row
        if not self.stop_lengths:
            self.stop_lengths = [None] * input_ids.shape[0]
        for r in torch.nonzero(done).reshape(-1).tolist():
            if self.stop_lengths[r] is None:
                self.stop_lengths[r] = input_ids.shape[1] - self.prompt_len
        return done

    def merged(self, other: Sequence[int | None] | None, rows: int) -> list[int | None]:
        """Per row, the earlier of this record and ``other`` (another criterion's stop lengths)."""
        mine = self.stop_lengths or [None] * rows
        theirs = list(other) if other else [None] * rows
        return [a if b is None else b if a is None else min(a, b) for a, b in zip(mine, theirs)]


def _as_list(x: Any) -> list[Any]:
    return [] if x is None else list(x) if isinstance(x,
                                                      (list, tuple, LogitsProcessorList, StoppingCriteriaList)) else [x]


def merge_generate_kwargs(own: dict[str, Any], extra: Mapping[str, Any],
                          prompt_len: int) -> tuple[dict[str, Any], RecordedStop | None]:
    """The HF backend's ``generate`` kwargs (``own``: its skeleton processor or JSON stop) with a hook's ``extra``
    ones: processors and stopping criteria appended to the backend's, the hook's stops recorded per row
    (:class:`RecordedStop`) so the message ends where they stopped it. Refuses kwargs outside :data:`HOOK_KWARGS`."""
    extra = {k: v for k, v in extra.items() if k != "do_sample"}
    bad = sorted(k for k in extra if k not in HOOK_KWARGS)
    if bad:
        raise ValueError(f"generate kwargs {bad} passed to _generate_completions are not supported: sampling is the "
                         "trainer config's (temperature, top_p, top_k, max_new_tokens), so that the recorded behaviour "
                         f"log-probs are the sampler's; shape tokens with {list(HOOK_KWARGS[:3])} instead")
    out = dict(own)
    for k, v in extra.items():
        if k not in ("logits_processor", "stopping_criteria"):
            out[k] = v
    if extra.get("logits_processor") is not None:
        out["logits_processor"] = LogitsProcessorList(_as_list(own.get("logits_processor"))
                                                      + _as_list(extra["logits_processor"]))
    stop = None
    if extra.get("stopping_criteria") is not None:
        stop = RecordedStop(extra["stopping_criteria"], prompt_len)
        out["stopping_criteria"] = StoppingCriteriaList(_as_list(own.get("stopping_criteria")) + [stop])
    return out, stop
