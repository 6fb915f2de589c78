"""``c3 compare``: every (algorithm, seed) of one config, run and aggregated with honest statistics.

A comparison lives in one folder (``--out``): one run per (algorithm, seed) under
``<out>/<algorithm>-s<seed>/`` and the aggregate in ``<out>/summary.json`` and ``summary.md``.
Each run is the config with only ``algorithm:`` and ``seed:`` changed (its output folder, W&B
group and job type aside); the runs must share data, evaluation sets and env-step budget, or the
comparison is refused before anything trains. Runs go one after another, each in its own process
(``python -m c3_plugin train``, or under ``--launcher``, e.g. ``torchrun --nproc_per_node 8``). A
run with a ``summary.json`` is finished and never redone; a killed run resumes from its last
checkpoint (``output.resume: auto``), so a killed comparison continues where it stopped.

Aggregation (:mod:`c3_plugin.core.stats`): per suite metric (``--metric`` globs over the ``eval/*`` keys
of the final evaluation; default ``eval/*/accuracy``, the keys of accuracy-like metrics in every domain,
else ``eval/reward_mean``, which every run logs), mean +- std and a 95% t-interval over seeds per
algorithm; per algorithm pair the paired difference by seed with a paired t-test (Wilcoxon signed-rank from 6 seeds),
Holm- corrected across the suite metrics; the area under each eval curve against env steps (its mean
level); and the costs from each run's summary (env steps, messages, tokens, wall time, peak memory).
"""

from __future__ import annotations

import difflib
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from tqdm import tqdm

from c3_plugin.core.config import ConfigError, RunConfig, load_config
from c3_plugin.core.registry import algorithms as registered_algorithms
from c3_plugin.core.registry import resolve, section
from c3_plugin.core.stats import area_under_curve, compare_table, holm, summarize
from c3_plugin.run.budget import expected_budget
from c3_plugin.run.dry_run import DERIVED, STEPS, optimisation_settings, prepare, steps_line
from c3_plugin.run.report import ACCURACY_METRICS, eval_metrics

COSTS = (("env_steps", ("env_steps",)), ("messages", ("totals", "messages")),
         ("tokens", ("totals", "tokens_generated")), ("wall_s", ("wall_s",)), ("peak_rss_gib", ("peak_rss_gib",)),
         ("peak_gpu_gib", ("peak_gpu_gib",)))


def run_name(algorithm: str, seed: int) -> str:
    return f"{algorithm}-s{seed}"


def run_overrides(algorithm: str, seed: int, out: Path, name: str, overrides: Sequence[str]) -> list[str]:
    """The overrides that turn the base config into one run of the comparison."""
    from dataclasses import fields

    extra = [f"algorithm={algorithm}", f"seed={seed}", f"output.base_dir={out}",
             f"output.run_name={run_name(algorithm, seed)}", "output.resume=auto", f"wandb.group={name}",
             f"wandb.job_type={algorithm}"]
    if "seed" in {f.name for f in fields(resolve(algorithm)[0])}:
        extra.append(f"{section(algorithm)}.seed={seed}")  # an algorithm section that names its own seed follows too
    return list(overrides) + extra


def check_algorithm_names(algorithms: Sequence[str]) -> None:
    """Refuse an algorithm name the registry does not know, naming the nearest one, before any config loads."""
    names = registered_algorithms()
    for name in algorithms:
        if name not in names:
            near = difflib.get_close_matches(name, names, n=1, cutoff=0.4)
            hint = f" (did you mean '{near[0]}'?)" if near else ""
            raise ConfigError(f"unknown algorithm '{name}'{hint}; c3 compare --algorithms takes {', '.join(names)}")


def plan(cfg_path: str | Path, algorithms: Sequence[str], seeds: Sequence[int], out: Path,
         overrides: Sequence[str] = ()) -> dict[tuple[str, int], RunConfig]:
    """Every run's config, checked to share data, evaluation sets and budget (:class:`ConfigError` naming the
    difference)."""
    if len(set(algorithms)) < 2 or len(set(seeds)) < 1:
        raise ConfigError("c3 compare needs at least two algorithms and one seed, e.g. --algorithms c3 "
                          "magrpo --seeds 0 1 2")
    check_algorithm_names(algorithms)
    name = out.name
    configs = {(a, s): load_config(cfg_path, run_overrides(a, s, out, name, overrides))
               for s in seeds for a in algorithms}  # seed-major: a stopped comparison holds complete pairs
    check_comparable(configs)
    return configs


