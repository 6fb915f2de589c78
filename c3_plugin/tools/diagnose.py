"""``c3 diagnose``: the estimator's reliability, noise and influence at every decision point, without training.

At decision point ``u`` it draws ``groups`` contexts from the current policy (one base run up to
``u``), samples ``n`` alternatives from each and continues every alternative ``c`` times to the
terminal reward: the diagnostic plan ``diagnostic n u c`` (``c = 1`` at the last decision point,
where the alternative's own reward is its return). Per decision point it reports

* split-half reliability (even vs odd continuations, Spearman, over the usable groups) with a 95%
  interval (percentile bootstrap over the groups, so within [-1, 1]) and the count of usable groups;
* the implied reliability ``S / (S + 2N)`` of the additive model, from the signal variance ``S`` (the
  spread of the alternatives' true values: the variance of their c-continuation means minus ``N``) and
  the noise variance ``N = sigma^2 / c`` of a c-continuation mean, with a bootstrap interval;
* observed rollout noise (half the variance of the difference between the even- and odd-half
  advantage vectors) against the law ``sigma^2 n^2 / (B (n-1))`` at ``B = n c / 2``;
* influence ``I(J; Y)``: the Miller-Madow plug-in mutual information (nats) between the alternative
  and the domain's outcome (``Domain.outcome``), with its interval; the zero-signal share.

and, for each diagnosed decision point with continuations against the previous one, the difference of
their reliabilities with a 95% interval (``contrasts``: does the role nearer the answer rank its
alternatives better?).

Work is done in chunks of groups, each seeded by (seed, u, chunk) and appended to ``raw.jsonl`` as
it finishes, so an interrupted diagnosis resumes where it stopped and yields the same numbers.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from c3_plugin.core import credit
from c3_plugin.core.credit_diagnostics import _PAD, decision_groups, leaf_outcomes
from c3_plugin.tools.session import Session, bootstrap_ci, mean_ci, print_table, seed_all
from c3_plugin.trainers.bridge import progress_bar, stepping

RAW = "raw.jsonl"
SETTINGS = "settings.json"
# config sections that change no sample: a resumed diagnosis may differ in them
NOT_SAMPLING = ("output", "wandb", "cluster", "deepspeed")
TABLE_COLS = ("u", "role", "groups", "usable", "split_half", "split_half_lo", "split_half_hi", "implied", "implied_lo",
              "implied_hi", "signal_S", "noise_N", "noise_ratio", "influence", "zero_signal_share")


def parse_decisions(spec: str | Sequence[int], num_decisions: int) -> list[int]:
    """``all`` or comma-separated decision indices, each checked against the workflow."""
    if isinstance(spec, str):
        if spec.strip() == "all":
            return list(range(num_decisions))
        try:
            spec = [int(x) for x in spec.split(",") if x.strip()]
        except ValueError:
            raise ValueError(f"--decisions must be 'all' or comma-separated decision indices, got {spec!r}") from None
    bad = [u for u in spec if not 0 <= u < num_decisions]
    if bad or not spec:
        raise ValueError(f"--decisions {list(spec)}: the workflow's decision points are 0..{num_decisions - 1}")
    return sorted(set(int(u) for u in spec))


def _outcome_key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _collect_chunk(session: Session, u: int, n: int, c: int, first: int, size: int, seed: int,
                   tick: Callable[[], None] | None = None) -> dict[str, Any]:
    """One chunk of ``size`` groups at decision ``u`` (groups ``first..first+size-1``); ``tick`` is called after
    each decision step of its rollout is generated (progress bars)."""
    seed_all(seed, u, first)
    rows = session.train
    items = [{**dict(rows[(first + k) % len(rows)]), "id": f"diagnose-u{u}-g{first + k}"} for k in range(size)]
    started = time.perf_counter()
    ro = session.collect(items, f"diagnostic n={n} u={u} c={c}", tick=tick)
    groups = decision_groups(ro, ro.rewards, u)
    alternatives = ro.decision_entries(u)
    out: dict[str, Any] = {"u": u, "first": first, "groups": groups.tolist(), **ro.budget.totals(),
                           "wall_s": time.perf_counter() - started,
                           "contexts": [e.context for e in alternatives[::n]],  # what each group's alternatives answer
                           "alternatives": [[e.message for e in alternatives[g * n:(g + 1) * n]] for g in range(size)]}
    if session.domain.outcome is not None:
        keys = np.vectorize(_outcome_key, otypes=[object])(leaf_outcomes(ro, session.domain.outcome))
        out["outcomes"] = decision_groups(ro, keys, u, _PAD).tolist()
    return out


def signal_noise(groups: np.ndarray) -> tuple[float, float, float]:
    """(S, N, S / (S + 2N)) of groups ``[G, n, c]``: N the noise of a c-continuation mean, S the spread of the
    alternatives' true values (variance of their c-continuation means minus N)."""
    nn = credit.pooled_return_variance(groups) / groups.shape[-1]
    s = float(np.mean(groups.mean(-1).var(-1, ddof=1))) - nn
    return s, nn, s / (s + 2 * nn) if s + 2 * nn > 0 else float("nan")


