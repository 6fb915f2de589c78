"""``c3 dashboard FOLDER``: one self-contained HTML page (no server, no network, no script) for a
comparison folder of ``c3 compare`` or a single run folder.

The page holds: eval curves per suite metric (``eval/*/accuracy``, else ``eval/reward_mean``) against
env steps (per algorithm the mean over seeds, with a band from the lowest to the highest seed; a point at
every evaluation that all its seeds logged), the results table (mean +- std and 95% interval over seeds,
paired differences with t-test, Holm-corrected and Wilcoxon p-values) when the folder is a comparison, or
for a single run its final metrics and costs and the before/after table training printed
(``run.report.before_after``), cost bars (tokens, messages, env steps, wall time per run: mean with
min-max whiskers), the credit diagnostics over training, and a link to each run's folder. A comparison's page also
lists the settings that differ; an interval that cannot be computed reads "n/a (1 seed)"; final accuracies carry
their item count, each eval curve says which eval set it shows, and an agent whose zero-signal share was 1.0 in every
batch gets a warning at the top. A single run's page also has its peak memory, each credit chart's definition
(:data:`CREDIT_DEFINITIONS`) and its ``example_trace.json`` (one path's messages with each one's credit). A chart of
one logged step gets axes from 0 and the value written beside the point. Charts are inline SVG drawn by matplotlib,
their text as text.
"""

from __future__ import annotations

import html
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from c3_plugin.core.stats import wilson_interval
from c3_plugin.run.report import BOUNDED, before_after, eval_metrics, frame_axes, summary_headline
from c3_plugin.tools.compare import aggregated_seeds, in_effect, no_interval, no_variation, run_name

CREDIT_KEYS = ("within_group_variance", "split_half_reliability", "zero_signal_share", "influence", "noise_ratio")
COST_KEYS = (("tokens", ("totals", "tokens_generated")), ("messages", ("totals", "messages")),
             ("env steps", ("env_steps",)), ("wall s", ("wall_s",)))
# the finishing process's peaks, from summary.json (run.train: ru_maxrss; torch.cuda.max_memory_allocated with CUDA)
MEMORY_KEYS = (("peak memory (RSS) GiB", ("peak_rss_gib",)), ("peak GPU memory GiB", ("peak_gpu_gib",)))
# what each credit chart plots (docs/metrics.md, "Credit diagnostics", defines them in full); a group is the
# alternatives sampled from one context at decision point u, their returns the rewards of the leaves below each
CREDIT_DEFINITIONS = {
    "within_group_variance": "mean over groups of the variance of the credit (the advantages) across a group's "
                             "alternatives: signal and rollout noise together",
    "split_half_reliability": "mean over groups of the Spearman correlation between the advantages computed from the "
                              "even- and from the odd-numbered continuations: near 1 the credit ranks the "
                              "alternatives alike on two independent halves of the rollouts, near 0 it is noise",
    "zero_signal_share": "share of groups whose alternatives all got the same mean return: every advantage in the "
                         "group is 0, so it gives no learning signal (1.0: the agent learns nothing from the batch)",
    "influence": "mean over groups of the mutual information (nats) between which alternative was taken and the "
                 "outcome of its continuations: near 0 when the outcome does not depend on this decision",
    "noise_ratio": "observed rollout noise on one advantage over the noise law's prediction "
                   "sigma^2 n^2 / (B_u (n - 1)): near 1 when the law holds",
}


def load_runs(folder: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The runs under ``folder`` (a comparison's ``<algorithm>-s<seed>`` folders, or the folder itself when it is one
    run) with their metrics rows and summaries, and the comparison's summary (None for a single run)."""
    summary_path = folder / "summary.json"
    comparison = json.loads(summary_path.read_text()) if summary_path.exists() else None
    if comparison is not None and "algorithms" in comparison:
        folders = [(a, s, folder / run_name(a, s)) for a in comparison["algorithms"] for s in comparison["seeds"]]
    elif (folder / "metrics.jsonl").exists():
        config = json.loads((folder / "config.json").read_text()) if (folder / "config.json").exists() else {}
        folders, comparison = [(config.get("algorithm", "run"), config.get("seed", 0), folder)], None
    else:
        raise FileNotFoundError(f"{folder} holds neither a comparison (c3 compare's summary.json) nor "
                                "a run (metrics.jsonl)")
    runs = []
    for algorithm, seed, path in folders:
        if not (path / "metrics.jsonl").exists():
            continue
        rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines() if line.strip()]
        done = path / "summary.json"
        runs.append({"algorithm": algorithm, "seed": seed, "path": path, "rows": rows,
                     "summary": json.loads(done.read_text()) if done.exists() else {}})
    if not runs:
        raise FileNotFoundError(f"no run under {folder} has logged metrics yet")
    return runs, comparison


