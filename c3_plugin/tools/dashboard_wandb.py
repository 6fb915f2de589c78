"""A W&B workspace for one ``c3 compare``: every algorithm's mean over seeds, with its band, against ``env_step``.

The workspace's run set holds only the runs of one comparison (W&B ``group`` = the comparison folder's name,
``job_type`` among the compared algorithms) and groups them by ``job_type``, so each panel draws one line per
algorithm: the mean over its seeds with a min-max band (the spread of the seeds, honest for 2-5 seeds). Every
line plot has ``env_step`` on its x-axis (the hidden x metric the trainers log, docs/metrics.md). Sections:

- **Evaluation**: one plot per compared metric (``eval/reward_mean``, ``eval/<suite>/accuracy``, ...).
- **Costs**: cumulative ``budget/total_tokens_generated``, ``budget/total_messages``, ``budget/total_env_steps``,
  and the wall seconds per batch ``time/update_s`` and ``time/rollout_s``.
- **Training**: ``train/reward_mean`` and ``train/loss``.
- **Credit diagnostics**: ``credit/<role>_u<u>/{within_group_variance, split_half_reliability, influence,
  noise_ratio, zero_signal_share}``, one plot per diagnostic matching every role and decision point by regex,
  or, given ``roles``, one plot per (role, diagnostic) matching that role's decision points.

:func:`workspace_spec` builds it without a network; :func:`publish` saves it to W&B, or writes its view spec
(the JSON that saving would upload) to a file.
"""

from __future__ import annotations

import json
import netrc
import os
import re
from pathlib import Path
from urllib.parse import urlparse

import wandb_workspaces.reports.v2 as wr
import wandb_workspaces.workspaces as ws

X = "env_step"
COSTS = ("budget/total_tokens_generated", "budget/total_messages", "budget/total_env_steps", "time/update_s",
         "time/rollout_s")
TRAINING = ("train/reward_mean", "train/loss")
CREDIT = ("within_group_variance", "split_half_reliability", "influence", "noise_ratio", "zero_signal_share")
PALETTE = ("#4E79A7", "#E15759", "#59A14F", "#F28E2B", "#B07AA1", "#76B7B2", "#EDC948", "#FF9DA7", "#9C755F",
           "#BAB0AC")


def _line(title: str, y: list[str] | None = None, regex: str | None = None) -> wr.LinePlot:
    """A line plot against env_step, the runs of one algorithm drawn as their mean with a min-max band."""
    return wr.LinePlot(title=title, x=X, y=y or [], metric_regex=regex, title_x=X, groupby="JobType",
                       groupby_aggfunc="mean", groupby_rangefunc="minmax", smoothing_type="none")


def _section(name: str, panels: list[wr.LinePlot]) -> ws.Section:
    return ws.Section(name=name, panels=panels, is_open=True, panel_settings=ws.SectionPanelSettings(x_axis=X))


def _credit_panels(roles: list[str] | None) -> list[wr.LinePlot]:
    if not roles:
        return [_line(f"credit/*/{d}", regex=rf"^credit/.+_u[0-9]+/{d}$") for d in CREDIT]
    return [_line(f"credit/{role}_u*/{d}", regex=rf"^credit/{re.escape(role)}_u[0-9]+/{d}$")
            for role in roles for d in CREDIT]


def workspace_spec(entity: str, project: str, group: str, metrics: list[str], algorithms: list[str],
                   roles: list[str] | None = None) -> ws.Workspace:
    """The workspace of the comparison whose W&B runs share ``group`` (see the module docstring)."""
    if not algorithms:
        raise ValueError("workspace_spec needs the compared algorithms")
    if any("'" in v or "\\" in v for v in [group, *algorithms]):  # the library's filter strings do not escape them
        raise ValueError("a W&B group or job type with a quote or backslash cannot be filtered on: "
                         f"{group!r} {algorithms}")
    runset = ws.RunsetSettings(
        filters=ws.And(ws.Metric("Group") == group, ws.Metric("JobType").isin(list(algorithms))),
        groupby=[ws.Metric("JobType")],
        group_colors={a: PALETTE[i % len(PALETTE)] for i, a in enumerate(algorithms)})
    sections = [_section("Evaluation", [_line(m, [m]) for m in metrics or ["eval/reward_mean"]]),
                _section("Costs", [_line(k, [k]) for k in COSTS]),
                _section("Training", [_line(k, [k]) for k in TRAINING]),
                _section("Credit diagnostics", _credit_panels(roles))]
    settings = ws.WorkspaceSettings(x_axis=X, smoothing_type="none", max_runs=100)
    return ws.Workspace(entity=entity, project=project, name=f"c3 compare: {group}", sections=sections,
                        settings=settings, runset_settings=runset)


def view_json(spec: ws.Workspace) -> dict:
    """The saved view without a network: entity, project, display name and the view spec that ``save`` uploads."""
    view = spec._to_model()  # the library's own Workspace -> View conversion (no network)
    return {"entity": view.entity, "project": view.project, "displayName": view.display_name,
            "spec": json.loads(view.spec.model_dump_json(by_alias=True, exclude_none=True))}


def has_api_key() -> bool:
    """Whether W&B has an API key here, found without a network or a prompt: ``WANDB_API_KEY``, or the entry
    ``wandb login`` writes to ``~/.netrc`` (``NETRC``) for the host of ``WANDB_BASE_URL``."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or "api.wandb.ai"
    try:
        entry = netrc.netrc(os.environ.get("NETRC") or None).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return False
    return bool(entry and entry[2])


NO_KEY = ("--online saves the workspace to W&B, which needs an API key and finds none here (WANDB_API_KEY or "
          "~/.netrc): run wandb login (or set WANDB_API_KEY), or drop --online to write the workspace's specification "
          "to --out")


def publish(spec: ws.Workspace, online: bool, out_path: Path | None) -> str:
    """Online: save the workspace to W&B (needs an account and network) and return its URL. Offline: write
    :func:`view_json` to ``out_path`` and return the path. Online with ``out_path`` writes the file as well."""
    if not online and out_path is None:
        raise ValueError("publish offline needs out_path for the workspace spec")
    if online and not has_api_key():  # before anything is written: W&B would prompt or fail deep in its client
        raise ValueError(NO_KEY)
    if out_path is not None:
        out_path = Path(out_path)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(view_json(spec), indent=2) + "\n")
    if online:
        return str(spec.save().url)
    return str(out_path)
