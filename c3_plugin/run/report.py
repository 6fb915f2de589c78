"""Human-facing output of a run: the summary table and the PNG learning curve."""

from __future__ import annotations

from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

# The metric naming rule every domain follows: accuracy-like metrics are logged as eval/<datasource>/accuracy
# (eval/all/accuracy over several suites); every run logs eval/reward_mean. Plots, c3 compare and the dashboard
# use the accuracy keys, and eval/reward_mean when a run logs none (docs/metrics.md).
ACCURACY_METRICS = ("eval/*/accuracy",)
FALLBACK_METRIC = "eval/reward_mean"


def eval_metrics(keys: Iterable[str], patterns: Sequence[str] = ACCURACY_METRICS) -> list[str]:
    """The ``eval/`` keys matching ``patterns`` (globs), sorted; else ``[eval/reward_mean]`` when it is among
    ``keys``."""
    keys = set(keys)
    found = sorted(k for k in keys if k.startswith("eval/") and any(fnmatchcase(k, p) for p in patterns))
    return found or ([FALLBACK_METRIC] if FALLBACK_METRIC in keys else [])


def summary_headline(summary: Mapping[str, Any]) -> str:
    """What a run was and spent, in one line: algorithm, workflow, env steps, updates and generated tokens."""
    return (f"{summary.get('algorithm')} on {summary.get('workflow')}: {summary.get('env_steps')} env steps, "
            f"{summary.get('updates')} updates, {summary.get('totals', {}).get('tokens_generated')} tokens")


def before_after(summary: Mapping[str, Any]) -> list[tuple[str, float | None, float | None, float | None]]:
    """``(metric, before, after, change)`` for every ``eval/`` metric of a run's ``summary.json`` (its evaluations
    before and after training), sorted by metric; None where a value is missing. The printed summary table and the
    dashboard's before/after table are these rows."""
    before, after = summary.get("eval_before", {}), summary.get("eval_after", {})
    def number(v: Any) -> float | None:
        return float(v) if isinstance(v, (int, float)) else None

    rows = []
    for k in sorted(k for k in set(before) | set(after) if k.startswith("eval/")):
        b, a = number(before.get(k)), number(after.get(k))
        rows.append((k, b, a, a - b if a is not None and b is not None else None))
    return rows


def summary_table(summary: Mapping[str, Any]) -> str:
    """The run's headline and its before/after table (:func:`before_after`), as the demo prints them."""
    rows = before_after(summary)
    width = max([len(k) for k, *_ in rows] + [20])
    def fmt(v: float | None) -> str:
        return f"{v:10.4f}" if v is not None else f"{'-':>10}"

    lines = [f"== {summary_headline(summary)} ==", f"{'metric':<{width}} {'before':>10} {'after':>10} {'change':>10}"]
    lines += [f"{k:<{width}} {fmt(b)} {fmt(a)} {fmt(d)}" for k, b, a, d in rows]
    return "\n".join(lines)


def plot_history(history: Sequence[Mapping[str, Any]], path: str | Path, title: str = "") -> Path:
    """Training reward per rollout batch and every ``eval/*/accuracy`` key (else ``eval/reward_mean``), against env
    steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    train = [(h["env_step"], h["train/reward_mean"]) for h in history if h.get("train/reward_mean") is not None]
    if train:
        ax.plot(*zip(*train), color="0.6", lw=1, label="train reward (batch mean)")
    keys = eval_metrics({k for h in history for k in h})
    for k in keys:
        pts = [(h["env_step"], h[k]) for h in history if h.get(k) is not None]
        ax.plot(*zip(*pts), marker="o", label=k)
    ax.set_xlabel("env steps (terminal reward calls)")
    ax.set_ylabel("reward / accuracy" if any(k.endswith("accuracy") for k in keys) else "reward")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)