def fingerprint(cfg: RunConfig) -> dict[str, Any]:
    """What every run of a comparison must share: data, evaluation sets, workflow and env-step budget."""
    _, workflow, train, evals = prepare(cfg)
    suites: dict[str, int] = {}
    for ds in (evals["datasource"] if evals is not None else []):
        suites[ds] = suites.get(ds, 0) + 1
    return {"train": cfg.raw.get("dataset", {}).get("train"), "train_rows": len(train), "eval_suites": suites,
            "eval_sets": cfg.raw.get("dataset", {}).get("eval"), "domain": cfg.domain, "workflow": workflow.name,
            "model": cfg.agent_model.name,
            "expected_env_steps": expected_budget(cfg, workflow, train)["expected_env_steps"]}


def check_comparable(configs: dict[tuple[str, int], RunConfig]) -> None:
    """One fingerprint per algorithm (the seed only reorders the data) compared across algorithms."""
    firsts = [(a, cfg) for (a, s), cfg in configs.items() if s == min(s2 for a2, s2 in configs if a2 == a)]
    prints = {a: fingerprint(cfg) for a, cfg in tqdm(firsts, desc="compare: checking data and budgets",
                                                     unit="algorithm",
                                                      leave=False)}
    first, *rest = prints
    diffs = []
    for other in rest:
        for key, value in prints[first].items():
            if prints[other][key] != value:
                diffs.append(f"{key}: {first} has {value!r}, {other} has {prints[other][key]!r}")
    if diffs:
        raise ConfigError("these runs would not be comparable: " + "; ".join(diffs) +
                          "; give every algorithm section the same data, evaluation sets and env-step "
                          "budget (plan leaves)")


def settings_listing(cfg: RunConfig, algorithms: Sequence[str] | None = None) -> dict[str, Any]:
    """The dry-run's effective settings of the compared algorithms (every section the config holds when
    ``algorithms`` is None), which differ, and which of those are not credit
    (:func:`c3_plugin.run.dry_run.optimisation_settings`)."""
    _, workflow, train, _ = prepare(cfg)
    return optimisation_settings(cfg, workflow, train, algorithms)


SET_BY_COMPARE = ("algorithm", "seed", "output.run_name", "wandb.job_type")  # what c3 compare itself sets per run


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        return {k: v for key, item in value.items() for k, v in _flat(item, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): value}


def run_differences(configs: dict[tuple[str, int], RunConfig]) -> dict[str, dict[str, Any]]:
    """Settings outside the algorithm sections (agents, workflow, dataset, domain, ...) that differ between the
    algorithms' runs of one seed, less :data:`SET_BY_COMPARE`: ``{"section.field": {algorithm: value}}``."""
    from dataclasses import asdict, is_dataclass

    seed = min(s for _, s in configs)
    flat = {}
    for (a, s), cfg in configs.items():
        if s != seed:
            continue
        resolved = {k: v for k, v in cfg.resolved().items() if k != section(a)}
        resolved[cfg.domain] = asdict(cfg.domain_cfg) if is_dataclass(cfg.domain_cfg) else dict(cfg.domain_cfg or {})
        flat[a] = {k: json.dumps(v, default=str, sort_keys=True) for k, v in _flat(resolved).items()
                   if k not in SET_BY_COMPARE}
    keys = sorted({k for row in flat.values() for k in row})
    return {k: {a: json.loads(row[k]) if k in row else "(absent)" for a, row in flat.items()}
            for k in keys if len({row.get(k) for row in flat.values()}) > 1}


