"""Algorithm names -> (config class, trainer class).

One name per algorithm everywhere: the ``algorithm:`` key of a config, the config section the
algorithm reads, the ``c3 compare --algorithms`` names and the ``comlrl.trainers`` entry points this
package declares (pyproject.toml lists exactly the names of ``_BUILTIN``; a test holds them equal).
The entry-point group is read here, by this registry (so by the configs, the ``c3`` CLI and the
``train_*.py`` scripts); CoMLRL itself does not read it. Another package adds an algorithm by
declaring ``name = "module:TrainerClass"`` in that group (the trainer's ``default_config_cls`` is its
config, read from the config section ``name:``); a built-in name cannot be shadowed.

The preference algorithms (MADPO, MARLHF and their iterative forms, centralized or not) read the
shared config section ``mapl:``; every other algorithm reads the section named after it. ``centralized_*``
algorithms train one joint actor and need CoMLRL's centralized APIs.

Each algorithm's config class declares its :class:`Capabilities` (how its env steps are counted, whether it
runs data-parallel, ...); :func:`capabilities` reads them, and the run path asks nothing else of an algorithm."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from importlib.metadata import entry_points
from typing import Any


@dataclass(frozen=True)
class Capabilities:
    """What the run path needs to know of an algorithm, declared by its config class (its ``capabilities``
    attribute) instead of being guessed from the fields it happens to have."""

    budget: str = "per_prompt"  # how its env steps are counted: "plan" (a rollout plan over the workflow: C3, MAGRPO, MAPPO), "preference" (candidates per prompt, then pairs: MADPO, MARLHF), "per_prompt" (num_generations samples per prompt of one decision point: the centralized joint actor, a CoMLRL trainer's own loop)
    data_parallel: bool = False  # trains under torchrun with several ranks (instance sharding; the per-role agents section, the analysis tools)
    learned_reward: bool = False  # fits a reward model before its online updates (MARLHF)
    iterative: bool = False  # alternates collecting and training num_iterations times (the *_iter forms)
    decision_critic: bool = False  # keeps a learned critic's state per run and decision point (MAPPO: memory and cluster plan)


WORKFLOW = Capabilities(budget="plan", data_parallel=True)  # the workflow trainers
UNDECLARED = Capabilities()  # a config class that declares nothing (another package's): CoMLRL's own loop


def capabilities(config: Any) -> Capabilities:
    """The capabilities an algorithm's config (instance or class) declares."""
    cls = config if isinstance(config, type) else type(config)
    return getattr(cls, "capabilities", UNDECLARED)

_BUILTIN = {
    "c3": "c3_plugin.trainers.c3:C3Trainer",
    "magrpo": "c3_plugin.trainers.magrpo:WorkflowMAGRPOTrainer",
    "mappo": "c3_plugin.trainers.mappo:MAPPOTrainer",
    "madpo": "c3_plugin.trainers.preference:WorkflowMADPOTrainer",
    "marlhf": "c3_plugin.trainers.preference:WorkflowMARLHFTrainer",
    "madpo_iter": "c3_plugin.trainers.preference:WorkflowMADPOIterTrainer",
    "marlhf_iter": "c3_plugin.trainers.preference:WorkflowMARLHFIterTrainer",
    "centralized_magrpo": "c3_plugin.trainers.joint:JointMAGRPOTrainer",
    "centralized_madpo": "c3_plugin.trainers.joint:JointMADPOTrainer",
    "centralized_madpo_iter": "c3_plugin.trainers.joint:JointMADPOIterTrainer",
    "centralized_marlhf": "c3_plugin.trainers.joint:JointMARLHFTrainer",
    "centralized_marlhf_iter": "c3_plugin.trainers.joint:JointMARLHFIterTrainer",
}
PREFERENCE = ("madpo", "marlhf", "madpo_iter", "marlhf_iter")


def _load(ref: str):
    module, _, attr = ref.partition(":")
    return getattr(import_module(module), attr)


def algorithms() -> list[str]:
    names = set(_BUILTIN)
    names.update(ep.name for ep in entry_points(group="comlrl.trainers"))
    return sorted(names)


def section(name: str) -> str:
    """The config section an algorithm reads: ``mapl`` for the preference family (centralized or not),
    else its own name (``centralized_magrpo`` included: its fields are not MAGRPO's workflow fields)."""
    return "mapl" if name.removeprefix("centralized_") in PREFERENCE else name


def is_centralized(name: str) -> bool:
    return name.startswith("centralized_")


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
