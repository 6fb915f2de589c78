"""``c3 audit``: which message lost the run? Counterfactual credit for every message of recorded runs.

A recorded run is one root-to-leaf path of a training batch's trace (``traces.jsonl``, written
with ``save_traces: true``). Because the trace is the whole state (checked by
:func:`~c3_plugin.core.trace.replay_check` first; a run that fails it is refused), every decision point
can be re-entered. At decision point ``u`` of a run, with the policies of the chosen checkpoint:

* ``Q``: the recorded message is kept and the rest of the run re-sampled ``c`` times to the terminal
  reward (at the last decision point the recorded action is re-scored ``c`` times: a stochastic reward
  varies, a deterministic one gives ``Q`` exactly);
* ``V``: ``n`` fresh alternatives are sampled from the recorded context, each continued ``c`` times
  (the diagnostic plan ``diagnostic n u c`` entered at the recorded prefix).

The message's credit is ``Q - V`` with a Welch 95% interval; its verdict is *helped* or *hurt* when the interval
excludes 0, else *no measurable effect*; messages are ranked by how much they lost (most negative credit first). An
interval of zero width, where every Q return and every alternative's mean return agreed, says so (``interval_note``:
"no spread" in the table and the figure).
"""

from __future__ import annotations

import json
import math
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from c3_plugin.core.trace import TraceEntry, read_jsonl, replay_check
from c3_plugin.tools.session import Session, fmt, print_table, seed_all
from c3_plugin.trainers.bridge import progress_bar, stepping

VERDICTS = ("hurt", "no measurable effect", "helped")


@dataclass
class RecordedRun:
    instance: str  # instance id in the trace
    occurrence: int  # which batch holding this instance (0 = the first in the file)
    path: list[TraceEntry]  # root first, leaf last

    @property
    def reward(self) -> float:
        return float(self.path[-1].reward)

    @property
    def key(self) -> str:
        return f"{self.instance}@{self.occurrence}:{self.path[-1].node}"


def trace_files(run_dir: str | Path) -> list[Path]:
    run = Path(run_dir)
    if not run.is_dir():
        raise FileNotFoundError(f"--run {run}: no such folder; give a run folder (output.base_dir/<run name>, the "
                                "folder holding its config.json and metrics.jsonl)")
    files = [run / "traces.jsonl"] if (run / "traces.jsonl").exists() else sorted(run.glob("traces.rank*.jsonl"))
    if not files:
        raise FileNotFoundError(f"{run}: no traces.jsonl; train with save_traces: true in the algorithm "
                                "section to record traces")
    return files


def recorded_runs(entries: Sequence[TraceEntry], num_steps: int) -> list[RecordedRun]:
    """Every complete root-to-leaf path, per occurrence of its instance (a trace file appends batches:
    an instance's entries belong to its latest root above them)."""
    occurrence: dict[str, int] = {}
    nodes: dict[tuple[str, int], dict[int, TraceEntry]] = {}
    for e in entries:
        if e.kind == "instance":
            occurrence[e.instance] = occurrence.get(e.instance, -1) + 1
        key = (e.instance, occurrence.get(e.instance, 0))
        nodes.setdefault(key, {})[e.node] = e
    runs = []
    for (instance, occ), by_node in nodes.items():
        for leaf in by_node.values():
            if leaf.step != num_steps - 1 or leaf.reward is None:
                continue
            path = [leaf]
            while path[-1].parent >= 0 and path[-1].parent in by_node:
                path.append(by_node[path[-1].parent])
            if path[-1].kind == "instance":
                runs.append(RecordedRun(instance, occ, path[::-1]))
    return runs


def select_runs(runs: Sequence[RecordedRun], instance: str | None = None,
                failed: int | None = None) -> list[RecordedRun]:
    """``instance``: its lowest-reward path in its latest batch; ``failed``: the ``failed`` instances whose latest
    batch holds the lowest-reward paths (one path each, in trace order on ties)."""
    latest: dict[str, int] = {}
    for r in runs:
        latest[r.instance] = max(latest.get(r.instance, -1), r.occurrence)
    worst: dict[str, RecordedRun] = {}
    for r in runs:
        if r.occurrence == latest[r.instance] and (r.instance not in worst or r.reward < worst[r.instance].reward):
            worst[r.instance] = r
    if instance is not None:
        if instance not in worst:
            near = ", ".join(sorted(worst)[:8])
            raise KeyError(f"instance {instance!r} has no complete run in the trace; instances include {near}")
        return [worst[instance]]
    ordered = sorted(worst.values(), key=lambda r: r.reward)
    return ordered[: max(1, int(failed or 1))]