def _curve(rows: list[dict], key: str) -> dict[float, float]:
    return {r["env_step"]: r[key] for r in rows if r.get(key) is not None and r.get("env_step") is not None}


def _svg(fig: Any) -> str:
    import matplotlib
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text as <text>: the page's words are searchable
        fig.savefig(buf, format="svg", bbox_inches="tight",
                    # no RDF block (no outside URIs)
                    metadata={"Creator": None, "Date": None, "Format": None, "Type": None})
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def curves_chart(runs: list[dict], key: str, title: str) -> str | None:
    """Per algorithm: the mean over seeds at each env step all its seeds logged, and the min-max band; axes from
    :func:`c3_plugin.run.report.frame_axes` ([0, 1] at least for an accuracy, share or rate; from 0 for a flat curve;
    where every algorithm logged one step, from 0 past it, with the value written beside the point)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.2, 3.2))
    series = []
    for algorithm in dict.fromkeys(r["algorithm"] for r in runs):
        curves = [_curve(r["rows"], key) for r in runs if r["algorithm"] == algorithm]
        curves = [c for c in curves if c]
        if not curves:
            continue
        steps = sorted(set.intersection(*(set(c) for c in curves)))
        if not steps:
            continue
        values = np.array([[c[s] for s in steps] for c in curves])
        line, = ax.plot(steps, values.mean(0), marker="o", ms=3, label=f"{algorithm} (n={len(curves)})")
        line.set_gid(f"curve:{key}:{algorithm}")  # the SVG group of the line and its points, one per logged step
        if len(curves) > 1:
            ax.fill_between(steps, values.min(0), values.max(0), color=line.get_color(), alpha=0.2)
        series.append((steps, values.mean(0).tolist()))
    if not series:
        plt.close(fig)
        return None
    if frame_axes(ax, series, key.endswith(BOUNDED)):
        ax.set_gid(f"single-point:{key}")
    ax.set(title=title, xlabel="env steps")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _svg(fig)


def _lookup(summary: dict, path: tuple[str, ...]) -> Any:
    """The value at ``path`` (keys, outermost first) in a run's summary; None when a key is missing."""
    v: Any = summary
    for k in path:
        v = v.get(k) if isinstance(v, dict) else None
    return v


