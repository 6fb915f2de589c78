"""The model loader's GGUF path: a GGUF checkpoint is dequantized once per machine and later loads read the
converted copy, which gives the same tokenizer and the same weights as a direct load."""

import os

import torch

from c3_plugin.core.config import ModelSection
from c3_plugin.run.testing import tiny_gguf
from c3_plugin.scale import policies


def test_a_gguf_checkpoint_is_converted_once_and_loads_the_same_from_the_cache(tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    monkeypatch.setenv("C3_CACHE", str(tmp_path / "cache"))
    file = tiny_gguf(tmp_path / "model")
    section = ModelSection(name=str(file.parent), gguf_file=file.name, dtype="float32")
    direct_tok = AutoTokenizer.from_pretrained(str(file.parent), gguf_file=file.name)
    direct = AutoModelForCausalLM.from_pretrained(str(file.parent), gguf_file=file.name, dtype=torch.float32)
    first_tok, first = policies.load_tokenizer(section), policies.load_model(section)  # converts and keeps the copy
    assert len(list((tmp_path / "cache").glob("gguf-converted-*/complete"))) == 2  # the tokenizer's and the model's

    def no_gguf(*args, **kwargs):
        raise AssertionError("the GGUF file was read again")

    monkeypatch.setattr(gguf_utils, "load_gguf_checkpoint", no_gguf)
    tok, model = policies.load_tokenizer(section), policies.load_model(section)
    text = "abc bad cab <eos>"
    assert tok(text)["input_ids"] == first_tok(text)["input_ids"] == direct_tok(text)["input_ids"]
    assert (tok.pad_token, tok.eos_token) == (direct_tok.pad_token, direct_tok.eos_token)
    for loaded in (first, model):
        assert loaded.state_dict().keys() == direct.state_dict().keys()
        assert all(torch.equal(loaded.state_dict()[k], v) for k, v in direct.state_dict().items())
        assert not getattr(loaded, "is_quantized", False) and loaded.config._name_or_path == str(file.parent)
    ids = torch.tensor([tok(text)["input_ids"]])
    assert torch.equal(model(ids).logits, direct(ids).logits)
    monkeypatch.undo()
    monkeypatch.setenv("C3_CACHE", str(tmp_path / "cache"))
    stat = file.stat()  # a changed file is converted again
    os.utime(file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    policies.load_model(section)
    assert len(list((tmp_path / "cache").glob("gguf-converted-*/complete"))) == 3


def test_a_cache_that_cannot_be_written_still_loads(tmp_path, monkeypatch):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("C3_CACHE", str(blocked))
    file = tiny_gguf(tmp_path / "model")
    model = policies.load_model(ModelSection(name=str(file.parent), gguf_file=file.name, dtype="float32"))
    assert model.config.hidden_size == 16 and blocked.is_file()
