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

A package (or a test) may also add one at run time with :func:`register` (``register("name", TrainerClass)`` or a
``"module:TrainerClass"`` reference), the one line a new algorithm needs besides its trainer file.

Everything the run path (``run/``, ``tools/``) needs to know of an algorithm is declared on its config class and read
here; no module outside an algorithm's own file names it or tests its class:

* :class:`Capabilities` (the class attribute ``capabilities``, read by :func:`capabilities`): how its env steps are
  counted, whether it runs data-parallel, whether it is a workflow trainer and which run keywords its trainer takes;
* ``credit_fields`` (a class attribute, globs allowed): the fields that are its credit, which a head-to-head may differ
  in (:func:`c3_plugin.core.estimator_rules.credit_fields`);
* ``inert_fields`` (a class attribute: :class:`Inert` declarations): fields its update does not read under some of its
  settings (C3's ``q_critic_*`` under ``credit: loo``), which a comparison lists apart (:func:`inert_fields`);
* ``estimator_description`` (a class attribute, formatted with the config's fields): its estimator in words, the
  dry-run's ``estimator`` row (:func:`estimator_description`);
* ``learned_critic`` (a property): the :class:`Critic` it trains beside its policies, or None, which the memory and
  cluster plans and the budget count (:func:`learned_critic`);
* ``preflight()`` and ``dry_run_entries()`` (optional methods): its own checks before any data or model loads, and
  its own entries in the dry-run's report (:func:`preflight`, :func:`dry_run_entries`; the centralized joint actor's
  CoMLRL API)."""

from __future__ import annotations

import dataclasses
import fnmatch
from dataclasses import dataclass
from importlib import import_module
from importlib.metadata import entry_points
from typing import Any, Callable, Iterable


@dataclass(frozen=True)
class Capabilities:
    """What the run path needs to know of an algorithm, declared by its config class (its ``capabilities``
    attribute) instead of being guessed from the fields it happens to have."""

    # how its env steps are counted: "plan" (a rollout plan over the workflow: C3, MAGRPO, MAPPO), "preference"
    # (candidates per prompt, then pairs: MADPO, MARLHF), "per_prompt" (num_generations samples per prompt of one
    # decision point: the centralized joint actor, a CoMLRL trainer's own loop)
    budget: str = "per_prompt"
    # trains under torchrun with several ranks (instance sharding; the per-role agents section, the analysis tools)
    data_parallel: bool = False
    learned_reward: bool = False  # fits a reward model before its online updates (MARLHF)
    iterative: bool = False  # alternates collecting and training num_iterations times (the *_iter forms)
    # keeps a learned critic's state per run and decision point (MAPPO: memory and cluster plan)
    decision_critic: bool = False
    # its trainer is a WorkflowTrainer, which re-enters the workflow's decision points (the analysis tools' session)
    workflow_trainer: bool = False
    # the run's keywords its trainer's constructor takes besides CoMLRL's (a workflow trainer: WORKFLOW_KEYWORDS)
    trainer_keywords: tuple[str, ...] = ()


# what run.train.build_trainer gives a workflow trainer besides CoMLRL's arguments: the domain's outcome extractor, the
# deepspeed section, the agents section's per-role learning rates, their scales and the frozen agents
WORKFLOW_KEYWORDS = ("outcome", "deepspeed", "learning_rates", "learning_rate_scales", "trainable")
WORKFLOW = Capabilities(budget="plan", data_parallel=True, workflow_trainer=True,
                        trainer_keywords=WORKFLOW_KEYWORDS)  # the workflow trainers
UNDECLARED = Capabilities()  # a config class that declares nothing (another package's): CoMLRL's own loop


@dataclass(frozen=True)
class Critic:
    """A learned critic an algorithm trains beside its policies (its config's ``learned_critic``), as the budget, the
    memory plan and the cluster plan's GPU-hours count it."""

    model: str | None  # its backbone (None: a copy of agent 0's model)
    # what it reads: "decision_states" (the centralized state of every run at every decision point: MAPPO) or
    # "alternatives" (the context and message of every credited alternative: C3's value_assisted Q_hat)
    reads: str
    max_tokens: int  # each read is left-truncated to this many tokens
    epochs: int  # its passes (fits) over each rollout batch
    policy_warmup_updates: int = 0  # first rollout batches that train only the critic: no policy update in them


@dataclass(frozen=True)
class Inert:
    """Fields of an algorithm's config that its training does not read under some settings (one entry of its config
    class's ``inert_fields``): a difference in them changes nothing under those settings, so ``c3 compare`` lists it
    apart from the differences in effect."""

    fields: tuple[str, ...]  # the config's field names (globs allowed)
    # (config instance, workflow or None) -> True where the fields are not read; None: the workflow is not known
    when: Callable[[Any, Any], bool]
    reason: str  # why they change nothing there, formatted with the config's fields


def inert_fields(config: Any, workflow: Any = None) -> dict[str, str]:
    """The fields of a config instance that its training does not read under its own settings (its class's
    ``inert_fields``, globs expanded), each with the reason: ``{field: reason}``; none for a class that declares
    none."""
    names = [f.name for f in dataclasses.fields(config)] if dataclasses.is_dataclass(config) else []
    values = {n: getattr(config, n) for n in names}
    out: dict[str, str] = {}
    for entry in getattr(type(config), "inert_fields", ()) or ():
        if not entry.when(config, workflow):
            continue
        for name in names:
            if name not in out and any(fnmatch.fnmatchcase(name, p) for p in entry.fields):
                out[name] = entry.reason.format(**values)
    return out


def capabilities(config: Any) -> Capabilities:
    """The capabilities an algorithm's config (instance or class) declares."""
    cls = config if isinstance(config, type) else type(config)
    return getattr(cls, "capabilities", UNDECLARED)


def learned_critic(config: Any) -> Critic | None:
    """The critic an algorithm's config instance trains beside its policies (None: none)."""
    return getattr(config, "learned_critic", None)


def preflight(config: Any) -> None:
    """Run the config instance's own checks before any data or model loads (its ``preflight()``, when it has one)."""
    check = getattr(config, "preflight", None)
    if check is not None:
        check()


def dry_run_entries(config: Any) -> dict[str, Any]:
    """The config instance's own entries in the dry-run's report (its ``dry_run_entries()``; none when it has none)."""
    entries = getattr(config, "dry_run_entries", None)
    return dict(entries()) if entries is not None else {}


def estimator_description(config: Any, name: str) -> str:
    """The config's estimator in words (its class's ``estimator_description`` formatted with its fields; the
    algorithm's name when it declares none)."""
    text = getattr(type(config), "estimator_description", None)
    return text.format(**{f.name: getattr(config, f.name) for f in dataclasses.fields(config)}) if text else name

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


_REGISTERED: dict[str, Any] = {}  # register(): name -> trainer class or "module:TrainerClass"


def register(name: str, trainer: Any) -> None:
    """Add the algorithm ``name`` trained by ``trainer`` (a trainer class whose ``default_config_cls`` is its config,
    or a ``"module:TrainerClass"`` reference, loaded on first use): it reads the config section ``name:`` and is
    listed, configured, dry-run and trained like a built-in, in this process (``c3 compare`` runs each run in a
    process of its own, which knows the entry points' algorithms, not this one). A built-in or entry-point name
    cannot be taken, nor a registered one twice (:func:`unregister` it first)."""
    if not name or not name.replace("_", "a").isalnum() or name != name.lower():
        raise ValueError(f"algorithm name {name!r}: use lower-case letters, digits and underscores "
                         "(it names a config section)")
    if name in _BUILTIN or name in _REGISTERED or any(ep.name == name for ep in entry_points(group="comlrl.trainers")):
        raise ValueError(f"algorithm '{name}' exists already; choose another name")
    if not isinstance(trainer, str) and getattr(trainer, "default_config_cls", None) is None:
        raise TypeError(f"register('{name}', ...): the trainer needs a default_config_cls (its config dataclass)")
    _REGISTERED[name] = trainer


def unregister(name: str) -> None:
    """Remove an algorithm :func:`register` added (a built-in cannot be removed)."""
    if name not in _REGISTERED:
        raise KeyError(f"algorithm '{name}' was not added by register()")
    del _REGISTERED[name]


def _load(ref: str):
    module, _, attr = ref.partition(":")
    return getattr(import_module(module), attr)


def algorithms() -> list[str]:
    names = set(_BUILTIN) | set(_REGISTERED)
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
    elif name in _REGISTERED:
        trainer = _REGISTERED[name]
        trainer = _load(trainer) if isinstance(trainer, str) else trainer
    else:
        found = [ep for ep in entry_points(group="comlrl.trainers") if ep.name == name]
        if not found:
            raise KeyError(f"unknown algorithm '{name}'; available: {', '.join(algorithms())}")
        trainer = found[0].load()
    return trainer.default_config_cls, trainer


def algorithms_where(test: Callable[[Capabilities], bool]) -> list[str]:
    """The algorithms whose config's capabilities pass ``test``, sorted; one that cannot load here (a centralized
    trainer without CoMLRL's centralized API, a broken plugin) is left out."""
    out = []
    for name in algorithms():
        try:
            config_cls, _ = resolve(name)
        except Exception:  # noqa: BLE001 - listed for a message or a comparison: what cannot load is not a candidate
            continue
        if test(capabilities(config_cls)):
            out.append(name)
    return out


def workflow_algorithms() -> list[str]:
    """The workflow trainers (a rollout plan over the workflow, data-parallel): the ones the run's data parallelism,
    per-role learning rates and the analysis tools cover."""
    return algorithms_where(lambda c: c.workflow_trainer)


def head_to_head(algorithm: str, sections: Iterable[str]) -> list[str]:
    """``algorithm``, then every other algorithm with a rollout plan (``Capabilities.budget == "plan"``) whose own
    section is among ``sections`` (a config's top-level keys): the algorithms a shared base config compares."""
    present = set(sections)
    others = [n for n in algorithms() if n != algorithm and n in present and section(n) == n]
    return [algorithm] + [n for n in others if capabilities(resolve(n)[0]).budget == "plan"]


def listed(names: Iterable[str], last: str = "and") -> str:
    """``a, b and c`` (``last``: the word before the last name)."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {last} {names[-1]}" if names else ""
