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


BOUNDED = ("accuracy", "share", "reliability", "rate")  # metrics whose values lie in [0, 1] (a reliability: in [-1, 1])


def frame_axes(ax: Any, series: Sequence[tuple[Sequence[float], Sequence[float]]], bounded: bool) -> bool:
    """Axes that say where the values are, where autoscaling would zoom into a meaningless sliver: the y axis over
    [0, 1] at least for a ``bounded`` metric (an accuracy, a share, a rate) and from 0 for a flat series; and where
    every series has one logged step (one evaluation, one batch), the x axis from 0 past the step and each point
    labelled with its value and step. Returns whether the single-step framing applied."""
    points = [(x, y) for xs, ys in series for x, y in zip(xs, ys)]
    if not points:
        return False
    ys = [y for _, y in points]
    single = all(len(set(xs)) <= 1 for xs, _ in series)
    if bounded or single or max(ys) == min(ys):
        low, high = min(0.0, *ys), max(0.0, *ys)
        if bounded:
            high = max(high, 1.0)
        pad = 0.05 * (high - low or 1.0)
        ax.set_ylim(low - pad, high + pad)
    if not single:
        return False
    top_x = max(x for x, _ in points)
    ax.set_xlim(0, 1.25 * top_x if top_x > 0 else 1)
    for x, y in points:
        ax.annotate(f"{y:.3g} at {x:g} env steps", (x, y), textcoords="offset points", xytext=(6, 6), fontsize=8)
    return True


def history_figure(history: Sequence[Mapping[str, Any]], title: str = "") -> Any:
    """The learning curve's figure: training reward per rollout batch and every ``eval/*/accuracy`` key (else
    ``eval/reward_mean``) against env steps. Every legend entry draws something (a series of one point gets a
    marker), and its axes are :func:`frame_axes`'s (from 0 for one logged step or a flat curve)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    series = []
    train = [(h["env_step"], h["train/reward_mean"]) for h in history if h.get("train/reward_mean") is not None]
    if train:
        ax.plot(*zip(*train), color="0.6", lw=1, marker="o" if len(train) == 1 else None,
                label="train reward (batch mean)")
        series.append(tuple(zip(*train)))
    keys = eval_metrics({k for h in history for k in h})
    for k in keys:
        pts = [(h["env_step"], h[k]) for h in history if h.get(k) is not None]
        if pts:
            ax.plot(*zip(*pts), marker="o", label=k)
            series.append(tuple(zip(*pts)))
    frame_axes(ax, series, bounded=bool(keys) and all(k.endswith(BOUNDED) for k in keys))
    ax.set_xlabel("env steps (terminal reward calls)")
    ax.set_ylabel("reward / accuracy" if any(k.endswith("accuracy") for k in keys) else "reward")
    ax.set_title(title)
    if series:
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_history(history: Sequence[Mapping[str, Any]], path: str | Path, title: str = "") -> Path:
    """:func:`history_figure` saved as a PNG at ``path``."""
    import matplotlib.pyplot as plt

    fig = history_figure(history, title)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)