def controlled(configs: dict[tuple[str, int], RunConfig], allow: bool | Sequence[str] | None = None) -> dict[str, Any]:
    """The controlled-comparison check: every effective setting of the compared algorithms other than their credit
    (and the plan it needs) must be equal. Differences in a setting that is the credit of one of the two algorithms
    (its config class's ``credit_fields``), or that follows from such settings (updates per agent), are
    listed and allowed; any other is refused (:class:`ConfigError` naming the keys, the table and both flags) unless
    ``allow`` is True (``--allow-differences``: all) or names it (``--allow-differences KEY ...``). Returns the
    record that goes into ``summary.json``: the differences per algorithm, each one's kind, the consent, and which
    differences are inert (:func:`inert_differences`)."""
    from difflib import get_close_matches

    algorithms = list(dict.fromkeys(a for a, _ in configs))
    listing = settings_listing(next(iter(configs.values())), algorithms)
    table = listing["settings"]
    differences = {k: {a: table[a].get(k, "(absent)") for a in table} for k in listing["differ"]}
    uncontrolled = dict(listing["uncontrolled"])
    for key, per in run_differences(configs).items():
        differences[key] = per
        uncontrolled[key] = ["outside the algorithm sections"]
    named = [] if allow is None or allow is True else list(allow)
    known = sorted({k for row in table.values() for k in row} | set(differences))
    unknown = [k for k in named if k not in known]
    if unknown:
        hints = "; ".join(f"'{k}'" + (f" (did you mean '{m[0]}'?)" if (m := get_close_matches(k, known, 1)) else "")
                          for k in unknown)
        raise ConfigError(f"--allow-differences names no setting of {', '.join(algorithms)}: {hints}")
    allowed = sorted(uncontrolled) if allow is True else sorted(k for k in named if k in uncontrolled)
    refused = sorted(k for k in uncontrolled if k not in allowed)
    kinds = {k: ("refused" if k in refused else "allowed" if k in allowed else "derived" if k in (*DERIVED, STEPS)
                 else "credit")
             for k in differences}
    record = {"algorithms": algorithms, "differences": differences, "kind": kinds, "uncontrolled": uncontrolled,
              "allowed": allowed, "consent": "all" if allow is True else "named" if named else "none",
              "credit_fields": listing["credit_fields"], "ignored": listing["ignored"],
              "optimizer_steps": {a: table[a].get(STEPS) for a in table},
              "optimizer_steps_beside_warmup": listing.get("steps_beside_warmup") or {},
              "inert": inert_differences(differences, listing.get("inert") or {})}
    if refused:
        credit = "; ".join(f"{a}: " + ", ".join(c) for a, c in listing["credit_fields"].items())
        named_pairs = ", ".join(f"{k} (" + ", ".join(uncontrolled[k]) + ")" for k in refused)
        raise ConfigError(
            "c3 compare measures credit only, and these settings differ beyond the credit:\n"
                          + differences_table(record, refused)
            + f"\nrefused: {named_pairs}. The credit that may differ "
            f"is {credit}. Make the settings equal in the config (or with --override), or compare anyway with "
            f"--allow-differences {' '.join(refused)} (these) or a bare --allow-differences (every difference); "
            "the consent is recorded in summary.json and summary.md")
    return record


def inert_differences(differences: dict[str, dict[str, Any]], inert: dict[str, dict[str, str]]) -> dict[str, str]:
    """The differing settings that change nothing under the arms' own settings: each arm either lacks the field or
    does not read it (``inert``: per arm, its config class's declared inert fields and why,
    :func:`c3_plugin.core.registry.inert_fields`), and at least one arm declares it so. ``{setting: why}``."""
    out = {}
    for key, per in differences.items():
        arms = {a: inert.get(a, {}).get(key) for a, v in per.items() if v != "(absent)"}
        if arms and all(arms.values()):
            absent = [a for a, v in per.items() if v == "(absent)"]
            out[key] = "; ".join([f"{a}: {why}" for a, why in arms.items()]
                                 + ([f"{', '.join(absent)}: no such setting"] if absent else []))
    return out


def in_effect(record: dict[str, Any]) -> list[str]:
    """The differing settings that are not inert (:func:`inert_differences`), in the record's order."""
    inert = record.get("inert") or {}
    return [k for k in record["differences"] if k not in inert]


def differences_report(record: dict[str, Any]) -> str:
    """The settings that differ in effect (a table: :func:`differences_table`), then, apart, the ones that differ but
    change nothing under the arms' settings, each with why."""
    inert = record.get("inert") or {}
    text = "In effect:\n\n" + differences_table(record, in_effect(record))
    if inert:
        lines = []
        for key, why in inert.items():
            per = record["differences"][key]
            values = ", ".join(f"{a}: {_cell(per.get(a, '(absent)'))}" for a in record["algorithms"])
            lines.append(f"- {key} ({values}): {why}")
        text += ("\n\nInert under these settings (they differ, but the training does not read them):\n\n"
                 + "\n".join(lines))
    return text


