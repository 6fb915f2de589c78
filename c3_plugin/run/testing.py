"""Tiny, randomly initialised models and a byte-level tokenizer built locally (no downloads).

For unit tests and smoke runs of the trainers: a Llama-architecture causal LM with a few
thousand parameters and a tokenizer that covers every byte, with a chat template.
"""

from __future__ import annotations

from typing import Any

from c3_plugin.core.config import WORKFLOW_EXPERIMENT_DEFAULTS
from c3_plugin.core.rewards import batched
from c3_plugin.run.folder import latest_checkpoint

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


def template_config(folder, **sections) -> dict:
    """A tiny model and tokenizer saved under ``folder/model`` and a ``template``-domain (``echo_pair``) config
    that loads them on CPU; ``sections`` add or replace top-level config sections."""
    from pathlib import Path

    tok = tiny_tokenizer()
    model_dir = Path(folder) / "model"
    tiny_model(tok, seed=0).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    return {"domain": "template", "workflow": {"name": "echo_pair"},
            "agent_model": {"name": str(model_dir), "device": "cpu"}, **sections}


def two_eos_team():
    """A Qwen-like tokenizer/model pair: the generation config declares two EOS ids and the pad token is
    the second of them (Qwen3: <|im_end|> and <|endoftext|>, the latter also its pad). A tiny vocabulary
    makes the random model emit stop ids often."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["<|im_end|>", "<|endoftext|>"] + list("abcdefghijklmnop"))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="a"))
    core.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    model = tiny_model(tok, seed=5)
    model.generation_config.eos_token_id = [0, 1]
    model.generation_config.pad_token_id = 1
    return tok, model


_PEAK = """
import sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
from c3_plugin.core.loss import token_logprobs
torch.set_num_threads(1)
vocab, length = int(sys.argv[1]), int(sys.argv[2])
cfg = LlamaConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                  num_key_value_heads=2, tie_word_embeddings=True)
model = LlamaForCausalLM(cfg).eval()
token_logprobs(model, [[5] * 8], [[7] * length], 0, 1.0, 1)

def status():
    fields = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return {k: int(fields[k].split()[0]) * 1024 for k in ("VmRSS", "VmHWM", "RssFile")}

for case in sys.argv[3:]:
    n, micro = (int(x) for x in case.split(","))
    prompts, comps = [[5] * 8] * n, [[7] * length] * n
    open("/proc/self/clear_refs", "w").write("5")  # the high-water mark restarts at the current RSS
    base = status()
    out = token_logprobs(model, prompts, comps, 0, 1.0, micro)
    end = status()
    assert len(out) == n and all(len(o) == length for o in out)
    del out
    # file pages faulted back in are not the call's
    print(end["VmHWM"] - base["VmRSS"] - max(0, end["RssFile"] - base["RssFile"]))
"""


def logprob_peaks(cases: list[tuple[int, int]], vocab: int = 50000, completion_tokens: int = 32) -> list[int]:
    """Peak resident memory (bytes above the level before the call) of computing the token log-probs of
    ``sequences`` completions with a one-layer model of a ``vocab``-token vocabulary, ``micro_batch_size``
    sequences per forward pass, for each ``(sequences, micro_batch_size)`` of ``cases`` in turn; measured in one
    fresh process on Linux (the peak RSS is reset before each call, and every large buffer is returned to the
    system when freed, so one call's peak is its own)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    # a fixed mmap threshold: every large buffer is mapped on allocation and unmapped on free, so the
    # peak RSS counts live tensors only (glibc's adaptive threshold otherwise leaves freed logits in a
    # fragmented heap now and then, and the peak would measure the allocator's luck)
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}
    out = subprocess.run([sys.executable, "-c", _PEAK, str(vocab), str(completion_tokens),
                          *(f"{n},{m}" for n, m in cases)],
                         cwd=root, capture_output=True, text=True, timeout=600, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"log-prob memory probe failed: {out.stderr[-2000:]}")
    return [int(line) for line in out.stdout.strip().splitlines()[-len(cases):]]


