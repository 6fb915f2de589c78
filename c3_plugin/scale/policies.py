"""Loading models: the one loader (:func:`load_pretrained`: where a name points, its revision pin, a failure as a
clear error) and the team's policies on it: one model per agent, one base model with one LoRA adapter per agent,
or one model that plays every role. The MAPPO critic and the MARLHF reward model load through it too."""

from __future__ import annotations

import copy
import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from c3_plugin.core.cache import cache_path
from c3_plugin.core.config import AgentsSection, ModelSection
from c3_plugin.core.errors import ConfigError
from c3_plugin.core.hub import BUNDLED_MODEL, offline_mode
from c3_plugin.core.model_paths import local_model_path, resolve_model_path

DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


@contextmanager
def unloadable(key: str, name: str) -> Iterator[None]:
    """A model or tokenizer that cannot load (a missing folder, a mistyped or unreachable hub name) as one
    :class:`ConfigError` naming it and the fix, instead of Hugging Face's traceback."""
    try:
        yield
    except (OSError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        local = local_model_path(name)
        reason = (f"no folder {local}" if local is not None and not local.is_dir() else
                  str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
        raise ConfigError(f"{key} '{name}' cannot be loaded ({reason}); give a local folder with config.json, weights "
                          "and tokenizer files (relative paths resolve against the config file's folder), or a Hugging "
                          "Face hub name that is reachable online or already in the HF cache; without the "
                          f"Hub: {BUNDLED_MODEL}") from exc


def load_pretrained(auto_class: Any, name: str, key: str, *, revision: str | None = None, gguf_file: str | None = None,
                    **kwargs: Any) -> Any:
    """``auto_class.from_pretrained`` (a ``transformers`` auto class) on where ``name`` points
    (:func:`~c3_plugin.core.model_paths.resolve_model_path`: a local folder, ``pkg:<package>``, a hub name), at
    ``revision`` or from ``gguf_file``; a failure to load is one :class:`ConfigError` naming the config ``key``."""
    if gguf_file:
        kwargs["gguf_file"] = gguf_file
    elif revision:
        kwargs["revision"] = revision
    path = resolve_model_path(name)
    if local_model_path(path) is None and not Path(path).is_dir():  # a hub name: offline, the cache only (no retries)
        offline_mode()
    with unloadable(key, name):
        if gguf_file and (Path(path) / gguf_file).is_file():
            return _dequantized(auto_class, Path(path) / gguf_file, kwargs)
        return auto_class.from_pretrained(path, **kwargs)


def _dequantized(auto_class: Any, file: Path, kwargs: dict[str, Any]) -> Any:
    """A model or tokenizer from a local GGUF file, converted once per machine: ``transformers`` parses the file's
    metadata and dequantizes every tensor in Python (about 8 s for SmolLM2's tokenizer and 15 s for its model on 2
    cores); the result is saved (``save_pretrained``) under the on-disk cache (:mod:`c3_plugin.core.cache`), keyed by
    the file, its size and time, the ``transformers`` version, the class and the dtype, and later loads read that."""
    import transformers

    stat = file.stat()
    key = [str(file.resolve()), stat.st_size, stat.st_mtime_ns, transformers.__version__, auto_class.__name__,
           str(kwargs.get("dtype"))]
    folder = cache_path("gguf-converted", key).with_suffix("")
    rest = {k: v for k, v in kwargs.items() if k != "gguf_file"}
    if (folder / "complete").is_file():
        cached = auto_class.from_pretrained(folder, **rest)
        cached.name_or_path = str(file.parent)  # where it came from, as a direct load says
        if hasattr(cached, "config"):
            cached.config._name_or_path = str(file.parent)
        return cached
    loaded = auto_class.from_pretrained(str(file.parent), **kwargs)
    if hasattr(loaded, "config"):  # a model: dequantized, so plain weights (no quantizer to save or reload)
        _plain(loaded)
    try:
        tmp = folder.with_name(f"{folder.name}.tmp{os.getpid()}")
        loaded.save_pretrained(tmp)
        (tmp / "complete").write_text(json.dumps(key))
        tmp.rename(folder)
    except OSError:  # another process converted it first, or the cache cannot be written: this load is still good
        shutil.rmtree(folder.with_name(f"{folder.name}.tmp{os.getpid()}"), ignore_errors=True)
    return loaded


def _plain(model: Any) -> None:
    """A model loaded from GGUF holds dequantized weights: drop the quantizer marks so it saves and trains as a plain
    model."""
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def load_tokenizer_for(name: str, key: str, *, revision: str | None = None, gguf_file: str | None = None) -> Any:
    """The tokenizer of the model ``name`` (:func:`load_pretrained`), padding with EOS when it defines no pad token."""
    from transformers import AutoTokenizer

    tok = load_pretrained(AutoTokenizer, name, key, revision=revision, gguf_file=gguf_file)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_tokenizer(model: ModelSection) -> Any:
    return load_tokenizer_for(model.name, "agent_model.name", revision=model.revision, gguf_file=model.gguf_file)


def load_model(model: ModelSection, name: str | None = None) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    if model.dtype not in DTYPES:
        raise ConfigError(f"agent_model.dtype must be one of {sorted(DTYPES)}, got {model.dtype!r}")
    gguf = model.gguf_file if name is None else None
    loaded = load_pretrained(AutoModelForCausalLM, name or model.name,
                             "agents.models entry" if name else "agent_model.name", revision=model.revision,
                             gguf_file=gguf, dtype=getattr(torch, DTYPES[model.dtype]))
    if gguf:  # GGUF weights are dequantized on load: the result is a plain model that can be saved
        _plain(loaded)
    return loaded


def load_policies(model: ModelSection, agents: AgentsSection, num_agents: int) -> tuple[list[Any], Any, bool]:
    """``(models, tokenizer, lora_adapters)``: ``models[a]`` plays agent ``a``. ``agents.policy: shared`` loads one
    model and gives it to every agent (the same module object), which the workflow trainers train as one policy."""
    tok = load_tokenizer(model)
    if agents.policy == "shared":
        return [load_model(model)] * num_agents, tok, False
    if agents.policy == "lora":
        from peft import LoraConfig, get_peft_model

        base = load_model(model)
        cfg = LoraConfig(r=agents.lora_r, lora_alpha=agents.lora_alpha, lora_dropout=agents.lora_dropout,
                         target_modules=list(agents.lora_target_modules), task_type="CAUSAL_LM")
        peft_model = get_peft_model(base, cfg, adapter_name="agent0")
        for a in range(1, num_agents):
            peft_model.add_adapter(f"agent{a}", cfg)
        return [peft_model] * num_agents, tok, True
    if agents.models:
        if len(agents.models) != num_agents:
            raise ConfigError(f"agents.models lists {len(agents.models)} models but the workflow "
                              f"has {num_agents} agents")
        return [load_model(model, name) for name in agents.models], tok, False
    first = load_model(model)
    return [first] + [copy.deepcopy(first) for _ in range(num_agents - 1)], tok, False