def cost_figure(runs: list[dict]) -> Any:
    """The costs per algorithm as bars (the mean over its runs) with the range over its runs as error bars, drawn
    only where an algorithm has two or more runs (one value has no spread to show); None when no run logged a cost."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    algorithms = list(dict.fromkeys(r["algorithm"] for r in runs))
    fig, axes = plt.subplots(1, len(COST_KEYS), figsize=(2.6 * len(COST_KEYS), 2.8))
    drawn = False
    for ax, (label, path) in zip(axes, COST_KEYS):
        values = {a: [float(v) for r in runs if r["algorithm"] == a and (v := _lookup(r["summary"], path)) is not None]
                  for a in algorithms}
        means = [float(np.mean(v)) if v else 0.0 for v in values.values()]
        ax.bar(algorithms, means, color=[f"C{i}" for i in range(len(algorithms))])
        for i, (vals, m) in enumerate(zip(values.values(), means)):
            if len(vals) >= 2:
                ax.errorbar([i], [m], yerr=[[m - min(vals)], [max(vals) - m]], fmt="none", ecolor="black", capsize=3)
        drawn = drawn or any(values.values())
        ax.set_title(label, fontsize=9)
        ax.tick_params(labelsize=8)
    if not drawn:
        plt.close(fig)
        return None
    return fig


def cost_chart(runs: list[dict]) -> str | None:
    fig = cost_figure(runs)
    return None if fig is None else _svg(fig)


def results_table(comparison: dict) -> str:
    """The comparison's final metrics and paired tests as HTML tables."""

    algos = comparison["algorithms"]

    def cell(s: dict) -> str:
        if no_interval(s) or no_variation(s):
            words = f"interval {no_interval(s)}" if no_interval(s) else no_variation(s)
            return f"{s['mean']:.3f} <small>{words}</small>"
        return f"{s['mean']:.3f} &plusmn; {s['std']:.3f} <small>[{s['ci95'][0]:.3f}, {s['ci95'][1]:.3f}]</small>"

    def p(v: Any) -> str:
        return "&ndash;" if v is None else f"{v:.3g}"

    out = ["<table><tr><th>metric</th>" + "".join(f"<th>{html.escape(a)}</th>" for a in algos) + "</tr>"]
    for m in comparison["metrics"]:
        per = comparison["final"][m]["algorithms"]
        out.append(f"<tr><td>{html.escape(m)}</td>"
                   + "".join(f"<td>{cell(per[a]) if a in per else '&ndash;'}</td>" for a in algos) + "</tr>")
    out.append("</table><table><tr><th>metric</th><th>pair</th><th>mean difference [95% CI]</th><th>p (paired t)</th>"
               "<th>p (Holm)</th><th>p (Wilcoxon)</th><th>seeds</th></tr>")
    for m in comparison["metrics"]:
        for pair, c in comparison["final"][m]["pairs"].items():
            if not c.get("n"):
                continue
            flat = no_variation({"n": c["n"], "std": c.get("std_diff")})
            ci = (f"interval {no_interval(c)}" if no_interval(c) else flat
                  or f"[{c['ci95'][0]:+.3f}, {c['ci95'][1]:+.3f}]")
            out.append(f"<tr><td>{html.escape(m)}</td><td>{html.escape(pair)}</td><td>{c['mean_diff']:+.3f} "
                       f"<small>{ci}</small></td><td>{p(c.get('p'))}</td>"
                       f"<td>{p(c.get('p_holm'))}</td><td>{p((c.get('wilcoxon') or {}).get('p'))}</td>"
                       f"<td>{c['n']}</td></tr>")
    out.append("</table>")
    return "\n".join(out)


def differences_section(record: dict) -> str:
    """The comparison's settings that differ (``summary.json``'s ``controlled_comparison``), as summary.md lists them:
    a table of those that differ in effect (setting, kind: credit, derived, allowed, and value per algorithm), then,
    apart, those that differ but are inert under the arms' settings, each with why."""
    algos, kinds = record.get("algorithms") or [], record.get("kind") or {}
    differences, inert = record.get("differences") or {}, record.get("inert") or {}
    out = ["<table class='differences'><tr><th>setting</th><th>kind</th>" +
           "".join(f"<th>{html.escape(a)}</th>" for a in algos) + "</tr>"]
    for key in in_effect({"differences": differences, "inert": inert}):
        per = differences[key]
        out.append(f"<tr><td>{html.escape(key)}</td><td>{html.escape(str(kinds.get(key, 'refused')))}</td>" +
                   "".join(f"<td>{html.escape(str(per.get(a, '(absent)')))}</td>" for a in algos) + "</tr>")
    out.append("</table>")
    if inert:
        out.append("<h3>Inert under these settings</h3><p><small>They differ, but the training does not read them "
                   "under the arms' settings (the algorithms' declared inert fields).</small></p><ul class='inert'>")
        out += [f"<li><code>{html.escape(key)}</code> ("
                + ", ".join(f"{html.escape(a)}: {html.escape(str(differences[key].get(a, '(absent)')))}" for a in algos)
                + f"): {html.escape(why)}</li>" for key, why in inert.items()]
        out.append("</ul>")
    out.append(f"<p><small>credit: the algorithm's own estimator (and the plan it needs); derived: follows "
               f"from those; allowed: compared with consent (--allow-differences: "
               f"{html.escape(str(record.get('consent', 'none')))}).</small></p>")
    return "\n".join(out)


def _cell(v: Any, digits: int = 4) -> str:
    """A number as a table cell: integers as they are, others to ``digits`` decimals, a dash when missing."""
    if v is None:
        return "&ndash;"
    return str(v) if isinstance(v, int) else f"{float(v):.{digits}f}"