def mean_correlation_ci(values: Sequence[float] | np.ndarray, seed: int = 0) -> tuple[float, float, float]:
    """The mean of per-group correlations (each in [-1, 1]) and its percentile bootstrap 95% interval over the groups.
    A resampled mean stays within the values' range, so the interval stays within [-1, 1]; a normal interval (mean
    +- 1.96 standard errors) leaves it near +-1, and a Fisher z interval cannot take the many groups whose Spearman
    correlation over 3 or 4 alternatives is exactly +-1. NaN interval with fewer than 2 values."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if len(v) < 2:
        return (float(v.mean()) if len(v) else float("nan")), float("nan"), float("nan")
    lo, hi = bootstrap_ci(lambda idx: float(v[idx].mean()), len(v), seed=seed)
    return float(v.mean()), lo, hi


def contrast(a: np.ndarray, b: np.ndarray, seed: int = 0, resamples: int = 2000) -> dict[str, float]:
    """Reliability of decision point ``a`` minus that of ``b`` (groups ``[G, n, c]`` each, sampled independently):
    the split-half difference with a Welch normal 95% interval over usable groups, and the implied S/(S+2N)
    difference with a 95% interval from independent bootstrap resamples of each side's groups. Two points are
    separated when the interval of their difference excludes 0 (a stricter test would ask their own intervals
    not to overlap)."""
    out: dict[str, float] = {}
    rho = []
    for side in (a, b):
        r, used = credit.split_half_per_group(side)
        rho.append(r[used])
    if all(len(r) >= 2 for r in rho):
        d = float(rho[0].mean() - rho[1].mean())
        h = 1.96 * math.sqrt(sum(float(r.var(ddof=1)) / len(r) for r in rho))
        out.update(split_half_diff=d, split_half_diff_lo=d - h, split_half_diff_hi=d + h)
    rng = np.random.default_rng(seed)
    diffs = []
    for _ in range(resamples):
        ia, ib = rng.integers(0, len(a), len(a)), rng.integers(0, len(b), len(b))
        diffs.append(signal_noise(a[ia])[2] - signal_noise(b[ib])[2])
    diffs = np.asarray(diffs)
    diffs = diffs[np.isfinite(diffs)]
    out["implied_diff"] = signal_noise(a)[2] - signal_noise(b)[2]
    if len(diffs) >= resamples // 2:
        out["implied_diff_lo"], out["implied_diff_hi"] = (float(x) for x in np.quantile(diffs, [0.025, 0.975]))
    return out


def chunk_groups(chunks: Sequence[Mapping[str, Any]], u: int, groups: int | None = None) -> np.ndarray:
    """The returns ``[G, n, c]`` of decision point ``u`` from collected chunks, in group order (``groups``: only the
    first ones)."""
    mine = sorted((ch for ch in chunks if ch["u"] == u and (groups is None or ch["first"] < groups)),
                  key=lambda ch: ch["first"])
    if not mine:
        raise ValueError(f"no groups collected at decision point {u}")
    return np.concatenate([np.asarray(ch["groups"], dtype=np.float64) for ch in mine])[:groups]


def raw_groups(out_dir: str | Path, u: int, groups: int | None = None) -> np.ndarray:
    """:func:`chunk_groups` of the diagnosis in ``out_dir`` (its ``raw.jsonl``)."""
    chunks = [json.loads(line) for line in (Path(out_dir) / RAW).read_text().splitlines() if line.strip()]
    return chunk_groups(chunks, u, groups)


BOOTSTRAP_RESAMPLES = 200  # replicates of each decision point's statistics kept in diagnose.json (c3 advise's interval)


def resamples(groups: int, seed: int, count: int = BOOTSTRAP_RESAMPLES) -> list[np.ndarray]:
    """``count`` bootstrap resamples of ``groups`` group indices, seeded: the replicates ``c3 advise`` recomputes its
    margin on (its interval from the diagnosis' own sampling noise)."""
    rng = np.random.default_rng(seed + 7919)
    return [rng.integers(0, groups, groups) for _ in range(count)]


def decision_report(groups: np.ndarray, outcomes: np.ndarray | None = None, seed: int = 0) -> dict[str, Any]:
    """Statistics of one decision point from its groups ``[G, n, c]`` (and categorical outcomes of the same shape)."""
    g, n, c = groups.shape
    adv = credit.loo_advantages_batch(groups)
    rep: dict[str, Any] = {"groups": g, "alternatives": n, "continuations": c,
                           "zero_signal_share": credit.zero_signal_share(groups),
                           "within_group_variance": credit.within_group_variance(adv),
                           "reward_mean": float(groups.mean())}
    if c < 2:
        rep["note"] = ("last decision point: each alternative's return is its own reward (c = 1), so no "
                       "split-half or noise law")
        if n >= 2:  # its signal plus the reward's own noise, which c = 1 cannot split (c3 advise)
            def spread(x: np.ndarray) -> float:
                return float(np.mean(np.nanmean(x, -1).var(-1, ddof=1)))

            rep["reward_variance"] = spread(groups)
            rep["bootstrap"] = {"reward_variance": [spread(groups[idx]) for idx in resamples(g, seed)]}
        return rep
    even, odd = groups[..., 0::2], groups[..., 1::2]

    def noise(idx: np.ndarray) -> tuple[float, float]:
        """Observed rollout noise (even vs odd halves) of the groups ``idx`` and the law's at B = n c / 2."""
        s2 = credit.pooled_return_variance(groups[idx])
        obs = credit.observed_noise_variance(credit.loo_advantages_batch(even[idx]),
                                             credit.loo_advantages_batch(odd[idx]))
        return obs, credit.noise_variance(s2, n, n * (c // 2))

    every = np.arange(g)
    signal, noise_n, implied = signal_noise(groups)
    rho, used = credit.split_half_per_group(groups)
    sh, sh_lo, sh_hi = mean_correlation_ci(rho[used], seed=seed + 2)
    rep.update({"return_variance": credit.pooled_return_variance(groups), "signal_S": signal, "noise_N": noise_n,
                "implied": implied, "usable": int(used.sum()), "split_half": sh, "split_half_lo": sh_lo,
                "split_half_hi": sh_hi})
    rep["implied_lo"], rep["implied_hi"] = bootstrap_ci(lambda idx: signal_noise(groups[idx])[2], g, seed=seed)
    draws = [(signal_noise(groups[idx])[0], credit.pooled_return_variance(groups[idx])) for idx in resamples(g, seed)]
    rep["bootstrap"] = {"signal_S": [d[0] for d in draws], "return_variance": [d[1] for d in draws]}
    if c % 2 == 0:
        def ratio(idx: np.ndarray) -> float:
            obs, law = noise(idx)
            return obs / law if law > 0 else float("nan")

        observed, predicted = noise(every)
        rep.update({"noise_observed": observed, "noise_predicted": predicted, "noise_ratio": ratio(every)})
        rep["noise_ratio_lo"], rep["noise_ratio_hi"] = bootstrap_ci(ratio, g, seed=seed + 1)
    if outcomes is not None:
        per_group = [credit.influence([list(alt) for alt in grp]) for grp in outcomes]
        rep["influence"], rep["influence_lo"], rep["influence_hi"] = mean_ci(per_group)
    return rep


def summarize(chunks: Sequence[Mapping[str, Any]], roles: Sequence[str], num_decisions: int,
              seed: int = 0) -> list[dict[str, Any]]:
    """One report row per decision point from the collected chunks."""
    rows = []
    for u in sorted({ch["u"] for ch in chunks}):
        mine = sorted((ch for ch in chunks if ch["u"] == u), key=lambda ch: ch["first"])
        groups = chunk_groups(mine, u)
        outcomes = None
        if all("outcomes" in ch for ch in mine) and groups.shape[-1] >= 2 and u < num_decisions - 1:
            outcomes = np.concatenate([np.asarray(ch["outcomes"], dtype=object) for ch in mine])
        row = {"u": u, "role": roles[u], **decision_report(groups, outcomes, seed=seed + u),
               **{k: int(sum(ch[k] for ch in mine)) for k in ("env_steps", "messages", "tokens_generated")},
               "wall_s": float(sum(ch["wall_s"] for ch in mine))}
        rows.append(row)
    return rows


def adjacent_contrasts(chunks: Sequence[Mapping[str, Any]], num_decisions: int, seed: int = 0) -> list[dict[str, Any]]:
    """:func:`contrast` of every diagnosed decision point that has continuations against the previous such one
    (is the role nearer the answer more reliable?)."""
    points = [u for u in sorted({ch["u"] for ch in chunks}) if u < num_decisions - 1]
    return [{"a": a, "b": b, **contrast(chunk_groups(chunks, a), chunk_groups(chunks, b), seed)}
            for a, b in zip(points[1:], points[:-1])]


def diagnose(session: Session, out_dir: str | Path, groups: int = 60, n: int = 4, c: int = 4, decisions: Any = "all",
             chunk: int = 8, seed: int = 0, progress: bool = True, weights: str = "base") -> dict[str, Any]:
    """Run (or resume) the diagnosis into ``out_dir``; returns the report also written to ``diagnose.json``.
    ``weights`` names the policies the session loaded (recorded, and a resumed diagnosis must match it)."""
    if n < 3:
        raise ValueError(f"--n {n}: split-half reliability ranks alternatives and needs n >= 3")
    if c < 2 or c % 2:
        raise ValueError(f"--c {c}: split-half needs an even number of continuations (>= 2)")
    if groups < 2 or chunk < 1:
        raise ValueError(f"--groups {groups} / --chunk {chunk}: need at least 2 groups and chunks of 1 or more")
    wf = session.workflow
    k = wf.num_decisions
    points = parse_decisions(decisions, k)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = {k: v for k, v in session.cfg.resolved().items() if k not in NOT_SAMPLING}
    settings = {"config": config, "n": n, "c": c, "seed": seed, "chunk": chunk, "weights": weights}
    known = out / SETTINGS
    if known.exists():
        before = json.loads(known.read_text())
        before["config"] = {k: v for k, v in before.get("config", {}).items() if k not in NOT_SAMPLING}
        differ = sorted(key for key in settings if json.dumps(before.get(key), sort_keys=True, default=str)
                        != json.dumps(settings[key], sort_keys=True, default=str))
        if differ:
            raise ValueError(f"{out} holds a diagnosis with different {', '.join(differ)}; give another --out "
                             "or delete the folder to start over")
    else:
        known.write_text(json.dumps(settings, indent=2, default=str))
    raw = out / RAW
    chunks = [json.loads(line) for line in raw.read_text().splitlines() if line.strip()] if raw.exists() else []
    done = {(ch["u"], ch["first"]) for ch in chunks}
    todo = [(u, first) for u in points for first in range(0, groups, chunk) if (u, first) not in done]
    def size(first: int) -> int:
        return min(chunk, groups - first)

    # bars on stderr: every group of the diagnosis, and the groups of the decision point under way, each moving a
    # share of a chunk's groups as each decision step of its rollout is generated
    roles = wf.decision_points()
    with progress_bar(len(points) * groups, "diagnose", "group", disable=not progress,
                      initial=len(points) * groups - sum(size(f) for _, f in todo)) as overall:
        for u in points:
            mine = [f for v, f in todo if v == u]
            if not mine:
                continue
            with progress_bar(groups, f"u={u} {roles[u]}", "group", disable=not progress, leave=False,
                              initial=groups - sum(size(f) for f in mine)) as bar:
                for first in mine:
                    with stepping([overall, bar], size(first), k) as tick:
                        ch = _collect_chunk(session, u, n, 1 if u == k - 1 else c, first, size(first), seed, tick)
                    with raw.open("a", encoding="utf-8") as fh:
                        fh.write(json.dumps(ch) + "\n")
                    chunks.append(ch)
    chunks = [ch for ch in chunks if ch["u"] in points and ch["first"] < groups]
    report = {"workflow": wf.name, "decision_points": wf.decision_points(), "n": n, "c": c, "groups": groups,
              "seed": seed, "model": session.cfg.agent_model.name, "weights": weights, "domain": session.cfg.domain,
              "backend": getattr(session.trainer.args, "generation_backend", "hf"),
              "decisions": summarize(chunks, wf.decision_points(), k, seed),
              "contrasts": adjacent_contrasts(chunks, k, seed)}
    (out / "diagnose.json").write_text(json.dumps(report, indent=2, allow_nan=True))
    plot_depth([report], out / "reliability_by_depth.png")
    return report


def print_report(report: Mapping[str, Any]) -> None:
    print(f"== c3 diagnose: {report['workflow']} ({report['domain']}, {report['model']}), n={report['n']} "
          f"c={report['c']}, {report['groups']} groups per decision point ==")
    print_table(report["decisions"], TABLE_COLS)
    if report.get("contrasts"):
        print("reliability of decision point a minus b [95% CI] (an interval excluding 0 separates them):")
        print_table(report["contrasts"], ("a", "b", "split_half_diff", "split_half_diff_lo", "split_half_diff_hi",
                                          "implied_diff", "implied_diff_lo", "implied_diff_hi"))
    print("split_half: Spearman of even vs odd continuations over usable groups [95% bootstrap CI, within -1..1]; "
          "implied: S/(S+2N); noise_ratio: observed / law at B = nc/2; influence: I(J;Y) in nats (Miller-Madow)")


def plot_depth(reports: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Split-half reliability (filled) and implied S/(S+2N) (hollow, dashed), each with its 95% interval, by decision
    point, one line per report."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def plotted(rep: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        """The report's decision points with a split-half value (the last one, c = 1, has none)."""
        return [r for r in rep["decisions"] if r.get("split_half") is not None
                and math.isfinite(r.get("split_half", float("nan")))]

    fig, ax = plt.subplots(figsize=(7, 4))
    for i, rep in enumerate(reports):
        rows = plotted(rep)
        if not rows:
            continue
        x = [r["u"] + 0.06 * i for r in rows]
        y = [r["split_half"] for r in rows]
        err = [[r["split_half"] - r["split_half_lo"] for r in rows],
               [r["split_half_hi"] - r["split_half"] for r in rows]]
        line = ax.errorbar(x, y, yerr=np.nan_to_num(np.asarray(err)), marker="o", capsize=3,
                           label=f"{rep['workflow']} split-half")
        imp = [r["implied"] for r in rows]
        ierr = [[r["implied"] - r.get("implied_lo", r["implied"]) for r in rows],
                [r.get("implied_hi", r["implied"]) - r["implied"] for r in rows]]
        ax.errorbar([v + 0.03 for v in x], imp, yerr=np.nan_to_num(np.asarray(ierr, dtype=np.float64)), marker="o",
                    mfc="none", ls="--", capsize=2, elinewidth=0.8, color=line[0].get_color(),
                    label=f"{rep['workflow']} implied S/(S+2N)")
    ax.axhline(0, color="0.8", lw=0.8)
    points = sorted({int(r["u"]) for rep in reports for r in plotted(rep)})
    if points:  # a tick at each plotted decision point, integers only (an integer locator falls back to fractions
        ax.set_xticks(points)  # when the view, around a single point, holds fewer than two integers)
        ax.set_xlim(points[0] - 0.5, points[-1] + 0.5)
    ax.set_xlabel("decision point u (0 = opening role)")
    ax.set_ylabel("reliability")
    ax.set_title("Reliability by depth")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no decision point with a split-half value", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)
