"""Algorithm names -> (config class, trainer class). Other packages add algorithms through the
``comlrl.trainers`` entry-point group (``name = "module:TrainerClass"``; the trainer's
``default_config_cls`` is its config)."""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import entry_points

_BUILTIN = {
    "c3": "c3_plugin.trainers.c3:C3Trainer",
    "magrpo": "c3_plugin.trainers.magrpo:WorkflowMAGRPOTrainer",
    "mappo": "c3_plugin.trainers.mappo:MAPPOTrainer",
}


def _load(ref: str):
    module, _, attr = ref.partition(":")
    return getattr(import_module(module), attr)


def algorithms() -> list[str]:
    names = set(_BUILTIN)
    names.update(ep.name for ep in entry_points(group="comlrl.trainers"))
    return sorted(names)


def resolve(name: str):
    """(config class, trainer class) for an algorithm name."""
    if name in _BUILTIN:
        trainer = _load(_BUILTIN[name])
    else:
        found = [ep for ep in entry_points(group="comlrl.trainers") if ep.name == name]
        if not found:
            raise KeyError(f"unknown algorithm '{name}'; available: {', '.join(algorithms())}")
        trainer = found[0].load()
    return trainer.default_config_cls, trainer
