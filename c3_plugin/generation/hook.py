"""CoMLRL's generation hook under the workflow trainers: a subclass's ``_generate_completions``.

A CoMLRL user shapes generation by overriding ``MAGRPOTrainer._generate_completions`` (forcing a
leading ``{``, stopping at the closing brace, ...), usually by calling ``super()._generate_completions``
with extra HF ``generate`` kwargs (``logits_processor``, ``stopping_criteria``,
``prefix_allowed_tokens_fn``). The workflow trainers sample through a backend
(:func:`c3_plugin.core.rollout.materialize`), so without this module the hook would be bypassed.

* :class:`GenerationHook` is the backend the rollouts use when a subclass overrides the hook
  (:func:`rollout_backend`): every prompt the rollout samples goes through
  ``trainer._generate_completions(agent, [item], agent_idx, num_return_sequences=n, max_new_tokens,
  prompts_override=[context])``, and the returned CoMLRL dict becomes the rollout's
  :class:`~c3_plugin.core.protocol.Generation` objects: ``completion_input_ids`` trimmed at ``response_lens``
  are the trained tokens, ``prompt_input_ids`` (unpadded) the prompt they condition on (recorded in the
  trace as ``prompt_ids``), ``completions`` the text the reward and later roles read. Behaviour log-probs
  are the backend's when the hook returned the backend's tokens unchanged, else recomputed by the HF
  backend under the policy (temperature-scaled, full vocabulary, as for any sample).
* While the hook runs, :func:`active_call` tells :meth:`WorkflowBridge._generate_completions` (the hook's
  ``super()``) which rollout prompt and sampling it serves, so the super call samples that prompt from
  the backend directly (no recursion into the hook) with the rollout's sampling (greedy in evaluation).
* :func:`backend_generate` runs a super call's extra ``generate`` kwargs on the HF backend
  (:func:`c3_plugin.generation.hf.merge_generate_kwargs`); the vLLM backend refuses them.

Not supported with a hook (refused by name): a forced JSON skeleton (``grammar``), multi-turn external
prompts, and HF kwargs that change the sampling configuration (temperature, top-p, ...: those are the
trainer config's, so the recorded log-probs stay the sampler's). A hooked run's trace records the hook's
prompt ids and texts, which :func:`~c3_plugin.core.trace.replay_check` reports where they differ from the
workflow's re-encoding (the hook is state the workflow does not describe).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

import torch

from c3_plugin.core.protocol import Generation, Prompt, Sampling
from c3_plugin.generation.hf import HFBackend

# HF ``generate`` kwargs a hook may pass through ``super()._generate_completions``: token constraints and
# stops (``do_sample`` is dropped, as CoMLRL drops it); everything else would change the sampling config



def overrides_hook(trainer: Any) -> bool:
    """Whether ``trainer``'s class overrides :meth:`WorkflowBridge._generate_completions` (the bridge's own is
    marked ``workflow_generation``)."""
    return not getattr(type(trainer)._generate_completions, "workflow_generation", False)


def rollout_backend(trainer: Any) -> Any:
    """The backend the workflow rollouts sample through: ``trainer.backend``, behind a
    :class:`GenerationHook` when the trainer's class overrides ``_generate_completions``."""
    return GenerationHook(trainer, trainer.backend) if overrides_hook(trainer) else trainer.backend


@dataclass
class HookCall:
    """The rollout prompt a running hook answers, and what its super call sampled for it."""

    prompt: Prompt
    sampling: Sampling
    # (prompt ids, generations) per super call
    generated: list[tuple[list[int], list[Generation]]] = field(default_factory=list)


def active_call(trainer: Any) -> HookCall | None:
    """The :class:`HookCall` being answered by ``trainer``'s hook, or None outside one."""
    return getattr(trainer, "_generation_hook_call", None)


@contextmanager
def _answering(trainer: Any, call: HookCall) -> Iterator[HookCall]:
    previous = active_call(trainer)
    trainer._generation_hook_call = call
    try:
        yield call
    finally:
        trainer._generation_hook_call = previous