def _welch(q: np.ndarray, alt_means: np.ndarray) -> tuple[float, float, float]:
    """``Q - V`` with its Welch 95% interval (a side without spread, such as a deterministic re-score, adds no
    variance)."""
    from scipy.stats import t as student_t

    diff = float(q.mean() - alt_means.mean())
    vq = q.var(ddof=1) / len(q) if len(q) > 1 else 0.0
    vv = alt_means.var(ddof=1) / len(alt_means)
    se2 = vq + vv
    if se2 <= 0:
        return diff, diff, diff
    parts = [(v, m) for v, m in ((vq, len(q)), (vv, len(alt_means))) if v > 0]
    df = se2 ** 2 / sum(v ** 2 / (m - 1) for v, m in parts)
    h = float(student_t.ppf(0.975, df)) * math.sqrt(se2)
    return diff, diff - h, diff + h


def interval_note(message: Mapping[str, Any]) -> str | None:
    """Why a message's ``Q - V`` interval has zero width (``ci_lo == ci_hi``), or None when it has a width. The Welch
    interval is zero wide exactly when neither side spreads: every Q return is the same (or there is one) and every
    alternative has the same mean return. That is what a few samples that all agreed measure, not certainty: a
    deterministic reward re-scored, or a policy that answers alike, gives it; more ``--n`` / ``--c`` may show spread."""
    if message["ci_hi"] > message["ci_lo"]:
        return None
    q, alt = message["q_returns"], message["alternative_means"]
    side = f"all {len(q)} Q returns are {q[0]:g}" if len(q) > 1 else f"the one Q return is {q[0]:g}"
    return (f"no spread: {side} and all {len(alt)} fresh alternatives' mean returns are {alt[0]:g}, so the interval "
            "has zero width (every sample agreed; a larger --n / --c may show spread)")


def text_colour(background: Any) -> str:
    """Black or white, whichever reads better on ``background`` (a matplotlib colour): white where its WCAG relative
    luminance is below 0.179, the luminance at which black and white text have the same contrast ratio."""
    from matplotlib.colors import to_rgb

    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in to_rgb(background)]
    return "white" if 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2] < 0.179 else "black"