def _count(values: dict, metric: str) -> int | None:
    """The number of eval items behind ``eval/<suite>/<name>`` (the domain's ``eval/<suite>/n``), None when it is not
    logged."""
    parts = metric.split("/")
    n = values.get("/".join(parts[:-1] + ["n"])) if len(parts) >= 3 else None
    return int(n) if isinstance(n, (int, float)) and not isinstance(n, bool) else None


def _items(values: dict, metric: str) -> str:
    """`` (48 items, 95% CI [a, b])`` beside an accuracy over items scored 0/1 (Wilson), `` (n items)`` beside
    another metric with a count; nothing without one."""

    n, value = _count(values, metric), values.get(metric)
    if n is None:
        return ""
    ci = wilson_interval(float(value), n) if metric.endswith("accuracy") and isinstance(value, (int, float)) else None
    return f" <small>({n} items{f', 95% CI [{ci[0]:.3f}, {ci[1]:.3f}]' if ci else ''})</small>"


def eval_caption(runs: list[dict], metric: str) -> str:
    """Under an eval curve: which eval set it shows (its item count at each evaluation, and whether the final table
    is on more items)."""
    counts = sorted({n for r in runs for row in r["rows"] if row.get(metric) is not None
                     and (n := _count(row, metric)) is not None})
    finals = sorted({n for r in runs if (n := _count(r["summary"].get("eval_after") or {}, metric)) is not None})
    text = f"{html.escape(metric)} at every evaluation"
    if counts:
        text += f" on {' / '.join(map(str, counts))} eval items"
    if finals and finals != counts:
        text += f"; the results table's final value is on {' / '.join(map(str, finals))} items"
    return f"<p class='caption'><small>{text}</small></p>"


def no_signal_warnings(runs: list[dict]) -> list[str]:
    """A warning per run and decision point whose zero-signal share (``credit/<role>_u<u>/zero_signal_share``) was 1.0
    in every batch that logged it: every group's alternatives scored the same, so that agent got no learning signal;
    and one per run, under any algorithm, naming every agent, when every leaf of every batch got the same reward
    (``train/reward_std`` 0 throughout: no decision point, logged or not, learns anything from the reward)."""
    out = []
    for r in runs:
        shares: dict[str, list[float]] = {}
        for row in r["rows"]:
            for key, value in row.items():
                if key.startswith("credit/") and key.endswith("/zero_signal_share") and isinstance(value, (int, float)):
                    shares.setdefault(key.split("/")[1], []).append(float(value))
        who = f"{r['algorithm']} seed {r['seed']}: " if len(runs) > 1 else ""
        spread = [row["train/reward_std"] for row in r["rows"] if isinstance(row.get("train/reward_std"), (int, float))]
        if spread and max(spread) == 0:
            rewards = sorted({row.get("train/reward_mean") for row in r["rows"]
                              if isinstance(row.get("train/reward_mean"), (int, float))})
            points = f" ({', '.join(sorted(shares))})" if shares else ""
            values = ", ".join(f"{x:g}" for x in rewards[:3])
            out.append(f"{who}no learning signal for any agent{points}: every leaf of all {len(spread)} batches got "
                       f"the same reward ({values}; train/reward_std 0), so no decision point's credit carries a "
                       "signal from the reward")
            continue
        out += [f"{who}no learning signal for {point}: its zero-signal share was 1.0 in all {len(v)} batches (every "
                "group's alternatives got the same return, so its advantages were all zero: no policy-gradient signal)"
                for point, v in shares.items() if v and min(v) >= 1.0]
    return out


def peak(run: dict, key: str) -> float | None:
    """A run's peak memory ``key`` (``peak_rss_gib``, ``peak_gpu_gib``): its ``summary.json``'s, else the largest
    ``memory/<key>`` its batches logged; None when neither has it."""
    value = run["summary"].get(key)
    logged = [r[f"memory/{key}"] for r in run["rows"] if isinstance(r.get(f"memory/{key}"), (int, float))]
    return value if value is not None else max(logged) if logged else None