def logprob_peak_bytes(sequences: int, micro_batch_size: int, vocab: int = 50000, completion_tokens: int = 32) -> int:
    """:func:`logprob_peaks` of one call."""
    return logprob_peaks([(sequences, micro_batch_size)], vocab, completion_tokens)[0]


def killed_run(trainer: Any, checkpoint_dir: Any, after_calls: int) -> Any:
    """Train ``trainer`` until its reward has been called ``after_calls`` times (batched: once per rollout batch or
    evaluation), then interrupt it as a kill would; returns its latest checkpoint folder (None when none was
    written)."""
    from pathlib import Path

    reward, calls = trainer.reward_func, {"n": 0}

    @batched
    def dies(*completions: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] > after_calls:
            raise KeyboardInterrupt("killed")
        return reward(*completions, **kwargs)

    trainer.reward_func = dies
    try:
        trainer.train(checkpoint_dir=str(checkpoint_dir))
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError(f"the run finished before its reward was called {after_calls + 1} times")
    finally:
        trainer.reward_func = reward
    return latest_checkpoint(Path(checkpoint_dir))


def experiment_config(cls: Any, **fields: Any) -> Any:
    """A workflow trainer config as a YAML config builds it (:data:`c3_plugin.core.config.WORKFLOW_EXPERIMENT_DEFAULTS`
    under ``fields``): one turn, chat template, full-softmax sampling, greedy evaluation of the whole eval set;
    advantages scaled as each algorithm's own estimator has it unless ``fields`` say (C3: none, its leave-one-out
    values; MAGRPO: CoMLRL's group z-score; MAPPO: batch standardisation). ``cls()`` has CoMLRL's script defaults."""
    values = {**WORKFLOW_EXPERIMENT_DEFAULTS, **fields}
    if values.get("plan") is None:
        # as a YAML config: the default plan spends B = 8 (C3: tree [2, 4] over two decisions)
        values.setdefault("num_generations", 8)
    if values.get("advantage_scaling") is not None or getattr(cls, "normalization_scaling", None) == "batch_scale":
        values.setdefault("advantage_normalization", False)
    return cls(**values)


def tiny_gguf(folder: Any, name: str = "tiny.gguf", seed: int = 0) -> Any:
    """A one-layer Llama with a 64-token byte-level vocabulary written as an F32 GGUF file (with the ``gguf``
    package, the demo's extra) in ``folder``; returns the file's path."""
    from pathlib import Path

    import gguf
    import numpy as np

    path = Path(folder) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    vocab, hidden, ffn, heads = 64, 16, 32, 2
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(64)
    w.add_embedding_length(hidden)
    w.add_block_count(1)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(hidden // heads)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(["<pad>", "<eos>"] + [chr(c) for c in range(ord("a"), ord("a") + vocab - 2)])
    w.add_token_scores([0.0] * vocab)
    w.add_token_types([3, 3] + [1] * (vocab - 2))
    w.add_token_merges([])
    w.add_eos_token_id(1)
    w.add_pad_token_id(0)
    rng = np.random.default_rng(seed)
    w.add_tensor("token_embd.weight", rng.normal(size=(vocab, hidden)).astype(np.float32))
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    w.add_tensor("output.weight", rng.normal(size=(vocab, hidden)).astype(np.float32))
    shapes = {"attn_q": (hidden, hidden), "attn_k": (hidden, hidden), "attn_v": (hidden, hidden),
              "attn_output": (hidden, hidden), "ffn_gate": (ffn, hidden), "ffn_up": (ffn, hidden),
              "ffn_down": (hidden, ffn)}
    for part, shape in shapes.items():
        w.add_tensor(f"blk.0.{part}.weight", rng.normal(size=shape).astype(np.float32))
    for part in ("attn_norm", "ffn_norm"):
        w.add_tensor(f"blk.0.{part}.weight", np.ones(hidden, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