def audit(session: Session, runs: Sequence[RecordedRun], n: int = 4, c: int = 4, seed: int = 0,
          progress: bool = True) -> dict[str, Any]:
    """Credit every decision of ``runs`` (see the module doc); returns the report (``progress``: a bar on stderr)."""
    if n < 2 or c < 1:
        raise ValueError(f"--n {n} --c {c}: need n >= 2 alternatives and c >= 1 continuations")
    wf = session.workflow
    entries = [e for r in runs for e in r.path]
    problems = replay_check(entries, wf, session.trainer.tokenizers,
                            getattr(session.trainer.args, "use_chat_template", True))
    if problems:
        raise ValueError("the trace fails the replay check (hidden state), so its decision points cannot be "
                         f"re-entered: {problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1
                                                         else ""))
    k = wf.num_decisions
    items = [{**dict(r.path[0].item or {"question": r.path[0].context}), "id": f"audit-{i}"}
             for i, r in enumerate(runs)]
    top = session.reward_top
    out_runs = [{"instance": r.instance, "occurrence": r.occurrence, "leaf": r.path[-1].node, "reward": r.reward,
                 "question": r.path[0].context, "messages": []} for r in runs]
    # a bar on stderr over the decision points, moving as each decision step of their Q and V rollouts is generated
    bar = progress_bar(k, f"audit ({len(runs)} run{'s' if len(runs) != 1 else ''})", "point", disable=not progress)
    for u, step in enumerate(wf.decision_steps):
        cu = c if u < k - 1 else 1  # the diagnostic plan's continuations (none after the last decision point)
        seed_all(seed, "audit", u)
        # of this point's decision steps: Q generates the k-1-u after it, V k-u
        q_share = (k - 1 - u) / (2 * (k - u) - 1)
        # Q: the recorded message kept and the rest of the run re-sampled c times (c re-scorings at the last decision
        # point)
        q_items = [{**it, "id": f"{it['id']}-q{j}"} for it in items for j in range(c)]
        bar.set_postfix_str(f"u={u} {step.name}: Q", refresh=False)
        with stepping([bar], q_share, k - 1 - u) as tick:
            q_ro = session.collect(q_items, {"tree": [1] * k},
                                   given=[r.path[1:step.index + 2] for r in runs for _ in range(c)], tick=tick)
        # V: n fresh alternatives from the recorded context, each continued cu times
        bar.set_postfix_str(f"u={u} {step.name}: V", refresh=False)
        with stepping([bar], 1 - q_share, k - u) as tick:
            v_ro = session.collect(items, f"diagnostic n={n} u={u} c={cu}",
                                   given=[r.path[1:step.index + 1] for r in runs], tick=tick)
        q_ret = q_ro.rewards.reshape(len(runs), c)
        v_ret = v_ro.rewards.reshape(len(runs), n, -1)
        for i, r in enumerate(runs):
            msg = r.path[step.index + 1]
            alt_means = v_ret[i].mean(-1)
            adv, lo, hi = _welch(q_ret[i], alt_means)
            verdict = VERDICTS[0] if hi < 0 else VERDICTS[2] if lo > 0 else VERDICTS[1]
            alternatives = [e.message for e in v_ro.decision_entries(u)[i * n:(i + 1) * n]]
            best = int(np.argmax(alt_means))
            out_runs[i]["messages"].append({
                "u": u, "role": msg.role, "agent": msg.agent, "node": msg.node, "message": msg.message,
                "q": float(q_ret[i].mean()), "v": float(alt_means.mean()), "advantage": adv, "ci_lo": lo, "ci_hi": hi,
                "success_share": float(np.mean(q_ret[i] >= top - 1e-9)), "verdict": verdict,
                "q_returns": q_ret[i].tolist(), "alternative_means": alt_means.tolist(),
                "alternatives": alternatives, "best_alternative": alternatives[best],
                "best_alternative_mean": float(alt_means[best])})
    bar.close()
    ranking = sorted(((i, j) for i, run in enumerate(out_runs) for j in range(len(run["messages"]))),
                     key=lambda ij: out_runs[ij[0]]["messages"][ij[1]]["advantage"])
    for rank, (i, j) in enumerate(ranking, 1):
        out_runs[i]["messages"][j]["rank"] = rank
        out_runs[i]["messages"][j]["interval_note"] = interval_note(out_runs[i]["messages"][j])
    return {"workflow": wf.name, "decision_points": wf.decision_points(), "n": n, "c": c, "seed": seed,
            "success_threshold": top, "runs": out_runs,
            "ranking": [{"run": i, "instance": out_runs[i]["instance"], **{key: out_runs[i]["messages"][j][key]
                        for key in ("u", "role", "advantage", "ci_lo", "ci_hi", "interval_note", "verdict")}}
                        for i, j in ranking]}


def shorten(text: str, width: int) -> str:
    """One line of at most ``width`` characters ('' for an empty message)."""
    return textwrap.shorten(text.replace("\n", " "), width) or "''"


