"""The Hugging Face generation backend behind :class:`~c3_plugin.rollout.GenerationBackend`.

All prompts of one schedule step are sampled in one batched ``generate`` call per agent
(left padding, ``n`` return sequences per prompt). The prompt is the role's chat
template (when the tokenizer has one) with the context as the user turn, followed by
the role's response prefix as an assistant prefill. Generation stops at EOS; the EOS
token is part of the message's tokens. Behaviour log-probs are those of the sampled
tokens under the policy's temperature-scaled softmax (the full vocabulary, before top-p /
top-k truncation), which is what the PPO ratio's denominator must be: read from
``generate``'s raw logits when they fit in ``logits_budget`` floats, otherwise recomputed
by one padded forward pass of the frozen policy (:func:`c3_plugin.loss.sequence_logprobs`).

Structured roles: when ``grammar(prompt)`` returns a :class:`~c3_plugin.structured.Skeleton`,
that prompt is sampled under :class:`~c3_plugin.structured.SkeletonLogitsProcessor` (schema
tokens forced, values sampled) and its generations carry a ``loss_mask`` (0 on forced
tokens). Its token cap is raised to the skeleton's worst case
(:func:`~c3_plugin.structured.max_completion_tokens`) so a message is never cut mid-schema;
``max_value_tokens`` is what bounds a structured message. Prompts with and without a
skeleton go to separate ``generate`` calls. Behaviour log-probs stay those of the raw
policy (forced tokens are out of the loss). With ``json_stop`` a free-text row stops once
its prefix plus text closes a JSON object (:class:`~c3_plugin.structured.JsonStop`).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from transformers import LogitsProcessorList, StoppingCriteriaList

from .loss import sequence_logprobs
from .rollout import Generation, Prompt, Sampling
from .structured import JsonStop, Skeleton, SkeletonLogitsProcessor, loss_mask_for, max_completion_tokens


def encode_prompt(tokenizer: Any, prompt: Prompt, use_chat_template: bool = True) -> list[int]:
    """Token ids the policy conditions on: chat-formatted context plus the response prefix."""
    if use_chat_template and getattr(tokenizer, "chat_template", None):
        messages = ([{"role": "system", "content": prompt.system}] if prompt.system else []) + [{"role": "user", "content": prompt.text}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    else:
        text = (prompt.system + "\n\n" if prompt.system else "") + prompt.text
        ids = tokenizer(text)["input_ids"]
    if prompt.prefix:
        ids = ids + tokenizer(prompt.prefix, add_special_tokens=False)["input_ids"]
    return list(ids)


class HFBackend:
    """Batched sampling from ``transformers`` causal LMs, one model (or adapter) per agent.

    ``policy(agent)`` returns the module that plays ``agent`` (for per-role LoRA adapters it
    activates the agent's adapter first); ``tokenizers[agent]`` its tokenizer.
    """

    def __init__(self, policy: Callable[[int], torch.nn.Module], tokenizers: Sequence[Any],
                 use_chat_template: bool = True, max_batch: int | None = None, logits_budget: int = 2**28,
                 grammar: Callable[[Prompt], Skeleton | None] | None = None, json_stop: bool = False):
        self.policy = policy
        self.tokenizers = list(tokenizers)
        self.use_chat_template = use_chat_template
        self.max_batch = max_batch  # cap on sequences per generate call (None: all at once)
        self.logits_budget = logits_budget  # keep generate's logits (sequences x steps x vocab) up to this many floats; else recompute
        self.grammar = grammar  # per prompt: the JSON skeleton its message must follow (None: free text)
        self.json_stop = json_stop  # stop a free-text message once prefix + text is a complete JSON object

    @torch.no_grad()
    def generate(self, prompts: Sequence[Prompt], n: int, sampling: Sampling) -> list[list[Generation]]:
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
                                            [skeletons[i] for i in chunk] if structured else None)
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

    def _caps(self, tok: Any, prompts: Sequence[Prompt], sampling: Sampling, skeletons: Sequence[Skeleton] | None) -> list[int]:
        """Per prompt token cap: the role's (or the default), raised to the skeleton's worst case."""
        caps = [p.max_new_tokens or sampling.max_new_tokens for p in prompts]
        if skeletons is not None:
            caps = [max(c, max_completion_tokens(tok, s)) for c, s in zip(caps, skeletons)]
        return caps

    def _generate_agent(self, agent: int, prompts: Sequence[Prompt], n: int, sampling: Sampling,
                        skeletons: Sequence[Skeleton] | None = None) -> list[list[Generation]]:
        tok = self.tokenizers[agent]
        model = self.policy(agent)
        device = next(model.parameters()).device
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        encoded = [encode_prompt(tok, p, self.use_chat_template) for p in prompts]
        input_ids, attention = _left_pad(encoded, pad)
        width = input_ids.shape[1]
        caps = self._caps(tok, prompts, sampling, skeletons)
        max_new = max(caps)
        rows_per_prompt = 1 if sampling.greedy else n
        kwargs: dict[str, Any] = {"max_new_tokens": max_new, "pad_token_id": pad, "eos_token_id": tok.eos_token_id,
                                  "num_return_sequences": rows_per_prompt}
        if sampling.greedy:  # one argmax decode per prompt, replicated n times
            kwargs.update(do_sample=False, num_beams=1, temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p,
                          top_k=sampling.top_k if sampling.top_k else 0)
        json_stop = None
        if skeletons is not None:
            kwargs["logits_processor"] = LogitsProcessorList([SkeletonLogitsProcessor(tok, skeletons, width, num_return_sequences=rows_per_prompt)])
        elif self.json_stop:
            json_stop = JsonStop(tok, width, [p.prefix for p in prompts for _ in range(rows_per_prompt)])
            kwargs["stopping_criteria"] = StoppingCriteriaList([json_stop])
        was_training = model.training
        model.eval()
        n_seq = len(encoded) * rows_per_prompt
        from_logits = n_seq * max_new * len(tok) <= self.logits_budget
        out = model.generate(input_ids=input_ids.to(device), attention_mask=attention.to(device),
                             output_logits=from_logits, return_dict_in_generate=True, **kwargs)
        seqs = out.sequences[:, width:]
        step_logp = None
        if from_logits and seqs.shape[1]:
            temperature = 1.0 if sampling.greedy else sampling.temperature
            logits = torch.stack(out.logits, dim=1).float() / temperature  # [n_seq, steps, vocab], raw (pre-processor) scores
            step_logp = (torch.gather(logits, -1, seqs[:, : logits.shape[1]].unsqueeze(-1)).squeeze(-1)
                         - torch.logsumexp(logits, -1)).cpu()
            del logits
        seqs = seqs.cpu()
        stops = json_stop.stop_lengths if json_stop is not None else [None] * seqs.shape[0]
        if sampling.greedy and n > 1:
            seqs = seqs.repeat_interleave(n, dim=0)
            step_logp = step_logp.repeat_interleave(n, dim=0) if step_logp is not None else None
            stops = [s for s in stops for _ in range(n)]
        if was_training:
            model.train()
        completions = [_trim(seqs[row].tolist(), caps[row // n], stops[row], tok.eos_token_id, pad) for row in range(seqs.shape[0])]
        prompt_ids = [encoded[row // n] for row in range(seqs.shape[0])]  # re-derivable: encode_prompt is deterministic
        if step_logp is not None:
            logprobs = [step_logp[row, : len(ids)].tolist() for row, ids in enumerate(completions)]
        else:
            logprobs = self.behaviour_logprobs(agent, prompt_ids, completions, 1.0 if sampling.greedy else sampling.temperature)
        masks = ([loss_mask_for(tok, skeletons[row // n], ids) for row, ids in enumerate(completions)]
                 if skeletons is not None else [None] * len(completions))
        gens = [Generation(text=tok.decode(ids, skip_special_tokens=True), token_ids=ids, logprobs=lp, loss_mask=m)
                for ids, lp, m in zip(completions, logprobs, masks)]
        return [gens[k * n:(k + 1) * n] for k in range(len(prompts))]

    @torch.no_grad()
    def behaviour_logprobs(self, agent: int, prompt_ids: list[list[int]], completions: list[list[int]],
                           temperature: float) -> list[list[float]]:
        model = self.policy(agent)
        tok = self.tokenizers[agent]
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        out: list[list[float]] = []
        step = self.max_batch or len(completions)
        for s in range(0, len(completions), step):
            lp, mask = sequence_logprobs(model, prompt_ids[s:s + step], completions[s:s + step], pad, temperature)
            lp = lp.float().cpu()
            out.extend(lp[r, : int(mask[r].sum())].tolist() for r in range(lp.shape[0]))
        return out


def _left_pad(encoded: Sequence[Sequence[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` of the prompts, left-padded to a common width."""
    width = max(len(e) for e in encoded)
    input_ids = torch.full((len(encoded), width), pad, dtype=torch.long)
    attention = torch.zeros((len(encoded), width), dtype=torch.long)
    for r, ids in enumerate(encoded):
        input_ids[r, width - len(ids):] = torch.tensor(ids)
        attention[r, width - len(ids):] = 1
    return input_ids, attention


def _trim(ids: list[int], cap: int, stop: int | None, eos: int, pad: int) -> list[int]:
    """A row's message tokens: up to the cap, a JSON stop, or the first EOS (included); padding dropped."""
    ids = ids[: cap if stop is None else min(cap, stop)]
    if eos in ids:
        return ids[: ids.index(eos) + 1]
    return [t for t in ids if t != pad] if pad != eos else ids
