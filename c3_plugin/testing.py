"""Tiny, randomly initialised models and a byte-level tokenizer built locally (no downloads).

For unit tests and smoke runs of the trainers: a Llama-architecture causal LM with a few
thousand parameters and a tokenizer that covers every byte, with a chat template.
"""

from __future__ import annotations

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def tiny_tokenizer(chat_template: bool = True):
    """A byte-level BPE tokenizer with no merges: 256 byte tokens plus specials."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    specials = ["<pad>", "<eos>", "<|user|>", "<|assistant|>", "<|system|>", "<|end|>"]
    vocab = {tok: i for i, tok in enumerate(specials + sorted(alphabet))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>",
                                  additional_special_tokens=specials[2:])
    if chat_template:
        tok.chat_template = CHAT_TEMPLATE
    return tok


def tiny_model(tokenizer, seed: int = 0, hidden: int = 32, layers: int = 2, max_positions: int = 1024):
    """A randomly initialised Llama causal LM sized for CPU unit tests."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=2, num_key_value_heads=2,
                      max_position_embeddings=max_positions, pad_token_id=tokenizer.pad_token_id,
                      eos_token_id=tokenizer.eos_token_id, bos_token_id=None, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model