def print_audit(report: Mapping[str, Any]) -> None:
    print(f"== c3 audit: {report['workflow']}, {len(report['runs'])} run(s), n={report['n']} alternatives x "
          f"c={report['c']} continuations per decision point ==")
    rows = []
    for i, run in enumerate(report["runs"]):
        for m in run["messages"]:
            rows.append({"rank": m["rank"], "run": i, "instance": run["instance"], "reward": run["reward"], "u": m["u"],
                         "role": m["role"], "message": shorten(m["message"], 36),
                         "Q-V": m["advantage"], "ci_lo": m["ci_lo"], "ci_hi": m["ci_hi"],
                         "note": "no spread" if m.get("interval_note") else "", "success": m["success_share"],
                         "verdict": m["verdict"]})
    print_table(sorted(rows, key=lambda r: r["rank"]), ["rank", "run", "instance", "reward", "u", "role", "message",
                                                        "Q-V", "ci_lo", "ci_hi", "note", "success", "verdict"])
    print("rank 1 lost the most: Q - V is the recorded message's value minus its context's value under the policy; "
          "success: share of its continuations that reached the top reward")
    if any(r["note"] for r in rows):
        print("note 'no spread': every Q return and every fresh alternative's mean return agreed, so the interval has "
              "zero width; few samples that agreed, not certainty (interval_note in audit.json; a larger --n / "
              "--c may show spread)")
    hurt = [(run, m) for run in report["runs"] for m in run["messages"] if m["verdict"] == "hurt"]
    for run, m in sorted(hurt, key=lambda rm: rm[1]["rank"]):
        print(f"  #{m['rank']} {run['instance']} {m['role']}: {shorten(m['message'], 48)!r} (Q {m['q']:.2f}); "
              f"best fresh alternative {shorten(m['best_alternative'], 48)!r} (mean return "
              f"{m['best_alternative_mean']:.2f})")


def plot_audit(report: Mapping[str, Any], path: str | Path) -> Path:
    """One row per audited run, one box per message, coloured by its credit Q - V (red lost, green helped), its text
    black or white by the box's luminance (:func:`text_colour`), "no spread" after a zero-width interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    runs = report["runs"]
    k = len(report["decision_points"])
    scale = max([abs(m["advantage"]) for r in runs for m in r["messages"]] + [1e-6])
    norm, cmap = TwoSlopeNorm(0.0, -scale, scale), plt.get_cmap("RdYlGn")
    fig, ax = plt.subplots(figsize=(3.2 * k + 1.5, 1.25 * len(runs) + 0.8))
    for i, run in enumerate(runs):
        y = len(runs) - 1 - i
        ax.text(-0.08, y + 0.4, f"{run['instance']}\nreward {fmt(run['reward'], 2)}", ha="right", va="center",
                fontsize=7, parse_math=False)
        for m in run["messages"]:
            colour = cmap(norm(m["advantage"]))
            ax.add_patch(plt.Rectangle((m["u"], y), 0.94, 0.8, color=colour, ec="0.3"))
            text = shorten(m["message"], 60)
            ax.text(m["u"] + 0.47, y + 0.4, f"{m['role']} (#{m['rank']})\n" + "\n".join(textwrap.wrap(text, 30)[:2])
                    + f"\nQ-V {m['advantage']:+.2f} [{m['ci_lo']:+.2f}, {m['ci_hi']:+.2f}]"
                    + (" no spread" if m.get("interval_note") else ""), ha="center", va="center", fontsize=6,
                    # white on the dark ends; a message's "$" is text, not mathtext
                    color=text_colour(colour), parse_math=False)
    ax.set_xlim(-1.3, k)
    ax.set_ylim(-0.2, len(runs))
    ax.axis("off")
    sm = plt.cm.ScalarMappable(norm=norm, cmap=cmap)
    fig.colorbar(sm, ax=ax, fraction=0.03, label="credit Q - V")
    ax.set_title(f"c3 audit: {report['workflow']} (n={report['n']}, c={report['c']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def audit_run(session: Session, run_dir: str | Path, out_dir: str | Path, instance: str | None = None,
              failed: int | None = None, n: int = 4, c: int = 4, seed: int = 0,
              progress: bool = True) -> dict[str, Any]:
    """Select runs from ``run_dir``'s traces, audit them, write ``audit.json`` and ``audit.png`` to ``out_dir``
    (``progress``: a bar on stderr)."""
    entries = [e for f in trace_files(run_dir) for e in read_jsonl(f)]
    runs = select_runs(recorded_runs(entries, len(session.workflow.steps)), instance, failed)
    report = {"run": str(run_dir), **audit(session, runs, n, c, seed, progress)}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "audit.json").write_text(json.dumps(report, indent=2))
    plot_audit(report, out / "audit.png")
    return report