def run_results(run: dict) -> str:
    """A single run's results as HTML: its headline, the final metrics (every ``eval/*/accuracy``, else
    ``eval/reward_mean``, after training) with what the run spent, and the before/after table training printed
    (the same rows: :func:`c3_plugin.run.report.before_after`)."""
    summary = run["summary"]
    if not summary:
        so_far = [f"{label} so far: {_cell(v, 2)}" for label, path in MEMORY_KEYS
                  if (v := peak(run, path[0])) is not None]
        return ("<p>No summary.json: the run has not finished, so it has no final metrics yet (the curves are "
                "what it logged).</p>" + (f"<p>{'; '.join(so_far)}</p>" if so_far else ""))
    after = summary.get("eval_after", {})
    final = [(html.escape(k), _cell(after.get(k)) + _items(after, k)) for k in eval_metrics(after)]
    spent = [(label, _cell(_lookup(summary, path), 1))
             for label, path in COST_KEYS] + [("updates", _cell(summary.get("updates")))]
    spent += [(label, _cell(v, 2)) for label, path in MEMORY_KEYS if (v := peak(run, path[0])) is not None]
    out = [f"<p>{html.escape(summary_headline(summary))}</p>",
           "<table class='final'><tr><th>final metric</th><th>value</th></tr>"]
    out += [f"<tr><td>{k}</td><td>{v}</td></tr>" for k, v in final + spent]
    out.append("</table><table class='before-after'><tr><th>metric</th><th>before training</th><th>after training</th>"
               "<th>change</th></tr>")
    out += [f"<tr><td>{html.escape(k)}</td><td>{_cell(b)}</td><td>{_cell(a)}</td>"
            f"<td>{'&ndash;' if d is None else f'{d:+.4f}'}</td></tr>" for k, b, a, d in before_after(summary)]
    out.append("</table>")
    if any(k.startswith("eval_anchor/") for k in {**summary.get("eval_before", {}), **after}):
        out.append("<p><small>The before/after evaluations covered more items (final_eval_num_samples) than the ones "
                   "during training: this table is on all of them, the curves follow the first eval_num_samples items "
                   "at every evaluation (summary.json's eval_anchor/* are the curves' end points).</small></p>")
    return "\n".join(out)


def credit_caption(key: str) -> str:
    """Under a credit chart (``credit/<role>_u<u>/<quantity>``): what it plots, for which agent and decision point."""
    _, point, quantity = key.split("/", 2)
    role, _, u = point.rpartition("_u")
    where = f"{role}'s messages at decision point {u}" if role and u.isdigit() else point
    text = CREDIT_DEFINITIONS.get(quantity, "see docs/metrics.md")
    return (f"<p class='caption'><small><b>{html.escape(quantity)}</b> ({html.escape(where, quote=False)}): "
            f"{html.escape(text)}.</small></p>")


def example_trace_section(run: dict) -> str | None:
    """The run's ``example_trace.json`` (written at its first batch, :func:`c3_plugin.core.rollout.credited_path`) as
    HTML: the task, then each message on one root-to-leaf path with its credit, then the leaf's return; None when the
    run folder has none."""
    path = Path(run["path"]) / "example_trace.json"
    if not path.exists():
        return None
    ex = json.loads(path.read_text(encoding="utf-8"))
    out = [f"<p><small>Batch {ex.get('update_step')}, instance {html.escape(str(ex.get('instance')))}, leaf "
           f"{ex.get('leaf')} of the plan's {html.escape(str(ex.get('branching')))}: each message with its credit "
           "(the advantage the algorithm's estimator gave it, before advantage_scaling; &ndash;: not credited, e.g. "
           "feedback).</small></p>",
           f"<p><b>task</b>: <code>{html.escape(str(ex.get('task', '')))}</code></p>",
           "<table class='example-trace'><tr><th>step</th><th>role</th><th>agent</th><th>message</th>"
           "<th>credit (advantage)</th></tr>"]
    for m in ex.get("messages", []):
        credit = "&ndash;" if m.get("advantage") is None else f"{m['advantage']:+.4f}"
        text = html.escape(str(m.get("message", ""))) + (" &hellip;" if m.get("truncated") else "")
        agent = "&ndash;" if m.get("agent") is None else m["agent"]
        out.append(f"<tr><td>{m.get('step')}</td><td>{html.escape(str(m.get('role')))}</td><td>{agent}</td>"
                   f"<td><code>{text}</code></td><td>{credit}</td></tr>")
    out.append(f"</table><p>return (the leaf's reward): {_cell(ex.get('return'))}</p>")
    return "\n".join(out)


