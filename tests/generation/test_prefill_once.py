"""HF sampling prefills each distinct prompt once and samples ``n`` from its expanded KV cache: the same samples
as ``generate(num_return_sequences=n)`` (which prefills every sample) for the same seed, on every model family
the project loads (Llama, a GGUF-converted Llama, Qwen3, a peft LoRA policy), with the prompt tokens the
model's forward passes computed counted by a hook on the model."""

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import Qwen3Config, Qwen3ForCausalLM

from c3_plugin.core.config import ModelSection
from c3_plugin.core.protocol import Prompt, Sampling, encode_prompt
from c3_plugin.generation import hf
from c3_plugin.run.testing import tiny_gguf, tiny_model, tiny_tokenizer
from c3_plugin.scale import policies


def _qwen3(tok):
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=512,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None)
    model = Qwen3ForCausalLM(cfg)
    model.generation_config.pad_token_id, model.generation_config.eos_token_id = tok.pad_token_id, tok.eos_token_id
    return model


def _lora(tok):
    return get_peft_model(tiny_model(tok, seed=2), LoraConfig(r=4, target_modules=["q_proj", "v_proj"],
                                                              init_lora_weights=False))


def _gguf(tmp_path, monkeypatch):
    monkeypatch.setenv("C3_CACHE", str(tmp_path / "cache"))
    file = tiny_gguf(tmp_path / "model")
    section = ModelSection(name=str(file.parent), gguf_file=file.name, dtype="float32")
    return policies.load_tokenizer(section), policies.load_model(section)


def _family(name, tmp_path, monkeypatch):
    if name == "gguf_llama":
        return _gguf(tmp_path, monkeypatch)
    tok = tiny_tokenizer()
    make = {"llama": lambda: tiny_model(tok), "qwen3": lambda: _qwen3(tok), "lora_llama": lambda: _lora(tok)}
    return tok, make[name]()


class Forwards:
    """Every forward pass of the model: (rows, positions), recorded by a pre-hook on the module."""

    def __init__(self, model):
        self.calls: list[tuple[int, int]] = []
        model.register_forward_pre_hook(self.record, with_kwargs=True)

    def record(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.calls.append(tuple(ids.shape))


@pytest.mark.parametrize("family", ["llama", "gguf_llama", "qwen3", "lora_llama"])
def test_prefill_once_gives_todays_samples_and_computes_each_prompt_once(family, tmp_path, monkeypatch):
    tok, model = _family(family, tmp_path, monkeypatch)
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    forwards = Forwards(inner)
    backend = hf.HFBackend(lambda a: model, [tok], use_chat_template=bool(getattr(tok, "chat_template", None)))
    prompts = [Prompt("cab abc", "R", 0), Prompt("cab bad cab dab fab gab", "R", 0), Prompt("cab ab", "R", 0)]
    encoded = [encode_prompt(tok, p, backend.use_chat_template) for p in prompts]
    width = max(len(e) for e in encoded)
    shared = next(i for i in range(width) if len({tuple(e[:i + 1]) for e in encoded}) > 1)
    assert shared >= 3  # the prompts' common start (chat template and "cab")
    sampling, n = Sampling(temperature=1.0, max_new_tokens=10), 4

    torch.manual_seed(7)
    once = backend.generate(prompts, n, sampling)
    calls, forwards.calls = forwards.calls, []
    # the shared prefix once for the batch, each prompt's remainder but its last token once, that token once per
    # sample (the behaviour log-prob recomputation's forwards follow, whole sequences of micro_batch_size rows)
    assert calls[:3] == [(1, shared), (len(prompts), width - 1 - shared), (len(prompts) * n, 1)]
    assert {c for c in calls[2:] if c[1] == 1} == {(len(prompts) * n, 1)}

    backend.prefill_once = False
    torch.manual_seed(7)
    every = backend.generate(prompts, n, sampling)
    assert forwards.calls[0] == (len(prompts) * n, width)  # today's path: every sample prefills the whole prompt
    assert [[g.token_ids for g in row] for row in once] == [[g.token_ids for g in row] for row in every]
    for row_once, row_every in zip(once, every):
        for a, b in zip(row_once, row_every):
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
    assert len({tuple(g.token_ids) for row in once for g in row}) > n  # the samples differ: sampling, not argmax


def test_prefill_once_keeps_structured_and_json_stop_rows():
    """The hook's processors and stops see the same full-width rows: a JSON stop cuts at the same token."""
    tok = tiny_tokenizer()
    model = tiny_model(tok, seed=3)
    backend = hf.HFBackend(lambda a: model, [tok], json_stop=True)
    prompts = [Prompt("x", "R", 0, prefix="{}"), Prompt("a longer one", "R", 0, prefix='{"a": 1}')]
    torch.manual_seed(1)
    once = backend.generate(prompts, 3, Sampling(max_new_tokens=8))
    assert all(g.token_ids == [] or len(g.token_ids) == 1 for row in once for g in row)  # already-closed JSON stops
    backend.prefill_once = False
    torch.manual_seed(1)
    every = backend.generate(prompts, 3, Sampling(max_new_tokens=8))
    assert [[g.token_ids for g in row] for row in once] == [[g.token_ids for g in row] for row in every]


def test_one_sample_per_prompt_still_computes_the_shared_prefix_once():
    """n = 1 (an independent plan's later steps): the prompts' common start once for the batch, the same samples."""
    tok = tiny_tokenizer()
    model = tiny_model(tok, seed=4)
    forwards = Forwards(model)
    backend = hf.HFBackend(lambda a: model, [tok])
    prompts = [Prompt("the same long question, then a", "R", 0), Prompt("the same long question, then bcd", "R", 0)]
    torch.manual_seed(2)
    once = backend.generate(prompts, 1, Sampling(max_new_tokens=8))
    encoded = [encode_prompt(tok, p) for p in prompts]
    shared = next(i for i in range(len(encoded[0])) if encoded[0][i] != encoded[1][i])
    assert forwards.calls[0] == (1, shared) and shared > len("the same long question, then")
    backend.prefill_once = False
    torch.manual_seed(2)
    assert [g[0].token_ids for g in backend.generate(prompts, 1, Sampling(max_new_tokens=8))] == [
        g[0].token_ids for g in once]