def record_steps_line(record: dict[str, Any]) -> str:
    """Each arm's optimizer steps per agent and what their difference is (:func:`c3_plugin.run.dry_run.steps_line`)."""
    return steps_line(record.get("optimizer_steps") or {}, record.get("optimizer_steps_beside_warmup") or {},
                      STEPS in record["uncontrolled"], STEPS in record["allowed"])


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def differences_table(record: dict[str, Any], keys: Sequence[str] | None = None) -> str:
    """A markdown table of the settings that differ: setting, kind, value per algorithm."""
    algos = record["algorithms"]
    lines = ["| setting | kind | " + " | ".join(algos) + " |", "| --- | --- |" + " --- |" * len(algos)]
    for key in (keys if keys is not None else record["differences"]):
        per = record["differences"][key]
        lines.append(f"| {key} | {record['kind'].get(key, 'refused')} | "
                     + " | ".join(_cell(per.get(a, '(absent)')) for a in algos) + " |")
    return "\n".join(lines)


def execute(cfg_path: str | Path, configs: dict[tuple[str, int], RunConfig], out: Path, overrides: Sequence[str],
            launcher: str | None = None, log=print) -> list[str]:
    """Run what is not finished yet, one after another; returns the names of the runs started. Before each run and
    after the last, :func:`progress_line` shows the comparison's progress on stderr."""
    started = []
    kept = sum((out / run_name(a, s) / "summary.json").exists() for a, s in configs)
    began = time.monotonic()
    for algorithm, seed in configs:
        name = run_name(algorithm, seed)
        if (out / name / "summary.json").exists():
            log(f"[compare] {name}: finished, kept")
            continue
        args = ["train", "--config", str(cfg_path)]
        for item in run_overrides(algorithm, seed, out, out.name, overrides):
            args += ["--override", item]
        prefix = shlex.split(launcher) + ["-m", "c3_plugin"] if launcher else [sys.executable, "-m", "c3_plugin"]
        log(f"[compare] {name}: {'resuming' if (out / name / 'checkpoints').exists() else 'starting'}")
        progress_line(kept + len(started), len(configs), kept, time.monotonic() - began, f"running {name}")
        code = subprocess.call(prefix + args)
        if code != 0:
            raise RuntimeError(f"run {name} failed (exit code {code}); fix it and run the same c3 compare again: "
                               "finished runs are kept and this one resumes from its last checkpoint")
        started.append(name)
    if started:
        progress_line(kept + len(started), len(configs), kept, time.monotonic() - began, "done")
    return started


def progress_line(done: int, total: int, kept: int, elapsed: float, note: str) -> None:
    """A tqdm bar of the comparison's runs, as one line on stderr: ``done`` of ``total`` runs, the time so far and
    left (the rate leaves out the ``kept`` runs, finished before this comparison started), ``note``. A line, not a
    live bar: each run's own process draws its training and evaluation bars below it."""
    print(tqdm.format_meter(done, total, elapsed, prefix="compare", unit="run", postfix=note, initial=kept),
          file=sys.stderr, flush=True)


def _dig(summary: dict, path: Sequence[str]) -> Any:
    for key in path:
        summary = summary.get(key) if isinstance(summary, dict) else None
    return summary


def load_run(folder: Path) -> dict[str, Any]:
    summary = json.loads((folder / "summary.json").read_text())
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {"summary": summary, "rows": rows}


def primary_metrics(final: dict[str, float], patterns: Sequence[str] = ACCURACY_METRICS) -> list[str]:
    """The compared keys: the ``eval/*`` keys matching ``patterns`` (default ``eval/*/accuracy``: domains log
    accuracy-like metrics as ``eval/<datasource>/accuracy``), else ``eval/reward_mean``, which every run logs."""
    return eval_metrics(final, patterns)


