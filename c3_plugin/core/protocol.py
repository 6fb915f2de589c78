"""The generation protocol: what a generation backend is asked for and what it returns, and the one
token encoding of a prompt that the trace, the rollout and every backend share.

It imports nothing of the project, so the core (trace, rollout) and the backends (``generation``,
``vllm_backend``) all build on it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Protocol, Sequence


@dataclass(frozen=True)
class Sampling:
    temperature: float = 1.0  # softmax temperature
    top_p: float = 1.0  # nucleus mass
    top_k: int | None = None  # keep the k most likely tokens (None: all)
    max_new_tokens: int = 256  # default cap when the role sets none
    greedy: bool = False  # argmax decoding (evaluation)


def role_sampling(sampling: Sampling, role: Any) -> Sampling:
    """The sampling of one role's messages: the role's own temperature when it sets one (greedy stays greedy)."""
    temperature = getattr(role, "temperature", None)
    if temperature is None or sampling.greedy or float(temperature) == sampling.temperature:
        return sampling
    return replace(sampling, temperature=float(temperature))


@dataclass(frozen=True)
class Prompt:
    text: str  # the context h_u
    role: str
    agent: int
    prefix: str = ""  # assistant prefill
    system: str | None = None
    max_new_tokens: int | None = None  # per-role cap; None: the sampling default
    # the task item (a generation hook's batch_items)
    item: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)


@dataclass
class Generation:
    text: str
    token_ids: list[int]
    logprobs: list[float]
    # 1 for tokens the policy chose (trained on), 0 for forced schema tokens; None: all 1
    loss_mask: list[int] | None = None
    # the trainer's recomputation when ``logprobs`` are another engine's (vLLM); None: they are the trainer's
    trainer_logprobs: list[float] | None = None
    # the prompt ids the tokens condition on when not encode_prompt's (a generation hook's); None: encode_prompt's
    prompt_ids: list[int] | None = None


class GenerationBackend(Protocol):
    """Anything that samples ``n`` messages for each prompt, with behaviour log-probs."""

    def generate(self, prompts: Sequence[Prompt], n: int, sampling: Sampling) -> list[list[Generation]]: ...


def encode_prompt(tokenizer: Any, prompt: Prompt, use_chat_template: bool = True) -> list[int]:
    """Token ids the policy conditions on: chat-formatted context plus the response prefix."""
    if use_chat_template and getattr(tokenizer, "chat_template", None):
        messages = ([{"role": "system", "content": prompt.system}] if prompt.system
                    else []) + [{"role": "user", "content": prompt.text}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    else:
        text = (prompt.system + "\n\n" if prompt.system else "") + prompt.text
        ids = tokenizer(text)["input_ids"]
    if prompt.prefix:
        ids = ids + tokenizer(prompt.prefix, add_special_tokens=False)["input_ids"]
    return list(ids)