class GenerationHook:
    """A generation backend that samples through ``trainer._generate_completions`` (the subclass's hook)."""

    def __init__(self, trainer: Any, backend: Any):
        self.trainer = trainer
        self.backend = backend  # what the hook's super call samples from (HF or vLLM)

    def __getattr__(self, name: str) -> Any:  # settings (tokenizers, use_chat_template, ...) read through
        if name in ("backend", "trainer"):
            raise AttributeError(name)
        return getattr(self.backend, name)

    @property
    def hf(self) -> Any:
        """The HF backend that recomputes behaviour log-probs (a vLLM backend's fallback)."""
        return getattr(self.backend, "fallback", self.backend)

    def generate(self, prompts: Sequence[Prompt], n: int, sampling: Sampling) -> list[list[Generation]]:
        return [self._answer(p, int(n), sampling) for p in prompts]

    def _answer(self, prompt: Prompt, n: int, sampling: Sampling) -> list[Generation]:
        t = self.trainer
        name = type(t).__name__
        grammar = getattr(t, "grammar", None)
        if grammar is not None and grammar(prompt) is not None:
            raise ValueError(f"role {prompt.role!r} has a forced JSON skeleton (grammar) and {name} overrides "
                             "_generate_completions: both would shape the message; drop the grammar (the hook owns "
                             "generation) or the override")
        if prompt.item is None:
            raise ValueError(f"{name}._generate_completions needs the task item of each prompt; build prompts with "
                             "Prompt(item=...) (materialize does)")
        with _answering(t, HookCall(prompt, sampling)) as call:
            out = t._generate_completions(t.policy(prompt.agent), [dict(prompt.item)], agent_idx=prompt.agent,
                                          num_return_sequences=n,
                                          max_new_tokens=int(prompt.max_new_tokens or sampling.max_new_tokens),
                                          prompts_override=[prompt.text])
        return self.generations(out, prompt, n, sampling, call)

    def generations(self, out: Mapping[str, Any], prompt: Prompt, n: int, sampling: Sampling,
                    call: HookCall | None = None) -> list[Generation]:
        """CoMLRL's ``_generate_completions`` dict (one prompt, ``n`` sequences) as :class:`Generation` objects."""
        where = f"{type(self.trainer).__name__}._generate_completions"
        missing = [k for k in ("completions", "completion_input_ids", "prompt_input_ids") if k not in out]
        if missing:
            raise ValueError(f"{where} returned a dict without {missing}; return CoMLRL's dict (the one "
                             "super()._generate_completions returns)")
        texts, rows = list(out["completions"][0]), list(out["completion_input_ids"][0])
        lens = out.get("response_lens")
        lens = [len(r) for r in rows] if lens is None else [int(x) for x in lens]
        if not len(texts) == len(rows) == len(lens) == n:
            raise ValueError(f"{where} returned {len(texts)} completions, {len(rows)} token rows and {len(lens)} "
                             f"response_lens for num_return_sequences={n}; return one of each per sequence")
        prompt_ids = _unpadded(out["prompt_input_ids"], out.get("prompt_attention_mask"))
        token_ids = [_ids(r)[:k] for r, k in zip(rows, lens)]
        masks = out.get("completion_loss_masks")
        masks = [None] * n if masks is None else [[int(x) for x in m][:len(ids)] for m, ids in zip(masks[0], token_ids)]
        if any(m is not None and len(m) != len(ids) for m, ids in zip(masks, token_ids)):
            raise ValueError(f"{where} returned completion_loss_masks shorter than its "
                             "response_lens; trim them together")
        messages = [self._message(text, prompt, where) for text in texts]
        logprobs, trainer_lps = self._logprobs(prompt.agent, prompt_ids, token_ids, sampling, call)
        return [Generation(text=m, token_ids=ids, logprobs=lp, loss_mask=mask, trainer_logprobs=tl,
                           prompt_ids=list(prompt_ids))
                for m, ids, lp, mask, tl in zip(messages, token_ids, logprobs, masks, trainer_lps)]

    @staticmethod
    def _message(text: str, prompt: Prompt, where: str) -> str:
        """The message after the role's prefix: CoMLRL's completion is the whole action, the trace adds the prefix
        back."""
        if text.startswith(prompt.prefix):
            return text[len(prompt.prefix):]
        raise ValueError(f"role {prompt.role!r} has response prefix {prompt.prefix!r} but a completion {where} "
                         f"returned does not start with it ({text[:40]!r}); return prefix + text (as super() does) or "
                         "set the role's prefix to ''")

    def _logprobs(self, agent: int, prompt_ids: list[int], token_ids: list[list[int]], sampling: Sampling,
                  call: HookCall | None) -> tuple[list[list[float]], list[list[float] | None]]:
        """Behaviour log-probs: the backend's for a sequence the super call sampled and the hook kept as is
        (same prompt, same tokens), else recomputed under the policy."""
        known: dict[tuple, Generation] = {}
        for ids, gens in (call.generated if call is not None else []):
            for g in gens:
                known.setdefault((tuple(ids), tuple(g.token_ids)), g)
        hits = [known.get((tuple(prompt_ids), tuple(ids))) for ids in token_ids]
        todo = [k for k, (g, ids) in enumerate(zip(hits, token_ids)) if g is None and ids]
        fresh = self.hf.behaviour_logprobs(agent, [prompt_ids] * len(todo), [token_ids[k] for k in todo],
                                           1.0 if sampling.greedy else sampling.temperature) if todo else []
        recomputed = dict(zip(todo, fresh))
        logprobs = [list(g.logprobs) if g is not None else list(recomputed.get(k, [])) for k, g in enumerate(hits)]
        trainer_lps = [None if g is None or g.trainer_logprobs is None else list(g.trainer_logprobs) for g in hits]
        return logprobs, trainer_lps


def _ids(row: Any) -> list[int]:
    return [int(x) for x in (row.tolist() if isinstance(row, torch.Tensor) else row)]


def _unpadded(prompt_input_ids: Any, attention_mask: Any = None) -> list[int]:
    """The one prompt's token ids, padding (``attention_mask`` 0) removed."""
    ids = torch.as_tensor(prompt_input_ids).cpu()
    ids = ids[0] if ids.dim() == 2 else ids.reshape(-1)
    if attention_mask is None:
        return _ids(ids)
    mask = torch.as_tensor(attention_mask).cpu()
    mask = (mask[0] if mask.dim() == 2 else mask.reshape(-1)).bool()
    return _ids(ids[mask])


def backend_generate(backend: Any, prompts: Sequence[Prompt], n: int, sampling: Sampling,
                     generate_kwargs: Mapping[str, Any] | None = None) -> list[list[Generation]]:
    """``backend.generate``, with a hook's extra HF ``generate`` kwargs when it passed any (HF backend only)."""
    if not generate_kwargs:
        return backend.generate(prompts, n, sampling)
    if not isinstance(backend, HFBackend):
        raise ValueError(f"{type(backend).__name__} cannot run the HF generate kwargs {sorted(generate_kwargs)} passed "
                         "to _generate_completions (they are transformers objects); set generation_backend: hf, "
                         "or stop passing them")
    return backend.generate(prompts, n, sampling, generate_kwargs=generate_kwargs)