def aggregate(out: Path, algorithms: Sequence[str], seeds: Sequence[int],
              patterns: Sequence[str] = ACCURACY_METRICS) -> dict:
    """The comparison's statistics from its finished runs (see the module docstring)."""
    runs = {(a, s): load_run(out / run_name(a, s)) for a in algorithms for s in seeds
            if (out / run_name(a, s) / "summary.json").exists()}
    missing = [run_name(a, s) for a in algorithms for s in seeds if (a, s) not in runs]
    if not runs:
        raise ConfigError(f"no finished run under {out}: run c3 compare with the same arguments first")
    metrics = primary_metrics(next(iter(runs.values()))["summary"]["eval_after"], patterns)
    result: dict[str, Any] = {"algorithms": list(algorithms), "seeds": list(seeds), "missing_runs": missing,
                              "metrics": metrics, "final": {}, "auc": {}, "pairs": {}, "costs": {}}
    for metric in metrics:
        final = {a: {s: float(runs[a, s]["summary"]["eval_after"][metric]) for s in seeds if (a, s) in runs}
                 for a in algorithms}
        # an arm with no finished run: none
        result["final"][metric] = compare_table({a: v for a, v in final.items() if v})
        auc = {}
        for a in algorithms:
            auc[a] = {}
            for s in seeds:
                if (a, s) in runs:
                    # last per step
                    curve = {r["env_step"]: r[metric] for r in runs[a, s]["rows"] if r.get(metric) is not None}
                    steps = sorted(curve)
                    auc[a][s] = area_under_curve(steps, [curve[x] for x in steps])
        result["auc"][metric] = {a: summarize(list(v.values())) for a, v in auc.items() if v}
    pair_names = sorted({p for m in metrics for p in result["final"][m]["pairs"]})
    for pair in pair_names:  # Holm across the suite metrics, per algorithm pair
        raw = {m: result["final"][m]["pairs"][pair].get("p") for m in metrics if pair in result["final"][m]["pairs"]}
        for m, p in holm(raw).items():
            result["final"][m]["pairs"][pair]["p_holm"] = p
    for name, path in COSTS:
        values = {a: [v for s in seeds if (a, s) in runs and (v := _dig(runs[a, s]["summary"], path)) is not None]
                  for a in algorithms}
        if any(values.values()):
            result["costs"][name] = {a: summarize(v) for a, v in values.items() if v}
    return result


def no_interval(summary: dict) -> str | None:
    """``"n/a (1 seed)"`` when a summary (:func:`c3_plugin.core.stats.summarize`, or a paired difference) has no
    interval to show (fewer than 2 values, or bounds that are not finite); None when it has one."""
    import math

    n, ci = int(summary.get("n") or 0), summary.get("ci95") or []
    if n >= 2 and len(ci) == 2 and all(isinstance(c, (int, float)) and math.isfinite(c) for c in ci):
        return None
    return f"n/a ({n} seed{'' if n == 1 else 's'})"


def aggregated_seeds(result: dict) -> list:
    """The seeds of a comparison with at least one finished run (the ones its statistics are over)."""
    missing = set(result.get("missing_runs") or [])
    return [s for s in result["seeds"] if any(run_name(a, s) not in missing for a in result["algorithms"])]


def no_variation(summary: dict) -> str | None:
    """``"no variation over n seeds"`` when every one of n >= 2 values is equal (a zero-width interval claims a
    certainty the seeds do not give); None otherwise."""
    n = int(summary.get("n") or 0)
    flat = summary.get("std") == 0 or (summary.get("min") is not None and summary.get("min") == summary.get("max"))
    return f"no variation over {n} seeds" if n >= 2 and flat else None


FEW_SEEDS = 5  # below this many seeds a quantity that cannot be negative shows its range where its interval is < 0


def _fmt(summary: dict, nonnegative: bool = False) -> str:
    """``mean +- std [95% CI]``; with one value, or every value equal, the words instead of an interval; a quantity
    that cannot be negative (``nonnegative``: wall time, tokens, memory) never shows an interval below 0: its range
    over the seeds when there are few (:data:`FEW_SEEDS`), else the interval cut at 0."""
    mean = summary["mean"]
    if no_interval(summary):
        return f"{mean:.3f}, interval {no_interval(summary)}"
    if no_variation(summary):
        return f"{mean:.3f}, {no_variation(summary)}"
    low, high = summary["ci95"]
    if nonnegative and low < 0:
        if int(summary["n"]) < FEW_SEEDS and summary.get("min") is not None:
            return f"{mean:.3f} +- {summary['std']:.3f}, range [{summary['min']:.3f}, {summary['max']:.3f}]"
        low = 0.0
    return f"{mean:.3f} +- {summary['std']:.3f} [{low:.3f}, {high:.3f}]"