STYLE = """body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}h1{font-size:22px}
h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}.grid{display:flex;flex-wrap:wrap;gap:12px}
.grid>div{flex:0 0 auto}table{border-collapse:collapse;margin:10px 0;font-size:13px}td,th{border:1px solid #ccc;
padding:4px 8px;text-align:left}th{background:#f3f3f3}svg{max-width:100%;height:auto}
.warning{background:#fff3cd;border:1px solid #e0b000;padding:6px 10px}
.caption{max-width:520px}"""


def comparison_title(folder: Path, comparison: dict) -> str:
    """The page's title: the algorithms, the seeds the results are over, and the unfinished runs left out of them."""

    missing = comparison.get("missing_runs") or []
    left_out = f" (unfinished, left out of the results: {', '.join(missing)})" if missing else ""
    return (f"Comparison {html.escape(folder.name)}: {', '.join(comparison['algorithms'])}, seeds "
            f"{aggregated_seeds(comparison)}{html.escape(left_out)}")


def write_dashboard(folder: str | Path, out: str | Path | None = None) -> Path:
    """Write ``<folder>/dashboard.html`` (or ``out``) and return its path."""
    folder = Path(folder)
    runs, comparison = load_runs(folder)
    keys = sorted({k for r in runs for row in r["rows"] for k in row})
    eval_keys = eval_metrics(keys)  # every eval/*/accuracy, else eval/reward_mean (any domain)
    credit = [k for k in keys if k.startswith("credit/") and k.rsplit("/", 1)[-1] in CREDIT_KEYS]
    title = comparison_title(folder, comparison) if comparison else f"Run {html.escape(folder.name)}"
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{title}</title><style>{STYLE}</style>"
             f"</head><body><h1>{title}</h1>"]
    parts += [f"<p class='warning'><b>Warning</b>: {html.escape(w)}</p>" for w in no_signal_warnings(runs)]
    if comparison:
        parts += ["<h2>Results</h2>", results_table(comparison)]
        if comparison.get("controlled_comparison"):
            parts += ["<h2>Settings that differ</h2>", differences_section(comparison["controlled_comparison"])]
    else:  # a single run folder
        parts += ["<h2>Results</h2>", run_results(runs[0])]
    charts = [c + eval_caption(runs, k) for k in eval_keys if (c := curves_chart(runs, k, k))]
    parts += ["<h2>Evaluation</h2><div class='grid'>" + "".join(f"<div>{c}</div>" for c in charts) + "</div>"]
    train = [c for k in ("train/reward_mean", "budget/total_tokens_generated", "memory/peak_rss_gib",
                         "memory/peak_gpu_gib") if (c := curves_chart(runs, k, k))]
    parts += ["<h2>Training</h2><div class='grid'>" + "".join(f"<div>{c}</div>" for c in train) + "</div>"]
    costs = cost_chart(runs)
    if costs:
        parts += ["<h2>Costs per run</h2>", costs]
    credit_charts = [c + credit_caption(k) for k in credit if (c := curves_chart(runs, k, k))]
    if credit_charts:
        parts += ["<h2>Credit diagnostics</h2><div class='grid'>" + "".join(f"<div>{c}</div>" for c in credit_charts)
                  + "</div>"]
    example = example_trace_section(runs[0]) if not comparison else None
    if example:
        parts += ["<h2>Example trace with per-message credit</h2>", example]
    target = Path(out) if out else folder / "dashboard.html"
    links = "".join(f"<li><a href='{html.escape(_relative(r['path'], target.parent))}'>{html.escape(r['algorithm'])} "
                    f"seed {r['seed']}</a></li>" for r in runs)
    parts += [f"<h2>Runs</h2><ul>{links}</ul></body></html>"]
    target.write_text("\n".join(parts), encoding="utf-8")
    return target


def _relative(path: Path, start: Path) -> str:
    import os

    return os.path.relpath(path.resolve(), start.resolve()) + "/"
