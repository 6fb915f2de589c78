"""Does the installed CoMLRL have the centralized actor APIs? The check the centralized trainers and
``--dry-run`` make before anything loads, with an error that names what is missing and how to fix it."""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from c3_plugin.core.domain import load_domain

FIX = ("install a CoMLRL that contains the centralized actor APIs (comlrl 1.4.3, or a CoMLRL checkout at or after the "
       "cen commit 998ea13) into this environment, e.g. `pip install 'comlrl>=1.4.3'`; keep an older core for other "
       "jobs in a separate environment")

# (module, attribute, what it is): everything the centralized trainers use from CoMLRL.
REQUIRED_API: tuple[tuple[str, str, str], ...] = (
    ("comlrl.trainers.reinforce", "CentralizedMAGRPOTrainer", "the one-actor MAGRPO trainer"),
    ("comlrl.trainers.reinforce", "CentralizedMAGRPOConfig", "its config"),
    ("comlrl.trainers.preference.collaboration", "CentralizedCollaboration", "the role split of a joint action"),
    ("comlrl.trainers.preference.centralized", "CentralizedComparatorAdapter", "the joint prompt/parse protocol"),
    ("comlrl.trainers.preference", "MADPOConfig", "the preference config"),
)
CONFIG_FIELD = ("comlrl.trainers.preference", "MADPOConfig", "collaboration_mode")


class CentralizedAPIError(ImportError, ValueError):
    """The installed CoMLRL lacks the centralized actor APIs (a ValueError too, so CLIs report it in one line)."""


def _installed_version() -> str:
    try:
        from importlib.metadata import version

        return version("comlrl")
    except Exception:  # not installed as a distribution (a source checkout on sys.path)
        return "unknown"


def missing_centralized_api() -> list[str]:
    """Dotted names of the centralized APIs the installed CoMLRL lacks (empty when all are there)."""
    missing = []
    for module, attr, what in REQUIRED_API:
        try:
            mod = importlib.import_module(module)
        except ImportError:
            missing.append(f"{module}.{attr} ({what}; module {module} not importable)")
            continue
        if not hasattr(mod, attr):
            missing.append(f"{module}.{attr} ({what})")
    module, cls, name = CONFIG_FIELD
    try:
        config = getattr(importlib.import_module(module), cls)
        fields = {f.name for f in dataclasses.fields(config)} if dataclasses.is_dataclass(config) else set()
    except (ImportError, AttributeError):
        fields = set()
    if name not in fields:
        missing.append(f"{module}.{cls}.{name} (the centralized collaboration switch of the preference trainers)")
    return missing


def require_centralized_api() -> None:
    """Raise :class:`CentralizedAPIError` unless the installed CoMLRL has every centralized actor API.

    Loads no model (imports CoMLRL modules only): call it from ``--dry-run`` and before building a
    centralized trainer. There is no fallback to two actors."""
    missing = missing_centralized_api()
    if missing:
        raise CentralizedAPIError(f"the centralized joint actor needs CoMLRL APIs that the installed comlrl "
                                  f"({_installed_version()}) lacks: {'; '.join(missing)}. Fix: {FIX}")


def centralized_api_report() -> dict[str, Any]:
    """For ``--dry-run``: the CoMLRL version and the centralized APIs found (raises when one is missing)."""
    require_centralized_api()
    return {"comlrl_version": _installed_version(), "centralized_api": "ok",
            "apis": [f"{m}.{a}" for m, a, _ in REQUIRED_API] + [".".join(CONFIG_FIELD)]}


JOINT_DOMAIN = "travel"  # the domain whose joint workflow and adapter a centralized trainer uses when given none
JOINT_WORKFLOW = "travel_joint"  # the default ``workflow`` of the centralized trainers: that domain's joint workflow


def joint_domain() -> Any:
    """The :data:`JOINT_DOMAIN`, found like any configured domain (its ``joint_adapter`` hook; the library imports no
    domain)."""
    domain = load_domain(JOINT_DOMAIN)
    if domain.joint_adapter is None:
        raise ValueError(f"domain '{JOINT_DOMAIN}' has no joint_adapter hook: a centralized joint actor needs one")
    return domain


def default_joint_adapter(workflow: Any = None) -> Any:
    """The joint domain's adapter for ``workflow``."""
    return joint_domain().joint_adapter(workflow)