def _p(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def markdown(result: dict) -> str:
    """``summary.md``: the final metrics, the paired tests and the costs as tables."""
    algos = result["algorithms"]
    lines = [f"# Comparison: {', '.join(algos)} over seeds {aggregated_seeds(result)}", ""]
    if result["missing_runs"]:
        lines += [f"Unfinished runs (left out): {', '.join(result['missing_runs'])}", ""]
    lines += ["## Final evaluation (mean +- std [95% CI] over seeds)", "", "| metric | " + " | ".join(algos) + " |",
              "| --- |" + " --- |" * len(algos)]
    for m in result["metrics"]:
        per = result["final"][m]["algorithms"]
        lines.append(f"| {m} | " + " | ".join(_fmt(per[a]) if a in per else "-" for a in algos) + " |")
    lines += ["", "## Paired differences by seed (t-test, Holm-corrected across metrics; Wilcoxon from 6 seeds)", "",
              "| metric | pair | mean diff [95% CI] | p (t) | p (t, Holm) | p (Wilcoxon) | n |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for m in result["metrics"]:
        for pair, c in result["final"][m]["pairs"].items():
            if not c["n"]:
                lines.append(f"| {m} | {pair} | no seeds in common | - | - | - | 0 |")
                continue
            low, high = c["ci95"]
            ci = (f"interval {no_interval(c)}" if no_interval(c) else
                  no_variation({"n": c["n"], "std": c.get("std_diff")}) or f"[{low:+.3f}, {high:+.3f}]")
            lines.append(f"| {m} | {pair} | {c['mean_diff']:+.3f} {ci} | {_p(c.get('p'))} | "
                         f"{_p(c.get('p_holm'))} | {_p((c.get('wilcoxon') or {}).get('p'))} | {c['n']} |")
    lines += ["", "## Area under the eval curve (mean level over env steps)", "",
              "| metric | " + " | ".join(algos) + " |", "| --- |" + " --- |" * len(algos)]
    for m, per in result["auc"].items():
        lines.append(f"| {m} | " + " | ".join(_fmt(per[a]) if a in per else "-" for a in algos) + " |")
    record = result.get("controlled_comparison")
    if record:
        lines += ["", "## Settings that differ", "",
                  "credit: the algorithm's own estimator (and the plan it needs); derived: follows from those; "
                  f"allowed: another difference, compared with consent (--allow-differences: {record['consent']}).", "",
                  differences_report(record), "", record_steps_line(record)]
    lines += ["", "## Costs per run (mean +- std [95% CI], never below 0: the range over few seeds)", "",
              "| cost | " + " | ".join(algos) + " |", "| --- |" + " --- |" * len(algos)]
    for name, per in result["costs"].items():
        lines.append(f"| {name} | " + " | ".join(_fmt(per[a], nonnegative=True) if a in per else "-" for a in algos)
                     + " |")
    return "\n".join(lines) + "\n"


def compare(cfg_path: str | Path, algorithms: Sequence[str], seeds: Sequence[int], out: str | Path,
            overrides: Sequence[str] = (), launcher: str | None = None, patterns: Sequence[str] = ACCURACY_METRICS,
            run: bool = True, log=print, allow_differences: bool | Sequence[str] | None = None) -> dict:
    """Plan (refusing incomparable runs, and runs that differ beyond their credit unless ``allow_differences``
    consents: :func:`controlled`), print the settings that differ, run what is unfinished, aggregate, write
    ``summary.json`` and ``summary.md``; returns the aggregate."""
    out = Path(out)
    configs = plan(cfg_path, algorithms, seeds, out, overrides)
    record = controlled(configs, allow_differences)
    log("[compare] effective settings that differ (credit: the algorithm's own estimator; derived: follows from it):\n"
        + differences_report(record) + f"\n[compare] {record_steps_line(record)}"
        + f"\n[compare] consent to other differences: {record['consent']}"
        + (f" ({', '.join(record['allowed'])})" if record["allowed"] else ""))
    out.mkdir(parents=True, exist_ok=True)
    if run:
        execute(cfg_path, configs, out, overrides, launcher, log)
    result = aggregate(out, algorithms, seeds, patterns)
    result["controlled_comparison"] = record
    (out / "summary.json").write_text(json.dumps(result, indent=2, default=str))
    text = markdown(result)
    (out / "summary.md").write_text(text)
    log(text)
    return result
